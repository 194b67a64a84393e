#!/usr/bin/env python3
"""MoE glue kernels on the GPU: chordrt vs PyTorch, against ceilings measured in the same run.

Each timing is the median over CUDA-graph replays of a graph that runs the op once per input set;
input sets are rotated so that the data of one replay exceeds the 60 MB L2 where the shape allows.
Usage: glue_bench.py --json FILE
"""
import argparse
import json
import math

import torch

import chordrt
from bench_common import ceilings, eager_time_us, graph_time_us, sets_for


def bench_silu(rows, inter):
    n = sets_for(rows * inter * 6)
    xs = [torch.randn(rows, 2 * inter, device="cuda", dtype=torch.bfloat16) for _ in range(n)]
    outs = [torch.empty(rows, inter, device="cuda", dtype=torch.bfloat16) for _ in range(n)]
    chord = graph_time_us([lambda x=x, o=o: chordrt.silu_and_mul(x, o) for x, o in zip(xs, outs)])
    ref = graph_time_us([lambda x=x: torch.nn.functional.silu(x[:, :inter]) * x[:, inter:] for x in xs])
    return {"bytes": rows * inter * 6, "chordrt_us": chord, "torch_us": ref}


def bench_combine(tokens, top_k, hidden, filtered):
    experts, local_experts = 384, 48  # the filter's map keeps experts 0..47, as EP8's rank 0
    kw = {}
    local_routes = tokens * top_k
    if filtered:
        ids = torch.randint(0, experts, (tokens, top_k), device="cuda", dtype=torch.int32)
        expert = torch.arange(experts, device="cuda")
        kw = {"topk_ids": ids, "expert_map": torch.where(expert < local_experts, expert, -1).to(torch.int32)}
        local_routes = int((ids < local_experts).sum())
    # Bytes actually moved: the local routes' rows, every route's weight (and id), the output.
    per = local_routes * hidden * 2 + tokens * hidden * 2 + tokens * top_k * (8 if filtered else 4)
    n = sets_for(per)
    rows = [torch.randn(tokens * top_k, hidden, device="cuda", dtype=torch.bfloat16) for _ in range(n)]
    ws = [torch.rand(tokens, top_k, device="cuda") for _ in range(n)]
    outs = [torch.empty(tokens, hidden, device="cuda", dtype=torch.bfloat16) for _ in range(n)]
    chord = graph_time_us([lambda r=r, w=w, o=o: chordrt.moe_combine(r, w, o, **kw) for r, w, o in zip(rows, ws, outs)])
    ref = graph_time_us([lambda r=r, w=w: torch.bmm(w.view(tokens, 1, top_k).to(torch.bfloat16),
                                                    r.view(tokens, top_k, hidden)) for r, w in zip(rows, ws)])
    return {"bytes": per, "chordrt_us": chord, "torch_us": ref}


def torch_align(ids, experts, block):
    """The contract in plain PyTorch (sort-based), as a baseline."""
    flat = ids.flatten()
    counts = torch.bincount(flat, minlength=experts)
    padded = (counts + block - 1) // block * block
    starts = torch.cumsum(padded, 0) - padded
    order = torch.argsort(flat, stable=True)
    sorted_e = flat[order]
    rank = torch.arange(flat.numel(), device=ids.device) - (torch.cumsum(counts, 0) - counts)[sorted_e]
    out = torch.full((flat.numel() + experts * (block - 1),), flat.numel(), device=ids.device, dtype=torch.int32)
    out[starts[sorted_e] + rank] = order.to(torch.int32)
    return out, padded.sum()


def bench_align(tokens, top_k, experts, block):
    per = tokens * top_k * 8
    n = sets_for(per, limit=8)
    ids = [torch.stack([torch.randperm(experts, device="cuda")[:top_k] for _ in range(min(tokens, 64))])
           .repeat(math.ceil(tokens / 64), 1)[:tokens].to(torch.int32).contiguous() for _ in range(n)]
    cap = chordrt.moe_align_sorted_capacity(tokens, top_k, experts, block)
    bufs = [(torch.empty(cap, device="cuda", dtype=torch.int32),
             torch.empty(math.ceil(cap / block), device="cuda", dtype=torch.int32),
             torch.empty(1, device="cuda", dtype=torch.int32)) for _ in range(n)]
    chord = graph_time_us([lambda i=i, b=b: chordrt.moe_align(i, experts, block, sorted_token_ids=b[0],
                                                              expert_ids=b[1], num_tokens_post_padded=b[2])
                           for i, b in zip(ids, bufs)])
    # bincount/argsort synchronize with the host, so this baseline runs eagerly (not in a graph).
    ref = eager_time_us([lambda i=i: torch_align(i, experts, block) for i in ids])
    return {"bytes": per, "chordrt_us": chord, "torch_us": ref}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    args = ap.parse_args()
    torch.manual_seed(0)
    ceil = ceilings()
    rows = []
    for t in (1, 8, 64, 1024, 8192):
        rows.append({"op": "silu_and_mul", "shape": f"Kimi TP8 rows={t * 8} I=256", **bench_silu(t * 8, 256)})
        rows.append({"op": "silu_and_mul", "shape": f"Kimi EP8 rows={t * 8} I=2048", **bench_silu(t * 8, 2048)})
        rows.append({"op": "moe_combine", "shape": f"T={t} top8 H=7168", **bench_combine(t, 8, 7168, False)})
        rows.append({"op": "moe_combine", "shape": f"T={t} top8 H=7168 EP-filter",
                     **bench_combine(t, 8, 7168, True)})
        for block in (16, 64):
            rows.append({"op": "moe_align", "shape": f"T={t} top8 E=384 block={block}",
                         **bench_align(t, 8, 384, block)})
    for r in rows:
        r["chordrt_tbps"] = r["bytes"] / r["chordrt_us"] / 1e6
        r["fraction_of_stream_read"] = r["chordrt_tbps"] / ceil["stream_read_tbps"]
        r["speedup_vs_torch"] = r["torch_us"] / r["chordrt_us"]
    result = {"device": torch.cuda.get_device_name(), "ceilings": ceil, "results": rows}
    with open(args.json, "w") as f:
        json.dump(result, f, indent=2)
    print(f"ceilings: copy {ceil['copy_tbps']:.2f} TB/s, stream read {ceil['stream_read_tbps']:.2f} TB/s, "
          f"dense BF16 {ceil['dense_bf16_tflops']:.0f} TFLOP/s")
    print(f"{'op':<13} {'shape':<34} {'chordrt us':>10} {'TB/s':>6} {'%read':>6} {'torch us':>9} {'x':>6}")
    for r in rows:
        print(f"{r['op']:<13} {r['shape']:<34} {r['chordrt_us']:>10.2f} {r['chordrt_tbps']:>6.2f} "
              f"{100 * r['fraction_of_stream_read']:>5.0f}% {r['torch_us']:>9.2f} {r['speedup_vs_torch']:>6.2f}")


if __name__ == "__main__":
    main()
