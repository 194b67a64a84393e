"""One process of test_two_gpus.py's multi-process cases (run as a script; prints one JSON line).

  two_gpu_worker.py ep2 RANK WORLD STORE_FILE
      expert parallelism over WORLD GPUs: this rank holds experts [RANK*E/WORLD, (RANK+1)*E/WORLD) behind
      an expert map, runs the block (warp decode at decode sizes, moe_align + indexed GEMMs + combine at
      prefill sizes), all-reduces the partial sums with NCCL and compares them with the float64
      reference over all experts and with chordrt on one GPU; then captures the block and the all-reduce
      in one CUDA graph and replays it on new routings.
  two_gpu_worker.py shared-cache READY_FILE GO_FILE
      waits for GO_FILE, prewarms the kimi-k2 ep8 preset into the shared CHORD_CACHE_DIR, runs a warp
      decode block against the reference, and reports how many kernels this process compiled.
"""
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "python"))
import chordrt  # noqa: E402
from chordrt import moe_reference as mr  # noqa: E402

# A small public-MoE-like shape (Qwen3-30B-A3B's hidden and expert size, 64 experts).
HIDDEN, INTER, EXPERTS, TOP_K = 2048, 768, 64, 8
MAX_REL_ERR, MIN_COSINE = 1e-2, 0.9999


def tokens(m, seed, dev):
    g = torch.Generator(device="cpu")
    g.manual_seed(seed)
    return torch.randn((m, HIDDEN), generator=g).to(torch.bfloat16).to(dev)


def stats_ok(stats):
    return stats["rel_err"] < MAX_REL_ERR and stats["cosine"] > MIN_COSINE


def local_block(w, rank, world):
    e = w.experts // world
    part = slice(rank * e, (rank + 1) * e)
    return mr.MoeWeights(w.format, w.w13[part].contiguous(), w.w13_scale[part].contiguous(), w.w2[part].contiguous(),
                         w.w2_scale[part].contiguous())


def indexed_block(x, ids, rw, packed13, packed2, local_experts, emap):
    """moe_align -> gate_up -> SiLU*up -> down -> combine, over the local experts (a partial sum)."""
    m = x.shape[0]
    bm = chordrt.indexed_block_m(chordrt.W4a16Layout.WGMMA_K64, local_experts, 2 * INTER, HIDDEN, m * TOP_K)
    sorted_ids, expert_ids, npp = chordrt.moe_align(ids, EXPERTS, bm, expert_map=emap)
    gu = chordrt.indexed_gemm(x, packed13, sorted_ids, expert_ids, npp, TOP_K, bm)
    h = chordrt.silu_and_mul(gu)
    down = chordrt.indexed_gemm(h, packed2, sorted_ids, expert_ids, npp, 1, bm)
    return chordrt.moe_combine(down, rw, topk_ids=ids, expert_map=emap)


