#!/usr/bin/env python3
"""W4A16 grouped MoE GEMMs on the GPU: chordrt vs torch._grouped_mm on BF16 weights, against ceilings of the same run.

Kimi K2 (384 experts) at EP8 / EP16 / EP32 (48 / 24 / 12 local experts), both expert projections (gate_up
N=4096 K=7168, down N=7168 K=2048), both modes: contiguous (prefill; every expert the same aligned row
count, 128 / 256 / 512) and masked (decode; every expert the same token count, 8 / 16 / 32 / 64, max_m
the next multiple of 128, expected_m = the count). `--model` measures another public MoE shape the same way
(issue 15's "not tuned to Kimi only"): Qwen3-235B-A22B (128 experts, gate_up N=3072 K=4096, down N=4096 K=1536)
or Qwen3-30B-A3B (128 experts, gate_up N=1536 K=2048, down N=2048 K=768), EP degrees as given (16 / 8 local
experts at EP8 / EP16); its rows carry "model". Per point: median µs over CUDA-graph replays that
rotate input sets (activations, routing, outputs) and weight sets (different experts of a generated
pool, so the weights stream from HBM, not L2); TFLOP/s = 2 * valid rows * N * K; bytes = packed weights
(N*K/2) and scales (N*K/16) of the touched experts + activation rows read + output rows written (valid
rows only); fractions of the same run's dense BF16 GEMM rate and streaming-read bandwidth. Baseline on
the same weights dequantized to BF16, same process, graph-captured: torch._grouped_mm (contiguous: 2-D
rows with offs = cumulative row counts; masked: the 3-D batched form over [G, max_m, K], torch.bmm when
that is unavailable). Accuracy: relative Frobenius error / cosine vs an FP32 reference on the first set,
for chordrt and for the baseline. Every point is judged against issue 15's goal (w4a16_goals.grouped_goal; the
row's "goal" field). Every call brings a stream-K workspace (chordrt.grouped_workspace_size), as an engine
would; the contiguous heuristics use it for a long last wave, masked calls only under CHORD_GROUPED_CONFIG=stream_k=1.
Peer column (when `import humming` works: Humming, the W4A16 MoE library Chord is derived from; the bench imports
the installed package, nothing of it is copied here; the code it shares with indexed_bench.py is in
humming_peer.py): the same checkpoint tensors of each weight set converted by Humming itself as
HummingLayer.transform() does (CompressedTensorsWeightSchema(pack-quantized, int4, group 32,
symmetric).convert_humming(), prepare_layer_config, prepare_fp16_e8m0_scale, transform_humming_tensors), once per
(EP, projection) for both modes; its grouped GEMMs through humming.forward.humming_forward with top_k 1 and no
sorted_ids: contiguous = compute_config {"gemm_type": "grouped_contiguous"} on the same [E*rows, K] activations
with expert_layout = each expert's first row [E+1] (int32: 0, rows, ..., E*rows), masked = {"gemm_type":
"grouped_masked"} on the same [E*max_m, K] activations (expert e's rows start at e*max_m: Humming takes max_m as
input rows / E) with expert_layout = tokens per expert [E] (the int32 tensor chordrt's masked call reads); its
config from its own heuristics, humming.tune.get_heuristics_config(layer, shape_m=the point's valid rows (E *
rows or tokens per expert), gemm_type=that gemm type) (see GroupedHummingPeer for why not E*max_m when masked);
each point runs on the same input sets, outputs and weight-set rotation, its kernels compiled by an untimed first
call, timed with the same CUDA-graph replays as chordrt, and checked against the same FP32 reference rows. Rows
get peer_us {"humming": µs}, vs_peer {"humming": chordrt_us / peer_us} (< 1: chordrt faster), peer_error and
peer_config (gemm type, shape_m, its tuning config and block size); a point where it fails gets peer_failed and
the run goes on; without the package the column is left out (one line says so).
Usage: grouped_bench.py [--json FILE | --out FILE] [--model NAME] [--quick] [--eps 8,16,32] [--projections gate_up,down]
                        [--modes contiguous,masked] [--rows 128,256,512] [--tokens 8,16,32,64] [--budget-s S]
                        [--no-baseline] [--no-peers]
       grouped_bench.py --profile "EP8,gate_up,masked,16"   (a few untimed calls, for ncu)
Without --json / --out the result goes to bench/results/grouped_bench-<device>-<date><letter>.json.
"""
import argparse
import pathlib
import sys
import time

