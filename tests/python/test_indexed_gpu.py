"""W4A16 indexed MoE GEMMs (vLLM routing) on a GPU against an FP32 reference.

Routing comes from chordrt.moe_align on random top-k ids (uniform, skewed, all on one expert), with an
expert-parallel expert_map (so blocks of other GPUs' experts carry -1) or without. Weights are fresh
random checkpoint words and scales, packed for the WGMMA (prefill) or MMA (decode) layout. Outputs are
poisoned with NaN: rows of local routes must be close to a[r // top_k] @ dequant(W_e)^T (FP32, no TF32),
rows of other GPUs' routes must stay NaN. Over-allocated buffers get garbage past the device count.
Shapes: small odd ones and Kimi K2's (384 experts, top-8) at EP8 (48 local) and TP8 (384 local, narrow).
Skipped unless torch with a CUDA device of compute capability 9.x is available.
"""

from __future__ import annotations

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
    DEV, activations, check, checkpoint_weight, dequantized, exact_fp32, nan_out, require_sm90)

WGMMA, MMA = W4a16Layout.WGMMA_K64, W4a16Layout.MMA
KIMI_EP8 = {"gate_up": (4096, 7168, 48), "down": (7168, 2048, 48)}  # (N, K, local experts); 384 global
KIMI_TP8 = {"gate_up": (512, 7168, 384), "down": (7168, 256, 384)}
GLOBAL = 384


@pytest.fixture(scope="module", autouse=True)
def _driver(chord):
    require_sm90(chord, "the indexed prefill GEMM runs")


_sources, _packed = {}, {}


def source(n, k, e):
    if (n, k, e) not in _sources:
        _sources[(n, k, e)] = checkpoint_weight(e, n, k, seed=n + 3 * k + 7 * e)
    return _sources[(n, k, e)]


def packed(n, k, e, layout):
    key = (n, k, e, W4a16Layout(layout))
    if key not in _packed:
        words, scale = source(n, k, e)
        _packed[key] = chordrt.w4a16_pack(words, scale, layout)
    return _packed[key]


def routing(tokens, top_k, global_experts, seed, skew=0.0, one_expert=None):
    if one_expert is not None:
        return torch.full((tokens, top_k), one_expert, dtype=torch.int32, device=DEV)
    ids, _ = mr.random_routing(torch, tokens, top_k, global_experts, DEV, seed=seed, skew=skew)
    return ids


def local_experts_of_routes(topk_ids, expert_map, experts):
    """int64 [routes]: the local expert of each route, -1 when it is another GPU's."""
    ids = topk_ids.reshape(-1).to(torch.int64)
    local = expert_map.to(torch.int64)[ids] if expert_map is not None else ids
    return torch.where((local >= 0) & (local < experts), local, torch.full_like(local, -1))


def reference(a, top_k, words, scale, local):
    """float32 [routes, N]: route r = a[r // top_k] @ dequant(W[local[r]])^T, NaN for other GPUs' routes."""
    out = torch.full((local.numel(), words.shape[1]), float("nan"), dtype=torch.float32, device=DEV)
    rows = torch.arange(local.numel(), device=DEV) // top_k
    with exact_fp32():
        for e in torch.unique(local[local >= 0]).tolist():
            sel = torch.nonzero(local == e).flatten()
            out[sel] = a[rows[sel]].float() @ dequantized(words, scale, e).T
    return out


