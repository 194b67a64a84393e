"""Sparse MLA decode and its cache writer on a GPU.

Writer: every record it writes is byte-exact with chordrt.mla_reference's quantizer (both formats, RoPE
64 and NoPE, per-tile amax varying over six orders of magnitude), into flat and paged caches; slots of
-1 or outside the cache leave every byte of the cache untouched.
Decode: against an FP64 reference on the dequantized cache over heads 8..128, T 1..1000, topk 64 and
2048, indices drawn from a pool of written records with -1, negative and out-of-range slots mixed in,
duplicates, rows with no valid key (zero output, lse +inf), topk_length and attn_sink on and off, NoPE,
the BF16 cache, tiles scaled by 3.7 / 1e-3 / 250. Every record outside the pool is NaN bytes (0xFF: E4M3
NaN, FP32 NaN scales, BF16 NaN), so a wrong gather shows; out and lse are NaN-poisoned before every call
and must come back fully written. Also: determinism, graph capture + replay, explicit streams, errors.
Skipped unless torch with a CUDA device of compute capability 9.x is available.
"""

from __future__ import annotations

import math
import os

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device visible to torch", allow_module_level=True)

import chordrt  # noqa: E402
from chordrt import mla_reference as ref  # noqa: E402
from chordrt import moe_reference as mr  # noqa: E402
from w4a16_testing import DEV, require_sm90  # noqa: E402

FP8, BF16 = "fp8_ds_mla", "bf16"
# FlashMLA's tolerances: |out - ref| <= OUT_ATOL + OUT_RTOL * |ref| elementwise, both as BF16.
OUT_ATOL, OUT_RTOL = 1e-3, 2 / 128
# LSE: FlashMLA's is 1e-6 + 8.01/65536 relative; the kernel's FP32 sums run in another order (and over
# split top-k partials) than the FP64 reference, which at lse ~ 8 puts a few 1e-6 of relative error in
# reach, so 1e-5 (plus an absolute 1e-5 for lse near 0, e.g. a single key with a logit near 0).
LSE_RTOL, LSE_ATOL = 1e-5, 1e-5
# The elementwise checks hold against the keys as the kernel that ran holds them: exact for the mma.sync
# kernels; each dequantized latent value rounded to F16 once (relative 2^-11) for the wgmma kernel, which
# the heuristics may pick at a multiple of 64 heads (as FlashMLA's tests compare against its own BF16
# keys). The aggregate error against the exact keys stays below these either way:
MAX_REL_ERR, MIN_COSINE = 1e-2, 0.9999
WGMMA_HEADS = 64
WIDE_TILES = (3.7, 1e-3, 250.0, 1.0)  # per-tile magnitudes: scales far from powers of two and each other


@pytest.fixture(scope="module", autouse=True)
def _driver(chord):
    require_sm90(chord, "sparse MLA runs")


def generator(seed):
    g = torch.Generator(device=DEV)
    g.manual_seed(seed)
    return g


def random_kv(rows, rope, seed, tiles=None):
    """bf16 [rows, 512 + rope]: N(0, 1) with each row's 128-value tiles scaled by U(0.5, 2) (so every scale
    is some non-power-of-two), times tiles[t] for tile t when given."""
    g = generator(seed)
    lat = torch.randn((rows, ref.TILES, ref.TILE), generator=g, device=DEV)
    lat *= 0.5 + 1.5 * torch.rand((rows, ref.TILES, 1), generator=g, device=DEV)
    if tiles is not None:
        lat *= torch.tensor(tiles, device=DEV).view(1, ref.TILES, 1)
    rope_part = torch.randn((rows, rope), generator=g, device=DEV)
    return torch.cat([lat.reshape(rows, ref.LATENT_DIMS), rope_part], dim=1).to(torch.bfloat16)


