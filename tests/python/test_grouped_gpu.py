"""W4A16 grouped MoE GEMMs (contiguous prefill, masked decode) on a GPU against an FP32 reference.

Fresh random checkpoint weights (int32 [E, N, K/8] nibbles + BF16 scales [E, N, K/32]) and BF16
activations; the reference dequantizes ((nibble - 8) * scale) and multiplies in float32 on the GPU (TF32
off), one expert at a time. Every output is poisoned with NaN before the run: rows the call must write
are checked finite and close to the reference (relative Frobenius error and cosine), all other rows
must still be NaN. Activation rows the call must skip are NaN too, so a skipped row that leaks into
computed ones shows. Shapes: the Kimi K2 expert projections (gate_up N=4096 K=7168, down N=7168 K=2048)
with EP8/16/32's 48/24/12 local experts, and small odd shapes. Skipped unless torch with a CUDA device
of compute capability 9.x (the family's wgmma kernels are sm_90a) is available.
"""

from __future__ import annotations

import ctypes
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device visible to torch", allow_module_level=True)

import chordrt  # noqa: E402
from chordrt import W4a16Layout  # noqa: E402
from chordrt import moe_reference as mr  # noqa: E402
from w4a16_testing import (  # noqa: E402
    DEV, MAX_REL_ERR, MIN_COSINE, activations, check, checkpoint_weight, dequantized, exact_fp32, nan_out, require_sm90)

ROW_ALIGN = 128  # contiguous: each expert's rows padded to a multiple of this
# name -> (N, K); experts per GPU for Kimi K2's 384 at EP8 / EP16 / EP32
KIMI = {"gate_up": (4096, 7168), "down": (7168, 2048)}
KIMI_EXPERTS = (48, 24, 12)
SMALL = {"small": (256, 512, 3), "odd": (384, 640, 5), "k576": (256, 576, 2)}  # (N, K, E); k576: contiguous only
# The weight layout each GEMM reads (also how these tests name the two GEMMs).
CONTIGUOUS = W4a16Layout.WGMMA_K64
MASKED = W4a16Layout.WGMMA_K128


@pytest.fixture(scope="module", autouse=True)
def _driver(chord):
    require_sm90(chord, "the grouped GEMMs are")


# ---- data ---------------------------------------------------------------------------------------------


_sources = {}  # (N, K, E, seed) -> (words, scale); Kimi shapes are generated once with 48 experts
_packed = {}  # (N, K, E, seed, layout) -> W4a16PackedWeight


def source(n, k, e, seed=0):
    if (n, k) in KIMI.values() and e <= 48:
        key = (n, k, 48, seed)
        if key not in _sources:
            _sources[key] = checkpoint_weight(48, n, k, seed=seed + n + k)
        words, scale = _sources[key]
        return words[:e], scale[:e]  # leading-dimension slices: still contiguous
    key = (n, k, e, seed)
    if key not in _sources:
        _sources[key] = checkpoint_weight(e, n, k, seed=seed + n + k + e)
    return _sources[key]


def packed(n, k, e, mode, seed=0):
    key = (n, k, e, seed, W4a16Layout(mode))
    if key not in _packed:
        words, scale = source(n, k, e, seed)
        _packed[key] = chordrt.w4a16_pack(words, scale, mode)
    return _packed[key]


# ---- layouts and references ----------------------------------------------------------------------------


