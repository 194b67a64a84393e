#!/usr/bin/env python3
"""W4A16 indexed MoE GEMMs (vLLM routing): chordrt vs torch._grouped_mm on BF16 weights, against same-run ceilings.

Kimi K2 (384 experts, top-8), both projections, three cases:
  EP8 prefill: 48 local experts (expert map, rank 0), T tokens in the step (about T routes land locally),
               gate_up N=4096 K=7168, down N=7168 K=2048, W4a16Layout.WGMMA_K64;
  TP8 prefill: all 384 experts, gate_up N=512 K=7168, down N=7168 K=256 (8T routes), WGMMA_K64;
  EP8 decode:  20 / 50 tokens whose routes all land on rank 0's 48 experts (160 / 400 routes; moe_align
               with the deployment's 384 experts and expert map), W4a16Layout.MMA.
Two other public MoE shapes (different hidden size, intermediate size and expert count), prefill on WGMMA_K64,
not in the default --cases (name them: "Qwen3-235B-A22B:EP8/prefill,Qwen3-30B-A3B:TP1/prefill"):
  Qwen3-235B-A22B EP8: 16 of 128 experts (expert map), top-8, gate_up N=3072 K=4096, down N=4096 K=1536;
  Qwen3-30B-A3B TP1:   all 128 experts on one GPU, top-8, gate_up N=1536 K=2048, down N=2048 K=768.
Per point: routing = chordrt.moe_align(topk_ids, block_size=indexed_block_m(layout, experts, N, K, routes
expected locally)); gate_up runs on a [T, K] with top_k 8, down on a [8T, K] with the same routing and
top_k 1. Median µs over CUDA-graph replays that rotate input sets (activations, routing, outputs) and
weight sets (disjoint expert slices of a generated pool, so the weights stream from HBM, not L2);
TFLOP/s = 2 * local routes * N * K; bytes = packed weights (N*K/2) and scales (N*K/16) of the touched
experts + distinct activation rows read + output rows written (local routes only), both averaged over
the input sets; fractions of the same run's dense BF16 GEMM rate and streaming-read bandwidth; block_m
and the blocks moe_align produced (live: expert id >= 0) next to the heuristic's expected count.
Baseline on the same weights dequantized to BF16, same process, graph-captured: torch._grouped_mm over
the local routes grouped by expert (the permuted activation matrix and offs are built outside the graph:
only the grouped GEMM is timed). Accuracy: relative Frobenius error / cosine vs an FP32 reference on the
first set, over the written rows (at most ACCURACY_ROWS routes, spread over the experts), for chordrt and
for the baseline. Every point is judged against its goal (w4a16_goals.indexed_goal: issue 15 for prefill,
issue 16 for decode; the row's "goal" field).
Peer column (when `import humming` works: Humming, the W4A16 MoE library Chord is derived from; the bench
imports the installed package, nothing of it is copied here; the code it shares with grouped_bench.py is in
humming_peer.py): the same checkpoint tensors of each weight set converted by Humming itself as
HummingLayer.transform() does (CompressedTensorsWeightSchema(pack-quantized, int4, group 32,
symmetric).convert_humming(), prepare_layer_config, prepare_fp16_e8m0_scale, transform_humming_tensors);
its config from its own heuristics, humming.tune.get_heuristics_config(layer, shape_m=the routes expected locally
(the number chordrt's indexed_block_m gets), gemm_type="indexed"); vLLM routing at that config's block_shape[0]
built over the local experts only (see HummingPeer: its kernel has no check for expert id -1); each point calls
humming.forward.humming_forward on the same input sets, outputs and weight-set rotation, its kernels compiled by
an untimed first call, timed with the same CUDA-graph replays as chordrt, and checked against the same FP32
reference rows. Rows get peer_us {"humming": µs}, vs_peer {"humming": chordrt_us / peer_us} (< 1: chordrt
faster), peer_error and peer_config (its tuning config, block size, routing blocks); without the package the
column is left out (one line says so).
Experiment column (--pregathered; issue 15, "what does the gather cost"): the same GEMM fed by TMA instead of the
gather: each set's routed rows are copied in slot order (sorted_token_ids; zero rows for padding slots) outside
the timed graph and grouped_contiguous runs on them with m_indices = the slot's block expert (-1 for padding),
output in slot order. CHORD_GROUPED_CONFIG and CHORD_INDEXED_CONFIG must force the same tile config (stages
included: an override keeps the stages the heuristic picked for its own block_m) and --block-m the block_m
(checked), so the two kernels differ only in the producer (one TMA thread vs 128 gathering threads) and the
epilogue's row lookup. Rows get pregathered_us, gather_us (torch's row gather into slot order, the cost a fused
permute would replace) and pregathered_max_diff (against the indexed output, same rows).
Usage: indexed_bench.py [--json FILE | --out FILE] [--quick] [--pregathered] [--cases EP8/prefill,TP8/prefill,EP8/decode
                        (,EP8/decode-wgmma: the decode points on the prefill kernel's WGMMA_K64 layout)]
                        [--projections gate_up,down] [--tokens 1024,...] [--decode-tokens 20,50] [--budget-s S]
                        [--no-baseline] [--no-peers]
       indexed_bench.py --profile "EP8,gate_up,prefill,2048"   (a few untimed calls, for ncu)
Without --json / --out the result goes to bench/results/indexed_bench-<device>-<date><letter>.json.
"""
import argparse
import math
import os
import pathlib
import statistics
import sys
import time
from dataclasses import dataclass

