"""The W4A16 indexed family (vLLM routing): packing for a layout, block_m advice and the GEMM."""

from __future__ import annotations

import ctypes
from typing import Optional, Tuple

from ._api import _PackedWeight, _PackSpec, _pack_checkpoint  # TEMPORARY: the W4A16 helpers shared with grouped
from ._core import TorchCall, address, check, check_int, enum_value, flag, invalid, lib, raw_stream, size, torch_module_of
from ._lib import IndexedArgs, IndexedLayout, IndexedPackArgs, IndexedProfile, IndexedWeight

__all__ = ["IndexedPackedWeight", "indexed_weight_sizes", "indexed_pack", "indexed_block_m", "indexed_gemm"]


class IndexedPackedWeight(_PackedWeight):
    """A weight packed by indexed_pack() for one IndexedLayout."""

    __slots__ = ()
    _kind, _kind_enum = "layout", IndexedLayout

    @property
    def layout(self) -> IndexedLayout:
        return IndexedLayout(self.struct.layout)


def indexed_weight_sizes(layout, num_experts: int, n: int, k: int) -> Tuple[int, int]:
    """chord_indexed_weight_sizes(): (packed_bytes, scale_bytes) a weight packed for `layout` needs."""
    op = "indexed_weight_sizes"
    layout = enum_value(IndexedLayout, layout, "layout")
    packed_bytes, scale_bytes = ctypes.c_size_t(), ctypes.c_size_t()
    check(lib().chord_indexed_weight_sizes(int(layout), check_int(num_experts, op, "num_experts"),
                                           check_int(n, op, "n"), check_int(k, op, "k"),
                                           ctypes.byref(packed_bytes), ctypes.byref(scale_bytes)))
    return int(packed_bytes.value), int(scale_bytes.value)


def indexed_pack(weight_packed, weight_scale, layout, stream=None, *, bits: int = 4, group_size: int = 32,
                 symmetric=True, scale_is_bf16=True, packed=None, scale=None, num_experts: Optional[int] = None,
                 n: Optional[int] = None, k: Optional[int] = None, packed_bytes: Optional[int] = None,
                 scale_bytes: Optional[int] = None) -> IndexedPackedWeight:
    """chord_indexed_pack(): the checkpoint weight (as for grouped_pack) in `layout`'s format.

    IndexedLayout.WGMMA serves prefill/mixed steps (any block_m 8..256), IndexedLayout.MMA decode
    (block_m 8..32). Arguments, allocation and stream as grouped_pack()."""
    spec = _PackSpec("layout", IndexedPackArgs, IndexedWeight, "chord_indexed_pack", indexed_weight_sizes,
                     IndexedPackedWeight)
    return _pack_checkpoint("indexed_pack", spec, enum_value(IndexedLayout, layout, "layout"), weight_packed,
                            weight_scale, stream, bits, group_size, symmetric, scale_is_bf16, packed, scale,
                            num_experts, n, k, packed_bytes, scale_bytes)


def indexed_block_m(layout, num_experts: int, n: int, k: int, routed_rows: int, profile=IndexedProfile.AUTO) -> int:
    """chord_indexed_block_m(): the block size to run moe_align with for `routed_rows` routes on this
    GPU's experts (rows = tokens * top_k for gate_up and for down alike)."""
    op = "indexed_block_m"
    out = ctypes.c_int32()
    check(lib().chord_indexed_block_m(int(enum_value(IndexedLayout, layout, "layout")), check_int(num_experts, op,
                                      "num_experts"), check_int(n, op, "n"), check_int(k, op, "k"),
                                      check_int(routed_rows, op, "routed_rows"),
                                      int(enum_value(IndexedProfile, profile, "profile")), ctypes.byref(out)))
    return int(out.value)


def _struct(weight, op: str) -> IndexedWeight:
    if isinstance(weight, IndexedPackedWeight):
        return weight.struct
    if isinstance(weight, IndexedWeight):
        return weight
    raise invalid(op, f"weight must be an IndexedPackedWeight (from indexed_pack) or an IndexedWeight, got "
                       f"{type(weight).__name__}")


def indexed_gemm(a, weight, sorted_token_ids, expert_ids, num_tokens_post_padded, top_k: int, block_m: int,
                 out=None, stream=None, *, validate=False, num_tokens: Optional[int] = None,
                 sorted_token_ids_capacity: Optional[int] = None, expert_ids_capacity: Optional[int] = None):
    """chord_indexed_gemm(): out[r] = a[r // top_k] @ W[e]^T for every route r of a block of expert e >= 0.

    torch: a bf16 [M, K]; sorted_token_ids / expert_ids int32 1-D buffers as moe_align (or vLLM's
    moe_align_block_size) fills them, over-allocated allowed; num_tokens_post_padded int32 [>= 1] on the
    device; out bf16 [M*top_k, N] (allocated with torch.empty when not given, and returned). gate_up:
    top_k = topk; down: a = the [M*topk, I] activations with top_k = 1. validate=True reads the routing
    back and raises on its first bad entry (synchronizes: not while capturing).
    Raw pointers: num_tokens and both capacities must be given; returns None.
    """
    op = "indexed_gemm"
    w = _struct(weight, op)
    top_k = check_int(top_k, op, "top_k")
    block_m = check_int(block_m, op, "block_m")
    validate = flag(validate, op, "validate")
    torch = torch_module_of(a, sorted_token_ids, expert_ids, num_tokens_post_padded, out)
    if torch is None:
        args = IndexedArgs(
            a=address(a, op, "a"),
            num_tokens=size(num_tokens, op, "num_tokens"),
            top_k=top_k,
            block_m=block_m,
            weight=ctypes.pointer(w),
            sorted_token_ids=address(sorted_token_ids, op, "sorted_token_ids"),
            sorted_token_ids_capacity=size(sorted_token_ids_capacity, op, "sorted_token_ids_capacity"),
            expert_ids=address(expert_ids, op, "expert_ids"),
            expert_ids_capacity=size(expert_ids_capacity, op, "expert_ids_capacity"),
            num_tokens_post_padded=address(num_tokens_post_padded, op, "num_tokens_post_padded"),
            validate=validate,
            out=address(out, op, "out"),
        )
        check(lib().chord_indexed_gemm(ctypes.byref(args), raw_stream(stream)))
        return None

    call = TorchCall(torch, op, stream)
    call.tensor(a, "a", torch.bfloat16, ndim=2)
    if isinstance(weight, IndexedPackedWeight):
        for name, buf, dtype in (("weight.packed", weight.packed, torch.uint8), ("weight.scale", weight.scale,
                                                                                  torch.bfloat16)):
            if isinstance(buf, torch.Tensor):
                call.tensor(buf, name, dtype)
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
    with call.guard():
        indexed_gemm(a.data_ptr(), w, sorted_token_ids.data_ptr(), expert_ids.data_ptr(),
                     num_tokens_post_padded.data_ptr(), top_k, block_m, out.data_ptr(), call.stream(),
                     validate=validate, num_tokens=rows, sorted_token_ids_capacity=sorted_token_ids.numel(),
                     expert_ids_capacity=expert_ids.numel())
    return out
