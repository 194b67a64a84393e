#!/usr/bin/env python3
"""Decode crossover (issue 16): the whole MoE expert block through chordrt's two decode paths, per shape and M.

Per (shape, M) (shapes: warp_decode_bench.SHAPES, per GPU; M = 1, 2, 4, 8, 16, 32, 64, 128 tokens), INT4
group-32 weights (moe_reference.random_moe_weights, seed 1, the tensors warp_decode_bench times), the same
routing sets for every path (random_routing seed 100 * M + s, as warp_decode_bench):
  warp_decode:    chordrt.warp_decode_moe on the checkpoint tensors (gate/up, SiLU*up, down and the top-k sum
                  in one call);
  indexed_decode: what an engine composes on vLLM routing: chordrt.moe_align (the deployment's global experts
                  and, under EP, its expert map; block size = indexed_block_m of the MMA layout for the routes
                  expected on this GPU, once per projection, one align when both agree), indexed_gemm gate/up
                  (N = 2I, K = H, top_k), silu_and_mul, indexed_gemm down (N = H, K = I, top_k 1 on the
                  [M * top_k, I] rows), moe_combine with topk_weights (and topk_ids + expert map under EP); its
                  weights are the same checkpoint tensors packed once with w4a16_pack(..., W4a16Layout.MMA)
                  (w13 = gate rows then up rows: silu_and_mul's gate half then up half). indexed_align_us is
                  the moe_align calls alone, timed the same way.
  humming_decode (peer column, when `import humming` works; --no-peers leaves it out): Humming 0.1.19's
                  indexed GEMMs for gate/up and down (its own weight conversion and heuristic config, as
                  indexed_bench's HummingPeer: humming_peer.py) around chordrt's silu_and_mul and moe_combine;
                  routing at each config's block size over the local experts only, built in torch outside the
                  timed graph (so, unlike indexed_decode, no routing cost is in its time); its kernels compiled
                  by an untimed first call. Peer work stops once --peer-budget-s is spent (the rest of the
                  points record why they have no peer column).
Median µs over CUDA-graph replays rotating the routing sets (bench_common.graph_time_us; sets_for: enough sets
that the touched experts stream from HBM, fewer at large M). Bytes = the touched local experts' weights and
scales + x + output (warp_decode_bench.touched_bytes), the same for every path. Accuracy: each path's output
on one set (the one with the most local routes) against the float64 reference (moe_reference.reference_moe);
a relative error above 1e-2 prints a FAIL line and the run exits non-zero (after writing the JSON). A path the
library rejects (chordrt.ChordError INVALID_ARGUMENT / UNSUPPORTED / STRICT_MISS) is skipped with the reason
in the row. Last, per shape, the crossover: the smallest M at which indexed decode is faster than warp decode.
Usage: decode_crossover_bench.py [--json FILE | --out FILE] [--quick] [--shapes A,B] [--tokens 1,2,...]
                                 [--no-peers] [--peer-budget-s S] [--budget-s S]
Without --json / --out the result goes to bench/results/decode_crossover_bench-<device>-<date><letter>.json.
torch and the GPU modules are imported after the arguments are parsed (--help needs neither).
"""
import argparse
import math
import pathlib
import statistics
import sys
import time

TOKENS = (1, 2, 4, 8, 16, 32, 64, 128)
QUICK_TOKENS = (1, 8, 32, 128)
MAX_REL_ERR = 1e-2
PATHS = ("warp_decode", "indexed_decode")
PEER = "humming_decode"
HUMMING_COMPUTE = {"gemm_type": "indexed"}
TIMING = ("median µs per call over CUDA-graph replays (bench_common.graph_time_us, 20 replays x 5 rounds) rotating "
          "the point's routing sets; warp_decode: one warp_decode_moe call; indexed_decode: moe_align (one per "
          "distinct block size) + indexed_gemm gate/up + silu_and_mul + indexed_gemm down + moe_combine, buffers "
          "preallocated; indexed_align_us: the moe_align calls alone")