import torch

try:
    import chordrt
except ImportError:  # run from a checkout without PYTHONPATH=tools/python
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tools" / "python"))
    import chordrt
from bench_common import write_result, ceilings, default_out, graph_time_us, int_list, sets_for
from chordrt import moe_reference as mr
from humming_peer import (HUMMING_LOCKS, HUMMING_MISSING, announce_peer, heuristic_tuning, humming_call,
                          humming_weight_sets, humming_weights, measure_peer, peers_field)
import w4a16_goals
from w4a16_weights import checkpoint_pool, dequant_bf16

KIMI = w4a16_goals.KIMI
TOP_K = 8  # Kimi K2's
PREFILL_TOKENS = (1024, 2048, 4096, 8192, 16384)
DECODE_TOKENS = (20, 50)
INPUT_SETS = 3  # at least; rounded up to a multiple of the weight sets
ACCURACY_ROWS = 8192  # routes checked against the FP32 reference (the largest points have 131072)
BASELINE = "torch._grouped_mm"
BASELINE_TIMING = ("torch._grouped_mm alone, on the local routes' activation rows gathered by expert and offs = "
                   "cumulative routes per expert; the gather and the offs are built outside the timed graph and "
                   "the result is left in expert order (no scatter back to route order)")
PEER_TIMING = ("humming.forward.humming_forward alone (indexed GEMM, its heuristic config for the routes expected "
               "locally) on the same input sets, outputs and weight-set rotation as chordrt, with vLLM routing over "
               "the local experts only (no -1 expert blocks) at the config's block_shape[0], built outside the timed "
               "graph; its kernels compiled by an untimed first call")
HUMMING_COMPUTE = {"gemm_type": "indexed"}


@dataclass(frozen=True)
class Case:
    parallel: str  # "EP8" / "TP8" / "TP1"
    phase: str  # "prefill" / "decode"
    experts: int  # on this GPU
    global_experts: int  # moe_align's num_experts
    expert_map: bool  # global -> local map of rank 0 (non-local routes are skipped)
    routed_experts: int  # topk_ids are drawn over global experts [0, routed_experts): rank 0's are [0, experts)
    layout: str  # chordrt.W4a16Layout member name (the binding takes names)
    shapes: dict  # projection -> (N, K)
    model: str = KIMI
    top_k: int = TOP_K

    @property
    def key(self):
        # The decode points on the prefill kernel's layout are a case of their own (decode-wgmma); other models'
        # cases carry the model's name.
        return ("" if self.model == KIMI else f"{self.model}:") + f"{self.parallel}/{self.phase}" + (
            "-wgmma" if self.phase == "decode" and self.layout != "MMA" else "")


