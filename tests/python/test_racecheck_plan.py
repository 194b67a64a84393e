"""tools/racecheck_plan.py without a GPU: launch-log slices, the set cover, groups, and the report over
synthetic records and logs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import racecheck_plan as rp

REPO_ROOT = Path(__file__).resolve().parents[2]


def _record(name, duration, keys, outcome="passed", kind="pytest", descriptors=None):
    r = {"nodeid" if kind == "pytest" else "case": name, "duration_s": duration, "keys": keys, "outcome": outcome}
    r["descriptors"] = descriptors or [f"glue.silu_and_mul[sm_90a]{{vec={k}}}" for k in keys]
    return r


def _tests(*records):
    tests = []
    for i, r in enumerate(records):
        kind, name = ("pytest", r["nodeid"]) if "nodeid" in r else ("catch2", r["case"])
        tests.append(rp.Record(kind, name, r["duration_s"], r["keys"], r.get("outcome", "passed"), i, set(r["keys"])))
    return tests


def _chosen(tests, keys):
    return sorted(t.name for t in rp.cover(tests, set(keys)))


def _covers(chosen_tests, keys):
    return set(keys) <= set().union(*(set(t.keys) for t in chosen_tests))


def test_launch_record_takes_the_distinct_keys_between_two_offsets(tmp_path):
    log = tmp_path / "launches.log"
    first = "k1 glue.moe_align[sm_90a]{a=1}\nk2 glue.silu_and_mul[sm_90a]{b=2}\n"
    second = "k2 glue.silu_and_mul[sm_90a]{b=2}\nk3 grouped.gemm[sm_90a]{c=3}\nk2 glue.silu_and_mul[sm_90a]{b=2}\n"
    log.write_text(first + second)
    r = rp.launch_record(log, len(first), len(first) + len(second))
    assert r == {
        "keys": ["k2", "k3"],
        "descriptors": ["glue.silu_and_mul[sm_90a]{b=2}", "grouped.gemm[sm_90a]{c=3}"],
        "launches": 3,
    }
    assert rp.launch_record(tmp_path / "never-written.log", 0, 0) == {"keys": [], "descriptors": [], "launches": 0}


def test_every_key_is_covered_and_the_cheaper_cover_wins():
    keys = ["a", "b", "c"]
    # Three one-key tests (3 s) beat one test of all three (10 s)...
    tests = _tests(_record("all", 10.0, keys), _record("ta", 1.0, ["a"]), _record("tb", 1.0, ["b"]),
                   _record("tc", 1.0, ["c"]))
    assert _chosen(tests, keys) == ["ta", "tb", "tc"]
    # ...but not one of 2 s.
    tests = _tests(_record("all", 2.0, keys), _record("ta", 1.0, ["a"]), _record("tb", 1.0, ["b"]),
                   _record("tc", 1.0, ["c"]))
    chosen = rp.cover(tests, set(keys))
    assert [t.name for t in chosen] == ["all"]
    assert _covers(chosen, keys)


def test_equal_cost_per_key_prefers_the_shorter_test():
    tests = _tests(_record("long", 4.0, ["a", "b"]), _record("short", 2.0, ["a"]), _record("tb", 2.0, ["b"]))
    chosen = rp.greedy_cover(tests, {"a", "b"})  # 2 s per key each
    assert chosen[0].name == "short"


def test_a_pick_made_redundant_by_later_ones_is_dropped():
    # Greedy takes x first (0.5 s per key), then y and z, which between them launch everything x does.
    tests = _tests(_record("x", 1.0, ["b", "c"]), _record("y", 1.6, ["a", "b", "e"]),
                   _record("z", 1.6, ["c", "d", "f"]))
    keys = ["a", "b", "c", "d", "e", "f"]
    assert [t.name for t in rp.greedy_cover(tests, set(keys))] == ["x", "y", "z"]
    assert _chosen(tests, keys) == ["y", "z"]


def test_tests_that_failed_in_the_normal_run_cover_only_what_nothing_else_does():
    # failed_cheap is the cheapest for "a" too, but a passing test covers "a": failed_cheap is there for "b".
    tests = _tests(_record("failed_cheap", 0.1, ["a", "b"], outcome="failed"), _record("ok", 5.0, ["a"]),
                   _record("failed_b", 0.2, ["b"], outcome="failed"))
    chosen = rp.cover(tests, {"a", "b"})
    assert sorted(t.name for t in chosen) == ["failed_cheap", "ok"]
    assert {t.name: t.required for t in chosen} == {"ok": {"a"}, "failed_cheap": {"b"}}


def test_excluded_families_need_no_cover():
    records = [
        _record("grouped_only", 0.5, ["g1"], descriptors=["grouped.gemm[sm_90a]{mode=0}"]),
        _record("prefill_and_glue", 9.0, ["p1", "s1"],
                descriptors=["indexed.prefill[sm_90a]{n=4096}", "glue.silu_and_mul[sm_90a]{vec=8}"]),
        _record("glue", 1.0, ["s1"], descriptors=["glue.silu_and_mul[sm_90a]{vec=8}"]),
    ]
    descriptors = {k: d for r in records for k, d in zip(r["keys"], r["descriptors"])}
    plan = rp.make_plan(_tests(*records), descriptors)
    assert (plan["keys"], plan["required_keys"], plan["excluded_keys"], plan["covered_keys"]) == (3, 1, 2, 1)
    assert [t["name"] for g in plan["pytest_groups"] for t in g["tests"]] == ["glue"]
    assert plan["estimated_s"] == 1.0
    assert list(plan["descriptors"]) == ["s1"]


def test_structure_cover_takes_one_shape_per_warp_decode_structure():
    def down(hidden, warps):
        return (f"warp_decode.down[sm_90a]{{format=0,hidden={hidden},intermediate=256,experts=384,top_k=8,"
                f"max_tokens=8,warps={warps},k_chunks=1,row_tiles=2}}")
    records = [
        # Faster in a normal run, but it streams 7x the weights: racecheck time follows the bytes.
        _record("kimi", 0.5, ["kimi"], descriptors=[down(7168, 8)]),
        _record("small", 0.9, ["small"], descriptors=[down(1024, 8)]),
        _record("small_4_warps", 0.1, ["small4"], descriptors=[down(1024, 4)]),
        _record("glue", 1.0, ["s1"], descriptors=["glue.silu_and_mul[sm_90a]{vec=8}"]),
    ]
    descriptors = {k: d for r in records for k, d in zip(r["keys"], r["descriptors"])}
    plan = rp.make_plan(_tests(*records), descriptors)
    assert plan["cover"] == "structure"
    assert (plan["keys"], plan["covered_keys"]) == (3, 3)  # the two 8-warp downs are one structure
    assert sorted(t["name"] for g in plan["pytest_groups"] for t in g["tests"]) == ["glue", "small", "small_4_warps"]
    assert rp.cover_unit("small4", down(1024, 4), True) in plan["descriptors"]
    assert "hidden" not in rp.cover_unit("small4", down(1024, 4), True)
    assert rp.streamed_bytes(down(7168, 8)) == 7 * rp.streamed_bytes(down(1024, 8)) > 0
    assert plan["estimated_s"] == 0.9 + 0.1 + 1.0  # normal-run seconds, not the cover's costs
    # Key cover: every cache key, so the Kimi-sized test too; other families are keys either way.
    by_key = rp.make_plan(_tests(*records), descriptors, structure=False)
    assert by_key["cover"] == "key" and by_key["covered_keys"] == 4
    assert rp.cover_unit("s1", "glue.silu_and_mul[sm_90a]{vec=8}", True) == "s1"


def test_groups_are_balanced_by_duration_and_keep_collection_order():
    tests = _tests(*[_record(f"t{i}", d, [f"k{i}"]) for i, d in enumerate([5, 4, 3, 3, 2, 1])])
    groups = rp.balance(tests, 2)
    assert sorted(sum(t.duration_s for t in g) for g in groups) == [9, 9]
    for g in groups:
        assert [t.index for t in g] == sorted(t.index for t in g)
    assert len(rp.balance(tests[:1], 8)) == 1
    assert rp.balance([], 8) == []


def test_pytest_groups_take_every_slot_and_catch2_cases_queue():
    records = [_record(f"p{i}", 1.0, [f"p{i}"]) for i in range(10)]
    records += [_record("moe_align small", 1.0, ["c1"], kind="catch2"),
                _record("moe_align large", 1.0, ["c2"], kind="catch2")]
    plan = rp.make_plan(_tests(*records), {}, jobs=8)
    assert [t["name"] for t in plan["catch2"]] == ["moe_align small", "moe_align large"]
    assert len(plan["pytest_groups"]) == 8
    assert plan["covered_keys"] == plan["required_keys"] == 12
    # Many tests: groups of at most group_tests, more groups than slots.
    many = rp.make_plan(_tests(*[_record(f"p{i}", 1.0, [f"p{i}"]) for i in range(53)]), {}, jobs=8, group_tests=4)
    assert len(many["pytest_groups"]) == 14
    assert max(len(g["tests"]) for g in many["pytest_groups"]) == 4
    assert sum(len(g["tests"]) for g in many["pytest_groups"]) == 53


def test_plan_command_writes_the_lists_gpu_run_reads(tmp_path, capsys):
    nodeid = "tests/python/test_glue_gpu.py::test_moe_align[random-384-8-8192]"
    (tmp_path / "a.log.tests.jsonl").write_text(
        json.dumps(_record(nodeid, 2.0, ["k1", "k2"])) + "\n" + json.dumps(_record("other", 3.0, ["k1"])) + "\n")
    (tmp_path / "catch2.tests.jsonl").write_text(json.dumps(_record("moe_align, 8192 [big]", 1.0, ["k3"],
                                                                    kind="catch2")) + "\n")
    (tmp_path / "pytest_7.txt").write_text("stale\n")
    out = tmp_path / "plan"
    out.mkdir()
    (out / "pytest_7.txt").write_text("stale\n")
    assert rp.main(["plan", "--out", str(out), "--jobs", "4", str(tmp_path / "a.log.tests.jsonl"),
                    str(tmp_path / "catch2.tests.jsonl")]) == 0
    assert (out / "catch2.txt").read_text() == "moe_align, 8192 [big]\n"
    assert sorted(p.name for p in out.glob("pytest_*.txt")) == ["pytest_0.txt"]
    assert (out / "pytest_0.txt").read_text() == nodeid + "\n"
    plan = json.loads((out / "plan.json").read_text())
    assert plan["covered_keys"] == 3 and plan["estimated_s"] == 3.0
    assert "3 of 3 covered" in capsys.readouterr().out


def test_catch2_filter_escapes_spec_syntax():
    assert rp.catch2_filter("moe_align, 8192 tokens [gpu]") == r"moe_align\, 8192 tokens \[gpu\]"


def test_report_attributes_racecheck_errors_and_timeouts(tmp_path, capsys):
    a = "tests/python/test_glue_gpu.py::test_a[1]"
    b = "tests/python/test_glue_gpu.py::test_b[2]"
    c = "tests/python/test_glue_gpu.py::test_c"
    d = "tests/python/test_dsa_indexer_gpu.py::test_d"
    plan = {
        "keys": 5, "required_keys": 5, "excluded_keys": 0, "excluded_families": ["grouped.gemm"], "covered_keys": 5,
        "estimated_s": 4.0, "tests_recorded": 9,
        "catch2": [{"name": "case one", "duration_s": 1.0, "outcome": "passed", "keys": ["k5"]}],
        "pytest_groups": [
            {"estimated_s": 2.0, "tests": [{"name": n, "duration_s": 1.0, "outcome": "passed", "keys": [k]}
                                           for n, k in ((a, "k1"), (b, "k2"))]},
            {"estimated_s": 2.0, "tests": [{"name": n, "duration_s": 1.0, "outcome": "passed", "keys": [k]}
                                           for n, k in ((c, "k3"), (d, "k4"))]},
        ],
        "descriptors": {f"k{i}": f"glue.x[sm_90a]{{i={i}}}" for i in range(1, 6)},
    }
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    (tmp_path / "summary.txt").write_text(
        "launch_records FAIL   170s\n"
        "sanitize_racecheck_plan_catch2_0 ok       12s\n"
        "sanitize_racecheck_plan_pytest_0 FAIL     30s\n"
        "sanitize_racecheck_plan_pytest_1 TIMEOUT 200s\n")
    # Group 0: the race of test_b is printed between its name and its outcome.
    (tmp_path / "launch_records.log").write_text("problem: tests/python/test_glue_gpu.py: stopped at the deadline\n")
    (tmp_path / "sanitize_racecheck_plan_pytest_0.log").write_text(
        f"========= COMPUTE-SANITIZER\n{a} PASSED                  [ 50%]\n"
        f"{b} ========= Error: Race reported between Write access at 0x1 in kernel\n"
        "=========     and Read access at 0x2 in kernel [16 hazards]\n"
        "PASSED                  [100%]\n"
        "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)\n")
    # Group 1: killed while test_d ran.
    (tmp_path / "sanitize_racecheck_plan_pytest_1.log").write_text(
        f"========= COMPUTE-SANITIZER\n{c} PASSED                  [ 50%]\n{d} ")
    assert rp.main(["report", "--plan", str(tmp_path / "plan.json"), "--logs", str(tmp_path)]) == 0
    report = capsys.readouterr().out
    assert "racecheck: 3 passed, 1 failed, 1 timed out, 0 skipped, 0 not run (of 5)" in report
    assert f"failed    pytest {b} (1 racecheck errors)" in report
    assert f"timed out pytest {d}" in report
    assert "kernel keys racechecked on a passing test: 3 of 5" in report
    assert "k2 glue.x[sm_90a]{i=2}" in report and "k4 glue.x[sm_90a]{i=4}" in report
    assert "Error: Race reported between Write access" in report  # the failing group's first report
    assert "by 5 of 9 recorded tests" in report and "(launch_records FAIL)" in report
    assert "stopped at the deadline" in report


def test_parse_pytest_log_keeps_the_worst_outcome():
    a = "tests/python/t.py::test_a"
    log = f"{a} PASSED [ 50%]\n{a} ERROR [ 50%]\n"  # a teardown error after the call passed
    outcomes, errors, warnings = rp.parse_pytest_log(log, [a])
    assert outcomes == {a: "ERROR"} and errors == {} and warnings == {}
    assert rp.planned_test_status("FAIL", outcomes[a], 0) == "failed"
    assert rp.planned_test_status(None, None, 0) == "not run"
    assert rp.planned_test_status("ok", None, 0) == "passed"


def test_conftest_records_each_tests_launches(tmp_path):
    """tests/python/conftest.py as a plugin over synthetic tests that append launch lines themselves."""
    (tmp_path / "test_synthetic.py").write_text(textwrap.dedent("""
        import os, pytest

        def launch(*keys):
            with open(os.environ["CHORD_LAUNCH_LOG"], "a") as f:
                f.writelines(f"{k} glue.moe_align[sm_90a]{{k={k}}}\\n" for k in keys)

        def test_none():
            pass

        @pytest.mark.parametrize("k", ["k1", "k2"])
        def test_one(k):
            launch(k, k, "k0")

        def test_fails():
            launch("k3")
            assert False

        def test_skipped():
            pytest.skip("no GPU")

        def test_interrupted():
            launch("k4")
            raise KeyboardInterrupt
        """))
    log = tmp_path / "launches.log"
    env = dict(os.environ, CHORD_LAUNCH_LOG=str(log),
               PYTHONPATH=os.pathsep.join([str(REPO_ROOT / "tests" / "python"), str(REPO_ROOT / "tools" / "python")]))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider",
                           f"--rootdir={tmp_path}", str(tmp_path / "test_synthetic.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr  # interrupted
    records = {r["nodeid"]: r for r in map(json.loads, Path(f"{log}.tests.jsonl").read_text().splitlines())}
    assert list(records) == ["test_synthetic.py::test_none", "test_synthetic.py::test_one[k1]",
                             "test_synthetic.py::test_one[k2]", "test_synthetic.py::test_fails",
                             "test_synthetic.py::test_skipped"]
    assert records["test_synthetic.py::test_none"]["keys"] == []
    assert records["test_synthetic.py::test_one[k2]"]["keys"] == ["k2", "k0"]
    assert records["test_synthetic.py::test_one[k2]"]["launches"] == 3
    assert records["test_synthetic.py::test_one[k2]"]["descriptors"][0] == "glue.moe_align[sm_90a]{k=k2}"
    assert [r["outcome"] for r in records.values()] == ["passed", "passed", "passed", "failed", "skipped"]
    assert all(r["duration_s"] >= 0 for r in records.values())
