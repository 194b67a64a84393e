"""Loading libchordrt and declaring its C ABI (a line-by-line mirror of runtime/include/chordrt/chordrt.h).

Nothing here needs torch or a GPU. The library is loaded on first use, not at import, so that
``import chordrt`` always succeeds; a missing library raises :class:`LibraryNotFoundError` (an
``OSError`` and a :class:`ChordError`) that lists every place that was tried.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import enum
import os
import threading
from pathlib import Path
from typing import Mapping, Optional

#: The ABI this binding mirrors (chordrt.h's CHORD_ABI_VERSION).
ABI_VERSION = 1
#: Environment variable naming the shared library to load (a path).
ENV_LIBRARY = "CHORDRT_LIBRARY"
#: The repository root when the package is used from a source checkout (tools/python/chordrt/_lib.py).
REPO_ROOT = Path(__file__).resolve().parents[3]


class Status(enum.IntEnum):
    """chord_status_t."""

    SUCCESS = 0
    INVALID_ARGUMENT = 1
    UNSUPPORTED = 2
    NO_DRIVER = 3
    NO_DEVICE = 4
    NVRTC_UNAVAILABLE = 5
    COMPILE_FAILED = 6
    CAPTURE_MISS = 7
    STRICT_MISS = 8
    CUDA = 9
    CACHE = 10
    INTERNAL = 11

    @property
    def c_name(self) -> str:
        """The C enumerator's name, e.g. ``CHORD_ERROR_INVALID_ARGUMENT``."""
        return "CHORD_SUCCESS" if self is Status.SUCCESS else f"CHORD_ERROR_{self.name}"


class ChordError(RuntimeError):
    """A failing chordrt call.

    ``status`` is a :class:`Status` (a plain int for values this binding does not know), ``message`` the
    library's ``chord_last_error()`` text (or the binding's own message for checks done in Python).
    ``summary`` carries the partial prewarm summary when prewarm_model() fails to compile some kernels.
    """

    def __init__(self, status, message: str = "", summary: Optional[dict] = None):
        try:
            status = Status(int(status))
        except ValueError:
            status = int(status)
        self.status = status
        self.message = message
        self.summary = summary
        name = status.c_name if isinstance(status, Status) else f"chord status {status}"
        super().__init__(f"{name}: {message}" if message else name)

    def __reduce__(self):
        return (type(self), (int(self.status), self.message, self.summary))


class LibraryNotFoundError(ChordError, OSError):
    """libchordrt.so could not be found or loaded; the message lists what was tried."""

    def __init__(self, message: str):
        super().__init__(Status.UNSUPPORTED, message)

    def __str__(self) -> str:
        return self.message

    def __reduce__(self):
        return (type(self), (self.message,))


# ---- struct mirrors --------------------------------------------------------------------------------


class _SizedStruct(ctypes.Structure):
    """An options struct whose leading ``size_t struct_size`` is set to sizeof(struct) unless given."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not args and "struct_size" not in kwargs:
            self.struct_size = ctypes.sizeof(self)


class RuntimeInfo(_SizedStruct):
    """chord_runtime_info_t."""

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


class PrewarmSummary(_SizedStruct):
    """chord_prewarm_summary_t."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("compiled", ctypes.c_int),
        ("cached", ctypes.c_int),
        ("failed", ctypes.c_int),
        ("median_compile_ms", ctypes.c_double),
        ("max_compile_ms", ctypes.c_double),
    ]


class MoeAlignOptions(_SizedStruct):
    """chord_moe_align_options_t (pointer fields are raw device addresses)."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("expert_map", ctypes.c_void_p),  # const int32_t*
    ]


class MoeCombineOptions(_SizedStruct):
    """chord_moe_combine_options_t (pointer fields are raw device addresses)."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("topk_ids", ctypes.c_void_p),  # const int32_t*
        ("expert_map", ctypes.c_void_p),  # const int32_t*
        ("num_experts", ctypes.c_int32),
    ]


class WeightFormat(enum.IntEnum):
    """chord_weight_format_t."""

    INT4_GROUP32 = 0
    MXFP8 = 1


