"""End-to-end tests of the chord-jit CLI (path in $CHORD_JIT), each in a temporary cache directory.

Contract: chord-jit [--cache-dir DIR] <command> [options] [--json]; exit 0 ok, 1 failure, 2 usage error.
Cache layout: <cache>/entries/<first 2 hex of key>/<key>.cubin and <key>.json.
"""

from __future__ import annotations

import collections
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import HEADER, REPO_ROOT

CHORD_JIT = os.environ.get("CHORD_JIT")
if not CHORD_JIT:
    pytest.skip("CHORD_JIT (path of the chord-jit binary) is not set", allow_module_level=True)
if not (os.path.isfile(CHORD_JIT) and os.access(CHORD_JIT, os.X_OK)):
    pytest.skip(f"CHORD_JIT={CHORD_JIT} is not an executable file", allow_module_level=True)

MODEL, DEPLOYMENT = "kimi-k2", "ep8"


def _env(**overrides):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHORD_")}
    env.update({k: str(v) for k, v in overrides.items() if v is not None})
    return env


def chord_jit(*args, cache=None, env=None, timeout=180):
    """Runs chord-jit; `cache` becomes --cache-dir."""
    cmd = [CHORD_JIT] + (["--cache-dir", str(cache)] if cache is not None else []) + [str(a) for a in args]
    return subprocess.run(cmd, env=_env(**(env or {})), capture_output=True, text=True, timeout=timeout)


def jrun(*args, cache=None, env=None, rc=0):
    """Runs chord-jit with --json, checks the exit code, returns the parsed stdout."""
    p = chord_jit(*args, "--json", cache=cache, env=env)
    assert p.returncode == rc, f"chord-jit {' '.join(map(str, args))}: exit {p.returncode}, wanted {rc}\n{p.stdout}\n{p.stderr}"
    try:
        return json.loads(p.stdout)
    except ValueError:
        pytest.fail(f"chord-jit {' '.join(map(str, args))} --json printed no JSON:\n{p.stdout}\n{p.stderr}")


def prewarm(cache, *extra, rc=0, model=MODEL, deployment=DEPLOYMENT):
    return jrun("prewarm", "--model", model, "--deployment", deployment, *extra, cache=cache, rc=rc)


def disk_keys(cache):
    return sorted(p.stem for p in Path(cache).glob("entries/*/*.cubin"))


def entry_file(cache, key, ext):
    return Path(cache) / "entries" / key[:2] / f"{key}.{ext}"


def _version_from_cmake():
    m = re.search(r"project\(\s*chordrt\s+VERSION\s+([\d.]+)", (REPO_ROOT / "CMakeLists.txt").read_text())
    return m.group(1)


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """A cache prewarmed once for MODEL/DEPLOYMENT, with the first prewarm's summary."""
    cache = tmp_path_factory.mktemp("template") / "cache"
    summary = prewarm(cache)
    return cache, summary


@pytest.fixture
def warm(template, tmp_path):
    """A private copy of the prewarmed cache (copy2 keeps mtimes, i.e. LRU order)."""
    src, summary = template
    dst = tmp_path / "cache"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("locks"))
    return dst, summary["total"]


# ---- info -------------------------------------------------------------------------------------------


def test_info_json(tmp_path):
    cache = tmp_path / "c"
    info = jrun("info", cache=cache)
    assert info["chordrt_version"] == _version_from_cmake()
    assert info["abi_version"] == int(re.search(r"CHORD_ABI_VERSION\s+(\d+)", HEADER.read_text()).group(1))
    nv = info["nvrtc"]
    assert isinstance(nv["available"], bool) and isinstance(nv["library"], str)
    if nv["available"]:
        assert re.fullmatch(r"\d+\.\d+", nv["version"]), nv
        assert nv["library"]
    drv = info["driver"]
    assert isinstance(drv["available"], bool) and isinstance(drv["version"], int) and isinstance(drv["message"], str)
    assert isinstance(info["devices"], list)
    if not drv["available"]:
        assert info["devices"] == [] and drv["message"], drv
    for i, d in enumerate(info["devices"]):
        assert set(d) >= {"index", "name", "compute_capability", "sm_count", "memory_bytes"}
        assert d["index"] == i and d["name"] and d["sm_count"] > 0 and d["memory_bytes"] > 0
    c = info["cache"]
    assert os.path.realpath(c["dir"]) == os.path.realpath(cache)
    assert c["memory_only"] is False
    assert c["layers"] == [] and c["max_bytes"] == 0


