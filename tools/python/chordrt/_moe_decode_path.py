"""Choosing the decode path (chordrt.h's "Choosing the decode path" section): the faster of warp decode
and indexed decode for a MoE shape and token count, by chordrt's fitted model of both paths. Host only.
"""

from __future__ import annotations

import ctypes
import enum
from typing import Optional

from ._core import STATUS_T, SizedStruct, check, check_int, enum_value, lib, prototype
from ._warp_decode import WeightFormat

__all__ = ["MoeDecodePath", "MoeShape", "moe_decode_path"]


class MoeDecodePath(enum.IntEnum):
    """chord_moe_decode_path_t."""

    WARP = 0
    INDEXED = 1


class MoeShape(SizedStruct):
    """chord_moe_shape_t."""

    _c_name_ = "chord_moe_shape_t"
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("format", ctypes.c_int32),  # a chord_weight_format_t
        ("hidden", ctypes.c_int32),
        ("intermediate", ctypes.c_int32),
        ("num_experts", ctypes.c_int32),
        ("num_global_experts", ctypes.c_int32),
        ("top_k", ctypes.c_int32),
    ]


prototype("chord_moe_decode_path", STATUS_T, [ctypes.POINTER(MoeShape), ctypes.c_int64, ctypes.POINTER(ctypes.c_int32)])


def moe_decode_path(format, hidden: int, intermediate: int, num_experts: int, top_k: int, num_tokens: int,
                    num_global_experts: Optional[int] = None) -> MoeDecodePath:
    """chord_moe_decode_path(): the faster decode path for `num_tokens` tokens of a MoE block with
    `num_experts` local experts of hidden size H and per-GPU intermediate size I (num_global_experts: the
    ids topk_ids may hold under expert parallelism, default num_experts)."""
    op = "moe_decode_path"
    shape = MoeShape(
        format=int(enum_value(WeightFormat, format, "format")),
        hidden=check_int(hidden, op, "hidden"),
        intermediate=check_int(intermediate, op, "intermediate"),
        num_experts=check_int(num_experts, op, "num_experts"),
        num_global_experts=check_int(num_experts if num_global_experts is None else num_global_experts, op,
                                     "num_global_experts"),
        top_k=check_int(top_k, op, "top_k"),
    )
    out = ctypes.c_int32()
    check(lib().chord_moe_decode_path(ctypes.byref(shape), check_int(num_tokens, op, "num_tokens"), ctypes.byref(out)))
    return MoeDecodePath(out.value)
