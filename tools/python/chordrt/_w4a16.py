"""The W4A16 MoE weights shared by the grouped and indexed GEMM families (chordrt.h's "W4A16 MoE
weights" section): the layouts, the one weight type, its sizes and the packer.

A weight is packed once per layout: ``WGMMA_K64`` serves grouped_contiguous() and indexed_gemm()'s
prefill (one packed copy for both), ``WGMMA_K128`` grouped_masked(), ``MMA`` indexed_gemm()'s decode.
``w4a16_pack_raw`` takes integer device addresses and explicit sizes; the torch layer checks the
checkpoint tensors, allocates the packed buffers and calls it; ``w4a16_pack`` takes either.
"""

from __future__ import annotations

import ctypes
import enum
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
    flag,
    invalid,
    lib,
    prototype,
    raw_stream,
    size,
    torch_module_of,
)

__all__ = [
    "W4a16Layout",
    "W4a16Weight",
    "W4a16PackArgs",
    "W4a16PackedWeight",
    "w4a16_weight_sizes",
    "w4a16_pack",
    "w4a16_pack_raw",
    "weight_struct",
    "check_weight_buffers",
]

# The checkpoint scheme the W4A16 kernels serve (compressed-tensors pack-quantized, Kimi K2).
_SCHEME = (4, 32, 1, 1)  # bits, group_size, symmetric, scale_is_bf16

# ---- the C mirror -----------------------------------------------------------------------------------


class W4a16Layout(enum.IntEnum):
    """chord_w4a16_layout_t."""

    WGMMA_K64 = 0  # grouped contiguous (prefill) and indexed prefill
    WGMMA_K128 = 1  # grouped masked (decode)
    MMA = 2  # indexed decode (block_m 8..32)


class W4a16Weight(SizedStruct):
    """chord_w4a16_weight_t: a weight packed for one layout (filled by chord_w4a16_pack)."""

    _c_name_ = "chord_w4a16_weight_t"
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("layout", ctypes.c_int32),  # a chord_w4a16_layout_t
        ("num_experts", ctypes.c_int32),
        ("n", ctypes.c_int32),
        ("k", ctypes.c_int32),
        ("packed", ctypes.c_void_p),
        ("scale", ctypes.c_void_p),
        ("tag", ctypes.c_uint64),
    ]


class W4a16PackArgs(SizedStruct):
    """chord_w4a16_pack_args_t (pointer fields are raw device addresses)."""

    _c_name_ = "chord_w4a16_pack_args_t"
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("layout", ctypes.c_int32),  # a chord_w4a16_layout_t
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


prototype(
    "chord_w4a16_weight_sizes",
    STATUS_T,
    # layout, num_experts, n, k, size_t* packed_bytes, size_t* scale_bytes
    [ctypes.c_int32] * 4 + [ctypes.POINTER(ctypes.c_size_t)] * 2,
)
prototype("chord_w4a16_pack", STATUS_T, [ctypes.POINTER(W4a16PackArgs), ctypes.POINTER(W4a16Weight), STREAM_T])


class W4a16PackedWeight:
    """A weight packed by w4a16_pack(): ``struct`` is the filled W4a16Weight the GEMMs receive;
    ``packed`` (uint8) and ``scale`` (bf16) are the device buffers it points into, owned here (torch
    tensors, or raw addresses when packed in raw-pointer mode). Keep it alive as long as the GEMMs use
    it; the struct must not be edited (the library checks its tag)."""

    __slots__ = ("struct", "packed", "scale")

    def __init__(self, struct: W4a16Weight, packed, scale):
        self.struct = struct
        self.packed = packed
        self.scale = scale

    @property
    def layout(self) -> W4a16Layout:
        return W4a16Layout(self.struct.layout)

    @property
    def num_experts(self) -> int:
        return int(self.struct.num_experts)

    @property
    def n(self) -> int:
        return int(self.struct.n)

    @property
    def k(self) -> int:
        return int(self.struct.k)

    def __repr__(self) -> str:
        return (f"W4a16PackedWeight(layout={self.layout.name}, num_experts={self.num_experts}, n={self.n}, "
                f"k={self.k})")


