"""Shared fixtures of the chordrt Python tests (binding, CLI, GPU).

Environment (set by ctest, see tests/CMakeLists.txt; all optional when running pytest directly):
  CHORDRT_LIBRARY   libchordrt.so to test (else the binding's own search: <repo>/build*/, find_library)
  CHORD_JIT         the chord-jit binary (test_cli.py is skipped without it)
  CHORD_CACHE_DIR   cache directory of this process's runtime (a temporary one when unset)
  CHORD_LAUNCH_LOG  the runtime's launch log; each test's record (the kernel keys it launched, its
                    duration) is appended to <log>.tests.jsonl for tools/racecheck_plan.py
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PYTHON_DIR = REPO_ROOT / "tools" / "python"
TOOLS_DIR = REPO_ROOT / "tools"
HEADER = REPO_ROOT / "runtime" / "include" / "chordrt" / "chordrt.h"

for _dir in (PYTHON_DIR, TOOLS_DIR):  # the binding; tools/racecheck_plan.py
    if str(_dir) not in sys.path:
        sys.path.insert(0, str(_dir))

# The runtime reads its environment once per process, at first use: never let the tests' own process
# write into ~/.cache/chordrt.
_OWN_CACHE = None
if not os.environ.get("CHORD_CACHE_DIR"):
    _OWN_CACHE = tempfile.mkdtemp(prefix="chordrt-pytest-cache-")
    os.environ["CHORD_CACHE_DIR"] = _OWN_CACHE


def pytest_sessionfinish(session, exitstatus):
    if _OWN_CACHE:
        shutil.rmtree(_OWN_CACHE, ignore_errors=True)


import chordrt  # noqa: E402
from racecheck_plan import launch_record  # noqa: E402


# CHORD_LAUNCH_LOG: the runtime appends "<key> <descriptor>" per launch; a test's launches are the bytes
# appended while it ran (children it starts inherit the log). Each record is written as soon as its test
# ends, so a run stopped by a time limit keeps the records of the tests it finished.
_LAUNCH_LOG = os.environ.get("CHORD_LAUNCH_LOG", "")
_launch_outcomes: dict = {}


def _log_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def pytest_configure(config):
    if _LAUNCH_LOG:
        open(_LAUNCH_LOG + ".tests.jsonl", "w").close()


def pytest_runtest_logreport(report):
    # The worst phase decides: a failed setup or teardown fails the test; a skip in setup skips it.
    if _LAUNCH_LOG and (report.when == "call" or not report.passed):
        if _launch_outcomes.get(report.nodeid) != "failed":
            _launch_outcomes[report.nodeid] = report.outcome


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not _LAUNCH_LOG:
        yield
        return
    start, t0 = _log_size(_LAUNCH_LOG), time.monotonic()
    run = yield  # setup, call, teardown (a session fixture's first use and last teardown count to its test)
    duration = time.monotonic() - t0
    if run.excinfo is not None or item.nodeid not in _launch_outcomes:
        return  # interrupted (as the recorder's deadline does): its launches may be incomplete
    record = {"nodeid": item.nodeid, "duration_s": round(duration, 3)}
    record.update(launch_record(_LAUNCH_LOG, start, _log_size(_LAUNCH_LOG)))
    record["outcome"] = _launch_outcomes[item.nodeid]
    with open(_LAUNCH_LOG + ".tests.jsonl", "a") as f:
        f.write(json.dumps(record) + "\n")


@pytest.fixture(scope="session")
def chord():
    """The binding, its library loaded (a load failure fails the test with the binding's message)."""
    chordrt.lib()
    return chordrt


@pytest.fixture(scope="session")
def info(chord):
    return chord.runtime_info()


@pytest.fixture(scope="session")
def header_text():
    return HEADER.read_text()


@pytest.fixture(scope="session")
def needs_nvrtc(info):
    if not info["nvrtc_available"]:
        pytest.skip("libnvrtc is not loadable here: nothing can be compiled")


def child_env(**overrides):
    """Environment for a child Python process using the same library and package as this one."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(PYTHON_DIR)] + [p for p in [env.get("PYTHONPATH")] if p])
    env["CHORDRT_LIBRARY"] = chordrt.library_path()
    env.pop("CHORD_CACHE_PATH", None)
    env.pop("CHORD_JIT_STRICT", None)
    env.pop("CHORD_RECORD_MISSES", None)
    env.pop("CHORD_CACHE_MAX_SIZE", None)
    for k, v in overrides.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = str(v)
    return env


def run_python(code: str, timeout: float = 120, check: bool = True, **env_overrides):
    """Runs `code` in a fresh interpreter (a fresh runtime: it reads the environment once per process).

    The code's last stdout line, when it is JSON, is returned parsed as .result on the CompletedProcess.
    """
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=child_env(**env_overrides),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"child python failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    proc.result = None
    lines = proc.stdout.strip().splitlines()
    if lines:
        try:
            proc.result = json.loads(lines[-1])
        except ValueError:
            pass
    return proc


@pytest.fixture(scope="session")
def python_runner():
    return run_python


@pytest.fixture(scope="session")
def device_addresses(info):
    """A factory of device addresses for calls that validation must reject before any launch.

    Without a driver nothing is ever dereferenced, so fake aligned addresses are used. With a driver,
    real (generously sized) allocations are used instead, so that even a validation bug that let a
    launch through could not fault; that needs torch with CUDA, else the test is skipped.
    """
    if not info["driver_available"]:
        base = [0x10000]

        def fake(n: int = 1):
            out = [base[0] + i * 0x100000 for i in range(n)]
            base[0] += n * 0x100000
            return out if n > 1 else out[0]

        return fake
    try:
        import torch
    except ImportError:
        pytest.skip("a CUDA driver is present: these calls need real device memory (torch) here")
    if not torch.cuda.is_available():
        pytest.skip("a CUDA driver is present but torch sees no CUDA device")
    keep = []

    def real(n: int = 1):
        out = []
        for _ in range(n):
            t = torch.zeros(1 << 20, dtype=torch.int32, device="cuda")  # 4 MiB
            keep.append(t)
            out.append(t.data_ptr())
        return out if n > 1 else out[0]

    return real


def parse_header_enum(header: str) -> dict:
    header = re.sub(r"/\*.*?\*/", "", header, flags=re.S)
    body = re.search(r"typedef enum chord_status \{(.*?)\} chord_status_t;", header, re.S).group(1)
    return {name: int(value) for name, value in re.findall(r"\b(CHORD_\w+)\s*=\s*(\d+)", body)}
