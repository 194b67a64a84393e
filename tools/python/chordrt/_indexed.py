"""The W4A16 indexed MoE GEMMs over vLLM's routing (chordrt.h's "W4A16 indexed MoE GEMMs" section):
block_m advice and the GEMM, on weights packed by w4a16_pack() (_w4a16.py) with layout WGMMA_K64
(prefill) or MMA (decode).

``indexed_gemm_raw`` takes integer device addresses and explicit sizes; the torch layer checks the
tensors, allocates the output and calls it; ``indexed_gemm`` takes either.
"""

from __future__ import annotations

import ctypes
import enum
from typing import Optional

from ._core import (
    STATUS_T,
    STREAM_T,
    SizedStruct,
    TorchCall,
    address,
    check,
    check_int,
    enum_value,
    flag,
    invalid,
    lib,
    prototype,
    raw_stream,
    size,
    torch_module_of,
)
from ._w4a16 import W4a16Layout, W4a16Weight, check_weight_buffers, weight_struct

__all__ = ["IndexedProfile", "IndexedArgs", "indexed_block_m", "indexed_gemm", "indexed_gemm_raw",
           "indexed_gemm_workspace_size"]

# ---- the C mirror -----------------------------------------------------------------------------------


class IndexedProfile(enum.IntEnum):
    """chord_indexed_profile_t."""

    AUTO = 0  # deduced from the shape: TP when N or K < 1024
    EP = 1
    TP = 2


class IndexedArgs(SizedStruct):
    """chord_indexed_args_t (pointer fields are raw device addresses)."""

    _c_name_ = "chord_indexed_args_t"
    _min_field_ = "out"
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("a", ctypes.c_void_p),  # BF16 [num_tokens, K]
        ("num_tokens", ctypes.c_int64),
        ("top_k", ctypes.c_int32),
        ("block_m", ctypes.c_int32),
        ("weight", ctypes.POINTER(W4a16Weight)),  # layout WGMMA_K64 or MMA
        ("sorted_token_ids", ctypes.c_void_p),  # const int32_t*
        ("sorted_token_ids_capacity", ctypes.c_int64),
        ("expert_ids", ctypes.c_void_p),  # const int32_t*
        ("expert_ids_capacity", ctypes.c_int64),
        ("num_tokens_post_padded", ctypes.c_void_p),  # const int32_t* [1]
        ("out", ctypes.c_void_p),  # BF16 [num_tokens*top_k, N]
        ("validate", ctypes.c_int32),  # optional
        ("workspace", ctypes.c_void_p),  # optional: stream-K scratch (layout WGMMA_K64)
        ("workspace_bytes", ctypes.c_int64),
    ]


prototype(
    "chord_indexed_block_m",
    STATUS_T,
    # layout, num_experts, n, k, routed_rows, profile, int32_t* block_m
    [ctypes.c_int32] * 4 + [ctypes.c_int64, ctypes.c_int32, ctypes.POINTER(ctypes.c_int32)],
)
prototype("chord_indexed_gemm", STATUS_T, [ctypes.POINTER(IndexedArgs), STREAM_T])
prototype("chord_indexed_gemm_workspace_size", ctypes.c_size_t, [ctypes.c_int32, ctypes.c_int32])

_NEEDS = ("indexed_gemm needs a weight packed with layout WGMMA_K64 (prefill) or MMA (decode) "
          "(w4a16_pack(..., W4a16Layout.WGMMA_K64 or W4a16Layout.MMA))")


def indexed_block_m(layout, num_experts: int, n: int, k: int, routed_rows: int, profile=IndexedProfile.AUTO) -> int:
    """chord_indexed_block_m(): the block size to run moe_align with for `routed_rows` routes on this
    GPU's experts (rows = tokens * top_k for gate_up and for down alike), for a weight of `layout`
    (W4a16Layout.WGMMA_K64 or MMA)."""
    op = "indexed_block_m"
    out = ctypes.c_int32()
    check(
        lib().chord_indexed_block_m(
            int(enum_value(W4a16Layout, layout, "layout")),
            check_int(num_experts, op, "num_experts"),
            check_int(n, op, "n"),
            check_int(k, op, "k"),
            check_int(routed_rows, op, "routed_rows"),
            int(enum_value(IndexedProfile, profile, "profile")),
            ctypes.byref(out),
        )
    )
    return int(out.value)


def indexed_gemm_workspace_size(block_m: int, num_sms: int) -> int:
    """chord_indexed_gemm_workspace_size(): bytes of the stream-K workspace for a routing of block_m on a GPU
    of num_sms SMs (torch: torch.cuda.get_device_properties(d).multi_processor_count)."""
    op = "indexed_gemm_workspace_size"
    n = lib().chord_indexed_gemm_workspace_size(check_int(block_m, op, "block_m"), check_int(num_sms, op, "num_sms"))
    if n == 0:
        raise invalid(op, f"block_m must be a multiple of 8 in [8, 256] and num_sms in [1, 1024], got {block_m}, "
                          f"{num_sms}")
    return int(n)


