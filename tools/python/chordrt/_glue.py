"""The MoE glue family: moe_align, silu_and_mul, moe_combine (chordrt.h's "MoE glue" section).

Each op has one raw-pointer layer (``<op>_raw``: integer device addresses, explicit sizes, a CUstream
int; it fills the C args struct and makes the one C call) and a torch layer (checks the tensors,
allocates missing outputs, then calls the raw layer on the tensors' addresses and torch's current
stream). The public ``<op>`` takes either and picks the layer.
"""

from __future__ import annotations

import ctypes
from typing import Optional

from ._core import (
    STATUS_T,
    STREAM_T,
    SizedStruct,
    TorchCall,
    address,
    check,
    check_int,
    invalid,
    lib,
    prototype,
    raw_stream,
    size,
    torch_module_of,
)

__all__ = [
    "MoeAlignArgs",
    "SiluAndMulArgs",
    "MoeCombineArgs",
    "moe_align_sorted_capacity",
    "moe_align_expert_ids_capacity",
    "moe_align",
    "moe_align_raw",
    "silu_and_mul",
    "silu_and_mul_raw",
    "moe_combine",
    "moe_combine_raw",
]

# ---- the C mirror -----------------------------------------------------------------------------------


class MoeAlignArgs(SizedStruct):
    """chord_moe_align_args_t (pointer fields are raw device addresses)."""

    _c_name_ = "chord_moe_align_args_t"
    _min_field_ = "num_tokens_post_padded"
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("topk_ids", ctypes.c_void_p),  # const int32_t* [num_tokens, top_k]
        ("num_tokens", ctypes.c_int64),
        ("top_k", ctypes.c_int32),
        ("num_experts", ctypes.c_int32),
        ("block_size", ctypes.c_int32),
        ("sorted_token_ids", ctypes.c_void_p),  # int32_t*
        ("sorted_token_ids_capacity", ctypes.c_int64),
        ("expert_ids", ctypes.c_void_p),  # int32_t*
        ("expert_ids_capacity", ctypes.c_int64),
        ("num_tokens_post_padded", ctypes.c_void_p),  # int32_t* [1]
        ("expert_map", ctypes.c_void_p),  # optional const int32_t* [num_experts]
    ]


class SiluAndMulArgs(SizedStruct):
    """chord_silu_and_mul_args_t (pointer fields are raw device addresses)."""

    _c_name_ = "chord_silu_and_mul_args_t"
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("input", ctypes.c_void_p),  # BF16 [rows, 2*intermediate]
        ("output", ctypes.c_void_p),  # BF16 [rows, intermediate]
        ("rows", ctypes.c_int64),
        ("intermediate", ctypes.c_int64),
    ]


class MoeCombineArgs(SizedStruct):
    """chord_moe_combine_args_t (pointer fields are raw device addresses)."""

    _c_name_ = "chord_moe_combine_args_t"
    _min_field_ = "hidden"
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("expert_rows", ctypes.c_void_p),  # BF16 [num_tokens*top_k, hidden]
        ("topk_weights", ctypes.c_void_p),  # const float* [num_tokens, top_k]
        ("output", ctypes.c_void_p),  # BF16 [num_tokens, hidden]
        ("num_tokens", ctypes.c_int64),
        ("top_k", ctypes.c_int32),
        ("hidden", ctypes.c_int64),
        ("topk_ids", ctypes.c_void_p),  # optional const int32_t* [num_tokens, top_k]
        ("expert_map", ctypes.c_void_p),  # optional const int32_t* [num_experts]
        ("num_experts", ctypes.c_int32),
    ]


prototype(
    "chord_moe_align_sorted_capacity",
    ctypes.c_int64,
    [ctypes.c_int64, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32],  # num_tokens, top_k, num_experts, block_size
)
prototype("chord_moe_align", STATUS_T, [ctypes.POINTER(MoeAlignArgs), STREAM_T])
prototype("chord_silu_and_mul", STATUS_T, [ctypes.POINTER(SiluAndMulArgs), STREAM_T])
prototype("chord_moe_combine", STATUS_T, [ctypes.POINTER(MoeCombineArgs), STREAM_T])


def moe_align_sorted_capacity(num_tokens: int, top_k: int, num_experts: int, block_size: int) -> int:
    """chord_moe_align_sorted_capacity(): elements sorted_token_ids needs (-1 for sizes out of range)."""
    return int(lib().chord_moe_align_sorted_capacity(num_tokens, top_k, num_experts, block_size))