class WarpDecodeMoeArgs(_SizedStruct):
    """chord_warp_decode_moe_args_t (pointer fields are raw device addresses)."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("format", ctypes.c_int32),  # a chord_weight_format_t
        ("num_tokens", ctypes.c_int64),
        ("hidden", ctypes.c_int32),
        ("intermediate", ctypes.c_int32),
        ("num_experts", ctypes.c_int32),
        ("top_k", ctypes.c_int32),
        ("x", ctypes.c_void_p),
        ("topk_ids", ctypes.c_void_p),
        ("topk_weights", ctypes.c_void_p),
        ("w13", ctypes.c_void_p),
        ("w13_scale", ctypes.c_void_p),
        ("w2", ctypes.c_void_p),
        ("w2_scale", ctypes.c_void_p),
        ("expert_map", ctypes.c_void_p),
        ("num_global_experts", ctypes.c_int32),
        ("workspace", ctypes.c_void_p),
        ("workspace_bytes", ctypes.c_size_t),
        ("output", ctypes.c_void_p),
    ]


class GroupedMode(enum.IntEnum):
    """chord_grouped_mode_t."""

    CONTIGUOUS = 0  # prefill: rows concatenated per expert, padded to 128
    MASKED = 1  # decode: a fixed row budget per expert, counts on the device


def _w4a16_weight_fields(kind):
    """The fields of chord_grouped_weight_t / chord_indexed_weight_t (kind: "mode" or "layout")."""
    return [
        ("struct_size", ctypes.c_size_t),
        (kind, ctypes.c_int32),
        ("num_experts", ctypes.c_int32),
        ("n", ctypes.c_int32),
        ("k", ctypes.c_int32),
        ("packed", ctypes.c_void_p),
        ("scale", ctypes.c_void_p),
        ("tag", ctypes.c_uint64),
    ]


def _w4a16_pack_args_fields(kind):
    """The fields of chord_grouped_pack_args_t / chord_indexed_pack_args_t (pointers: raw addresses)."""
    return [
        ("struct_size", ctypes.c_size_t),
        (kind, ctypes.c_int32),
        ("num_experts", ctypes.c_int32),
        ("n", ctypes.c_int32),
        ("k", ctypes.c_int32),
        ("bits", ctypes.c_int32),
        ("group_size", ctypes.c_int32),
        ("symmetric", ctypes.c_int32),
        ("scale_is_bf16", ctypes.c_int32),
        ("weight_packed", ctypes.c_void_p),  # int32 [E, N, K/8]
        ("weight_scale", ctypes.c_void_p),  # BF16 [E, N, K/32]
        ("packed", ctypes.c_void_p),
        ("packed_bytes", ctypes.c_size_t),
        ("scale", ctypes.c_void_p),
        ("scale_bytes", ctypes.c_size_t),
    ]


class GroupedWeight(_SizedStruct):
    """chord_grouped_weight_t: a weight packed for one grouped mode (filled by chord_grouped_pack)."""

    _fields_ = _w4a16_weight_fields("mode")


class GroupedPackArgs(_SizedStruct):
    """chord_grouped_pack_args_t."""

    _fields_ = _w4a16_pack_args_fields("mode")


class IndexedLayout(enum.IntEnum):
    """chord_indexed_layout_t."""

    WGMMA = 0  # prefill / mixed: the WGMMA kernel
    MMA = 1  # decode: the mma.sync swap-AB kernel, block_m 8..32


class IndexedProfile(enum.IntEnum):
    """chord_indexed_profile_t."""

    AUTO = 0
    EP = 1
    TP = 2


class IndexedWeight(_SizedStruct):
    """chord_indexed_weight_t: a weight packed for one indexed layout (filled by chord_indexed_pack)."""

    _fields_ = _w4a16_weight_fields("layout")


class IndexedPackArgs(_SizedStruct):
    """chord_indexed_pack_args_t."""

    _fields_ = _w4a16_pack_args_fields("layout")


class IndexedArgs(_SizedStruct):
    """chord_indexed_args_t (pointer fields are raw device addresses)."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("a", ctypes.c_void_p),
        ("num_tokens", ctypes.c_int64),
        ("top_k", ctypes.c_int32),
        ("block_m", ctypes.c_int32),
        ("weight", ctypes.POINTER(IndexedWeight)),
        ("sorted_token_ids", ctypes.c_void_p),
        ("sorted_token_ids_capacity", ctypes.c_int64),
        ("expert_ids", ctypes.c_void_p),
        ("expert_ids_capacity", ctypes.c_int64),
        ("num_tokens_post_padded", ctypes.c_void_p),
        ("validate", ctypes.c_int32),
        ("out", ctypes.c_void_p),
    ]


