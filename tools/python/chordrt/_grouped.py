"""The W4A16 grouped MoE GEMMs (chordrt.h's "W4A16 grouped MoE GEMMs" section): contiguous (prefill) and
masked (decode), on weights packed by w4a16_pack() (_w4a16.py).

Each op has a raw-pointer layer (``<op>_raw``: integer device addresses, explicit sizes, a CUstream int;
it fills the C args struct and makes the one C call) and a torch layer (checks the tensors, allocates
the output, then calls the raw layer on the tensors' addresses and torch's current stream). The public
``<op>`` takes either and picks the layer.
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
from ._w4a16 import W4a16Layout, W4a16Weight, check_weight_buffers, weight_struct

__all__ = [
    "GroupedContiguousArgs",
    "GroupedMaskedArgs",
    "grouped_contiguous",
    "grouped_contiguous_raw",
    "grouped_workspace_size",
    "grouped_masked",
    "grouped_masked_raw",
]

# ---- the C mirror -----------------------------------------------------------------------------------


class GroupedContiguousArgs(SizedStruct):
    """chord_grouped_contiguous_args_t (pointer fields are raw device addresses)."""

    _c_name_ = "chord_grouped_contiguous_args_t"
    _min_field_ = "out"
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("a", ctypes.c_void_p),  # BF16 [m, K]
        ("m", ctypes.c_int64),
        ("weight", ctypes.POINTER(W4a16Weight)),  # layout WGMMA_K64
        ("m_indices", ctypes.c_void_p),  # const int32_t* [m]
        ("out", ctypes.c_void_p),  # BF16 [m, N]
        ("workspace", ctypes.c_void_p),  # optional: stream-K scratch
        ("workspace_bytes", ctypes.c_int64),
    ]


class GroupedMaskedArgs(SizedStruct):
    """chord_grouped_masked_args_t (pointer fields are raw device addresses)."""

    _c_name_ = "chord_grouped_masked_args_t"
    _min_field_ = "out"
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("a", ctypes.c_void_p),  # BF16 [G*max_m, K]
        ("max_m", ctypes.c_int32),
        ("weight", ctypes.POINTER(W4a16Weight)),  # layout WGMMA_K128
        ("masked_m", ctypes.c_void_p),  # const int32_t* [G]
        ("expected_m", ctypes.c_int32),
        ("out", ctypes.c_void_p),  # BF16 [G*max_m, N]
        ("workspace", ctypes.c_void_p),  # optional: stream-K scratch
        ("workspace_bytes", ctypes.c_int64),
    ]


prototype("chord_grouped_contiguous", STATUS_T, [ctypes.POINTER(GroupedContiguousArgs), STREAM_T])
prototype("chord_grouped_masked", STATUS_T, [ctypes.POINTER(GroupedMaskedArgs), STREAM_T])
prototype("chord_grouped_workspace_size", ctypes.c_size_t, [ctypes.c_int32])

_CONTIGUOUS_NEEDS = ("grouped_contiguous needs a weight packed with layout WGMMA_K64 "
                     "(w4a16_pack(..., W4a16Layout.WGMMA_K64))")
_MASKED_NEEDS = "grouped_masked needs a weight packed with layout WGMMA_K128 (w4a16_pack(..., W4a16Layout.WGMMA_K128))"

# ---- grouped_contiguous -----------------------------------------------------------------------------


def grouped_workspace_size(num_sms: int) -> int:
    """chord_grouped_workspace_size(): bytes of the stream-K workspace on a GPU of num_sms SMs
    (torch: torch.cuda.get_device_properties(d).multi_processor_count)."""
    op = "grouped_workspace_size"
    n = lib().chord_grouped_workspace_size(check_int(num_sms, op, "num_sms"))
    if n == 0:
        raise invalid(op, f"num_sms must be in [1, 1024], got {num_sms}")
    return int(n)


def grouped_contiguous_raw(a, m, weight, m_indices, out, stream=None, *, workspace=0, workspace_bytes=0) -> None:
    """chord_grouped_contiguous() on raw device addresses (ints) and an explicit m; stream a CUstream."""
    op = "grouped_contiguous"
    w = weight_struct(weight, op)
    args = GroupedContiguousArgs(
        a=address(a, op, "a"),
        m=size(m, op, "m"),
        weight=ctypes.pointer(w),
        m_indices=address(m_indices, op, "m_indices"),
        out=address(out, op, "out"),
        workspace=address(workspace, op, "workspace") if workspace else None,
        workspace_bytes=size(workspace_bytes, op, "workspace_bytes"),
    )
    check(lib().chord_grouped_contiguous(ctypes.byref(args), raw_stream(stream)))


def _workspace_of(call, torch, workspace):
    """(address, bytes) of an optional stream-K workspace tensor (uint8, 1-D); (0, 0) for None."""
    if workspace is None:
        return 0, 0
    call.tensor(workspace, "workspace", torch.uint8, ndim=1)
    return workspace.data_ptr(), workspace.numel()


def _grouped_contiguous_torch(torch, a, weight, m_indices, out, stream, m, workspace):
    op = "grouped_contiguous"
    w = weight_struct(weight, op)
    call = TorchCall(torch, op, stream)
    call.tensor(a, "a", torch.bfloat16, ndim=2)
    check_weight_buffers(call, weight, (W4a16Layout.WGMMA_K64,), _CONTIGUOUS_NEEDS)
    rows, kk = a.shape
    if kk != w.k:
        raise invalid(op, f"a must be [m, K] with K = the weight's k ({w.k}), got shape {tuple(a.shape)}")
    if m is not None and m != rows:
        raise invalid(op, f"m={m} disagrees with a of shape {tuple(a.shape)}")
    call.tensor(m_indices, "m_indices", torch.int32, shape=(rows,))
    if out is None:
        out = torch.empty((rows, w.n), dtype=torch.bfloat16, device=call.device)
    call.tensor(out, "out", torch.bfloat16, shape=(rows, w.n))
    ws, ws_bytes = _workspace_of(call, torch, workspace)
    with call.guard():  # m == 0 too: the library still checks the weight
        grouped_contiguous_raw(a.data_ptr(), rows, w, m_indices.data_ptr(), out.data_ptr(), call.stream(),
                               workspace=ws, workspace_bytes=ws_bytes)
    return out


def grouped_contiguous(a, weight, m_indices, out=None, stream=None, *, m: Optional[int] = None, workspace=None,
                       workspace_bytes: int = 0):
    """chord_grouped_contiguous(): out[r] = a[r] @ W[m_indices[r]]^T for each row r (prefill).

    weight: a W4a16PackedWeight of layout W4a16Layout.WGMMA_K64. torch: a bf16 [m, K]; m_indices int32
    [m]: each expert's rows contiguous and padded to a multiple of 128 with -1 (rows whose id is -1 or
    outside [0, E) are neither computed nor written); out bf16 [m, N] (allocated with torch.empty when
    not given, so padding rows hold garbage then) is returned. workspace: optional stream-K scratch (a uint8
    tensor of at least grouped_workspace_size(SMs) bytes; raw: an address and workspace_bytes).
    Raw pointers: m must be given; returns None.
    """
    torch = torch_module_of(a, m_indices, out)
    if torch is not None:
        return _grouped_contiguous_torch(torch, a, weight, m_indices, out, stream, m, workspace)
    grouped_contiguous_raw(a, m, weight, m_indices, out, stream, workspace=workspace or 0,
                           workspace_bytes=workspace_bytes)
    return None


# ---- grouped_masked ---------------------------------------------------------------------------------


def grouped_masked_raw(a, max_m, weight, masked_m, expected_m, out, stream=None, *, workspace=0,
                       workspace_bytes=0) -> None:
    """chord_grouped_masked() on raw device addresses (ints) and an explicit max_m; stream a CUstream."""
    op = "grouped_masked"
    w = weight_struct(weight, op)
    args = GroupedMaskedArgs(
        a=address(a, op, "a"),
        max_m=size(max_m, op, "max_m"),
        weight=ctypes.pointer(w),
        masked_m=address(masked_m, op, "masked_m"),
        expected_m=check_int(expected_m, op, "expected_m"),
        out=address(out, op, "out"),
        workspace=address(workspace, op, "workspace") if workspace else None,
        workspace_bytes=size(workspace_bytes, op, "workspace_bytes"),
    )
    check(lib().chord_grouped_masked(ctypes.byref(args), raw_stream(stream)))


def _grouped_masked_torch(torch, a, weight, masked_m, expected_m, out, stream, max_m, workspace):
    op = "grouped_masked"
    w = weight_struct(weight, op)
    call = TorchCall(torch, op, stream)
    call.tensor(a, "a", torch.bfloat16)
    check_weight_buffers(call, weight, (W4a16Layout.WGMMA_K128,), _MASKED_NEEDS)
    g = w.num_experts
    if g < 1:
        raise invalid(op, f"the weight has {g} experts")
    if a.dim() == 3 and a.shape[0] == g:
        rows_per, kk = a.shape[1], a.shape[2]
    elif a.dim() == 2 and a.shape[0] % g == 0:
        rows_per, kk = a.shape[0] // g, a.shape[1]
    else:
        raise invalid(op, f"a must be [G*max_m, K] or [G, max_m, K] with G = the weight's num_experts ({g}), "
                           f"got shape {tuple(a.shape)}")
    if kk != w.k:
        raise invalid(op, f"a's last dimension must be the weight's k ({w.k}), got shape {tuple(a.shape)}")
    if max_m is not None and max_m != rows_per:
        raise invalid(op, f"max_m={max_m} disagrees with a of shape {tuple(a.shape)} (G = {g})")
    call.tensor(masked_m, "masked_m", torch.int32, shape=(g,))
    if out is None:
        out = torch.empty((g * rows_per, w.n), dtype=torch.bfloat16, device=call.device)
    call.tensor(out, "out", torch.bfloat16)
    if tuple(out.shape) not in ((g * rows_per, w.n), (g, rows_per, w.n)):
        raise invalid(op, f"out must have shape {(g * rows_per, w.n)} (or {(g, rows_per, w.n)}), got "
                           f"{tuple(out.shape)}")
    ws, ws_bytes = _workspace_of(call, torch, workspace)
    with call.guard():
        grouped_masked_raw(a.data_ptr(), rows_per, w, masked_m.data_ptr(), expected_m, out.data_ptr(), call.stream(),
                           workspace=ws, workspace_bytes=ws_bytes)
    return out


def grouped_masked(a, weight, masked_m, expected_m: int, out=None, stream=None, *, max_m: Optional[int] = None,
                   workspace=None, workspace_bytes: int = 0):
    """chord_grouped_masked(): for each group g (expert g of the weight), out rows = a rows @ W[g]^T for the
    first masked_m[g] rows of g's block of max_m rows (decode).

    weight: a W4a16PackedWeight of layout W4a16Layout.WGMMA_K128 (G = its num_experts). torch: a bf16
    [G*max_m, K] or [G, max_m, K]; masked_m int32 [G] on the device (clamped to [0, max_m], never read
    on the host); expected_m (> 0) the typical count, which only picks the kernel configuration; out
    bf16 [G*max_m, N] (or [G, max_m, N] when given so), allocated with torch.empty when not given, and
    returned: rows past each group's count are left untouched. workspace: optional stream-K scratch, as
    grouped_contiguous's (used under CHORD_GROUPED_CONFIG=stream_k=1 only, for now).
    Raw pointers: max_m must be given; returns None.
    """
    expected_m = check_int(expected_m, "grouped_masked", "expected_m")
    torch = torch_module_of(a, masked_m, out)
    if torch is not None:
        return _grouped_masked_torch(torch, a, weight, masked_m, expected_m, out, stream, max_m, workspace)
    grouped_masked_raw(a, max_m, weight, masked_m, expected_m, out, stream, workspace=workspace or 0,
                       workspace_bytes=workspace_bytes)
    return None
