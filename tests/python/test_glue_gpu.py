"""The MoE glue operations on a GPU, through the binding's torch interface, against plain references.

Skipped unless torch with a CUDA device is available. Outputs are poisoned before every run and
checked in full, so a result that was not written shows up.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device visible to torch", allow_module_level=True)

import numpy as np  # noqa: E402

import chordrt  # noqa: E402
from conftest import child_env  # noqa: E402

DEV = torch.device("cuda", torch.cuda.current_device())
POISON_INT = -7


@pytest.fixture(scope="module", autouse=True)
def _driver(chord):
    info = chord.runtime_info()
    if not info["driver_available"] or info["device_count"] < 1:
        pytest.skip(f"torch sees a GPU but chordrt does not: {info}")


def _gen(seed):
    g = torch.Generator(device="cpu")
    g.manual_seed(seed)
    return g


# ---- moe_align ----------------------------------------------------------------------------------------


def ref_moe_align(topk_ids: np.ndarray, num_experts: int, block_size: int, capacity: int, blocks_capacity: int, expert_map=None):
    """vLLM's contract, written plainly: route r = t*top_k + j; each expert's routes in ascending r,
    padded to block_size with the sentinel M*top_k; one expert id per block (mapped when a map is
    given); sentinel / -1 tails up to the capacities."""
    flat = topk_ids.reshape(-1).astype(np.int64)
    sentinel = flat.size
    sorted_ids, expert_ids = [], []
    for e in range(num_experts):
        routes = np.nonzero(flat == e)[0]
        if routes.size == 0:
            continue
        padded = -(-routes.size // block_size) * block_size
        sorted_ids.extend(routes.tolist())
        sorted_ids.extend([sentinel] * (padded - routes.size))
        expert_ids.extend([int(expert_map[e]) if expert_map is not None else e] * (padded // block_size))
    total = len(sorted_ids)
    assert total <= capacity
    sorted_full = np.full(capacity, sentinel, dtype=np.int64)
    sorted_full[:total] = sorted_ids
    blocks_full = np.full(blocks_capacity, -1, dtype=np.int64)
    blocks_full[: len(expert_ids)] = expert_ids
    return sorted_full, blocks_full, total


def random_topk(m, top_k, e, gen, hot=None):
    """[m, top_k] int32, distinct experts per token when possible; `hot` gets a route of every token."""
    if top_k <= e:
        ids = torch.rand(m, e, generator=gen).argsort(dim=1)[:, :top_k]
    else:
        ids = torch.randint(0, e, (m, top_k), generator=gen)
    if hot is not None:
        ids[:, 0] = hot
    return ids.to(torch.int32)


def run_align(topk_cpu, e, block, expert_map_cpu=None):
    m, k = topk_cpu.shape
    cap = chordrt.moe_align_sorted_capacity(m, k, e, block)
    blocks = chordrt.moe_align_expert_ids_capacity(m, k, e, block)
    sorted_ids = torch.full((cap,), POISON_INT, dtype=torch.int32, device=DEV)
    expert_ids = torch.full((blocks,), POISON_INT, dtype=torch.int32, device=DEV)
    ntpp = torch.full((1,), POISON_INT, dtype=torch.int32, device=DEV)
    emap = expert_map_cpu.to(DEV) if expert_map_cpu is not None else None
    out = chordrt.moe_align(
        topk_cpu.to(DEV),
        e,
        block,
        expert_map=emap,
        sorted_token_ids=sorted_ids,
        expert_ids=expert_ids,
        num_tokens_post_padded=ntpp,
    )
    assert out[0] is sorted_ids and out[1] is expert_ids and out[2] is ntpp
    torch.cuda.synchronize()
    return sorted_ids, expert_ids, ntpp


def assert_align_matches(topk, e, block, sorted_ids, expert_ids, ntpp, expert_map=None):
    """moe_align's outputs (tensors, read back in full) against ref_moe_align for topk (and expert_map)."""
    emap = expert_map.cpu().numpy() if expert_map is not None else None
    ref_sorted, ref_blocks, ref_total = ref_moe_align(
        topk.cpu().numpy(), e, block, sorted_ids.numel(), expert_ids.numel(), emap
    )
    got_total = int(ntpp.item())
    got_sorted = sorted_ids.cpu().numpy()
    assert got_total == ref_total
    assert got_total % block == 0
    np.testing.assert_array_equal(got_sorted[:ref_total], ref_sorted[:ref_total])
    np.testing.assert_array_equal(got_sorted, ref_sorted)  # the sentinel tail up to the capacity
    np.testing.assert_array_equal(expert_ids.cpu().numpy(), ref_blocks)  # -1 past the used blocks