class MlaCacheFormat(enum.IntEnum):
    """chord_mla_cache_format_t."""

    FP8_DS_MLA = 0  # 512 E4M3 + 4 FP32 scales + rope_dims BF16 per token (656 / 528 bytes)
    BF16 = 1  # 512 + rope_dims BF16 per token (1152 / 1024 bytes)


class MlaCacheWriteArgs(_SizedStruct):
    """chord_mla_cache_write_args_t (pointer fields are raw device addresses)."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("format", ctypes.c_int32),  # a chord_mla_cache_format_t
        ("rope_dims", ctypes.c_int32),
        ("num_tokens", ctypes.c_int64),
        ("kv", ctypes.c_void_p),  # BF16 [num_tokens, 512 + rope_dims]
        ("slot_mapping", ctypes.c_void_p),  # const int64_t* [num_tokens]
        ("cache", ctypes.c_void_p),
        ("num_slots", ctypes.c_int64),
    ]


class SparseMlaDecodeArgs(_SizedStruct):
    """chord_sparse_mla_decode_args_t (pointer fields are raw device addresses)."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("format", ctypes.c_int32),  # the cache's chord_mla_cache_format_t
        ("num_heads", ctypes.c_int32),
        ("rope_dims", ctypes.c_int32),
        ("topk", ctypes.c_int32),
        ("num_tokens", ctypes.c_int64),
        ("q", ctypes.c_void_p),  # BF16 [T, h, 512 + rope_dims]
        ("cache", ctypes.c_void_p),
        ("num_slots", ctypes.c_int64),
        ("indices", ctypes.c_void_p),  # const int32_t* [T, topk]
        ("topk_length", ctypes.c_void_p),  # optional const int32_t* [T]
        ("attn_sink", ctypes.c_void_p),  # optional const float* [h]
        ("softmax_scale", ctypes.c_float),
        ("out", ctypes.c_void_p),  # BF16 [T, h, 512]
        ("lse", ctypes.c_void_p),  # float* [T, h]
        ("workspace", ctypes.c_void_p),
        ("workspace_bytes", ctypes.c_size_t),
    ]


class IndexerCacheWriteArgs(_SizedStruct):
    """chord_indexer_cache_write_args_t (pointer fields are raw device addresses)."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("num_tokens", ctypes.c_int64),
        ("k", ctypes.c_void_p),  # BF16 [num_tokens, 128]
        ("slot_mapping", ctypes.c_void_p),  # const int64_t* [num_tokens]
        ("cache", ctypes.c_void_p),  # [num_pages] pages of chord_indexer_cache_page_bytes(page_size)
        ("page_size", ctypes.c_int32),
        ("num_pages", ctypes.c_int64),
    ]


class DsaIndexerArgs(_SizedStruct):
    """chord_dsa_indexer_args_t (pointer fields are raw device addresses)."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("num_heads", ctypes.c_int32),
        ("num_tokens", ctypes.c_int64),
        ("q", ctypes.c_void_p),  # E4M3 [T, H, 128]
        ("weights", ctypes.c_void_p),  # const float* [T, H]
        ("cache", ctypes.c_void_p),
        ("page_size", ctypes.c_int32),
        ("num_pages", ctypes.c_int64),
        ("block_table", ctypes.c_void_p),  # const int32_t* [T, max_pages_per_seq]
        ("max_pages_per_seq", ctypes.c_int32),
        ("context_lens", ctypes.c_void_p),  # const int32_t* [T]
        ("max_context", ctypes.c_int32),
        ("logits", ctypes.c_void_p),  # float* [T, max_context]
    ]