def test_info_reads_the_environment(tmp_path):
    a, b, primary = tmp_path / "a", tmp_path / "b", tmp_path / "p"
    a.mkdir()
    b.mkdir()
    info = jrun("info", env={"CHORD_CACHE_DIR": primary, "CHORD_CACHE_PATH": f"{a}:{b}", "CHORD_CACHE_MAX_SIZE": "3M"})
    assert os.path.realpath(info["cache"]["dir"]) == os.path.realpath(primary)
    assert [os.path.realpath(x) for x in info["cache"]["layers"]] == [os.path.realpath(a), os.path.realpath(b)]
    assert info["cache"]["max_bytes"] == 3 << 20
    # --cache-dir overrides $CHORD_CACHE_DIR.
    other = tmp_path / "other"
    info = jrun("info", cache=other, env={"CHORD_CACHE_DIR": primary})
    assert os.path.realpath(info["cache"]["dir"]) == os.path.realpath(other)


# ---- prewarm ----------------------------------------------------------------------------------------


def _check_summary(s):
    assert set(s) >= {"compiled", "cached", "failed", "total", "median_compile_ms", "max_compile_ms", "wall_ms", "failures"}
    assert s["total"] == s["compiled"] + s["cached"] + s["failed"]
    assert s["failed"] == len(s["failures"])
    assert s["wall_ms"] > 0
    if s["compiled"]:
        assert 0 < s["median_compile_ms"] <= s["max_compile_ms"]


def test_prewarm_compiles_then_reports_cached(tmp_path):
    cache = tmp_path / "cache"
    first = prewarm(cache)
    _check_summary(first)
    n = first["compiled"]
    assert n > 0 and first["cached"] == 0 and first["failed"] == 0 and first["failures"] == []
    keys = disk_keys(cache)
    assert len(keys) == n
    assert all(entry_file(cache, k, "json").is_file() for k in keys)
    second = prewarm(cache)
    _check_summary(second)
    assert second["compiled"] == 0 and second["cached"] == n and second["failed"] == 0
    assert disk_keys(cache) == keys


def test_prewarm_agrees_with_the_library(warm, python_runner, tmp_path):
    """The CLI and chordrt.prewarm_model compile the same kernels under the same keys."""
    cache, n = warm
    lib_cache = tmp_path / "lib-cache"
    code = f"import json, chordrt; print(json.dumps(chordrt.prewarm_model({MODEL!r}, {DEPLOYMENT!r})))"
    s = python_runner(code, CHORD_CACHE_DIR=lib_cache).result
    assert s["total"] == n and s["failed"] == 0
    assert disk_keys(lib_cache) == disk_keys(cache)


def test_prewarm_parallel_jobs(tmp_path):
    one, two = tmp_path / "j1", tmp_path / "j2"
    s1 = prewarm(one, "-j", "1", model="deepseek-v3", deployment="tp8")
    s2 = prewarm(two, "-j", "2", model="deepseek-v3", deployment="tp8")
    for s in (s1, s2):
        _check_summary(s)
        assert s["compiled"] == s["total"] > 0 and s["failed"] == 0
    assert disk_keys(one) == disk_keys(two) and len(disk_keys(two)) == s2["total"]


def test_prewarm_config_json_and_env_cache_dir(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps({"hidden_size": 1024, "moe_intermediate_size": 768, "num_local_experts": 32, "num_experts_per_tok": 2})
    )
    cache = tmp_path / "env-cache"
    s = jrun("prewarm", "--model", cfg, "--deployment", "tp2", env={"CHORD_CACHE_DIR": cache})
    _check_summary(s)
    assert s["compiled"] > 0 and s["failed"] == 0
    assert len(disk_keys(cache)) == s["compiled"]