def nan_cache(num_slots, format, rope, page_size=64):
    """uint8 [num_pages, page_size, record] of 0xFF bytes (NaN in every field of either format)."""
    rec = chordrt.mla_cache_record_bytes(format, rope)
    assert num_slots % page_size == 0
    return torch.full((num_slots // page_size, page_size, rec), 0xFF, dtype=torch.uint8, device=DEV)


def records(cache, format, rope):
    return cache.view(-1, chordrt.mla_cache_record_bytes(format, rope))


# ---- the cache writer -----------------------------------------------------------------------------------------


def special_rows(rope):
    """Rows the random ones may miss: all zero (amax 0: scale FLT_MIN), tiny (subnormal E4M3 outputs),
    one huge value per tile (everything else flushes to E4M3 zero or subnormals), exact +-amax."""
    rows = torch.zeros((4, ref.LATENT_DIMS + rope), device=DEV)
    rows[1] = torch.linspace(-3e-38, 3e-38, rows.shape[1], device=DEV)
    rows[2, :] = 1e-3
    rows[2, :: ref.TILE] = 3e4
    rows[3] = torch.linspace(-7.3, 7.3, rows.shape[1], device=DEV)
    return rows.to(torch.bfloat16)


@pytest.mark.parametrize("format", [FP8, BF16])
@pytest.mark.parametrize("rope", [64, 0])
@pytest.mark.parametrize("page_size", [64, 1])
def test_writer_records_are_exact(format, rope, page_size):
    n_rows, num_slots = 300, 1024
    kv = torch.cat([random_kv(n_rows - 8, rope, seed=rope + page_size, tiles=WIDE_TILES), special_rows(rope),
                    random_kv(4, rope, seed=3)])
    g = generator(11 + page_size)
    slots = torch.randperm(num_slots, generator=g, device=DEV)[:n_rows]
    skipped = torch.rand(n_rows, generator=g, device=DEV) < 0.15
    bad = torch.tensor([-1, num_slots, num_slots + 5, 1 << 40, -(1 << 40)], device=DEV)
    slots = torch.where(skipped, bad[torch.randint(0, bad.numel(), (n_rows,), generator=g, device=DEV)], slots)
    cache = torch.randint(0, 256, (num_slots // page_size, page_size, chordrt.mla_cache_record_bytes(format, rope)),
                          generator=g, dtype=torch.uint8, device=DEV)
    before = cache.clone()
    assert chordrt.mla_cache_write(kv, slots, cache, format) is cache
    torch.cuda.synchronize()
    want = ref.records_of(kv, format)
    written = (slots >= 0) & (slots < num_slots)
    got = records(cache, format, rope)
    rows = torch.nonzero(written).flatten()
    mismatch = (got[slots[rows]] != want[rows]).any(dim=1)
    assert not mismatch.any(), (f"{int(mismatch.sum())} of {rows.numel()} records differ from the reference; "
                                f"first: kv row {int(rows[mismatch][0])}")
    # The same record through the paged view: page = slot // page_size, offset = slot % page_size.
    s = int(slots[rows[0]])
    assert torch.equal(cache[s // page_size, s % page_size], want[rows[0]])
    untouched = torch.ones(num_slots, dtype=torch.bool, device=DEV)
    untouched[slots[rows]] = False
    assert torch.equal(got[untouched], records(before, format, rope)[untouched]), "a record not written to changed"


def test_writer_scales_are_the_tile_amax_over_448():
    kv = random_kv(64, 64, seed=5, tiles=WIDE_TILES)
    cache = torch.zeros((64, 656), dtype=torch.uint8, device=DEV)
    chordrt.mla_cache_write(kv, torch.arange(64, device=DEV), cache)
    scales = cache[:, 512:528].contiguous().view(torch.float32)
    amax = kv[:, :512].float().view(64, 4, 128).abs().amax(dim=-1)
    assert torch.equal(scales, amax / torch.full_like(amax, 448.0))
    # RoPE is carried as it is.
    assert torch.equal(cache[:, 528:].contiguous().view(torch.bfloat16), kv[:, 512:])
    # Tiles 3.7 / 1e-3 / 250 apart, each decoded within E4M3's half ulp: 2^-4 relative in the normal range,
    # 2^-10 * scale among the subnormals.
    dec = ref.records_to_fp32(cache, FP8, 64, dtype=torch.float64)[:, :512]
    x = kv[:, :512].double()
    bound = torch.maximum(x.abs() * 2**-4, scales.double().repeat_interleave(128, dim=1) * 2**-10)
    assert ((dec - x).abs() <= bound * (1 + 1e-6)).all()


def test_writer_zero_tokens_writes_nothing():
    cache = torch.full((4, 656), 7, dtype=torch.uint8, device=DEV)
    kv = torch.empty((0, 576), dtype=torch.bfloat16, device=DEV)
    chordrt.mla_cache_write(kv, torch.empty(0, dtype=torch.int64, device=DEV), cache)
    torch.cuda.synchronize()
    assert (cache == 7).all()


def raises_invalid(fn, *names):
    with pytest.raises(chordrt.ChordError) as excinfo:
        fn()
    e = excinfo.value
    assert e.status == chordrt.Status.INVALID_ARGUMENT, repr(e)
    for name in names:
        assert name in e.message, (name, e.message)
    return e.message


def test_writer_rejects_bad_arguments():
    kv = random_kv(8, 64, seed=1)
    slots = torch.arange(8, device=DEV)
    cache = torch.zeros((8, 656), dtype=torch.uint8, device=DEV)
    raises_invalid(lambda: chordrt.mla_cache_write(kv.float(), slots, cache), "kv", "bfloat16")
    raises_invalid(lambda: chordrt.mla_cache_write(kv[:, :500].contiguous(), slots, cache), "kv", "576")
    raises_invalid(lambda: chordrt.mla_cache_write(kv, slots.int(), cache), "slot_mapping", "int64")
    raises_invalid(lambda: chordrt.mla_cache_write(kv, slots[:7], cache), "slot_mapping", "shape")
    raises_invalid(lambda: chordrt.mla_cache_write(kv, slots, cache[:, :600]), "cache", "contiguous")
    raises_invalid(lambda: chordrt.mla_cache_write(kv, slots, cache, BF16), "cache", "1152-byte")
    raises_invalid(lambda: chordrt.mla_cache_write(kv, slots, cache, "fp4"), "format")
    raises_invalid(lambda: chordrt.mla_cache_write(kv, slots, cache, rope_dims=0), "rope_dims")


# ---- decode: the reference matrix ------------------------------------------------------------------------------


class Problem:
    """One decode's inputs: a cache of NaN records except a pool of written ones, queries and indices."""

    def __init__(self, heads, tokens, topk, seed, format=FP8, rope=64, with_length=False, with_sink=False,
                 tiles=None, empty_rows=True):
        self.format, self.rope, self.heads, self.tokens, self.topk = format, rope, heads, tokens, topk
        g = generator(seed)
        pool = max(topk, min(65536, tokens * topk // 2))
        num_slots = -(-4 * pool // 64) * 64 + 64
        self.cache = nan_cache(num_slots, format, rope)
        self.num_slots = num_slots
        pool_slots = torch.randperm(num_slots, generator=g, device=DEV)[:pool]
        kv = random_kv(pool, rope, seed + 1, tiles)
        chordrt.mla_cache_write(kv, pool_slots, self.cache, format)
        q_lat = torch.randn((tokens, heads, ref.TILES, ref.TILE), generator=g, device=DEV)
        if tiles is not None:  # keep the logits O(1): q's tile t scaled by 1 / tiles[t]
            q_lat /= torch.tensor(tiles, device=DEV).view(1, 1, ref.TILES, 1)
        q_rope = torch.randn((tokens, heads, rope), generator=g, device=DEV)
        self.q = torch.cat([q_lat.reshape(tokens, heads, ref.LATENT_DIMS), q_rope], dim=2).to(torch.bfloat16)
        self.scale = 1.0 / math.sqrt(ref.LATENT_DIMS + rope)
        idx = pool_slots[torch.randint(0, pool, (tokens, topk), generator=g, device=DEV)]  # duplicates happen
        u = torch.rand((tokens, topk), generator=g, device=DEV)
        oob = torch.tensor([num_slots, num_slots + 1, 2**31 - 1, -7, -(2**31)], device=DEV)
        idx = torch.where(u < 0.10, torch.full_like(idx, -1), idx)
        idx = torch.where((u >= 0.10) & (u < 0.13), oob[torch.randint(0, 5, idx.shape, generator=g, device=DEV)], idx)
        if empty_rows and tokens >= 3:
            idx[1] = -1
            idx[-1, : topk // 2] = num_slots + 3  # no valid key either: out of range, then -1
            idx[-1, topk // 2 :] = -1
        self.indices = idx.to(torch.int32).contiguous()
        self.topk_length = None
        if with_length:
            length = torch.randint(0, topk + 1, (tokens,), generator=g, device=DEV)
            length[0] = topk
            if tokens > 2:
                length[2] = 0  # no key at all
            self.topk_length = length.to(torch.int32)
        self.attn_sink = torch.randn(heads, generator=g, device=DEV) + 1.0 if with_sink else None

    def run(self, stream=None, **kw):
        out = torch.full((self.tokens, self.heads, 512), float("nan"), dtype=torch.bfloat16, device=DEV)
        lse = torch.full((self.tokens, self.heads), float("nan"), dtype=torch.float32, device=DEV)
        if stream is not None:  # the poison (and the inputs) on torch's current stream come first
            waiter = stream if isinstance(stream, torch.cuda.Stream) else torch.cuda.ExternalStream(stream)
            waiter.wait_stream(torch.cuda.current_stream())
            kw["stream"] = stream
        res = chordrt.sparse_mla_decode(self.q, self.cache, self.indices, self.scale, format=self.format,
                                        topk_length=self.topk_length, attn_sink=self.attn_sink, out=out, lse=lse,
                                        **kw)
        assert res[0] is out and res[1] is lse
        return out, lse

    def reference(self, latent_f16=False):
        """(out, lse) in FP64 over the exact keys, or with their latent values rounded to F16 (latent_f16)."""
        kv = ref.records_to_fp32(self.cache, self.format, self.rope, dtype=torch.float64, latent_f16=latent_f16)
        return ref.sparse_mla_reference(self.q, kv, self.indices, self.scale, self.topk_length, self.attn_sink)

    def check(self, out, lse, label, tiles=None, f16_keys=None):
        """check_decode against the exact keys (f16_keys False), the F16 keys (True), or (None) whichever of
        the two the kernel the heuristics picked holds: the F16 keys are tried where the exact ones fail, at
        a multiple of 64 heads only. The aggregate error is taken against the exact keys."""
        exact = self.reference()
        if f16_keys is None and self.heads % WGMMA_HEADS == 0:
            try:
                return check_decode(out, lse, *exact, label, tiles)
            except (AssertionError, pytest.fail.Exception):
                f16_keys = True
        want = self.reference(latent_f16=True) if f16_keys else exact
        return check_decode(out, lse, *want, label + (" (F16 keys)" if f16_keys else ""), tiles, exact=exact)


def check_decode(out, lse, want_out, want_lse, label, tiles=None, exact=None):
    """Fully written, empty rows exact (0, +inf), then FlashMLA's elementwise tolerances and the stats
    (against `exact`, the reference over exact keys, when given)."""
    assert not torch.isnan(out).any(), f"{label}: out has NaN (unwritten, or a NaN record leaked in)"
    assert not torch.isnan(lse).any(), f"{label}: lse has NaN (unwritten, or a NaN record leaked in)"
    empty = torch.isinf(want_lse)
    got_inf = torch.isinf(lse) & (lse > 0)
    assert torch.equal(got_inf, empty), f"{label}: lse is +inf at {int(got_inf.sum())} (token, head)s, expected " \
                                        f"{int(empty.sum())}"
    assert (out[empty] == 0).all(), f"{label}: a query with no valid key has a nonzero output"
    o, r = out.float(), want_out.to(torch.bfloat16).float()
    if tiles is not None:  # compare each tile relative to its own magnitude
        f = torch.tensor(tiles, device=DEV).repeat_interleave(ref.TILE)
        o, r = o / f, r / f
    excess = (o - r).abs() - (OUT_ATOL + OUT_RTOL * r.abs())
    if (excess > 0).any():
        worst = torch.nonzero(excess == excess.max())[0].tolist()
        pytest.fail(f"{label}: {int((excess > 0).sum())} of {o.numel()} outputs beyond abs {OUT_ATOL} / rel "
                    f"{OUT_RTOL:.4f}; worst at {worst}: got {o[tuple(worst)].item():.6g}, want "
                    f"{r[tuple(worst)].item():.6g}")
    fin = ~empty
    d = (lse[fin].double() - want_lse[fin].double()).abs()
    lim = LSE_ATOL + LSE_RTOL * want_lse[fin].double().abs()
    assert (d <= lim).all(), f"{label}: lse off by up to {d.max().item():.3g} ({int((d > lim).sum())} beyond)"
    stats = mr.error_stats(torch, out[fin].float(), (want_out if exact is None else exact[0])[fin])
    lse_rel = (d / want_lse[fin].double().abs().clamp(min=1e-30)).max().item() if d.numel() else 0.0
    print(f"{label}: rel_err {stats['rel_err']:.3e} cosine {stats['cosine']:.7f} max_abs {stats['max_abs']:.3e} "
          f"lse max rel {lse_rel:.2e}")
    if fin.any():
        assert stats["rel_err"] < MAX_REL_ERR and stats["cosine"] > MIN_COSINE, (label, stats)
    return stats


def decode_matrix():
    shapes = [(h, t, k) for h in (8, 16) for t in (1, 3, 64, 1000) for k in (64, 2048)]
    shapes += [(32, t, k) for t in (1, 64) for k in (64, 2048)]
    shapes += [(64, 1, 2048), (64, 3, 2048), (64, 64, 2048), (64, 64, 64), (64, 1000, 64)]
    shapes += [(128, 1, 2048), (128, 3, 64), (128, 64, 2048), (128, 1000, 2048)]
    shapes += [(24, 3, 2048), (40, 64, 2048), (96, 3, 2048), (96, 64, 64)]  # head counts of no preset
    # topk_length and attn_sink each on in half the points, in all four combinations
    return [pytest.param(h, t, k, i % 2 == 1, (i // 2) % 2 == 1, id=f"h{h}-T{t}-topk{k}" + ("-len" if i % 2 else "") +
                         ("-sink" if (i // 2) % 2 else "")) for i, (h, t, k) in enumerate(shapes)]


@pytest.mark.parametrize("heads, tokens, topk, with_length, with_sink", decode_matrix())
def test_decode_matches_reference(heads, tokens, topk, with_length, with_sink):
    p = Problem(heads, tokens, topk, seed=heads * 7 + tokens * 3 + topk, with_length=with_length,
                with_sink=with_sink)
    out, lse = p.run()
    torch.cuda.synchronize()
    p.check(out, lse, f"fp8 h={heads} T={tokens} topk={topk} len={with_length} sink={with_sink}")


def check_case(heads, tokens, topk, seed, wgmma):
    """One reference case with topk_length and the sink (also run by test_forced_kernels in a child)."""
    p = Problem(heads, tokens, topk, seed=seed, with_length=True, with_sink=True)
    out, lse = p.run()
    torch.cuda.synchronize()
    p.check(out, lse, f"fp8 h={heads} T={tokens} topk={topk} forced", f16_keys=wgmma)


CHILD_CHECK = """
import sys
sys.path.insert(0, {dir!r})
import test_sparse_mla_gpu as t
t.check_case({heads}, {tokens}, {topk}, {seed}, {wgmma})
"""


# Each kernel outside the shapes its heuristic gives it (CHORD_MLA_CONFIG: a fresh process, the
# environment is read once): the wgmma kernel at one token (many splits of one 64-key block, and one
# split of all; at 128 heads also as a cluster pair), lone 64-head CTAs where 128 heads would pair, the
# mma.sync kernel at 64 and 128 heads with fp8 caches.
@pytest.mark.parametrize("heads, tokens, topk, config", [
    (64, 1, 2048, "head_group=64,warps=12,stages=2"),
    (128, 1, 2048, "head_group=64,warps=12,stages=2,splits=1"),
    (128, 1, 2048, "head_group=64,warps=12,stages=2,pair=1"),
    (128, 64, 2048, "head_group=64,warps=12,stages=2,pair=0"),
    (64, 2, 4096, "head_group=64,warps=12,stages=2,splits=64"),
    (128, 64, 2048, "head_group=32,warps=8,stages=2"),
    (64, 3, 2048, "head_group=16,warps=4,stages=2"),
])
def test_forced_kernels(python_runner, tmp_path, heads, tokens, topk, config):
    log = os.environ.get("CHORD_LAUNCH_LOG") or str(tmp_path / "launches.log")
    start = os.path.getsize(log) if os.path.exists(log) else 0
    code = CHILD_CHECK.format(dir=os.path.dirname(os.path.abspath(__file__)), heads=heads, tokens=tokens, topk=topk,
                              seed=heads + tokens, wgmma=config.startswith(f"head_group={WGMMA_HEADS},"))
    python_runner(code, timeout=900, CHORD_MLA_CONFIG=config, CHORD_LAUNCH_LOG=log)
    with open(log) as f:
        f.seek(start)
        launched = [line for line in f.read().splitlines() if "sparse_mla.decode[" in line]
    group = config.split(",")[0]
    assert launched and group in launched[-1], launched


@pytest.mark.parametrize("format", [FP8, BF16])
@pytest.mark.parametrize("heads, tokens, topk", [(8, 3, 2048), (16, 64, 64), (64, 3, 2048), (128, 64, 2048)])
def test_decode_nope(format, heads, tokens, topk):
    p = Problem(heads, tokens, topk, seed=5 + tokens, format=format, rope=0, with_length=True, with_sink=True)
    assert p.q.shape[-1] == 512
    out, lse = p.run()
    torch.cuda.synchronize()
    p.check(out, lse, f"{format} NoPE h={heads} T={tokens} topk={topk}")


@pytest.mark.parametrize("heads, tokens, topk, with_length, with_sink",
                         [(8, 64, 2048, False, False), (16, 3, 64, True, True), (32, 1, 2048, False, True),
                          (64, 64, 2048, True, False), (128, 3, 2048, True, True), (128, 64, 2048, False, True)])
def test_decode_bf16_cache(heads, tokens, topk, with_length, with_sink):
    p = Problem(heads, tokens, topk, seed=9 + heads, format=BF16, with_length=with_length, with_sink=with_sink)
    out, lse = p.run()
    torch.cuda.synchronize()
    p.check(out, lse, f"bf16 h={heads} T={tokens} topk={topk}")


@pytest.mark.parametrize("heads, tokens", [(8, 64), (16, 3), (128, 64)])
def test_decode_wide_tile_scales(heads, tokens):
    p = Problem(heads, tokens, 2048, seed=13 + heads, tiles=WIDE_TILES, with_sink=True)
    out, lse = p.run()
    torch.cuda.synchronize()
    p.check(out, lse, f"tiles x{WIDE_TILES} h={heads} T={tokens}", tiles=WIDE_TILES)


def test_decode_without_any_valid_key():
    p = Problem(16, 5, 128, seed=3, with_sink=True)
    p.indices[:] = -1
    p.indices[2, ::2] = p.num_slots  # out of range only
    out, lse = p.run()
    torch.cuda.synchronize()
    assert (out == 0).all()
    assert torch.isinf(lse).all() and (lse > 0).all()


def test_decode_topk_length_zero_and_full():
    p = Problem(8, 4, 256, seed=4, empty_rows=False, with_length=True)
    p.topk_length = torch.tensor([0, 256, 1, 64], dtype=torch.int32, device=DEV)
    out, lse = p.run()
    torch.cuda.synchronize()
    want_out, want_lse = p.reference()
    assert torch.isinf(want_lse[0]).all()
    check_decode(out, lse, want_out, want_lse, "topk_length 0 / full / 1 / 64")


# ---- decode: runtime behaviour ---------------------------------------------------------------------------------


def test_decode_is_deterministic():
    p = Problem(16, 64, 2048, seed=21, with_length=True, with_sink=True)
    a_out, a_lse = p.run()
    b_out, b_lse = p.run()
    torch.cuda.synchronize()
    assert torch.equal(a_out.view(torch.int16), b_out.view(torch.int16))
    assert torch.equal(a_lse.view(torch.int32), b_lse.view(torch.int32))


def test_decode_with_an_explicit_workspace():
    p = Problem(16, 64, 2048, seed=22)
    need = chordrt.sparse_mla_decode_workspace_size(p.tokens, p.heads, p.topk, device=DEV)
    assert need >= 0
    ws = torch.empty(max(need, 16), dtype=torch.uint8, device=DEV)
    out, lse = p.run(workspace=ws)
    auto_out, auto_lse = p.run()
    torch.cuda.synchronize()
    assert torch.equal(out.view(torch.int16), auto_out.view(torch.int16))
    assert torch.equal(lse.view(torch.int32), auto_lse.view(torch.int32))


def test_decode_graph_capture_and_replay():
    p = Problem(16, 32, 2048, seed=23, with_sink=True)
    out = torch.empty((p.tokens, p.heads, 512), dtype=torch.bfloat16, device=DEV)
    lse = torch.empty((p.tokens, p.heads), dtype=torch.float32, device=DEV)
    need = chordrt.sparse_mla_decode_workspace_size(p.tokens, p.heads, p.topk, device=DEV)
    ws = torch.empty(max(need, 16), dtype=torch.uint8, device=DEV)
    stream = torch.cuda.Stream()

    def call():
        chordrt.sparse_mla_decode(p.q, p.cache, p.indices, p.scale, attn_sink=p.attn_sink, out=out, lse=lse,
                                  workspace=ws)

    with torch.cuda.stream(stream):
        call()  # compiles and loads outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        call()
    for seed in (1, 2):  # new queries and indices in place: the replay reads them from the device
        other = Problem(16, 32, 2048, seed=100 + seed, with_sink=True)
        assert other.cache.shape == p.cache.shape
        p.q.copy_(other.q)
        p.cache.copy_(other.cache)
        p.indices.copy_(other.indices)
        p.attn_sink.copy_(other.attn_sink)
        out.fill_(float("nan"))
        lse.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        p.check(out, lse, f"graph replay {seed}")


def test_decode_on_an_explicit_stream():
    p = Problem(8, 16, 2048, seed=24)
    want_out, want_lse = p.reference()
    stream = torch.cuda.Stream()
    for s in (stream, stream.cuda_stream):  # a torch stream, then the raw CUstream
        out, lse = p.run(stream=s)
        stream.synchronize()
        check_decode(out, lse, want_out, want_lse, f"stream {type(s).__name__}")


def test_decode_rejects_bad_arguments():
    p = Problem(16, 4, 128, seed=25)
    decode = chordrt.sparse_mla_decode

    def q_heads(h):
        return torch.randn((4, h, 576), device=DEV).to(torch.bfloat16)

    raises_invalid(lambda: decode(q_heads(12), p.cache, p.indices, p.scale), "num_heads")
    raises_invalid(lambda: decode(q_heads(136), p.cache, p.indices, p.scale), "num_heads")
    raises_invalid(lambda: decode(p.q, p.cache, p.indices[:, :100].contiguous(), p.scale), "topk")
    raises_invalid(lambda: decode(p.q.float(), p.cache, p.indices, p.scale), "q", "bfloat16")
    raises_invalid(lambda: decode(p.q[:, :, :500].contiguous(), p.cache, p.indices, p.scale), "q")
    raises_invalid(lambda: decode(p.q, p.cache, p.indices.long(), p.scale), "indices", "int32")
    raises_invalid(lambda: decode(p.q, p.cache, p.indices[:3].contiguous(), p.scale), "indices")
    raises_invalid(lambda: decode(p.q, p.cache, p.indices, p.scale, attn_sink=torch.zeros(16, device=DEV,
                                                                                           dtype=torch.bfloat16)),
                   "attn_sink", "float32")
    raises_invalid(lambda: decode(p.q, p.cache, p.indices, p.scale, topk_length=torch.zeros(3, device=DEV,
                                                                                             dtype=torch.int32)),
                   "topk_length")
    raises_invalid(lambda: decode(p.q, p.cache, p.indices, p.scale, out=torch.empty((4, 16, 512), device=DEV)),
                   "out", "bfloat16")
    raises_invalid(lambda: decode(p.q, p.cache, p.indices, p.scale, format=BF16), "cache", "1152-byte")
    raises_invalid(lambda: decode(p.q, p.cache, p.indices, "0.1"), "softmax_scale")
    # A workspace smaller than needed (at a size whose heuristic splits the top-k).
    for tokens, heads in ((1, 8), (1, 16), (4, 16), (32, 8), (64, 16)):
        need = chordrt.sparse_mla_decode_workspace_size(tokens, heads, 2048, device=DEV)
        if need > 16:
            break
    else:
        pytest.skip("no probed size splits the top-k (workspace size 0 everywhere)")
    s = Problem(heads, tokens, 2048, seed=26)
    raises_invalid(lambda: s.run(workspace=torch.empty(need - 16, dtype=torch.uint8, device=DEV)), "workspace")
