"""The ctypes binding against the built library; CPU only (no GPU, no driver, no torch needed).

Calls that pass device addresses are ones validation must reject before any launch (or, only without a
driver, complete calls that must report NO_DRIVER); see conftest.device_addresses.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from conftest import REPO_ROOT, child_env, parse_header_enum

INVALID = 1  # CHORD_ERROR_INVALID_ARGUMENT, checked against the header below


def raises_invalid(fn, *args, **kwargs):
    """Calls fn, expects ChordError(INVALID_ARGUMENT) and returns its message."""
    import chordrt

    with pytest.raises(chordrt.ChordError) as excinfo:
        fn(*args, **kwargs)
    err = excinfo.value
    assert err.status == chordrt.Status.INVALID_ARGUMENT, f"{err!r}"
    assert isinstance(err.status, chordrt.Status)
    assert err.message, "an error without a message"
    return err.message


# ---- loading --------------------------------------------------------------------------------------


def test_library_loads(chord):
    path = chord.library_path()
    assert Path(path).exists(), path
    if os.environ.get("CHORDRT_LIBRARY"):
        assert path == os.environ["CHORDRT_LIBRARY"]
    assert isinstance(chord.lib(), ctypes.CDLL)


def test_library_candidates_explicit_env_wins(chord, tmp_path):
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "libchordrt.so").write_bytes(b"")
    assert chord.library_candidates({"CHORDRT_LIBRARY": "/opt/x/libchordrt.so"}, tmp_path) == ["/opt/x/libchordrt.so"]


def test_library_candidates_build_trees_newest_first(chord, tmp_path):
    now = time.time()
    for name, age in (("build-old", 300), ("build", 100), ("build-new", 0)):
        (tmp_path / name).mkdir()
        lib = tmp_path / name / "libchordrt.so"
        lib.write_bytes(b"")
        os.utime(lib, (now - age, now - age))
    (tmp_path / "build-empty").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "libchordrt.so").write_bytes(b"")
    got = chord.library_candidates({}, tmp_path)
    expected = [str(tmp_path / n / "libchordrt.so") for n in ("build-new", "build", "build-old")]
    assert got[:3] == expected
    assert all("other" not in p and "build-empty" not in p for p in got)


def test_missing_library_raises_a_clear_error(python_runner, tmp_path):
    not_a_library = tmp_path / "libchordrt.so"
    not_a_library.write_text("not an ELF file")
    for path in (tmp_path / "nowhere" / "libchordrt.so", not_a_library):
        code = textwrap.dedent(
            """
            import json, chordrt
            try:
                chordrt.version()
            except chordrt.LibraryNotFoundError as e:
                print(json.dumps({"os": isinstance(e, OSError), "chord": isinstance(e, chordrt.ChordError),
                                  "message": str(e)}))
            else:
                print(json.dumps(None))
            """
        )
        r = python_runner(code, CHORDRT_LIBRARY=path).result
        assert r is not None, "a missing library went unnoticed"
        assert r["os"] and r["chord"]
        assert str(path) in r["message"] and "CHORDRT_LIBRARY" in r["message"]


def test_import_does_not_need_torch(python_runner):
    code = textwrap.dedent(
        """
        import json, sys, chordrt
        chordrt.runtime_info()
        try:
            chordrt.moe_align(0, 8, 16, num_tokens=1, top_k=1, sorted_token_ids_capacity=0, expert_ids_capacity=0)
        except chordrt.ChordError:
            pass
        print(json.dumps("torch" in sys.modules))
        """
    )
    assert python_runner(code).result is False


# ---- versions, statuses, declarations -------------------------------------------------------------


def test_version_matches_the_cmake_project(chord):
    text = (REPO_ROOT / "CMakeLists.txt").read_text()
    m = re.search(r"project\(\s*chordrt\s+VERSION\s+(\d+)\.(\d+)\.(\d+)", text)
    assert m, "no project(chordrt VERSION ...) in CMakeLists.txt"
    assert chord.version() == tuple(int(x) for x in m.groups())
    assert all(isinstance(x, int) for x in chord.version())


def test_abi_version_matches_the_header(chord, header_text):
    m = re.search(r"#define\s+CHORD_ABI_VERSION\s+(\d+)", header_text)
    assert m
    assert chord.abi_version() == int(m.group(1)) == chord.ABI_VERSION


def test_status_enum_mirrors_the_header(chord, header_text):
    header = parse_header_enum(header_text)
    assert header["CHORD_ERROR_INVALID_ARGUMENT"] == INVALID
    assert {s.c_name: int(s) for s in chord.Status} == header


def test_status_strings_are_distinct_and_named(chord):
    strings = {s: chord.status_string(s) for s in chord.Status}
    assert len(set(strings.values())) == len(strings)
    for s, text in strings.items():
        assert text.startswith(s.c_name), (s, text)
        assert len(text) > len(s.c_name) + 2, f"{s.c_name} has no description"
    unknown = chord.status_string(999)
    assert unknown and unknown not in strings.values()


# The calls that take each runtime/glue/W4A16 struct, and the name their struct_size error gives.
_STRUCT_CALLS = {
    "chord_runtime_info_t": "chord_get_runtime_info",
    "chord_prewarm_summary_t": "chord_prewarm_model",
    "chord_moe_align_args_t": "chord_moe_align",
    "chord_silu_and_mul_args_t": "chord_silu_and_mul",
    "chord_moe_combine_args_t": "chord_moe_combine",
    "chord_w4a16_pack_args_t": "chord_w4a16_pack",
    "chord_grouped_contiguous_args_t": "chord_grouped_contiguous",
    "chord_grouped_masked_args_t": "chord_grouped_masked",
    "chord_indexed_args_t": "chord_indexed_gemm",
}


def _struct_call(chord, c_name, s):
    """The status of the call taking struct `s` (every other argument valid or NULL)."""
    lib = chord.lib()
    if c_name == "chord_runtime_info_t":
        return lib.chord_get_runtime_info(ctypes.byref(s))
    if c_name == "chord_prewarm_summary_t":
        return lib.chord_prewarm_model(b"kimi-k2", b"tp8", b"sm_90a", ctypes.byref(s))
    if c_name == "chord_w4a16_pack_args_t":
        return lib.chord_w4a16_pack(ctypes.byref(s), ctypes.byref(chord.W4a16Weight()), None)
    return getattr(lib, _STRUCT_CALLS[c_name])(ctypes.byref(s), None)


@pytest.mark.parametrize("c_name", sorted(_STRUCT_CALLS))
def test_bad_struct_size_is_rejected_naming_the_call(chord, c_name):
    mirror = chord.STRUCTS[c_name]
    for size in (0, mirror.min_size() - 1, ctypes.sizeof(mirror) + 8):
        s = mirror(struct_size=size)
        assert _struct_call(chord, c_name, s) == INVALID, (c_name, size)
        msg = chord.last_error()
        assert _STRUCT_CALLS[c_name] in msg and "struct_size" in msg, msg
        # The library states the sizes it accepts: exactly [the header's MIN_SIZE, this mirror's sizeof]
        # (test_abi_layout checks min_size() against the macro).
        assert f"[{mirror.min_size()}, {ctypes.sizeof(mirror)}]" in msg, (c_name, msg)
        assert msg.endswith(f"got {size}"), msg


def test_null_glue_args_are_rejected(chord):
    lib = chord.lib()
    for c_name in ("chord_moe_align_args_t", "chord_silu_and_mul_args_t", "chord_moe_combine_args_t"):
        fn = _STRUCT_CALLS[c_name]
        assert getattr(lib, fn)(None, None) == INVALID
        assert f"{fn}: args is null" in chord.last_error()


def _args_struct(chord, c_name, **fields):
    return chord.STRUCTS[c_name](**fields)


def test_a_first_version_struct_reads_its_optional_fields_as_zero(chord, info, device_addresses):
    # A caller built against a header without the optional fields passes min_size() bytes: whatever lies
    # past them in memory must be ignored. A misaligned expert_map (moe_align) and a lone topk_ids
    # (moe_combine) are rejected at full size and ignored at the minimum size.
    if info["driver_available"]:
        pytest.skip("a driver is present: the minimum-size calls would launch")
    ids, sorted_ids, expert_ids, post, emap = device_addresses(5)
    cap = chord.moe_align_sorted_capacity(4, 2, 8, 16)
    align = _args_struct(
        chord, "chord_moe_align_args_t", topk_ids=ids, num_tokens=4, top_k=2, num_experts=8, block_size=16,
        sorted_token_ids=sorted_ids, sorted_token_ids_capacity=cap, expert_ids=expert_ids,
        expert_ids_capacity=-(-cap // 16), num_tokens_post_padded=post, expert_map=emap + 2,
    )
    rows, weights, out, topk = device_addresses(4)
    combine = _args_struct(
        chord, "chord_moe_combine_args_t", expert_rows=rows, topk_weights=weights, output=out, num_tokens=4, top_k=2,
        hidden=64, topk_ids=topk, num_experts=8,
    )
    for c_name, s, needle in (("chord_moe_align_args_t", align, "expert_map"),
                              ("chord_moe_combine_args_t", combine, "expert_map")):
        assert _struct_call(chord, c_name, s) == INVALID, c_name
        assert needle in chord.last_error()
        s.struct_size = chord.STRUCTS[c_name].min_size()
        status = _struct_call(chord, c_name, s)
        assert status in (chord.Status.NO_DRIVER, chord.Status.NO_DEVICE), (c_name, status, chord.last_error())


# ---- errors and last_error ------------------------------------------------------------------------


def test_chord_error_carries_status_and_last_error(chord):
    with pytest.raises(chord.ChordError) as excinfo:
        chord.prewarm_model("no-such-model", "tp8")
    e = excinfo.value
    assert e.status is chord.Status.INVALID_ARGUMENT
    assert e.message == chord.last_error()
    assert "no-such-model" in e.message
    assert "CHORD_ERROR_INVALID_ARGUMENT" in str(e)


def test_last_error_is_per_thread(chord):
    assert chord.lib().chord_get_runtime_info(None) == INVALID
    main_message = chord.last_error()
    assert "info" in main_message
    seen = {}

    def other():
        seen["before"] = chord.last_error()
        try:
            chord.prewarm_model("thread-model", "tp8")
        except chord.ChordError as e:
            seen["after"] = e.message

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen["before"] == ""
    assert "thread-model" in seen["after"]
    assert chord.last_error() == main_message


def test_null_and_odd_arguments_of_the_runtime_calls(chord):
    lib = chord.lib()
    assert lib.chord_get_runtime_info(None) == INVALID
    assert "info is null" in chord.last_error()
    lib.chord_get_version(None, None, None)  # must not crash
    for i, name in enumerate(("model", "deployment", "arch")):
        args = [b"kimi-k2", b"tp8", b"sm_90a"]
        args[i] = None
        assert lib.chord_prewarm_model(*args, None) == INVALID
        assert f"{name} is null" in chord.last_error()


@pytest.mark.parametrize(
    "model, deployment, arch, words",
    [
        ("no-such-model", "tp8", "sm_90a", ["no-such-model", "kimi-k2"]),
        ("kimi-k2", "xp8", "sm_90a", ["deployment", "xp8"]),
        ("kimi-k2", "tp", "sm_90a", ["deployment"]),
        ("kimi-k2", "tp3", "sm_90a", ["divisible", "3"]),
        ("kimi-k2", "ep7", "sm_90a", ["divisible", "7"]),
        ("kimi-k2", "tp8", "sm_banana", ["sm_banana"]),
    ],
)
def test_prewarm_rejects_bad_requests(chord, model, deployment, arch, words):
    msg = raises_invalid(chord.prewarm_model, model, deployment, arch)
    for w in words:
        assert w in msg, msg


def test_prewarm_rejects_incomplete_config(chord, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"hidden_size": 1024, "n_routed_experts": 64, "num_experts_per_tok": 4}))
    msg = raises_invalid(chord.prewarm_model, str(cfg), "tp1")
    assert "moe_intermediate_size" in msg and str(cfg) in msg
    cfg.write_text("{not json")
    assert str(cfg) in raises_invalid(chord.prewarm_model, cfg, "tp1")


def test_prewarm_for_an_arch_the_kernels_do_not_target_is_refused(chord):
    # Planning for sm_70 / sm_100a used to compile (and fail) every kernel; now refused before compiling.
    for arch in ("sm_70", "sm_100a"):
        msg = raises_invalid(chord.prewarm_model, "kimi-k2", "tp8", arch)
        assert f"arch {arch} is not supported" in msg and "sm_90a" in msg


# ---- runtime_info ---------------------------------------------------------------------------------


def test_runtime_info(chord, info):
    assert set(info) == {
        "driver_available",
        "driver_version",
        "device_count",
        "nvrtc_available",
        "nvrtc_major",
        "nvrtc_minor",
        "cache_memory_only",
        "cache_dir",
        "kernels_compiled",
        "disk_hits",
        "kernels_loaded",
    }
    assert isinstance(info["driver_available"], bool) and isinstance(info["cache_memory_only"], bool)
    for k in ("driver_version", "device_count", "nvrtc_major", "nvrtc_minor", "kernels_compiled", "disk_hits"):
        assert isinstance(info[k], int) and info[k] >= 0, k
    if info["driver_available"]:
        assert info["driver_version"] >= 12000
    else:
        assert info["device_count"] == 0
    assert info["nvrtc_available"] == (info["nvrtc_major"] > 0)
    if info["nvrtc_available"]:
        assert info["nvrtc_major"] >= 12
    assert os.path.realpath(info["cache_dir"]) == os.path.realpath(os.environ["CHORD_CACHE_DIR"])
    assert not info["cache_memory_only"]


def test_unusable_cache_dir_is_memory_only(python_runner, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code = "import json, chordrt; print(json.dumps(chordrt.runtime_info()))"
    r = python_runner(code, CHORD_CACHE_DIR=blocker / "cache").result
    assert r["cache_memory_only"] is True
    assert r["cache_dir"] == str(blocker / "cache")


VALIDATE_BEFORE_DEVICE = textwrap.dedent(
    """
    import json, os, chordrt
    A = [0x10000 + i * 0x100000 for i in range(16)]
    def status(fn, *args, **kw):
        try:
            fn(*args, **kw)
            return ["SUCCESS", ""]
        except chordrt.ChordError as e:
            return [e.status.name, e.message]
    mla = dict(q=A[0], cache=A[1], indices=A[2], softmax_scale=0.04, num_tokens=4, num_heads=16, topk=2048,
               num_slots=4096, out=A[3], lse=A[4])
    out = {
        "mla": status(chordrt.sparse_mla_decode, **mla),
        "mla_workspace": status(chordrt.sparse_mla_decode, **mla, workspace=A[5] + 8, workspace_bytes=1 << 20),
        "warp_decode": status(chordrt.warp_decode_moe, *A[6:13], weight_format=0, num_tokens=4, hidden=2048,
                              intermediate=768, num_experts=128, top_k=8, workspace=A[13],
                              workspace_bytes=4 * 8 * 768 * 2, output=A[14]),
    }
    if os.environ.get("CHORD_DSA_CONFIG"):  # else a driver would launch it on fake addresses
        out["dsa"] = status(chordrt.dsa_indexer_logits, A[0], A[1], A[2], A[3], A[4], 64, 65536, A[5],
                            num_heads=64, num_tokens=4, num_pages=4096, max_pages_per_seq=1024)
    print(json.dumps(out))
    """
)


def test_device_independent_checks_come_before_the_driver(python_runner):
    # Garbage overrides and a misaligned workspace are INVALID_ARGUMENT with or without a driver (they were
    # NO_DRIVER on compile-only machines); every address here is fake, so nothing may launch.
    r = python_runner(VALIDATE_BEFORE_DEVICE, CHORD_MLA_CONFIG="splitz=4", CHORD_WARP_DECODE_CONFIG="k_split=x",
                      CHORD_DSA_CONFIG="stages=two").result
    assert r["mla"][0] == "INVALID_ARGUMENT" and 'CHORD_MLA_CONFIG="splitz=4"' in r["mla"][1], r
    assert r["warp_decode"][0] == "INVALID_ARGUMENT" and "CHORD_WARP_DECODE_CONFIG" in r["warp_decode"][1], r
    assert r["dsa"][0] == "INVALID_ARGUMENT" and 'CHORD_DSA_CONFIG="stages=two"' in r["dsa"][1], r
    r = python_runner(VALIDATE_BEFORE_DEVICE).result
    assert r["mla_workspace"] == ["INVALID_ARGUMENT", "sparse_mla_decode: workspace must be 16-byte aligned, got "
                                  "address " + hex(0x10000 + 5 * 0x100000 + 8)], r


# ---- prewarm (in child processes: the runtime reads CHORD_CACHE_DIR once per process) -------------

PREWARM = textwrap.dedent(
    """
    import json, sys, chordrt
    s = chordrt.prewarm_model(sys.argv[1] if len(sys.argv) > 1 else {model!r}, {deployment!r}, {arch!r})
    print(json.dumps({{"summary": s, "info": chordrt.runtime_info()}}))
    """
)


def prewarm_in_child(runner, model, deployment, cache_dir, arch="sm_90a", **env):
    return runner(PREWARM.format(model=str(model), deployment=deployment, arch=arch), CHORD_CACHE_DIR=cache_dir, **env).result


def _entries(cache_dir):
    return sorted(p.stem for p in Path(cache_dir).glob("entries/*/*.cubin"))


def test_prewarm_compiles_then_hits_the_disk_cache(python_runner, needs_nvrtc, tmp_path):
    cache = tmp_path / "cache"
    first = prewarm_in_child(python_runner, "kimi-k2", "ep8", cache)
    s = first["summary"]
    assert s["compiled"] > 0 and s["cached"] == 0 and s["failed"] == 0
    assert s["total"] == s["compiled"]
    assert 0 < s["median_compile_ms"] <= s["max_compile_ms"]
    assert first["info"]["kernels_compiled"] == s["compiled"]
    assert len(_entries(cache)) == s["compiled"]
    for key in _entries(cache):
        assert (cache / "entries" / key[:2] / f"{key}.json").exists()

    second = prewarm_in_child(python_runner, "kimi-k2", "ep8", cache)
    s2 = second["summary"]
    assert s2["compiled"] == 0 and s2["failed"] == 0
    assert s2["cached"] == s["compiled"]
    assert second["info"]["kernels_compiled"] == 0
    assert second["info"]["disk_hits"] == s["compiled"]
    assert len(_entries(cache)) == s["compiled"]


def test_prewarm_from_config_json_and_read_only_layer(python_runner, needs_nvrtc, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps(
            {
                "architectures": ["SomeMoeForCausalLM"],
                "text_config": {
                    "hidden_size": 2048,
                    "moe_intermediate_size": 1408,
                    "num_experts": 64,
                    "num_experts_per_tok": 6,
                },
            }
        )
    )
    layer = tmp_path / "layer"
    s = prewarm_in_child(python_runner, cfg, "tp2", layer)["summary"]
    assert s["compiled"] > 0 and s["failed"] == 0
    # A fresh primary directory with the first one as a read-only layer: everything is found there.
    primary = tmp_path / "primary"
    r = prewarm_in_child(python_runner, cfg, "tp2", primary, CHORD_CACHE_PATH=layer)
    assert r["summary"]["compiled"] == 0 and r["summary"]["cached"] == s["compiled"]
    assert _entries(primary) == []


def test_concurrent_prewarms_compile_each_kernel_once(python_runner, needs_nvrtc, tmp_path):
    cache = tmp_path / "cache"
    code = PREWARM.format(model="deepseek-v3", deployment="tp4", arch="sm_90a")
    procs = [
        subprocess.Popen([sys.executable, "-c", code], env=child_env(CHORD_CACHE_DIR=cache), stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    results = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        results.append(json.loads(out.strip().splitlines()[-1])["summary"])
    total = results[0]["total"]
    assert total > 0 and results[1]["total"] == total
    assert all(r["failed"] == 0 for r in results)
    assert results[0]["compiled"] + results[1]["compiled"] == total
    assert results[0]["cached"] + results[1]["cached"] == total
    assert len(_entries(cache)) == total


# ---- MoE ops: argument validation (raw device addresses) -------------------------------------------


def _align_args(chord, ptr, **over):
    a = dict(num_tokens=4, top_k=2, num_experts=8, block_size=16)
    a.update({k: v for k, v in over.items() if k in a})
    cap = chord.moe_align_sorted_capacity(a["num_tokens"], a["top_k"], max(a["num_experts"], 1), max(a["block_size"], 1))
    blocks = -(-cap // max(a["block_size"], 1))
    p = ptr(4)
    args = dict(
        topk_ids=p[0],
        sorted_token_ids=p[1],
        expert_ids=p[2],
        num_tokens_post_padded=p[3],
        sorted_token_ids_capacity=cap,
        expert_ids_capacity=blocks,
        **a,
    )
    args.update(over)
    topk = args.pop("topk_ids")
    e = args.pop("num_experts")
    b = args.pop("block_size")
    return (topk, e, b), args


@pytest.mark.parametrize("name", ["topk_ids", "sorted_token_ids", "expert_ids", "num_tokens_post_padded"])
def test_moe_align_null_pointers(chord, device_addresses, name):
    pos, kw = _align_args(chord, device_addresses, **{name: 0})
    msg = raises_invalid(chord.moe_align, *pos, **kw)
    assert f"{name} is null" in msg, msg


@pytest.mark.parametrize("name", ["topk_ids", "sorted_token_ids", "expert_ids", "num_tokens_post_padded", "expert_map"])
def test_moe_align_misaligned_pointers(chord, device_addresses, name):
    pos, kw = _align_args(chord, device_addresses)
    if name == "topk_ids":
        pos = (pos[0] + 2,) + pos[1:]
    elif name == "expert_map":
        kw["expert_map"] = device_addresses() + 2
    else:
        kw[name] += 2
    msg = raises_invalid(chord.moe_align, *pos, **kw)
    assert name in msg and "aligned" in msg, msg


@pytest.mark.parametrize(
    "over, word",
    [
        ({"top_k": 0}, "top_k"),
        ({"top_k": 65}, "top_k"),
        ({"num_experts": 0}, "num_experts"),
        ({"num_experts": 1025}, "num_experts"),
        ({"block_size": 0}, "block_size"),
        ({"block_size": 1025}, "block_size"),
        ({"num_tokens": -1}, "num_tokens"),
        ({"num_tokens": 1 << 30}, "num_tokens"),
    ],
)
def test_moe_align_bad_shapes(chord, device_addresses, over, word):
    pos, kw = _align_args(chord, device_addresses, **over)
    msg = raises_invalid(chord.moe_align, *pos, **kw)
    assert word in msg, msg


def test_moe_align_capacity_checks_agree_with_the_capacity_function(chord, device_addresses):
    for m, k, e, b in ((4, 2, 8, 16), (1, 1, 384, 64), (8192, 8, 384, 128), (3, 8, 1024, 1)):
        cap = chord.moe_align_sorted_capacity(m, k, e, b)
        pos, kw = _align_args(chord, device_addresses, num_tokens=m, top_k=k, num_experts=e, block_size=b)
        assert kw["sorted_token_ids_capacity"] == cap
        kw["sorted_token_ids_capacity"] = cap - 1
        msg = raises_invalid(chord.moe_align, *pos, **kw)
        assert "sorted_token_ids_capacity" in msg and str(cap) in msg, msg
        kw["sorted_token_ids_capacity"] = cap
        kw["expert_ids_capacity"] = chord.moe_align_expert_ids_capacity(m, k, e, b) - 1
        msg = raises_invalid(chord.moe_align, *pos, **kw)
        assert "expert_ids_capacity" in msg, msg


def _padded_total(counts, block):
    return sum(-(-c // block) * block for c in counts)


@pytest.mark.parametrize("m, k, e, b", [(1, 1, 8, 16), (7, 4, 8, 16), (64, 8, 384, 64), (8192, 8, 384, 128), (5, 3, 2, 7)])
def test_moe_align_sorted_capacity_bounds_the_worst_case(chord, m, k, e, b):
    import random

    routes = m * k
    cap = chord.moe_align_sorted_capacity(m, k, e, b)
    assert cap <= routes + e * (b - 1)  # the header's formula is an upper bound
    # The worst routing: as many experts as possible with a count of 1 modulo block_size.
    n = min(routes, e)
    worst = [1] * n
    worst[0] += routes - n
    spread = [1 + b * ((routes - n) // b // n)] * n
    spread[0] += routes - sum(spread)
    rng = random.Random(m * 1000 + e)
    randoms = []
    for _ in range(20):
        c = [0] * e
        for _ in range(routes):
            c[rng.randrange(e)] += 1
        randoms.append(c)
    for counts in [worst, spread] + randoms:
        assert sum(counts) == routes
        assert _padded_total(counts, b) <= cap, (counts, b)
    assert chord.moe_align_expert_ids_capacity(m, k, e, b) == -(-cap // b)


def test_moe_align_raw_mode_needs_sizes(chord):
    msg = raises_invalid(chord.moe_align, 0, 8, 16, top_k=2, sorted_token_ids_capacity=0, expert_ids_capacity=0)
    assert "num_tokens" in msg
    msg = raises_invalid(chord.moe_align, "0x10", 8, 16, num_tokens=1, top_k=2, sorted_token_ids_capacity=0, expert_ids_capacity=0)
    assert "topk_ids" in msg
    msg = raises_invalid(chord.moe_align, True, 8, 16, num_tokens=1, top_k=2, sorted_token_ids_capacity=0, expert_ids_capacity=0)
    assert "topk_ids" in msg
    msg = raises_invalid(chord.moe_align, 0, 8.0, 16, num_tokens=1, top_k=2, sorted_token_ids_capacity=0, expert_ids_capacity=0)
    assert "num_experts" in msg


@pytest.mark.parametrize("name", ["input", "output"])
def test_silu_and_mul_null_and_misaligned(chord, device_addresses, name):
    p = dict(zip(("input", "output"), device_addresses(2)))
    p[name] = 0
    msg = raises_invalid(chord.silu_and_mul, p["input"], p["output"], rows=4, intermediate=64)
    assert f"{name} is null" in msg, msg
    p = dict(zip(("input", "output"), device_addresses(2)))
    p[name] += 8  # 8-byte aligned: not enough for 16-byte vectors (intermediate % 8 == 0)
    msg = raises_invalid(chord.silu_and_mul, p["input"], p["output"], rows=4, intermediate=64)
    assert name in msg and "16-byte aligned" in msg, msg


@pytest.mark.parametrize("over, word", [({"rows": -1}, "rows"), ({"intermediate": 0}, "intermediate"), ({"intermediate": -5}, "intermediate")])
def test_silu_and_mul_bad_shapes(chord, device_addresses, over, word):
    a = dict(rows=4, intermediate=64)
    a.update(over)
    i, o = device_addresses(2)
    assert word in raises_invalid(chord.silu_and_mul, i, o, **a)


def test_zero_rows_is_a_no_op(chord, device_addresses):
    # Nothing to launch: succeeds without a driver too.
    i, o, w = device_addresses(3)
    assert chord.silu_and_mul(i, o, rows=0, intermediate=64) is None
    assert chord.moe_combine(i, w, o, num_tokens=0, top_k=8, hidden=7168) is None


def _combine_args(ptr, **over):
    p = ptr(3)
    a = dict(expert_rows=p[0], topk_weights=p[1], output=p[2], num_tokens=4, top_k=2, hidden=64)
    a.update(over)
    return (a.pop("expert_rows"), a.pop("topk_weights"), a.pop("output")), a


@pytest.mark.parametrize("name", ["expert_rows", "topk_weights", "output"])
def test_moe_combine_null_pointers(chord, device_addresses, name):
    pos, kw = _combine_args(device_addresses, **{name: 0})
    assert f"{name} is null" in raises_invalid(chord.moe_combine, *pos, **kw)


def test_moe_combine_misaligned_weights(chord, device_addresses):
    pos, kw = _combine_args(device_addresses)
    pos = (pos[0], pos[1] + 2, pos[2])
    msg = raises_invalid(chord.moe_combine, *pos, **kw)
    assert "topk_weights" in msg and "aligned" in msg


@pytest.mark.parametrize(
    "over, word",
    [({"num_tokens": -1}, "num_tokens"), ({"top_k": 0}, "top_k"), ({"top_k": 65}, "top_k"), ({"hidden": 0}, "hidden")],
)
def test_moe_combine_bad_shapes(chord, device_addresses, over, word):
    pos, kw = _combine_args(device_addresses, **over)
    assert word in raises_invalid(chord.moe_combine, *pos, **kw)


def test_moe_combine_filter_needs_both_halves(chord, device_addresses):
    ids, emap = device_addresses(2)
    pos, kw = _combine_args(device_addresses)
    msg = raises_invalid(chord.moe_combine, *pos, topk_ids=ids, num_experts=8, **kw)
    assert "topk_ids" in msg and "expert_map" in msg
    msg = raises_invalid(chord.moe_combine, *pos, expert_map=emap, num_experts=8, **kw)
    assert "topk_ids" in msg and "expert_map" in msg
    msg = raises_invalid(chord.moe_combine, *pos, topk_ids=ids, expert_map=emap, num_experts=0, **kw)
    assert "num_experts" in msg
    msg = raises_invalid(chord.moe_combine, *pos, topk_ids=ids + 1, expert_map=emap, num_experts=8, **kw)
    assert "topk_ids" in msg and "aligned" in msg


def test_valid_calls_without_a_driver_report_it(chord, info, device_addresses):
    if info["driver_available"]:
        pytest.skip("a driver is present: complete calls would launch")
    expected = {chord.Status.NO_DRIVER, chord.Status.NO_DEVICE}
    calls = []
    pos, kw = _align_args(chord, device_addresses)
    calls.append(lambda: chord.moe_align(*pos, **kw))
    calls.append(lambda: chord.moe_align(*pos, expert_map=device_addresses(), **kw))
    # Buffers sized by vLLM's bound (routes + num_experts*(block_size-1)) are accepted too.
    vllm = dict(kw, sorted_token_ids_capacity=4 * 2 + 8 * 15, expert_ids_capacity=-(-(4 * 2 + 8 * 15) // 16))
    calls.append(lambda: chord.moe_align(*pos, **vllm))
    i, o = device_addresses(2)
    calls.append(lambda: chord.silu_and_mul(i, o, rows=4, intermediate=64))
    calls.append(lambda: chord.silu_and_mul(i + 2, o + 2, rows=4, intermediate=7))  # 2-byte alignment suffices
    cpos, ckw = _combine_args(device_addresses)
    calls.append(lambda: chord.moe_combine(*cpos, **ckw))
    ids, emap = device_addresses(2)
    calls.append(lambda: chord.moe_combine(*cpos, topk_ids=ids, expert_map=emap, num_experts=8, **ckw))
    for call in calls:
        with pytest.raises(chord.ChordError) as excinfo:
            call()
        assert excinfo.value.status in expected, excinfo.value
        assert excinfo.value.message


# ---- warp decode ------------------------------------------------------------------------------------


def _warp_decode_args(chord, device_addresses, **over):
    """Raw-pointer arguments of a small valid warp-decode call (Qwen3-like: H 2048, I 768, E 128, top-8)."""
    x, ids, w, w13, s13, w2, s2, ws, out = device_addresses(9)
    args = dict(
        x=x, topk_ids=ids, topk_weights=w, w13=w13, w13_scale=s13, w2=w2, w2_scale=s2, workspace=ws, output=out,
        weight_format=chord.WeightFormat.INT4_GROUP32, num_tokens=4, hidden=2048, intermediate=768, num_experts=128,
        top_k=8, workspace_bytes=chord.warp_decode_moe_workspace_size(4, 8, 768),
    )
    args.update(over)
    return args


def test_warp_decode_workspace_size(chord):
    assert chord.warp_decode_moe_workspace_size(4, 8, 768) == 4 * 8 * 768 * 2
    assert chord.warp_decode_moe_workspace_size(0, 8, 768) == 0


@pytest.mark.parametrize(
    "over, word",
    [
        ({"num_tokens": 129}, "num_tokens"),
        ({"hidden": 2000}, "multiples of the group size 32"),
        ({"top_k": 33}, "top_k"),
        ({"w2": 0}, "w2 is null"),
        ({"workspace_bytes": 16}, "workspace"),
    ],
)
def test_warp_decode_bad_arguments(chord, device_addresses, over, word):
    assert word in raises_invalid(chord.warp_decode_moe, **_warp_decode_args(chord, device_addresses, **over))


def test_warp_decode_unknown_format_is_caught_by_the_binding(chord, device_addresses):
    with pytest.raises(ValueError, match="is not a valid WeightFormat"):
        chord.warp_decode_moe(**_warp_decode_args(chord, device_addresses, weight_format=5))


def test_warp_decode_raw_mode_needs_sizes(chord, device_addresses):
    args = _warp_decode_args(chord, device_addresses)
    del args["intermediate"]
    assert "intermediate" in raises_invalid(chord.warp_decode_moe, **args)
    args = _warp_decode_args(chord, device_addresses, expert_map=device_addresses())
    assert "num_global_experts" in raises_invalid(chord.warp_decode_moe, **args)


def test_warp_decode_without_a_driver_reports_it(chord, info, device_addresses):
    if info["driver_available"]:
        pytest.skip("a driver is present: a complete call would launch")
    with pytest.raises(chord.ChordError) as excinfo:
        chord.warp_decode_moe(**_warp_decode_args(chord, device_addresses))
    assert excinfo.value.status in {chord.Status.NO_DRIVER, chord.Status.NO_DEVICE}


# ---- W4A16 weights, grouped and indexed GEMMs (raw pointers, no GPU needed: every check runs before a launch)


def _w4a16_pack_args(chord, device_addresses, **over):
    """Raw-pointer arguments of a small valid pack for WGMMA_K128 (E 4, N 256, K 512)."""
    words, scale, packed, packed_scale = device_addresses(4)
    packed_bytes, scale_bytes = chord.w4a16_weight_sizes("wgmma_k128", 4, 256, 512)
    args = dict(
        weight_packed=words, weight_scale=scale, layout="wgmma_k128", packed=packed, scale=packed_scale,
        num_experts=4, n=256, k=512, packed_bytes=packed_bytes, scale_bytes=scale_bytes,
    )
    args.update(over)
    return args


def test_w4a16_layout_enum_mirrors_the_header(chord, header_text):
    header = {name: int(value) for name, value in re.findall(r"(CHORD_W4A16_LAYOUT_\w+)\s*=\s*(\d+)", header_text)}
    assert {f"CHORD_W4A16_LAYOUT_{m.name}": int(m) for m in chord.W4a16Layout} == header
    profiles = {name: int(value) for name, value in re.findall(r"(CHORD_INDEXED_PROFILE_\w+)\s*=\s*(\d+)", header_text)}
    assert {f"CHORD_INDEXED_PROFILE_{m.name}": int(m) for m in chord.IndexedProfile} == profiles


def test_w4a16_weight_sizes(chord):
    for layout in chord.W4a16Layout:
        assert chord.w4a16_weight_sizes(layout, 48, 4096, 7168) == (48 * 4096 * 7168 // 2, 48 * 4096 * 224 * 2)
    assert chord.w4a16_weight_sizes("mma", 1, 128, 128) == (128 * 128 // 2, 128 * 4 * 2)
    assert "k must be a positive multiple of 128 for layout WGMMA_K128" in raises_invalid(
        chord.w4a16_weight_sizes, "wgmma_k128", 4, 256, 576)
    assert chord.w4a16_weight_sizes("wgmma_k64", 4, 256, 576) == (4 * 256 * 576 // 2, 4 * 256 * 18 * 2)
    assert "n must be a positive multiple of 128" in raises_invalid(chord.w4a16_weight_sizes, "mma", 4, 200, 512)
    with pytest.raises(ValueError, match="not a valid W4a16Layout"):
        chord.w4a16_weight_sizes("contiguous", 4, 256, 512)
    with pytest.raises(ValueError, match="3 is not a valid W4a16Layout"):
        chord.w4a16_weight_sizes(3, 4, 256, 512)
    packed, scale = ctypes.c_size_t(1), ctypes.c_size_t(1)
    assert chord.lib().chord_w4a16_weight_sizes(3, 4, 256, 512, ctypes.byref(packed), ctypes.byref(scale)) == INVALID
    assert "layout must be in [0, 2] (WGMMA_K64, WGMMA_K128, MMA), got 3" in chord.last_error()
    assert (packed.value, scale.value) == (0, 0)


@pytest.mark.parametrize("over", [{"bits": 8}, {"group_size": 128}, {"symmetric": False}, {"scale_is_bf16": False}])
def test_w4a16_pack_rejects_other_schemes(chord, device_addresses, over):
    with pytest.raises(chord.ChordError) as excinfo:
        chord.w4a16_pack(**_w4a16_pack_args(chord, device_addresses, **over))
    assert excinfo.value.status == chord.Status.UNSUPPORTED
    assert "symmetric 4-bit" in excinfo.value.message


@pytest.mark.parametrize(
    "over, word",
    [({"packed_bytes": 16}, "packed_bytes must be >= 262144"), ({"scale_bytes": 16}, "scale_bytes must be >= 32768"),
     ({"weight_packed": 0}, "weight_packed is null"), ({"k": 640 + 64}, "multiple of 128 for layout WGMMA_K128"),
     ({"packed": 8}, "packed must be 16-byte aligned")],
)
def test_w4a16_pack_bad_arguments(chord, device_addresses, over, word):
    if "packed" in over:
        over = {"packed": _w4a16_pack_args(chord, device_addresses)["packed"] + over["packed"]}
    assert word in raises_invalid(chord.w4a16_pack, **_w4a16_pack_args(chord, device_addresses, **over))


def test_w4a16_pack_raw_mode_needs_sizes(chord, device_addresses):
    args = _w4a16_pack_args(chord, device_addresses)
    del args["packed_bytes"]
    assert "packed_bytes is required" in raises_invalid(chord.w4a16_pack, **args)


def test_w4a16_pack_without_a_driver_reports_it(chord, info, device_addresses):
    if info["driver_available"]:
        pytest.skip("a driver is present: a complete call would launch")
    with pytest.raises(chord.ChordError) as excinfo:
        chord.w4a16_pack(**_w4a16_pack_args(chord, device_addresses))
    assert excinfo.value.status in {chord.Status.NO_DRIVER, chord.Status.NO_DEVICE}


def _unpacked_weight(chord, layout, experts=4, n=256, k=512):
    """A weight struct w4a16_pack did not fill (no tag): every GEMM refuses it before anything runs."""
    return chord.W4a16Weight(layout=int(layout), num_experts=experts, n=n, k=k, packed=0x100000, scale=0x200000)


def test_grouped_and_indexed_gemms_refuse_a_weight_not_from_the_packer(chord, device_addresses):
    a, ids, out, post = device_addresses(4)
    w = _unpacked_weight(chord, chord.W4a16Layout.WGMMA_K64)
    assert "not filled by w4a16_pack" in raises_invalid(chord.grouped_contiguous, a, w, ids, out, m=128)
    w = _unpacked_weight(chord, chord.W4a16Layout.WGMMA_K128)
    assert "not filled by w4a16_pack" in raises_invalid(chord.grouped_masked, a, w, ids, 16, out, max_m=128)
    w = _unpacked_weight(chord, chord.W4a16Layout.MMA)
    assert "not filled by w4a16_pack" in raises_invalid(chord.indexed_gemm, a, w, ids, ids, post, 8, 16, out,
                                                        num_tokens=4, sorted_token_ids_capacity=256,
                                                        expert_ids_capacity=16)
    with pytest.raises(chord.ChordError, match="weight must be a W4a16PackedWeight"):
        chord.grouped_contiguous(a, object(), ids, out, m=128)


def test_gemm_raw_modes_need_sizes(chord, device_addresses):
    a, ids, out, post = device_addresses(4)
    w = _unpacked_weight(chord, chord.W4a16Layout.WGMMA_K64)
    assert "m is required" in raises_invalid(chord.grouped_contiguous, a, w, ids, out)
    assert "max_m is required" in raises_invalid(chord.grouped_masked, a, w, ids, 16, out)
    assert "num_tokens is required" in raises_invalid(chord.indexed_gemm, a, w, ids, ids, post, 8, 16, out,
                                                      sorted_token_ids_capacity=256, expert_ids_capacity=16)


def test_indexed_block_m(chord):
    assert chord.indexed_block_m("mma", 48, 4096, 7168, 160) == 8
    assert chord.indexed_block_m(chord.W4a16Layout.WGMMA_K64, 48, 4096, 7168, 48 * 170, "auto") == 96
    assert "layout must be WGMMA_K64 (0) or MMA (2)" in raises_invalid(chord.indexed_block_m, "wgmma_k128", 48,
                                                                       4096, 7168, 160)
    with pytest.raises(ValueError, match="not a valid IndexedProfile"):
        chord.indexed_block_m("mma", 48, 4096, 7168, 160, profile=7)
    bm = ctypes.c_int32(5)
    assert chord.lib().chord_indexed_block_m(2, 48, 4096, 7168, 160, 7, ctypes.byref(bm)) == INVALID
    assert "profile must be in [0, 2], got 7" in chord.last_error()
    assert bm.value == 0


# ---- sparse MLA: record sizes and the cache writer's raw-pointer mode ------------------------------------------


def test_mla_cache_record_bytes(chord):
    assert chord.mla_cache_record_bytes("fp8_ds_mla", 64) == 656
    assert chord.mla_cache_record_bytes(chord.MlaCacheFormat.FP8_DS_MLA, 0) == 528
    assert chord.mla_cache_record_bytes("bf16", 64) == 1152
    assert chord.mla_cache_record_bytes(1, 0) == 1024
    assert chord.mla_cache_record_bytes("bf16", 32) == 0
    assert chord.mla_cache_record_bytes("bf16", 2**31 - 1) == 0  # no overflow before the check
    assert "format" in raises_invalid(chord.mla_cache_record_bytes, "fp4", 64)


def _mla_write_args(device_addresses, **over):
    kv, slots, cache = device_addresses(3)
    args = dict(kv=kv, slot_mapping=slots, cache=cache, format="fp8_ds_mla", rope_dims=64, num_tokens=4, num_slots=64)
    args.update(over)
    return args


@pytest.mark.parametrize(
    "over, word",
    [({"rope_dims": 32}, "rope_dims"), ({"num_tokens": -1}, "num_tokens"), ({"num_slots": 0}, "num_slots"),
     ({"kv": 0}, "kv is null"), ({"cache": 8}, "16-byte aligned"), ({"rope_dims": None}, "rope_dims is required"),
     ({"num_slots": None}, "num_slots is required"), ({"format": "fp4"}, "format")],
)
def test_mla_cache_write_bad_arguments(chord, device_addresses, over, word):
    assert word in raises_invalid(chord.mla_cache_write, **_mla_write_args(device_addresses, **over))


def test_mla_cache_write_of_zero_tokens_is_a_no_op(chord):
    assert chord.mla_cache_write(0, 0, 0, "bf16", 0, num_tokens=0, num_slots=1) is None


def test_mla_cache_write_without_a_driver_reports_it(chord, info, device_addresses):
    if info["driver_available"]:
        pytest.skip("a driver is present: a complete call would launch")
    with pytest.raises(chord.ChordError) as excinfo:
        chord.mla_cache_write(**_mla_write_args(device_addresses))
    assert excinfo.value.status in {chord.Status.NO_DRIVER, chord.Status.NO_DEVICE}


def _mla_decode_args(device_addresses, **over):
    q, cache, indices, out, lse = device_addresses(5)
    args = dict(q=q, cache=cache, indices=indices, softmax_scale=0.0417, num_tokens=4, num_heads=16, topk=2048,
                num_slots=4096, out=out, lse=lse)
    args.update(over)
    return args


@pytest.mark.parametrize(
    "over, word",
    [({"num_heads": 12}, "num_heads must be a multiple of 8"), ({"topk": 100}, "topk"), ({"lse": 0}, "lse is null"),
     ({"q": 8}, "q must be 16-byte aligned"), ({"softmax_scale": "x"}, "softmax_scale must be a float"),
     ({"num_slots": None}, "num_slots is required"), ({"format": "fp4"}, "format"), ({"rope_dims": 32}, "rope_dims")],
)
def test_sparse_mla_decode_raw_bad_arguments(chord, device_addresses, over, word):
    assert word in raises_invalid(chord.sparse_mla_decode, **_mla_decode_args(device_addresses, **over))


def test_sparse_mla_decode_raw_without_a_driver_reports_it(chord, info, device_addresses):
    if info["driver_available"]:
        pytest.skip("a driver is present: a complete call would launch")
    with pytest.raises(chord.ChordError) as excinfo:
        chord.sparse_mla_decode(**_mla_decode_args(device_addresses))
    assert excinfo.value.status in {chord.Status.NO_DRIVER, chord.Status.NO_DEVICE}
