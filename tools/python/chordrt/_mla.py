"""Sparse MLA decode (DeepSeek-V3.2 / Mistral Large 4 attention) and its latent cache writer.

A cache is a flat array of per-token records (chordrt.mla_cache_record_bytes(format, rope_dims) bytes
each); a paged cache [num_pages, page_size, record] is the same array, slot = page * page_size + offset.
Any tensor dtype may hold it: the record count is its byte size divided by the record size.
"""

from __future__ import annotations

import ctypes
import numbers
import sys
from typing import Optional, Tuple

from ._core import TorchCall, address, check, check_int, enum_value, invalid, lib, raw_stream, size, torch_module_of
from ._lib import MlaCacheFormat, MlaCacheWriteArgs, SparseMlaDecodeArgs

__all__ = ["mla_cache_record_bytes", "mla_cache_write", "sparse_mla_decode_workspace_size", "sparse_mla_decode"]

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
        args = MlaCacheWriteArgs(
            format=int(fmt),
            rope_dims=check_int(rope_dims, op, "rope_dims"),
            num_tokens=size(num_tokens, op, "num_tokens"),
            kv=address(kv, op, "kv"),
            slot_mapping=address(slot_mapping, op, "slot_mapping"),
            cache=address(cache, op, "cache"),
            num_slots=size(num_slots, op, "num_slots"),
        )
        check(lib().chord_mla_cache_write(ctypes.byref(args), raw_stream(stream)))
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
        mla_cache_write(kv.data_ptr(), slot_mapping.data_ptr(), cache.data_ptr(), fmt, rope, call.stream(),
                        num_tokens=rows, num_slots=slots)
    return cache


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


def sparse_mla_decode(q, cache, indices, softmax_scale, *, format="fp8_ds_mla", topk_length=None, attn_sink=None,
                      out=None, lse=None, workspace=None, stream=None) -> Tuple[object, object]:
    """chord_sparse_mla_decode(): each query token's attention over its selected cache records.

    q bf16 [T, h, 576] (rope_dims 64) or [T, h, 512] (NoPE); cache as for mla_cache_write (in `format`);
    indices int32 [T, topk] cache slots (-1 or outside the cache = invalid); topk_length optional int32
    [T] (only indices[t, :topk_length[t]] count); attn_sink optional float32 [h] (joins the softmax
    denominator only). out bf16 [T, h, 512] and lse float32 [T, h] (natural log, sink excluded; +inf and
    a zero output where a token has no valid key) are allocated when not given. workspace: any dtype,
    contiguous, at least sparse_mla_decode_workspace_size() bytes (allocated when not given and needed).
    Returns (out, lse). torch tensors only (raw pointers: fill a SparseMlaDecodeArgs and call
    lib().chord_sparse_mla_decode).
    """
    op = "sparse_mla_decode"
    fmt = _format(format, op)
    torch = torch_module_of(q, cache, indices, topk_length, attn_sink, out, lse, workspace)
    if torch is None:
        raise invalid(op, "takes torch tensors; with raw pointers fill a chordrt.SparseMlaDecodeArgs and call "
                           "chordrt.lib().chord_sparse_mla_decode")
    if isinstance(softmax_scale, bool) or not isinstance(softmax_scale, numbers.Real):
        raise invalid(op, f"softmax_scale must be a float, got {type(softmax_scale).__name__}")
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
    args = SparseMlaDecodeArgs(
        format=int(fmt), num_heads=heads, rope_dims=rope, topk=topk, num_tokens=tokens, q=q.data_ptr(),
        cache=cache.data_ptr(), num_slots=slots, indices=indices.data_ptr(),
        topk_length=topk_length.data_ptr() if topk_length is not None else None,
        attn_sink=attn_sink.data_ptr() if attn_sink is not None else None, softmax_scale=float(softmax_scale),
        out=out.data_ptr(), lse=lse.data_ptr())
    with call.guard():
        if workspace is None:
            need = _workspace_size(args)
            if need > 0:
                workspace = torch.empty(need, dtype=torch.uint8, device=call.device)
                if stream is not None:  # freed on return: not reusable before the kernel on `stream` is done
                    raw = call.stream()
                    workspace.record_stream(stream if isinstance(stream, torch.cuda.Stream)
                                            else torch.cuda.ExternalStream(raw, device=call.device))
        if workspace is not None:
            if not isinstance(workspace, torch.Tensor):
                raise invalid(op, f"workspace must be a torch.Tensor, got {type(workspace).__name__}")
            call.tensor(workspace, "workspace", workspace.dtype)
            args.workspace = workspace.data_ptr()
            args.workspace_bytes = workspace.numel() * workspace.element_size()
        check(lib().chord_sparse_mla_decode(ctypes.byref(args), call.stream()))
    return out, lse