def garbage_tail(sorted_ids, expert_ids, npp, block_m, routes, experts, seed):
    """Fills the over-allocated tails past the device count with plausible-looking garbage."""
    count = int(npp[0].item())
    gen = torch.Generator(device=DEV)
    gen.manual_seed(seed)
    tail = sorted_ids[count:]
    tail.copy_(torch.randint(0, max(routes, 1), tail.shape, generator=gen, device=DEV, dtype=torch.int32))
    etail = expert_ids[count // block_m :]
    etail.copy_(torch.randint(0, experts, etail.shape, generator=gen, device=DEV, dtype=torch.int32))


def stream_k_workspace(block_m, garbage=0xFF):
    """A stream-K workspace of the documented size, every byte `garbage` (the call must clear its flags)."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    return torch.full((chordrt.indexed_gemm_workspace_size(block_m, sms),), garbage, dtype=torch.uint8, device=DEV)


def run(layout, n, k, experts, tokens, top_k, block_m=None, global_experts=None, seed=1, skew=0.0, one_expert=None,
        extra_capacity=0, validate=False, label=None, stream_k=False):
    """One indexed call on poisoned output, checked against the reference; returns (out, call inputs).
    stream_k: the call brings a stream-K workspace full of garbage."""
    global_experts = global_experts or experts
    emap = None
    if global_experts != experts:
        emap = mr.contiguous_expert_map(torch, global_experts, experts, rank=seed % (global_experts // experts), device=DEV)
    topk_ids = routing(tokens, top_k, global_experts, seed, skew, one_expert)
    local = local_experts_of_routes(topk_ids, emap, experts)
    if block_m is None:
        block_m = chordrt.indexed_block_m(layout, experts, n, k, int((local >= 0).sum().item()))
    cap = chordrt.moe_align_sorted_capacity(tokens, top_k, global_experts, block_m) + extra_capacity
    sorted_ids = torch.empty(cap, dtype=torch.int32, device=DEV)
    expert_ids = torch.empty(-(-cap // block_m), dtype=torch.int32, device=DEV)
    npp = torch.empty(1, dtype=torch.int32, device=DEV)
    chordrt.moe_align(topk_ids, global_experts, block_m, expert_map=emap, sorted_token_ids=sorted_ids,
                      expert_ids=expert_ids, num_tokens_post_padded=npp)
    if extra_capacity:
        garbage_tail(sorted_ids, expert_ids, npp, block_m, tokens * top_k, experts, seed)
    w = packed(n, k, experts, layout)
    words, scale = source(n, k, experts)
    a = activations(tokens, k, seed + 100)
    out = nan_out(tokens * top_k, n)
    workspace = stream_k_workspace(block_m) if stream_k else None
    res = chordrt.indexed_gemm(a, w, sorted_ids, expert_ids, npp, top_k, block_m, out=out, validate=validate,
                               workspace=workspace)
    assert res is out
    torch.cuda.synchronize()
    ref = reference(a, top_k, words, scale, local)
    check(out, ref, local >= 0, label or f"{layout.name} N={n} K={k} E={experts}/{global_experts} T={tokens} "
          f"top_k={top_k} block_m={block_m} skew={skew} stream_k={stream_k}")
    return out, (a, w, sorted_ids, expert_ids, npp, top_k, block_m)


# ---- CHORD_INDEXED_CONFIG: the step and single rings ----------------------------------------------------

# The runtime reads its environment once per process: the forced kernel runs in a fresh interpreter, through
# this module's run() (poisoned outputs, FP32 reference), at Kimi K2 EP8 and TP8 with block_m 32 (and 48 for
# the single ring, 56 and 64 for the half ring, whose consumers get 112 registers; the half ring only on
# long K, so not TP8 down).
RING_CHILD = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {tests!r})
    import test_indexed_gpu as t
    for proj in ("gate_up", "down"):
        for shapes, tokens in ((t.KIMI_EP8, 1024), (t.KIMI_TP8, 256)):
            n, k, e = shapes[proj]
            if {long_k_only} and k <= 512:
                continue
            t.run(t.WGMMA, n, k, e, tokens, 8, block_m={block_m}, global_experts=t.GLOBAL, seed=tokens + n)
    print('{{"ok": true}}')
    """
)


@pytest.mark.parametrize("ring, block_m", [(1, 32), (2, 32), (2, 48), (3, 56), (3, 64)])
def test_register_rings_with_four_consumers_of_two_slices_match_the_reference(python_runner, ring, block_m):
    code = RING_CHILD.format(tests=str(Path(__file__).resolve().parent), block_m=block_m, long_k_only=ring == 3)
    # The deepest rings of 512-row tiles in 227 KB of shared memory (384 experts' prefix table included).
    stages = {48: ",stages=4", 56: ",stages=5", 64: ",stages=5"}.get(block_m, "")
    proc = python_runner(code, timeout=600, CHORD_INDEXED_CONFIG=f"consumers=4,slices=2,ring={ring}{stages}")
    assert proc.result == {"ok": True}, proc.stdout + proc.stderr


# ---- both layouts on small odd shapes ----------------------------------------------------------------------


@pytest.mark.parametrize("layout, block_m", [(MMA, 8), (MMA, 16), (MMA, 24), (MMA, 32), (WGMMA, 8), (WGMMA, 16),
                                             (WGMMA, 64), (WGMMA, 136), (WGMMA, 256)])
