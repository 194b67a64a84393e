#!/usr/bin/env python3
"""Warp-decode MoE on the GPU: chordrt vs PyTorch BF16 baselines, against ceilings of the same run.

Per (shape, format, M): the whole expert block (gate/up + down, top-k sum), median µs over CUDA-graph
replays that rotate several routing sets (so the touched experts change from call to call and are not
served from L2); bytes = the touched local experts' weights and scales + x + output, averaged over the
sets. Baselines on weights dequantized to BF16 once: `torch._grouped_mm` (sort by expert, two grouped
GEMMs, weighted index_add; graph-captured) and a per-expert matmul loop (eager: it reads the routing on
the host). Accuracy: relative error / cosine vs a float64 reference, for chordrt and for the BF16
dequant-then-matmul path on the same inputs.
Usage: warp_decode_bench.py --json FILE [--quick] [--shapes A,B]
       warp_decode_bench.py --profile "Kimi K2 TP8,int4,8"   (a few untimed calls, for ncu)
"""
import argparse
import json

import torch

import chordrt
from bench_common import ceilings, eager_time_us, graph_time_us, sets_for
from chordrt import moe_reference as mr

# name -> (hidden, intermediate, local experts, global experts, top_k, EP rank)
SHAPES = {
    "Kimi K2 TP8": (7168, 256, 384, 384, 8, None),
    "Kimi K2 EP8": (7168, 2048, 48, 384, 8, 3),
    "Qwen3-30B-A3B": (2048, 768, 128, 128, 8, None),
    # Other public MoE shapes (issue 16): DeepSeek-V3 EP8 (rank 5's 32 of 256 experts), Qwen3-235B-A22B TP4
    # (1536 / 4), DeepSeek-V2-Lite (top-6 of 64).
    "DeepSeek-V3 EP8": (7168, 2048, 32, 256, 8, 5),
    "Qwen3-235B-A22B TP4": (4096, 384, 128, 128, 8, None),
    "DeepSeek-V2-Lite": (2048, 1408, 64, 64, 6, None),
}
# Probes, by name only (--shapes): what a batch costs beyond its bytes. Eight touched experts as Kimi K2 TP8
# at M = 1, with almost no weight bytes (the two-kernel chain's fixed cost: launches, route tables, the PDL
# hand-off), and with Kimi's H (gate/up's per-warp chain of K stages as at Kimi, 5.5 MB).
PROBES = {
    "Probe H1024 I128": (1024, 128, 8, 8, 8, None),
    "Probe H7168 I64": (7168, 64, 8, 8, 8, None),
}
SHAPE_OF = {**SHAPES, **PROBES}
TOKENS = (1, 2, 4, 8, 16, 32, 64)


def local_ids(ids, emap, experts):
    if emap is None:
        return ids.long()
    return emap.long()[ids.long()]


def touched_bytes(ids, emap, w, m):
    local = local_ids(ids, emap, w.experts)
    n = torch.unique(local[(local >= 0) & (local < w.experts)]).numel()
    return n * w.expert_bytes() + 2 * 2 * m * w.hidden


class GroupedBaseline:
    """torch._grouped_mm on BF16 weights: the expert-major path, graph-capturable."""

    def __init__(self, w13, w2, experts, top_k):
        self.w13t, self.w2t = w13.transpose(-2, -1), w2.transpose(-2, -1)  # [E, H, 2I], [E, I, H]
        self.e, self.k = experts, top_k

    def __call__(self, x, ids, rw, emap):
        local = local_ids(ids, emap, self.e).reshape(-1)
        local = torch.where(local >= 0, local, self.e)  # non-local routes sort last, outside every group
        order = torch.argsort(local, stable=True)
        counts = torch.zeros(self.e + 1, dtype=torch.int32, device=x.device).scatter_add_(
            0, local, torch.ones_like(local, dtype=torch.int32))
        offs = torch.cumsum(counts[: self.e], 0, dtype=torch.int32)
        tokens = order // self.k
        gu = torch._grouped_mm(x[tokens], self.w13t, offs=offs)
        i = gu.shape[1] // 2
        h = torch.nn.functional.silu(gu[:, :i]) * gu[:, i:]
        y = torch._grouped_mm(h, self.w2t, offs=offs).float()
        wsel = torch.where(local[order] < self.e, rw.reshape(-1)[order], 0.0)
        out = torch.zeros((x.shape[0], y.shape[1]), dtype=torch.float32, device=x.device)
        return out.index_add_(0, tokens, torch.nan_to_num(y) * wsel.unsqueeze(1)).to(torch.bfloat16)


