"""Sparse MLA decode (DeepSeek-V3.2 / Mistral Large 4 attention) and its latent cache writer (chordrt.h's
"Sparse MLA decode" section).

A cache is a flat array of per-token records (chordrt.mla_cache_record_bytes(format, rope_dims) bytes
each); a paged cache [num_pages, page_size, record] is the same array, slot = page * page_size + offset.
Any tensor dtype may hold it: the record count is its byte size divided by the record size.

Each op has a raw-pointer layer (``<op>_raw``: integer device addresses, explicit sizes, a CUstream int;
it fills the C args struct and makes the one C call) and a torch layer over it; the public ``<op>`` takes
either.
"""

from __future__ import annotations

import ctypes
import enum
import numbers
import sys
from typing import Optional, Tuple

from ._core import (
    STATUS_T,
    STREAM_T,
    SizedStruct,
    TorchCall,
    address,
    check,
    check_int,
    enum_value,
    invalid,
    lib,
    prototype,
    raw_stream,
    size,
    torch_module_of,
)

__all__ = [
    "MlaCacheFormat",
    "MlaCacheWriteArgs",
    "SparseMlaDecodeArgs",
    "mla_cache_record_bytes",
    "mla_cache_write",
    "mla_cache_write_raw",
    "sparse_mla_decode_workspace_size",
    "sparse_mla_decode",
    "sparse_mla_decode_raw",
]

# ---- the C mirror -----------------------------------------------------------------------------------


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
    _min_field_ = "lse"
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


prototype("chord_mla_cache_record_bytes", ctypes.c_size_t, [ctypes.c_int32, ctypes.c_int32])  # format, rope_dims
prototype("chord_mla_cache_write", STATUS_T, [ctypes.POINTER(MlaCacheWriteArgs), STREAM_T])
prototype(
    "chord_sparse_mla_decode_workspace_size",
    STATUS_T,
    [ctypes.POINTER(SparseMlaDecodeArgs), ctypes.POINTER(ctypes.c_size_t)],  # args, size_t* bytes
)
prototype("chord_sparse_mla_decode", STATUS_T, [ctypes.POINTER(SparseMlaDecodeArgs), STREAM_T])

LATENT_DIMS = 512
#: q / kv last dimension -> rope_dims
_ROPE_OF_DIMS = {LATENT_DIMS + 64: 64, LATENT_DIMS: 0}


def _format(value, op: str) -> MlaCacheFormat:
    try:
        return enum_value(MlaCacheFormat, value, "format")
    except ValueError as e:
        raise invalid(op, f"format: {e}") from None


def mla_cache_record_bytes(format, rope_dims: int = 64) -> int:
    """chord_mla_cache_record_bytes(): bytes of one token's record (656 / 528 for fp8_ds_mla with 64 / 0
    RoPE dims, 1152 / 1024 for bf16); 0 for a rope_dims other than 0 or 64."""
    op = "mla_cache_record_bytes"
    return int(lib().chord_mla_cache_record_bytes(int(_format(format, op)), check_int(rope_dims, op, "rope_dims")))


def _rope_dims_of(op: str, name: str, t, given) -> int:
    last = t.shape[-1] if t.dim() else None
    if last not in _ROPE_OF_DIMS:
        raise invalid(op, f"{name}'s last dimension must be 576 (512 latent + 64 RoPE) or 512 (NoPE), got shape "
                           f"{tuple(t.shape)}")
    inferred = _ROPE_OF_DIMS[last]
    if given is not None and check_int(given, op, "rope_dims") != inferred:
        raise invalid(op, f"rope_dims={given} disagrees with {name} of shape {tuple(t.shape)}")
    return inferred


def _cache_slots(call: TorchCall, cache, record: int, fmt: MlaCacheFormat, rope_dims: int) -> int:
    """The records a torch cache holds (checked: CUDA, contiguous, a whole number of records)."""
    torch, op = call.torch, call.op
    if not isinstance(cache, torch.Tensor):
        raise invalid(op, f"cache must be a torch.Tensor like the other arguments, got {type(cache).__name__}")
    call.tensor(cache, "cache", cache.dtype)
    nbytes = cache.numel() * cache.element_size()
    if nbytes % record != 0:
        raise invalid(op, f"cache holds {nbytes} bytes (shape {tuple(cache.shape)}, {cache.dtype}), not a whole "
                           f"number of {record}-byte {fmt.name.lower()} records (rope_dims {rope_dims})")
    return nbytes // record