@pytest.mark.parametrize("tokens", [1, 7, 100])
def test_small_shapes(layout, block_m, tokens):
    run(layout, 384, 576, 5, tokens, 2, block_m=block_m, seed=tokens + block_m)


@pytest.mark.parametrize("layout", [MMA, WGMMA])
def test_expert_parallel_map_skips_other_gpus_blocks(layout):
    run(layout, 256, 512, 4, 64, 4, block_m=16, global_experts=16, seed=5)


@pytest.mark.parametrize("layout", [MMA, WGMMA])
def test_skewed_routing_and_all_tokens_on_one_expert(layout):
    run(layout, 256, 512, 6, 300, 3, block_m=16, skew=1.5, seed=6)
    run(layout, 256, 512, 6, 200, 1, block_m=24 if layout == MMA else 64, one_expert=4, seed=7)


@pytest.mark.parametrize("layout", [MMA, WGMMA])
def test_over_allocated_buffers_with_garbage_tails(layout):
    run(layout, 256, 512, 6, 50, 2, block_m=16, extra_capacity=999, seed=8)


@pytest.mark.parametrize("layout", [MMA, WGMMA])
def test_validation_accepts_good_routing(layout):
    run(layout, 256, 512, 6, 40, 2, block_m=16, global_experts=12, extra_capacity=77, validate=True, seed=9)


# ---- Kimi K2 shapes ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("proj", ["gate_up", "down"])
@pytest.mark.parametrize("tokens", [1, 20, 50])
def test_kimi_ep8_decode(proj, tokens):
    n, k, e = KIMI_EP8[proj]
    run(MMA, n, k, e, tokens, 8, global_experts=e, seed=tokens)  # every route on this GPU's 48 experts


@pytest.mark.parametrize("proj", ["gate_up", "down"])
@pytest.mark.parametrize("tokens", [64, 1024, 4096])
def test_kimi_ep8_prefill(proj, tokens):
    n, k, e = KIMI_EP8[proj]
    run(WGMMA, n, k, e, tokens, 8, global_experts=GLOBAL, seed=tokens)


def test_kimi_ep8_prefill_16k_tokens():
    n, k, e = KIMI_EP8["gate_up"]
    run(WGMMA, n, k, e, 16384, 8, global_experts=GLOBAL, seed=3)


@pytest.mark.parametrize("proj", ["gate_up", "down"])
@pytest.mark.parametrize("layout, tokens", [(MMA, 1), (MMA, 16), (WGMMA, 256), (WGMMA, 2048)])
def test_kimi_tp8(proj, layout, tokens):
    n, k, e = KIMI_TP8[proj]
    run(layout, n, k, e, tokens, 8, seed=tokens)


def test_down_projection_reads_the_route_rows():
    """down: a is [M*topk, I] (one row per route) with top_k = 1 over the same routing."""
    n, k, e = 256, 512, 6
    topk = 3
    topk_ids = routing(40, topk, e, seed=10)
    sorted_ids, expert_ids, npp = chordrt.moe_align(topk_ids, e, 16)
    w = packed(n, k, e, WGMMA)
    words, scale = source(n, k, e)
    a = activations(40 * topk, k, 11)
    out = chordrt.indexed_gemm(a, w, sorted_ids, expert_ids, npp, 1, 16, out=nan_out(40 * topk, n))
    torch.cuda.synchronize()
    local = local_experts_of_routes(topk_ids, None, e)
    check(out, reference(a, 1, words, scale, local), local >= 0, "down top_k=1")


def test_layouts_agree():
    """Same routing, block_m 16, both layouts: the same RN((q-8)*s) products summed in FP32 in different
    orders (wgmma's k16 steps vs mma.sync's permuted k within 64-value chunks), so close, not bitwise."""
    outs = []
    for layout in (MMA, WGMMA):
        out, _ = run(layout, 512, 1024, 4, 30, 2, block_m=16, seed=12)
        outs.append(out.float())
    written = ~torch.isnan(outs[0]).any(dim=1)
    stats = mr.error_stats(torch, outs[0][written], outs[1][written])
    print(f"mma vs wgmma: {stats}")
    assert stats["rel_err"] < 4e-3 and stats["cosine"] > 0.99999, stats


