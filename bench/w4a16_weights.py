"""Random checkpoint-format INT4 weights and their BF16 dequantization, shared by the W4A16 benchmarks
(grouped, indexed). Run as scripts from bench/, so importable by name."""
import torch

from chordrt import moe_reference as mr


def checkpoint_pool(n, k, experts, seed):
    """Random compressed-tensors weights: int32 [E, N, K/8] (uniform nibbles), BF16 scales ~ U(0.5,1.5)/sqrt(K)/4.6."""
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev)
    gen.manual_seed(seed)
    words = torch.empty((experts, n, k // 8), dtype=torch.int32, device=dev)
    for e in range(experts):
        words[e] = torch.randint(-(2**31), 2**31, (n, k // 8), generator=gen, dtype=torch.int64, device=dev)
    base = 1.0 / (21.5**0.5 * k**0.5)  # unit-variance outputs for unit-variance activations
    scale = (base * (0.5 + torch.rand((experts, n, k // 32), generator=gen, device=dev))).to(torch.bfloat16)
    return words, scale


def dequant_bf16(words, scale):
    """[E, N, K] BF16, one expert at a time (the float32 intermediate of a whole set would be large)."""
    e, n, kw = words.shape
    out = torch.empty((e, n, kw * 8), dtype=torch.bfloat16, device=words.device)
    for i in range(e):
        out[i] = mr.dequantize(torch, "int4", words[i], scale[i], torch.float32).to(torch.bfloat16)
    return out
