"""The DSA indexer on a GPU: key-cache writer (bytes vs a torch reference, exact), logits (vs FP32 on
dequantized q and k), top-k (as sets: the multiset of selected logits equals torch.topk's, every index a
valid position or slot, -1 fill), and the three captured in a CUDA graph.

Fresh random data per case, outputs poisoned (NaN / sentinel) before every call; 32 / 64 (and 128) heads,
pages of 64 and 1, 1 / 3 / 64 queries, contexts of 0, shorter than a page, not a multiple of the page, and
shuffled block tables. Skipped unless torch with a CUDA device is available.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device visible to torch", allow_module_level=True)

import chordrt  # noqa: E402
from chordrt import dsa_reference as dr  # noqa: E402

DEV = torch.device("cuda", torch.cuda.current_device())
# E4M3 wgmma sums each row's products at the tensor cores' reduced alignment precision (~2^-13 of the
# largest term, as in every FP8 wgmma indexer): ~2e-4 relative over 64K-key rows on the H200, up to
# ~1.3e-3 on rows of a few hundred keys. A wrong tile, page, head or scale is an O(1) error.
MAX_REL_ERR = 4e-3
MIN_COSINE = 0.99999
SENTINEL = -7


@pytest.fixture(scope="module", autouse=True)
def _driver(chord):
    info = chord.runtime_info()
    if not info["driver_available"] or info["device_count"] < 1:
        pytest.skip(f"torch sees a GPU but chordrt does not: {info}")


def gen(seed):
    g = torch.Generator(device=DEV)
    g.manual_seed(seed)
    return g


def random_keys(n, g):
    """bf16 [n, 128] with row magnitudes over several decades, a zero row and an outlier."""
    k = torch.randn((n, dr.HEAD_DIM), generator=g, device=DEV) * torch.exp(torch.randn((n, 1), generator=g, device=DEV))
    if n > 2:
        k[0] = 0
        k[1, 5] = 3e4
    return k.to(torch.bfloat16)


def contexts_for(tokens, page_size, g):
    if tokens == 1:
        return [3 * page_size + 13 if page_size > 1 else 777]
    if tokens == 3:
        return [0, 5 * page_size + 17 if page_size > 1 else 331, 1000]
    lens = torch.randint(0, 2000, (tokens,), generator=g, device=DEV).tolist()
    lens[0], lens[1], lens[2] = 0, 1, page_size  # empty, one key, exactly one page
    return lens


def paged_setup(tokens, page_size, lens, g, spare_pages=7):
    """A cache of random keys and a shuffled block table covering every context (+1 unused column)."""
    max_pages = max(1, -(-max(lens) // page_size)) + 1
    num_pages = tokens * max_pages + spare_pages
    table = torch.randperm(num_pages, generator=g, device=DEV)[:tokens * max_pages].reshape(tokens, max_pages)
    table = table.to(torch.int32).contiguous()
    cache = torch.full((num_pages, dr.page_bytes(page_size)), 0xA5, dtype=torch.uint8, device=DEV)
    slots = torch.arange(num_pages * page_size, device=DEV)
    cache = dr.write_cache(torch, random_keys(slots.numel(), g), slots, cache, page_size)
    return cache, table, num_pages


def random_query(tokens, heads, g):
    q = (torch.randn((tokens, heads, dr.HEAD_DIM), generator=g, device=DEV) * 2).to(torch.float8_e4m3fn)
    w = torch.randn((tokens, heads), generator=g, device=DEV) / heads ** 0.5
    return q, w


# ---- key cache writer --------------------------------------------------------------------------------


@pytest.mark.parametrize("page_size", [64, 1, 3])
@pytest.mark.parametrize("tokens", [1, 5, 300])
def test_cache_write_bytes_match_the_reference(page_size, tokens):
    g = gen(1000 * page_size + tokens)
    num_pages = tokens // page_size + 4
    k = random_keys(tokens, g)
    slots = torch.randperm(num_pages * page_size, generator=g, device=DEV)[:tokens].to(torch.int64)
    if tokens > 2:
        slots[-1] = -1  # skipped
        slots[-2] = num_pages * page_size + 3  # past the cache: skipped
    cache = torch.full((num_pages, dr.page_bytes(page_size)), 0x5A, dtype=torch.uint8, device=DEV)
    want = dr.write_cache(torch, k, slots, cache, page_size)
    chordrt.indexer_cache_write(k, slots, cache, page_size)
    torch.cuda.synchronize()
    assert torch.equal(cache, want)


def test_cache_write_zero_tokens_is_a_no_op():
    cache = torch.full((2, dr.page_bytes(64)), 7, dtype=torch.uint8, device=DEV)
    k = torch.empty((0, 128), dtype=torch.bfloat16, device=DEV)
    chordrt.indexer_cache_write(k, torch.empty((0,), dtype=torch.int64, device=DEV), cache, 64)
    torch.cuda.synchronize()
    assert bool((cache == 7).all())


# ---- logits -----------------------------------------------------------------------------------------


def check_logits(q, w, cache, table, lens_t, page_size, max_context):
    logits = torch.full((q.shape[0], max_context), float("nan"), device=DEV)
    chordrt.dsa_indexer_logits(q, w, cache, table, lens_t, page_size, max_context=max_context, logits=logits)
    torch.cuda.synchronize()
    ref = dr.reference_logits(torch, q, w, cache, table, lens_t, page_size, max_context)
    assert not torch.isnan(logits).any(), "unwritten logits"
    finite = torch.isfinite(ref)
    assert torch.equal(torch.isfinite(logits), finite), "-inf where the reference has a value, or the reverse"
    assert bool((logits[~finite] == float("-inf")).all())
    if finite.any():
        stats = dr.error_stats(torch, logits[finite], ref[finite])
        assert stats["rel_err"] < MAX_REL_ERR and stats["cosine"] > MIN_COSINE, stats
    return logits


# Pages of 64 and 16 arrive by tensor copy (one per tile, four per tile), 1 and 100 by cp.async.
@pytest.mark.parametrize("heads", [24, 32, 40, 64, 96])
@pytest.mark.parametrize("page_size", [64, 16, 1, 100])
@pytest.mark.parametrize("tokens", [1, 3, 64])
def test_logits_match_fp32(heads, page_size, tokens):
    g = gen(heads * 1000 + page_size * 10 + tokens)
    lens = contexts_for(tokens, page_size, g)
    cache, table, _ = paged_setup(tokens, page_size, lens, g)
    max_context = -(-table.shape[1] * page_size // 4) * 4
    q, w = random_query(tokens, heads, g)
    lens_t = torch.tensor(lens, dtype=torch.int32, device=DEV)
    check_logits(q, w, cache, table, lens_t, page_size, max_context)


def test_logits_128_heads_and_a_long_context():
    g = gen(128)
    lens = [9000, 77, 16384]
    cache, table, _ = paged_setup(3, 64, lens, g)
    q, w = random_query(3, 128, g)
    check_logits(q, w, cache, table, torch.tensor(lens, dtype=torch.int32, device=DEV), 64, table.shape[1] * 64)


def test_logits_invalid_pages_are_minus_inf_and_never_read():
    g = gen(7)
    lens = [700, 300]
    cache, table, num_pages = paged_setup(2, 64, lens, g)
    table[0, 1] = -1
    table[0, 3] = num_pages + 5  # outside the cache
    table[1, 0] = 2**31 - 1
    q, w = random_query(2, 64, g)
    max_context = table.shape[1] * 64 + 64  # past the table too: -inf, nothing read
    lens_t = torch.tensor([lens[0], max_context], dtype=torch.int32, device=DEV)
    logits = check_logits(q, w, cache, table, lens_t, 64, max_context)
    assert bool((logits[0, 64:128] == float("-inf")).all())
    assert bool((logits[1, :64] == float("-inf")).all())


def test_logits_context_longer_than_the_row_is_clamped():
    g = gen(8)
    cache, table, _ = paged_setup(1, 64, [256], g)
    q, w = random_query(1, 32, g)
    check_logits(q, w, cache, table, torch.tensor([10**6], dtype=torch.int32, device=DEV), 64, 256)


# ---- top-k ------------------------------------------------------------------------------------------


def run_topk(logits, lens_t, topk, table=None, page_size=None):
    indices = torch.full((logits.shape[0], topk), SENTINEL, dtype=torch.int32, device=DEV)
    chordrt.dsa_topk(logits, lens_t, topk, block_table=table, page_size=page_size, indices=indices)
    torch.cuda.synchronize()
    assert not bool((indices == SENTINEL).any()), "unwritten indices"
    return indices


@pytest.mark.parametrize("tokens", [1, 3, 64])
@pytest.mark.parametrize("kind", ["normal", "ties", "constant"])
def test_topk_selects_the_largest(tokens, kind):
    g = gen(tokens * 7 + len(kind))
    width, topk = 65536, 2048
    if kind == "normal":
        logits = torch.randn((tokens, width), generator=g, device=DEV)
    elif kind == "ties":  # 50 distinct values: ~1300 copies of each, the threshold value among them
        logits = torch.randint(0, 50, (tokens, width), generator=g, device=DEV).float()
    else:  # every value in the first digit's bin: more than the shared candidates, the re-reading path
        logits = torch.full((tokens, width), 1.5, device=DEV)
    lens = torch.randint(topk + 1, width + 1, (tokens,), generator=g, device=DEV)
    lens[0] = width
    if tokens > 2:
        lens[1], lens[2] = 0, topk - 5  # nothing; fewer than topk: all of them, then -1
    lens_t = lens.to(torch.int32)
    logits[:, :] = torch.where(torch.arange(width, device=DEV) < lens[:, None], logits, float("nan"))  # never read
    indices = run_topk(logits, lens_t, topk)
    dr.check_topk(torch, indices, torch.nan_to_num(logits, nan=float("-inf")), lens_t, topk)


@pytest.mark.parametrize("topk", [1, 64, 2048, 4096])
def test_topk_sizes_and_short_rows(topk):
    g = gen(topk)
    width = 8192
    logits = torch.randn((5, width), generator=g, device=DEV) * 100
    logits[:, 100:200] = float("-inf")  # invalid pages within the context compete as -inf
    lens_t = torch.tensor([width, 3, topk, topk + 1, 4097], dtype=torch.int32, device=DEV)
    indices = run_topk(logits, lens_t, topk)
    dr.check_topk(torch, indices, logits, lens_t, topk)


@pytest.mark.parametrize("page_size", [64, 1])
def test_topk_converts_positions_to_slots(page_size):
    g = gen(page_size + 99)
    tokens, topk = 3, 2048
    lens = [5000, 1000, 3 * page_size + 7 if page_size > 1 else 2100]
    width = -(-max(lens) // 4) * 4
    max_pages = -(-width // page_size)
    table = torch.randperm(tokens * max_pages + 11, generator=g, device=DEV)[:tokens * max_pages]
    table = table.reshape(tokens, max_pages).to(torch.int32).contiguous()
    logits = torch.randn((tokens, width), generator=g, device=DEV)
    lens_t = torch.tensor(lens, dtype=torch.int32, device=DEV)
    indices = run_topk(logits, lens_t, topk, table, page_size)
    dr.check_topk(torch, indices, logits, lens_t, topk, block_table=table, page_size=page_size)


# ---- graphs -----------------------------------------------------------------------------------------


def test_the_indexer_is_graph_capturable():
    g = gen(2024)
    lens = [3000, 64, 4500]
    cache, table, _ = paged_setup(3, 64, lens, g)
    q, w = random_query(3, 64, g)
    lens_t = torch.tensor(lens, dtype=torch.int32, device=DEV)
    max_context = table.shape[1] * 64
    logits = torch.empty((3, max_context), device=DEV)
    indices = torch.empty((3, 2048), dtype=torch.int32, device=DEV)
    slots = torch.arange(64, dtype=torch.int64, device=DEV)
    k = random_keys(64, g)
    probe = cache.clone()

    def step():
        chordrt.indexer_cache_write(k, slots, probe, 64)
        chordrt.dsa_indexer_logits(q, w, cache, table, lens_t, 64, max_context=max_context, logits=logits)
        chordrt.dsa_topk(logits, lens_t, 2048, block_table=table, page_size=64, indices=indices)

    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        step()  # loads the kernels outside the capture
    torch.cuda.synchronize()
    eager_logits = logits.clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        step()
    logits.fill_(float("nan"))
    indices.fill_(SENTINEL)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(logits, eager_logits)
    dr.check_topk(torch, indices, logits, lens_t, 2048, block_table=table, page_size=64)
    assert torch.equal(probe, dr.write_cache(torch, k, slots, cache, 64))


# ---- the whole sparse attention path ------------------------------------------------------------------


@pytest.mark.parametrize("heads", [8, 16])
def test_indexer_top_k_slots_drive_sparse_mla_decode(heads):
    """Indexer logits -> top-2048 as cache slots -> sparse MLA decode over an fp8_ds_mla cache paged with
    the same block table: the decode matches the FP64 reference over exactly the selected slots, the
    selection matches torch.topk as a set, and short contexts' -1 fill (topk_length) reads nothing."""
    from chordrt import mla_reference as mr

    g = gen(heads + 5)
    page, topk = 64, 2048
    lens = [3000, 700, 2048 + 64 * 5 + 3]
    tokens = len(lens)
    cache, table, num_pages = paged_setup(tokens, page, lens, g)
    q_i, w_i = random_query(tokens, 64, g)
    lens_t = torch.tensor(lens, dtype=torch.int32, device=DEV)
    max_context = table.shape[1] * page
    logits = chordrt.dsa_indexer_logits(q_i, w_i, cache, table, lens_t, page, max_context=max_context)
    slots = chordrt.dsa_topk(logits, lens_t, topk, block_table=table, page_size=page)
    dr.check_topk(torch, slots, logits, lens_t, topk, block_table=table, page_size=page)
    # The latent cache shares the paging: one 656-byte record per slot; slots never selected stay NaN.
    num_slots = num_pages * page
    kv = torch.randn((num_slots, 576), generator=g, device=DEV).to(torch.bfloat16)
    mla_cache = torch.full((num_pages, page, mr.record_bytes("fp8_ds_mla", 64)), 0xFF, dtype=torch.uint8, device=DEV)
    chosen = slots[slots >= 0].unique().long()
    chordrt.mla_cache_write(kv[chosen], chosen, mla_cache.view(num_slots, -1))
    q = torch.randn((tokens, heads, 576), generator=g, device=DEV).to(torch.bfloat16)
    length = lens_t.clamp(max=topk)
    out, lse = chordrt.sparse_mla_decode(q, mla_cache, slots, 576 ** -0.5, topk_length=length)
    want_out, want_lse = mr.sparse_mla_reference(
        q, mr.records_to_fp32(mla_cache.view(num_slots, -1), "fp8_ds_mla", 64), slots, 576 ** -0.5, topk_length=length)
    err = (out.float() - want_out.float()).abs() - (1e-3 + (2 / 128) * want_out.float().abs())
    assert (err <= 0).all(), f"decode over the indexer's slots: worst excess {err.max().item():.3g}"
    assert torch.allclose(lse.double(), want_lse.double(), rtol=1e-5, atol=1e-5)
