"""Shared fixtures of the chordrt Python tests (binding, CLI, GPU).

Environment (set by ctest, see tests/CMakeLists.txt; all optional when running pytest directly):
  CHORDRT_LIBRARY   libchordrt.so to test (else the binding's own search: <repo>/build*/, find_library)
  CHORD_JIT         the chord-jit binary (test_cli.py is skipped without it)
  CHORD_CACHE_DIR   cache directory of this process's runtime (a temporary one when unset)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PYTHON_DIR = REPO_ROOT / "tools" / "python"
HEADER = REPO_ROOT / "runtime" / "include" / "chordrt" / "chordrt.h"

if str(PYTHON_DIR) not in sys.path:
    sys.path.insert(0, str(PYTHON_DIR))

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