import torch

try:
    import chordrt
except ImportError:  # run from a checkout without PYTHONPATH=tools/python
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tools" / "python"))
    import chordrt
from bench_common import write_result, ceilings, default_out, graph_time_us, int_list, sets_for
from chordrt import moe_reference as mr
from humming_peer import (HUMMING_LOCKS, announce_peer, heuristic_tuning, humming_call, humming_weight_sets,
                          measure_peer, peers_field)
import w4a16_goals
from w4a16_weights import checkpoint_pool, dequant_bf16

EPS = (8, 16, 32)
# The measured MoE shapes: global experts and name -> (N, K) of each projection (gate_up N = 2 x intermediate).
MODELS = {
    w4a16_goals.KIMI: (384, {"gate_up": (4096, 7168), "down": (7168, 2048)}),
    "Qwen3-235B-A22B": (128, {"gate_up": (3072, 4096), "down": (4096, 1536)}),
    "Qwen3-30B-A3B": (128, {"gate_up": (1536, 2048), "down": (2048, 768)}),
}
PROJECTIONS = MODELS[w4a16_goals.KIMI][1]  # the projection names (every model has both)
MODES = ("contiguous", "masked")
LAYOUT = {"contiguous": "WGMMA_K64", "masked": "WGMMA_K128"}  # the W4a16Layout each GEMM reads
ROWS = (128, 256, 512)  # contiguous rows per expert
TOKENS = (8, 16, 32, 64)  # masked tokens per expert
POOL_EXPERTS = 96  # generated per projection: weight sets are disjoint slices of it
INPUT_SETS = 3  # at least; rounded up to a multiple of the weight sets
HUMMING_GEMM_TYPE = {"contiguous": "grouped_contiguous", "masked": "grouped_masked"}
PEER_TIMING = ("humming.forward.humming_forward alone (grouped_contiguous GEMM with expert_layout = expert first-row "
               "offsets [E+1], grouped_masked GEMM with expert_layout = tokens per expert [E] over the same E*max_m "
               "rows; its heuristic config for the point's valid rows) on the same input sets, outputs and "
               "weight-set rotation as chordrt; its kernels compiled by an untimed first call")


def reference_rows(a, words, scale, expert_rows):
    """float32 results of the valid rows: {expert: (row indices, a[rows] @ dequant(W_e)^T)}, TF32 off."""
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        out = {}
        for e, rows in expert_rows.items():
            w = mr.dequantize(torch, "int4", words[e], scale[e], torch.float32)
            out[e] = (rows, a[rows].float() @ w.T)
        return out
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def error_vs(ref, out2d):
    rows = torch.cat([r for r, _ in ref.values()])
    want = torch.cat([v for _, v in ref.values()])
    return mr.error_stats(torch, out2d[rows], want)


_WORKSPACE = []


def stream_k_workspace():
    """The calls' stream-K workspace (one: the timed calls run one after another on one stream), as an engine
    would pass it; the kernel uses it only where its configuration takes stream-K."""
    if not _WORKSPACE:
        sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
        _WORKSPACE.append(torch.empty(chordrt.grouped_workspace_size(sms), dtype=torch.uint8, device="cuda"))
    return _WORKSPACE[0]


