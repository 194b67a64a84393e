#!/usr/bin/env python3
"""DSA indexer: chordrt logits and top-k vs PyTorch, against same-run ceilings.

Logits: H_i indexer heads (64, 32) x head dim 128, T queries (1 / 8 / 64 / 128), each query with its OWN
context of 65536 positions in a paged FP8 key cache (page 64, 132 bytes per token, block tables
shuffled over the cache), so T * 65536 * 132 bytes of keys stream per call (553 MB at T = 64). Median µs
over CUDA-graph replays that rotate input sets (caches, queries, outputs) past the L2; TB/s counts the
key bytes (what the kernel must stream), TFLOP/s = 2 * H * 128 per key; fractions of the same run's
streaming-read bandwidth, and two ceilings of this access pattern: a kernel that reads the same sets'
pages in the same shuffled order (one program per page, every byte loaded once), alone and writing one
float per key into the logits buffer (the op's whole traffic without its work). Baseline, same process, graph-captured: PyTorch on the same cache — gather
every key's bytes through its slot, E4M3 -> BF16 (exact), bmm with q in BF16, ReLU, weighted sum over
heads (FP32), times the key scales. Accuracy: relative Frobenius error vs an FP32 reference (dequantized
q and k) on the first two rows of the first set.
Top-k: top-2048 of 65536 FP32 logits per row for T rows (64 the target point; 1 and 128 too), emitting
positions and (with a block table) cache slots; bytes = the logits read once; baseline torch.topk
(values and indices, graph-captured). Checked as sets against torch.topk on the first set.
Every targeted point carries the issue's target (pass / miss).
Usage: dsa_bench.py [--json FILE | --out FILE] [--quick] [--heads 64,32] [--tokens 1,8,64,128]
                    [--topk-tokens 1,64,128] [--no-baseline] [--budget-s S]
       dsa_bench.py --profile logits,64,64 | topk,64   (a few untimed calls, for ncu; logits alternate
                                                      with the paged-read ceiling kernel)
Without --json / --out the result goes to bench/results/dsa_bench-<device>-<date><letter>.json.
"""
import argparse
import pathlib
import sys
import time

import torch
import triton
import triton.language as tl

try:
    import chordrt
except ImportError:  # run from a checkout without PYTHONPATH=tools/python
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tools" / "python"))
    import chordrt
from bench_common import write_result, ceilings, default_out, graph_time_us, int_list, sets_for
from chordrt import dsa_reference as dr

PAGE = 64
CONTEXT = 65536
TOPK = 2048
HEADS = (64, 32)
TOKENS = (1, 8, 64, 128)
TOPK_TOKENS = (1, 64, 128)
# The targets (µs)
TARGETS = {"logits/64/1": 8, "logits/64/64": 135, "topk/64": 35}
BASELINE_TIMING = {
    "logits": "PyTorch on the same paged cache: index_select of every key's 128 bytes and scale through its "
              "slot, E4M3 -> BF16, torch.bmm with q in BF16, ReLU, weighted sum over heads in FP32, times the "
              "scales; graph-captured, one input set",
    "topk": "torch.topk(logits, 2048, dim=1) (sorted values and indices), graph-captured, rotating the same sets",
}


@triton.jit
def _paged_read_kernel(cache_ptr, table_ptr, out_ptr, PAGE_WORDS: tl.constexpr, BLOCK: tl.constexpr,
                       PAGE: tl.constexpr, WRITE: tl.constexpr):
    """Reads page table[pid] of the cache (PAGE_WORDS int32 words) and writes PAGE FP32 values from it
    (WRITE: the logits kernel's traffic, every key byte read once and one float per key written, without
    its work) or one (the read alone)."""
    pid = tl.program_id(0)
    page = tl.load(table_ptr + pid).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    v = tl.load(cache_ptr + page * PAGE_WORDS + offs, mask=offs < PAGE_WORDS, other=0, cache_modifier=".cg")
    s = tl.sum(v, axis=0).to(tl.float32)
    if WRITE:
        tl.store(out_ptr + pid.to(tl.int64) * PAGE + tl.arange(0, PAGE), tl.full((PAGE,), 1.0, tl.float32) * s)
    else:
        tl.store(out_ptr + pid, s)


