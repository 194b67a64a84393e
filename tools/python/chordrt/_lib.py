"""TEMPORARY: the C mirror (ctypes structs and prototypes) of the families not yet in a module of their own
(warp decode, grouped, indexed, sparse MLA, DSA), registered with _core like a family module's. Each
family's helper moves its part into ``_<family>.py``; this file then disappears.
"""

from __future__ import annotations

import ctypes
import enum

from ._core import STATUS_T, STREAM_T, SizedStruct, prototype

_status_t = STATUS_T
_ptr = STREAM_T  # device pointers and CUstream: plain integers from Python


class WeightFormat(enum.IntEnum):
    """chord_weight_format_t."""

    INT4_GROUP32 = 0
    MXFP8 = 1


class WarpDecodeMoeArgs(SizedStruct):
    """chord_warp_decode_moe_args_t (pointer fields are raw device addresses)."""

    _c_name_ = "chord_warp_decode_moe_args_t"
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


class GroupedWeight(SizedStruct):
    """chord_grouped_weight_t: a weight packed for one grouped mode (filled by chord_grouped_pack)."""

    _c_name_ = "chord_grouped_weight_t"
    _fields_ = _w4a16_weight_fields("mode")


class GroupedPackArgs(SizedStruct):
    """chord_grouped_pack_args_t."""

    _c_name_ = "chord_grouped_pack_args_t"
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


class IndexedWeight(SizedStruct):
    """chord_indexed_weight_t: a weight packed for one indexed layout (filled by chord_indexed_pack)."""

    _c_name_ = "chord_indexed_weight_t"
    _fields_ = _w4a16_weight_fields("layout")


class IndexedPackArgs(SizedStruct):
    """chord_indexed_pack_args_t."""

    _c_name_ = "chord_indexed_pack_args_t"
    _fields_ = _w4a16_pack_args_fields("layout")


class IndexedArgs(SizedStruct):
    """chord_indexed_args_t (pointer fields are raw device addresses)."""

    _c_name_ = "chord_indexed_args_t"
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


class MlaCacheWriteArgs(SizedStruct):
    """chord_mla_cache_write_args_t (pointer fields are raw device addresses)."""

    _c_name_ = "chord_mla_cache_write_args_t"
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


class SparseMlaDecodeArgs(SizedStruct):
    """chord_sparse_mla_decode_args_t (pointer fields are raw device addresses)."""

    _c_name_ = "chord_sparse_mla_decode_args_t"
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


class IndexerCacheWriteArgs(SizedStruct):
    """chord_indexer_cache_write_args_t (pointer fields are raw device addresses)."""

    _c_name_ = "chord_indexer_cache_write_args_t"
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("num_tokens", ctypes.c_int64),
        ("k", ctypes.c_void_p),  # BF16 [num_tokens, 128]
        ("slot_mapping", ctypes.c_void_p),  # const int64_t* [num_tokens]
        ("cache", ctypes.c_void_p),  # [num_pages] pages of chord_indexer_cache_page_bytes(page_size)
        ("page_size", ctypes.c_int32),
        ("num_pages", ctypes.c_int64),
    ]


class DsaIndexerArgs(SizedStruct):
    """chord_dsa_indexer_args_t (pointer fields are raw device addresses)."""

    _c_name_ = "chord_dsa_indexer_args_t"
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


class DsaTopkArgs(SizedStruct):
    """chord_dsa_topk_args_t (pointer fields are raw device addresses)."""

    _c_name_ = "chord_dsa_topk_args_t"
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


#: name -> (restype, argtypes), in chordrt.h's order.
_FUNCTIONS = {
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
for _name, (_restype, _argtypes) in _FUNCTIONS.items():
    prototype(_name, _restype, _argtypes)