def contiguous_ids(counts, order=None, pad=-1):
    """m_indices int32: experts in `order` (default ascending), each with counts[e] rows then padding
    ids up to a multiple of 128 (pad: an int or a function of the padding row's index)."""
    ids = []
    for e in order if order is not None else range(len(counts)):
        c = counts[e]
        ids += [e] * c
        ids += [pad(i) if callable(pad) else pad for i in range(-(-c // ROW_ALIGN) * ROW_ALIGN - c)]
    return torch.tensor(ids, dtype=torch.int32).to(DEV)


def contiguous_rows(m_indices, experts):
    """Boolean [m]: rows the GEMM must compute (an id in [0, E))."""
    return (m_indices >= 0) & (m_indices < experts)


def masked_rows(counts, experts, max_m):
    """Boolean [G*max_m]: the first clamp(counts[g], 0, max_m) rows of each group's block."""
    c = torch.tensor(counts, dtype=torch.int64).clamp(0, max_m)
    return (torch.arange(max_m).unsqueeze(0) < c.unsqueeze(1)).reshape(-1).to(DEV)


def poison_skipped(a, written):
    """a with the rows the GEMM must skip set to NaN (they must neither be written nor leak)."""
    a = a.clone()
    a[~written] = float("nan")
    return a


def reference(a, words, scale, expert_of_row, written):
    """float32 [rows, N]: row r = a[r] @ dequant(W[expert_of_row[r]])^T for written rows, NaN elsewhere."""
    rows, n = a.shape[0], words.shape[1]
    out = torch.full((rows, n), float("nan"), dtype=torch.float32, device=DEV)
    ids = torch.where(written, expert_of_row.to(torch.int64), -1)
    with exact_fp32():
        for e in torch.unique(ids[ids >= 0]).tolist():
            sel = torch.nonzero(ids == e).flatten()
            out[sel] = a[sel].float() @ dequantized(words, scale, e).T
    return out


def run_contiguous(n, k, e, counts, order=None, pad=-1, seed=1, label=None):
    """One contiguous call on poisoned output, checked against the reference; returns (out, inputs)."""
    w = packed(n, k, e, CONTIGUOUS)
    words, scale = source(n, k, e)
    ids = contiguous_ids(counts, order, pad)
    written = contiguous_rows(ids, e)
    a = poison_skipped(activations(ids.numel(), k, seed), written)
    out = chordrt.grouped_contiguous(a, w, ids, out=nan_out(ids.numel(), n))
    torch.cuda.synchronize()
    check(out, reference(a, words, scale, ids, written), written,
          label or f"contiguous N={n} K={k} E={e} counts={counts[:8]}")
    return out, (a, w, ids)


def run_masked(n, k, e, counts, max_m, expected_m, seed=2, three_d=False, label=None):
    w = packed(n, k, e, MASKED)
    words, scale = source(n, k, e)
    written = masked_rows(counts, e, max_m)
    a = poison_skipped(activations(e * max_m, k, seed), written)
    mm = torch.tensor(counts, dtype=torch.int32).to(DEV)
    out = nan_out(e * max_m, n)
    a_in = a.view(e, max_m, k) if three_d else a
    res = chordrt.grouped_masked(a_in, w, mm, expected_m, out=out)
    assert res is out
    torch.cuda.synchronize()
    group = torch.arange(e, device=DEV).repeat_interleave(max_m)
    check(out, reference(a, words, scale, group, written), written,
          label or f"masked N={n} K={k} E={e} max_m={max_m} expected_m={expected_m} counts={counts[:8]}")
    return out, (a_in, w, mm)


# ---- contiguous -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape, counts",
    [
        ("small", [0, 1, 129]),
        ("small", [127, 128, 129]),
        ("small", [1, 0, 0]),
        ("small", [200, 5, 300]),
        ("odd", [3, 0, 130, 256, 64]),
        ("k576", [129, 17]),
    ],
)
def test_contiguous_small_shapes(shape, counts):
    n, k, e = SMALL[shape]
    run_contiguous(n, k, e, counts)


# Rows per expert, cycled over the experts: empty, single, one short of / exactly / one past a block,
# and a few uneven larger ones.
KIMI_COUNTS = (0, 1, 127, 128, 129, 37, 256, 300)


@pytest.mark.parametrize("experts", KIMI_EXPERTS)
@pytest.mark.parametrize("proj", list(KIMI))
def test_contiguous_kimi(proj, experts):
    n, k = KIMI[proj]
    counts = [KIMI_COUNTS[(i + experts) % len(KIMI_COUNTS)] for i in range(experts)]
    run_contiguous(n, k, experts, counts, label=f"contiguous {proj} E={experts}")


def test_contiguous_kimi_equal_aligned_rows():
    """The benchmark's case: every expert the same aligned count (EP8 gate_up, 256 rows each)."""
    n, k = KIMI["gate_up"]
    run_contiguous(n, k, 48, [256] * 48, label="contiguous gate_up E=48 256 rows each")


def test_contiguous_unsorted_experts_and_out_of_range_padding():
    """Experts in any order; padding ids -1, E, large and negative ones are all skipped; a whole block
    of padding (an expert with no rows still given a block) is skipped too."""
    n, k, e = SMALL["odd"]
    ids = contiguous_ids([5, 128, 0, 77, 1], order=[3, 1, 0, 4], pad=lambda i: (-1, e, 1 << 30, -7)[i % 4])
    block_of_padding = torch.full((ROW_ALIGN,), -1, dtype=torch.int32, device=DEV)
    ids = torch.cat([block_of_padding, ids, block_of_padding + 1 + e])  # -1 block first, E block last
    written = contiguous_rows(ids, e)
    words, scale = source(n, k, e)
    a = poison_skipped(activations(ids.numel(), k, 5), written)
    out = chordrt.grouped_contiguous(a, packed(n, k, e, CONTIGUOUS), ids, out=nan_out(ids.numel(), n))
    torch.cuda.synchronize()
    check(out, reference(a, words, scale, ids, written), written, "contiguous unsorted / out-of-range padding")


def test_contiguous_zero_rows():
    n, k, e = SMALL["small"]
    a = torch.empty((0, k), dtype=torch.bfloat16, device=DEV)
    ids = torch.empty((0,), dtype=torch.int32, device=DEV)
    out = chordrt.grouped_contiguous(a, packed(n, k, e, CONTIGUOUS), ids)
    torch.cuda.synchronize()
    assert out.shape == (0, n) and out.dtype == torch.bfloat16


def test_contiguous_allocates_its_output():
    n, k, e = SMALL["small"]
    ids = contiguous_ids([128, 0, 128])
    a = activations(ids.numel(), k, 3)
    out = chordrt.grouped_contiguous(a, packed(n, k, e, CONTIGUOUS), ids)
    torch.cuda.synchronize()
    assert out.shape == (ids.numel(), n) and out.dtype == torch.bfloat16
    words, scale = source(n, k, e)
    written = contiguous_rows(ids, e)  # no padding rows here: every row is written
    check(out, reference(a, words, scale, ids, written), written, "contiguous, allocated output")


# ---- masked ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape, counts, max_m, expected_m",
    [
        ("small", [0, 1, 128], 128, 1),
        ("small", [5, 200, -3], 128, 8),  # clamped to [0, max_m]
        ("small", [17, 64, 3], 256, 64),  # max_m larger than any count
        ("small", [64, 0, 33], 64, 200),  # expected_m above max_m
        ("small", [8, 1, 0], 8, 8),
        ("small", [50, 49, 7], 50, 8),  # max_m not a multiple of 8
        ("odd", [0, 0, 0, 0, 0], 16, 1),  # nothing to compute
        ("odd", [300, 1, 96, 95, 97], 96, 64),
    ],
)
def test_masked_small_shapes(shape, counts, max_m, expected_m):
    n, k, e = SMALL[shape]
    run_masked(n, k, e, counts, max_m, expected_m)


# Tokens per expert, cycled over the experts: empty, single, full, above max_m (clamped), uneven.
KIMI_MASKED_COUNTS = (0, 1, 128, 200, 17, 64, 5, 100)
KIMI_MASKED_CASES = [(proj, 48, x) for proj in KIMI for x in (1, 8, 64, 200)] + [
    ("gate_up", 24, 16), ("gate_up", 12, 64), ("down", 24, 8), ("down", 12, 32)]


@pytest.mark.parametrize("proj, experts, expected_m", KIMI_MASKED_CASES)
def test_masked_kimi(proj, experts, expected_m):
    n, k = KIMI[proj]
    counts = [KIMI_MASKED_COUNTS[(i + expected_m) % len(KIMI_MASKED_COUNTS)] for i in range(experts)]
    run_masked(n, k, experts, counts, 128, expected_m, label=f"masked {proj} E={experts} expected_m={expected_m}")


@pytest.mark.parametrize("proj", list(KIMI))
def test_masked_kimi_decode_batch(proj):
    """The benchmark's case: every expert the same small count (EP8, 16 tokens each, max_m 128)."""
    n, k = KIMI[proj]
    run_masked(n, k, 48, [16] * 48, 128, 16, label=f"masked {proj} E=48 16 tokens each")


@pytest.mark.parametrize("shape", ["small", "kimi_down_12"])
def test_masked_three_dimensional_input(shape):
    n, k, e = SMALL["small"] if shape == "small" else (*KIMI["down"], 12)
    counts = [(7 * i) % 70 for i in range(e)]
    out, _ = run_masked(n, k, e, counts, 64, 32, three_d=True, label=f"masked 3-D a ({shape})")
    assert out.shape == (e * 64, n)


def test_masked_three_dimensional_output():
    n, k, e = SMALL["small"]
    w = packed(n, k, e, MASKED)
    a = activations(e * 32, k, 9).view(e, 32, k)
    mm = torch.tensor([32, 3, 0], dtype=torch.int32, device=DEV)
    out3 = torch.full((e, 32, n), float("nan"), dtype=torch.bfloat16, device=DEV)
    assert chordrt.grouped_masked(a, w, mm, 16, out=out3) is out3
    flat = chordrt.grouped_masked(a, w, mm, 16, out=nan_out(e * 32, n))
    torch.cuda.synchronize()
    assert torch.equal(out3.reshape(-1, n).view(torch.int16), flat.view(torch.int16))


def test_masked_graph_replay_follows_the_device_counts():
    """The counts are read on the device only: a captured call replays with whatever masked_m holds."""
    n, k, e = SMALL["odd"]
    max_m = 64
    w = packed(n, k, e, MASKED)
    words, scale = source(n, k, e)
    a = activations(e * max_m, k, 4)
    mm = torch.tensor([1, 2, 3, 4, 5], dtype=torch.int32, device=DEV)
    out = nan_out(e * max_m, n)
    stream = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(stream):
        chordrt.grouped_masked(a, w, mm, 8, out=out)  # loads the kernel outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        chordrt.grouped_masked(a, w, mm, 8, out=out)
    group = torch.arange(e, device=DEV).repeat_interleave(max_m)
    for counts in ([0, 64, 10, 1, 33], [64, 64, 64, 64, 64], [0, 0, 0, 0, 2]):
        out.fill_(float("nan"))
        mm.copy_(torch.tensor(counts, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        written = masked_rows(counts, e, max_m)
        check(out, reference(a, words, scale, group, written), written, f"masked graph replay counts={counts}")


# ---- streams, determinism ----------------------------------------------------------------------------


def test_calls_run_on_the_given_or_current_stream():
    n, k, e = SMALL["small"]
    ids = contiguous_ids([100, 28, 128])
    written = contiguous_rows(ids, e)
    a = activations(ids.numel(), k, 6)
    words, scale = source(n, k, e)
    ref = reference(a, words, scale, ids, written)
    side = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(side):  # torch's current stream
        out = chordrt.grouped_contiguous(a, packed(n, k, e, CONTIGUOUS), ids, out=nan_out(ids.numel(), n))
    side.synchronize()
    check(out, ref, written, "contiguous on torch's current (side) stream")
    out2 = nan_out(ids.numel(), n)
    torch.cuda.synchronize()
    chordrt.grouped_contiguous(a, packed(n, k, e, CONTIGUOUS), ids, out=out2, stream=side)  # explicit stream
    side.synchronize()
    check(out2, ref, written, "contiguous on an explicit stream")


@pytest.mark.parametrize("mode", [CONTIGUOUS, MASKED])
def test_deterministic_across_runs(mode):
    n, k = KIMI["down"]
    e = 12
    if mode == CONTIGUOUS:
        first, (a, w, ids) = run_contiguous(n, k, e, [KIMI_COUNTS[i % 8] for i in range(e)], seed=11)
        second = chordrt.grouped_contiguous(a, w, ids, out=nan_out(a.shape[0], n))
    else:
        first, (a, w, mm) = run_masked(n, k, e, [KIMI_MASKED_COUNTS[i % 8] for i in range(e)], 128, 64, seed=11)
        second = chordrt.grouped_masked(a, w, mm, 64, out=nan_out(a.shape[0], n))
    torch.cuda.synchronize()
    assert torch.equal(first.view(torch.int16), second.view(torch.int16)), "two runs differ"


# ---- packing and argument checks --------------------------------------------------------------------------


def test_weight_sizes_and_packed_weight():
    n, k, e = SMALL["small"]
    for mode in (CONTIGUOUS, MASKED):
        pb, sb = chordrt.w4a16_weight_sizes(mode, e, n, k)
        assert pb >= e * n * k // 2 and sb >= e * n * (k // 32) * 2, (mode, pb, sb)
        w = packed(n, k, e, mode)
        assert isinstance(w, chordrt.W4a16PackedWeight)
        assert (w.layout, w.num_experts, w.n, w.k) == (mode, e, n, k)
        assert w.packed.dtype == torch.uint8 and w.packed.numel() >= pb
        assert w.scale.dtype == torch.bfloat16 and 2 * w.scale.numel() >= sb
        assert w.struct.packed == w.packed.data_ptr() and w.struct.scale == w.scale.data_ptr()
        assert w.struct.struct_size == ctypes.sizeof(chordrt.W4a16Weight)


def test_pack_into_caller_buffers():
    n, k, e = SMALL["small"]
    words, scale = source(n, k, e)
    pb, sb = chordrt.w4a16_weight_sizes("wgmma_k128", e, n, k)
    buf = torch.empty(pb, dtype=torch.uint8, device=DEV)
    sbuf = torch.empty(sb // 2, dtype=torch.bfloat16, device=DEV)
    w = chordrt.w4a16_pack(words, scale, "wgmma_k128", packed=buf, scale=sbuf)
    assert w.packed is buf and w.scale is sbuf
    reference_w = packed(n, k, e, MASKED)
    torch.cuda.synchronize()
    assert torch.equal(buf, reference_w.packed[:pb]) and torch.equal(sbuf.view(torch.int16),
                                                                     reference_w.scale[: sb // 2].view(torch.int16))
    with pytest.raises(chordrt.ChordError, match="packed"):
        chordrt.w4a16_pack(words, scale, "wgmma_k128", packed=buf[: pb - 16])


@pytest.mark.parametrize("packed_for, call", [(CONTIGUOUS, "masked"), (MASKED, "contiguous"),
                                              (W4a16Layout.MMA, "contiguous"), (W4a16Layout.MMA, "masked")])
def test_layout_mismatch_is_rejected(packed_for, call):
    n, k, e = SMALL["small"]
    w = packed(n, k, e, packed_for)
    a = activations(e * 128, k, 1)
    ids = contiguous_ids([128] * e)
    mm = torch.full((e,), 128, dtype=torch.int32, device=DEV)
    out = nan_out(e * 128, n)
    stream = torch.cuda.current_stream().cuda_stream
    if call == "masked":
        torch_call = lambda: chordrt.grouped_masked(a, w, mm, 64, out=out)  # noqa: E731
        raw_call = lambda: chordrt.grouped_masked(  # noqa: E731
            a.data_ptr(), w, mm.data_ptr(), 64, out.data_ptr(), stream, max_m=128)
    else:
        torch_call = lambda: chordrt.grouped_contiguous(a, w, ids, out=out)  # noqa: E731
        raw_call = lambda: chordrt.grouped_contiguous(  # noqa: E731
            a.data_ptr(), w, ids.data_ptr(), out.data_ptr(), stream, m=e * 128)
    for what, fn in (("binding", torch_call), ("library", raw_call)):
        with pytest.raises(chordrt.ChordError) as excinfo:
            fn()
        err = excinfo.value
        print(f"{what}: {err}")
        assert err.status is chordrt.Status.INVALID_ARGUMENT, (what, err)
        needs = "WGMMA_K128" if call == "masked" else "WGMMA_K64"
        assert f"weight has layout {packed_for.name};" in err.message and needs in err.message, (what, err.message)
    torch.cuda.synchronize()
    assert torch.isnan(out.float()).all(), "a rejected call wrote its output"


def test_edited_weight_struct_is_rejected():
    """The tag binds the struct's fields: a copy with another n (or pointer) is not a packed weight."""
    n, k, e = SMALL["small"]
    w = packed(n, k, e, CONTIGUOUS)
    ids = contiguous_ids([128] * e)
    a = activations(ids.numel(), k, 1)
    out = nan_out(ids.numel(), n)
    for field, value in (("n", n - 128), ("num_experts", e - 1), ("scale", w.struct.scale + 256)):
        forged = chordrt.W4a16Weight.from_buffer_copy(w.struct)
        setattr(forged, field, value)
        with pytest.raises(chordrt.ChordError) as excinfo:
            chordrt.grouped_contiguous(a.data_ptr(), forged, ids.data_ptr(), out.data_ptr(),
                                       torch.cuda.current_stream().cuda_stream, m=ids.numel())
        assert excinfo.value.status is chordrt.Status.INVALID_ARGUMENT, (field, excinfo.value)
        print(f"{field}: {excinfo.value}")


@pytest.mark.parametrize(
    "scheme",
    [dict(bits=8), dict(bits=2), dict(group_size=64), dict(group_size=128), dict(symmetric=False),
     dict(scale_is_bf16=False)],
)
@pytest.mark.parametrize("mode", [CONTIGUOUS, MASKED])
def test_unsupported_schemes_are_rejected(mode, scheme):
    n, k, e = SMALL["small"]
    words, scale = source(n, k, e)
    with pytest.raises(chordrt.ChordError) as excinfo:
        chordrt.w4a16_pack(words, scale, mode, **scheme)
    err = excinfo.value
    print(err)
    assert err.status is chordrt.Status.UNSUPPORTED, err
    assert err.message


@pytest.mark.parametrize(
    "mode, n, k, words",
    [
        (CONTIGUOUS, 200, 512, ["128", "200"]),  # N not a multiple of 128
        (MASKED, 192, 512, ["128", "192"]),
        (CONTIGUOUS, 256, 96, ["64", "96"]),  # K a multiple of the group (32), not of BLOCK_K
        (MASKED, 256, 576, ["128", "576"]),  # a multiple of 64 serves contiguous only
        (MASKED, 256, 64, ["128"]),
    ],
)
def test_bad_shapes_are_rejected(mode, n, k, words):
    w, s = checkpoint_weight(2, n, k, seed=3)
    with pytest.raises(chordrt.ChordError) as excinfo:
        chordrt.w4a16_pack(w, s, mode)
    err = excinfo.value
    print(err)
    assert err.status is chordrt.Status.INVALID_ARGUMENT, err
    for word in words:
        assert word in err.message, (word, err.message)


def test_binding_checks_tensors():
    """Dtypes, shapes and devices, checked in the binding before any call."""
    n, k, e = SMALL["small"]
    words, scale = source(n, k, e)
    cw, mw = packed(n, k, e, CONTIGUOUS), packed(n, k, e, MASKED)
    ids = contiguous_ids([128] * e)
    a = activations(ids.numel(), k, 1)
    mm = torch.full((e,), 7, dtype=torch.int32, device=DEV)
    cases = [
        ("weight_packed", lambda: chordrt.w4a16_pack(words.to(torch.int64), scale, CONTIGUOUS)),
        ("weight_scale", lambda: chordrt.w4a16_pack(words, scale.float(), CONTIGUOUS)),
        ("weight_scale", lambda: chordrt.w4a16_pack(words, scale[:, :, :-1].contiguous(), CONTIGUOUS)),
        ("k=", lambda: chordrt.w4a16_pack(words, scale, CONTIGUOUS, k=2 * k)),
        ("a", lambda: chordrt.grouped_contiguous(a.float(), cw, ids)),
        ("a", lambda: chordrt.grouped_contiguous(a[:, : k // 2].contiguous(), cw, ids)),
        ("a", lambda: chordrt.grouped_contiguous(a.t(), cw, ids)),  # not contiguous
        ("m_indices", lambda: chordrt.grouped_contiguous(a, cw, ids.long())),
        ("m_indices", lambda: chordrt.grouped_contiguous(a, cw, ids[:-1])),
        ("m_indices", lambda: chordrt.grouped_contiguous(a, cw, ids.cpu())),
        ("out", lambda: chordrt.grouped_contiguous(a, cw, ids, out=nan_out(ids.numel(), n + 128))),
        ("out", lambda: chordrt.grouped_contiguous(a, cw, ids, out=nan_out(ids.numel(), n).float())),
        ("a must be [G*max_m, K]", lambda: chordrt.grouped_masked(a[:-1], mw, mm, 8)),
        ("a must be [G*max_m, K]", lambda: chordrt.grouped_masked(a.view(e * 2, -1, k), mw, mm, 8)),
        ("max_m", lambda: chordrt.grouped_masked(a, mw, mm, 8, max_m=64)),
        ("masked_m", lambda: chordrt.grouped_masked(a, mw, mm[:-1], 8)),
        ("masked_m", lambda: chordrt.grouped_masked(a, mw, mm.long(), 8)),
        ("expected_m", lambda: chordrt.grouped_masked(a, mw, mm, 8.0)),
        ("out", lambda: chordrt.grouped_masked(a, mw, mm, 8, out=nan_out(ids.numel() - 1, n))),
        ("weight", lambda: chordrt.grouped_masked(a, (mw.packed, mw.scale), mm, 8)),
    ]
    for word, fn in cases:
        with pytest.raises(chordrt.ChordError) as excinfo:
            fn()
        assert excinfo.value.status is chordrt.Status.INVALID_ARGUMENT, (word, excinfo.value)
        assert word in excinfo.value.message, (word, excinfo.value.message)
    with pytest.raises(ValueError):
        chordrt.w4a16_pack(words, scale, 3)
    with pytest.raises(ValueError):
        chordrt.w4a16_pack(words, scale, "contiguous")


def test_library_checks_counts_and_hints():
    n, k, e = SMALL["small"]
    mw = packed(n, k, e, MASKED)
    mm = torch.full((e,), 1, dtype=torch.int32, device=DEV)
    a = activations(e * 16, k, 1)
    for word, fn in (
        ("expected_m", lambda: chordrt.grouped_masked(a, mw, mm, 0)),
        ("expected_m", lambda: chordrt.grouped_masked(a, mw, mm, -4)),
        ("max_m", lambda: chordrt.grouped_masked(a[:0], mw, mm, 8)),
    ):
        with pytest.raises(chordrt.ChordError) as excinfo:
            fn()
        assert excinfo.value.status is chordrt.Status.INVALID_ARGUMENT, (word, excinfo.value)
        assert word in excinfo.value.message, (word, excinfo.value.message)


# ---- CHORD_GROUPED_CONFIG -----------------------------------------------------------------------------

# The runtime reads its environment once per process: each override runs in a fresh interpreter, which
# regenerates the weights from the same seeds (this module's helpers) and compares with the parent's
# default-configuration outputs and with the reference.
OVERRIDE_CHILD = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, {tests!r})
    import torch, chordrt
    import test_grouped_gpu as t
    saved = torch.load({saved!r})
    result = {{}}
    for name, case in saved.items():
        n, k, e, mode = case["n"], case["k"], case["e"], chordrt.W4a16Layout(case["mode"])
        words, scale = t.source(n, k, e)
        w = t.packed(n, k, e, mode)
        a, written = case["a"].to(t.DEV), case["written"].to(t.DEV)
        out = t.nan_out(a.shape[0], n)
        try:
            if mode == chordrt.W4a16Layout.WGMMA_K64:
                ids = case["routing"].to(t.DEV)
                chordrt.grouped_contiguous(a, w, ids, out=out)
                expert_of_row = ids
            else:
                mm = case["routing"].to(t.DEV)
                chordrt.grouped_masked(a, w, mm, case["expected_m"], out=out)
                expert_of_row = torch.arange(e, device=t.DEV).repeat_interleave(a.shape[0] // e)
            torch.cuda.synchronize()
        except chordrt.ChordError as err:
            result[name] = {{"status": int(err.status), "message": err.message}}
            continue
        ref = t.reference(a, words, scale, expert_of_row, written)
        o = out.float()
        result[name] = {{
            "status": 0,
            "untouched_ok": bool(torch.isnan(o[~written]).all().item()) if (~written).any() else True,
            "finite_ok": bool(torch.isfinite(o[written]).all().item()),
            "vs_reference": t.mr.error_stats(torch, o[written], ref[written]),
            "vs_default": t.mr.error_stats(torch, o[written], case["out"].to(t.DEV).float()[written]),
        }}
    print(json.dumps(result))
    """
)


def _override_cases(tmp_path):
    """Default-configuration runs (contiguous and masked, a small and a Kimi shape) saved for the child."""
    cases = {}
    small_n, small_k, small_e = SMALL["small"]
    dn, dk = KIMI["down"]
    for name, (n, k, e, mode, counts) in {
        "contiguous_small": (small_n, small_k, small_e, CONTIGUOUS, [130, 0, 64]),
        "contiguous_down_12": (dn, dk, 12, CONTIGUOUS, [KIMI_COUNTS[i % 8] for i in range(12)]),
        "masked_small": (small_n, small_k, small_e, MASKED, [3, 128, 0]),
        "masked_down_12": (dn, dk, 12, MASKED, [KIMI_MASKED_COUNTS[i % 8] for i in range(12)]),
    }.items():
        if mode == CONTIGUOUS:
            out, (a, _, routing) = run_contiguous(n, k, e, counts, seed=21)
            written, expected_m = contiguous_rows(routing, e), None
        else:
            out, (a, _, routing) = run_masked(n, k, e, counts, 128, 16, seed=21)
            written, expected_m = masked_rows(counts, e, 128), 16
        cases[name] = {"n": n, "k": k, "e": e, "mode": int(mode), "a": a.cpu(), "routing": routing.cpu(),
                       "written": written.cpu(), "out": out.cpu(), "expected_m": expected_m}
    path = tmp_path / "grouped_cases.pt"
    torch.save(cases, path)
    return path


@pytest.fixture(scope="module")
def override_cases(tmp_path_factory):
    return _override_cases(tmp_path_factory.mktemp("grouped_override"))


def _child(python_runner, saved, spec):
    code = OVERRIDE_CHILD.format(tests=str(Path(__file__).resolve().parent), saved=str(saved))
    proc = python_runner(code, timeout=600, CHORD_GROUPED_CONFIG=spec)
    assert proc.result is not None, f"no result from the child:\n{proc.stdout}\n{proc.stderr}"
    return proc.result


# Then the step ring (fragments one k16 step ahead), with one and two slices per consumer, and the single
# ring (one K block of fragments), with four consumers of one slice and two of two.
@pytest.mark.parametrize("spec", ["block_m=64,slices=1,stages=4", "block_m=128,slices=1,stages=3",
                                  "block_m=32,slices=2", "block_m=32,slices=1,stages=4,ring=1",
                                  "block_m=16,slices=2,stages=3,ring=1", "block_m=32,slices=1,stages=4,consumers=4,ring=2",
                                  "block_m=16,slices=2,stages=3,ring=2"])
def test_config_override_gives_the_same_results(python_runner, override_cases, spec):
    result = _child(python_runner, override_cases, spec)
    for name, r in result.items():
        assert r["status"] == 0, (spec, name, r)
        print(f"{spec} {name}: vs reference {r['vs_reference']['rel_err']:.3e} / {r['vs_reference']['cosine']:.6f}, "
              f"vs default {r['vs_default']['rel_err']:.3e} / {r['vs_default']['cosine']:.6f}")
        assert r["untouched_ok"] and r["finite_ok"], (spec, name, r)
        for key in ("vs_reference", "vs_default"):
            assert r[key]["rel_err"] < MAX_REL_ERR and r[key]["cosine"] > MIN_COSINE, (spec, name, key, r[key])


@pytest.mark.parametrize("spec, word", [("block_m=64,bogus=1", "bogus"), ("block_m=12", "block_m"), ("stages", "stages")])
def test_bad_config_override_is_rejected(python_runner, override_cases, spec, word):
    result = _child(python_runner, override_cases, spec)
    for name, r in result.items():
        assert r["status"] == int(chordrt.Status.INVALID_ARGUMENT), (spec, name, r)
        assert "CHORD_GROUPED_CONFIG" in r["message"] and word in r["message"], (spec, name, r["message"])


# ---- stream-K, contiguous and masked (CHORD_GROUPED_CONFIG=stream_k=1 with the call's workspace) ----------

# The override turns stream-K on for every call that brings a workspace (the contiguous heuristics take it
# only for a long last wave, the masked ones not yet). The runtime reads its environment once per process, so
# the forced kernels run in a fresh interpreter: each case against the FP32 reference on poisoned outputs with
# a garbage-filled workspace, twice (bitwise the same); a call without a workspace and short K rejected.
STREAM_K_CHILD = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, {tests!r})
    import torch, chordrt
    import test_grouped_gpu as t
    sms = torch.cuda.get_device_properties(t.DEV).multi_processor_count
    workspace = torch.full((chordrt.grouped_workspace_size(sms),), 0xA5, dtype=torch.uint8, device=t.DEV)
    result = {{}}
    dn, dk = t.KIMI["down"]
    un, uk = t.KIMI["gate_up"]
    dead = torch.full((t.ROW_ALIGN,), -1, dtype=torch.int32, device=t.DEV)

    def with_dead_blocks(ids):  # a block of padding only first and after the first expert's blocks
        first = int((ids == ids[0]).sum().item() + (-(ids == ids[0]).sum().item()) % t.ROW_ALIGN)
        return torch.cat([dead, ids[:first], dead, ids[first:]])

    # On a 132-SM GPU (H100 / H200); tiles of 128 rows x 256 weight rows:
    cases = {{
        # EP32 at 128 rows an expert: 192 tiles, every one in the stream-K wave.
        "gate_up_12x128": (un, uk, 12, t.contiguous_ids([128] * 12)),
        # 11 row blocks x 28 = 308 tiles: 132 whole, then a wave of 176 tiles.
        "down_whole_then_wave": (dn, dk, 12, t.contiguous_ids([128] * 11 + [0])),
        # 3 + 2 + 1 expert blocks and 2 blocks of padding only: 224 tiles in the wave, 56 of them dead.
        "down_dead_blocks": (dn, dk, 3, with_dead_blocks(t.contiguous_ids([300, 129, 1]))),
        # 150 one-tile row blocks of 9 K blocks: ~10 K blocks a CTA, most tiles cut between two CTAs.
        "k576_cut_tiles": (*t.SMALL["k576"][:2], 2, t.contiguous_ids([9600 - 7, 9600 - 121])),
    }}
    # Masked (max_m 128, 128-K blocks), every live block in the schedule, empty groups with none:
    masked_cases = {{
        # Qwen3-235B-A22B EP8 gate_up at 8 tokens: 16 x 12 tiles of 16 x 256, all in the stream-K wave.
        "masked_gate_up_16x8": (3072, 4096, 16, [8] * 14 + [0, 3], 8),
        # Kimi down, uneven counts (0 to 200, clamped to 128): 1-8 blocks a group at block_m 16.
        "masked_down_uneven": (7168, 2048, 12, [0, 1, 128, 200, 17, 64, 5, 100, 0, 33, 9, 16], 8),
    }}
    for name, spec in {{**cases, **masked_cases}}.items():
        if name in masked_cases:
            n, k, e, counts, expected = spec
            w = t.packed(n, k, e, t.MASKED)
            written = t.masked_rows(counts, e, 128)
            expert_of_row = torch.arange(e, device=t.DEV).repeat_interleave(128)
            mm = torch.tensor(counts, dtype=torch.int32, device=t.DEV)
            call = lambda a, out: chordrt.grouped_masked(a, w, mm, expected, out=out, workspace=workspace)
        else:
            n, k, e, expert_of_row = spec
            w = t.packed(n, k, e, t.CONTIGUOUS)
            written = t.contiguous_rows(expert_of_row, e)
            call = lambda a, out: chordrt.grouped_contiguous(a, w, expert_of_row, out=out, workspace=workspace)
        words, scale = t.source(n, k, e)
        rows = written.numel()
        a = t.poison_skipped(t.activations(rows, k, 23), written)
        outs = []
        for _ in range(2):
            out = t.nan_out(rows, n)
            call(a, out)
            torch.cuda.synchronize()
            outs.append(out)
        o = outs[0].float()
        ref = t.reference(a, words, scale, expert_of_row, written)
        result[name] = {{
            "untouched_ok": bool(torch.isnan(o[~written]).all().item()) if (~written).any() else True,
            "finite_ok": bool(torch.isfinite(o[written]).all().item()),
            "bitwise_repeat": bool(torch.equal(outs[0].view(torch.int16), outs[1].view(torch.int16))),
            "vs_reference": t.mr.error_stats(torch, o[written], ref[written]),
        }}
    n, k, e = t.SMALL["k576"]
    ids = t.contiguous_ids([129, 17], None, -1)
    a = t.activations(ids.numel(), k, 3)
    rejected = {{}}
    try:
        chordrt.grouped_contiguous(a, t.packed(n, k, e, t.CONTIGUOUS), ids)
    except chordrt.ChordError as err:
        rejected["no_workspace"] = err.message
    n, k, e = t.SMALL["small"]
    mm = torch.tensor([3, 0, 16], dtype=torch.int32, device=t.DEV)
    try:  # K 512: 4 blocks of 128
        chordrt.grouped_masked(t.activations(e * 16, k, 3), t.packed(n, k, e, t.MASKED), mm, 4, workspace=workspace)
    except chordrt.ChordError as err:
        rejected["masked_short_k"] = err.message
    result["rejected"] = rejected
    print(json.dumps(result))
    """
)


def test_stream_k_matches_the_reference(python_runner):
    code = STREAM_K_CHILD.format(tests=str(Path(__file__).resolve().parent))
    proc = python_runner(code, timeout=600, CHORD_GROUPED_CONFIG="stream_k=1")
    assert proc.result is not None, f"no result from the child:\n{proc.stdout}\n{proc.stderr}"
    rejected = proc.result.pop("rejected")
    assert "stream_k 1 needs the call's workspace" in rejected.get("no_workspace", ""), rejected
    assert "stream_k 1 needs more than 8 K blocks" in rejected.get("masked_short_k", ""), rejected
    for name, r in proc.result.items():
        print(f"stream-K {name}: vs reference {r['vs_reference']['rel_err']:.3e} / {r['vs_reference']['cosine']:.6f}")
        assert r["untouched_ok"] and r["finite_ok"] and r["bitwise_repeat"], (name, r)
        assert r["vs_reference"]["rel_err"] < MAX_REL_ERR and r["vs_reference"]["cosine"] > MIN_COSINE, (name, r)