class LogitsSet:
    """One input set: a cache holding T private contexts of CONTEXT keys, its shuffled block table, the
    queries, weights and the output."""

    def __init__(self, heads, tokens, seed):
        dev = torch.device("cuda")
        g = torch.Generator(device=dev)
        g.manual_seed(seed)
        pages_per_seq = CONTEXT // PAGE
        num_pages = tokens * pages_per_seq
        # Random E4M3 bytes minus the NaN patterns (x111_1111), random positive scales.
        keys = torch.randint(0, 256, (num_pages, PAGE * dr.HEAD_DIM), generator=g, device=dev, dtype=torch.uint8)
        keys = torch.where((keys & 0x7F) == 0x7F, keys ^ 1, keys)
        scales = torch.rand((num_pages, PAGE), generator=g, device=dev) * 0.01 + 1e-3
        self.cache = torch.cat([keys, scales.view(torch.uint8)], dim=1).contiguous()
        del keys, scales
        self.table = torch.randperm(num_pages, generator=g, device=dev).to(torch.int32).reshape(tokens, pages_per_seq)
        self.lens = torch.full((tokens,), CONTEXT, dtype=torch.int32, device=dev)
        self.q = (torch.randn((tokens, heads, dr.HEAD_DIM), generator=g, device=dev) * 2).to(torch.float8_e4m3fn)
        self.w = torch.randn((tokens, heads), generator=g, device=dev) / heads ** 0.5
        self.logits = torch.empty((tokens, CONTEXT), device=dev)

    def paged_read_call(self, write=True):
        words = dr.page_bytes(PAGE) // 4
        cache, table = self.cache.view(torch.int32), self.table.reshape(-1)
        block = triton.next_power_of_2(words)
        return lambda: _paged_read_kernel[(table.numel(),)](cache, table, self.logits, PAGE_WORDS=words, BLOCK=block,
                                                            PAGE=PAGE, WRITE=write)

    def chord_call(self):
        return lambda: chordrt.dsa_indexer_logits(self.q, self.w, self.cache, self.table, self.lens, PAGE,
                                                  max_context=CONTEXT, logits=self.logits)


