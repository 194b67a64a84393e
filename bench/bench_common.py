"""Timing and ceilings shared by the GPU benchmarks (run as scripts from bench/, so importable by name).

Timings are medians of CUDA-event-timed rounds; ceilings (device copy, streaming read, dense BF16
GEMM) are measured in the same process as the kernels they are compared with.
"""
import json
import math
import pathlib
import re
import statistics
import time

import torch
import triton
import triton.language as tl

L2_BYTES = 60 << 20


def _median_us_per_call(run_all_once, calls_per_run, replays, rounds):
    """Median over `rounds` of the event-timed µs per call of `replays` back-to-back run_all_once()."""
    samples = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        run_all_once()
        start.record()
        for _ in range(replays):
            run_all_once()
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end) * 1000.0 / (replays * calls_per_run))
    return statistics.median(samples)


def eager_time_us(calls, replays=20, rounds=5):
    """Median µs per call, launched eagerly (for baselines that cannot be captured)."""
    return _median_us_per_call(lambda: [c() for c in calls], len(calls), replays, rounds)


def graph_time_us(calls, replays=20, rounds=5):
    """Median µs per call of `calls` (a list of thunks, one per input set), via CUDA-graph replay."""
    torch.cuda.synchronize()  # the side stream must not race the inputs' preparation on the default stream
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for c in calls:  # warm: JIT load and allocator growth happen outside the capture
            c()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for c in calls:
            c()
    return _median_us_per_call(graph.replay, len(calls), replays, rounds)


@triton.jit
def _copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n, cache_modifier=".cg"), mask=offs < n)


@triton.jit
def _read_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x_ptr + offs, mask=offs < n, other=0.0, cache_modifier=".cg")
    tl.store(out_ptr + pid, tl.sum(v, axis=0))


def ceilings():
    n_bytes = 2 << 30
    src = torch.randn(n_bytes // 4, device="cuda")
    dst = torch.empty_like(src)
    block = 8192
    # A kernel copy (a graph's memcpy node measured only ~2.8 TB/s here).
    copy_us = graph_time_us([lambda: _copy_kernel[(triton.cdiv(src.numel(), block),)](src, dst, src.numel(),
                                                                                        BLOCK=block)], replays=5)
    partial = torch.empty(triton.cdiv(src.numel(), block), device="cuda")
    read_us = graph_time_us([lambda: _read_kernel[(partial.numel(),)](src, partial, src.numel(), BLOCK=block)],
                            replays=5)
    del src, dst, partial
    m = 8192
    a = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    gemm_us = graph_time_us([lambda: torch.matmul(a, b)], replays=5)
    return {
        "copy_tbps": 2 * n_bytes / copy_us / 1e6,
        "stream_read_tbps": n_bytes / read_us / 1e6,
        "dense_bf16_tflops": 2 * m**3 / gemm_us / 1e6,
    }


def sets_for(bytes_per_call, limit=32):
    return max(1, min(limit, math.ceil(3 * L2_BYTES / max(bytes_per_call, 1))))


def device_tag():
    """A short device name for result files: "h200" from "NVIDIA H200"."""
    name = torch.cuda.get_device_name().lower()
    m = re.search(r"\b([a-z]+\d+[a-z]*)\b", name.replace("nvidia", ""))
    return m.group(1) if m else re.sub(r"[^a-z0-9]+", "", name) or "gpu"


def default_out(bench):
    """bench/results/<bench>-<device>-<date><letter>.json: the first letter not taken yet."""
    results = pathlib.Path(__file__).resolve().parent / "results"
    stem = f"{bench}-{device_tag()}-{time.strftime('%Y%m%d')}"
    for letter in "abcdefghijklmnopqrstuvwxyz":
        path = results / f"{stem}{letter}.json"
        if not path.exists():
            return path
    return results / f"{stem}-{int(time.time())}.json"


def int_list(text):
    return tuple(int(t) for t in text.split(",") if t)


def write_result(out_path, args, ceil, start, rows, skipped, **fields):
    """The run's JSON (device, same-run ceilings, arguments, wall time, `fields`, rows, budget-skipped
    points) at out_path; prints where it went."""
    result = {
        "device": torch.cuda.get_device_name(),
        "ceilings": ceil,
        "args": {k: v for k, v in vars(args).items() if k != "profile"},
        "wall_s": time.monotonic() - start,
        **fields,
        "results": rows,
        "skipped": skipped,
    }
    out_path = pathlib.Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(result, indent=2))
    print(f"wrote {out_path}")