def ep2(rank, world, store):
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=rank, world_size=world)
    w = mr.random_moe_weights(torch, "int4", EXPERTS, HIDDEN, INTER, dev, seed=5)
    for t in (w.w13, w.w13_scale, w.w2, w.w2_scale):
        dist.broadcast(t, src=0)  # one set of weights whatever each device's generator does
    lw = local_block(w, rank, world)
    emap = mr.contiguous_expert_map(torch, EXPERTS, lw.experts, rank, dev)
    packed13 = chordrt.w4a16_pack(lw.w13, lw.w13_scale, chordrt.W4a16Layout.WGMMA_K64)
    packed2 = chordrt.w4a16_pack(lw.w2, lw.w2_scale, chordrt.W4a16Layout.WGMMA_K64)
    results = []

    def compare(path, m, x, ids, rw, partial):
        summed = partial.float()
        dist.all_reduce(summed)
        ref = mr.reference_moe(torch, x, ids, rw, w)
        one_gpu = chordrt.warp_decode_moe(x, ids, rw, w.w13, w.w13_scale, w.w2, w.w2_scale) if m <= 128 else None
        r = {"path": path, "m": m, "vs_reference": mr.error_stats(torch, summed, ref)}
        if one_gpu is not None:
            r["vs_one_gpu"] = mr.error_stats(torch, summed, one_gpu.float())
        r["ok"] = stats_ok(r["vs_reference"]) and (one_gpu is None or stats_ok(r["vs_one_gpu"]))
        results.append(r)

    for m in (1, 8, 64):
        x = tokens(m, 100 + m, dev)
        ids, rw = mr.random_routing(torch, m, TOP_K, EXPERTS, dev, seed=m)
        compare("warp_decode", m, x, ids, rw, chordrt.warp_decode_moe(
            x, ids, rw, lw.w13, lw.w13_scale, lw.w2, lw.w2_scale, expert_map=emap, num_global_experts=EXPERTS))
    for m in (256, 1000):
        x = tokens(m, 100 + m, dev)
        ids, rw = mr.random_routing(torch, m, TOP_K, EXPERTS, dev, seed=m)
        compare("indexed", m, x, ids, rw, indexed_block(x, ids, rw, packed13, packed2, lw.experts, emap))

    # One graph holding the chordrt kernels and the all-reduce, replayed on new routings.
    m = 8
    x = tokens(m, 7, dev)
    ids, rw = mr.random_routing(torch, m, TOP_K, EXPERTS, dev, seed=7)
    ws = torch.empty(chordrt.warp_decode_moe_workspace_size(m, TOP_K, INTER), dtype=torch.uint8, device=dev)
    out = torch.empty((m, HIDDEN), dtype=torch.bfloat16, device=dev)
    summed = torch.empty((m, HIDDEN), dtype=torch.float32, device=dev)

    def step():
        chordrt.warp_decode_moe(x, ids, rw, lw.w13, lw.w13_scale, lw.w2, lw.w2_scale, expert_map=emap,
                                num_global_experts=EXPERTS, workspace=ws, output=out)
        summed.copy_(out)
        dist.all_reduce(summed)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # warm: kernels loaded, NCCL communicator set up, before capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for seed in (21, 22, 23):
        new_ids, new_rw = mr.random_routing(torch, m, TOP_K, EXPERTS, dev, seed=seed)
        ids.copy_(new_ids)
        rw.copy_(new_rw)
        graph.replay()
        torch.cuda.synchronize()
        s = mr.error_stats(torch, summed, mr.reference_moe(torch, x, ids, rw, w))
        results.append({"path": "graph", "m": m, "seed": seed, "vs_reference": s, "ok": stats_ok(s)})

    # All-reduce time against the block's time at decode sizes (graph replays, events).
    timing = {}
    for label, fn in (("block_us", lambda: chordrt.warp_decode_moe(
            x, ids, rw, lw.w13, lw.w13_scale, lw.w2, lw.w2_scale, expert_map=emap, num_global_experts=EXPERTS,
            workspace=ws, output=out)), ("all_reduce_us", lambda: dist.all_reduce(summed))):
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(50):
            fn()
        end.record()
        end.synchronize()
        timing[label] = start.elapsed_time(end) * 1000 / 50
    dist.barrier()
    dist.destroy_process_group()
    return {"rank": rank, "results": results, "timing_m8": timing}


def shared_cache(ready_file, go_file):
    open(ready_file, "w").close()
    deadline = time.time() + 120
    while not os.path.exists(go_file):
        if time.time() > deadline:
            raise SystemExit("no go signal")
        time.sleep(0.01)
    summary = chordrt.prewarm_model("kimi-k2", "ep8", "sm_90a")
    dev = torch.device("cuda", 0)
    w = mr.random_moe_weights(torch, "int4", EXPERTS, HIDDEN, INTER, dev, seed=9)
    x = tokens(8, 3, dev)
    ids, rw = mr.random_routing(torch, 8, TOP_K, EXPERTS, dev, seed=3)
    out = chordrt.warp_decode_moe(x, ids, rw, w.w13, w.w13_scale, w.w2, w.w2_scale)
    s = mr.error_stats(torch, out, mr.reference_moe(torch, x, ids, rw, w))
    info = chordrt.runtime_info()
    return {"prewarm": summary, "compiled": info["kernels_compiled"], "disk_hits": info["disk_hits"],
            "device": torch.cuda.get_device_name(dev), "ok": stats_ok(s), "stats": s}


if __name__ == "__main__":
    mode = sys.argv[1]
    result = ep2(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]) if mode == "ep2" else shared_cache(*sys.argv[2:4])
    print(json.dumps(result, default=str))