def check_align(topk_cpu, e, block, expert_map_cpu=None):
    assert_align_matches(topk_cpu, e, block, *run_align(topk_cpu, e, block, expert_map_cpu), expert_map_cpu)


@pytest.mark.parametrize("e", [8, 384])
@pytest.mark.parametrize("top_k", [1, 4, 8])
@pytest.mark.parametrize("m", [1, 7, 64, 8192])
@pytest.mark.parametrize("variant", ["random", "hot", "map"])
def test_moe_align_matches_reference(m, top_k, e, variant):
    gen = _gen(m * 1009 + top_k * 31 + e + len(variant))
    block = 16 if m < 64 else 64
    hot = 3 if variant == "hot" else None
    topk = random_topk(m, top_k, e, gen, hot=hot)
    expert_map = None
    if variant == "map":
        # Expert parallelism over 4 ranks, this one is rank 1: global [e/4, e/2) -> local [0, e/4).
        local = e // 4
        expert_map = torch.full((e,), -1, dtype=torch.int32)
        expert_map[local : 2 * local] = torch.arange(local, dtype=torch.int32)
    check_align(topk, e, block, expert_map)


def test_moe_align_zero_token_experts_and_dropped_ids():
    e, block = 384, 32
    gen = _gen(5)
    topk = torch.randint(0, 12, (300, 4), generator=gen, dtype=torch.int32)  # experts >= 12 get nothing
    topk[::7, 1] = -1  # ids outside [0, num_experts) are dropped
    topk[::11, 2] = e
    check_align(topk, e, block)


def test_moe_align_one_expert_takes_everything():
    topk = torch.full((1000, 8), 5, dtype=torch.int32)
    for block in (1, 16, 128):
        check_align(topk, 8, block)
        check_align(topk, 384, block)


def test_moe_align_block_sizes_and_many_experts():
    gen = _gen(9)
    for e, block in ((1024, 128), (512, 8), (33, 7), (1, 16)):
        check_align(random_topk(257, min(8, e), e, gen), e, block)


