#!/usr/bin/env python3
"""Regenerates docs/performance.md from the JSON files in bench/results/ (the newest full run of each kind)."""
import json
import pathlib
import re
import subprocess

import w4a16_goals

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


def newest(prefix, quick_covers_all=False):
    """The newest full run of a kind; a --quick run (named *.quick.json: a subset of the points) only when
    there is no full one. Where a kind's --quick runs every point with fewer replays (quick_covers_all:
    the indexed bench), simply the newest run."""
    files = sorted(RESULTS.glob(prefix + "*.json"),
                   key=lambda f: (quick_covers_all or not f.name.endswith(".quick.json"), f.name))
    return (files[-1], json.loads(files[-1].read_text())) if files else (None, None)


def _run_date(f):
    """(date, committed, name) of a result file named KIND-DEVICE-YYYYMMDD...: the date in the name orders
    runs across devices; within a day, the time git added the file (a file not yet committed is newest)."""
    m = re.search(r"-(\d{8})", f.name)
    added = subprocess.run(["git", "log", "--diff-filter=A", "--format=%ct", "-1", "--", str(f)], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    return (m.group(1) if m else "", int(added) if added else float("inf"), f.name)


def newest_per_case(prefix, case_of, include_quick=False):
    """Runs of a kind (full ones, and --quick ones with include_quick), newest first by the date in their
    names, each kept for the cases (case_of(row)) no newer run measured, with only those rows: [(file, run)]."""
    files = sorted((f for f in RESULTS.glob(prefix + "*.json") if include_quick or not f.name.endswith(".quick.json")),
                   key=_run_date, reverse=True)
    seen, out = set(), []
    for f in files:
        run = json.loads(f.read_text())
        cases = {case_of(r) for r in run["results"]} - seen
        if cases:
            run["results"] = [r for r in run["results"] if case_of(r) in cases]
            out.append((f, run))
            seen |= cases
    return out


def crossover_section(path, xo):
    """Warp decode vs indexed decode (and Humming's decode) for the whole MoE block, per shape and M."""
    lines = [f"## Decode crossover on {xo['device']} (`{path.name}`)", "",
             "The whole MoE block on chordrt's two decode paths (INT4): warp decode, and indexed decode composed "
             "as an engine would (moe_align, MMA-layout indexed GEMMs, silu_and_mul, moe_combine); Humming 0.1.19's "
             "two GEMMs with chordrt's glue where it ran (its routing is built outside the timed graph). "
             "`chord_moe_decode_path` fits a model of both paths to these points (`heuristics/moe_decode_path.cpp`).",
             "", "| shape | M | warp decode µs | indexed decode µs | Humming µs | faster |", "|---|---:|---:|---:|---:|---|"]
    fmt = lambda v: f"{v:.1f}" if isinstance(v, (int, float)) else "—"
    for r in xo["results"]:
        lines.append(f"| {r['shape']} | {r['tokens']} | {fmt(r.get('warp_decode_us'))} | "
                     f"{fmt(r.get('indexed_decode_us'))} | {fmt(r.get('humming_decode_us'))} | {r.get('winner', '—')} |")
    return lines + [""]


def median(v):
    v = sorted(v)
    return 0.5 * (v[(len(v) - 1) // 2] + v[len(v) // 2]) if v else 0.0


def compile_section(path, c):
    """Cold NVRTC compile, one kernel at a time, on the 2-core development machine."""
    kernels = c["kernels"]
    lines = [f"## NVRTC compile on the 2-core development machine (`{path.name}`)", ""]
    if "plan" not in c:  # older runs: every family's examples only
        lines += ["| kernel | cold compile ms | disk hit ms |", "|---|---:|---:|"]
        lines += [f"| `{k['descriptor']}` | {k['cold_compile_ms']:.0f} | {k['disk_hit_ms']:.3f} |" for k in kernels]
        return lines + ["", f"Median {c['cold_compile_ms_median']:.0f} ms, max {c['cold_compile_ms_max']:.0f} ms.", ""]
    plan = [k["cold_compile_ms"] for k in kernels if k["in_plan"]]
    lines += [f"The `{c['plan']}` plan: {len(plan)} kernels, median {median(plan):.0f} ms, max {max(plan):.0f} ms "
              f"(goal: median <= 300, max <= 1000). With every family's examples ({len(kernels)} kernels): median "
              f"{c['cold_compile_ms_median']:.0f} ms, max {c['cold_compile_ms_max']:.0f} ms; a disk hit "
              f"{c['disk_hit_ms_median']:.3f} ms.", ""]
    if "reference_compile_ms" in c:
        ref = c["reference_compile_ms"]
        lines += [f"The fixed reference program (`bench/host_bench.cpp`, never edited) compiled in {ref:.0f} ms on this "
                  f"run: the plan's median is {median(plan) / ref:.2f}x and its max {max(plan) / ref:.2f}x that. "
                  "The machine's speed varies between days, so runs compare by these ratios.", ""]
    lines += ["| family | kernels | median ms | max ms |", "|---|---:|---:|---:|"]
    families = sorted({k["family"] for k in kernels})
    for f in families:
        ms = [k["cold_compile_ms"] for k in kernels if k["family"] == f]
        lines.append(f"| `{f}` | {len(ms)} | {median(ms):.0f} | {max(ms):.0f} |")
    lines += ["", "Slowest:", ""]
    for k in sorted(kernels, key=lambda k: -k["cold_compile_ms"])[:5]:
        lines.append(f"- {k['cold_compile_ms']:.0f} ms `{k['descriptor']}`{'' if k['in_plan'] else ' (not in the plan)'}")
    return lines + [""]


def main():
    lines = ["# Performance", "",
             "Generated by `bench/report.py` from `bench/results/`; do not edit by hand. Method: SPEC §6 —",
             "CUDA-graph replays timed with events, medians, input sets rotated past the L2, ceilings measured in",
             "the same run.", ""]
    path, cpu = newest("host_bench-cpu-")
    if cpu:
        lines += compile_section(path, cpu["compile"])
    path, host = newest("host_bench-h200-")
    if host:
        c, l = host["compile"], host["launch"]
        lines += [f"## JIT host costs (`{path.name}`)", "",
                  f"- cold NVRTC compile: median {c['cold_compile_ms_median']:.1f} ms, max "
                  f"{c['cold_compile_ms_max']:.1f} ms over {len(c['kernels'])} kernels (max includes loading NVRTC)",
                  f"- disk-hit load: median {c['disk_hit_ms_median']:.3f} ms"]
        if "skipped" not in l:
            lines += [f"- per launch on a memo hit ({l['op']}): chordrt op {l['chordrt_op_host_us']:.2f} µs of host "
                      f"time, of which raw `cuLaunchKernelEx` {l['raw_cuLaunchKernelEx_host_us']:.2f} µs; chordrt's "
                      f"own overhead {l['chordrt_overhead_us']:.2f} µs (lookup alone {l['lookup_only_us']:.3f} µs)"]
        lines.append("")
    path, glue = newest("glue_bench-")
    if glue:
        c = glue["ceilings"]
        lines += [f"## MoE glue kernels on {glue['device']} (`{path.name}`)", "",
                  f"Ceilings in the same run: device copy {c['copy_tbps']:.2f} TB/s (read+write), streaming read "
                  f"{c['stream_read_tbps']:.2f} TB/s, dense BF16 GEMM {c['dense_bf16_tflops']:.0f} TFLOP/s.", "",
                  "| op | shape | chordrt µs | TB/s | of stream read | PyTorch µs | speed-up |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        for r in glue["results"]:
            lines.append(f"| {r['op']} | {r['shape']} | {r['chordrt_us']:.2f} | {r['chordrt_tbps']:.2f} | "
                         f"{100 * r['fraction_of_stream_read']:.0f}% | {r['torch_us']:.2f} | "
                         f"{r['speedup_vs_torch']:.2f}× |")
        lines += ["",
                  "Bytes are those actually moved (for the EP filter: only local routes' rows). PyTorch baselines: "
                  "`silu(gate) * up`; `torch.bmm` of BF16 weights and rows (it has no EP filter and computes every "
                  "route); for `moe_align` a sort-based equivalent run eagerly (it synchronizes with the host, so "
                  "it cannot be graph-captured). `bench/NOTES.md` explains each number against its prediction.",
                  ""]
    wd_runs = newest_per_case("warp_decode_bench-", lambda r: (r["shape"], r["format"]))
    if wd_runs:
        wd = wd_runs[0][1]
        c = wd["ceilings"]
        names = ", ".join(f"`{f.name}`" for f, _ in wd_runs)
        lines += [f"## Warp decode MoE on {wd['device']} ({names})", "",
                  f"Whole expert block (gate/up + SiLU·up + down + top-k sum), two kernels; each (shape, format) from "
                  f"the newest run that measured it. Ceilings in the newest run: "
                  f"streaming read {c['stream_read_tbps']:.2f} TB/s, dense BF16 GEMM {c['dense_bf16_tflops']:.0f} "
                  f"TFLOP/s. Bytes = weights and scales of the local experts the batch touches (+ x and output), "
                  f"averaged over the rotated routing sets. Baselines on BF16-dequantized weights, same process: "
                  f"`torch._grouped_mm` (graph-captured) and a per-expert matmul loop (eager). Errors: relative "
                  f"Frobenius vs a float64 reference, for chordrt and for BF16 dequant-then-matmul on the same inputs.",
                  "",
                  "| shape | format | M | chordrt µs | TB/s | of stream read | grouped_mm µs | × grouped_mm | "
                  "torch loop µs | rel err | BF16-path rel err |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for _, run in wd_runs:
            for r in run["results"]:
                lines.append(f"| {r['shape']} | {r['format']} | {r['tokens']} | {r['chordrt_us']:.1f} | "
                             f"{r['chordrt_tbps']:.2f} | {100 * r['fraction_of_stream_read']:.0f}% | "
                             f"{r.get('grouped_mm_us', float('nan')):.1f} | "
                             f"{r.get('speedup_vs_grouped_mm', float('nan')):.2f}× | "
                             f"{r['torch_loop_us']:.0f} | {r['chordrt_error']['rel_err']:.2e} | "
                             f"{r['bf16_dequant_error']['rel_err']:.2e} |")
        lines += ["", "Where the time goes and what each version changed: `bench/NOTES.md` (warp decode section).", ""]
    path, xo = newest("decode_crossover_bench-")
    if xo:
        lines += crossover_section(path, xo)
    sweeps = sorted((RESULTS / "sweeps").glob("warp_decode_sweep-*.json"))
    if sweeps:
        lines += ["### Warp decode heuristic sweeps (`bench/results/sweeps/`)", "",
                  "The benchmark rerun with one `CHORD_WARP_DECODE_CONFIG` override (named in the file); later "
                  "heuristics adopted what won, so the table above can predate a change measured here.", "",
                  "| file | shape | format | M | µs | of stream read |", "|---|---|---|---:|---:|---:|"]
        for f in sweeps:
            for r in json.loads(f.read_text())["results"]:
                lines.append(f"| `{f.stem}` | {r['shape']} | {r['format']} | {r['tokens']} | {r['chordrt_us']:.1f} | "
                             f"{100 * r['fraction_of_stream_read']:.0f}% |")
        lines.append("")
    grouped_path, gr = newest("grouped_bench-")
    if gr:
        lines += grouped_section(grouped_path, gr)
    # Other models' grouped runs (--model, often --quick): per model, the newest run that measured it (the file
    # above already shows its own).
    for path, run in newest_per_case("grouped_bench-", w4a16_goals.row_model, include_quick=True):
        run["results"] = [r for r in run["results"] if w4a16_goals.row_model(r) != w4a16_goals.KIMI]
        if run["results"] and path != grouped_path:
            lines += grouped_section(path, run)
    path, ix = newest("indexed_bench-", quick_covers_all=True)
    if ix:
        lines += indexed_section(path, ix)
    dsa_runs = newest_per_case("dsa_bench-", lambda r: (r["op"], r.get("heads"), r["tokens"], r.get("output")))
    if dsa_runs:
        lines += dsa_section(dsa_runs)
    # Per (case, T): the newest run that measured it, --quick runs included (kernels change between full
    # runs; each row names its run and so its card).
    mla_runs = newest_per_case("sparse_mla_bench-", lambda r: (r["case"], r["tokens"]), include_quick=True)
    if mla_runs:
        lines += sparse_mla_section(mla_runs)
    (ROOT / "docs" / "performance.md").write_text("\n".join(lines))


def _fmt(value, spec, suffix=""):
    return "—" if value is None else f"{value:{spec}}{suffix}"


def _targets_met(rows):
    targeted = [r for r in rows if r.get("target_us") is not None]
    return f"{sum(r['target_met'] for r in targeted)}/{len(targeted)}"


def _target_cell(r):
    return "—" if r.get("target_us") is None else f"{r['target_us']} {'✓' if r['target_met'] else '✗ miss'}"


def _goals_met(rows, goal_of):
    """'met/judged' over the rows, each judged by goal_of (bench/w4a16_goals.py: committed runs are judged by
    today's goals, whatever targets they were run against)."""
    judged = [g for g in map(goal_of, rows) if g["met"] is not None]
    return f"{sum(g['met'] for g in judged)}/{len(judged)}"


def _goal_cell(goal_of):
    def cell(r):
        g = goal_of(r)
        if g["met"] is None:
            return "—"
        bound = "" if g["bound_us"] is None else f"≤ {g['bound_us']:.1f} "
        return bound + ("✓" if g["met"] else "✗ " + "; ".join(n for n, ok in g["checks"].items() if not ok))
    return cell


# The W4A16 GEMM benchmarks' shared columns (header, alignment, cell), after each one's key columns.
_GEMM_COLUMNS = [
    ("chordrt µs", "---:", lambda r: f"{r['chordrt_us']:.1f}"),
    ("TFLOP/s", "---:", lambda r: f"{r['chordrt_tflops']:.0f}"),
    ("of dense", "---:", lambda r: f"{100 * r['fraction_of_dense_bf16']:.0f}%"),
    ("TB/s", "---:", lambda r: f"{r['chordrt_tbps']:.2f}"),
    ("of stream read", "---:", lambda r: f"{100 * r['fraction_of_stream_read']:.0f}%"),
    ("baseline µs", "---:", lambda r: _fmt(r.get("baseline_us"), ".1f")),
    ("× baseline", "---:", lambda r: _fmt(r.get("speedup_vs_baseline"), ".2f", "×")),
    ("rel err", "---:", lambda r: f"{r['chordrt_error']['rel_err']:.2e}"),
]


def _gemm_section(title, intro, result, key_columns, goal_of, extra_columns=()):
    """A W4A16 GEMM benchmark's section: title, intro paragraph, one table row per point (its goal judged by
    goal_of), skipped points."""
    columns = key_columns[:] + [_GEMM_COLUMNS[0], ("goal", "---", _goal_cell(goal_of))] + _GEMM_COLUMNS[1:] + list(
        extra_columns)
    lines = [title, "", intro, "",
             "| " + " | ".join(h for h, _, _ in columns) + " |",
             "|" + "|".join(a for _, a, _ in columns) + "|"]
    lines += ["| " + " | ".join(cell(r) for _, _, cell in columns) + " |" for r in result["results"]]
    if result.get("skipped"):
        lines += ["", f"Skipped (the run's time budget): {', '.join(result['skipped'])}."]
    lines.append("")
    return lines


def _humming_columns(result):
    """The Humming peer's sentence for the intro and its columns, for runs made with the peer installed (the
    indexed and grouped benches' peer_us / vs_peer / peer_error fields); "" and none otherwise."""
    if not any("humming" in r.get("peer_us", {}) for r in result["results"]):
        return "", []
    peer = result["peers"]["humming"]
    text = (f" Peer: Humming {peer['version']} on the same checkpoint tensors (its own conversion and heuristic "
            f"config), {peer['timing']}; chordrt ÷ Humming < 1: chordrt faster.")
    failed = [r for r in result["results"] if "humming" in r.get("peer_failed", {})]
    if failed:
        text += f" Humming failed on {len(failed)} point(s) (— in its columns; the reasons are in the JSON)."
    return text, [("Humming µs", "---:", lambda r: _fmt(r.get("peer_us", {}).get("humming"), ".1f")),
                  ("chordrt ÷ Humming", "---:", lambda r: _fmt(r.get("vs_peer", {}).get("humming"), ".2f")),
                  ("Humming rel err", "---:",
                   lambda r: _fmt(r.get("peer_error", {}).get("humming", {}).get("rel_err"), ".2e"))]


def grouped_section(path, gr):
    c = gr["ceilings"]
    models = sorted({w4a16_goals.row_model(r) for r in gr["results"]})
    if models == [w4a16_goals.KIMI]:
        shapes = ("Kimi K2 (384 experts) at EP8/16/32 (48/24/12 local experts), gate_up (N 4096, K 7168) and down "
                  "(N 7168, K 2048).")
    else:
        shapes = "; ".join(sorted({f"{r.get('model', w4a16_goals.KIMI)} EP{r['ep']} ({r['experts']} local experts) "
                                   f"{r['projection']} (N {r['n']}, K {r['k']})" for r in gr["results"]})) + "."
    intro = (f"{shapes} Contiguous (prefill): every expert the same aligned row count; masked (decode): "
             f"every expert the same token count, max_m 128, expected_m = the count. Ceilings in the same run: "
             f"streaming read {c['stream_read_tbps']:.2f} TB/s, dense BF16 GEMM {c['dense_bf16_tflops']:.0f} "
             f"TFLOP/s. TFLOP/s over valid rows; bytes = packed weights and scales of the touched experts + "
             f"activation rows read + output rows written. Weight and input sets rotated past the L2. Baseline: "
             f"`torch._grouped_mm` on BF16-dequantized weights (masked: its 3-D batched form over max_m rows, or "
             f"`torch.bmm`), graph-captured, same process. Goals (issue 15: contiguous ≤ Chord's published µs and "
             f"≥ 1.05× the baseline; masked ≥ 80% of streaming read at 8 and 16 tokens and ≤ Chord at 8): "
             f"{_goals_met(gr['results'], w4a16_goals.grouped_goal)} points met.")
    others = [m for m in models if m != w4a16_goals.KIMI]
    if others:
        intro += f" Other shapes ({', '.join(others)}; `grouped_bench.py --model`): rows named after the model."
    keys = [("EP", "---:", lambda r: ("" if w4a16_goals.row_model(r) == w4a16_goals.KIMI else r["model"] + " ") +
             f"{r['ep']}"), ("projection", "---", lambda r: r["projection"]),
            ("mode", "---", lambda r: r["mode"]), ("rows/expert", "---:", lambda r: f"{r['per_expert']}")]
    peer_text, peers = _humming_columns(gr)
    return _gemm_section(f"## W4A16 grouped MoE GEMMs on {gr['device']} (`{path.name}`)", intro + peer_text, gr,
                         keys, w4a16_goals.grouped_goal, peers)


def indexed_section(path, ix):
    c = ix["ceilings"]
    intro = (f"vLLM routing (`moe_align` → sorted_token_ids / expert_ids), Kimi K2 (384 experts, top-8). EP8 "
             f"prefill: 48 local experts behind an expert map, T tokens in the step (≈ T local routes), gate_up "
             f"(N 4096, K 7168) and down (N 7168, K 2048); TP8 prefill: all 384 experts, gate_up (N 512, K 7168) "
             f"and down (N 7168, K 256), 8T routes; both on the WGMMA_K64 layout. EP8 decode: 20 / 50 tokens over 48 "
             f"experts (160 / 400 routes), MMA layout. Down runs on the [8T, I] activations with top_k 1. block_m "
             f"from `indexed_block_m`; blocks = live blocks `moe_align` produced (mean over the input sets) / the "
             f"heuristic's expected count. Ceilings in the same run: streaming read "
             f"{c['stream_read_tbps']:.2f} TB/s, dense BF16 GEMM {c['dense_bf16_tflops']:.0f} TFLOP/s. TFLOP/s "
             f"over local routes; bytes = packed weights and scales of the touched experts + distinct activation "
             f"rows read + output rows written. Weight and input sets rotated past the L2. Baseline: "
             f"`torch._grouped_mm` on BF16-dequantized weights over the routes grouped by expert, graph-captured, "
             f"same process, the grouped GEMM alone (gather and offs built outside the graph). Rel err vs FP32 "
             f"over the written rows. Goals (issue 15 for prefill: ≤ 0.90× the faster of Humming in the same run "
             f"and Chord's published µs, ≥ 65% of dense from 4096 tokens at EP8, never slower than the baseline; "
             f"issue 16 for decode: ≤ 0.95× Humming, ≥ 85% of streaming read at 20 tokens): "
             f"{_goals_met(ix['results'], w4a16_goals.indexed_goal)} points met.")
    models = sorted({w4a16_goals.row_model(r) for r in ix["results"]} - {w4a16_goals.KIMI})
    if models:
        intro += (f" Other shapes ({', '.join(models)}): the cases named after the model, defined in "
                  f"`bench/indexed_bench.py` (no Chord numbers published for them).")
    keys = [("case", "---", lambda r: ("" if w4a16_goals.row_model(r) == w4a16_goals.KIMI else r["model"] + " ") +
             f"{r['parallel']} {r['phase']}"),
            ("projection", "---", lambda r: r["projection"]), ("tokens", "---:", lambda r: f"{r['tokens']}"),
            ("local routes", "---:", lambda r: f"{r['local_routes']:.0f}"),
            ("block_m", "---:", lambda r: f"{r['block_m']}"),
            ("blocks / expected", "---:", lambda r: f"{r['actual_blocks']:.1f} / {r['expected_blocks']:.1f}")]
    peer_text, peers = _humming_columns(ix)
    return _gemm_section(f"## W4A16 indexed MoE GEMMs on {ix['device']} (`{path.name}`)", intro + peer_text, ix,
                         keys, w4a16_goals.indexed_goal, peers)


def _mla_target_cell(r):
    if r.get("target_us") is not None:
        goal = f"≤ {r['target_us']:.1f} µs"
    elif r.get("target_tflops") is not None:
        goal = f"≥ {r['target_tflops']} TFLOP/s"
    else:
        return "—"
    return f"{goal} {'✓' if r['target_met'] else '✗ miss'}"


def sparse_mla_section(runs):
    """runs: [(file, run)] newest first, each with the (case, T) rows no newer run measured."""
    path, sm = runs[0]
    c = sm["ceilings"]
    rows = sorted((dict(r, file=f.name) for f, run in runs for r in run["results"]),
                  key=lambda r: (r["case"].split("/")[0] != "fp8", r["case"].split("/")[0],
                                 int(r["case"].rsplit("/h", 1)[1]), r["tokens"]))
    targeted = [r for r in rows if r.get("target_met") is not None]
    intro = (f"topk 2048, softmax scale 1/√576, all keys valid; every query token its own request with its own "
             f"32K–64K-token region of the cache, indices uniform within it, input sets rotated past the L2. "
             f"Bytes = selected records + q + out + lse; TFLOP/s = 2·T·h·keys·(576+512). Each row is the newest "
             f"run that measured it (the run column names its card; --quick runs have fewer replays); ceilings "
             f"of the newest run ({sm['device']}): streaming read {c['stream_read_tbps']:.2f} TB/s, dense BF16 "
             f"GEMM {c['dense_bf16_tflops']:.0f} TFLOP/s. Gather µs: the same run's ceiling that only reads the "
             f"selected records once (where measured). Baseline: {sm['baseline_timing']}. Rel err vs an FP64 "
             f"reference on the dequantized records. Targets from the issue (on the H200; h=16: within 15% of "
             f"h=8 at the same T): {sum(r['target_met'] for r in targeted)}/{len(targeted)} met.")
    columns = [
        ("case", "---", lambda r: r["case"]), ("T", "---:", lambda r: f"{r['tokens']}"),
        ("chordrt µs", "---:", lambda r: f"{r['chordrt_us']:.1f}"), ("target", "---:", _mla_target_cell),
        ("TB/s", "---:", lambda r: f"{r['chordrt_tbps']:.2f}"),
        ("of stream read", "---:", lambda r: f"{100 * r['fraction_of_stream_read']:.0f}%"),
        ("gather µs", "---:", lambda r: _fmt(r.get("gather_us"), ".1f")),
        ("TFLOP/s", "---:", lambda r: f"{r['chordrt_tflops']:.0f}"),
        ("of dense", "---:", lambda r: f"{100 * r['fraction_of_dense_bf16']:.0f}%"),
        ("baseline µs", "---:", lambda r: _fmt(r.get("baseline_us"), ".1f")),
        ("× baseline", "---:", lambda r: _fmt(r.get("speedup_vs_baseline"), ".2f", "×")),
        ("rel err", "---:", lambda r: f"{r['chordrt_error']['rel_err']:.2e}"),
        ("run", "---", lambda r: f"`{r['file']}`"),
    ]
    lines = [f"## Sparse MLA decode ({', '.join(f'`{f.name}`' for f, _ in runs)})", "", intro, "",
             "| " + " | ".join(h for h, _, _ in columns) + " |", "|" + "|".join(a for _, a, _ in columns) + "|"]
    lines += ["| " + " | ".join(cell(r) for _, _, cell in columns) + " |" for r in rows]
    skipped = [s for _, run in runs for s in run.get("skipped", [])]
    if skipped:
        lines += ["", f"Skipped (a run's time budget): {', '.join(skipped)}."]
    lines.append("")
    return lines


def dsa_section(runs):
    """runs: [(file, run)] newest first, each with the rows no newer run measured."""
    path, d = runs[0]
    c = d["ceilings"]
    rows = [dict(r, file=f.name) for f, run in runs for r in run["results"]]
    files = ", ".join(f"`{f.name}`" for f, _ in runs)
    lines = [f"## DSA indexer on {d['device']} ({files})", "",
             f"Logits: every query has its own context of {d['context']} positions in a paged FP8 key cache (page "
             f"{d['page_size']}, 132 bytes per token, shuffled block tables); TB/s over the key bytes, TFLOP/s = "
             f"2 · H · 128 per key; streaming read {c['stream_read_tbps']:.2f} TB/s in the newest run. Ceilings of "
             "the access pattern, same run: a kernel reading the same pages in the same order (paged read), and "
             "also writing one float per key (+ writes: the op's whole traffic). Baseline: "
             f"{d['baseline_timing']['logits']}. Top-k: {d['baseline_timing']['topk']}; bytes = the logits read "
             f"once. Targets from the issue: {_targets_met(rows)} met.", "",
             "| H | T | chordrt µs | target µs | key TB/s | of stream read | paged read µs | + writes µs | "
             "of read+write ceiling | TFLOP/s | PyTorch µs | × PyTorch | rel err | run |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in sorted((r for r in rows if r["op"] == "logits"), key=lambda r: (r["heads"], r["tokens"])):
        lines.append(f"| {r['heads']} | {r['tokens']} | {r['chordrt_us']:.1f} | {_target_cell(r)} | "
                     f"{r['chordrt_tbps']:.2f} | {100 * r['fraction_of_stream_read']:.0f}% | "
                     f"{_fmt(r.get('paged_read_us'), '.1f')} | {_fmt(r.get('paged_read_write_us'), '.1f')} | "
                     f"{_fmt(r.get('fraction_of_paged_read_write') and 100 * r['fraction_of_paged_read_write'], '.0f', '%')} | "
                     f"{r['chordrt_tflops']:.0f} | "
                     f"{_fmt(r.get('baseline_us'), '.1f')} | {_fmt(r.get('speedup_vs_baseline'), '.2f', '×')} | "
                     f"{r['chordrt_error']['rel_err']:.2e} | `{r['file']}` |")
    lines += ["", "| top-k of 65536 | T | output | chordrt µs | target µs | TB/s | of stream read | torch.topk µs | "
              "× torch | sets match |", "|---:|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in (r for r in rows if r["op"] == "topk"):
        lines.append(f"| {r['topk']} | {r['tokens']} | {r['output']} | {r['chordrt_us']:.1f} | {_target_cell(r)} | "
                     f"{r['chordrt_tbps']:.2f} | {100 * r['fraction_of_stream_read']:.0f}% | "
                     f"{_fmt(r.get('baseline_us'), '.1f')} | {_fmt(r.get('speedup_vs_baseline'), '.2f', '×')} | "
                     f"{'yes' if r['matches_torch_topk'] else 'NO'} |")
    for _, run in runs:
        if run.get("skipped"):
            lines += ["", f"Skipped (the run's time budget): {', '.join(run['skipped'])}."]
    lines.append("")
    return lines


if __name__ == "__main__":
    main()
