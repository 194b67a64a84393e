"""Warp decode MoE (chordrt.h's "Warp decode MoE" section): a whole MoE expert block of a decode batch.

``warp_decode_moe_raw`` takes raw integer device addresses with explicit sizes and a CUstream int (it
fills the C args struct and makes the one C call); the torch layer checks the tensors, allocates the
missing workspace and output, then calls the raw layer on torch's current stream. ``warp_decode_moe``
takes either.
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
    invalid,
    lib,
    prototype,
    raw_stream,
    size,
    torch_module_of,
)

__all__ = [
    "WeightFormat",
    "WarpDecodeMoeArgs",
    "warp_decode_moe_workspace_size",
    "warp_decode_moe",
    "warp_decode_moe_raw",
]

# ---- the C mirror -----------------------------------------------------------------------------------


class WeightFormat(enum.IntEnum):
    """chord_weight_format_t."""

    INT4_GROUP32 = 0
    MXFP8 = 1


class WarpDecodeMoeArgs(SizedStruct):
    """chord_warp_decode_moe_args_t (pointer fields are raw device addresses)."""

    _c_name_ = "chord_warp_decode_moe_args_t"
    _min_field_ = "output"
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


prototype(
    "chord_warp_decode_moe_workspace_size",
    ctypes.c_size_t,
    [ctypes.c_int64, ctypes.c_int32, ctypes.c_int32],  # num_tokens, top_k, intermediate
)
prototype("chord_warp_decode_moe", STATUS_T, [ctypes.POINTER(WarpDecodeMoeArgs), STREAM_T])


# ---- warp decode MoE --------------------------------------------------------------------------------


def warp_decode_moe_workspace_size(num_tokens: int, top_k: int, intermediate: int) -> int:
    """chord_warp_decode_moe_workspace_size(): bytes of the BF16 [num_tokens*top_k, intermediate] intermediate."""
    return int(lib().chord_warp_decode_moe_workspace_size(num_tokens, top_k, intermediate))


def warp_decode_moe(
    x,
    topk_ids,
    topk_weights,
    w13,
    w13_scale,
    w2,
    w2_scale,
    *,
    expert_map=None,
    num_global_experts: Optional[int] = None,
    workspace=None,
    output=None,
    weight_format=None,
    num_tokens: Optional[int] = None,
    hidden: Optional[int] = None,
    intermediate: Optional[int] = None,
    num_experts: Optional[int] = None,
    top_k: Optional[int] = None,
    workspace_bytes: Optional[int] = None,
    stream=None,
):
    """chord_warp_decode_moe(): the whole MoE expert block of a decode batch (gate/up, SiLU*up, down, top-k sum).

    torch: x bf16 [M, H]; topk_ids int32 [M, top_k]; topk_weights float32 [M, top_k]. INT4 group-32
    (checkpoint layout): w13 int32 [E, 2I, H/8] (gate rows then up rows), w13_scale bf16 [E, 2I, H/32],
    w2 int32 [E, H, I/8], w2_scale bf16 [E, H, I/32]. MXFP8: w13 uint8 / float8_e4m3fn [E, 2I, H],
    w13_scale uint8 (E8M0) [E, 2I, H/32], w2 [E, H, I], w2_scale uint8 [E, H, I/32]. The format follows
    w13's dtype. expert_map int32 [num_global_experts] (global id -> local id, -1 = not here) makes the
    output this GPU's partial sum. workspace (uint8, >= warp_decode_moe_workspace_size bytes) and output
    (bf16 [M, H]) are allocated when not given; output is returned.
    Raw pointers: weight_format (WeightFormat), num_tokens, hidden, intermediate, num_experts, top_k,
    workspace and workspace_bytes must be given (num_global_experts with a map); returns None.
    """
    op = "warp_decode_moe"
    torch = torch_module_of(x, topk_ids, topk_weights, w13, w13_scale, w2, w2_scale, expert_map, workspace, output)
    if torch is None:
        warp_decode_moe_raw(x, topk_ids, topk_weights, w13, w13_scale, w2, w2_scale, expert_map=expert_map,
                            num_global_experts=num_global_experts, workspace=workspace, output=output,
                            weight_format=weight_format, num_tokens=num_tokens, hidden=hidden,
                            intermediate=intermediate, num_experts=num_experts, top_k=top_k,
                            workspace_bytes=workspace_bytes, stream=stream)
        return None
    return _warp_decode_moe_torch(torch, x, topk_ids, topk_weights, w13, w13_scale, w2, w2_scale, expert_map,
                                  num_global_experts, workspace, output, weight_format, num_tokens, hidden,
                                  intermediate, num_experts, top_k, stream)


def warp_decode_moe_raw(x, topk_ids, topk_weights, w13, w13_scale, w2, w2_scale, *, expert_map=None,
                        num_global_experts=None, workspace, output, weight_format, num_tokens, hidden, intermediate,
                        num_experts, top_k, workspace_bytes, stream=None) -> None:
    """chord_warp_decode_moe() on raw device addresses (ints; None = NULL) and explicit sizes."""
    op = "warp_decode_moe"
    args = WarpDecodeMoeArgs(
        format=int(WeightFormat(size(weight_format, op, "weight_format"))),
        num_tokens=size(num_tokens, op, "num_tokens"),
        hidden=size(hidden, op, "hidden"),
        intermediate=size(intermediate, op, "intermediate"),
        num_experts=size(num_experts, op, "num_experts"),
        top_k=size(top_k, op, "top_k"),
        x=address(x, op, "x"),
        topk_ids=address(topk_ids, op, "topk_ids"),
        topk_weights=address(topk_weights, op, "topk_weights"),
        w13=address(w13, op, "w13"),
        w13_scale=address(w13_scale, op, "w13_scale"),
        w2=address(w2, op, "w2"),
        w2_scale=address(w2_scale, op, "w2_scale"),
        expert_map=address(expert_map, op, "expert_map"),
        num_global_experts=size(num_global_experts, op, "num_global_experts", required=expert_map is not None),
        workspace=address(workspace, op, "workspace"),
        workspace_bytes=size(workspace_bytes, op, "workspace_bytes"),
        output=address(output, op, "output"),
    )
    check(lib().chord_warp_decode_moe(ctypes.byref(args), raw_stream(stream)))


def _warp_decode_moe_torch(torch, x, topk_ids, topk_weights, w13, w13_scale, w2, w2_scale, expert_map,
                           num_global_experts, workspace, output, weight_format, num_tokens, hidden, intermediate,
                           num_experts, top_k, stream):
    op = "warp_decode_moe"
    call = TorchCall(torch, op, stream)
    call.tensor(x, "x", torch.bfloat16, ndim=2)
    m, h = x.shape
    call.tensor(topk_ids, "topk_ids", torch.int32, ndim=2)
    k = topk_ids.shape[1]
    call.tensor(topk_ids, "topk_ids", torch.int32, shape=(m, k))
    call.tensor(topk_weights, "topk_weights", torch.float32, shape=(m, k))
    fp8 = getattr(torch, "float8_e4m3fn", None)
    if w13.dtype == torch.int32:
        fmt, per_k, scale_dtype = WeightFormat.INT4_GROUP32, 8, torch.bfloat16
    elif w13.dtype == torch.uint8 or (fp8 is not None and w13.dtype == fp8):
        fmt, per_k, scale_dtype = WeightFormat.MXFP8, 1, torch.uint8
    else:
        raise invalid(op, f"w13 must be int32 (INT4 group-32) or uint8 / float8_e4m3fn (MXFP8), got {w13.dtype}")
    if weight_format is not None and WeightFormat(weight_format) != fmt:
        raise invalid(op, f"weight_format={WeightFormat(weight_format).name} disagrees with w13's dtype {w13.dtype}")
    call.tensor(w13, "w13", w13.dtype, ndim=3)
    e, two_i = w13.shape[0], w13.shape[1]
    if two_i % 2 != 0 or h % 32 != 0:
        raise invalid(op, f"w13 must be [E, 2I, H/{per_k}] with x [M, H] (H a multiple of 32), got {tuple(w13.shape)}")
    i = two_i // 2
    call.tensor(w13, "w13", w13.dtype, shape=(e, two_i, h // per_k))
    call.tensor(w13_scale, "w13_scale", scale_dtype, shape=(e, two_i, h // 32))
    call.tensor(w2, "w2", w13.dtype, shape=(e, h, i // per_k))
    call.tensor(w2_scale, "w2_scale", scale_dtype, shape=(e, h, i // 32))
    for name, given, actual in (
        ("num_tokens", num_tokens, m),
        ("hidden", hidden, h),
        ("intermediate", intermediate, i),
        ("num_experts", num_experts, e),
        ("top_k", top_k, k),
    ):
        if given is not None and given != actual:
            raise invalid(op, f"{name}={given} disagrees with the tensors' shapes ({actual})")
    map_ptr = None
    if expert_map is not None:
        call.tensor(expert_map, "expert_map", torch.int32, ndim=1)
        map_ptr = expert_map.data_ptr()
        if num_global_experts is None:
            num_global_experts = expert_map.numel()
        elif num_global_experts > expert_map.numel():
            raise invalid(op, f"num_global_experts={num_global_experts} exceeds expert_map's {expert_map.numel()} entries")
    need = warp_decode_moe_workspace_size(m, k, i)
    if workspace is None:
        workspace = torch.empty(max(need, 16), dtype=torch.uint8, device=call.device)
    call.tensor(workspace, "workspace", torch.uint8, min_numel=need)
    if output is None:
        output = torch.empty((m, h), dtype=torch.bfloat16, device=call.device)
    call.tensor(output, "output", torch.bfloat16, shape=(m, h))
    if m == 0:
        return output
    with call.guard():
        warp_decode_moe_raw(
            x.data_ptr(),
            topk_ids.data_ptr(),
            topk_weights.data_ptr(),
            w13.data_ptr(),
            w13_scale.data_ptr(),
            w2.data_ptr(),
            w2_scale.data_ptr(),
            expert_map=map_ptr,
            num_global_experts=num_global_experts,
            workspace=workspace.data_ptr(),
            workspace_bytes=workspace.numel(),
            output=output.data_ptr(),
            weight_format=int(fmt),
            num_tokens=m,
            hidden=h,
            intermediate=i,
            num_experts=e,
            top_k=k,
            stream=call.stream(),
        )
    return output