def w4a16_weight_sizes(layout, num_experts: int, n: int, k: int) -> Tuple[int, int]:
    """chord_w4a16_weight_sizes(): (packed_bytes, scale_bytes) a weight packed for `layout` needs.

    Raises ChordError(INVALID_ARGUMENT) for a shape the layout cannot hold (N a multiple of 128; K a
    multiple of 64, of 128 for WGMMA_K128)."""
    op = "w4a16_weight_sizes"
    layout = enum_value(W4a16Layout, layout, "layout")
    packed_bytes, scale_bytes = ctypes.c_size_t(), ctypes.c_size_t()
    check(
        lib().chord_w4a16_weight_sizes(
            int(layout),
            check_int(num_experts, op, "num_experts"),
            check_int(n, op, "n"),
            check_int(k, op, "k"),
            ctypes.byref(packed_bytes),
            ctypes.byref(scale_bytes),
        )
    )
    return int(packed_bytes.value), int(scale_bytes.value)


# ---- the packer -------------------------------------------------------------------------------------


def w4a16_pack_raw(weight_packed, weight_scale, layout, num_experts, n, k, packed, packed_bytes, scale, scale_bytes,
                   stream=None, *, bits: int = 4, group_size: int = 32, symmetric=True,
                   scale_is_bf16=True) -> W4a16PackedWeight:
    """chord_w4a16_pack() on raw device addresses (ints) and explicit sizes; stream a CUstream."""
    op = "w4a16_pack"
    args = W4a16PackArgs(
        layout=int(enum_value(W4a16Layout, layout, "layout")),
        num_experts=size(num_experts, op, "num_experts"),
        n=size(n, op, "n"),
        k=size(k, op, "k"),
        bits=check_int(bits, op, "bits"),
        group_size=check_int(group_size, op, "group_size"),
        symmetric=flag(symmetric, op, "symmetric"),
        scale_is_bf16=flag(scale_is_bf16, op, "scale_is_bf16"),
        weight_packed=address(weight_packed, op, "weight_packed"),
        weight_scale=address(weight_scale, op, "weight_scale"),
        packed=address(packed, op, "packed"),
        packed_bytes=size(packed_bytes, op, "packed_bytes"),
        scale=address(scale, op, "scale"),
        scale_bytes=size(scale_bytes, op, "scale_bytes"),
    )
    weight = W4a16Weight()
    check(lib().chord_w4a16_pack(ctypes.byref(args), ctypes.byref(weight), raw_stream(stream)))
    return W4a16PackedWeight(weight, packed, scale)