def moe_align_expert_ids_capacity(num_tokens: int, top_k: int, num_experts: int, block_size: int) -> int:
    """Blocks expert_ids needs: ceil(sorted capacity / block_size) (-1 for sizes out of range)."""
    cap = moe_align_sorted_capacity(num_tokens, top_k, num_experts, block_size)
    return -(-cap // block_size) if cap >= 0 else -1


# ---- moe_align --------------------------------------------------------------------------------------


def moe_align_raw(
    topk_ids,
    num_tokens,
    top_k,
    num_experts,
    block_size,
    sorted_token_ids,
    sorted_token_ids_capacity,
    expert_ids,
    expert_ids_capacity,
    num_tokens_post_padded,
    expert_map=None,
    stream=None,
) -> None:
    """chord_moe_align() on raw device addresses (ints; None = NULL) and explicit sizes; stream a CUstream."""
    op = "moe_align"
    args = MoeAlignArgs(
        topk_ids=address(topk_ids, op, "topk_ids"),
        num_tokens=size(num_tokens, op, "num_tokens"),
        top_k=size(top_k, op, "top_k"),
        num_experts=check_int(num_experts, op, "num_experts"),
        block_size=check_int(block_size, op, "block_size"),
        sorted_token_ids=address(sorted_token_ids, op, "sorted_token_ids"),
        sorted_token_ids_capacity=size(sorted_token_ids_capacity, op, "sorted_token_ids_capacity"),
        expert_ids=address(expert_ids, op, "expert_ids"),
        expert_ids_capacity=size(expert_ids_capacity, op, "expert_ids_capacity"),
        num_tokens_post_padded=address(num_tokens_post_padded, op, "num_tokens_post_padded"),
        expert_map=address(expert_map, op, "expert_map"),
    )
    check(lib().chord_moe_align(ctypes.byref(args), raw_stream(stream)))


def _moe_align_torch(torch, topk_ids, num_experts, block_size, expert_map, sorted_token_ids, expert_ids,
                     num_tokens_post_padded, num_tokens, top_k, sorted_token_ids_capacity, expert_ids_capacity, stream):
    op = "moe_align"
    num_experts = check_int(num_experts, op, "num_experts")
    block_size = check_int(block_size, op, "block_size")
    call = TorchCall(torch, op, stream)
    call.tensor(topk_ids, "topk_ids", torch.int32, ndim=2)
    m, k = topk_ids.shape
    if num_tokens is not None and num_tokens != m:
        raise invalid(op, f"num_tokens={num_tokens} disagrees with topk_ids of shape {tuple(topk_ids.shape)}")
    if top_k is not None and top_k != k:
        raise invalid(op, f"top_k={top_k} disagrees with topk_ids of shape {tuple(topk_ids.shape)}")
    if expert_map is not None:
        call.tensor(expert_map, "expert_map", torch.int32, ndim=1, min_numel=max(num_experts, 0))
    if block_size < 1:  # keep the allocation sizes meaningful; the library reports its own range
        raise invalid(op, f"block_size must be >= 1, got {block_size}")
    cap = moe_align_sorted_capacity(m, k, num_experts, block_size)
    blocks = -(-cap // block_size)
    if sorted_token_ids is None:
        sorted_token_ids = torch.empty(max(cap, 1), dtype=torch.int32, device=call.device)
    call.tensor(sorted_token_ids, "sorted_token_ids", torch.int32, ndim=1)
    if expert_ids is None:
        expert_ids = torch.empty(max(blocks, 1), dtype=torch.int32, device=call.device)
    call.tensor(expert_ids, "expert_ids", torch.int32, ndim=1)
    if num_tokens_post_padded is None:
        num_tokens_post_padded = torch.empty(1, dtype=torch.int32, device=call.device)
    call.tensor(num_tokens_post_padded, "num_tokens_post_padded", torch.int32, min_numel=1)
    for name, given, numel in (
        ("sorted_token_ids_capacity", sorted_token_ids_capacity, sorted_token_ids.numel()),
        ("expert_ids_capacity", expert_ids_capacity, expert_ids.numel()),
    ):
        if given is not None and given != numel:
            raise invalid(op, f"{name}={given} disagrees with the tensor's {numel} elements")
    # An empty topk_ids has no storage (data_ptr() == 0) but the call must still write the outputs; the
    # kernel reads no route then, so any valid device address will do.
    topk_ptr = topk_ids.data_ptr() if topk_ids.numel() else num_tokens_post_padded.data_ptr()
    with call.guard():
        moe_align_raw(
            topk_ptr,
            m,
            k,
            num_experts,
            block_size,
            sorted_token_ids.data_ptr(),
            sorted_token_ids.numel(),
            expert_ids.data_ptr(),
            expert_ids.numel(),
            num_tokens_post_padded.data_ptr(),
            expert_map=expert_map.data_ptr() if expert_map is not None else None,
            stream=call.stream(),
        )
    return sorted_token_ids, expert_ids, num_tokens_post_padded


def moe_align(
    topk_ids,
    num_experts: int,
    block_size: int,
    *,
    expert_map=None,
    sorted_token_ids=None,
    expert_ids=None,
    num_tokens_post_padded=None,
    num_tokens: Optional[int] = None,
    top_k: Optional[int] = None,
    sorted_token_ids_capacity: Optional[int] = None,
    expert_ids_capacity: Optional[int] = None,
    stream=None,
):
    """chord_moe_align(): vLLM's moe_align_block_size.

    torch: topk_ids int32 [num_tokens, top_k]; expert_map optional int32 [>= num_experts]; outputs
    (1-D int32, capacities = their sizes) are allocated when not given, sorted_token_ids with
    moe_align_sorted_capacity() elements and expert_ids with ceil(that / block_size). Returns
    (sorted_token_ids, expert_ids, num_tokens_post_padded).

    Raw pointers: every pointer an int address (None = NULL); num_tokens, top_k and both capacities
    must be given. Returns None.
    """
    torch = torch_module_of(topk_ids, expert_map, sorted_token_ids, expert_ids, num_tokens_post_padded)
    if torch is not None:
        return _moe_align_torch(torch, topk_ids, num_experts, block_size, expert_map, sorted_token_ids, expert_ids,
                                num_tokens_post_padded, num_tokens, top_k, sorted_token_ids_capacity,
                                expert_ids_capacity, stream)
    moe_align_raw(topk_ids, num_tokens, top_k, num_experts, block_size, sorted_token_ids, sorted_token_ids_capacity,
                  expert_ids, expert_ids_capacity, num_tokens_post_padded, expert_map=expert_map, stream=stream)
    return None


# ---- silu_and_mul -----------------------------------------------------------------------------------


def silu_and_mul_raw(input, output, rows, intermediate, stream=None) -> None:
    """chord_silu_and_mul() on raw device addresses and explicit sizes; stream a CUstream."""
    op = "silu_and_mul"
    args = SiluAndMulArgs(
        input=address(input, op, "input"),
        output=address(output, op, "output"),
        rows=size(rows, op, "rows"),
        intermediate=size(intermediate, op, "intermediate"),
    )
    check(lib().chord_silu_and_mul(ctypes.byref(args), raw_stream(stream)))


def _silu_and_mul_torch(torch, input, output, rows, intermediate, stream):
    op = "silu_and_mul"
    call = TorchCall(torch, op, stream)
    call.tensor(input, "input", torch.bfloat16)
    if input.dim() < 1 or input.shape[-1] % 2 != 0:
        raise invalid(op, f"input's last dimension must be 2*intermediate (even), got shape {tuple(input.shape)}")
    inter = input.shape[-1] // 2
    n_rows = input.numel() // input.shape[-1] if input.shape[-1] else 0
    if intermediate is not None and intermediate != inter:
        raise invalid(op, f"intermediate={intermediate} disagrees with input of shape {tuple(input.shape)}")
    if rows is not None and rows != n_rows:
        raise invalid(op, f"rows={rows} disagrees with input of shape {tuple(input.shape)}")
    out_shape = tuple(input.shape[:-1]) + (inter,)
    if output is None:
        output = torch.empty(out_shape, dtype=torch.bfloat16, device=call.device)
    call.tensor(output, "output", torch.bfloat16, shape=out_shape)
    if n_rows == 0 or inter == 0:
        if inter == 0:
            raise invalid(op, f"intermediate must be >= 1, got input of shape {tuple(input.shape)}")
        return output  # nothing to compute (and empty tensors have no storage to pass)
    with call.guard():
        silu_and_mul_raw(input.data_ptr(), output.data_ptr(), n_rows, inter, stream=call.stream())
    return output


def silu_and_mul(input, output=None, *, rows: Optional[int] = None, intermediate: Optional[int] = None, stream=None):
    """chord_silu_and_mul(): output = silu(gate) * up, gate and up the halves of input's last dimension.

    torch: input bf16 [..., 2*I]; output bf16 [..., I] (allocated when not given, and returned).
    Raw pointers: rows and intermediate must be given; returns None.
    """
    torch = torch_module_of(input, output)
    if torch is not None:
        return _silu_and_mul_torch(torch, input, output, rows, intermediate, stream)
    silu_and_mul_raw(input, output, rows, intermediate, stream=stream)
    return None


# ---- moe_combine ------------------------------------------------------------------------------------


def moe_combine_raw(expert_rows, topk_weights, output, num_tokens, top_k, hidden, topk_ids=None, expert_map=None,
                    num_experts=None, stream=None) -> None:
    """chord_moe_combine() on raw device addresses and explicit sizes; stream a CUstream.

    num_experts is required with the expert-parallel filter (topk_ids and expert_map); with only one of
    them given the library reports the missing one."""
    op = "moe_combine"
    both = topk_ids is not None and expert_map is not None
    args = MoeCombineArgs(
        expert_rows=address(expert_rows, op, "expert_rows"),
        topk_weights=address(topk_weights, op, "topk_weights"),
        output=address(output, op, "output"),
        num_tokens=size(num_tokens, op, "num_tokens"),
        top_k=size(top_k, op, "top_k"),
        hidden=size(hidden, op, "hidden"),
        topk_ids=address(topk_ids, op, "topk_ids"),
        expert_map=address(expert_map, op, "expert_map"),
        num_experts=size(num_experts, op, "num_experts", required=both),
    )
    check(lib().chord_moe_combine(ctypes.byref(args), raw_stream(stream)))


def _moe_combine_torch(torch, expert_rows, topk_weights, output, topk_ids, expert_map, num_experts, num_tokens, top_k,
                       hidden, stream):
    op = "moe_combine"
    call = TorchCall(torch, op, stream)
    call.tensor(topk_weights, "topk_weights", torch.float32, ndim=2)
    t, k = topk_weights.shape
    call.tensor(expert_rows, "expert_rows", torch.bfloat16)
    if expert_rows.dim() == 3 and tuple(expert_rows.shape[:2]) == (t, k):
        h = expert_rows.shape[2]
    elif expert_rows.dim() == 2 and expert_rows.shape[0] == t * k:
        h = expert_rows.shape[1]
    else:
        raise invalid(
            op,
            f"expert_rows must have shape [num_tokens*top_k, hidden] = [{t * k}, hidden] (or [{t}, {k}, hidden]) "
            f"to match topk_weights {tuple(topk_weights.shape)}, got {tuple(expert_rows.shape)}",
        )
    for name, given, actual in (("num_tokens", num_tokens, t), ("top_k", top_k, k), ("hidden", hidden, h)):
        if given is not None and given != actual:
            raise invalid(op, f"{name}={given} disagrees with the tensors' shapes ({actual})")
    if output is None:
        output = torch.empty((t, h), dtype=torch.bfloat16, device=call.device)
    call.tensor(output, "output", torch.bfloat16, shape=(t, h))
    ids_ptr = map_ptr = None
    if topk_ids is not None or expert_map is not None:
        if topk_ids is not None:
            call.tensor(topk_ids, "topk_ids", torch.int32, shape=(t, k))
            ids_ptr = topk_ids.data_ptr()
        if expert_map is not None:
            call.tensor(expert_map, "expert_map", torch.int32, ndim=1)
            map_ptr = expert_map.data_ptr()
            if num_experts is None:
                num_experts = expert_map.numel()
            elif num_experts > expert_map.numel():
                raise invalid(op, f"num_experts={num_experts} exceeds expert_map's {expert_map.numel()} entries")
        num_experts = size(num_experts, op, "num_experts", required=False)
    if t == 0:
        return output  # nothing to compute (and empty tensors have no storage to pass)
    with call.guard():
        moe_combine_raw(expert_rows.data_ptr(), topk_weights.data_ptr(), output.data_ptr(), t, k, h, topk_ids=ids_ptr,
                        expert_map=map_ptr, num_experts=num_experts, stream=call.stream())
    return output


def moe_combine(
    expert_rows,
    topk_weights,
    output=None,
    *,
    topk_ids=None,
    expert_map=None,
    num_experts: Optional[int] = None,
    num_tokens: Optional[int] = None,
    top_k: Optional[int] = None,
    hidden: Optional[int] = None,
    stream=None,
):
    """chord_moe_combine(): output[t] = sum_j topk_weights[t, j] * expert_rows[t*top_k + j] (FP32, BF16 out).

    torch: expert_rows bf16 [num_tokens*top_k, hidden] (or [num_tokens, top_k, hidden]); topk_weights
    float32 [num_tokens, top_k]; output bf16 [num_tokens, hidden] (allocated when not given, returned).
    Expert-parallel filter: topk_ids int32 [num_tokens, top_k] with expert_map int32 [num_experts]
    (num_experts defaults to expert_map's size); routes to experts mapped to -1 contribute nothing.
    Raw pointers: num_tokens, top_k, hidden (and num_experts with the filter) must be given; returns None.
    """
    torch = torch_module_of(expert_rows, topk_weights, output, topk_ids, expert_map)
    if torch is not None:
        return _moe_combine_torch(torch, expert_rows, topk_weights, output, topk_ids, expert_map, num_experts,
                                  num_tokens, top_k, hidden, stream)
    moe_combine_raw(expert_rows, topk_weights, output, num_tokens, top_k, hidden, topk_ids=topk_ids,
                    expert_map=expert_map, num_experts=num_experts, stream=stream)
    return None