class TorchLogits:
    """The baseline's buffers for one set (slots, gathered keys, BF16 q) and its call."""

    def __init__(self, s: LogitsSet):
        tokens, heads = s.w.shape
        pos = torch.arange(CONTEXT, device=s.cache.device)
        self.slots = (s.table.long()[:, pos // PAGE] * PAGE + pos % PAGE)  # [T, L]
        pages = s.cache.view(-1, dr.page_bytes(PAGE))
        self.key_bytes = pages[:, :PAGE * dr.HEAD_DIM].reshape(-1, dr.HEAD_DIM)  # a view: [slots, 128]
        self.scales = pages[:, PAGE * dr.HEAD_DIM:]  # [pages, PAGE * 4] bytes
        self.s = s
        self.qb = s.q.to(torch.bfloat16)

    def __call__(self):
        s = self.s
        k = self.key_bytes.index_select(0, self.slots.reshape(-1)).view(torch.float8_e4m3fn).to(torch.bfloat16)
        k = k.view(s.q.shape[0], CONTEXT, dr.HEAD_DIM)
        dots = torch.bmm(self.qb, k.transpose(1, 2))  # [T, H, L]
        scale = self.scales.contiguous().view(torch.float32).reshape(-1)[self.slots]
        return (torch.relu(dots).float() * s.w[:, :, None]).sum(1) * scale


def bench_logits(heads, tokens, ceil, args):
    key_bytes = tokens * CONTEXT * dr.TOKEN_BYTES
    n_sets = sets_for(key_bytes)
    sets = [LogitsSet(heads, tokens, seed=s) for s in range(n_sets)]
    torch.cuda.synchronize()
    replays, rounds = (10, 5) if args.quick else (20, 7)
    us = graph_time_us([s.chord_call() for s in sets], replays, rounds)
    flops = 2 * heads * dr.HEAD_DIM * tokens * CONTEXT
    target = TARGETS.get(f"logits/{heads}/{tokens}")
    row = {"op": "logits", "heads": heads, "tokens": tokens, "context": CONTEXT, "page_size": PAGE,
           "input_sets": n_sets, "key_bytes": key_bytes, "flops": flops, "chordrt_us": us,
           "chordrt_tbps": key_bytes / us / 1e6, "chordrt_tflops": flops / us / 1e6,
           "target_us": target, "target_met": None if target is None else us <= target}
    row["fraction_of_stream_read"] = row["chordrt_tbps"] / ceil["stream_read_tbps"]
    row["paged_read_write_us"] = graph_time_us([s.paged_read_call() for s in sets], replays, rounds)
    row["paged_read_us"] = graph_time_us([s.paged_read_call(write=False) for s in sets], replays, rounds)
    row["fraction_of_paged_read_write"] = row["paged_read_write_us"] / us
    s0 = sets[0]
    s0.logits.fill_(float("nan"))
    s0.chord_call()()
    rows = min(tokens, 2)
    ref = dr.reference_logits(torch, s0.q[:rows], s0.w[:rows], s0.cache, s0.table[:rows], s0.lens[:rows], PAGE, CONTEXT)
    row["chordrt_error"] = dr.error_stats(torch, s0.logits[:rows], ref)
    row["unwritten"] = int(torch.isnan(s0.logits).sum().item())
    if not args.no_baseline:
        base = TorchLogits(s0)
        try:
            row["baseline_us"] = graph_time_us([base], max(2, replays // 4), rounds)
            row["speedup_vs_baseline"] = row["baseline_us"] / us
            row["baseline_error"] = dr.error_stats(torch, base()[:rows], ref)
        except torch.cuda.OutOfMemoryError as err:
            print(f"baseline skipped: {err}", flush=True)
        del base
    verdict = "-" if target is None else ("pass" if row["target_met"] else "MISS")
    print(f"logits H {heads:>3} T {tokens:>4} x {CONTEXT}: {us:8.1f} us {row['chordrt_tbps']:5.2f} TB/s "
          f"({100 * row['fraction_of_stream_read']:3.0f}% read; paged read {row['paged_read_us']:.1f}, "
          f"+ writes {row['paged_read_write_us']:.1f} us) "
          f"{row['chordrt_tflops']:6.1f} TFLOP/s  torch "
          f"{row.get('baseline_us', float('nan')):9.1f} us x{row.get('speedup_vs_baseline', float('nan')):6.2f}  "
          f"target {'-' if target is None else f'<= {target}'} {verdict}  err "
          f"{row['chordrt_error']['rel_err']:.2e}", flush=True)
    del sets
    torch.cuda.empty_cache()
    return row


def bench_topk(tokens, slots, ceil, args):
    dev = torch.device("cuda")
    read_bytes = tokens * CONTEXT * 4
    n_sets = sets_for(read_bytes, limit=16)
    logits = [torch.randn((tokens, CONTEXT), device=dev) for _ in range(n_sets)]
    lens = torch.full((tokens,), CONTEXT, dtype=torch.int32, device=dev)
    table = torch.randperm(tokens * CONTEXT // PAGE, device=dev).to(torch.int32).reshape(tokens, -1) if slots else None
    out = [torch.empty((tokens, TOPK), dtype=torch.int32, device=dev) for _ in range(n_sets)]
    replays, rounds = (20, 5) if args.quick else (40, 7)
    calls = [lambda i=i: chordrt.dsa_topk(logits[i], lens, TOPK, block_table=table, page_size=PAGE if slots else None,
                                          indices=out[i]) for i in range(n_sets)]
    us = graph_time_us(calls, replays, rounds)
    target = None if slots else TARGETS.get(f"topk/{tokens}")
    row = {"op": "topk", "tokens": tokens, "context": CONTEXT, "topk": TOPK, "output": "slots" if slots else "positions",
           "input_sets": n_sets, "read_bytes": read_bytes, "chordrt_us": us, "chordrt_tbps": read_bytes / us / 1e6,
           "target_us": target, "target_met": None if target is None else us <= target}
    row["fraction_of_stream_read"] = row["chordrt_tbps"] / ceil["stream_read_tbps"]
    out[0].fill_(-7)
    calls[0]()
    torch.cuda.synchronize()
    try:
        dr.check_topk(torch, out[0], logits[0], lens, TOPK, block_table=table, page_size=PAGE)
        row["matches_torch_topk"] = True
    except AssertionError as err:
        row["matches_torch_topk"] = False
        print(f"top-k check failed: {err}", flush=True)
    if not args.no_baseline:
        row["baseline_us"] = graph_time_us([lambda i=i: torch.topk(logits[i], TOPK, dim=1) for i in range(n_sets)],
                                           replays, rounds)
        row["speedup_vs_baseline"] = row["baseline_us"] / us
    verdict = "-" if target is None else ("pass" if row["target_met"] else "MISS")
    print(f"topk {TOPK} of {CONTEXT} T {tokens:>4} ({row['output']:<9}): {us:7.1f} us {row['chordrt_tbps']:5.2f} TB/s "
          f"({100 * row['fraction_of_stream_read']:3.0f}% read)  torch.topk {row.get('baseline_us', float('nan')):7.1f} "
          f"us x{row.get('speedup_vs_baseline', float('nan')):5.2f}  target "
          f"{'-' if target is None else f'<= {target}'} {verdict}  sets ok {row['matches_torch_topk']}", flush=True)
    del logits, out
    torch.cuda.empty_cache()
    return row


def profile(spec):
    parts = spec.split(",")
    if parts[0] == "logits":
        s = LogitsSet(int(parts[1]), int(parts[2]), seed=0)
        logits, paged_read = s.chord_call(), s.paged_read_call()
        call = lambda: (logits(), paged_read())  # noqa: E731
    else:
        tokens = int(parts[1])
        logits = torch.randn((tokens, CONTEXT), device="cuda")
        lens = torch.full((tokens,), CONTEXT, dtype=torch.int32, device="cuda")
        call = lambda: chordrt.dsa_topk(logits, lens, TOPK)  # noqa: E731
    for _ in range(6):
        call()
    torch.cuda.synchronize()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", "--out", dest="out", help="result file (default: bench/results/dsa_bench-...)")
    ap.add_argument("--profile", help="logits,HEADS,TOKENS or topk,TOKENS: a few untimed calls, for ncu")
    ap.add_argument("--quick", action="store_true", help="fewer replays and points (H 64 at T 1 and 64, H 32 at 64)")
    ap.add_argument("--heads", type=int_list, default=HEADS)
    ap.add_argument("--tokens", type=int_list, default=TOKENS)
    ap.add_argument("--topk-tokens", type=int_list, default=TOPK_TOKENS, help='"" for no top-k points')
    ap.add_argument("--no-baseline", action="store_true", help="skip the PyTorch baselines")
    ap.add_argument("--budget-s", type=float, default=300,
                    help="wall-clock budget in seconds (0 = none): points past it are skipped and listed")
    args = ap.parse_args()
    torch.manual_seed(0)
    if args.profile:
        return profile(args.profile)
    start = time.monotonic()
    deadline = start + args.budget_s if args.budget_s > 0 else None
    out_path = pathlib.Path(args.out) if args.out else default_out("dsa_bench")
    ceil = ceilings()
    print(f"ceilings: copy {ceil['copy_tbps']:.2f} TB/s, stream read {ceil['stream_read_tbps']:.2f} TB/s, "
          f"dense BF16 {ceil['dense_bf16_tflops']:.0f} TFLOP/s", flush=True)
    points = [(h, t) for h in args.heads for t in args.tokens]
    if args.quick:
        points = [(64, 1), (64, 64), (32, 64)]
    topk_points = [(t, False) for t in args.topk_tokens] + ([(64, True)] if args.topk_tokens else [])
    if args.quick:
        topk_points = [(64, False), (64, True)]
    rows, skipped = [], []
    for heads, tokens in points:
        if deadline is not None and time.monotonic() > deadline:
            skipped.append(f"logits H {heads} T {tokens}")
            continue
        rows.append(bench_logits(heads, tokens, ceil, args))
    for tokens, slots in topk_points:
        if deadline is not None and time.monotonic() > deadline:
            skipped.append(f"topk T {tokens}" + (" slots" if slots else ""))
            continue
        rows.append(bench_topk(tokens, slots, ceil, args))
    targeted = [r for r in rows if r["target_us"] is not None]
    met = sum(r["target_met"] for r in targeted)
    print(f"targets: {met}/{len(targeted)} met" + (f"; skipped (budget): {', '.join(skipped)}" if skipped else ""))
    write_result(
        out_path, args, ceil, start, rows, skipped,
        page_size=PAGE,
        context=CONTEXT,
        targets=TARGETS,
        baseline_timing=BASELINE_TIMING,
    )


if __name__ == "__main__":
    main()
