"""Two GPUs (issue "Two GPUs"): expert parallelism over NCCL, one process driving two devices, two
processes sharing one cache directory. Skipped unless torch sees at least two CUDA devices;
tools/gpu_run.sh runs this file as its own step when the machine has two.

NVLink multicast stays off in this process and in every child (NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if torch.cuda.device_count() < 2:
    pytest.skip(f"needs two CUDA devices, torch sees {torch.cuda.device_count()}", allow_module_level=True)

import chordrt  # noqa: E402

NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
os.environ.update(NO_MULTICAST)
WORKER = Path(__file__).with_name("two_gpu_worker.py")


def child_env(**extra):
    env = dict(os.environ, **NO_MULTICAST, PYTHONUNBUFFERED="1")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_workers(argvs, envs, timeout=900):
    """Starts one worker per argv; returns them and a function that waits for all and returns their JSON
    results (a worker that fails or hangs fails the test, and the others are killed: a rank whose peer
    died would wait in NCCL forever)."""
    procs = [subprocess.Popen([sys.executable, str(WORKER), *a], env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for a, e in zip(argvs, envs)]

    def wait():
        try:
            return [finish(p, timeout) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()

    return procs, wait


def finish(p, timeout):
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, f"worker exited {p.returncode}\n{out}\n{err}"
    return json.loads(out.strip().splitlines()[-1])


def test_ep2_partial_sums_all_reduce_to_the_whole_block(tmp_path):
    procs, wait = run_workers([["ep2", str(r), "2", str(tmp_path / "store")] for r in range(2)],
                              [child_env() for _ in range(2)])
    ranks = wait()
    for r in ranks:
        bad = [x for x in r["results"] if not x["ok"]]
        assert not bad, f"rank {r['rank']}: {bad}"
        assert {x["path"] for x in r["results"]} == {"warp_decode", "indexed", "graph"}
    print("all-reduce vs block at M = 8 (us):", [r["timing_m8"] for r in ranks])


def test_two_processes_share_one_cache_and_compile_each_key_once(tmp_path):
    cache = tmp_path / "cache"
    go = tmp_path / "go"
    envs = [child_env(CUDA_VISIBLE_DEVICES=d, CHORD_CACHE_DIR=cache) for d in range(2)]
    procs, wait = run_workers([["shared-cache", str(tmp_path / f"ready{d}"), str(go)] for d in range(2)], envs)
    try:
        for d in range(2):
            while not (tmp_path / f"ready{d}").exists():
                assert procs[d].poll() is None, procs[d].communicate()
                time.sleep(0.01)
    finally:
        go.touch()  # both start prewarming the same preset into the empty directory at once
    results = wait()
    assert all(r["ok"] for r in results), results
    entries = sorted((cache / "entries").glob("*/*.json"))
    assert sum(r["compiled"] for r in results) == len(entries), (results, len(entries))
    for meta in entries:  # whole entries only: each metadata file names its cubin's size
        m = json.loads(meta.read_text())
        assert meta.with_suffix(".cubin").stat().st_size == m["cubin_size"], meta
    assert not [p for p in cache.rglob("*") if ".tmp" in p.name], "a temp file was left behind"


def test_one_process_two_devices_memoizes_per_context():
    rows, inter = 64, 1024
    devs = [torch.device("cuda", d) for d in range(2)]
    streams = [torch.cuda.Stream(device=d) for d in devs]

    def launch(d, seed):
        g = torch.Generator(device="cpu")
        g.manual_seed(seed)
        x = torch.randn((rows, 2 * inter), generator=g).to(torch.bfloat16).to(devs[d])
        with torch.cuda.device(devs[d]), torch.cuda.stream(streams[d]):
            out = chordrt.silu_and_mul(x)
        streams[d].synchronize()
        ref = torch.nn.functional.silu(x[:, :inter].float()) * x[:, inter:].float()
        torch.testing.assert_close(out.float(), ref, rtol=1e-2, atol=1e-2)

    launch(0, 1)
    before = chordrt.runtime_info()
    launch(1, 2)  # the second device's first launch: a load of the image the first one compiled or found
    after = chordrt.runtime_info()
    assert after["kernels_compiled"] == before["kernels_compiled"], (before, after)
    assert after["kernels_loaded"] == before["kernels_loaded"] + 1, (before, after)

    errors = []

    def alternate(first):
        try:
            for i in range(40):
                launch((first + i) % 2, 100 * first + i)
        except BaseException as e:  # noqa: BLE001 (reported by the main thread)
            errors.append(e)

    threads = [threading.Thread(target=alternate, args=(f,)) for f in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert chordrt.runtime_info()["kernels_compiled"] == before["kernels_compiled"]
