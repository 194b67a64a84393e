"""TEMPORARY: the C mirror (ctypes structs and prototypes) of the families not yet in a module of their own
(warp decode, sparse MLA, DSA), registered with _core like a family module's. Each
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
        ("workspace", ctypes.c_void_p),
        ("workspace_bytes", ctypes.c_size_t),
        ("output", ctypes.c_void_p),
        ("expert_map", ctypes.c_void_p),
        ("num_global_experts", ctypes.c_int32),
    ]
    _min_field_ = "output"


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