def test_graph_replay_follows_the_device_routing():
    n, k, e, top_k, bm = 256, 512, 6, 2, 16
    w = packed(n, k, e, MMA)
    words, scale = source(n, k, e)
    cap = chordrt.moe_align_sorted_capacity(32, top_k, e, bm)
    sorted_ids = torch.empty(cap, dtype=torch.int32, device=DEV)
    expert_ids = torch.empty(-(-cap // bm), dtype=torch.int32, device=DEV)
    npp = torch.empty(1, dtype=torch.int32, device=DEV)
    topk_ids = routing(32, top_k, e, seed=13)
    a = activations(32, k, 14)
    out = nan_out(32 * top_k, n)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):  # load the kernels before capture
        chordrt.moe_align(topk_ids, e, bm, sorted_token_ids=sorted_ids, expert_ids=expert_ids, num_tokens_post_padded=npp)
        chordrt.indexed_gemm(a, w, sorted_ids, expert_ids, npp, top_k, bm, out=out)
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        chordrt.moe_align(topk_ids, e, bm, sorted_token_ids=sorted_ids, expert_ids=expert_ids, num_tokens_post_padded=npp)
        chordrt.indexed_gemm(a, w, sorted_ids, expert_ids, npp, top_k, bm, out=out)
    for seed in (15, 16):
        topk_ids.copy_(routing(32, top_k, e, seed=seed, skew=1.0 if seed == 16 else 0.0))
        a.copy_(activations(32, k, seed))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        local = local_experts_of_routes(topk_ids, None, e)
        check(out, reference(a, top_k, words, scale, local), local >= 0, f"graph replay seed={seed}")


# ---- stream-K (the call's workspace) ---------------------------------------------------------------------

# The heuristics leave stream-K off (measured slower: bench/NOTES.md "Stream-K v1"); CHORD_INDEXED_CONFIG=
# stream_k=1 turns it on for calls that bring a workspace (and rejects calls that do not). The runtime reads its
# environment once per process, so the forced kernels run in a fresh interpreter, through stream_k_checks().
STREAM_K_CASES = [
    # (N, K, local experts, global experts, tokens, top_k, block_m, skew): Kimi K2 EP8 and TP8 (data-parallel
    # waves, then a stream-K wave with a few tiles cut between CTAs); a small problem whose few tiles each span
    # several CTAs (one finishes, the others write partials); a skewed routing; an expert map whose other GPUs'
    # blocks the live list leaves out.
    (4096, 7168, 48, GLOBAL, 1024, 8, 32, 0.0),
    (7168, 2048, 48, GLOBAL, 1024, 8, 32, 0.0),
    (512, 7168, 384, GLOBAL, 256, 8, 32, 0.0),
    (512, 7168, 384, GLOBAL, 2048, 8, 48, 0.0),
    (256, 1024, 4, 4, 30, 2, 16, 0.0),
    (512, 2048, 6, 6, 300, 3, 64, 1.5),
    (256, 1024, 4, 16, 200, 4, 16, 0.0),
]


def stream_k_graph_replay():
    n, k, e, top_k, bm, tokens = 512, 2048, 6, 2, 16, 200
    w = packed(n, k, e, WGMMA)
    words, scale = source(n, k, e)
    cap = chordrt.moe_align_sorted_capacity(tokens, top_k, e, bm)
    sorted_ids = torch.empty(cap, dtype=torch.int32, device=DEV)
    expert_ids = torch.empty(-(-cap // bm), dtype=torch.int32, device=DEV)
    npp = torch.empty(1, dtype=torch.int32, device=DEV)
    topk_ids = routing(tokens, top_k, e, seed=23)
    a = activations(tokens, k, 24)
    out = nan_out(tokens * top_k, n)
    workspace = stream_k_workspace(bm)
    stream = torch.cuda.Stream()

    def step():
        chordrt.moe_align(topk_ids, e, bm, sorted_token_ids=sorted_ids, expert_ids=expert_ids, num_tokens_post_padded=npp)
        chordrt.indexed_gemm(a, w, sorted_ids, expert_ids, npp, top_k, bm, out=out, workspace=workspace)

    with torch.cuda.stream(stream):  # load the kernels before capture
        step()
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        step()
    for seed in (25, 26):
        topk_ids.copy_(routing(tokens, top_k, e, seed=seed, skew=1.0 if seed == 26 else 0.0))
        a.copy_(activations(tokens, k, seed))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        local = local_experts_of_routes(topk_ids, None, e)
        check(out, reference(a, top_k, words, scale, local), local >= 0, f"stream-K graph replay seed={seed}")


def stream_k_checks(max_block_m=256, n_multiple=128):
    """Every stream-K check (run with stream_k=1 forced): the cases against the FP32 reference on poisoned
    outputs and garbage workspaces, garbage routing tails, more live blocks than the list holds (whole tiles),
    two calls bitwise equal (partials added in CTA order), graph capture and replay. max_block_m, n_multiple:
    the shapes the forced configuration holds (block_m at most, N a multiple of its tile; the others are left
    out)."""
    fits = lambda n, bm: bm <= max_block_m and n % n_multiple == 0  # noqa: E731
    for n, k, e, g, tokens, top_k, bm, skew in STREAM_K_CASES:
        if fits(n, bm):
            run(WGMMA, n, k, e, tokens, top_k, block_m=bm, global_experts=g, skew=skew, seed=tokens + n,
                stream_k=True)
    if fits(512, 16):
        run(WGMMA, 512, 1024, 6, 50, 2, block_m=16, extra_capacity=999, seed=8, stream_k=True)
    if fits(512, 8):
        # 4200 tokens x top-4 at block_m 8 on 8 experts: ~2100 live blocks, past the 2048 the list holds.
        run(WGMMA, 512, 1024, 8, 4200, 4, block_m=8, seed=31, stream_k=True)
    out1, args = run(WGMMA, 4096, 7168, 48, 1024, 8, block_m=32, global_experts=GLOBAL, seed=19, stream_k=True)
    a, w, sorted_ids, expert_ids, npp, top_k, bm = args
    out2 = chordrt.indexed_gemm(a, w, sorted_ids, expert_ids, npp, top_k, bm, out=nan_out(*out1.shape),
                                workspace=stream_k_workspace(bm, garbage=0x5A))
    torch.cuda.synchronize()
    assert torch.equal(out1.view(torch.int16), out2.view(torch.int16))
    stream_k_graph_replay()


STREAM_K_CHILD = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {tests!r})
    import test_indexed_gpu as t
    t.stream_k_checks({max_block_m}, {n_multiple})
    print('{{"ok": true}}')
    """
)


# The heuristics' tiles, and the single and half rings' four consumers of two slices.
@pytest.mark.parametrize("config, max_block_m, n_multiple",
                         [("stream_k=1", 256, 128), ("consumers=4,slices=2,ring=2,stream_k=1", 32, 512),
                          ("consumers=4,slices=2,ring=3,stream_k=1", 32, 512)])
def test_forced_stream_k_matches_the_reference(python_runner, config, max_block_m, n_multiple):
    code = STREAM_K_CHILD.format(tests=str(Path(__file__).resolve().parent), max_block_m=max_block_m,
                                 n_multiple=n_multiple)
    proc = python_runner(code, timeout=600, CHORD_INDEXED_CONFIG=config)
    assert proc.result == {"ok": True}, proc.stdout + proc.stderr


@pytest.mark.parametrize("tokens, block_m", [(1024, 32), (2048, 56)])
def test_the_heuristics_take_stream_k_with_a_workspace_and_agree_with_whole_tiles(tokens, block_m):
    # Kimi K2 EP8 gate_up at 1024 tokens, block_m 32 / 2048 tokens, block_m 56: with a workspace the heuristics
    # run the single / half ring with stream-K (tests/indexed_api_test.cpp checks the choice), without one
    # whole tiles. Both against the FP32 reference (run), and against each other: only the summation order of
    # split tiles may differ.
    with_ws, args = run(WGMMA, 4096, 7168, 48, tokens, 8, block_m=block_m, global_experts=GLOBAL, seed=19,
                        stream_k=True)
    a, w, sorted_ids, expert_ids, npp, top_k, bm = args
    without = chordrt.indexed_gemm(a, w, sorted_ids, expert_ids, npp, top_k, bm, out=nan_out(*with_ws.shape))
    torch.cuda.synchronize()
    routed = ~torch.isnan(with_ws[:, 0])
    assert torch.equal(routed, ~torch.isnan(without[:, 0]))
    diff = (with_ws[routed].float() - without[routed].float()).norm() / without[routed].float().norm()
    assert diff < 4e-3, diff


def test_stream_k_workspace_too_small_or_misaligned_is_rejected():
    n, k, e, top_k, bm, tokens = 512, 2048, 6, 2, 16, 100
    w = packed(n, k, e, WGMMA)
    sorted_ids, expert_ids, npp = chordrt.moe_align(routing(tokens, top_k, e, seed=27), num_experts=e, block_size=bm)
    a = activations(tokens, k, 28)
    good = stream_k_workspace(bm)
    with pytest.raises(chordrt.ChordError, match="workspace_bytes must be at least"):
        chordrt.indexed_gemm(a, w, sorted_ids, expert_ids, npp, top_k, bm, workspace=good[:4096])
    with pytest.raises(chordrt.ChordError, match="workspace"):
        chordrt.indexed_gemm(a, w, sorted_ids, expert_ids, npp, top_k, bm, workspace=good[8:])
    with pytest.raises(chordrt.ChordError, match="block_m"):
        chordrt.indexed_gemm_workspace_size(12, 132)


def test_deterministic_across_runs():
    out1, args = run(WGMMA, 512, 1024, 4, 64, 2, block_m=32, seed=17)
    a, w, sorted_ids, expert_ids, npp, top_k, bm = args
    out2 = chordrt.indexed_gemm(a, w, sorted_ids, expert_ids, npp, top_k, bm, out=nan_out(*out1.shape))
    torch.cuda.synchronize()
    assert torch.equal(out1.view(torch.int16), out2.view(torch.int16))


# ---- errors -----------------------------------------------------------------------------------------------


def _valid_call(layout=MMA, bm=16):
    n, k, e, top_k = 256, 512, 6, 2
    topk_ids = routing(20, top_k, e, seed=18)
    sorted_ids, expert_ids, npp = chordrt.moe_align(topk_ids, e, bm)
    return dict(a=activations(20, k, 19), weight=packed(n, k, e, layout), sorted_token_ids=sorted_ids,
                expert_ids=expert_ids, num_tokens_post_padded=npp, top_k=top_k, block_m=bm,
                out=nan_out(20 * top_k, n))


@pytest.mark.parametrize("corrupt, words", [
    ("duplicate", ["already appears"]),
    ("bad_expert", ["expert_ids", "neither -1"]),
    ("negative_id", ["negative"]),
    ("count", ["multiple of block_m"]),
    ("missing", ["appears in no block"]),
])
def test_validation_reports_the_first_bad_entry(corrupt, words):
    c = _valid_call()
    sorted_ids, expert_ids, npp = c["sorted_token_ids"], c["expert_ids"], c["num_tokens_post_padded"]
    if corrupt == "duplicate":
        first = int(sorted_ids[0].item())
        sorted_ids[1] = first
    elif corrupt == "bad_expert":
        expert_ids[0] = 99
    elif corrupt == "negative_id":
        sorted_ids[2] = -5
    elif corrupt == "count":
        npp[0] += 3
    else:
        sorted_ids[0] = 40  # the sentinel: route 0's row disappears
    with pytest.raises(chordrt.ChordError) as excinfo:
        chordrt.indexed_gemm(validate=True, **c)
    err = excinfo.value
    print(err)
    assert err.status is chordrt.Status.INVALID_ARGUMENT, err
    for word in words:
        assert word in err.message, (word, err.message)
    torch.cuda.synchronize()
    assert torch.isnan(c["out"].float()).all(), "a rejected call wrote its output"


def test_validation_refuses_to_run_while_capturing():
    c = _valid_call()
    chordrt.indexed_gemm(**c)
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(chordrt.ChordError, match="capturing"):
        with torch.cuda.graph(graph, stream=stream):
            chordrt.indexed_gemm(validate=True, **c)


@pytest.mark.parametrize("layout, bm, word", [(MMA, 64, "pack with layout WGMMA_K64 for larger blocks"),
                                               (MMA, 12, "multiple of 8 in [8, 32] for layout MMA"),
                                               (WGMMA, 12, "multiple of 8 in [8, 256] for layout WGMMA_K64"),
                                               (WGMMA, 264, "multiple of 8 in [8, 256] for layout WGMMA_K64")])
def test_block_m_outside_the_layout_is_rejected(layout, bm, word):
    c = _valid_call(layout)
    c["block_m"] = bm
    with pytest.raises(chordrt.ChordError) as excinfo:
        chordrt.indexed_gemm(**c)
    print(excinfo.value)
    assert word in excinfo.value.message


def test_the_masked_layout_is_not_an_indexed_weight():
    c = _valid_call()
    words, scale = source(256, 512, 6)
    c["weight"] = chordrt.w4a16_pack(words, scale, "wgmma_k128")
    with pytest.raises(chordrt.ChordError, match="weight has layout WGMMA_K128; indexed_gemm needs a weight packed "
                                                 "with layout WGMMA_K64"):
        chordrt.indexed_gemm(**c)
    with pytest.raises(chordrt.ChordError, match="weight must be a W4a16PackedWeight"):
        chordrt.indexed_gemm(**dict(c, weight=(c["weight"].packed, c["weight"].scale)))


def test_one_k64_weight_serves_the_indexed_prefill_and_grouped_contiguous():
    """The point of one weight type: the WGMMA_K64 copy the indexed prefill reads is the grouped
    contiguous GEMM's too."""
    n, k, e = 256, 512, 6
    out, (a, w, *_rest) = run(WGMMA, n, k, e, 40, 2, block_m=32, seed=20)
    assert w is packed(n, k, e, WGMMA) and w.layout is W4a16Layout.WGMMA_K64
    words, scale = source(n, k, e)
    ids = torch.arange(e, dtype=torch.int32, device=DEV).repeat_interleave(128)  # 128 rows per expert
    x = activations(ids.numel(), k, 21)
    got = chordrt.grouped_contiguous(x, w, ids, out=nan_out(ids.numel(), n))
    torch.cuda.synchronize()
    ref = torch.empty((ids.numel(), n), dtype=torch.float32, device=DEV)
    with exact_fp32():
        for ex in range(e):
            ref[ex * 128:(ex + 1) * 128] = x[ex * 128:(ex + 1) * 128].float() @ dequantized(words, scale, ex).T
    check(got, ref, torch.ones(ids.numel(), dtype=torch.bool, device=DEV), "grouped_contiguous on the indexed weight")


def test_edited_weight_struct_is_rejected():
    c = _valid_call()
    for field, value in (("n", 128), ("layout", int(WGMMA)), ("packed", c["weight"].struct.packed + 256)):
        forged = chordrt.W4a16Weight.from_buffer_copy(c["weight"].struct)
        setattr(forged, field, value)
        with pytest.raises(chordrt.ChordError, match="w4a16_pack"):  # raw pointers: the library checks
            chordrt.indexed_gemm(c["a"].data_ptr(), forged, c["sorted_token_ids"].data_ptr(),
                                 c["expert_ids"].data_ptr(), c["num_tokens_post_padded"].data_ptr(), c["top_k"],
                                 c["block_m"], c["out"].data_ptr(), torch.cuda.current_stream().cuda_stream,
                                 num_tokens=20, sorted_token_ids_capacity=c["sorted_token_ids"].numel(),
                                 expert_ids_capacity=c["expert_ids"].numel())


@pytest.mark.parametrize("scheme", [dict(bits=8), dict(group_size=128), dict(symmetric=False), dict(scale_is_bf16=False)])
def test_unsupported_schemes_are_rejected(scheme):
    words, scale = source(256, 512, 6)
    with pytest.raises(chordrt.ChordError) as excinfo:
        chordrt.w4a16_pack(words, scale, MMA, **scheme)
    assert excinfo.value.status is chordrt.Status.UNSUPPORTED


@pytest.mark.parametrize("n, k, word", [(200, 512, "128"), (256, 96, "64")])
def test_bad_shapes_are_rejected(n, k, word):
    w, s = checkpoint_weight(2, n, k, seed=3)
    with pytest.raises(chordrt.ChordError) as excinfo:
        chordrt.w4a16_pack(w, s, WGMMA)
    assert excinfo.value.status is chordrt.Status.INVALID_ARGUMENT
    assert word in excinfo.value.message


def test_zero_tokens_writes_nothing():
    n, k, e = 256, 512, 6
    w = packed(n, k, e, WGMMA)
    empty = torch.empty(0, dtype=torch.int32, device=DEV)
    npp = torch.zeros(1, dtype=torch.int32, device=DEV)
    out = chordrt.indexed_gemm(torch.empty((0, k), dtype=torch.bfloat16, device=DEV), w, empty, empty, npp, 8, 16)
    assert out.shape == (0, n)