class DsaTopkArgs(_SizedStruct):
    """chord_dsa_topk_args_t (pointer fields are raw device addresses)."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("num_tokens", ctypes.c_int64),
        ("topk", ctypes.c_int32),
        ("logits", ctypes.c_void_p),  # const float* [T, max_context]
        ("max_context", ctypes.c_int32),
        ("context_lens", ctypes.c_void_p),  # const int32_t* [T]
        ("block_table", ctypes.c_void_p),  # optional const int32_t* [T, max_pages_per_seq]
        ("max_pages_per_seq", ctypes.c_int32),
        ("page_size", ctypes.c_int32),
        ("indices", ctypes.c_void_p),  # int32_t* [T, topk]
    ]


#: Every struct of chordrt.h: C name -> ctypes mirror.
STRUCTS = {
    "chord_runtime_info_t": RuntimeInfo,
    "chord_prewarm_summary_t": PrewarmSummary,
    "chord_moe_align_options_t": MoeAlignOptions,
    "chord_moe_combine_options_t": MoeCombineOptions,
    "chord_warp_decode_moe_args_t": WarpDecodeMoeArgs,
    "chord_grouped_weight_t": GroupedWeight,
    "chord_grouped_pack_args_t": GroupedPackArgs,
    "chord_indexed_weight_t": IndexedWeight,
    "chord_indexed_pack_args_t": IndexedPackArgs,
    "chord_indexed_args_t": IndexedArgs,
    "chord_mla_cache_write_args_t": MlaCacheWriteArgs,
    "chord_sparse_mla_decode_args_t": SparseMlaDecodeArgs,
    "chord_indexer_cache_write_args_t": IndexerCacheWriteArgs,
    "chord_dsa_indexer_args_t": DsaIndexerArgs,
    "chord_dsa_topk_args_t": DsaTopkArgs,
}

# ---- function declarations -------------------------------------------------------------------------

_status_t = ctypes.c_int  # chord_status_t (a C enum: int)
_ptr = ctypes.c_void_p  # device pointers and CUstream: plain integers from Python
_c_int_p = ctypes.POINTER(ctypes.c_int)

#: name -> (restype, argtypes), in chordrt.h's order.
FUNCTIONS = {
    "chord_status_string": (ctypes.c_char_p, [_status_t]),
    "chord_last_error": (ctypes.c_char_p, []),
    "chord_get_version": (None, [_c_int_p, _c_int_p, _c_int_p]),
    "chord_abi_version": (ctypes.c_int, []),
    "chord_get_runtime_info": (_status_t, [ctypes.POINTER(RuntimeInfo)]),
    "chord_prewarm_model": (
        _status_t,
        [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(PrewarmSummary)],
    ),
    "chord_moe_align_sorted_capacity": (
        ctypes.c_int64,
        [ctypes.c_int64, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32],
    ),
    "chord_moe_align": (
        _status_t,
        [
            _ptr,  # const int32_t* topk_ids
            ctypes.c_int64,  # num_tokens
            ctypes.c_int32,  # top_k
            ctypes.c_int32,  # num_experts
            ctypes.c_int32,  # block_size
            _ptr,  # int32_t* sorted_token_ids
            ctypes.c_int64,  # sorted_token_ids_capacity
            _ptr,  # int32_t* expert_ids
            ctypes.c_int64,  # expert_ids_capacity
            _ptr,  # int32_t* num_tokens_post_padded
            ctypes.POINTER(MoeAlignOptions),  # options (NULL = defaults)
            _ptr,  # CUstream
        ],
    ),
    "chord_silu_and_mul": (
        _status_t,
        [_ptr, _ptr, ctypes.c_int64, ctypes.c_int64, _ptr],  # input, output, rows, intermediate, stream
    ),
    "chord_moe_combine": (
        _status_t,
        [
            _ptr,  # const void* expert_rows
            _ptr,  # const float* topk_weights
            _ptr,  # void* output
            ctypes.c_int64,  # num_tokens
            ctypes.c_int32,  # top_k
            ctypes.c_int64,  # hidden
            ctypes.POINTER(MoeCombineOptions),  # options (NULL = defaults)
            _ptr,  # CUstream
        ],
    ),
    "chord_warp_decode_moe_workspace_size": (
        ctypes.c_size_t,
        [ctypes.c_int64, ctypes.c_int32, ctypes.c_int32],  # num_tokens, top_k, intermediate
    ),
    "chord_warp_decode_moe": (_status_t, [ctypes.POINTER(WarpDecodeMoeArgs), _ptr]),  # args, CUstream
    "chord_grouped_weight_sizes": (
        _status_t,
        [
            ctypes.c_int32,  # mode
            ctypes.c_int32,  # num_experts
            ctypes.c_int32,  # n
            ctypes.c_int32,  # k
            ctypes.POINTER(ctypes.c_size_t),  # size_t* packed_bytes
            ctypes.POINTER(ctypes.c_size_t),  # size_t* scale_bytes
        ],
    ),
    "chord_grouped_pack": (
        _status_t,
        [ctypes.POINTER(GroupedPackArgs), ctypes.POINTER(GroupedWeight), _ptr],  # args, weight (out), CUstream
    ),
    "chord_grouped_contiguous": (
        _status_t,
        [
            _ptr,  # const void* a
            ctypes.c_int64,  # m
            ctypes.POINTER(GroupedWeight),  # const chord_grouped_weight_t* weight
            _ptr,  # const int32_t* m_indices
            _ptr,  # void* out
            _ptr,  # CUstream
        ],
    ),
    "chord_grouped_masked": (
        _status_t,
        [
            _ptr,  # const void* a
            ctypes.c_int32,  # max_m
            ctypes.POINTER(GroupedWeight),  # const chord_grouped_weight_t* weight
            _ptr,  # const int32_t* masked_m
            ctypes.c_int32,  # expected_m
            _ptr,  # void* out
            _ptr,  # CUstream
        ],
    ),
    "chord_indexed_weight_sizes": (
        _status_t,
        [
            ctypes.c_int32,  # layout
            ctypes.c_int32,  # num_experts
            ctypes.c_int32,  # n
            ctypes.c_int32,  # k
            ctypes.POINTER(ctypes.c_size_t),  # size_t* packed_bytes
            ctypes.POINTER(ctypes.c_size_t),  # size_t* scale_bytes
        ],
    ),
    "chord_indexed_pack": (
        _status_t,
        [ctypes.POINTER(IndexedPackArgs), ctypes.POINTER(IndexedWeight), _ptr],  # args, weight (out), CUstream
    ),
    "chord_indexed_block_m": (
        _status_t,
        [
            ctypes.c_int32,  # layout
            ctypes.c_int32,  # num_experts
            ctypes.c_int32,  # n
            ctypes.c_int32,  # k
            ctypes.c_int64,  # routed_rows
            ctypes.c_int32,  # profile
            ctypes.POINTER(ctypes.c_int32),  # int32_t* block_m
        ],
    ),
    "chord_indexed_gemm": (_status_t, [ctypes.POINTER(IndexedArgs), _ptr]),  # args, CUstream
    "chord_mla_cache_record_bytes": (ctypes.c_size_t, [ctypes.c_int32, ctypes.c_int32]),  # format, rope_dims
    "chord_mla_cache_write": (_status_t, [ctypes.POINTER(MlaCacheWriteArgs), _ptr]),  # args, CUstream
    "chord_sparse_mla_decode_workspace_size": (
        _status_t,
        [ctypes.POINTER(SparseMlaDecodeArgs), ctypes.POINTER(ctypes.c_size_t)],  # args, size_t* bytes
    ),
    "chord_sparse_mla_decode": (_status_t, [ctypes.POINTER(SparseMlaDecodeArgs), _ptr]),  # args, CUstream
    "chord_indexer_cache_page_bytes": (ctypes.c_size_t, [ctypes.c_int32]),  # page_size
    "chord_indexer_cache_write": (_status_t, [ctypes.POINTER(IndexerCacheWriteArgs), _ptr]),  # args, CUstream
    "chord_dsa_indexer_logits": (_status_t, [ctypes.POINTER(DsaIndexerArgs), _ptr]),  # args, CUstream
    "chord_dsa_topk": (_status_t, [ctypes.POINTER(DsaTopkArgs), _ptr]),  # args, CUstream
}

# ---- finding and loading the library ---------------------------------------------------------------


def library_candidates(environ: Optional[Mapping[str, str]] = None, repo_root: Optional[Path] = None) -> list:
    """Where the library is looked for, in order.

    ``$CHORDRT_LIBRARY`` when set (and then nothing else); otherwise the repository's build trees
    (``<repo>/build*/libchordrt.so``, most recently built first), then ``ctypes.util.find_library``.
    """
    environ = os.environ if environ is None else environ
    explicit = environ.get(ENV_LIBRARY)
    if explicit:
        return [explicit]
    root = REPO_ROOT if repo_root is None else Path(repo_root)
    builds = []
    for p in root.glob("build*/libchordrt.so"):
        try:
            builds.append((p.stat().st_mtime, str(p)))
        except OSError:  # a dangling symlink
            continue
    out = [path for _, path in sorted(builds, key=lambda t: (-t[0], t[1]))]
    found = ctypes.util.find_library("chordrt")
    if found and found not in out:
        out.append(found)
    return out


_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
_lib_path: Optional[str] = None


def _declare(cdll: ctypes.CDLL) -> None:
    for name, (restype, argtypes) in FUNCTIONS.items():
        fn = getattr(cdll, name)  # AttributeError if the library lacks it
        fn.restype = restype
        fn.argtypes = argtypes


def _load() -> ctypes.CDLL:
    global _lib, _lib_path
    tried = []
    candidates = library_candidates()
    for path in candidates:
        try:
            cdll = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path}: {e}")
            continue
        try:
            _declare(cdll)
        except AttributeError as e:
            tried.append(f"{path}: not a chordrt library ({e})")
            continue
        abi = cdll.chord_abi_version()
        if abi != ABI_VERSION:
            tried.append(f"{path}: ABI version {abi}, this binding needs {ABI_VERSION}")
            continue
        _lib, _lib_path = cdll, path
        return cdll
    if os.environ.get(ENV_LIBRARY):
        how = f"${ENV_LIBRARY} is set"
    else:
        how = (
            f"${ENV_LIBRARY} is unset; searched {REPO_ROOT}/build*/libchordrt.so and "
            f"ctypes.util.find_library('chordrt') ({ctypes.util.find_library('chordrt') or 'nothing found'})"
        )
    lines = "\n  ".join(tried) if tried else "(no candidate found)"
    raise LibraryNotFoundError(
        f"cannot load libchordrt ({how}); tried:\n  {lines}\n"
        f"Build it (cmake --build <build> --target chordrt) or set {ENV_LIBRARY} to its path."
    )


def lib() -> ctypes.CDLL:
    """The loaded library, every function of chordrt.h declared (argtypes/restype)."""
    if _lib is not None:
        return _lib
    with _lock:
        return _lib if _lib is not None else _load()


def library_path() -> str:
    """The path the library was loaded from."""
    lib()
    return _lib_path


def last_error() -> str:
    """chord_last_error(): the message of this thread's last failing call ("" if none)."""
    raw = lib().chord_last_error()
    return raw.decode("utf-8", "replace") if raw else ""


def check(status: int, summary: Optional[dict] = None) -> None:
    """Raises ChordError(status, chord_last_error()) unless status is CHORD_SUCCESS."""
    if status != Status.SUCCESS:
        raise ChordError(status, last_error(), summary)


def status_string(status: int) -> str:
    """chord_status_string()."""
    raw = lib().chord_status_string(int(status))
    return raw.decode("utf-8", "replace") if raw else ""