def _descriptor_lines(path, items):
    path.write_text("".join(json.dumps(i) + "\n" for i in items))
    return path


GOOD_DESCRIPTORS = [
    {"family": "glue.silu_and_mul", "arch": "sm_90a", "fields": {"vec": 4, "threads": 128, "rows_per_cta": 2}},
    {
        "family": "glue.moe_align",
        "arch": "sm_90a",
        "fields": {"num_experts": 64, "block_size": 16, "has_expert_map": 0, "threads": 1024, "cluster": 1},
    },
]


def test_prewarm_descriptors_file(tmp_path):
    cache = tmp_path / "cache"
    f = _descriptor_lines(tmp_path / "descriptors.jsonl", GOOD_DESCRIPTORS)
    s = jrun("prewarm", "--descriptors", f, cache=cache)
    _check_summary(s)
    assert s["compiled"] == len(GOOD_DESCRIPTORS) and s["failed"] == 0
    assert len(disk_keys(cache)) == len(GOOD_DESCRIPTORS)
    ls = jrun("ls", cache=cache)
    assert sorted(e["family"] for e in ls["entries"]) == sorted(d["family"] for d in GOOD_DESCRIPTORS)
    s = jrun("prewarm", "--descriptors", f, cache=cache)
    assert s["compiled"] == 0 and s["cached"] == len(GOOD_DESCRIPTORS)


def test_prewarm_compile_failure_exits_1(tmp_path):
    # sm_70 parses as an arch, but recent NVRTC (13) no longer targets it: a genuine compile failure.
    cache = tmp_path / "cache"
    old_arch = dict(GOOD_DESCRIPTORS[1], arch="sm_70")
    f = _descriptor_lines(tmp_path / "descriptors.jsonl", [GOOD_DESCRIPTORS[0], old_arch])
    p = chord_jit("prewarm", "--descriptors", f, "--json", cache=cache)
    s = json.loads(p.stdout)
    _check_summary(s)
    if s["failed"] == 0:
        pytest.skip("this NVRTC still compiles for sm_70: no compile failure to provoke")
    assert p.returncode == 1, p.stderr
    assert s["compiled"] == 1 and s["failed"] == 1
    (failure,) = s["failures"]
    assert "sm_70" in json.dumps(failure["descriptor"]) and failure["error"]
    assert len(disk_keys(cache)) == 1


def test_prewarm_refuses_an_arch_the_kernels_do_not_target(tmp_path):
    # --arch plans for a device: sm_70 / sm_100a are refused up front (exit 2), naming the supported arch.
    for arch in ("sm_70", "sm_100a"):
        p = chord_jit("prewarm", "--model", MODEL, "--deployment", DEPLOYMENT, "--arch", arch, cache=tmp_path / "c")
        assert p.returncode == 2, p.stderr
        assert f"arch {arch} is not supported" in p.stderr and "sm_90a" in p.stderr
    assert disk_keys(tmp_path / "c") == []


def test_prewarm_descriptors_must_be_a_file(tmp_path):
    for path, why in ((tmp_path, "not a regular file"), (tmp_path / "missing.jsonl", "no such file")):
        p = chord_jit("prewarm", "--descriptors", path, cache=tmp_path / "c")
        assert p.returncode == 2 and why in p.stderr, p.stderr


def test_bad_environment_values_are_named(tmp_path):
    p = chord_jit("info", cache=tmp_path / "c", env={"CHORD_LOG_LEVEL": "loud", "CHORD_JIT_STRICT": "yes"})
    assert p.returncode == 0, p.stderr
    assert 'CHORD_LOG_LEVEL="loud" is not one of' in p.stderr
    assert 'CHORD_JIT_STRICT="yes" is neither 0 nor 1' in p.stderr
    # An explicit NVRTC that is not there is an error, never a silent fall-back to another one.
    for bad, why in ((tmp_path / "nope.so", "no such file"), (tmp_path, "not a regular file")):
        nv = jrun("info", cache=tmp_path / "c", env={"CHORD_NVRTC_LIBRARY": bad})["nvrtc"]
        assert nv["available"] is False and f"CHORD_NVRTC_LIBRARY={bad}: {why}" in nv["message"], nv