PEER_TIMING = ("humming.forward.humming_forward for gate/up (top_k) and down (top_k 1) with its heuristic config "
               "for the routes expected locally, chordrt silu_and_mul between them and chordrt moe_combine after, "
               "on the same routing sets and buffers; vLLM routing over the local experts at each config's "
               "block_shape[0], built in torch outside the timed graph (no routing cost in this column); its "
               "kernels compiled by an untimed first call")
# Library rejections: the (shape, path) is skipped with the reason, not counted as a failure
REJECTED = ("INVALID_ARGUMENT", "UNSUPPORTED", "STRICT_MISS")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", "--out", dest="out", help="result file (default: bench/results/decode_crossover_bench-...)")
    ap.add_argument("--quick", action="store_true", help="tokens 1,8,32,128 and fewer routing sets")
    ap.add_argument("--shapes", help="comma-separated subset of warp_decode_bench.SHAPES (default: all six)")
    ap.add_argument("--tokens", help="comma-separated token counts, each <= 128 (default 1,2,4,...,128; "
                                     "1,8,32,128 with --quick)")
    ap.add_argument("--no-peers", action="store_true", help="leave out the Humming column even when installed")
    ap.add_argument("--peer-budget-s", type=float, default=30,
                    help="wall-clock seconds the Humming column may take in all (weight conversion, compiles, "
                         "timing); points past it get no peer column (0 = no limit)")
    ap.add_argument("--budget-s", type=float, default=240,
                    help="wall-clock budget in seconds (0 = none): points past it are skipped and listed")
    return ap.parse_args()


def import_gpu_modules():
    """torch, chordrt and the bench helpers, as module globals (after parse_args: --help needs none of them)."""
    global torch, chordrt, mr, W4a16Layout, SHAPES, touched_bytes, local_ids
    global ceilings, default_out, graph_time_us, int_list, sets_for, write_result
    global HUMMING_LOCKS, HUMMING_MISSING, announce_peer, heuristic_tuning, humming_call, humming_weights, peers_field
    global local_routing
    import torch
    try:
        import chordrt
    except ImportError:  # run from a checkout without PYTHONPATH=tools/python
        sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tools" / "python"))
        import chordrt
    from chordrt import W4a16Layout
    from chordrt import moe_reference as mr
    from bench_common import ceilings, default_out, graph_time_us, int_list, sets_for, write_result
    from warp_decode_bench import SHAPES, local_ids, touched_bytes
    from humming_peer import (HUMMING_LOCKS, HUMMING_MISSING, announce_peer, heuristic_tuning, humming_call,
                              humming_weights, peers_field)
    from indexed_bench import local_routing


def expected_active(e, g, k, m):
    """Expected local experts with at least one route: each token picks k distinct of g experts uniformly."""
    return e * (1.0 - (1.0 - k / g) ** m)


def rejection(err):
    """The skip reason of a ChordError the library raised to refuse a call, or None (a real failure)."""
    if isinstance(err, chordrt.ChordError) and getattr(err.status, "name", "") in REJECTED:
        return str(err)
    return None