def _w4a16_pack_torch(torch, weight_packed, weight_scale, layout, stream, scheme, packed, scale, num_experts, n, k,
                      packed_bytes, scale_bytes) -> W4a16PackedWeight:
    op = "w4a16_pack"
    call = TorchCall(torch, op, stream)
    call.tensor(weight_packed, "weight_packed", torch.int32, ndim=3)
    e, rows, words = weight_packed.shape
    kk = words * 8 if k is None else check_int(k, op, "k")
    for name, given, actual in (("num_experts", num_experts, e), ("n", n, rows)):
        if given is not None and given != actual:
            raise invalid(op, f"{name}={given} disagrees with weight_packed of shape {tuple(weight_packed.shape)}")
    if scheme == _SCHEME:
        if kk != words * 8:
            raise invalid(op, f"k={kk} disagrees with weight_packed of shape {tuple(weight_packed.shape)} (int32 "
                               f"[E, N, K/8])")
        if kk % 32 != 0:
            raise invalid(op, f"K must be a multiple of the group size 32, got weight_packed of shape "
                               f"{tuple(weight_packed.shape)} (K = {kk})")
        call.tensor(weight_scale, "weight_scale", torch.bfloat16, shape=(e, rows, kk // 32))
    else:  # the library rejects the scheme: only the basics are checked here
        call.tensor(weight_scale, "weight_scale", getattr(weight_scale, "dtype", None), ndim=3)
    need_packed, need_scale = w4a16_weight_sizes(layout, e, rows, kk)
    if packed is None:
        packed = torch.empty(need_packed, dtype=torch.uint8, device=call.device)
    call.tensor(packed, "packed", torch.uint8, min_numel=need_packed)
    if scale is None:
        scale = torch.empty(-(-need_scale // 2), dtype=torch.bfloat16, device=call.device)
    call.tensor(scale, "scale", torch.bfloat16, min_numel=-(-need_scale // 2))
    for name, given, actual in (("packed_bytes", packed_bytes, packed.numel()),
                                ("scale_bytes", scale_bytes, 2 * scale.numel())):
        if given is not None and given != actual:
            raise invalid(op, f"{name}={given} disagrees with the tensor's {actual} bytes")
    with call.guard():
        raw = w4a16_pack_raw(weight_packed.data_ptr(), weight_scale.data_ptr(), layout, e, rows, kk,
                             packed.data_ptr(), packed.numel(), scale.data_ptr(), 2 * scale.numel(), call.stream(),
                             bits=scheme[0], group_size=scheme[1], symmetric=scheme[2], scale_is_bf16=scheme[3])
    return W4a16PackedWeight(raw.struct, packed, scale)


def w4a16_pack(
    weight_packed,
    weight_scale,
    layout,
    stream=None,
    *,
    bits: int = 4,
    group_size: int = 32,
    symmetric=True,
    scale_is_bf16=True,
    packed=None,
    scale=None,
    num_experts: Optional[int] = None,
    n: Optional[int] = None,
    k: Optional[int] = None,
    packed_bytes: Optional[int] = None,
    scale_bytes: Optional[int] = None,
) -> W4a16PackedWeight:
    """chord_w4a16_pack(): converts a checkpoint weight into `layout` (a W4a16Layout, an int or a name);
    returns a W4a16PackedWeight.

    torch: weight_packed int32 [E, N, K/8] (8 nibbles per word, least significant first along K, value
    = (nibble - 8) * scale), weight_scale bf16 [E, N, K/32]. The packed (uint8) and scale (bf16) buffers
    are allocated (w4a16_weight_sizes()) when not given. The packer runs on the stream (torch's current
    one by default): the weight is usable from that point of the stream on, and the checkpoint tensors
    must stay alive until the stream gets there (automatic on torch's current stream).
    bits / group_size / symmetric / scale_is_bf16 describe the checkpoint's scheme; the library serves
    only the default (4, 32, True, True) and rejects anything else with CHORD_ERROR_UNSUPPORTED (the
    shape checks here apply to the default scheme only).
    Raw pointers: num_experts, n, k, packed, packed_bytes, scale and scale_bytes must be given.
    """
    op = "w4a16_pack"
    layout = enum_value(W4a16Layout, layout, "layout")
    scheme = (check_int(bits, op, "bits"), check_int(group_size, op, "group_size"), flag(symmetric, op, "symmetric"),
              flag(scale_is_bf16, op, "scale_is_bf16"))
    torch = torch_module_of(weight_packed, weight_scale, packed, scale)
    if torch is not None:
        return _w4a16_pack_torch(torch, weight_packed, weight_scale, layout, stream, scheme, packed, scale,
                                 num_experts, n, k, packed_bytes, scale_bytes)
    return w4a16_pack_raw(weight_packed, weight_scale, layout, num_experts, n, k, packed, packed_bytes, scale,
                          scale_bytes, stream, bits=scheme[0], group_size=scheme[1], symmetric=scheme[2],
                          scale_is_bf16=scheme[3])


# ---- what the GEMM families share -------------------------------------------------------------------


def weight_struct(weight, op: str) -> W4a16Weight:
    """The W4a16Weight of a W4a16PackedWeight (or the struct itself)."""
    if isinstance(weight, W4a16PackedWeight):
        return weight.struct
    if isinstance(weight, W4a16Weight):
        return weight
    raise invalid(op, f"weight must be a W4a16PackedWeight (from w4a16_pack) or a W4a16Weight, got "
                       f"{type(weight).__name__}")


def check_weight_buffers(call: TorchCall, weight, layouts, needs: str) -> None:
    """torch mode: the weight is of one of `layouts` (`needs` says which, for the message) and its
    buffers, when tensors, are on the call's device."""
    torch, w = call.torch, weight_struct(weight, call.op)
    try:
        got = W4a16Layout(w.layout)
    except ValueError:
        got = None  # not a layout at all: the library reports the struct
    if got is not None and got not in layouts:
        raise invalid(call.op, f"weight has layout {got.name}; {needs}")
    if isinstance(weight, W4a16PackedWeight):
        if isinstance(weight.packed, torch.Tensor):
            call.tensor(weight.packed, "weight.packed", torch.uint8)
        if isinstance(weight.scale, torch.Tensor):
            call.tensor(weight.scale, "weight.scale", torch.bfloat16)
