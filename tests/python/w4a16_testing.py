"""Shared by the W4A16 GPU tests (grouped, indexed): random checkpoint weights, activations, the FP32
dequantized reference weights and the output check (written rows close to the reference, all other
rows still the NaN poison). Imported only by modules that already skipped without torch + CUDA."""

from __future__ import annotations

import contextlib

import pytest
import torch

from chordrt import moe_reference as mr

DEV = torch.device("cuda", torch.cuda.current_device())
# BF16 activations and output, FP32 accumulation of exact dequantized products (the weights may pass
# through BF16 on the way: (nibble - 8) * scale rounded once).
MAX_REL_ERR = 1e-2
MIN_COSINE = 0.999


def require_sm90(chord, what):
    """Skips unless chordrt sees the GPU torch sees and it is compute capability 9.x (sm_90a kernels)."""
    info = chord.runtime_info()
    if not info["driver_available"] or info["device_count"] < 1:
        pytest.skip(f"torch sees a GPU but chordrt does not: {info}")
    major, minor = torch.cuda.get_device_capability(DEV)
    if major != 9:
        pytest.skip(f"{what} sm_90a kernels; this device is sm_{major}{minor}")


def checkpoint_weight(experts, n, k, seed):
    """Random compressed-tensors pack-quantized weights on the GPU: int32 [E, N, K/8] (every nibble
    uniform in 0..15, i.e. q in -8..7) and BF16 scales [E, N, K/32] ~ U(0.5, 1.5) * 0.01."""
    gen = torch.Generator(device=DEV)
    gen.manual_seed(seed)
    words = torch.empty((experts, n, k // 8), dtype=torch.int32, device=DEV)
    for e in range(experts):  # int64 draws one expert at a time (the int32 range needs int64 bounds)
        words[e] = torch.randint(-(2**31), 2**31, (n, k // 8), generator=gen, dtype=torch.int64, device=DEV)
    scale = ((0.5 + torch.rand((experts, n, k // 32), generator=gen, device=DEV)) * 0.01).to(torch.bfloat16)
    return words, scale


def activations(rows, k, seed):
    gen = torch.Generator(device=DEV)
    gen.manual_seed(seed)
    return torch.randn((rows, k), generator=gen, device=DEV).to(torch.bfloat16)


@contextlib.contextmanager
def exact_fp32():
    """float32 matmuls in float32 (no TF32), restoring the caller's setting."""
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def dequantized(words, scale, e):
    return mr.dequantize(torch, "int4", words[e], scale[e], torch.float32)  # [N, K]


def check(out, ref, written, label):
    """Written rows finite and close to ref; every other row still the NaN poison. Returns the stats."""
    out = out.reshape(-1, out.shape[-1]).float()
    assert out.shape == ref.shape, (out.shape, ref.shape)
    untouched = out[~written]
    bad = (~torch.isnan(untouched)).any(dim=1).sum().item() if untouched.numel() else 0
    assert bad == 0, f"{label}: {bad} of {untouched.shape[0]} rows that must stay untouched were written"
    got = out[written]
    nonfinite = (~torch.isfinite(got)).any(dim=1).sum().item() if got.numel() else 0
    assert nonfinite == 0, f"{label}: {nonfinite} of {got.shape[0]} computed rows are not finite (unwritten, or " \
                           f"a skipped NaN row leaked into them)"
    stats = mr.error_stats(torch, got, ref[written])
    print(f"{label}: rows {got.shape[0]}/{out.shape[0]} rel_err {stats['rel_err']:.3e} cosine {stats['cosine']:.6f} "
          f"max_abs {stats['max_abs']:.3e}")
    assert stats["rel_err"] < MAX_REL_ERR and stats["cosine"] > MIN_COSINE, (label, stats)
    return stats


def nan_out(rows, n):
    return torch.full((rows, n), float("nan"), dtype=torch.bfloat16, device=DEV)
