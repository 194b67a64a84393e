#!/usr/bin/env python3
"""Racecheck every kernel specialization once, on the cheapest tests that launch it (issue 14).

compute-sanitizer racecheck is ~10x slower than memcheck and the whole GPU suite never finished under it,
but what needs checking is each distinct kernel (cache key), once. tools/gpu_run.sh runs the three steps
with CHORD_GPU_RACECHECK_PLAN=1:

  record --catch2 BIN --out DIR [--deadline-s S] PYTEST_FILE...
      Each pytest file as its own process and, beside them, the [gpu] Catch2 cases one per process, each
      with its own CHORD_LAUNCH_LOG (the runtime appends "<key> <descriptor>" per launch). Records, one
      JSON object per test: DIR/catch2.tests.jsonl (this script) and DIR/<file stem>.log.tests.jsonl
      (tests/python/conftest.py): {"nodeid" or "case", "duration_s", "keys", "descriptors", "launches",
      "outcome"}.
  plan RECORDS... --out DIR [--jobs N] [--group-tests N] [--exclude-family F]... [--cover structure|key]
      A greedy weighted set cover of the keys (warp decode's: of their structures, SHAPE_FIELDS) by the
      tests' normal-run durations (plus, for a structure cover, the weight bytes they stream under
      racecheck): DIR/plan.json,
      DIR/catch2.txt (one case per line) and DIR/pytest_<g>.txt (one nodeid per line, groups of at most
      N tests balanced by duration, at least one per job; gpu_run.sh runs JOBS of them at once).
  report --plan DIR/plan.json --logs OUTDIR
      Per planned test: passed, failed or timed out under racecheck, from gpu_run.sh's summary and logs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

# Both families run chord::grouped::grouped_gemm_kernel (indexed prefill is the grouped kernel gathering
# routed rows), which gpu_run.sh leaves out of racecheck: racecheck does not model the mbarrier
# complete_tx ordering of a raw cp.async.bulk, so it reports every read of a bulk-copied stage.
EXCLUDED_FAMILIES = ("grouped.gemm", "indexed.prefill")

# Warp decode's kernels differ between model shapes only in constants (hidden, intermediate, experts, top-k,
# token bucket): the rings, barriers and job loops are the same code, while one launch at a Kimi K2 shape
# takes minutes under racecheck (36 tests did not finish in 300 s on the H200). With --cover structure (the
# default) these families are covered once per structure, the descriptor without those fields, which
# small shapes reach; --cover key covers every cache key.
SHAPE_FIELDS = {
    "warp_decode.gate_up": ("hidden", "intermediate", "experts", "top_k", "max_tokens"),
    "warp_decode.down": ("hidden", "intermediate", "experts", "top_k", "max_tokens"),
}

# gpu_run.sh's step names for the plan's racecheck runs (its logs are OUTDIR/<name>.log).
CATCH2_STEP = "sanitize_racecheck_plan_catch2_{}"
PYTEST_STEP = "sanitize_racecheck_plan_pytest_{}"


# ---- launch logs and records ----------------------------------------------------------------------------


def launch_record(log_path, start: int, end: int) -> dict:
    """The distinct kernels launched between two byte offsets of a launch log, in first-launch order."""
    lines = []
    if end > start:  # else the log may not exist yet
        with open(log_path, "rb") as f:
            f.seek(start)
            lines = f.read(end - start).decode(errors="replace").splitlines()
    kernels: dict = {}
    for line in lines:
        key, _, descriptor = line.partition(" ")
        if key:
            kernels.setdefault(key, descriptor)
    return {"keys": list(kernels), "descriptors": list(kernels.values()), "launches": len(lines)}


def family_of(descriptor: str) -> str:
    """"glue.moe_align[sm_90a]{...}" -> "glue.moe_align"."""
    return descriptor.partition("[")[0]


# What a warp decode launch costs under racecheck grows with the weight bytes it streams through shared
# memory, which a test's normal duration (mostly Python) does not show: ~1 s per MB on the H200 (tests
# streaming ~50-500 MB of Kimi K2 weights did not finish in 300 s). Charged to a test in a structure cover,
# so the cover prefers small shapes.
RACECHECK_S_PER_BYTE = 1e-6


def streamed_bytes(descriptor: str) -> float:
    """Upper bound of the weight bytes one launch of a SHAPE_FIELDS kernel streams: every reachable expert's
    gate, up and down rows at INT4 or MXFP8 (0 for other families)."""
    if family_of(descriptor) not in SHAPE_FIELDS or "{" not in descriptor:
        return 0.0
    f = dict(kv.partition("=")[::2] for kv in descriptor.partition("{")[2].rstrip("}").split(","))
    try:
        experts = min(int(f["experts"]), int(f["max_tokens"]) * int(f["top_k"]))
        per_value = 0.5 if f.get("format", "0") == "0" else 1.0
        return 3.0 * int(f["hidden"]) * int(f["intermediate"]) * experts * per_value
    except (KeyError, ValueError):
        return 0.0


def cover_unit(key: str, descriptor: str, structure: bool) -> str:
    """What the plan covers for a kernel: its key, or (structure cover of SHAPE_FIELDS' families) its
    descriptor without the shape fields."""
    fields = SHAPE_FIELDS.get(family_of(descriptor)) if structure else None
    if not fields or "{" not in descriptor:
        return key
    head, _, body = descriptor.partition("{")
    kept = [kv for kv in body.rstrip("}").split(",") if kv.partition("=")[0] not in fields]
    return head + "{" + ",".join(kept) + "}"


def catch2_filter(name: str) -> str:
    """A test spec matching exactly one case: Catch2 reads commas and brackets as spec syntax."""
    return re.sub(r"([\[\],])", r"\\\1", name)


@dataclass
class Record:
    kind: str  # "pytest" or "catch2"
    name: str  # nodeid or case name
    duration_s: float
    keys: list
    outcome: str = "passed"
    index: int = 0  # order in the records: keeps a group's tests in collection order
    required: set = field(default_factory=set)  # keys the plan has to cover


def load_records(paths) -> tuple[list, dict]:
    """Tests and {key: descriptor} from record files (JSON lines)."""
    tests, descriptors = [], {}
    for path in paths:
        for line in Path(path).read_text().splitlines():
            if not line.strip():
                continue
            r = json.loads(line)
            kind, name = ("pytest", r["nodeid"]) if "nodeid" in r else ("catch2", r["case"])
            keys = list(r.get("keys", []))
            for key, desc in zip(keys, r.get("descriptors", [])):
                descriptors.setdefault(key, desc)
            tests.append(Record(kind, name, float(r["duration_s"]), keys, r.get("outcome", "passed"), len(tests)))
    return tests, descriptors


# ---- the cover ------------------------------------------------------------------------------------------


def greedy_cover(candidates, uncovered: set) -> list:
    """Repeatedly the test with the least duration per newly covered key (then the shorter one)."""
    chosen, uncovered = [], set(uncovered)
    while uncovered:
        best, best_rank = None, None
        for t in candidates:
            new = len(t.required & uncovered)
            if new:
                rank = (t.duration_s / new, t.duration_s, t.index)
                if best_rank is None or rank < best_rank:
                    best, best_rank = t, rank
        if best is None:
            break
        chosen.append(best)
        uncovered -= best.required
    return chosen


def drop_redundant(chosen) -> list:
    """Greedy picks can be made redundant by later ones: drop those, longest first."""
    count: dict = {}
    for t in chosen:
        for k in t.required:
            count[k] = count.get(k, 0) + 1
    kept = set(id(t) for t in chosen)
    for t in sorted(chosen, key=lambda t: -t.duration_s):
        if all(count[k] > 1 for k in t.required):
            kept.discard(id(t))
            for k in t.required:
                count[k] -= 1
    return [t for t in chosen if id(t) in kept]


def cover(tests, required: set) -> list:
    """Tests covering every required key: those that passed in the normal run first; a test that failed
    there only for keys no passing test launches."""
    for t in tests:
        t.required = set(t.keys) & required
    chosen = greedy_cover([t for t in tests if t.outcome == "passed"], required)
    left = required - set().union(*(t.required for t in chosen))
    others = [t for t in tests if t.outcome != "passed"]
    for t in others:
        t.required &= left  # what it is chosen for: never a reason to drop a passing test
    chosen += greedy_cover(others, left)
    return drop_redundant(chosen)


def balance(tests, groups: int) -> list:
    """Longest first into the least loaded group; each group in record (collection) order."""
    bins = [[] for _ in range(max(1, min(groups, len(tests))))] if tests else []
    load = [0.0] * len(bins)
    for t in sorted(tests, key=lambda t: (-t.duration_s, t.index)):
        i = load.index(min(load))
        bins[i].append(t)
        load[i] += t.duration_s
    return [sorted(b, key=lambda t: t.index) for b in bins]


def make_plan(tests, descriptors: dict, excluded_families=EXCLUDED_FAMILIES, jobs: int = 8,
              structure: bool = True, group_tests: int = 4) -> dict:
    """The cover of every kernel (each a key, or with `structure` a SHAPE_FIELDS family's structure: the
    plan's "keys" are then those units, and its descriptors name them)."""
    unit = {k: cover_unit(k, descriptors.get(k, ""), structure) for t in tests for k in t.keys}

    def cost(t):
        if not structure:
            return t.duration_s
        return t.duration_s + RACECHECK_S_PER_BYTE * sum(streamed_bytes(descriptors.get(k, "")) for k in t.keys)

    normal_s = {t.index: t.duration_s for t in tests}  # the cover weighs tests by cost, the plan reports these
    tests = [Record(t.kind, t.name, cost(t), list(dict.fromkeys(unit[k] for k in t.keys)), t.outcome, t.index)
             for t in tests]
    descriptors = {unit[k]: descriptors.get(k, "") for k in unit}
    all_keys = set().union(*(set(t.keys) for t in tests)) if tests else set()
    excluded = {k for k in all_keys if family_of(descriptors.get(k, "")) in set(excluded_families)}
    required = all_keys - excluded
    chosen = cover(tests, required)
    catch2 = [t for t in chosen if t.kind == "catch2"]
    pytest_tests = [t for t in chosen if t.kind == "pytest"]
    # The pytest groups take every slot (gpu_run.sh starts them first); the Catch2 cases, mostly short,
    # queue for the slots the groups free. Normal-run seconds predict racecheck time badly (12-05 on the
    # H200: two groups of 53 and 59 tests estimated like the 1-test groups ran past 250 s while those
    # took 35-98 s), so groups stay small and the slots are refilled as they finish.
    groups = balance(pytest_tests, max(1, jobs, -(-len(pytest_tests) // max(1, group_tests))))

    def entry(t):
        return {"name": t.name, "duration_s": normal_s[t.index], "outcome": t.outcome, "keys": sorted(t.required)}

    covered = set().union(*(t.required for t in chosen)) if chosen else set()
    return {
        "cover": "structure" if structure else "key",
        "keys": len(all_keys),
        "required_keys": len(required),
        "excluded_keys": len(excluded),
        "excluded_families": sorted(excluded_families),
        "covered_keys": len(covered),
        "uncovered": sorted(required - covered),
        "tests_recorded": len(tests),
        "estimated_s": round(sum(normal_s[t.index] for t in chosen), 3),
        "catch2": [entry(t) for t in sorted(catch2, key=lambda t: t.index)],
        "pytest_groups": [
            {"estimated_s": round(sum(normal_s[t.index] for t in g), 3), "tests": [entry(t) for t in g]}
            for g in groups
        ],
        "descriptors": {k: descriptors.get(k, "") for k in sorted(required)},
    }


def format_plan(plan: dict) -> str:
    pytest_count = sum(len(g["tests"]) for g in plan["pytest_groups"])
    lines = [
        f"{plan['keys']} kernel keys in {plan['tests_recorded']} tests; {plan['excluded_keys']} excluded "
        f"({', '.join(plan['excluded_families'])}); {plan['covered_keys']} of {plan['required_keys']} covered by "
        f"{pytest_count} pytest tests in {len(plan['pytest_groups'])} groups and {len(plan['catch2'])} Catch2 cases; "
        f"estimated normal-run time {plan['estimated_s']:.1f} s",
    ]
    for t in plan["catch2"]:
        lines.append(f"  catch2 {t['duration_s']:8.2f}s {len(t['keys']):4d} keys  {t['name']}")
    for g, group in enumerate(plan["pytest_groups"]):
        lines.append(f"  group {g}: {len(group['tests'])} tests, {group['estimated_s']:.1f} s")
        for t in group["tests"]:
            note = "" if t["outcome"] == "passed" else f"  ({t['outcome']} in the normal run)"
            lines.append(f"    {t['duration_s']:8.2f}s {len(t['keys']):4d} keys  {t['name']}{note}")
    if plan["uncovered"]:
        lines.append(f"uncovered: {' '.join(plan['uncovered'])}")
    return "\n".join(lines)


# ---- record ---------------------------------------------------------------------------------------------


def _tail(text: str, n: int) -> str:
    return "\n".join("    " + line for line in text.splitlines()[-n:])


def record_catch2(binary: str, out: Path, deadline, env: dict, problems: list) -> None:
    listing = subprocess.run([binary, "--list-test-names-only", "[gpu]"], capture_output=True, text=True, env=env)
    names = [n.strip() for n in listing.stdout.splitlines() if n.strip()]
    records = out / "catch2.tests.jsonl"
    records.write_text("")
    for i, name in enumerate(names):
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            problems.append(f"catch2: the deadline came before {len(names) - i} of {len(names)} cases")
            return
        log = out / f"catch2_{i}.log"
        log.unlink(missing_ok=True)
        t0 = time.monotonic()
        try:
            proc = subprocess.run([binary, catch2_filter(name), "--reporter", "compact"], capture_output=True,
                                  text=True, errors="replace", env={**env, "CHORD_LAUNCH_LOG": str(log)},
                                  timeout=remaining)
            outcome, output = ("passed" if proc.returncode == 0 else "failed"), proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as e:
            # The output so far comes as bytes, whatever the text mode.
            output = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            outcome = "timeout"
        duration = time.monotonic() - t0
        record = {"case": name, "duration_s": round(duration, 3)}
        record.update(launch_record(log, 0, log.stat().st_size if log.exists() else 0))
        record["outcome"] = outcome
        with open(records, "a") as f:
            f.write(json.dumps(record) + "\n")
        print(f"catch2 {outcome:7s} {duration:7.1f}s {len(record['keys']):4d} keys  {name}", flush=True)
        if outcome != "passed":
            problems.append(f"catch2 case {name!r}: {outcome}")
            print(_tail(output, 15), flush=True)


def cmd_record(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + args.deadline_s if args.deadline_s else None
    env = dict(os.environ)
    env.pop("CHORD_LAUNCH_LOG", None)
    problems: list = []
    runs = []
    for f in args.pytest:
        stem = Path(f).stem
        log = out / f"{stem}.log"
        for p in (log, Path(f"{log}.tests.jsonl")):
            p.unlink(missing_ok=True)
        console = open(out / f"{stem}.out", "w")
        # --rootdir: nodeids relative to the repository, as gpu_run.sh passes them back to pytest.
        proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                                 f"--rootdir={REPO_ROOT}", str(Path(f).resolve())], cwd=REPO_ROOT,
                                env={**env, "CHORD_LAUNCH_LOG": str(log)}, stdout=console, stderr=subprocess.STDOUT)
        runs.append((f, proc, console, log))
    catch2 = None
    if args.catch2:
        catch2 = threading.Thread(target=record_catch2, args=(args.catch2, out, deadline, env, problems))
        catch2.start()
    for f, proc, console, log in runs:
        try:
            proc.wait(timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            # SIGINT lets pytest stop its subprocesses and finish; the finished tests' records are written.
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            problems.append(f"{f}: stopped at the deadline")
        console.close()
        records = Path(f"{log}.tests.jsonl")
        lines = records.read_text().splitlines() if records.exists() else []
        keys = set().union(*(json.loads(line)["keys"] for line in lines)) if lines else set()
        print(f"{f}: exit {proc.returncode}, {len(lines)} tests recorded, {len(keys)} keys", flush=True)
        print(_tail((out / f"{Path(f).stem}.out").read_text(errors="replace"), 3), flush=True)
        if proc.returncode not in (0, 5):  # 5: nothing collected (no GPU)
            problems.append(f"{f}: pytest exit {proc.returncode}")
    if catch2:
        catch2.join()
    for p in problems:
        print(f"problem: {p}")
    return 1 if problems else 0


# ---- plan -----------------------------------------------------------------------------------------------


def cmd_plan(args) -> int:
    tests, descriptors = load_records(args.records)
    if not tests:
        print("no test records", file=sys.stderr)
        return 1
    plan = make_plan(tests, descriptors, args.exclude_family or EXCLUDED_FAMILIES, args.jobs, args.cover == "structure",
                     args.group_tests)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("pytest_*.txt"):
        old.unlink()
    (out / "plan.json").write_text(json.dumps(plan, indent=1) + "\n")
    (out / "catch2.txt").write_text("".join(t["name"] + "\n" for t in plan["catch2"]))
    for g, group in enumerate(plan["pytest_groups"]):
        (out / f"pytest_{g}.txt").write_text("".join(t["name"] + "\n" for t in group["tests"]))
    print(format_plan(plan))
    return 0


# ---- report ---------------------------------------------------------------------------------------------

# pytest -v: "<nodeid> PASSED  [ 50%]", the outcome possibly on a later line when racecheck output came
# between the nodeid (written as the test starts) and its outcome.
_OUTCOME = re.compile(r"\b(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\s+\[\s*\d+%\]")
# A racecheck report's first line (analysis mode: "Error: Race reported ...", hazard mode: "ERROR: ...");
# not "ERROR SUMMARY: ...".
_HAZARD = re.compile(r"=========\s+(Error|ERROR|Warning|WARNING):")


def read_summary(path: Path) -> dict:
    """gpu_run.sh's summary.txt: {step: status} (ok, FAIL, TIMEOUT)."""
    steps = {}
    if path.exists():
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 2:
                steps[parts[0]] = parts[1]
    return steps


def parse_pytest_log(text: str, nodeids) -> tuple[dict, dict, dict]:
    """{nodeid: outcome}, {nodeid: racecheck errors}, {nodeid: warnings} from a `pytest -v` log under
    compute-sanitizer; a report goes to the test last started before it (key None: before any test)."""
    known = set(nodeids)
    outcomes, errors, warnings = {}, {}, {}
    current = None
    for line in text.splitlines():
        head = line.split(" ", 1)[0]
        if head in known:
            current = head
        m = _OUTCOME.search(line)
        if m and current is not None and outcomes.get(current) not in ("FAILED", "ERROR"):
            outcomes[current] = m.group(1)
        h = _HAZARD.search(line)
        if h:
            counts = errors if h.group(1) in ("Error", "ERROR") else warnings
            counts[current] = counts.get(current, 0) + 1
    return outcomes, errors, warnings


def planned_test_status(step_status, outcome, errors: int) -> str:
    if step_status is None:
        return "not run"
    if errors or outcome in ("FAILED", "ERROR"):
        return "failed"
    if outcome == "SKIPPED":
        return "skipped"
    if outcome in ("PASSED", "XFAIL", "XPASS") or step_status == "ok":
        return "passed"
    return "timed out" if step_status == "TIMEOUT" else "failed"


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def _log_excerpt(path: Path, head: int = 20, tail: int = 15) -> list:
    """The first racecheck reports and the last lines of a step's log."""
    if not path.exists():
        return [f"== {path.name}: missing"]
    lines = path.read_text(errors="replace").splitlines()
    reports = [line for line in lines if _HAZARD.search(line)][:head]
    out = []
    if reports:
        out.append(f"== {path.name}: first racecheck reports")
        out += ["  " + line for line in reports]
    out.append(f"== {path.name}: last lines")
    return out + ["  " + line for line in lines[-tail:]]


def cmd_report(args) -> int:
    plan = json.loads(Path(args.plan).read_text())
    logs = Path(args.logs)
    steps = read_summary(logs / "summary.txt")
    results = []  # (kind, name, status, errors, keys)
    step_lines, bad_steps = [], []
    for i, t in enumerate(plan["catch2"]):
        step = CATCH2_STEP.format(i)
        st = steps.get(step)
        errors = parse_pytest_log(_read(logs / f"{step}.log"), [])[1].get(None, 0)
        status = "not run" if st is None else {"ok": "passed", "TIMEOUT": "timed out"}.get(st, "failed")
        results.append(("catch2", t["name"], status, errors, t["keys"]))
        step_lines.append(f"  {step:40s} {st or '-':7s} catch2 {t['name']}")
        if st not in (None, "ok"):
            bad_steps.append(step)
    for g, group in enumerate(plan["pytest_groups"]):
        step = PYTEST_STEP.format(g)
        st = steps.get(step)
        nodeids = [t["name"] for t in group["tests"]]
        outcomes, errors, warnings = parse_pytest_log(_read(logs / f"{step}.log"), nodeids)
        for t in group["tests"]:
            e = errors.get(t["name"], 0)
            results.append(("pytest", t["name"], planned_test_status(st, outcomes.get(t["name"]), e), e, t["keys"]))
        extra = f", {errors[None]} racecheck errors before any test" if errors.get(None) else ""
        warn = f", {sum(warnings.values())} warnings" if warnings else ""
        step_lines.append(f"  {step:40s} {st or '-':7s} {len(nodeids)} tests{extra}{warn}")
        if st not in (None, "ok"):
            bad_steps.append(step)
    counts: dict = {}
    for r in results:
        counts[r[2]] = counts.get(r[2], 0) + 1
    checked = set().union(*(set(r[4]) for r in results if r[2] == "passed")) if results else set()
    unchecked = sorted(set(plan["descriptors"]) - checked)
    out = [
        f"racecheck plan ({plan.get('cover', 'key')} cover): {plan['covered_keys']} of {plan['required_keys']} kernel "
        "keys covered "
        f"({plan['excluded_keys']} of {plan['keys']} excluded: {', '.join(plan['excluded_families'])}) by "
        f"{len(results)} of {plan['tests_recorded']} recorded tests, estimated normal-run {plan['estimated_s']:.1f} s"
        f" (launch_records {steps.get('launch_records', '-')})",
        "racecheck: " + ", ".join(f"{counts.get(s, 0)} {s}" for s in ("passed", "failed", "timed out", "skipped",
                                                                       "not run")) + f" (of {len(results)})",
        f"kernel keys racechecked on a passing test: {len(checked)} of {plan['required_keys']}",
        "steps:",
        *step_lines,
    ]
    not_passed = [r for r in results if r[2] != "passed"]
    if not_passed:
        out.append("tests not passed:")
        out += [f"  {r[2]:9s} {r[0]} {r[1]}" + (f" ({r[3]} racecheck errors)" if r[3] else "") for r in not_passed]
    if unchecked:
        out.append(f"kernels not racechecked on a passing test ({len(unchecked)}):")
        out += [f"  {k} {plan['descriptors'][k]}" for k in unchecked[:60]]
        if len(unchecked) > 60:
            out.append(f"  ... {len(unchecked) - 60} more in plan.json")
    # A recording stopped at its deadline leaves kernels unknown to the plan: say so.
    for step in ("launch_records", "racecheck_plan"):
        if steps.get(step, "ok") != "ok":
            out += _log_excerpt(logs / f"{step}.log")
    for step in bad_steps:
        out += _log_excerpt(logs / f"{step}.log")
    print("\n".join(out))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("record", help="run the GPU tests with a launch log each; write the records")
    p.add_argument("--catch2", help="the chordrt_tests binary (its [gpu] cases, one process each)")
    p.add_argument("--out", required=True, help="directory of the launch logs and records")
    p.add_argument("--deadline-s", type=float, default=0, help="stop what still runs after this many seconds")
    p.add_argument("pytest", nargs="*", help="pytest files, each run as its own process")
    p = sub.add_parser("plan", help="choose the tests that cover every kernel key")
    p.add_argument("records", nargs="+", help="*.tests.jsonl files")
    p.add_argument("--out", required=True, help="directory for plan.json, catch2.txt, pytest_<g>.txt")
    p.add_argument("--jobs", type=int, default=8, help="racecheck processes at once (default 8)")
    p.add_argument("--group-tests", type=int, default=4, help="most pytest tests per racecheck process (default 4)")
    p.add_argument("--cover", choices=("structure", "key"), default="structure",
                   help="warp decode kernels once per structure (default) or every cache key")
    p.add_argument("--exclude-family", action="append",
                   help=f"descriptor family not racechecked (repeatable; default {' '.join(EXCLUDED_FAMILIES)})")
    p = sub.add_parser("report", help="per planned test: passed, failed or timed out under racecheck")
    p.add_argument("--plan", required=True)
    p.add_argument("--logs", required=True, help="gpu_run.sh's OUTDIR (summary.txt and the step logs)")
    args = parser.parse_args(argv)
    return {"record": cmd_record, "plan": cmd_plan, "report": cmd_report}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
