"""The runtime-level calls of chordrt.h: versions, runtime info and prewarm."""

from __future__ import annotations

import ctypes
from typing import Tuple

from ._core import STATUS_T, SizedStruct, c_string, check, lib, prototype

__all__ = ["RuntimeInfo", "PrewarmSummary", "version", "abi_version", "runtime_info", "prewarm_model"]


class RuntimeInfo(SizedStruct):
    """chord_runtime_info_t."""

    _c_name_ = "chord_runtime_info_t"
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("driver_available", ctypes.c_int),
        ("driver_version", ctypes.c_int),
        ("device_count", ctypes.c_int),
        ("nvrtc_major", ctypes.c_int),
        ("nvrtc_minor", ctypes.c_int),
        ("cache_memory_only", ctypes.c_int),
        ("cache_dir", ctypes.c_char_p),
        ("kernels_compiled", ctypes.c_uint64),
        ("disk_hits", ctypes.c_uint64),
        ("kernels_loaded", ctypes.c_uint64),
    ]


class PrewarmSummary(SizedStruct):
    """chord_prewarm_summary_t."""

    _c_name_ = "chord_prewarm_summary_t"
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("compiled", ctypes.c_int),
        ("cached", ctypes.c_int),
        ("failed", ctypes.c_int),
        ("median_compile_ms", ctypes.c_double),
        ("max_compile_ms", ctypes.c_double),
    ]


prototype("chord_get_runtime_info", STATUS_T, [ctypes.POINTER(RuntimeInfo)])
prototype(
    "chord_prewarm_model",
    STATUS_T,
    [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(PrewarmSummary)],  # model, deployment, arch
)


def version() -> Tuple[int, int, int]:
    """chord_get_version(): (major, minor, patch)."""
    major, minor, patch = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    lib().chord_get_version(ctypes.byref(major), ctypes.byref(minor), ctypes.byref(patch))
    return (major.value, minor.value, patch.value)


def abi_version() -> int:
    """chord_abi_version()."""
    return int(lib().chord_abi_version())


def runtime_info() -> dict:
    """chord_get_runtime_info() as a dict (the struct's fields, booleans as bool, plus nvrtc_available)."""
    info = RuntimeInfo()
    check(lib().chord_get_runtime_info(ctypes.byref(info)))
    return {
        "driver_available": bool(info.driver_available),
        "driver_version": info.driver_version,
        "device_count": info.device_count,
        "nvrtc_available": info.nvrtc_major > 0,
        "nvrtc_major": info.nvrtc_major,
        "nvrtc_minor": info.nvrtc_minor,
        "cache_memory_only": bool(info.cache_memory_only),
        "cache_dir": info.cache_dir.decode("utf-8", "replace") if info.cache_dir else "",
        "kernels_compiled": info.kernels_compiled,
        "disk_hits": info.disk_hits,
        "kernels_loaded": info.kernels_loaded,
    }


def _summary_dict(s: PrewarmSummary) -> dict:
    return {
        "compiled": s.compiled,
        "cached": s.cached,
        "failed": s.failed,
        "total": s.compiled + s.cached + s.failed,
        "median_compile_ms": s.median_compile_ms,
        "max_compile_ms": s.max_compile_ms,
    }


def prewarm_model(model, deployment: str, arch: str = "sm_90a") -> dict:
    """chord_prewarm_model(): compiles into the disk cache every kernel `deployment` of `model` dispatches.

    model is a preset ("kimi-k2", "deepseek-v3") or a path to a Hugging Face config.json. Returns
    {"compiled", "cached", "failed", "total", "median_compile_ms", "max_compile_ms"}; when some kernels
    fail, raises ChordError(COMPILE_FAILED) whose ``summary`` holds that dict.
    """
    s = PrewarmSummary()
    status = lib().chord_prewarm_model(
        c_string(model, "model"), c_string(deployment, "deployment"), c_string(arch, "arch"), ctypes.byref(s)
    )
    summary = _summary_dict(s)
    check(status, summary)
    return summary