def test_prewarm_rejects_an_invalid_descriptor_file(tmp_path):
    cache = tmp_path / "cache"
    out_of_range = {
        "family": "glue.moe_align",
        "arch": "sm_90a",
        "fields": {"num_experts": 4096, "block_size": 16, "has_expert_map": 0, "threads": 1024, "cluster": 1},
    }
    unknown_family = {"family": "glue.no_such_family", "arch": "sm_90a", "fields": {}}
    for bad in (out_of_range, unknown_family, "not json"):
        f = tmp_path / "descriptors.jsonl"
        f.write_text(json.dumps(GOOD_DESCRIPTORS[0]) + "\n" + (bad if isinstance(bad, str) else json.dumps(bad)) + "\n")
        p = chord_jit("prewarm", "--descriptors", f, "--json", cache=cache)
        assert p.returncode != 0, bad
        assert str(f) in p.stderr and ":2" in p.stderr, p.stderr  # names the file and the line
    p = chord_jit("prewarm", "--from", tmp_path / "missing.jsonl", cache=cache)
    assert p.returncode != 0 and "missing.jsonl" in p.stderr


def test_prewarm_from_misses_file(tmp_path):
    cache = tmp_path / "cache"
    misses = [{"descriptor": d, "reason": "compile"} for d in GOOD_DESCRIPTORS]
    f = _descriptor_lines(tmp_path / "misses.jsonl", misses)
    s = jrun("prewarm", "--from", f, cache=cache)
    _check_summary(s)
    assert s["compiled"] == len(GOOD_DESCRIPTORS) and s["failed"] == 0
    # The same kernels as from the descriptors themselves.
    other = tmp_path / "other"
    jrun("prewarm", "--descriptors", _descriptor_lines(tmp_path / "d.jsonl", GOOD_DESCRIPTORS), cache=other)
    assert disk_keys(other) == disk_keys(cache)


def _registry_presets():
    """The built-in presets, read from the registry's source (runtime/model_plan.cpp kPresets)."""
    src = (REPO_ROOT / "runtime" / "model_plan.cpp").read_text()
    block = re.search(r"kPresets\[\]\s*=\s*\{(.*?)\n\};", src, re.S)
    assert block, "kPresets not found in runtime/model_plan.cpp"
    return re.findall(r'^\s*\{"([^"]+)",', block.group(1), re.M)


def test_prewarm_help_lists_every_preset():
    presets = _registry_presets()
    # The list gpu_run.sh and the SASS snapshot walk names every preset too (two independent places).
    listed = {line.split()[0] for line in (REPO_ROOT / "tools" / "preset_deployments.txt").read_text().splitlines()
              if line.strip() and not line.startswith("#")}
    assert set(presets) == listed
    p = chord_jit("prewarm", "--help")
    assert p.returncode == 0, p.stderr
    m = re.search(r"preset \(([^)]*)\) or a config\.json path", p.stdout)
    assert m, f"--model's help names no presets:\n{p.stdout}"
    assert m.group(1).split(", ") == presets


def test_prewarm_bad_model_names_it(tmp_path):
    p = chord_jit("prewarm", "--model", "no-such-model-xyz", "--deployment", "tp8", cache=tmp_path / "c")
    assert p.returncode != 0
    assert "no-such-model-xyz" in p.stderr + p.stdout
    p = chord_jit("prewarm", "--model", MODEL, "--deployment", "zz8", cache=tmp_path / "c")
    assert p.returncode != 0
    assert "zz8" in p.stderr + p.stdout
    assert disk_keys(tmp_path / "c") == []


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["no-such-command"],
        ["ls", "--no-such-flag"],
        ["prune"],
        ["prewarm"],
        ["prewarm", "--model", MODEL],
        ["prewarm", "--deployment", DEPLOYMENT],
        ["prewarm", "--model", MODEL, "--deployment", DEPLOYMENT, "-j", "0"],
        ["prewarm", "--model", MODEL, "--deployment", DEPLOYMENT, "--descriptors", "x.jsonl"],
    ],
    ids=lambda a: " ".join(a) or "no-command",
)
def test_usage_errors_exit_2(tmp_path, args):
    p = chord_jit(*args, cache=tmp_path / "c")
    assert p.returncode == 2, f"{args}: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    assert p.stderr.strip(), "a usage error without a message"