def test_moe_align_vllm_sized_buffers():
    """Buffers sized by vLLM's bound (routes + num_experts*(block_size-1)) get the tails filled to their end."""
    gen = _gen(12)
    m, k, e, block = 37, 8, 384, 64
    topk = random_topk(m, k, e, gen)
    cap = m * k + e * (block - 1)
    blocks = -(-cap // block)
    assert cap >= chordrt.moe_align_sorted_capacity(m, k, e, block)
    s = torch.full((cap,), POISON_INT, dtype=torch.int32, device=DEV)
    b = torch.full((blocks,), POISON_INT, dtype=torch.int32, device=DEV)
    _, _, n = chordrt.moe_align(topk.to(DEV), e, block, sorted_token_ids=s, expert_ids=b)
    assert_align_matches(topk, e, block, s, b, n)


def test_moe_align_allocates_outputs():
    gen = _gen(11)
    topk = random_topk(64, 8, 384, gen).to(DEV)
    sorted_ids, expert_ids, ntpp = chordrt.moe_align(topk, 384, 64)
    assert sorted_ids.dtype == torch.int32 and sorted_ids.device == DEV
    assert sorted_ids.numel() == chordrt.moe_align_sorted_capacity(64, 8, 384, 64)
    assert expert_ids.numel() == chordrt.moe_align_expert_ids_capacity(64, 8, 384, 64)
    assert ntpp.shape == (1,)
    assert_align_matches(topk, 384, 64, sorted_ids, expert_ids, ntpp)


def test_moe_align_zero_tokens():
    topk = torch.empty((0, 8), dtype=torch.int32, device=DEV)
    sorted_ids, expert_ids, ntpp = chordrt.moe_align(topk, 384, 16)
    torch.cuda.synchronize()
    assert int(ntpp.item()) == 0
    assert bool((sorted_ids == 0).all())  # the sentinel is 0*top_k
    assert bool((expert_ids == -1).all())


def test_moe_align_raw_pointers_and_explicit_stream():
    gen = _gen(13)
    topk_cpu = random_topk(100, 4, 64, gen)
    topk = topk_cpu.to(DEV)
    cap = chordrt.moe_align_sorted_capacity(100, 4, 64, 16)
    blocks = chordrt.moe_align_expert_ids_capacity(100, 4, 64, 16)
    s = torch.full((cap,), POISON_INT, dtype=torch.int32, device=DEV)
    b = torch.full((blocks,), POISON_INT, dtype=torch.int32, device=DEV)
    n = torch.full((1,), POISON_INT, dtype=torch.int32, device=DEV)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        assert (
            chordrt.moe_align(
                topk.data_ptr(),
                64,
                16,
                num_tokens=100,
                top_k=4,
                sorted_token_ids=s.data_ptr(),
                sorted_token_ids_capacity=cap,
                expert_ids=b.data_ptr(),
                expert_ids_capacity=blocks,
                num_tokens_post_padded=n.data_ptr(),
                stream=stream.cuda_stream,
            )
            is None
        )
    stream.synchronize()
    assert_align_matches(topk_cpu, 64, 16, s, b, n)


def test_moe_align_graph_capture_and_capture_miss():
    gen = _gen(17)
    topk = random_topk(64, 8, 256, gen).to(DEV)
    out = chordrt.moe_align(topk, 256, 32)  # loads the kernel outside the capture
    torch.cuda.synchronize()
    sorted_ids, expert_ids, ntpp = [t.clone().fill_(POISON_INT) for t in out]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        chordrt.moe_align(topk, 256, 32, sorted_token_ids=sorted_ids, expert_ids=expert_ids, num_tokens_post_padded=ntpp)
    topk.copy_(random_topk(64, 8, 256, gen).to(DEV))
    graph.replay()
    torch.cuda.synchronize()
    assert_align_matches(topk, 256, 32, sorted_ids, expert_ids, ntpp)

    # A kernel never loaded cannot be compiled while capturing: a typed error, not a broken capture.
    graph2 = torch.cuda.CUDAGraph()
    with pytest.raises(chordrt.ChordError) as excinfo, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "the CUDA graph is empty": nothing was launched, as intended
        with torch.cuda.graph(graph2):
            chordrt.moe_align(topk, 256, 48)
    assert excinfo.value.status == chordrt.Status.CAPTURE_MISS
    torch.cuda.synchronize()


def test_moe_align_torch_argument_checks():
    topk = torch.zeros((4, 2), dtype=torch.int32, device=DEV)
    for bad, word in (
        (topk.to(torch.int64), "int32"),
        (topk.cpu(), "CUDA"),
        (torch.zeros((2, 4), dtype=torch.int32, device=DEV).t(), "contiguous"),
        (topk.view(-1), "dimension"),
    ):
        with pytest.raises(chordrt.ChordError) as excinfo:
            chordrt.moe_align(bad, 8, 16)
        assert excinfo.value.status == chordrt.Status.INVALID_ARGUMENT
        assert "topk_ids" in excinfo.value.message and word in excinfo.value.message
    with pytest.raises(chordrt.ChordError) as excinfo:
        chordrt.moe_align(topk, 8, 16, sorted_token_ids=torch.zeros(4, dtype=torch.int32, device=DEV))
    assert "sorted_token_ids_capacity" in excinfo.value.message  # too small: the library says so
    with pytest.raises(chordrt.ChordError) as excinfo:
        chordrt.moe_align(topk, 8, 16, expert_map=torch.zeros(4, dtype=torch.int32, device=DEV))
    assert "expert_map" in excinfo.value.message


# ---- silu_and_mul -------------------------------------------------------------------------------------


def check_silu(x):
    inter = x.shape[-1] // 2
    out = torch.full(x.shape[:-1] + (inter,), float("nan"), dtype=torch.bfloat16, device=DEV)
    got = chordrt.silu_and_mul(x, out)
    assert got is out
    torch.cuda.synchronize()
    xf = x.float()
    ref = torch.nn.functional.silu(xf[..., :inter]) * xf[..., inter:]
    gotf = got.float()
    assert bool(torch.isfinite(gotf).all()), "output not fully written"
    rel = (gotf - ref).abs() / ref.abs().clamp_min(1e-6)
    assert float(rel.max()) < 1e-2
    exact = (got == ref.to(torch.bfloat16)).float().mean().item()
    assert exact >= 0.99, exact


@pytest.mark.parametrize("inter", [1, 6, 7, 12, 256, 1408, 2048])
@pytest.mark.parametrize("rows", [1, 7, 300])
def test_silu_and_mul_matches_fp32_reference(rows, inter):
    gen = _gen(rows * 7 + inter)
    x = (torch.randn(rows, 2 * inter, generator=gen) * 3).to(torch.bfloat16).to(DEV)
    check_silu(x)


def test_silu_and_mul_many_rows_and_nd_input():
    gen = _gen(21)
    check_silu((torch.randn(70000, 16, generator=gen) * 3).to(torch.bfloat16).to(DEV))  # > 65535 rows
    x = (torch.randn(2, 3, 5, 64, generator=gen)).to(torch.bfloat16).to(DEV)
    out = chordrt.silu_and_mul(x)
    assert out.shape == (2, 3, 5, 32) and out.dtype == torch.bfloat16
    check_silu(x)


def test_silu_and_mul_allocates_and_checks():
    x = torch.randn(4, 512, device=DEV).to(torch.bfloat16)
    out = chordrt.silu_and_mul(x)
    assert out.shape == (4, 256) and out.dtype == torch.bfloat16 and out.device == DEV
    for bad, word in ((x.float(), "bfloat16"), (x.t(), "contiguous"), (x[:, :-1], "contiguous")):
        with pytest.raises(chordrt.ChordError) as excinfo:
            chordrt.silu_and_mul(bad)
        assert "input" in excinfo.value.message and word in excinfo.value.message, excinfo.value.message
    with pytest.raises(chordrt.ChordError) as excinfo:
        chordrt.silu_and_mul(x, torch.empty(4, 255, dtype=torch.bfloat16, device=DEV))
    assert "output" in excinfo.value.message
    # A view starting 2 bytes into its storage is contiguous but misaligned for 16-byte vectors.
    base = torch.empty(4 * 512 + 1, dtype=torch.bfloat16, device=DEV)
    misaligned = base[1:].view(4, 512)
    with pytest.raises(chordrt.ChordError) as excinfo:
        chordrt.silu_and_mul(misaligned)
    assert excinfo.value.status == chordrt.Status.INVALID_ARGUMENT
    assert "input" in excinfo.value.message and "aligned" in excinfo.value.message


# ---- moe_combine --------------------------------------------------------------------------------------


def combine_reference(rows, weights, include=None):
    t, k = weights.shape
    r = rows.float().view(t, k, -1)
    w = weights.float()
    if include is not None:
        w = torch.where(include, w, torch.zeros_like(w))
        r = torch.where(include[..., None], r, torch.zeros_like(r))
    terms = w[..., None] * r
    return terms.sum(1), terms.abs().sum(1)


def check_combine(got, ref, mag):
    gotf = got.float()
    assert bool(torch.isfinite(gotf).all()), "output not fully written or non-local rows leaked"
    err = (gotf - ref).abs()
    tol = 8e-3 * ref.abs() + 1e-4 * mag + 1e-6
    assert bool((err <= tol).all()), float((err - tol).max())


@pytest.mark.parametrize("hidden", [7, 100, 7168])
@pytest.mark.parametrize("top_k", [1, 4, 8])
@pytest.mark.parametrize("tokens", [1, 7, 64, 300])
def test_moe_combine_matches_fp32_reference(tokens, top_k, hidden):
    gen = _gen(tokens * 13 + top_k * 7 + hidden)
    rows = torch.randn(tokens * top_k, hidden, generator=gen).to(torch.bfloat16).to(DEV)
    weights = torch.rand(tokens, top_k, generator=gen).to(DEV)
    out = torch.full((tokens, hidden), float("nan"), dtype=torch.bfloat16, device=DEV)
    got = chordrt.moe_combine(rows, weights, out)
    assert got is out
    torch.cuda.synchronize()
    ref, mag = combine_reference(rows, weights)
    check_combine(got, ref, mag)


@pytest.mark.parametrize("tokens, top_k, hidden", [(1, 8, 7168), (64, 8, 7168), (300, 4, 100), (33, 2, 7)])
def test_moe_combine_expert_parallel_filter(tokens, top_k, hidden):
    e = 64
    gen = _gen(tokens + top_k + hidden)
    topk = random_topk(tokens, top_k, e, gen)
    expert_map = torch.full((e,), -1, dtype=torch.int32)
    expert_map[16:32] = torch.arange(16, dtype=torch.int32)  # rank 1 of 4
    include = expert_map[topk.long()] >= 0
    rows = torch.randn(tokens * top_k, hidden, generator=gen).to(torch.bfloat16)
    rows[~include.view(-1)] = float("nan")  # rows the GEMM never wrote: must not be read
    weights = torch.rand(tokens, top_k, generator=gen)
    rows, weights = rows.to(DEV), weights.to(DEV)
    out = torch.full((tokens, hidden), float("nan"), dtype=torch.bfloat16, device=DEV)
    chordrt.moe_combine(rows, weights, out, topk_ids=topk.to(DEV), expert_map=expert_map.to(DEV))
    torch.cuda.synchronize()
    ref, mag = combine_reference(rows, weights, include.to(DEV))
    check_combine(out, ref, mag)
    # Without the filter the poisoned rows are summed in: the test would notice a missing filter.
    if not bool(include.all()):
        unfiltered = chordrt.moe_combine(rows, weights)
        torch.cuda.synchronize()
        assert not bool(torch.isfinite(unfiltered.float()).all())


def test_moe_combine_filter_drops_out_of_range_ids():
    tokens, top_k, hidden, e = 16, 4, 256, 8
    gen = _gen(3)
    topk = random_topk(tokens, top_k, e, gen)
    topk[::3, 1] = -1
    topk[::5, 2] = e
    expert_map = torch.arange(e, dtype=torch.int32)  # everything local
    include = (topk >= 0) & (topk < e)
    rows = torch.randn(tokens * top_k, hidden, generator=gen).to(torch.bfloat16)
    rows[~include.view(-1)] = float("nan")
    weights = torch.rand(tokens, top_k, generator=gen)
    rows, weights = rows.to(DEV), weights.to(DEV)
    out = chordrt.moe_combine(rows, weights, topk_ids=topk.to(DEV), expert_map=expert_map.to(DEV))
    torch.cuda.synchronize()
    ref, mag = combine_reference(rows, weights, include.to(DEV))
    check_combine(out, ref, mag)


def test_moe_combine_many_tokens_and_3d_rows():
    gen = _gen(23)
    tokens, top_k, hidden = 70000, 2, 64  # > 65535 rows of the grid
    rows = torch.randn(tokens, top_k, hidden, generator=gen).to(torch.bfloat16).to(DEV)
    weights = torch.rand(tokens, top_k, generator=gen).to(DEV)
    out = chordrt.moe_combine(rows, weights)
    assert out.shape == (tokens, hidden)
    torch.cuda.synchronize()
    ref, mag = combine_reference(rows.view(tokens * top_k, hidden), weights)
    check_combine(out, ref, mag)


def test_moe_combine_torch_argument_checks():
    rows = torch.zeros(8, 64, dtype=torch.bfloat16, device=DEV)
    w = torch.zeros(4, 2, device=DEV)
    for args, word in (
        ((rows.float(), w), "expert_rows"),
        ((rows, w.double()), "topk_weights"),
        ((rows[:6], w), "expert_rows"),
        ((rows, w.cpu()), "topk_weights"),
    ):
        with pytest.raises(chordrt.ChordError) as excinfo:
            chordrt.moe_combine(*args)
        assert excinfo.value.status == chordrt.Status.INVALID_ARGUMENT
        assert word in excinfo.value.message
    ids = torch.zeros(4, 2, dtype=torch.int32, device=DEV)
    with pytest.raises(chordrt.ChordError) as excinfo:
        chordrt.moe_combine(rows, w, topk_ids=ids)  # the filter needs both halves: the library says so
    assert "expert_map" in excinfo.value.message
    with pytest.raises(chordrt.ChordError) as excinfo:
        chordrt.moe_combine(rows, w, topk_ids=ids.long(), expert_map=torch.zeros(8, dtype=torch.int32, device=DEV))
    assert "topk_ids" in excinfo.value.message


# ---- runtime state, other devices, strict mode ---------------------------------------------------------


def test_runtime_info_after_launches(chord):
    chord.silu_and_mul(torch.randn(2, 64, device=DEV).to(torch.bfloat16))
    torch.cuda.synchronize()
    info = chord.runtime_info()
    assert info["driver_available"] and info["device_count"] >= 1 and info["driver_version"] > 0
    assert info["kernels_loaded"] >= 1


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_ops_on_a_second_device():
    dev = torch.device("cuda", 1)
    x = torch.randn(16, 128, device=dev).to(torch.bfloat16)
    out = chordrt.silu_and_mul(x)
    assert out.device == dev
    torch.cuda.synchronize(dev)
    xf = x.float()
    ref = torch.nn.functional.silu(xf[:, :64]) * xf[:, 64:]
    assert float(((out.float() - ref).abs() / ref.abs().clamp_min(1e-6)).max()) < 1e-2


CHILD = textwrap.dedent(
    """
    import json, torch, chordrt
    x = torch.randn(8, 2 * 1408, device="cuda").to(torch.bfloat16)
    try:
        chordrt.silu_and_mul(x)
        torch.cuda.synchronize()
        print(json.dumps({"status": 0, "info": chordrt.runtime_info()}))
    except chordrt.ChordError as e:
        print(json.dumps({"status": int(e.status), "message": e.message}))
    """
)


def _child(**env):
    p = subprocess.run([sys.executable, "-c", CHILD], env=child_env(**env), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_record_misses_prewarm_from_and_strict_mode(tmp_path):
    cache, misses = tmp_path / "cache", tmp_path / "misses.jsonl"
    first = _child(CHORD_CACHE_DIR=cache, CHORD_RECORD_MISSES=misses)
    assert first["status"] == 0 and first["info"]["kernels_compiled"] == 1
    lines = [json.loads(line) for line in misses.read_text().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0]["descriptor"]["family"] == "glue.silu_and_mul"

    strict_cold = _child(CHORD_CACHE_DIR=tmp_path / "cold", CHORD_JIT_STRICT=1)
    assert strict_cold["status"] == chordrt.Status.STRICT_MISS and strict_cold["message"]

    jit = os.environ.get("CHORD_JIT")
    if jit and os.access(jit, os.X_OK):
        warm = tmp_path / "warm"
        p = subprocess.run([jit, "--cache-dir", str(warm), "prewarm", "--from", str(misses), "--json"],
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout)["compiled"] == 1
        strict = _child(CHORD_CACHE_DIR=warm, CHORD_JIT_STRICT=1)
        assert strict["status"] == 0 and strict["info"]["kernels_compiled"] == 0 and strict["info"]["disk_hits"] == 1
    strict = _child(CHORD_CACHE_DIR=cache, CHORD_JIT_STRICT=1)
    assert strict["status"] == 0 and strict["info"]["kernels_compiled"] == 0
