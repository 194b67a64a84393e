"""TEMPORARY: the warp decode and W4A16 grouped families, until each moves into a module of its own
(``_warp_decode.py``, ``_grouped.py``); the W4A16 packing helpers here are shared with ``_indexed.py``.

Operations take either torch tensors (CUDA, contiguous, the documented dtypes; outputs are allocated
when not given and the call is enqueued on torch's current stream of the tensors' device) or raw
integer device addresses with explicit sizes (for non-torch users; ``stream`` is then a raw CUstream,
default 0).
"""

from __future__ import annotations

import ctypes
from typing import Optional, Tuple

from ._core import (
    TorchCall,
    address,
    check,
    check_int,
    enum_value,
    flag,
    invalid,
    lib,
    raw_stream,
    size,
    torch_module_of,
)
from ._lib import GroupedMode, GroupedPackArgs, GroupedWeight, WarpDecodeMoeArgs, WeightFormat

__all__ = [
    "warp_decode_moe_workspace_size",
    "warp_decode_moe",
    "GroupedPackedWeight",
    "grouped_weight_sizes",
    "grouped_pack",
    "grouped_contiguous",
    "grouped_masked",
]


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
        return None

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
        warp_decode_moe(
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


# ---- W4A16 grouped MoE GEMMs -------------------------------------------------------------------------

# The checkpoint scheme the grouped family serves (compressed-tensors pack-quantized, Kimi K2).
_GROUPED_SCHEME = (4, 32, 1, 1)  # bits, group_size, symmetric, scale_is_bf16


def _grouped_mode(mode) -> GroupedMode:
    return enum_value(GroupedMode, mode, "mode")


class _PackedWeight:
    """A weight packed by one W4A16 family's packer: ``struct`` is the filled C weight struct the GEMMs
    receive; ``packed`` and ``scale`` are the device buffers it points into, owned here (torch tensors, or
    raw addresses when packed in raw-pointer mode). Keep it alive as long as the GEMMs use it; the struct
    must not be edited (the library checks its tag). Subclasses name the struct's kind field and enum."""

    __slots__ = ("struct", "packed", "scale")
    _kind, _kind_enum = "", None

    def __init__(self, struct, packed, scale):
        self.struct = struct
        self.packed = packed
        self.scale = scale

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
        kind = self._kind_enum(getattr(self.struct, self._kind)).name
        return f"{type(self).__name__}({self._kind}={kind}, num_experts={self.num_experts}, n={self.n}, k={self.k})"


class GroupedPackedWeight(_PackedWeight):
    """A weight packed by grouped_pack() for one GroupedMode (``packed``: uint8 in the mode's layout,
    ``scale``: bf16 [E, K/32, N] flattened)."""

    __slots__ = ()
    _kind, _kind_enum = "mode", GroupedMode

    @property
    def mode(self) -> GroupedMode:
        return GroupedMode(self.struct.mode)


def grouped_weight_sizes(mode, num_experts: int, n: int, k: int) -> Tuple[int, int]:
    """chord_grouped_weight_sizes(): (packed_bytes, scale_bytes) a weight packed for `mode` needs.

    Raises ChordError(INVALID_ARGUMENT) for a shape the mode cannot serve (N a multiple of 128; K a
    multiple of 64 for contiguous, 128 for masked)."""
    op = "grouped_weight_sizes"
    mode = _grouped_mode(mode)
    packed_bytes, scale_bytes = ctypes.c_size_t(), ctypes.c_size_t()
    check(
        lib().chord_grouped_weight_sizes(
            int(mode),
            check_int(num_experts, op, "num_experts"),
            check_int(n, op, "n"),
            check_int(k, op, "k"),
            ctypes.byref(packed_bytes),
            ctypes.byref(scale_bytes),
        )
    )
    return int(packed_bytes.value), int(scale_bytes.value)


class _PackSpec:
    """What differs between the W4A16 families' packers: the kind field of the args ("mode", "layout"),
    the ctypes structs, the C function, the sizes query and the wrapper class returned."""

    def __init__(self, kind_field, args_cls, weight_cls, c_function, sizes, wrapper):
        self.kind_field, self.args_cls, self.weight_cls = kind_field, args_cls, weight_cls
        self.c_function, self.sizes, self.wrapper = c_function, sizes, wrapper


def _pack_checkpoint(op, spec: _PackSpec, kind, weight_packed, weight_scale, stream, bits, group_size, symmetric,
                     scale_is_bf16, packed, scale, num_experts, n, k, packed_bytes, scale_bytes):
    scheme = (
        check_int(bits, op, "bits"),
        check_int(group_size, op, "group_size"),
        flag(symmetric, op, "symmetric"),
        flag(scale_is_bf16, op, "scale_is_bf16"),
    )
    torch = torch_module_of(weight_packed, weight_scale, packed, scale)
    if torch is None:
        args = spec.args_cls(
            num_experts=size(num_experts, op, "num_experts"),
            n=size(n, op, "n"),
            k=size(k, op, "k"),
            bits=scheme[0],
            group_size=scheme[1],
            symmetric=scheme[2],
            scale_is_bf16=scheme[3],
            weight_packed=address(weight_packed, op, "weight_packed"),
            weight_scale=address(weight_scale, op, "weight_scale"),
            packed=address(packed, op, "packed"),
            packed_bytes=size(packed_bytes, op, "packed_bytes"),
            scale=address(scale, op, "scale"),
            scale_bytes=size(scale_bytes, op, "scale_bytes"),
        )
        setattr(args, spec.kind_field, int(kind))
        weight = spec.weight_cls()
        check(getattr(lib(), spec.c_function)(ctypes.byref(args), ctypes.byref(weight), raw_stream(stream)))
        return spec.wrapper(weight, packed, scale)

    call = TorchCall(torch, op, stream)
    supported = scheme == _GROUPED_SCHEME
    call.tensor(weight_packed, "weight_packed", torch.int32, ndim=3)
    e, rows, words = weight_packed.shape
    kk = words * 8 if k is None else check_int(k, op, "k")
    for name, given, actual in (("num_experts", num_experts, e), ("n", n, rows)):
        if given is not None and given != actual:
            raise invalid(op, f"{name}={given} disagrees with weight_packed of shape {tuple(weight_packed.shape)}")
    if supported:
        if kk != words * 8:
            raise invalid(op, f"k={kk} disagrees with weight_packed of shape {tuple(weight_packed.shape)} (int32 "
                               f"[E, N, K/8])")
        if kk % 32 != 0:
            raise invalid(op, f"K must be a multiple of the group size 32, got weight_packed of shape "
                               f"{tuple(weight_packed.shape)} (K = {kk})")
        call.tensor(weight_scale, "weight_scale", torch.bfloat16, shape=(e, rows, kk // 32))
    else:  # the library rejects the scheme: only the basics are checked here
        call.tensor(weight_scale, "weight_scale", getattr(weight_scale, "dtype", None), ndim=3)
    need_packed, need_scale = spec.sizes(kind, e, rows, kk)
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
        raw = _pack_checkpoint(op, spec, kind, weight_packed.data_ptr(), weight_scale.data_ptr(), call.stream(),
                               scheme[0], scheme[1], scheme[2], scheme[3], packed.data_ptr(), scale.data_ptr(), e,
                               rows, kk, packed.numel(), 2 * scale.numel())
    return spec.wrapper(raw.struct, packed, scale)


def grouped_pack(
    weight_packed,
    weight_scale,
    mode,
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
) -> GroupedPackedWeight:
    """chord_grouped_pack(): converts a checkpoint weight into `mode`'s layout; returns a GroupedPackedWeight.

    torch: weight_packed int32 [E, N, K/8] (8 nibbles per word, least significant first along K, value
    = (nibble - 8) * scale), weight_scale bf16 [E, N, K/32]. The packed (uint8) and scale (bf16) buffers
    are allocated (grouped_weight_sizes()) when not given. The packer runs on the stream (torch's
    current one by default): the weight is usable from that point of the stream on, and the checkpoint
    tensors must stay alive until the stream gets there (automatic on torch's current stream).
    bits / group_size / symmetric / scale_is_bf16 describe the checkpoint's scheme; the library serves
    only the default (4, 32, True, True) and rejects anything else with CHORD_ERROR_UNSUPPORTED (the
    layout checks here apply to the default scheme only).
    Raw pointers: num_experts, n, k, packed, packed_bytes, scale and scale_bytes must be given.
    """
    spec = _PackSpec("mode", GroupedPackArgs, GroupedWeight, "chord_grouped_pack", grouped_weight_sizes,
                     GroupedPackedWeight)
    return _pack_checkpoint("grouped_pack", spec, _grouped_mode(mode), weight_packed, weight_scale, stream, bits,
                            group_size, symmetric, scale_is_bf16, packed, scale, num_experts, n, k, packed_bytes,
                            scale_bytes)


def _grouped_struct(weight, op: str) -> GroupedWeight:
    if isinstance(weight, GroupedPackedWeight):
        return weight.struct
    if isinstance(weight, GroupedWeight):
        return weight
    raise invalid(op, f"weight must be a GroupedPackedWeight (from grouped_pack) or a GroupedWeight, got "
                       f"{type(weight).__name__}")


def _check_grouped_weight(call: TorchCall, weight, w: GroupedWeight, mode: GroupedMode) -> None:
    """torch mode: the weight is for `mode` and its buffers (when tensors) are on the call's device."""
    op, torch = call.op, call.torch
    try:
        got = GroupedMode(w.mode).name.lower()
    except ValueError:
        got = None  # not a mode at all: the library reports the struct
    if got is not None and w.mode != mode:
        raise invalid(op, f"weight was packed for {got} mode; {op} needs a weight packed with mode "
                           f"{mode.name.lower()} (grouped_pack(..., GroupedMode.{mode.name}))")
    if isinstance(weight, GroupedPackedWeight):
        if isinstance(weight.packed, torch.Tensor):
            call.tensor(weight.packed, "weight.packed", torch.uint8)
        if isinstance(weight.scale, torch.Tensor):
            call.tensor(weight.scale, "weight.scale", torch.bfloat16)


def grouped_contiguous(a, weight, m_indices, out=None, stream=None, *, m: Optional[int] = None):
    """chord_grouped_contiguous(): out[r] = a[r] @ W[m_indices[r]]^T for each row r (prefill).

    weight: a GroupedPackedWeight packed with GroupedMode.CONTIGUOUS. torch: a bf16 [m, K]; m_indices
    int32 [m]: each expert's rows contiguous and padded to a multiple of 128 with -1 (rows whose id is
    -1 or outside [0, E) are neither computed nor written); out bf16 [m, N] (allocated with torch.empty
    when not given, so padding rows hold garbage then) is returned.
    Raw pointers: m must be given; returns None.
    """
    op = "grouped_contiguous"
    w = _grouped_struct(weight, op)
    torch = torch_module_of(a, m_indices, out)
    if torch is None:
        check(
            lib().chord_grouped_contiguous(
                address(a, op, "a"),
                size(m, op, "m"),
                ctypes.byref(w),
                address(m_indices, op, "m_indices"),
                address(out, op, "out"),
                raw_stream(stream),
            )
        )
        return None

    call = TorchCall(torch, op, stream)
    call.tensor(a, "a", torch.bfloat16, ndim=2)
    _check_grouped_weight(call, weight, w, GroupedMode.CONTIGUOUS)
    rows, kk = a.shape
    if kk != w.k:
        raise invalid(op, f"a must be [m, K] with K = the weight's k ({w.k}), got shape {tuple(a.shape)}")
    if m is not None and m != rows:
        raise invalid(op, f"m={m} disagrees with a of shape {tuple(a.shape)}")
    call.tensor(m_indices, "m_indices", torch.int32, shape=(rows,))
    if out is None:
        out = torch.empty((rows, w.n), dtype=torch.bfloat16, device=call.device)
    call.tensor(out, "out", torch.bfloat16, shape=(rows, w.n))
    with call.guard():  # m == 0 too: the library still checks the weight
        grouped_contiguous(a.data_ptr(), w, m_indices.data_ptr(), out.data_ptr(), call.stream(), m=rows)
    return out


def grouped_masked(a, weight, masked_m, expected_m: int, out=None, stream=None, *, max_m: Optional[int] = None):
    """chord_grouped_masked(): for each group g (expert g of the weight), out rows = a rows @ W[g]^T for the
    first masked_m[g] rows of g's block of max_m rows (decode).

    weight: a GroupedPackedWeight packed with GroupedMode.MASKED (G = its num_experts). torch: a bf16
    [G*max_m, K] or [G, max_m, K]; masked_m int32 [G] on the device (clamped to [0, max_m], never read
    on the host); expected_m (> 0) the typical count, which only picks the kernel configuration; out
    bf16 [G*max_m, N] (or [G, max_m, N] when given so), allocated with torch.empty when not given, and
    returned: rows past each group's count are left untouched.
    Raw pointers: max_m must be given; returns None.
    """
    op = "grouped_masked"
    w = _grouped_struct(weight, op)
    expected_m = check_int(expected_m, op, "expected_m")
    torch = torch_module_of(a, masked_m, out)
    if torch is None:
        check(
            lib().chord_grouped_masked(
                address(a, op, "a"),
                size(max_m, op, "max_m"),
                ctypes.byref(w),
                address(masked_m, op, "masked_m"),
                expected_m,
                address(out, op, "out"),
                raw_stream(stream),
            )
        )
        return None

    call = TorchCall(torch, op, stream)
    call.tensor(a, "a", torch.bfloat16)
    _check_grouped_weight(call, weight, w, GroupedMode.MASKED)
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
    with call.guard():
        grouped_masked(a.data_ptr(), w, masked_m.data_ptr(), expected_m, out.data_ptr(), call.stream(),
                       max_m=rows_per)
    return out