def loop_baseline(x, ids, rw, emap, w13, w2, experts):
    """Per-expert BF16 matmuls (reads the routing on the host)."""
    k = ids.shape[1]
    local = local_ids(ids, emap, experts).reshape(-1)
    out = torch.zeros((x.shape[0], w2.shape[1]), dtype=torch.float32, device=x.device)
    i = w13.shape[1] // 2
    for e in torch.unique(local[local >= 0]).tolist():
        routes = torch.nonzero(local == e).flatten()
        tokens = routes // k
        gu = x[tokens] @ w13[e].T
        y = (torch.nn.functional.silu(gu[:, :i]) * gu[:, i:]) @ w2[e].T
        out.index_add_(0, tokens, y.float() * rw.reshape(-1)[routes].unsqueeze(1))
    return out.to(torch.bfloat16)


def weights_and_map(name, fmt):
    """The shape's random weights (seed 1) and its expert map (None without EP)."""
    h, i, e, g, k, rank = SHAPE_OF[name]
    dev = torch.device("cuda")
    w = mr.random_moe_weights(torch, fmt, e, h, i, dev, seed=1)
    return w, None if rank is None else mr.contiguous_expert_map(torch, g, e, rank, dev)


def bench_shape(name, fmt, tokens_list, ceil, quick):
    h, i, e, g, k, rank = SHAPE_OF[name]
    dev = torch.device("cuda")
    w, emap = weights_and_map(name, fmt)
    w13 = mr.dequantize(torch, fmt, w.w13, w.w13_scale, torch.float32).to(torch.bfloat16)
    w2 = mr.dequantize(torch, fmt, w.w2, w.w2_scale, torch.float32).to(torch.bfloat16)
    grouped = None
    if hasattr(torch, "_grouped_mm"):
        try:  # a probe call: a torch build without grouped-GEMM support raises here, not mid-run
            grouped = GroupedBaseline(w13, w2, e, k)
            ids, rw = mr.random_routing(torch, 2, k, g, dev)
            grouped(torch.randn((2, h), device=dev).to(torch.bfloat16), ids, rw, emap)
        except RuntimeError as err:
            print(f"torch._grouped_mm baseline unavailable: {err}")
            grouped = None
    rows = []
    for m in tokens_list:
        n_sets = sets_for(w.expert_bytes() * min(m * k, e), limit=8 if quick else 24)
        sets = []
        for s in range(n_sets):
            x = torch.randn((m, h), device=dev).to(torch.bfloat16)
            ids, rw = mr.random_routing(torch, m, k, g, dev, seed=100 * m + s)
            ws = torch.empty(chordrt.warp_decode_moe_workspace_size(m, k, i), dtype=torch.uint8, device=dev)
            out = torch.empty((m, h), dtype=torch.bfloat16, device=dev)
            sets.append((x, ids, rw, ws, out))
        nbytes = sum(touched_bytes(ids, emap, w, m) for _, ids, _, _, _ in sets) / n_sets

        def chord_call(x, ids, rw, ws, out):
            return lambda: chordrt.warp_decode_moe(x, ids, rw, w.w13, w.w13_scale, w.w2, w.w2_scale,
                                                   expert_map=emap, workspace=ws, output=out)

        us = graph_time_us([chord_call(*st) for st in sets])
        row = {"shape": name, "format": fmt, "tokens": m, "sets": n_sets, "bytes": nbytes, "chordrt_us": us,
               "chordrt_tbps": nbytes / us / 1e6}
        row["fraction_of_stream_read"] = row["chordrt_tbps"] / ceil["stream_read_tbps"]
        if grouped is not None:
            row["grouped_mm_us"] = graph_time_us([lambda st=st: grouped(st[0], st[1], st[2], emap) for st in sets])
            row["speedup_vs_grouped_mm"] = row["grouped_mm_us"] / us
        row["torch_loop_us"] = eager_time_us([lambda st=st: loop_baseline(st[0], st[1], st[2], emap, w13, w2, e)
                                              for st in sets[:4]], replays=3, rounds=3)
        row["speedup_vs_torch_loop"] = row["torch_loop_us"] / us
        # accuracy on the first set
        x, ids, rw, ws, out = sets[0]
        chord_call(*sets[0])()
        ref = mr.reference_moe(torch, x, ids, rw, w, expert_map=emap)
        row["chordrt_error"] = mr.error_stats(torch, out, ref)
        row["bf16_dequant_error"] = mr.error_stats(torch, mr.bf16_dequant_moe(torch, x, ids, rw, w, expert_map=emap),
                                                   ref)
        if grouped is not None:
            row["grouped_mm_error"] = mr.error_stats(torch, grouped(x, ids, rw, emap), ref)
        rows.append(row)
        print(f"{name:<14} {fmt:<5} M={m:<3} {us:8.2f} us {row['chordrt_tbps']:5.2f} TB/s "
              f"{100 * row['fraction_of_stream_read']:4.0f}%  grouped_mm {row.get('grouped_mm_us', 0):8.2f} us  "
              f"err {row['chordrt_error']['rel_err']:.2e} (bf16 path {row['bf16_dequant_error']['rel_err']:.2e})",
              flush=True)
    del w, w13, w2, grouped
    torch.cuda.empty_cache()
    return rows