def mla_cache_write(kv, slot_mapping, cache, format="fp8_ds_mla", rope_dims: Optional[int] = None, stream=None, *,
                    num_tokens: Optional[int] = None, num_slots: Optional[int] = None):
    """chord_mla_cache_write(): row t of kv goes to record slot_mapping[t] of cache (quantized for
    fp8_ds_mla: per 128-value tile scale = max(amax / 448, FLT_MIN), values RN(x / scale) as E4M3, RoPE
    kept BF16; copied for bf16). Slots of -1 or outside the cache are skipped.

    torch: kv bf16 [T, 576] (rope_dims 64) or [T, 512] (NoPE; rope_dims inferred from the last
    dimension); slot_mapping int64 [T]; cache any dtype, contiguous, a whole number of records (e.g.
    uint8 [num_pages, page_size, record_bytes]). Returns cache.
    Raw pointers: rope_dims, num_tokens and num_slots must be given; returns None.
    """
    op = "mla_cache_write"
    fmt = _format(format, op)
    torch = torch_module_of(kv, slot_mapping, cache)
    if torch is None:
        if rope_dims is None:
            raise invalid(op, "rope_dims is required when passing raw device pointers")
        mla_cache_write_raw(kv, slot_mapping, cache, fmt, rope_dims, num_tokens, num_slots, stream)
        return None

    call = TorchCall(torch, op, stream)
    call.tensor(kv, "kv", torch.bfloat16, ndim=2)
    rope = _rope_dims_of(op, "kv", kv, rope_dims)
    rows = kv.shape[0]
    if num_tokens is not None and num_tokens != rows:
        raise invalid(op, f"num_tokens={num_tokens} disagrees with kv of shape {tuple(kv.shape)}")
    call.tensor(slot_mapping, "slot_mapping", torch.int64, shape=(rows,))
    slots = _cache_slots(call, cache, mla_cache_record_bytes(fmt, rope), fmt, rope)
    if num_slots is not None and num_slots != slots:
        raise invalid(op, f"num_slots={num_slots} disagrees with the cache's {slots} records")
    with call.guard():
        mla_cache_write_raw(kv.data_ptr(), slot_mapping.data_ptr(), cache.data_ptr(), fmt, rope, rows, slots,
                            call.stream())
    return cache


def mla_cache_write_raw(kv, slot_mapping, cache, format, rope_dims: int, num_tokens: int, num_slots: int,
                        stream=None) -> None:
    """chord_mla_cache_write() on raw device addresses (ints) and explicit sizes; stream a CUstream."""
    op = "mla_cache_write"
    args = MlaCacheWriteArgs(
        format=int(_format(format, op)),
        rope_dims=check_int(rope_dims, op, "rope_dims"),
        num_tokens=size(num_tokens, op, "num_tokens"),
        kv=address(kv, op, "kv"),
        slot_mapping=address(slot_mapping, op, "slot_mapping"),
        cache=address(cache, op, "cache"),
        num_slots=size(num_slots, op, "num_slots"),
    )
    check(lib().chord_mla_cache_write(ctypes.byref(args), raw_stream(stream)))


def _workspace_size(args: SparseMlaDecodeArgs) -> int:
    nbytes = ctypes.c_size_t()
    check(lib().chord_sparse_mla_decode_workspace_size(ctypes.byref(args), ctypes.byref(nbytes)))
    return int(nbytes.value)


def sparse_mla_decode_workspace_size(num_tokens: int, num_heads: int, topk: int, *, format="fp8_ds_mla",
                                     rope_dims: int = 64, device=None) -> int:
    """chord_sparse_mla_decode_workspace_size(): the workspace bytes a decode of these sizes needs (0 when
    the top-k is not split), for the current device or `device` (a torch device or index; torch must then
    be imported)."""
    op = "sparse_mla_decode_workspace_size"
    args = SparseMlaDecodeArgs(format=int(_format(format, op)), num_heads=check_int(num_heads, op, "num_heads"),
                               rope_dims=check_int(rope_dims, op, "rope_dims"), topk=check_int(topk, op, "topk"),
                               num_tokens=check_int(num_tokens, op, "num_tokens"))
    if device is None:
        return _workspace_size(args)
    torch = sys.modules.get("torch")
    if torch is None:
        raise invalid(op, "device is a torch device: import torch first (or leave device None)")
    with torch.cuda.device(device):
        return _workspace_size(args)


def sparse_mla_decode_raw(q, cache, indices, softmax_scale, *, num_tokens: int, num_heads: int, topk: int,
                          num_slots: int, out, lse, format="fp8_ds_mla", rope_dims: int = 64, topk_length=None,
                          attn_sink=None, workspace=None, workspace_bytes: int = 0, stream=None) -> None:
    """chord_sparse_mla_decode() on raw device addresses (ints; None = NULL) and explicit sizes; the
    workspace (sparse_mla_decode_workspace_size() bytes) is the caller's; stream a CUstream."""
    op = "sparse_mla_decode"
    if isinstance(softmax_scale, bool) or not isinstance(softmax_scale, numbers.Real):
        raise invalid(op, f"softmax_scale must be a float, got {type(softmax_scale).__name__}")
    args = SparseMlaDecodeArgs(
        format=int(_format(format, op)),
        num_heads=check_int(num_heads, op, "num_heads"),
        rope_dims=check_int(rope_dims, op, "rope_dims"),
        topk=check_int(topk, op, "topk"),
        num_tokens=size(num_tokens, op, "num_tokens"),
        q=address(q, op, "q"),
        cache=address(cache, op, "cache"),
        num_slots=size(num_slots, op, "num_slots"),
        indices=address(indices, op, "indices"),
        topk_length=address(topk_length, op, "topk_length"),
        attn_sink=address(attn_sink, op, "attn_sink"),
        softmax_scale=float(softmax_scale),
        out=address(out, op, "out"),
        lse=address(lse, op, "lse"),
        workspace=address(workspace, op, "workspace"),
        workspace_bytes=size(workspace_bytes, op, "workspace_bytes"),
    )
    check(lib().chord_sparse_mla_decode(ctypes.byref(args), raw_stream(stream)))