# ---- ls / stats -------------------------------------------------------------------------------------


def test_ls(warm):
    cache, n = warm
    ls = jrun("ls", cache=cache)
    entries = ls["entries"]
    assert len(entries) == n
    assert sorted(e["key"] for e in entries) == disk_keys(cache)
    now = time.time()
    for e in entries:
        assert set(e) >= {"key", "descriptor", "family", "layer", "bytes", "last_used_unix", "valid", "problem", "compile_ms"}
        assert e["valid"] is True and not e["problem"]
        assert os.path.realpath(e["layer"]) == os.path.realpath(cache)
        on_disk = entry_file(cache, e["key"], "cubin").stat().st_size + entry_file(cache, e["key"], "json").stat().st_size
        assert e["bytes"] == on_disk
        assert e["family"] and e["family"] in json.dumps(e["descriptor"])
        assert now - 86400 < e["last_used_unix"] < now + 60
        assert e["compile_ms"] > 0
    meta_families = collections.Counter(
        json.loads(entry_file(cache, e["key"], "json").read_text())["descriptor"]["family"] for e in entries
    )
    assert collections.Counter(e["family"] for e in entries) == meta_families


def test_ls_escapes_what_a_crafted_entry_holds(warm):
    # A descriptor text with a terminal escape sequence (the checksum covers the cubin only, so the entry
    # still verifies) is printed escaped; invalid UTF-8 still gives valid JSON.
    cache, _ = warm
    key = disk_keys(cache)[0]
    path = entry_file(cache, key, "json")
    meta = re.sub(rb'"descriptor_text":\s*"', rb'"descriptor_text": "\\u001b[2J\\u0007evil ', path.read_bytes(), count=1)
    assert b"evil" in meta
    path.write_bytes(meta)
    p = chord_jit("ls", cache=cache)
    assert p.returncode == 0, p.stderr
    line = next(l for l in p.stdout.splitlines() if l.startswith(key))
    assert "\x1b" not in line and "\a" not in line
    assert "\\x1b[2J\\x07evil " in line
    # Invalid UTF-8 makes the metadata unreadable; the parser's message quotes the bytes, --json replaces them.
    path.write_bytes(meta.replace(b"evil ", b"\xff\xfe ", 1))
    entries = {e["key"]: e for e in jrun("ls", cache=cache)["entries"]}
    assert not entries[key]["valid"] and "metadata" in entries[key]["problem"]


def test_stats(warm):
    cache, n = warm
    ls = jrun("ls", cache=cache)["entries"]
    st = jrun("stats", cache=cache)
    assert st["entries"] == n and st["invalid"] == 0
    assert st["bytes"] == sum(e["bytes"] for e in ls)
    assert st["families"] == dict(collections.Counter(e["family"] for e in ls))
    (layer,) = st["layers"]
    assert os.path.realpath(layer["dir"]) == os.path.realpath(cache)
    assert layer["entries"] == n and layer["bytes"] == st["bytes"] and layer["read_only"] is False