def profile(spec):
    name, fmt, m = spec.split(",")
    h, i, e, g, k, rank = SHAPE_OF[name]
    m = int(m)
    dev = torch.device("cuda")
    w, emap = weights_and_map(name, fmt)
    for s in range(6):
        x = torch.randn((m, h), device=dev).to(torch.bfloat16)
        ids, rw = mr.random_routing(torch, m, k, g, dev, seed=s)
        chordrt.warp_decode_moe(x, ids, rw, w.w13, w.w13_scale, w.w2, w.w2_scale, expert_map=emap)
    torch.cuda.synchronize()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--profile", help="NAME,FORMAT,M: run that case a few times, untimed")
    ap.add_argument("--quick", action="store_true", help="fewer sets and token counts")
    ap.add_argument("--shapes", default=",".join(SHAPES),
                    help=f"comma-separated shapes (default: the models; probes: {', '.join(PROBES)})")
    ap.add_argument("--formats", default=",".join(mr.FORMATS), help="comma-separated subset of the formats")
    ap.add_argument("--tokens", help="comma-separated token counts (default: all, or 1,8,32 with --quick)")
    args = ap.parse_args()
    torch.manual_seed(0)
    if args.profile:
        return profile(args.profile)
    if not args.json:
        ap.error("--json is required")
    ceil = ceilings()
    print(f"ceilings: copy {ceil['copy_tbps']:.2f} TB/s, stream read {ceil['stream_read_tbps']:.2f} TB/s, "
          f"dense BF16 {ceil['dense_bf16_tflops']:.0f} TFLOP/s", flush=True)
    tokens = (1, 8, 32) if args.quick else TOKENS
    if args.tokens:
        tokens = tuple(int(t) for t in args.tokens.split(","))
    rows = []
    for name in args.shapes.split(","):
        if name not in SHAPE_OF:
            ap.error(f"unknown shape {name!r} (have {', '.join(SHAPE_OF)})")
        for fmt in args.formats.split(","):
            rows += bench_shape(name, fmt, tokens, ceil, args.quick)
    result = {"device": torch.cuda.get_device_name(), "ceilings": ceil, "results": rows}
    with open(args.json, "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