def sparse_mla_decode(q, cache, indices, softmax_scale, *, format="fp8_ds_mla", topk_length=None, attn_sink=None,
                      out=None, lse=None, workspace=None, stream=None, **raw_sizes) -> Tuple[object, object]:
    """chord_sparse_mla_decode(): each query token's attention over its selected cache records.

    q bf16 [T, h, 576] (rope_dims 64) or [T, h, 512] (NoPE); cache as for mla_cache_write (in `format`);
    indices int32 [T, topk] cache slots (-1 or outside the cache = invalid); topk_length optional int32
    [T] (only indices[t, :topk_length[t]] count); attn_sink optional float32 [h] (joins the softmax
    denominator only). out bf16 [T, h, 512] and lse float32 [T, h] (natural log, sink excluded; +inf and
    a zero output where a token has no valid key) are allocated when not given. workspace: any dtype,
    contiguous, at least sparse_mla_decode_workspace_size() bytes (allocated when not given and needed).
    Returns (out, lse).
    Raw pointers: the sizes of sparse_mla_decode_raw (num_tokens, num_heads, topk, num_slots, rope_dims,
    workspace_bytes) are given as keywords, out and lse are required; returns None.
    """
    op = "sparse_mla_decode"
    torch = torch_module_of(q, cache, indices, topk_length, attn_sink, out, lse, workspace)
    if torch is None:
        sparse_mla_decode_raw(q, cache, indices, softmax_scale, format=format, topk_length=topk_length,
                              attn_sink=attn_sink, out=out, lse=lse, workspace=workspace, stream=stream, **raw_sizes)
        return None
    if raw_sizes:
        raise invalid(op, f"{', '.join(sorted(raw_sizes))}: sizes come from the tensors' shapes")
    fmt = _format(format, op)
    call = TorchCall(torch, op, stream)
    call.tensor(q, "q", torch.bfloat16, ndim=3)
    rope = _rope_dims_of(op, "q", q, None)
    tokens, heads = q.shape[0], q.shape[1]
    call.tensor(indices, "indices", torch.int32, ndim=2)
    if indices.shape[0] != tokens:
        raise invalid(op, f"indices must be [T, topk] with T = {tokens} (q's), got shape {tuple(indices.shape)}")
    topk = indices.shape[1]
    slots = _cache_slots(call, cache, mla_cache_record_bytes(fmt, rope), fmt, rope)
    if topk_length is not None:
        call.tensor(topk_length, "topk_length", torch.int32, shape=(tokens,))
    if attn_sink is not None:
        call.tensor(attn_sink, "attn_sink", torch.float32, shape=(heads,))
    if out is None:
        out = torch.empty((tokens, heads, LATENT_DIMS), dtype=torch.bfloat16, device=call.device)
    call.tensor(out, "out", torch.bfloat16, shape=(tokens, heads, LATENT_DIMS))
    if lse is None:
        lse = torch.empty((tokens, heads), dtype=torch.float32, device=call.device)
    call.tensor(lse, "lse", torch.float32, shape=(tokens, heads))
    with call.guard():
        if workspace is None:
            need = sparse_mla_decode_workspace_size(tokens, heads, topk, format=fmt, rope_dims=rope)
            if need > 0:
                workspace = torch.empty(need, dtype=torch.uint8, device=call.device)
                if stream is not None:  # freed on return: not reusable before the kernel on `stream` is done
                    raw = call.stream()
                    workspace.record_stream(stream if isinstance(stream, torch.cuda.Stream)
                                            else torch.cuda.ExternalStream(raw, device=call.device))
        workspace_bytes = 0
        if workspace is not None:
            if not isinstance(workspace, torch.Tensor):
                raise invalid(op, f"workspace must be a torch.Tensor, got {type(workspace).__name__}")
            call.tensor(workspace, "workspace", workspace.dtype)
            workspace_bytes = workspace.numel() * workspace.element_size()
        sparse_mla_decode_raw(
            q.data_ptr(), cache.data_ptr(), indices.data_ptr(), softmax_scale, num_tokens=tokens, num_heads=heads,
            topk=topk, num_slots=slots, out=out.data_ptr(), lse=lse.data_ptr(), format=fmt, rope_dims=rope,
            topk_length=topk_length.data_ptr() if topk_length is not None else None,
            attn_sink=attn_sink.data_ptr() if attn_sink is not None else None,
            workspace=workspace.data_ptr() if workspace is not None else None, workspace_bytes=workspace_bytes,
            stream=call.stream())
    return out, lse