def test_read_only_layer(warm, tmp_path):
    layer, n = warm
    primary = tmp_path / "primary"
    env = {"CHORD_CACHE_PATH": layer}
    ls = jrun("ls", cache=primary, env=env)["entries"]
    assert len(ls) == n and all(os.path.realpath(e["layer"]) == os.path.realpath(layer) for e in ls)
    st = jrun("stats", cache=primary, env=env)
    layers = {os.path.realpath(l["dir"]): l for l in st["layers"]}
    assert set(layers) == {os.path.realpath(primary), os.path.realpath(layer)}
    assert layers[os.path.realpath(primary)]["read_only"] is False
    assert layers[os.path.realpath(primary)]["entries"] == 0
    assert layers[os.path.realpath(layer)]["read_only"] is True
    assert layers[os.path.realpath(layer)]["entries"] == n == st["entries"]
    s = jrun("prewarm", "--model", MODEL, "--deployment", DEPLOYMENT, cache=primary, env=env)
    assert s["compiled"] == 0 and s["cached"] == n
    assert disk_keys(primary) == []
    assert jrun("clear", cache=primary, env=env)["removed"] == 0
    assert len(disk_keys(layer)) == n


# ---- verify -----------------------------------------------------------------------------------------


def _corrupt(path: Path):
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    data[mid : mid + 16] = bytes(b ^ 0x5A for b in data[mid : mid + 16])
    path.write_bytes(bytes(data))