class Shape:
    """One shape's weights (checkpoint tensors, the MMA-packed copies, Humming's conversion on demand)."""

    def __init__(self, name):
        self.name = name
        self.h, self.i, self.e, self.g, self.k, self.rank = SHAPES[name]
        self.dev = torch.device("cuda")
        self.w = mr.random_moe_weights(torch, "int4", self.e, self.h, self.i, self.dev, seed=1)
        self.emap = None if self.rank is None else mr.contiguous_expert_map(torch, self.g, self.e, self.rank,
                                                                             self.dev)
        self.skip = {}  # path -> reason, for every point of the shape
        self.packed = None
        try:  # gate/up: N = 2I (gate rows then up rows), K = H; down: N = H, K = I
            self.packed = {"gate_up": chordrt.w4a16_pack(self.w.w13, self.w.w13_scale, W4a16Layout.MMA),
                           "down": chordrt.w4a16_pack(self.w.w2, self.w.w2_scale, W4a16Layout.MMA)}
        except chordrt.ChordError as err:
            if rejection(err) is None:
                raise
            self.skip["indexed_decode"] = f"w4a16_pack: {err}"
        self.humming = None  # {"gate_up": (config, tensors), "down": ...} once converted
        torch.cuda.synchronize()

    def routed_rows(self, m):
        """Routes expected on this GPU's experts (what indexed_block_m and Humming's heuristics are given)."""
        return max(1, m * self.k * self.e // self.g)

    def block_m(self, m):
        """{projection: block_m} from indexed_block_m (layout MMA, profile AUTO: what the strict-mode plan uses)."""
        rows = self.routed_rows(m)
        return {"gate_up": chordrt.indexed_block_m(W4a16Layout.MMA, self.e, 2 * self.i, self.h, rows),
                "down": chordrt.indexed_block_m(W4a16Layout.MMA, self.e, self.h, self.i, rows)}

    def combine_filter(self, ids):
        """moe_combine's expert-parallel filter arguments (none without EP)."""
        return {} if self.emap is None else {"topk_ids": ids, "expert_map": self.emap}


class RouteSet:
    """One input set: activations and routing, every path's buffers, chordrt's routing buffers per block size."""

    def __init__(self, shape, m, seed, block_ms):
        s, dev = shape, shape.dev
        self.x = torch.randn((m, s.h), device=dev).to(torch.bfloat16)
        self.ids, self.rw = mr.random_routing(torch, m, s.k, s.g, dev, seed=seed)
        self.local = local_ids(self.ids, s.emap, s.e).to(torch.int32)  # [m, k] local expert ids, -1 elsewhere
        self.local_routes = int((self.local >= 0).sum().item())
        self.active = torch.unique(self.local[self.local >= 0]).numel()
        self.bytes = touched_bytes(self.ids, s.emap, s.w, m)
        self.ws = torch.empty(chordrt.warp_decode_moe_workspace_size(m, s.k, s.i), dtype=torch.uint8, device=dev)
        self.warp_out = torch.empty((m, s.h), dtype=torch.bfloat16, device=dev)
        # The indexed path (and the peer): gate/up rows, SiLU*up rows, down rows (one per route), the sum
        self.gu = torch.empty((m * s.k, 2 * s.i), dtype=torch.bfloat16, device=dev)
        self.act = torch.empty((m * s.k, s.i), dtype=torch.bfloat16, device=dev)
        self.dn = torch.empty((m * s.k, s.h), dtype=torch.bfloat16, device=dev)
        self.out = torch.empty((m, s.h), dtype=torch.bfloat16, device=dev)
        self.routing = {}  # block_m -> (sorted_token_ids, expert_ids, num_tokens_post_padded), moe_align's
        for bm in sorted(set(block_ms)):
            cap = chordrt.moe_align_sorted_capacity(m, s.k, s.g, bm)
            self.routing[bm] = (torch.empty(cap, dtype=torch.int32, device=dev),
                                torch.empty(-(-cap // bm), dtype=torch.int32, device=dev),
                                torch.empty(1, dtype=torch.int32, device=dev))


class Point:
    """The routing sets of one (shape, M) and each path's call on set i."""

    def __init__(self, shape, m, quick, bm):
        self.shape, self.m = shape, m
        self.bm = bm  # {projection: block_m} of the indexed path, None when it is skipped
        n_sets = sets_for(shape.w.expert_bytes() * max(1.0, expected_active(shape.e, shape.g, shape.k, m)),
                          limit=8 if quick else 24)
        block_ms = self.bm.values() if self.bm else ()
        self.sets = [RouteSet(shape, m, 100 * m + s, block_ms) for s in range(n_sets)]
        # accuracy on the set with the most local routes (an EP set at M = 1 may have none)
        self.acc = max(range(n_sets), key=lambda i: self.sets[i].local_routes)
        self.bytes = statistics.mean(s.bytes for s in self.sets)
        self.humming = None  # (tunings, block sizes, per-set routing, locks) once build_humming ran

    def warp_call(self, i):
        s, sh = self.sets[i], self.shape
        w = sh.w
        return lambda: chordrt.warp_decode_moe(s.x, s.ids, s.rw, w.w13, w.w13_scale, w.w2, w.w2_scale,
                                               expert_map=sh.emap, workspace=s.ws, output=s.warp_out)

    def align_call(self, i):
        s, sh = self.sets[i], self.shape

        def run():
            for bm, (sorted_ids, expert_ids, npp) in s.routing.items():
                chordrt.moe_align(s.ids, sh.g, bm, expert_map=sh.emap, sorted_token_ids=sorted_ids,
                                  expert_ids=expert_ids, num_tokens_post_padded=npp)
        return run

    def indexed_call(self, i):
        s, sh = self.sets[i], self.shape
        align = self.align_call(i)
        bm_gu, bm_dn = self.bm["gate_up"], self.bm["down"]
        wgu, wdn = sh.packed["gate_up"], sh.packed["down"]
        combine = sh.combine_filter(s.ids)

        def run():
            align()
            chordrt.indexed_gemm(s.x, wgu, *s.routing[bm_gu], sh.k, bm_gu, out=s.gu)
            chordrt.silu_and_mul(s.gu, s.act)
            chordrt.indexed_gemm(s.act, wdn, *s.routing[bm_dn], 1, bm_dn, out=s.dn)
            chordrt.moe_combine(s.dn, s.rw, s.out, **combine)
        return run

    def build_humming(self):
        """Humming's heuristic config per projection for the routes expected here, and each set's routing over
        the local experts at that config's block size (torch, outside any timing; indexed_bench.HummingPeer)."""
        sh = self.shape
        rows = sh.routed_rows(self.m)
        tunings = {p: heuristic_tuning(sh.humming[p][0], rows, HUMMING_COMPUTE["gemm_type"]) for p in sh.humming}
        bms = {p: int(t["block_shape"][0]) for p, t in tunings.items()}
        routing = []
        for s in self.sets:
            per_bm = {}
            for bm in sorted(set(bms.values())):
                sorted_ids, expert_ids, post, _ = local_routing(s.local, sh.e, bm)
                routed = int((sorted_ids < s.local.numel()).sum().item())
                if routed != s.local_routes:
                    raise RuntimeError(f"humming routing: {routed} routes in the blocks, expected {s.local_routes}")
                per_bm[bm] = (sorted_ids, expert_ids, post)
            routing.append(per_bm)
        locks = {p: torch.zeros(HUMMING_LOCKS, dtype=torch.int32, device=sh.dev) for p in tunings}
        self.humming = (tunings, bms, routing, locks)

    def peer_call(self, i):
        s, sh = self.sets[i], self.shape
        tunings, bms, routing, locks = self.humming
        calls = {}
        for p, (a, out, top_k) in {"gate_up": (s.x, s.gu, sh.k), "down": (s.act, s.dn, 1)}.items():
            sorted_ids, expert_ids, post = routing[i][bms[p]]
            config, tensors = sh.humming[p]
            calls[p] = humming_call(config, tensors, a, out, HUMMING_COMPUTE, tunings[p], locks[p],
                                    sorted_ids=sorted_ids, expert_ids=expert_ids, num_tokens_padded=post, top_k=top_k)
        combine = sh.combine_filter(s.ids)

        def run():
            calls["gate_up"]()
            chordrt.silu_and_mul(s.gu, s.act)
            calls["down"]()
            chordrt.moe_combine(s.dn, s.rw, s.out, **combine)
        return run


def measure(point, path, call_of, out_of, ref, row):
    """One path on a point: an eager call on the accuracy set (output poisoned with NaN first) checked against
    the reference, then the graph-replay timing over all sets; fills row (errors, <path>_us, <path>_tbps)."""
    acc = point.sets[point.acc]
    out_of(acc).fill_(float("nan"))
    call_of(point.acc)()
    torch.cuda.synchronize()
    err = mr.error_stats(torch, out_of(acc), ref)
    row["errors"][path] = err
    us = graph_time_us([call_of(i) for i in range(len(point.sets))])
    row[f"{path}_us"] = us
    row[f"{path}_tbps"] = point.bytes / us / 1e6


def guarded(row, path, failures, fn):
    """fn() with the library's rejections recorded as a skip of path and anything else as a failure; whether fn
    completed."""
    try:
        fn()
        return True
    except Exception as err:  # noqa: BLE001 - a path's failure costs its column, the run goes on
        why = rejection(err)
        if why is not None:
            row["skipped_paths"][path] = why
        else:
            row["failed_paths"][path] = f"{type(err).__name__}: {err}"
            failures.append(f"{row['shape']} M={row['tokens']} {path}: {type(err).__name__}: {err}")
        return False


def peer_point(shape, point, ref, row, peer):
    """The Humming column of a point (weights converted once per shape), within the peer budget. Its exceptions
    cost the column (row["failed_paths"]), not the run; a wrong result fails the run like any path's."""
    if peer["budget"] > 0 and peer["spent"] >= peer["budget"]:
        row["skipped_paths"][PEER] = f"peer budget ({peer['budget']:.0f} s) spent"
        return
    start = time.monotonic()
    try:
        if shape.humming is None:  # converted by Humming itself, once per shape
            try:
                shape.humming = {"gate_up": humming_weights(shape.w.w13, shape.w.w13_scale, 2 * shape.i, shape.h),
                                 "down": humming_weights(shape.w.w2, shape.w.w2_scale, shape.h, shape.i)}
            except Exception as err:  # noqa: BLE001 - no peer column for this shape
                shape.skip[PEER] = f"humming weight conversion failed: {type(err).__name__}: {err}"
                row["skipped_paths"][PEER] = shape.skip[PEER]
                print(f"{shape.name}: {shape.skip[PEER]}", flush=True)
                return
        point.build_humming()
        measure(point, PEER, point.peer_call, lambda s: s.out, ref, row)
        tunings, bms, _, _ = point.humming
        row["peer_config"] = {"block_m": bms, "tuning": tunings}
    except Exception as err:  # noqa: BLE001 - a device fault still ends the run (every later call fails)
        row["failed_paths"][PEER] = f"{type(err).__name__}: {err}"
        print(f"{shape.name} M={point.m}: humming FAILED ({type(err).__name__}: {err})", flush=True)
    finally:
        peer["spent"] += time.monotonic() - start


def bench_point(shape, m, args, ceil, failures, peer):
    row = {"shape": shape.name, "tokens": m, "routes": m * shape.k,
           "expected_active_experts": expected_active(shape.e, shape.g, shape.k, m),
           "errors": {}, "skipped_paths": dict(shape.skip), "failed_paths": {}}
    bm = None
    if "indexed_decode" not in row["skipped_paths"]:
        def block_m():
            nonlocal bm
            bm = shape.block_m(m)
        guarded(row, "indexed_decode", failures, block_m)
    point = Point(shape, m, args.quick, bm)
    sets = point.sets
    row.update({"local_routes": statistics.mean(s.local_routes for s in sets),
                "active_experts": statistics.mean(s.active for s in sets), "sets": len(sets),
                "accuracy_set": point.acc, "bytes": point.bytes, "block_m": bm, "aligns": len(sets[0].routing)})
    acc = sets[point.acc]
    ref = mr.reference_moe(torch, acc.x, acc.ids, acc.rw, shape.w, expert_map=shape.emap)
    guarded(row, "warp_decode", failures,
            lambda: measure(point, "warp_decode", point.warp_call, lambda s: s.warp_out, ref, row))

    def indexed():
        measure(point, "indexed_decode", point.indexed_call, lambda s: s.out, ref, row)
        row["indexed_align_us"] = graph_time_us([point.align_call(i) for i in range(len(sets))])
    if bm is not None:
        guarded(row, "indexed_decode", failures, indexed)
    if peer["on"] and PEER not in row["skipped_paths"]:
        peer_point(shape, point, ref, row, peer)
    for path in PATHS + (PEER,):
        if f"{path}_us" in row:
            row[f"{path}_fraction_of_stream_read"] = row[f"{path}_tbps"] / ceil["stream_read_tbps"]
    if "warp_decode_us" in row and "indexed_decode_us" in row:
        row["winner"] = "indexed_decode" if row["indexed_decode_us"] < row["warp_decode_us"] else "warp_decode"
        row["indexed_over_warp"] = row["indexed_decode_us"] / row["warp_decode_us"]
    else:
        row["winner"] = None
    if f"{PEER}_us" in row:  # < 1: that chordrt path faster than Humming's (whose time has no routing in it)
        row["vs_peer"] = {p: row[f"{p}_us"] / row[f"{PEER}_us"] for p in PATHS if f"{p}_us" in row}
    for path, err in row["errors"].items():
        if not err["rel_err"] <= MAX_REL_ERR:  # NaN fails too
            failures.append(f"{shape.name} M={m} {path}: rel err {err['rel_err']:.3e} > {MAX_REL_ERR:.0e}")
            print(f"FAIL {shape.name} M={m} {path}: rel err {err['rel_err']:.3e} > {MAX_REL_ERR:.0e} "
                  f"(cosine {err['cosine']:.6f})", flush=True)
    print(line(row), flush=True)
    return row


def cell(row, path):
    if f"{path}_us" in row:
        return f"{row[f'{path}_us']:8.1f}"
    return "    skip" if path in row["skipped_paths"] else ("    FAIL" if path in row["failed_paths"] else "       -")


def line(row):
    errs = "/".join(f"{row['errors'][p]['rel_err']:.1e}" if p in row["errors"] else "-" for p in PATHS + (PEER,))
    bm = row["block_m"]
    bm_text = f"bm {bm['gate_up']}/{bm['down']}" if bm else "bm -"
    align = f"align {row['indexed_align_us']:5.1f}" if "indexed_align_us" in row else "align     -"
    return (f"{row['shape']:<20} M={row['tokens']:<3} routes {row['routes']:>4} local {row['local_routes']:7.1f} "
            f"active {row['active_experts']:6.1f}/{row['expected_active_experts']:6.1f}  warp {cell(row, 'warp_decode')} "
            f"indexed {cell(row, 'indexed_decode')} ({bm_text}, {align})  humming {cell(row, PEER)} us  "
            f"winner {row['winner'] or '-':<14} err w/i/h {errs}")


def crossover(rows, shape_name, tokens):
    """The smallest M at which indexed decode beat warp decode, and the M from which it wins at every measured M."""
    both = sorted((r for r in rows if r["shape"] == shape_name and r["winner"]), key=lambda r: r["tokens"])
    wins = [r["tokens"] for r in both if r["winner"] == "indexed_decode"]
    from_m = None
    for r in reversed(both):
        if r["winner"] != "indexed_decode":
            break
        from_m = r["tokens"]
    return {"first_indexed_win": wins[0] if wins else None, "indexed_wins_from": from_m, "indexed_wins_at": wins,
            "tokens_compared": [r["tokens"] for r in both],
            "ratio_indexed_over_warp": {r["tokens"]: r["indexed_over_warp"] for r in both},
            "max_tokens": max(tokens)}


def describe_crossover(name, c):
    if not c["tokens_compared"]:
        return f"{name:<20} no M with both paths measured"
    if c["first_indexed_win"] is None:
        return f"{name:<20} crossover: none <= {max(c['tokens_compared'])} (warp decode faster at every M)"
    text = f"{name:<20} crossover: M = {c['first_indexed_win']}"
    if c["indexed_wins_from"] != c["first_indexed_win"]:  # not monotonic
        text += f" (indexed decode faster at M = {', '.join(map(str, c['indexed_wins_at']))}; "
        text += (f"at every measured M from {c['indexed_wins_from']} on)" if c["indexed_wins_from"] is not None else
                 f"not at M = {max(c['tokens_compared'])})")
    return text


def main():
    args = parse_args()
    import_gpu_modules()
    torch.manual_seed(0)
    names = [n for n in (args.shapes.split(",") if args.shapes else SHAPES) if n]
    for n in names:
        if n not in SHAPES:
            raise SystemExit(f"unknown shape {n!r} (have {', '.join(SHAPES)})")
    tokens = int_list(args.tokens) if args.tokens else (QUICK_TOKENS if args.quick else TOKENS)
    if not tokens or any(t < 1 or t > 128 for t in tokens):
        raise SystemExit(f"--tokens must be in [1, 128], got {args.tokens}")
    start = time.monotonic()
    deadline = start + args.budget_s if args.budget_s > 0 else None
    out_path = pathlib.Path(args.out) if args.out else default_out("decode_crossover_bench")
    ceil = ceilings()
    print(f"ceilings: copy {ceil['copy_tbps']:.2f} TB/s, stream read {ceil['stream_read_tbps']:.2f} TB/s, "
          f"dense BF16 {ceil['dense_bf16_tflops']:.0f} TFLOP/s", flush=True)
    announce_peer(args.no_peers)
    peer = {"on": HUMMING_MISSING is None and not args.no_peers, "budget": args.peer_budget_s, "spent": 0.0}
    rows, skipped, failures = [], [], []
    for name in names:
        if deadline is not None and time.monotonic() > deadline:
            skipped.append(f"{name} (all points)")
            continue
        try:
            shape = Shape(name)
        except Exception as err:  # noqa: BLE001 - one shape's weights failing (memory) costs that shape
            failures.append(f"{name}: weights: {type(err).__name__}: {err}")
            print(f"FAIL {name}: weights: {type(err).__name__}: {err}", flush=True)
            torch.cuda.empty_cache()
            continue
        for why in shape.skip.values():
            print(f"{name}: indexed decode skipped: {why}", flush=True)
        for m in tokens:
            if deadline is not None and time.monotonic() > deadline:
                skipped.append(f"{name} M={m}")
                continue
            rows.append(bench_point(shape, m, args, ceil, failures, peer))
        del shape  # weights, packed copies and Humming's conversion go before the next shape's
        torch.cuda.empty_cache()
    cross = {n: crossover(rows, n, tokens) for n in names}
    print("\ncrossover (indexed decode vs warp decode, whole MoE block):")
    for n in names:
        print(describe_crossover(n, cross[n]))
    if peer["on"]:
        print(f"humming column: {peer['spent']:.1f} s of its {args.peer_budget_s:.0f} s budget")
    if skipped:
        print(f"skipped (budget): {', '.join(skipped)}")
    write_result(
        out_path, args, ceil, start, rows, skipped,
        shapes={n: dict(zip(("hidden", "intermediate", "local_experts", "global_experts", "top_k", "ep_rank"),
                            SHAPES[n])) for n in names},
        format="int4", tokens=list(tokens), max_rel_err=MAX_REL_ERR, timing=TIMING, crossover=cross,
        peers=peers_field(args.no_peers, PEER_TIMING), failures=failures,
    )
    if failures:
        print(f"FAIL: {len(failures)} problem(s):")
        for f in failures:
            print(f"  {f}")
        sys.exit(1)


if __name__ == "__main__":
    main()