class Point:
    """The input sets of one (mode, rows-or-tokens) point, their calls and their byte / flop counts."""

    def __init__(self, mode, experts, n, k, per_expert, n_sets):
        dev = torch.device("cuda")
        self.mode, self.experts, self.per_expert = mode, experts, per_expert
        self.sets = []
        if mode == "contiguous":
            self.max_m = None
            rows = experts * per_expert
            ids = torch.arange(experts, dtype=torch.int32, device=dev).repeat_interleave(per_expert)
            self.offs = torch.arange(1, experts + 1, dtype=torch.int32, device=dev) * per_expert
            for _ in range(n_sets):
                a = torch.randn((rows, k), device=dev).to(torch.bfloat16)
                self.sets.append((a, ids, torch.empty((rows, n), dtype=torch.bfloat16, device=dev)))
            self.valid_rows = rows
            self.expert_rows = {e: torch.arange(e * per_expert, (e + 1) * per_expert, device=dev)
                                for e in range(experts)}
        else:
            self.max_m = max(128, -(-per_expert // 128) * 128)
            mm = torch.full((experts,), per_expert, dtype=torch.int32, device=dev)
            for _ in range(n_sets):
                a = torch.randn((experts * self.max_m, k), device=dev).to(torch.bfloat16)
                self.sets.append((a, mm, torch.empty((experts * self.max_m, n), dtype=torch.bfloat16, device=dev)))
            self.valid_rows = experts * per_expert
            self.expert_rows = {e: torch.arange(e * self.max_m, e * self.max_m + per_expert, device=dev)
                                for e in range(experts)}
        weight_bytes = experts * (n * k // 2 + n * (k // 32) * 2)  # every expert has rows here
        self.bytes = weight_bytes + self.valid_rows * (k + n) * 2
        self.flops = 2 * self.valid_rows * n * k

    def chord_call(self, i, weight):
        a, routing, out = self.sets[i]
        ws = stream_k_workspace()
        if self.mode == "contiguous":
            return lambda: chordrt.grouped_contiguous(a, weight, routing, out=out, workspace=ws)
        return lambda: chordrt.grouped_masked(a, weight, routing, self.per_expert, out=out, workspace=ws)


class GroupedHummingPeer:
    """Humming's grouped GEMM on one point (humming/ops/gemm.py, csrc/launcher/tensor.h check_tensor_moe,
    include/humming/scheduler.cuh): the point's activations, outputs and weight-set rotation, top_k 1, no
    sorted_ids / expert_ids / num_tokens_padded.

    contiguous: gemm_type "grouped_contiguous", expert_layout = each expert's first row and the end, [E+1] int32
      (0, rows, 2 rows, ..., E * rows: its testing/data.py builds the same from token counts, int32 or int64);
    masked: gemm_type "grouped_masked", the same [E * max_m, K] input (its kernel starts expert e at row
      e * (input rows / E), and checks that E divides the rows), expert_layout = tokens per expert [E] int32: the
      very tensor chordrt's grouped_masked reads. Masked rows past an expert's tokens are read by neither check.
    The layout tensors are built outside the timed graph, as chordrt's routing is."""

    def __init__(self, point, weights):
        self.point = point
        self.weights = weights  # [(LayerConfig, tensors)] per weight set
        self.gemm_type = HUMMING_GEMM_TYPE[point.mode]
        self.compute = {"gemm_type": self.gemm_type}
        # shape_m for its heuristics: the point's valid rows, E * (rows or tokens per expert), in both modes.
        # Humming's SM90 heuristics read shape_m as the routed rows spread over the layer's experts
        # (DeviceHeuristics.get_expert_rows: a multinomial draw of shape_m rows over num_experts), and its kernel
        # tests (testing/runner.py prepare_kernels) pick their heuristic config with shape_m * top_k, the routed
        # rows, for every MoE gemm type, masked included; E * expert_max_tokens is only the masked input's row
        # count there (effective_shape_m), as E * max_m is here (it is also what its launcher would compare with
        # the ranges of a config list if the caller passed no valid_shape_m). The masked kernel walks only
        # ceil(tokens_e / block_m) tiles per expert: shape_m = E * max_m would size its tiles for 128+ rows per
        # expert where 8-64 are there. Contiguous: E * rows is also the input's row count. chordrt's masked call
        # is given the same number per expert (expected_m = the tokens per expert).
        self.shape_m = point.valid_rows
        self.tuning = heuristic_tuning(weights[0][0], self.shape_m, self.gemm_type)
        self.block_m = int(self.tuning["block_shape"][0])
        dev = point.sets[0][0].device
        self.locks = torch.zeros(HUMMING_LOCKS, dtype=torch.int32, device=dev)
        if point.mode == "contiguous":  # point.offs: cumulative rows [E] int32 (the baseline's offs)
            self.layouts = [torch.cat([torch.zeros(1, dtype=torch.int32, device=dev), point.offs])] * len(point.sets)
            if self.layouts[0][-1].item() != point.sets[0][0].shape[0]:
                raise RuntimeError("humming expert_layout: the last offset is not the input's row count")
        else:
            self.layouts = [routing for _, routing, _ in point.sets]  # tokens per expert [E] int32

    def call(self, i):
        a, _, out = self.point.sets[i]
        config, t = self.weights[i % len(self.weights)]
        # valid_shape_m: the rows it was tuned for (a single tuning config covers every m: no effect on the launch)
        return humming_call(config, t, a, out, self.compute, self.tuning, self.locks, expert_layout=self.layouts[i],
                            top_k=1, valid_shape_m=self.shape_m)

    def describe(self):
        e, per = self.point.experts, self.point.per_expert
        return {"gemm_type": self.gemm_type, "shape_m": self.shape_m, "block_m": self.block_m,
                "m_blocks": e * -(-per // self.block_m), "expert_layout": (
                    f"first-row offsets [{e + 1}] int32" if self.point.mode == "contiguous" else
                    f"tokens per expert [{e}] int32, input rows {e} x {self.point.max_m}"),
                "b_dtype": str(self.weights[0][0].b_dtype), "tuning": self.tuning}


class Baseline:
    """torch._grouped_mm (or torch.bmm for the masked form) on BF16 weights [E, N, K], graph-capturable."""

    def __init__(self, mode):
        self.mode = mode
        self.name = "torch._grouped_mm" if hasattr(torch, "_grouped_mm") else "torch.bmm"

    def run(self, point, a, w_bf16):
        wt = w_bf16.transpose(-2, -1)  # [E, K, N], K contiguous: the layout _grouped_mm wants for b
        if self.mode == "contiguous":
            return torch._grouped_mm(a, wt, offs=point.offs)
        a3 = a.view(w_bf16.shape[0], point.max_m, a.shape[1])
        if self.name == "torch._grouped_mm":
            return torch._grouped_mm(a3, wt).view(-1, wt.shape[2])
        return torch.bmm(a3, wt).view(-1, wt.shape[2])

    def probe(self, point, w_bf16):
        """Falls back (masked: bmm) or gives up (None) when this torch build cannot run the baseline."""
        a = point.sets[0][0]
        while True:
            try:
                self.run(point, a, w_bf16)
                torch.cuda.synchronize()
                return self
            except (RuntimeError, TypeError) as err:
                if self.mode == "masked" and self.name == "torch._grouped_mm":
                    print(f"torch._grouped_mm (3-D) unavailable, using torch.bmm: {err}", flush=True)
                    self.name = "torch.bmm"
                    continue
                print(f"{self.name} baseline unavailable: {err}", flush=True)
                return None


def weight_sets_for(experts, n, k, quick):
    per_set = experts * (n * k // 2 + n * (k // 32) * 2)
    return max(1 if quick else 2, min(sets_for(per_set, limit=4), POOL_EXPERTS // experts))


def peer_humming(point, hweights, ref, n_isets, replays, rounds, row):
    """Humming's time, error and config on the point's sets into row (the column is left out if it fails)."""
    out = point.sets[0][2]
    return measure_peer(row, lambda: GroupedHummingPeer(point, hweights), out, lambda: error_vs(ref, out.float()),
                        n_isets, replays, rounds)


def bench_group(model, ep, proj, pool, modes, rows_list, tokens_list, ceil, args, deadline, skipped):
    """All points of one (model, EP, projection): weight sets packed per mode, BF16 copies for the baseline,
    Humming's conversion of them (one for both modes: its layout does not depend on the gemm type)."""
    global_experts, projections = MODELS[model]
    n, k = projections[proj]
    experts = global_experts // ep
    words, scale = pool
    n_wsets = weight_sets_for(experts, n, k, args.quick)
    n_isets = -(-max(INPUT_SETS, n_wsets) // n_wsets) * n_wsets
    wsets = [(words[s * experts:(s + 1) * experts], scale[s * experts:(s + 1) * experts]) for s in range(n_wsets)]
    bf16 = None if args.no_baseline else [dequant_bf16(w, s) for w, s in wsets]
    hweights = None if args.no_peers else humming_weight_sets(wsets, n, k, f"EP{ep} {proj}")
    replays, rounds = (20, 5) if args.quick else (30, 7)
    rows = []
    for mode in modes:
        packed = [chordrt.w4a16_pack(w, s, LAYOUT[mode]) for w, s in wsets]
        torch.cuda.synchronize()
        for per_expert in (rows_list if mode == "contiguous" else tokens_list):
            label = f"{model} EP{ep} {proj} {mode} {per_expert}"
            if deadline is not None and time.monotonic() > deadline:
                skipped.append(label)
                continue
            point = Point(mode, experts, n, k, per_expert, n_isets)
            torch.cuda.synchronize()
            us = graph_time_us([point.chord_call(i, packed[i % n_wsets]) for i in range(n_isets)], replays, rounds)
            row = {
                "model": model, "ep": ep, "experts": experts, "projection": proj, "n": n, "k": k, "mode": mode,
                "per_expert": per_expert, "max_m": point.max_m,
                "expected_m": per_expert if mode == "masked" else None,
                "valid_rows": point.valid_rows, "weight_sets": n_wsets, "input_sets": n_isets,
                "bytes": point.bytes, "flops": point.flops, "chordrt_us": us,
                "chordrt_tflops": point.flops / us / 1e6, "chordrt_tbps": point.bytes / us / 1e6,
            }
            row["fraction_of_dense_bf16"] = row["chordrt_tflops"] / ceil["dense_bf16_tflops"]
            row["fraction_of_stream_read"] = row["chordrt_tbps"] / ceil["stream_read_tbps"]
            # accuracy on the first set (weights of set 0)
            a, _, out = point.sets[0]
            out.fill_(float("nan"))
            point.chord_call(0, packed[0])()
            ref = reference_rows(a, wsets[0][0], wsets[0][1], point.expert_rows)
            row["chordrt_error"] = error_vs(ref, out.float())
            baseline = None if bf16 is None else Baseline(mode).probe(point, bf16[0])
            if baseline is not None:
                row["baseline"] = baseline.name
                row["baseline_us"] = graph_time_us(
                    [lambda i=i: baseline.run(point, point.sets[i][0], bf16[i % n_wsets]) for i in range(n_isets)],
                    replays, rounds)
                row["speedup_vs_baseline"] = row["baseline_us"] / us
                row["baseline_error"] = error_vs(ref, baseline.run(point, a, bf16[0]).float())
            peer_text = "" if hweights is None else peer_humming(point, hweights, ref, n_isets, replays, rounds, row)
            rows.append(row)
            row["goal"] = w4a16_goals.grouped_goal(row)
            print(f"{'' if model == w4a16_goals.KIMI else model + ' '}EP{ep:<2} {proj:<7} {mode:<10} {per_expert:>3}/expert {us:9.1f} us "
                  f"{row['chordrt_tflops']:6.1f} TFLOP/s ({100 * row['fraction_of_dense_bf16']:3.0f}% dense) "
                  f"{row['chordrt_tbps']:5.2f} TB/s ({100 * row['fraction_of_stream_read']:3.0f}% read)  "
                  f"{row.get('baseline', 'baseline')} {row.get('baseline_us', float('nan')):9.1f} us "
                  f"x{row.get('speedup_vs_baseline', float('nan')):5.2f}  "
                  f"err {row['chordrt_error']['rel_err']:.2e}{peer_text}  goal {w4a16_goals.describe(row['goal'])}",
                  flush=True)
            point = ref = None  # free this point's sets before the next one's
        packed = None
        torch.cuda.empty_cache()
    bf16 = hweights = None
    torch.cuda.empty_cache()
    return rows


def profile(spec, model):
    ep, proj, mode, per_expert = spec.split(",")
    ep, per_expert = int(ep.upper().removeprefix("EP")), int(per_expert)
    global_experts, projections = MODELS[model]
    n, k = projections[proj]
    experts = global_experts // ep
    words, scale = checkpoint_pool(n, k, experts, seed=1)
    w = chordrt.w4a16_pack(words, scale, LAYOUT[mode])
    point = Point(mode, experts, n, k, per_expert, 1)
    for _ in range(6):
        point.chord_call(0, w)()
    torch.cuda.synchronize()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", "--out", dest="out", help="result file (default: bench/results/grouped_bench-...)")
    ap.add_argument("--profile", help="EPx,PROJECTION,MODE,ROWS: run that case a few times, untimed")
    ap.add_argument("--model", default=w4a16_goals.KIMI, choices=list(MODELS),
                    help="the MoE shape (default Kimi K2; Chord's published points are Kimi K2's)")
    ap.add_argument("--quick", action="store_true", help="EP8 only (Chord's published points), fewer replays and weight sets")
    ap.add_argument("--eps", help="comma-separated EP degrees (default 8,16,32; 8 with --quick)")
    ap.add_argument("--projections", default=",".join(PROJECTIONS), help="comma-separated subset of gate_up,down")
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of contiguous,masked")
    ap.add_argument("--rows", default=",".join(map(str, ROWS)), help="contiguous rows per expert")
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)), help="masked tokens per expert")
    ap.add_argument("--budget-s", type=float, default=0,
                    help="wall-clock budget in seconds (0 = none): points past it are skipped and listed")
    ap.add_argument("--no-baseline", action="store_true", help="skip the PyTorch baseline")
    ap.add_argument("--no-peers", action="store_true", help="skip the peer column (Humming) even when installed")
    args = ap.parse_args()
    torch.manual_seed(0)
    if args.profile:
        return profile(args.profile, args.model)
    global_experts, model_projections = MODELS[args.model]
    start = time.monotonic()
    deadline = start + args.budget_s if args.budget_s > 0 else None
    eps = int_list(args.eps) if args.eps else ((8,) if args.quick else EPS)
    projections = [p for p in args.projections.split(",") if p]
    modes = [m for m in args.modes.split(",") if m]
    for p in projections:
        if p not in PROJECTIONS:
            ap.error(f"unknown projection {p!r} (gate_up, down)")
    for m in modes:
        if m not in MODES:
            ap.error(f"unknown mode {m!r} (contiguous, masked)")
    for ep in eps:
        if ep < 1 or global_experts % ep or global_experts // ep > POOL_EXPERTS:
            ap.error(f"EP{ep}: {args.model}'s {global_experts} experts must split into at most {POOL_EXPERTS} per GPU")
    out_path = pathlib.Path(args.out) if args.out else default_out("grouped_bench")
    ceil = ceilings()
    print(f"ceilings: copy {ceil['copy_tbps']:.2f} TB/s, stream read {ceil['stream_read_tbps']:.2f} TB/s, "
          f"dense BF16 {ceil['dense_bf16_tflops']:.0f} TFLOP/s", flush=True)
    announce_peer(args.no_peers)
    rows, skipped = [], []
    pools = {}
    for proj in projections:
        n, k = model_projections[proj]
        pools[proj] = checkpoint_pool(n, k, POOL_EXPERTS, seed=1 + n + k)
    for ep in eps:
        for proj in projections:
            if deadline is not None and time.monotonic() > deadline:
                skipped.append(f"{args.model} EP{ep} {proj} (all points)")
                continue
            rows += bench_group(args.model, ep, proj, pools[proj], modes, int_list(args.rows), int_list(args.tokens), ceil,
                                args, deadline, skipped)
    judged = [r for r in rows if r["goal"]["met"] is not None]
    print(f"goals: {sum(r['goal']['met'] for r in judged)}/{len(judged)} points met" +
          (f"; skipped (budget): {', '.join(skipped)}" if skipped else ""))
    write_result(
        out_path, args, ceil, start, rows, skipped,
        chord_published=[{"mode": m, "projection": p, "ep": 8, "us": t} for (m, p), t in w4a16_goals.CHORD_GROUPED.items()],
        peers=peers_field(args.no_peers, PEER_TIMING),
    )


if __name__ == "__main__":
    main()