def test_verify_detects_and_repairs_a_corrupt_cubin(warm):
    cache, n = warm
    ok = jrun("verify", cache=cache)
    assert ok["corrupt"] == 0 and ok["problems"] == [] and ok["repaired"] == 0 and ok["ok"] == n

    key = disk_keys(cache)[n // 2]
    original = entry_file(cache, key, "cubin").read_bytes()
    _corrupt(entry_file(cache, key, "cubin"))
    bad = jrun("verify", cache=cache, rc=1)
    assert bad["corrupt"] == 1 and bad["ok"] == n - 1
    assert [p["key"] for p in bad["problems"]] == [key] and bad["problems"][0]["problem"]
    ls = {e["key"]: e for e in jrun("ls", cache=cache)["entries"]}
    assert ls[key]["valid"] is False and ls[key]["problem"]
    assert sum(not e["valid"] for e in ls.values()) == 1
    assert jrun("stats", cache=cache)["invalid"] == 1

    fixed = jrun("verify", "--repair", cache=cache)
    assert fixed["repaired"] == 1
    again = jrun("verify", cache=cache)
    assert again["corrupt"] == 0 and again["ok"] == n and again["problems"] == []
    assert disk_keys(cache) == sorted(ls)
    assert len(entry_file(cache, key, "cubin").read_bytes()) == len(original)


def test_verify_repair_removes_an_entry_without_a_usable_descriptor(warm):
    cache, n = warm
    key = disk_keys(cache)[0]
    entry_file(cache, key, "json").write_text("{ truncated")
    bad = jrun("verify", cache=cache, rc=1)
    assert bad["corrupt"] == 1 and key in [p["key"] for p in bad["problems"]]
    assert jrun("verify", "--repair", cache=cache)["repaired"] == 1
    again = jrun("verify", cache=cache)
    assert again["corrupt"] == 0 and again["ok"] == n - 1
    # No recorded descriptor to rebuild from: the entry is gone, and a prewarm brings it back.
    assert key not in disk_keys(cache) and len(disk_keys(cache)) == n - 1
    assert all(e["valid"] for e in jrun("ls", cache=cache)["entries"])
    s = prewarm(cache)
    assert s["compiled"] == 1 and s["cached"] == n - 1
    assert key in disk_keys(cache)


def test_verify_ties_metadata_to_the_key(warm):
    # The checksum covers the cubin only: edited launch metadata, or entry A's files under key B, used to
    # verify ok. Both are now corrupt; the repair rebuilds the edited one and removes the impostor.
    cache, n = warm
    a, b, c = disk_keys(cache)[:3]
    meta = json.loads(entry_file(cache, a, "json").read_text())
    meta["threads"] += 32
    entry_file(cache, a, "json").write_text(json.dumps(meta))
    impostor = json.loads(entry_file(cache, c, "json").read_text())
    impostor["key"] = b
    entry_file(cache, b, "json").write_text(json.dumps(impostor))
    entry_file(cache, b, "cubin").write_bytes(entry_file(cache, c, "cubin").read_bytes())
    bad = jrun("verify", cache=cache, rc=1)
    problems = {p["key"]: p["problem"] for p in bad["problems"]}
    assert bad["corrupt"] == 2 and set(problems) == {a, b}, bad
    assert "launch metadata" in problems[a] and f"hashes to key {c}" in problems[b], problems
    fixed = jrun("verify", "--repair", cache=cache)
    assert {p["key"]: p["repair"] for p in fixed["problems"]} == {a: "rebuilt", b: "removed"}
    again = jrun("verify", cache=cache)
    assert again["corrupt"] == 0 and again["ok"] == n - 1


def test_verify_cannot_repair_a_read_only_layer(warm, tmp_path):
    layer, n = warm
    key = disk_keys(layer)[0]
    _corrupt(entry_file(layer, key, "cubin"))
    primary = tmp_path / "primary"
    env = {"CHORD_CACHE_PATH": layer}
    bad = jrun("verify", cache=primary, env=env, rc=1)
    assert bad["corrupt"] == 1 and [p["key"] for p in bad["problems"]] == [key]
    # Corrupt entries remain (the layer is read-only): still exit 1, and the layer is left alone.
    after = jrun("verify", "--repair", cache=primary, env=env, rc=1)
    assert after["corrupt"] == 1 and after["repaired"] == 0
    assert len(disk_keys(layer)) == n


# ---- prune / clear ----------------------------------------------------------------------------------


def test_prune_evicts_least_recently_used(warm):
    cache, n = warm
    assert n >= 3
    entries = jrun("ls", cache=cache)["entries"]
    total = sum(e["bytes"] for e in entries)
    # Give every entry a distinct last-use time; the two most recent must survive.
    now = time.time()
    order = sorted(e["key"] for e in entries)
    for i, key in enumerate(order):
        t = now - 1000 + 10 * i
        for ext in ("json", "cubin"):
            os.utime(entry_file(cache, key, ext), (t, t))
    by_key = {e["key"]: e["bytes"] for e in entries}
    keep = order[-2:]
    limit = by_key[keep[0]] + by_key[keep[1]]
    r = jrun("prune", "--max-size", str(limit), cache=cache)
    assert r["bytes_before"] == total
    assert r["removed"] == n - 2
    assert r["bytes_after"] == limit
    assert disk_keys(cache) == sorted(keep)


def test_prune_with_unit_suffix(warm):
    cache, n = warm
    r = jrun("prune", "--max-size", "1K", cache=cache)
    assert r["removed"] == n and r["bytes_after"] <= 1024
    assert disk_keys(cache) == []
    r = jrun("prune", "--max-size", "1G", cache=cache)
    assert r["removed"] == 0
    p = chord_jit("prune", "--max-size", "12Q", cache=cache)
    assert p.returncode != 0 and "12Q" in p.stderr + p.stdout


def test_clear(warm):
    cache, n = warm
    assert jrun("clear", cache=cache)["removed"] == n
    assert disk_keys(cache) == []
    assert jrun("ls", cache=cache)["entries"] == []
    assert jrun("stats", cache=cache)["entries"] == 0
    assert jrun("clear", cache=cache)["removed"] == 0


# ---- human-readable output --------------------------------------------------------------------------


def test_plain_output_of_every_command(warm, tmp_path):
    cache, n = warm
    f = _descriptor_lines(tmp_path / "d.jsonl", GOOD_DESCRIPTORS)
    commands = [
        ["info"],
        ["prewarm", "--model", MODEL, "--deployment", DEPLOYMENT],
        ["prewarm", "--descriptors", f],
        ["ls"],
        ["stats"],
        ["verify"],
        ["prune", "--max-size", "1G"],
        ["clear"],
    ]
    for args in commands:
        p = chord_jit(*args, cache=cache)
        assert p.returncode == 0, f"{args}: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
        assert p.stdout.strip(), f"{args}: no output"
        with pytest.raises(ValueError):
            json.loads(p.stdout)  # not JSON without --json
    p = chord_jit("--help")
    assert p.returncode == 0 and "prewarm" in p.stdout
