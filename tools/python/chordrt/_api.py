"""Pythonic wrappers of the runtime-level calls and of the MoE glue operations.

Operations take either torch tensors (CUDA, contiguous, the documented dtypes; outputs are allocated
when not given and the call is enqueued on torch's current stream of the tensors' device) or raw
integer device addresses with explicit sizes (for non-torch users; ``stream`` is then a raw CUstream,
default 0). torch is never imported here: a tensor argument implies the caller already imported it.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Optional, Tuple

from ._lib import (
    ChordError,
    GroupedMode,
    GroupedPackArgs,
    GroupedWeight,
    MoeAlignOptions,
    MoeCombineOptions,
    PrewarmSummary,
    WarpDecodeMoeArgs,
    WeightFormat,
    RuntimeInfo,
    Status,
    check,
    lib,
)

__all__ = [
    "version",
    "abi_version",
    "runtime_info",
    "prewarm_model",
    "moe_align_sorted_capacity",
    "moe_align_expert_ids_capacity",
    "moe_align",
    "silu_and_mul",
    "moe_combine",
    "warp_decode_moe_workspace_size",
    "warp_decode_moe",
    "GroupedPackedWeight",
    "grouped_weight_sizes",
    "grouped_pack",
    "grouped_contiguous",
    "grouped_masked",
]

# ---- runtime ---------------------------------------------------------------------------------------


def version() -> Tuple[int, int, int]:
    """chord_get_version(): (major, minor, patch)."""
    major, minor, patch = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    lib().chord_get_version(ctypes.byref(major), ctypes.byref(minor), ctypes.byref(patch))
    return (major.value, minor.value, patch.value)


def abi_version() -> int:
    """chord_abi_version()."""
    return int(lib().chord_abi_version())


def runtime_info() -> dict:
    """chord_get_runtime_info() as a dict (the struct's fields, booleans as bool, plus nvrtc_available)."""
    info = RuntimeInfo()
    check(lib().chord_get_runtime_info(ctypes.byref(info)))
    return {
        "driver_available": bool(info.driver_available),
        "driver_version": info.driver_version,
        "device_count": info.device_count,
        "nvrtc_available": info.nvrtc_major > 0,
        "nvrtc_major": info.nvrtc_major,
        "nvrtc_minor": info.nvrtc_minor,
        "cache_memory_only": bool(info.cache_memory_only),
        "cache_dir": info.cache_dir.decode("utf-8", "replace") if info.cache_dir else "",
        "kernels_compiled": info.kernels_compiled,
        "disk_hits": info.disk_hits,
        "kernels_loaded": info.kernels_loaded,
    }


def _summary_dict(s: PrewarmSummary) -> dict:
    return {
        "compiled": s.compiled,
        "cached": s.cached,
        "failed": s.failed,
        "total": s.compiled + s.cached + s.failed,
        "median_compile_ms": s.median_compile_ms,
        "max_compile_ms": s.max_compile_ms,
    }


def prewarm_model(model, deployment: str, arch: str = "sm_90a") -> dict:
    """chord_prewarm_model(): compiles into the disk cache every kernel `deployment` of `model` dispatches.

    model is a preset ("kimi-k2", "deepseek-v3") or a path to a Hugging Face config.json. Returns
    {"compiled", "cached", "failed", "total", "median_compile_ms", "max_compile_ms"}; when some kernels
    fail, raises ChordError(COMPILE_FAILED) whose ``summary`` holds that dict.
    """
    s = PrewarmSummary()
    status = lib().chord_prewarm_model(
        _c_string(model, "model"), _c_string(deployment, "deployment"), _c_string(arch, "arch"), ctypes.byref(s)
    )
    summary = _summary_dict(s)
    check(status, summary)
    return summary


def _c_string(value, name: str) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if hasattr(value, "__fspath__"):
        import os

        return os.fsencode(value)
    raise ChordError(Status.INVALID_ARGUMENT, f"{name} must be a str, got {type(value).__name__}")


# ---- MoE glue: shared helpers ----------------------------------------------------------------------


def moe_align_sorted_capacity(num_tokens: int, top_k: int, num_experts: int, block_size: int) -> int:
    """chord_moe_align_sorted_capacity(): elements sorted_token_ids needs."""
    return int(lib().chord_moe_align_sorted_capacity(num_tokens, top_k, num_experts, block_size))


def moe_align_expert_ids_capacity(num_tokens: int, top_k: int, num_experts: int, block_size: int) -> int:
    """Blocks expert_ids needs: ceil(sorted capacity / block_size)."""
    cap = moe_align_sorted_capacity(num_tokens, top_k, num_experts, block_size)
    return -(-cap // block_size) if block_size > 0 else 0


def _invalid(op: str, message: str) -> ChordError:
    return ChordError(Status.INVALID_ARGUMENT, f"{op}: {message}")


def _torch_module_of(*values):
    """torch, when any value is a torch.Tensor (torch is then already imported), else None."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    for v in values:
        if isinstance(v, torch.Tensor):
            return torch
    return None


def _address(value, op: str, name: str) -> int:
    """A raw device address: an int (None = NULL)."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise _invalid(op, f"{name} must be a device address (int) or, with torch, a tensor; got {type(value).__name__}")
    if value < 0:
        raise _invalid(op, f"{name} must be a non-negative address, got {value}")
    return value


def _size(value, op: str, name: str, required: bool = True) -> int:
    if value is None:
        if required:
            raise _invalid(op, f"{name} is required when passing raw device pointers")
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise _invalid(op, f"{name} must be an int, got {type(value).__name__}")
    return value


def _raw_stream(stream) -> int:
    if stream is None:
        return 0
    if hasattr(stream, "cuda_stream"):  # torch.cuda.Stream / ExternalStream
        return int(stream.cuda_stream)
    if isinstance(stream, bool) or not isinstance(stream, int):
        raise ChordError(Status.INVALID_ARGUMENT, f"stream must be a CUstream (int) or a torch.cuda.Stream, got {stream!r}")
    return stream


class _TorchCall:
    """Checks the tensors of one torch-mode call and provides its device, stream and device guard."""

    def __init__(self, torch, op: str, stream):
        self.torch = torch
        self.op = op
        self.device = None
        self._stream = stream

    def tensor(self, t, name: str, dtype, ndim=None, shape=None, min_numel=None):
        torch, op = self.torch, self.op
        if not isinstance(t, torch.Tensor):
            raise _invalid(op, f"{name} must be a torch.Tensor like the other arguments, got {type(t).__name__}")
        if t.dtype != dtype:
            raise _invalid(op, f"{name} must be {dtype}, got {t.dtype}")
        if t.device.type != "cuda":
            raise _invalid(op, f"{name} must be on a CUDA device, got {t.device}")
        if self.device is None:
            self.device = t.device
        elif t.device != self.device:
            raise _invalid(op, f"{name} is on {t.device} but the other tensors are on {self.device}")
        if not t.is_contiguous():
            raise _invalid(op, f"{name} must be contiguous (shape {tuple(t.shape)}, strides {t.stride()})")
        if ndim is not None and t.dim() != ndim:
            raise _invalid(op, f"{name} must have {ndim} dimension(s), got shape {tuple(t.shape)}")
        if shape is not None and tuple(t.shape) != tuple(shape):
            raise _invalid(op, f"{name} must have shape {tuple(shape)}, got {tuple(t.shape)}")
        if min_numel is not None and t.numel() < min_numel:
            raise _invalid(op, f"{name} must have at least {min_numel} elements, got {t.numel()}")
        return t

    def stream(self) -> int:
        if self._stream is not None:
            return _raw_stream(self._stream)
        return int(self.torch.cuda.current_stream(self.device).cuda_stream)

    def guard(self):
        # With the legacy default stream (0) the runtime launches in the current context: make it the
        # tensors' device's primary context.
        return self.torch.cuda.device(self.device)


def _check_int(value, op: str, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _invalid(op, f"{name} must be an int, got {type(value).__name__}")
    return value


def _options_ref(opts):
    """The options argument of a C call: a pointer to the struct, or NULL (the defaults) for None."""
    return ctypes.byref(opts) if opts is not None else None


# ---- moe_align --------------------------------------------------------------------------------------


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
    op = "moe_align"
    num_experts = _check_int(num_experts, op, "num_experts")
    block_size = _check_int(block_size, op, "block_size")
    torch = _torch_module_of(topk_ids, expert_map, sorted_token_ids, expert_ids, num_tokens_post_padded)
    if torch is None:
        opts = None
        if expert_map is not None:
            opts = MoeAlignOptions(expert_map=_address(expert_map, op, "expert_map"))
        check(
            lib().chord_moe_align(
                _address(topk_ids, op, "topk_ids"),
                _size(num_tokens, op, "num_tokens"),
                _size(top_k, op, "top_k"),
                num_experts,
                block_size,
                _address(sorted_token_ids, op, "sorted_token_ids"),
                _size(sorted_token_ids_capacity, op, "sorted_token_ids_capacity"),
                _address(expert_ids, op, "expert_ids"),
                _size(expert_ids_capacity, op, "expert_ids_capacity"),
                _address(num_tokens_post_padded, op, "num_tokens_post_padded"),
                _options_ref(opts),
                _raw_stream(stream),
            )
        )
        return None

    call = _TorchCall(torch, op, stream)
    call.tensor(topk_ids, "topk_ids", torch.int32, ndim=2)
    m, k = topk_ids.shape
    if num_tokens is not None and num_tokens != m:
        raise _invalid(op, f"num_tokens={num_tokens} disagrees with topk_ids of shape {tuple(topk_ids.shape)}")
    if top_k is not None and top_k != k:
        raise _invalid(op, f"top_k={top_k} disagrees with topk_ids of shape {tuple(topk_ids.shape)}")
    if expert_map is not None:
        call.tensor(expert_map, "expert_map", torch.int32, ndim=1, min_numel=max(num_experts, 0))
    if block_size < 1:  # keep the allocation sizes meaningful; the library reports its own range
        raise _invalid(op, f"block_size must be >= 1, got {block_size}")
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
            raise _invalid(op, f"{name}={given} disagrees with the tensor's {numel} elements")
    # An empty topk_ids has no storage (data_ptr() == 0) but the call must still write the outputs; the
    # kernel reads no route then, so any valid device address will do.
    topk_ptr = topk_ids.data_ptr() if topk_ids.numel() else num_tokens_post_padded.data_ptr()
    with call.guard():  # the raw-pointer call on the checked tensors
        moe_align(
            topk_ptr,
            num_experts,
            block_size,
            expert_map=expert_map.data_ptr() if expert_map is not None else None,
            sorted_token_ids=sorted_token_ids.data_ptr(),
            expert_ids=expert_ids.data_ptr(),
            num_tokens_post_padded=num_tokens_post_padded.data_ptr(),
            num_tokens=m,
            top_k=k,
            sorted_token_ids_capacity=sorted_token_ids.numel(),
            expert_ids_capacity=expert_ids.numel(),
            stream=call.stream(),
        )
    return sorted_token_ids, expert_ids, num_tokens_post_padded


# ---- silu_and_mul -----------------------------------------------------------------------------------


def silu_and_mul(input, output=None, *, rows: Optional[int] = None, intermediate: Optional[int] = None, stream=None):
    """chord_silu_and_mul(): output = silu(gate) * up, gate and up the halves of input's last dimension.

    torch: input bf16 [..., 2*I]; output bf16 [..., I] (allocated when not given, and returned).
    Raw pointers: rows and intermediate must be given; returns None.
    """
    op = "silu_and_mul"
    torch = _torch_module_of(input, output)
    if torch is None:
        check(
            lib().chord_silu_and_mul(
                _address(input, op, "input"),
                _address(output, op, "output"),
                _size(rows, op, "rows"),
                _size(intermediate, op, "intermediate"),
                _raw_stream(stream),
            )
        )
        return None

    call = _TorchCall(torch, op, stream)
    call.tensor(input, "input", torch.bfloat16)
    if input.dim() < 1 or input.shape[-1] % 2 != 0:
        raise _invalid(op, f"input's last dimension must be 2*intermediate (even), got shape {tuple(input.shape)}")
    inter = input.shape[-1] // 2
    n_rows = input.numel() // input.shape[-1] if input.shape[-1] else 0
    if intermediate is not None and intermediate != inter:
        raise _invalid(op, f"intermediate={intermediate} disagrees with input of shape {tuple(input.shape)}")
    if rows is not None and rows != n_rows:
        raise _invalid(op, f"rows={rows} disagrees with input of shape {tuple(input.shape)}")
    out_shape = tuple(input.shape[:-1]) + (inter,)
    if output is None:
        output = torch.empty(out_shape, dtype=torch.bfloat16, device=call.device)
    call.tensor(output, "output", torch.bfloat16, shape=out_shape)
    if n_rows == 0 or inter == 0:
        if inter == 0:
            raise _invalid(op, f"intermediate must be >= 1, got input of shape {tuple(input.shape)}")
        return output  # nothing to compute (and empty tensors have no storage to pass)
    with call.guard():  # the raw-pointer call on the checked tensors
        silu_and_mul(input.data_ptr(), output.data_ptr(), rows=n_rows, intermediate=inter, stream=call.stream())
    return output


# ---- moe_combine ------------------------------------------------------------------------------------


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
    op = "moe_combine"
    torch = _torch_module_of(expert_rows, topk_weights, output, topk_ids, expert_map)
    if torch is None:
        opts = None
        if topk_ids is not None or expert_map is not None:
            # num_experts is needed with both halves; with one, the library reports the missing one.
            both = topk_ids is not None and expert_map is not None
            opts = MoeCombineOptions(
                topk_ids=_address(topk_ids, op, "topk_ids"),
                expert_map=_address(expert_map, op, "expert_map"),
                num_experts=_size(num_experts, op, "num_experts", required=both),
            )
        check(
            lib().chord_moe_combine(
                _address(expert_rows, op, "expert_rows"),
                _address(topk_weights, op, "topk_weights"),
                _address(output, op, "output"),
                _size(num_tokens, op, "num_tokens"),
                _size(top_k, op, "top_k"),
                _size(hidden, op, "hidden"),
                _options_ref(opts),
                _raw_stream(stream),
            )
        )
        return None

    call = _TorchCall(torch, op, stream)
    call.tensor(topk_weights, "topk_weights", torch.float32, ndim=2)
    t, k = topk_weights.shape
    call.tensor(expert_rows, "expert_rows", torch.bfloat16)
    if expert_rows.dim() == 3 and tuple(expert_rows.shape[:2]) == (t, k):
        h = expert_rows.shape[2]
    elif expert_rows.dim() == 2 and expert_rows.shape[0] == t * k:
        h = expert_rows.shape[1]
    else:
        raise _invalid(
            op,
            f"expert_rows must have shape [num_tokens*top_k, hidden] = [{t * k}, hidden] (or [{t}, {k}, hidden]) "
            f"to match topk_weights {tuple(topk_weights.shape)}, got {tuple(expert_rows.shape)}",
        )
    for name, given, actual in (("num_tokens", num_tokens, t), ("top_k", top_k, k), ("hidden", hidden, h)):
        if given is not None and given != actual:
            raise _invalid(op, f"{name}={given} disagrees with the tensors' shapes ({actual})")
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
                raise _invalid(op, f"num_experts={num_experts} exceeds expert_map's {expert_map.numel()} entries")
        num_experts = _size(num_experts, op, "num_experts", required=False)
    if t == 0:
        return output  # nothing to compute (and empty tensors have no storage to pass)
    with call.guard():  # the raw-pointer call on the checked tensors
        moe_combine(
            expert_rows.data_ptr(),
            topk_weights.data_ptr(),
            output.data_ptr(),
            topk_ids=ids_ptr,
            expert_map=map_ptr,
            num_experts=num_experts,
            num_tokens=t,
            top_k=k,
            hidden=h,
            stream=call.stream(),
        )
    return output


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
    torch = _torch_module_of(x, topk_ids, topk_weights, w13, w13_scale, w2, w2_scale, expert_map, workspace, output)
    if torch is None:
        args = WarpDecodeMoeArgs(
            format=int(WeightFormat(_size(weight_format, op, "weight_format"))),
            num_tokens=_size(num_tokens, op, "num_tokens"),
            hidden=_size(hidden, op, "hidden"),
            intermediate=_size(intermediate, op, "intermediate"),
            num_experts=_size(num_experts, op, "num_experts"),
            top_k=_size(top_k, op, "top_k"),
            x=_address(x, op, "x"),
            topk_ids=_address(topk_ids, op, "topk_ids"),
            topk_weights=_address(topk_weights, op, "topk_weights"),
            w13=_address(w13, op, "w13"),
            w13_scale=_address(w13_scale, op, "w13_scale"),
            w2=_address(w2, op, "w2"),
            w2_scale=_address(w2_scale, op, "w2_scale"),
            expert_map=_address(expert_map, op, "expert_map"),
            num_global_experts=_size(num_global_experts, op, "num_global_experts", required=expert_map is not None),
            workspace=_address(workspace, op, "workspace"),
            workspace_bytes=_size(workspace_bytes, op, "workspace_bytes"),
            output=_address(output, op, "output"),
        )
        check(lib().chord_warp_decode_moe(ctypes.byref(args), _raw_stream(stream)))
        return None

    call = _TorchCall(torch, op, stream)
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
        raise _invalid(op, f"w13 must be int32 (INT4 group-32) or uint8 / float8_e4m3fn (MXFP8), got {w13.dtype}")
    if weight_format is not None and WeightFormat(weight_format) != fmt:
        raise _invalid(op, f"weight_format={WeightFormat(weight_format).name} disagrees with w13's dtype {w13.dtype}")
    call.tensor(w13, "w13", w13.dtype, ndim=3)
    e, two_i = w13.shape[0], w13.shape[1]
    if two_i % 2 != 0 or h % 32 != 0:
        raise _invalid(op, f"w13 must be [E, 2I, H/{per_k}] with x [M, H] (H a multiple of 32), got {tuple(w13.shape)}")
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
            raise _invalid(op, f"{name}={given} disagrees with the tensors' shapes ({actual})")
    map_ptr = None
    if expert_map is not None:
        call.tensor(expert_map, "expert_map", torch.int32, ndim=1)
        map_ptr = expert_map.data_ptr()
        if num_global_experts is None:
            num_global_experts = expert_map.numel()
        elif num_global_experts > expert_map.numel():
            raise _invalid(op, f"num_global_experts={num_global_experts} exceeds expert_map's {expert_map.numel()} entries")
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


def _enum(cls, value, what: str):
    """A member of the IntEnum `cls` from a member, an int or a name; ValueError otherwise."""
    if isinstance(value, str):
        try:
            return cls[value.upper()]
        except KeyError:
            names = ", ".join(m.name.lower() for m in cls)
            raise ValueError(f"{value!r} is not a valid {cls.__name__} ({names})") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} must be a {cls.__name__}, an int or a name, got {type(value).__name__}")
    return cls(value)


def _grouped_mode(mode) -> GroupedMode:
    return _enum(GroupedMode, mode, "mode")


def _flag(value, op: str, name: str) -> int:
    """A C int flag from a bool or an int (an int is passed on as it is, for the library to judge)."""
    if isinstance(value, bool):
        return int(value)
    return _check_int(value, op, name)


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
            _check_int(num_experts, op, "num_experts"),
            _check_int(n, op, "n"),
            _check_int(k, op, "k"),
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
        _check_int(bits, op, "bits"),
        _check_int(group_size, op, "group_size"),
        _flag(symmetric, op, "symmetric"),
        _flag(scale_is_bf16, op, "scale_is_bf16"),
    )
    torch = _torch_module_of(weight_packed, weight_scale, packed, scale)
    if torch is None:
        args = spec.args_cls(
            num_experts=_size(num_experts, op, "num_experts"),
            n=_size(n, op, "n"),
            k=_size(k, op, "k"),
            bits=scheme[0],
            group_size=scheme[1],
            symmetric=scheme[2],
            scale_is_bf16=scheme[3],
            weight_packed=_address(weight_packed, op, "weight_packed"),
            weight_scale=_address(weight_scale, op, "weight_scale"),
            packed=_address(packed, op, "packed"),
            packed_bytes=_size(packed_bytes, op, "packed_bytes"),
            scale=_address(scale, op, "scale"),
            scale_bytes=_size(scale_bytes, op, "scale_bytes"),
        )
        setattr(args, spec.kind_field, int(kind))
        weight = spec.weight_cls()
        check(getattr(lib(), spec.c_function)(ctypes.byref(args), ctypes.byref(weight), _raw_stream(stream)))
        return spec.wrapper(weight, packed, scale)

    call = _TorchCall(torch, op, stream)
    supported = scheme == _GROUPED_SCHEME
    call.tensor(weight_packed, "weight_packed", torch.int32, ndim=3)
    e, rows, words = weight_packed.shape
    kk = words * 8 if k is None else _check_int(k, op, "k")
    for name, given, actual in (("num_experts", num_experts, e), ("n", n, rows)):
        if given is not None and given != actual:
            raise _invalid(op, f"{name}={given} disagrees with weight_packed of shape {tuple(weight_packed.shape)}")
    if supported:
        if kk != words * 8:
            raise _invalid(op, f"k={kk} disagrees with weight_packed of shape {tuple(weight_packed.shape)} (int32 "
                               f"[E, N, K/8])")
        if kk % 32 != 0:
            raise _invalid(op, f"K must be a multiple of the group size 32, got weight_packed of shape "
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
            raise _invalid(op, f"{name}={given} disagrees with the tensor's {actual} bytes")
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
    raise _invalid(op, f"weight must be a GroupedPackedWeight (from grouped_pack) or a GroupedWeight, got "
                       f"{type(weight).__name__}")


def _check_grouped_weight(call: _TorchCall, weight, w: GroupedWeight, mode: GroupedMode) -> None:
    """torch mode: the weight is for `mode` and its buffers (when tensors) are on the call's device."""
    op, torch = call.op, call.torch
    try:
        got = GroupedMode(w.mode).name.lower()
    except ValueError:
        got = None  # not a mode at all: the library reports the struct
    if got is not None and w.mode != mode:
        raise _invalid(op, f"weight was packed for {got} mode; {op} needs a weight packed with mode "
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
    torch = _torch_module_of(a, m_indices, out)
    if torch is None:
        check(
            lib().chord_grouped_contiguous(
                _address(a, op, "a"),
                _size(m, op, "m"),
                ctypes.byref(w),
                _address(m_indices, op, "m_indices"),
                _address(out, op, "out"),
                _raw_stream(stream),
            )
        )
        return None

    call = _TorchCall(torch, op, stream)
    call.tensor(a, "a", torch.bfloat16, ndim=2)
    _check_grouped_weight(call, weight, w, GroupedMode.CONTIGUOUS)
    rows, kk = a.shape
    if kk != w.k:
        raise _invalid(op, f"a must be [m, K] with K = the weight's k ({w.k}), got shape {tuple(a.shape)}")
    if m is not None and m != rows:
        raise _invalid(op, f"m={m} disagrees with a of shape {tuple(a.shape)}")
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
    expected_m = _check_int(expected_m, op, "expected_m")
    torch = _torch_module_of(a, masked_m, out)
    if torch is None:
        check(
            lib().chord_grouped_masked(
                _address(a, op, "a"),
                _size(max_m, op, "max_m"),
                ctypes.byref(w),
                _address(masked_m, op, "masked_m"),
                expected_m,
                _address(out, op, "out"),
                _raw_stream(stream),
            )
        )
        return None

    call = _TorchCall(torch, op, stream)
    call.tensor(a, "a", torch.bfloat16)
    _check_grouped_weight(call, weight, w, GroupedMode.MASKED)
    g = w.num_experts
    if g < 1:
        raise _invalid(op, f"the weight has {g} experts")
    if a.dim() == 3 and a.shape[0] == g:
        rows_per, kk = a.shape[1], a.shape[2]
    elif a.dim() == 2 and a.shape[0] % g == 0:
        rows_per, kk = a.shape[0] // g, a.shape[1]
    else:
        raise _invalid(op, f"a must be [G*max_m, K] or [G, max_m, K] with G = the weight's num_experts ({g}), "
                           f"got shape {tuple(a.shape)}")
    if kk != w.k:
        raise _invalid(op, f"a's last dimension must be the weight's k ({w.k}), got shape {tuple(a.shape)}")
    if max_m is not None and max_m != rows_per:
        raise _invalid(op, f"max_m={max_m} disagrees with a of shape {tuple(a.shape)} (G = {g})")
    call.tensor(masked_m, "masked_m", torch.int32, shape=(g,))
    if out is None:
        out = torch.empty((g * rows_per, w.n), dtype=torch.bfloat16, device=call.device)
    call.tensor(out, "out", torch.bfloat16)
    if tuple(out.shape) not in ((g * rows_per, w.n), (g, rows_per, w.n)):
        raise _invalid(op, f"out must have shape {(g * rows_per, w.n)} (or {(g, rows_per, w.n)}), got "
                           f"{tuple(out.shape)}")
    with call.guard():
        grouped_masked(a.data_ptr(), w, masked_m.data_ptr(), expected_m, out.data_ptr(), call.stream(),
                       max_m=rows_per)
    return out