EP_SHAPES = {"gate_up": (4096, 7168), "down": (7168, 2048)}
TP_SHAPES = {"gate_up": (512, 7168), "down": (7168, 256)}
CASES = (
    Case("EP8", "prefill", 48, 384, True, 384, "WGMMA_K64", EP_SHAPES),
    Case("TP8", "prefill", 384, 384, False, 384, "WGMMA_K64", TP_SHAPES),
    # 160 / 400 routes uniformly over rank 0's 48 experts (a decode step sized by its local routes)
    Case("EP8", "decode", 48, 384, True, 48, "MMA", EP_SHAPES),
    # The same decode points through the WGMMA kernel (its own block_m from indexed_block_m): whether one
    # weight layout can serve decode as well as prefill.
    Case("EP8", "decode", 48, 384, True, 48, "WGMMA_K64", EP_SHAPES),
    # Other shapes (issue 15: not tuned to Kimi only): hidden 4096 / 2048, intermediate 1536 / 768, 128 experts.
    Case("EP8", "prefill", 16, 128, True, 128, "WGMMA_K64", {"gate_up": (3072, 4096), "down": (4096, 1536)},
         model="Qwen3-235B-A22B"),
    Case("TP1", "prefill", 128, 128, False, 128, "WGMMA_K64", {"gate_up": (1536, 2048), "down": (2048, 768)},
         model="Qwen3-30B-A3B"),
)
DEFAULT_CASES = ("EP8/prefill", "TP8/prefill", "EP8/decode")


