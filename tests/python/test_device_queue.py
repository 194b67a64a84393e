"""tools/device_queue.sh without a GPU: steps run in order under the call's budget, each logged and
summarized (ok, FAIL, TIMEOUT, SKIPPED, skipped by name), commands cannot read the queue, and the results
come back packed in one file."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "tools" / "device_queue.sh"


def _run(tmp_path, queue_text, budget, skip=""):
    build = tmp_path / "build"
    build.mkdir()
    (build / "libchordrt.so").write_bytes(b"")  # an existing build: the script does not configure one
    queue = tmp_path / "steps.queue"
    queue.write_text(queue_text)
    env = dict(os.environ, CHORD_GPU_BUILD_DIR=str(build), CHORD_QUEUE_BUDGET_S=str(budget), CHORD_QUEUE_SKIP=skip)
    out = tmp_path / "out" / "q"
    proc = subprocess.run(["bash", str(SCRIPT), str(out), str(queue)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    packed = out.parent / "q.tgz"
    assert packed.is_file() and not out.exists()
    with tarfile.open(packed) as tar:
        files = {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers() if m.isfile()}
    summary = {line.split()[0]: line.split()[1] for line in files["q/summary.txt"].splitlines()}
    return summary, files


def test_steps_run_in_order_and_each_outcome_is_summarized(tmp_path):
    summary, files = _run(tmp_path, """
# a comment, then a blank line

5 reads_stdin cat; echo "after"
5 writes echo "lib=$CHORDRT_LIBRARY"; echo result > "$STEP_OUT/result.txt"
5 fails exit 3
1 hangs sleep 30
""", budget=60)
    assert list(summary) == ["build", "reads_stdin", "writes", "fails", "hangs"]
    assert (summary["reads_stdin"], summary["writes"], summary["fails"], summary["hangs"]) == (
        "ok", "ok", "FAIL", "TIMEOUT")
    assert files["q/writes/result.txt"] == "result\n"
    assert "lib=" + str(tmp_path / "build" / "libchordrt.so") in files["q/writes.log"]
    # A command's stdin is not the queue: it read nothing, and the lines after it still ran.
    assert files["q/reads_stdin.log"] == "after\n"


def test_a_step_that_does_not_fit_the_budget_is_skipped_and_later_ones_still_run(tmp_path):
    summary, files = _run(tmp_path, """
100 too_long echo never
3 short echo ran
""", budget=20)
    assert summary["too_long"] == "SKIPPED" and summary["short"] == "ok"
    assert "q/too_long.log" not in files and files["q/short.log"] == "ran\n"


def test_steps_named_in_the_skip_list_do_not_run(tmp_path):
    summary, files = _run(tmp_path, "3 first echo one\n3 second echo two\n", budget=60, skip="first")
    assert "first" not in summary and summary["second"] == "ok"
    assert "q/first.log" not in files