def indexed_gemm_raw(a, num_tokens, weight, sorted_token_ids, sorted_token_ids_capacity, expert_ids,
                     expert_ids_capacity, num_tokens_post_padded, top_k, block_m, out, stream=None, *,
                     validate=False, workspace=0, workspace_bytes=0) -> None:
    """chord_indexed_gemm() on raw device addresses (ints) and explicit sizes; stream a CUstream."""
    op = "indexed_gemm"
    w = weight_struct(weight, op)
    args = IndexedArgs(
        a=address(a, op, "a"),
        num_tokens=size(num_tokens, op, "num_tokens"),
        top_k=check_int(top_k, op, "top_k"),
        block_m=check_int(block_m, op, "block_m"),
        weight=ctypes.pointer(w),
        sorted_token_ids=address(sorted_token_ids, op, "sorted_token_ids"),
        sorted_token_ids_capacity=size(sorted_token_ids_capacity, op, "sorted_token_ids_capacity"),
        expert_ids=address(expert_ids, op, "expert_ids"),
        expert_ids_capacity=size(expert_ids_capacity, op, "expert_ids_capacity"),
        num_tokens_post_padded=address(num_tokens_post_padded, op, "num_tokens_post_padded"),
        out=address(out, op, "out"),
        validate=flag(validate, op, "validate"),
        workspace=address(workspace, op, "workspace") if workspace else None,
        workspace_bytes=size(workspace_bytes, op, "workspace_bytes"),
    )
    check(lib().chord_indexed_gemm(ctypes.byref(args), raw_stream(stream)))


def _indexed_gemm_torch(torch, a, weight, sorted_token_ids, expert_ids, num_tokens_post_padded, top_k, block_m, out,
                        stream, validate, num_tokens, sorted_token_ids_capacity, expert_ids_capacity, workspace):
    op = "indexed_gemm"
    w = weight_struct(weight, op)
    call = TorchCall(torch, op, stream)
    call.tensor(a, "a", torch.bfloat16, ndim=2)
    check_weight_buffers(call, weight, (W4a16Layout.WGMMA_K64, W4a16Layout.MMA), _NEEDS)
    rows, kk = a.shape
    if kk != w.k:
        raise invalid(op, f"a must be [M, K] with K = the weight's k ({w.k}), got shape {tuple(a.shape)}")
    if num_tokens is not None and num_tokens != rows:
        raise invalid(op, f"num_tokens={num_tokens} disagrees with a of shape {tuple(a.shape)}")
    call.tensor(sorted_token_ids, "sorted_token_ids", torch.int32, ndim=1)
    call.tensor(expert_ids, "expert_ids", torch.int32, ndim=1)
    call.tensor(num_tokens_post_padded, "num_tokens_post_padded", torch.int32, min_numel=1)
    for name, given, actual in (("sorted_token_ids_capacity", sorted_token_ids_capacity, sorted_token_ids.numel()),
                                ("expert_ids_capacity", expert_ids_capacity, expert_ids.numel())):
        if given is not None and given != actual:
            raise invalid(op, f"{name}={given} disagrees with the tensor's {actual} elements")
    if out is None:
        out = torch.empty((rows * top_k, w.n), dtype=torch.bfloat16, device=call.device)
    call.tensor(out, "out", torch.bfloat16, shape=(rows * top_k, w.n))
    ws, ws_bytes = 0, 0
    if workspace is not None:
        call.tensor(workspace, "workspace", torch.uint8, ndim=1)
        ws, ws_bytes = workspace.data_ptr(), workspace.numel()
    with call.guard():
        indexed_gemm_raw(a.data_ptr(), rows, w, sorted_token_ids.data_ptr(), sorted_token_ids.numel(),
                         expert_ids.data_ptr(), expert_ids.numel(), num_tokens_post_padded.data_ptr(), top_k,
                         block_m, out.data_ptr(), call.stream(), validate=validate, workspace=ws,
                         workspace_bytes=ws_bytes)
    return out


def indexed_gemm(a, weight, sorted_token_ids, expert_ids, num_tokens_post_padded, top_k: int, block_m: int,
                 out=None, stream=None, *, validate=False, num_tokens: Optional[int] = None,
                 sorted_token_ids_capacity: Optional[int] = None, expert_ids_capacity: Optional[int] = None,
                 workspace=None, workspace_bytes: int = 0):
    """chord_indexed_gemm(): out[r] = a[r // top_k] @ W[e]^T for every route r of a block of expert e >= 0.

    weight: a W4a16PackedWeight of layout W4a16Layout.WGMMA_K64 (prefill / mixed steps, block_m
    8..256; the same packed copy grouped_contiguous() reads) or MMA (decode, block_m 8..32).
    torch: a bf16 [M, K]; sorted_token_ids / expert_ids int32 1-D buffers as moe_align (or vLLM's
    moe_align_block_size) fills them, over-allocated allowed; num_tokens_post_padded int32 [>= 1] on the
    device; out bf16 [M*top_k, N] (allocated with torch.empty when not given, and returned). gate_up:
    top_k = topk; down: a = the [M*topk, I] activations with top_k = 1. validate=True reads the routing
    back and raises on its first bad entry (synchronizes: not while capturing).
    workspace: stream-K scratch for layout WGMMA_K64 (every SM ends together whatever the routing's block
    count; deterministic): torch a uint8 [>= indexed_gemm_workspace_size(block_m, SMs)] tensor, raw an address
    with workspace_bytes. Calls running at the same time need their own.
    Raw pointers: num_tokens and both capacities must be given; returns None.
    """
    op = "indexed_gemm"
    top_k = check_int(top_k, op, "top_k")
    block_m = check_int(block_m, op, "block_m")
    validate = flag(validate, op, "validate")
    torch = torch_module_of(a, sorted_token_ids, expert_ids, num_tokens_post_padded, out)
    if torch is not None:
        return _indexed_gemm_torch(torch, a, weight, sorted_token_ids, expert_ids, num_tokens_post_padded, top_k,
                                   block_m, out, stream, validate, num_tokens, sorted_token_ids_capacity,
                                   expert_ids_capacity, workspace)
    indexed_gemm_raw(a, num_tokens, weight, sorted_token_ids, sorted_token_ids_capacity, expert_ids,
                     expert_ids_capacity, num_tokens_post_padded, top_k, block_m, out, stream, validate=validate,
                     workspace=workspace or 0, workspace_bytes=workspace_bytes)
    return None