def expected_blocks(experts, routed_rows, block_m):
    """heuristics::expected_indexed_blocks: experts * E[ceil(Binomial(routed_rows, 1/experts) / block_m)],
    the count indexed_block_m optimizes (here to set next to the blocks moe_align actually produced)."""
    if routed_rows <= 0:
        return 0.0
    if experts == 1:
        return float(-(-routed_rows // block_m))
    p = 1.0 / experts
    mean, sigma = routed_rows * p, math.sqrt(routed_rows * p * (1 - p))
    lo, hi = max(0, int(mean - 12 * sigma)), min(routed_rows, int(mean + 12 * sigma) + 16)
    log_n, log_p, log_q = math.lgamma(routed_rows + 1), math.log(p), math.log1p(-p)
    blocks = sum(math.exp(log_n - math.lgamma(c + 1) - math.lgamma(routed_rows - c + 1) + c * log_p +
                          (routed_rows - c) * log_q) * -(-c // block_m) for c in range(lo, hi + 1))
    return experts * blocks


def weight_bytes_per_expert(n, k):
    return n * k // 2 + n * (k // 32) * 2


class RouteSet:
    """One input set: activations, the routing moe_align built for them, the output, and the local routes
    grouped by expert (ascending route id within an expert, as moe_align orders them)."""

    def __init__(self, case, tokens, call_top_k, n, k, block_m, emap, seed):
        dev = torch.device("cuda")
        ids, _ = mr.random_routing(torch, tokens, case.top_k, case.routed_experts, dev, seed=seed)
        self.sorted_ids, self.expert_ids, self.post = chordrt.moe_align(
            ids, num_experts=case.global_experts, block_size=block_m, expert_map=emap)
        local = (emap.long()[ids.long()] if emap is not None else ids.long()).reshape(-1)
        self.local_ids = local.view(ids.shape).to(torch.int32)  # [tokens, top_k] local expert ids, -1 elsewhere
        routes = torch.nonzero(local >= 0).flatten()
        self.route_experts, order = torch.sort(local[routes], stable=True)
        self.routes = routes[order]
        self.rows = self.routes // call_top_k  # the row of a each route reads
        counts = torch.bincount(self.route_experts, minlength=case.experts)
        self.offs = torch.cumsum(counts, 0, dtype=torch.int32)
        # gate_up: a = the step's tokens; down: a = one row per route (M * top_k rows, read with top_k 1)
        self.a = torch.randn((tokens * case.top_k // call_top_k, k), dtype=torch.bfloat16, device=dev)
        self.out = torch.empty((tokens * case.top_k, n), dtype=torch.bfloat16, device=dev)
        used = int(self.post.item()) // block_m  # blocks the routing holds, non-local experts' included
        live = int((self.expert_ids[:used] >= 0).sum().item())
        self.local_routes = self.routes.numel()
        self.touched_experts = int((counts > 0).sum().item())
        self.distinct_rows = torch.unique(self.rows).numel()
        self.live_blocks, self.nonlocal_blocks = live, used - live
        self.block_m, self.call_top_k = block_m, call_top_k

    def slot_ordered(self, n):
        """--pregathered: the routed rows in slot order (zeros for padding slots), the slots' expert ids (-1 for
        padding and for blocks of experts not on this rank), a [slots, n] output, the valid slots and their routes."""
        slots = int(self.post.item())
        ids = self.sorted_ids[:slots].long()
        block_expert = self.expert_ids[torch.arange(slots, device=ids.device) // self.block_m]
        valid = (ids < self.out.shape[0]) & (block_expert >= 0)  # not padding, not another rank's expert
        a_slot = torch.zeros((slots, self.a.shape[1]), dtype=self.a.dtype, device=self.a.device)
        a_slot[valid] = self.a[ids[valid] // self.call_top_k]
        m_idx = torch.where(valid, block_expert, torch.full_like(block_expert, -1)).to(torch.int32)
        out_slot = torch.empty((slots, n), dtype=self.out.dtype, device=self.out.device)
        return a_slot, m_idx, out_slot, valid, ids


class Point:
    """The input sets of one (case, projection, tokens) point, their calls and their byte / flop counts."""

    def __init__(self, case, proj, tokens, n_sets, block_m=None):
        n, k = case.shapes[proj]
        self.n, self.k = n, k
        self.top_k = case.top_k if proj == "gate_up" else 1
        # Routes expected on this GPU's experts: what a server knows before routing
        self.routed_rows = tokens * case.top_k * case.experts // case.routed_experts
        self.block_m = block_m or chordrt.indexed_block_m(case.layout, case.experts, n, k, self.routed_rows)
        emap = (mr.contiguous_expert_map(torch, case.global_experts, case.experts, 0, torch.device("cuda"))
                if case.expert_map else None)
        # Seed s for every point: both projections of a step see the same routing
        self.sets = [RouteSet(case, tokens, self.top_k, n, k, self.block_m, emap, seed=s) for s in range(n_sets)]
        per_set = [s.touched_experts * weight_bytes_per_expert(n, k) + s.distinct_rows * k * 2 +
                   s.local_routes * n * 2 for s in self.sets]
        self.bytes = statistics.mean(per_set)
        self.local_routes = statistics.mean(s.local_routes for s in self.sets)
        self.flops = 2 * self.local_routes * n * k
        # Stream-K scratch, as a serving engine would pass it (the calls of a graph run in order on one stream,
        # so they share it); CHORD_INDEXED_CONFIG=stream_k=0 measures the static schedule with it present.
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        self.workspace = torch.empty(chordrt.indexed_gemm_workspace_size(self.block_m, sms), dtype=torch.uint8,
                                     device="cuda")

    def mean(self, attr):
        return statistics.mean(getattr(s, attr) for s in self.sets)

    def chord_call(self, i, weight):
        s = self.sets[i]
        return lambda: chordrt.indexed_gemm(s.a, weight, s.sorted_ids, s.expert_ids, s.post, self.top_k,
                                            self.block_m, out=s.out, workspace=self.workspace)


def local_routing(local_ids, experts, block_m):
    """vLLM's moe_align_block_size contract over local expert ids, in plain torch (untimed): routes whose id is
    outside [0, experts) are dropped; each expert's routes in ascending route id, padded to a multiple of
    block_m with the sentinel local_ids.numel(); one expert id per block, all in [0, experts); the buffers
    hold exactly num_tokens_post_padded entries (at least one block, so no pointer is null)."""
    flat = local_ids.reshape(-1).long()
    kept = torch.nonzero((flat >= 0) & (flat < experts)).flatten()  # ascending route ids
    route_experts, order = torch.sort(flat[kept], stable=True)
    routes = kept[order]
    counts = torch.bincount(route_experts, minlength=experts)
    blocks = (counts + block_m - 1) // block_m
    slot0 = (torch.cumsum(blocks, 0) - blocks) * block_m  # each expert's first slot
    first = torch.cumsum(counts, 0) - counts  # each expert's first position in routes
    rank = torch.arange(routes.numel(), device=flat.device) - first[route_experts]
    total = int(blocks.sum().item()) * block_m
    sorted_ids = torch.full((max(total, block_m),), flat.numel(), dtype=torch.int32, device=flat.device)
    sorted_ids[slot0[route_experts] + rank] = routes.to(torch.int32)
    expert_ids = torch.repeat_interleave(torch.arange(experts, dtype=torch.int32, device=flat.device), blocks)
    if expert_ids.numel() == 0:
        expert_ids = torch.zeros(1, dtype=torch.int32, device=flat.device)
    post = torch.tensor([total], dtype=torch.int32, device=flat.device)
    return sorted_ids, expert_ids, post, total // block_m


class HummingPeer:
    """Humming on one point: its heuristic config, routing at that config's block size, its calls.

    Routing: chordrt.moe_align under the deployment's expert map writes expert id -1 for the blocks of
    non-local experts (vLLM's contract), and Humming's indexed kernel has no check for -1 (vLLM's Humming
    integration routes with ignore_invalid_experts=True instead). So the topk ids are mapped to local ids (-1
    for routes to other GPUs) and routed over the local experts only (local_routing: every block names a local
    expert and holds only local routes: chordrt's routing less the -1 blocks, at Humming's block size). Built
    in torch rather than by chordrt.moe_align: Humming's block sizes and a map-less 48-expert routing are no
    prewarmed moe_align kernel (tools/gpu_run.sh runs the benchmarks with CHORD_JIT_STRICT=1), and the peer's
    inputs then owe nothing to the library it is compared with. Routing is outside the timing, as chordrt's."""

    def __init__(self, case, point, weights):
        self.point = point
        self.weights = weights  # [(LayerConfig, tensors)] per weight set
        config = weights[0][0]
        # Its own heuristics, for the routes this GPU's experts are expected to receive (what chordrt's
        # indexed_block_m is given). A JSON copy of the dict Humming lru-caches: what humming_forward makes of it
        self.shape_m = point.routed_rows
        self.tuning = heuristic_tuning(config, self.shape_m, HUMMING_COMPUTE["gemm_type"])
        self.block_m = int(self.tuning["block_shape"][0])
        dev = point.sets[0].a.device
        self.locks = torch.zeros(HUMMING_LOCKS, dtype=torch.int32, device=dev)
        self.routing, live = [], []
        for s in point.sets:
            sorted_ids, expert_ids, post, used = local_routing(s.local_ids, case.experts, self.block_m)
            routed = int((sorted_ids < s.local_ids.numel()).sum().item())
            if routed != s.local_routes:
                raise RuntimeError(f"humming routing: {routed} routes in the blocks, expected {s.local_routes} local")
            self.routing.append((sorted_ids, expert_ids, post))
            live.append(used)
        self.blocks = statistics.mean(live)

    def call(self, i):
        s, (sorted_ids, expert_ids, post) = self.point.sets[i], self.routing[i]
        config, t = self.weights[i % len(self.weights)]
        return humming_call(config, t, s.a, s.out, HUMMING_COMPUTE, self.tuning, self.locks, sorted_ids=sorted_ids,
                            expert_ids=expert_ids, num_tokens_padded=post, top_k=self.point.top_k)

    def describe(self):
        return {"shape_m": self.shape_m, "block_m": self.block_m, "blocks": self.blocks,
                "b_dtype": str(self.weights[0][0].b_dtype), "tuning": self.tuning}


def accuracy_picks(s):
    """Positions (in expert order) of at most ACCURACY_ROWS routes of set s, evenly spread over all experts."""
    step = max(1, -(-s.local_routes // ACCURACY_ROWS))
    return torch.arange(0, s.local_routes, step, device=s.routes.device)


def reference(s, picks, words, scale, n):
    """float32 a[row] @ dequant(W_e)^T of the picked routes (in expert order), TF32 off."""
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        want = torch.empty((picks.numel(), n), dtype=torch.float32, device=picks.device)
        experts, counts = torch.unique_consecutive(s.route_experts[picks], return_counts=True)
        start = 0
        for e, c in zip(experts.tolist(), counts.tolist()):
            w = mr.dequantize(torch, "int4", words[e], scale[e], torch.float32)
            want[start:start + c] = s.a[s.rows[picks[start:start + c]]].float() @ w.T
            start += c
        return want
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def grouped_mm(a_perm, w_bf16, offs):
    return torch._grouped_mm(a_perm, w_bf16.transpose(-2, -1), offs=offs)  # b [E, K, N] with K contiguous


def baseline_available(a_perm, w_bf16, offs):
    """Whether this torch build can run the baseline (a probe call, so it does not fail mid-capture)."""
    if not hasattr(torch, "_grouped_mm"):
        print(f"{BASELINE} unavailable in torch {torch.__version__}", flush=True)
        return False
    try:
        grouped_mm(a_perm, w_bf16, offs)
        torch.cuda.synchronize()
        return True
    except (RuntimeError, TypeError) as err:
        print(f"{BASELINE} baseline unavailable: {err}", flush=True)
        return False


def weight_sets_for(experts, n, k, quick):
    return max(1 if quick else 2, sets_for(experts * weight_bytes_per_expert(n, k), limit=4))


def peer_humming(case, point, hweights, want, picks, n_isets, replays, rounds, row):
    """Humming's time, error and config on the point's sets into row (the column is left out if it fails)."""
    s0 = point.sets[0]
    return measure_peer(row, lambda: HummingPeer(case, point, hweights), s0.out,
                        lambda: mr.error_stats(torch, s0.out[s0.routes[picks]].float(), want), n_isets, replays,
                        rounds)


def bench_point(case, proj, tokens, packed, wsets, bf16, n_isets, ceil, replays, rounds, block_m=None,
                hweights=None, pregathered=False):
    n_wsets = len(wsets)
    point = Point(case, proj, tokens, n_isets, block_m)
    torch.cuda.synchronize()
    us = graph_time_us([point.chord_call(i, packed[i % n_wsets]) for i in range(n_isets)], replays, rounds)
    row = {
        "case": case.key, "model": case.model, "parallel": case.parallel, "phase": case.phase, "layout": case.layout,
        "experts": case.experts, "global_experts": case.global_experts, "expert_map": case.expert_map,
        "routed_experts": case.routed_experts,
        "projection": proj, "n": point.n, "k": point.k, "tokens": tokens, "top_k": point.top_k,
        "a_rows": point.sets[0].a.shape[0], "routed_rows": point.routed_rows, "local_routes": point.local_routes,
        "touched_experts": point.mean("touched_experts"), "block_m": point.block_m,
        "expected_blocks": expected_blocks(case.experts, point.routed_rows, point.block_m),
        "actual_blocks": point.mean("live_blocks"), "nonlocal_blocks": point.mean("nonlocal_blocks"),
        "weight_sets": n_wsets, "input_sets": n_isets, "bytes": point.bytes, "flops": point.flops,
        "chordrt_us": us, "chordrt_tflops": point.flops / us / 1e6, "chordrt_tbps": point.bytes / us / 1e6,
    }
    row["block_fill"] = point.local_routes / (row["actual_blocks"] * point.block_m)  # routes / padded slots
    row["fraction_of_dense_bf16"] = row["chordrt_tflops"] / ceil["dense_bf16_tflops"]
    row["fraction_of_stream_read"] = row["chordrt_tbps"] / ceil["stream_read_tbps"]
    # accuracy on the first set (weights of set 0), written rows only
    s0 = point.sets[0]
    s0.out.fill_(float("nan"))
    point.chord_call(0, packed[0])()
    picks = accuracy_picks(s0)
    want = reference(s0, picks, wsets[0][0], wsets[0][1], point.n)
    row["accuracy_rows"] = picks.numel()
    row["chordrt_error"] = mr.error_stats(torch, s0.out[s0.routes[picks]].float(), want)
    if bf16 is not None:
        a_perm = [s.a[s.rows] for s in point.sets]
        if baseline_available(a_perm[0], bf16[0], s0.offs):
            row["baseline"] = BASELINE
            row["baseline_us"] = graph_time_us(
                [lambda i=i: grouped_mm(a_perm[i], bf16[i % n_wsets], point.sets[i].offs) for i in range(n_isets)],
                replays, rounds)
            row["speedup_vs_baseline"] = row["baseline_us"] / us
            row["baseline_error"] = mr.error_stats(torch, grouped_mm(a_perm[0], bf16[0], s0.offs)[picks].float(),
                                                   want)
    if pregathered:
        forced = dict(kv.split("=") for kv in os.environ.get("CHORD_GROUPED_CONFIG", "").split(",") if "=" in kv)
        if int(forced.get("block_m", -1)) != point.block_m:
            raise SystemExit(f"--pregathered needs CHORD_GROUPED_CONFIG's block_m = the point's ({point.block_m}) "
                             "and the same tile config in CHORD_INDEXED_CONFIG")
        slot_sets = [s.slot_ordered(point.n) for s in point.sets]
        calls = [lambda i=i: chordrt.grouped_contiguous(slot_sets[i][0], packed[i % n_wsets], slot_sets[i][1],
                                                        out=slot_sets[i][2]) for i in range(n_isets)]
        row["pregathered_us"] = graph_time_us(calls, replays, rounds)
        # the source row of every slot (padding slots read row 0), built outside the timed graph
        sources = [torch.where(ss[3], ss[4] // s.call_top_k, 0) for s, ss in zip(point.sets, slot_sets)]
        row["gather_us"] = graph_time_us([lambda s=s, r=r: s.a.index_select(0, r) for s, r in zip(point.sets, sources)],
                                         replays, rounds)
        a_slot, m_idx, out_slot, valid, ids = slot_sets[0]
        chordrt.grouped_contiguous(a_slot, packed[0], m_idx, out=out_slot)
        s0.out.fill_(float("nan"))
        point.chord_call(0, packed[0])()
        row["pregathered_max_diff"] = float((out_slot[valid].float() - s0.out[ids[valid]].float()).abs().max())
        print(f"  pregathered (TMA) {row['pregathered_us']:8.1f} us ({row['pregathered_us'] / us:.3f} of indexed), "
              f"torch gather {row['gather_us']:6.1f} us, max |diff| {row['pregathered_max_diff']:.3g}", flush=True)
    peer_text = "" if hweights is None else peer_humming(case, point, hweights, want, picks, n_isets, replays,
                                                          rounds, row)
    row["goal"] = w4a16_goals.indexed_goal(row)
    model = "" if case.model == KIMI else case.model + " "
    print(f"{model}{case.parallel} {case.phase:<7} {proj:<7} {tokens:>5} tok bm {point.block_m:>3} "
          f"blocks {row['actual_blocks']:7.1f}/{row['expected_blocks']:7.1f} {us:8.1f} us "
          f"{row['chordrt_tflops']:6.1f} TFLOP/s ({100 * row['fraction_of_dense_bf16']:3.0f}% dense) "
          f"{row['chordrt_tbps']:5.2f} TB/s ({100 * row['fraction_of_stream_read']:3.0f}% read)  "
          f"{row.get('baseline', 'baseline')} {row.get('baseline_us', float('nan')):8.1f} us "
          f"x{row.get('speedup_vs_baseline', float('nan')):5.2f}  "
          f"err {row['chordrt_error']['rel_err']:.2e}{peer_text}  goal {w4a16_goals.describe(row['goal'])}", flush=True)
    return row


def bench_group(case, proj, tokens_list, ceil, args, deadline, skipped):
    """All points of one (case, projection): a weight pool generated for them, packed, and its BF16 copy."""
    n, k = case.shapes[proj]
    n_wsets = weight_sets_for(case.experts, n, k, args.quick)
    n_isets = -(-max(INPUT_SETS, n_wsets) // n_wsets) * n_wsets
    words, scale = checkpoint_pool(n, k, case.experts * n_wsets, seed=1 + n + k)
    e = case.experts
    wsets = [(words[s * e:(s + 1) * e], scale[s * e:(s + 1) * e]) for s in range(n_wsets)]
    packed = [chordrt.w4a16_pack(w, s, case.layout) for w, s in wsets]
    bf16 = None if args.no_baseline else [dequant_bf16(w, s) for w, s in wsets]
    hweights = None if args.no_peers else humming_weight_sets(wsets, n, k, f"{case.parallel} {case.phase} {proj}")
    torch.cuda.synchronize()
    replays, rounds = (20, 5) if args.quick else (30, 7)
    rows = []
    for tokens in tokens_list:
        for block_m in args.block_m or [None]:  # None: the heuristic's
            label = f"{case.key} {proj} {tokens}" + (f" block_m {block_m}" if block_m else "")
            if deadline is not None and time.monotonic() > deadline:
                skipped.append(label)
                continue
            try:
                row = bench_point(case, proj, tokens, packed, wsets, bf16, n_isets, ceil, replays, rounds, block_m,
                                  hweights, args.pregathered)
            except chordrt.ChordError as e:
                # A forced config (CHORD_INDEXED_CONFIG) this shape cannot take: skip the point, keep the sweep.
                if "CHORD_INDEXED_CONFIG" not in str(e):
                    raise
                print(f"{label}: skipped: {e}", flush=True)
                skipped.append(f"{label} (config rejected)")
                torch.cuda.synchronize()
                continue
            row["block_m_forced"] = block_m is not None
            rows.append(row)
        torch.cuda.empty_cache()  # the next point's sets (up to ~10 GB at 16384 tokens) start from a clean pool
    return rows


def find_case(parallel, phase):
    """The case of a --profile spec: PARALLEL is EPx / TPx (Kimi K2) or MODEL:EPx."""
    for case in CASES:
        if case.key.lower() == f"{parallel}/{phase}".lower():
            return case
    raise SystemExit(f"no case {parallel}/{phase} (have {', '.join(c.key for c in CASES)})")


def profile(spec, peer):
    """Six untimed chordrt calls of one point, then (peer) six of Humming's on the same inputs."""
    parallel, proj, phase, tokens = spec.split(",")
    case = find_case(parallel, phase)
    n, k = case.shapes[proj]
    words, scale = checkpoint_pool(n, k, case.experts, seed=1 + n + k)
    w = chordrt.w4a16_pack(words, scale, case.layout)
    point = Point(case, proj, int(tokens), 1)
    for _ in range(6):
        point.chord_call(0, w)()
    if peer and HUMMING_MISSING is None:
        call = HummingPeer(case, point, [humming_weights(words, scale, n, k)]).call(0)
        for _ in range(6):
            call()
    torch.cuda.synchronize()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", "--out", dest="out", help="result file (default: bench/results/indexed_bench-...)")
    ap.add_argument("--profile", help="[MODEL:]EPx|TPx,PROJECTION,PHASE,TOKENS: run that case a few times, untimed")
    ap.add_argument("--quick", action="store_true", help="fewer replays, one weight set")
    ap.add_argument("--cases", default=",".join(DEFAULT_CASES),
                    help=f"comma-separated subset of cases ({', '.join(c.key for c in CASES)})")
    ap.add_argument("--projections", default="gate_up,down", help="comma-separated subset of gate_up,down")
    ap.add_argument("--tokens", default=",".join(map(str, PREFILL_TOKENS)), help="prefill tokens in the step")
    ap.add_argument("--decode-tokens", default=",".join(map(str, DECODE_TOKENS)), help="decode tokens per GPU")
    ap.add_argument("--budget-s", type=float, default=200,
                    help="wall-clock budget in seconds (0 = none): points past it are skipped and listed")
    ap.add_argument("--no-baseline", action="store_true", help="skip the PyTorch baseline")
    ap.add_argument("--no-peers", action="store_true", help="skip the peer column (Humming) even when installed")
    ap.add_argument("--block-m", type=int_list, default=None,
                    help="sweep: run every point at each of these block sizes instead of the heuristic's")
    ap.add_argument("--pregathered", action="store_true",
                    help="also time the same GEMM on the rows pre-gathered in slot order, fed by TMA (see above)")
    args = ap.parse_args()
    torch.manual_seed(0)
    if args.profile:
        return profile(args.profile, not args.no_peers)
    start = time.monotonic()
    deadline = start + args.budget_s if args.budget_s > 0 else None
    by_key = {c.key: c for c in CASES}
    cases = [c for c in args.cases.split(",") if c]
    projections = [p for p in args.projections.split(",") if p]
    for c in cases:
        if c not in by_key:
            ap.error(f"unknown case {c!r} ({', '.join(by_key)})")
    for p in projections:
        if p not in EP_SHAPES:
            ap.error(f"unknown projection {p!r} (gate_up, down)")
    tokens_for = {"prefill": int_list(args.tokens), "decode": int_list(args.decode_tokens)}
    out_path = pathlib.Path(args.out) if args.out else default_out("indexed_bench")
    ceil = ceilings()
    print(f"ceilings: copy {ceil['copy_tbps']:.2f} TB/s, stream read {ceil['stream_read_tbps']:.2f} TB/s, "
          f"dense BF16 {ceil['dense_bf16_tflops']:.0f} TFLOP/s", flush=True)
    announce_peer(args.no_peers)
    rows, skipped = [], []
    for key in cases:
        case = by_key[key]
        for proj in projections:
            if deadline is not None and time.monotonic() > deadline:
                skipped.append(f"{case.key} {proj} (all points)")
                continue
            rows += bench_group(case, proj, tokens_for[case.phase], ceil, args, deadline, skipped)
            torch.cuda.empty_cache()  # the group's pool, packed weights and BF16 copies are gone
    judged = [r for r in rows if r["goal"]["met"] is not None]
    print(f"goals: {sum(r['goal']['met'] for r in judged)}/{len(judged)} points met" +
          (f"; skipped (budget): {', '.join(skipped)}" if skipped else ""))
    write_result(
        out_path, args, ceil, start, rows, skipped,
        cases={c.key: {"model": c.model, "experts": c.experts, "global_experts": c.global_experts,
                       "expert_map": c.expert_map, "layout": c.layout, "top_k": c.top_k, "shapes": c.shapes}
               for c in CASES},
        chord_published=[{"case": f"{p}/prefill", "projection": proj, "us": t}
                         for (p, proj), t in w4a16_goals.CHORD_INDEXED.items()],
        baseline_timing=BASELINE_TIMING,
        peers=peers_field(args.no_peers, PEER_TIMING),
    )


if __name__ == "__main__":
    main()
