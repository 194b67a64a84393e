"""Random MoE weights in the formats chordrt reads, and high-precision references (needs torch).

Used by the GPU tests and the benchmarks, so both check and time the same function:

    w = random_moe_weights(torch, "int4", experts=48, hidden=7168, intermediate=2048, device="cuda")
    ids, weights = random_routing(torch, tokens=8, top_k=8, global_experts=384, device="cuda")
    ref = reference_moe(torch, x, ids, weights, w, expert_map=emap)                 # float64
    alt = bf16_dequant_moe(torch, x, ids, weights, w, expert_map=emap)              # BF16 weights, BF16 matmuls

Formats (SPEC 3): "int4" = compressed-tensors pack-quantized, int32 [E, N, K/8] (nibble q + 8, least
significant first along K) + BF16 scales [E, N, K/32]; "mxfp8" = E4M3 bytes [E, N, K] + E8M0 scale bytes
[E, N, K/32]. w13 holds the gate rows then the up rows ([E, 2I, H]); w2 is [E, H, I].
"""

from __future__ import annotations

import math
from dataclasses import dataclass

FORMATS = ("int4", "mxfp8")


@dataclass
class MoeWeights:
    format: str
    w13: object
    w13_scale: object
    w2: object
    w2_scale: object

    @property
    def experts(self) -> int:
        return self.w13.shape[0]

    @property
    def intermediate(self) -> int:
        return self.w13.shape[1] // 2

    @property
    def hidden(self) -> int:
        return self.w2.shape[1]

    def expert_bytes(self) -> int:
        """Bytes one expert's gate/up and down weights and scales take."""
        parts = (self.w13, self.w13_scale, self.w2, self.w2_scale)
        return sum(p[0].numel() * p.element_size() for p in parts)


def _int4_projection(torch, experts, n, k, gen, device):
    words = torch.randint(-(2**31), 2**31, (experts, n, k // 8), generator=gen, dtype=torch.int64, device=device)
    # std of (q - 8) over uniform nibbles is sqrt(21.5); scale so each output has about unit variance
    base = 1.0 / (math.sqrt(21.5) * math.sqrt(k))
    scale = base * (0.5 + torch.rand((experts, n, k // 32), generator=gen, device=device))
    return words.to(torch.int32), scale.to(torch.bfloat16)


def _mxfp8_projection(torch, experts, n, k, gen, device):
    values = torch.randn((experts, n, k), generator=gen, device=device).clamp_(-448, 448)
    e4m3 = values.to(torch.float8_e4m3fn).view(torch.uint8)
    # 2^(e - 127) with e around 127 - log2(sqrt(k)): unit-variance outputs, several exponents in play
    center = 127 - int(round(math.log2(math.sqrt(k))))
    scale = torch.randint(center - 2, center + 2, (experts, n, k // 32), generator=gen, dtype=torch.int32,
                          device=device)
    return e4m3, scale.to(torch.uint8)


def random_moe_weights(torch, fmt, experts, hidden, intermediate, device, seed=0) -> MoeWeights:
    """Weights generated on `device` (a torch.device or string) from `seed`."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    make = _int4_projection if fmt == "int4" else _mxfp8_projection
    w13, s13 = make(torch, experts, 2 * intermediate, hidden, gen, device)
    w2, s2 = make(torch, experts, hidden, intermediate, gen, device)
    return MoeWeights(fmt, w13, s13, w2, s2)


def dequantize(torch, fmt, packed, scale, dtype):
    """[..., N, K] values in `dtype` (exact in float32/float64)."""
    if fmt == "int4":
        shifts = torch.arange(0, 32, 4, device=packed.device, dtype=torch.int32)
        nibbles = (packed.unsqueeze(-1) >> shifts) & 0xF  # [..., K/8, 8], least significant first
        q = nibbles.reshape(*packed.shape[:-1], packed.shape[-1] * 8).to(dtype) - 8
        s = scale.to(dtype)
    else:
        q = packed.view(torch.float8_e4m3fn).to(dtype)
        s = torch.exp2(scale.to(dtype) - 127)
    return (q.unflatten(-1, (-1, 32)) * s.unsqueeze(-1)).flatten(-2)


def contiguous_expert_map(torch, global_experts, local_experts, rank, device):
    """Expert parallelism's usual map: global ids [rank * local, (rank + 1) * local) -> 0..local-1, others -1."""
    emap = torch.full((global_experts,), -1, dtype=torch.int32)
    emap[rank * local_experts : (rank + 1) * local_experts] = torch.arange(local_experts, dtype=torch.int32)
    return emap.to(device)


def random_routing(torch, tokens, top_k, global_experts, device, seed=0, skew=0.0):
    """topk_ids int32 [tokens, top_k] (distinct per token) and softmax-like float32 weights.

    skew 0 draws experts uniformly; skew s > 0 weights expert e by 1 / (e + 1)^s (a few hot experts)."""
    gen = torch.Generator(device="cpu")
    gen.manual_seed(seed)
    p = torch.ones(global_experts) if skew == 0 else 1.0 / torch.arange(1, global_experts + 1, dtype=torch.float64) ** skew
    perm = torch.randperm(global_experts, generator=gen)  # hot experts land anywhere, not only at id 0
    ids = perm[torch.multinomial(p.expand(tokens, -1), top_k, replacement=False, generator=gen)]
    w = torch.rand((tokens, top_k), generator=gen) + 0.1
    w = w / w.sum(dim=1, keepdim=True)
    return ids.to(torch.int32).to(device), w.to(torch.float32).to(device)


def _routes_by_expert(torch, topk_ids, experts, expert_map):
    ids = topk_ids.reshape(-1).to(torch.int64)
    if expert_map is not None:
        valid = (ids >= 0) & (ids < expert_map.numel())
        local = torch.full_like(ids, -1)
        local[valid] = expert_map.to(torch.int64)[ids[valid]]
    else:
        local = ids
    local = torch.where((local >= 0) & (local < experts), local, torch.full_like(local, -1))
    for e in torch.unique(local[local >= 0]).tolist():
        yield e, torch.nonzero(local == e).flatten()


def reference_moe(torch, x, topk_ids, topk_weights, w: MoeWeights, expert_map=None, dtype=None):
    """out[t] = sum over t's local routes r of w_r * down_e(silu(gate_e x_t) * up_e x_t), all in float64."""
    dtype = dtype or torch.float64
    m, k = topk_ids.shape
    i = w.intermediate
    out = torch.zeros((m, w.hidden), dtype=dtype, device=x.device)
    xs, rw = x.to(dtype), topk_weights.reshape(-1).to(dtype)
    for e, routes in _routes_by_expert(torch, topk_ids, w.experts, expert_map):
        w13 = dequantize(torch, w.format, w.w13[e], w.w13_scale[e], dtype)
        w2 = dequantize(torch, w.format, w.w2[e], w.w2_scale[e], dtype)
        tokens = routes // k
        gu = xs[tokens] @ w13.T
        h = torch.nn.functional.silu(gu[:, :i]) * gu[:, i:]
        out.index_add_(0, tokens, (h @ w2.T) * rw[routes].unsqueeze(1))
    return out


def bf16_dequant_moe(torch, x, topk_ids, topk_weights, w: MoeWeights, expert_map=None):
    """The usual unfused path: weights dequantized to BF16, BF16 matmuls (FP32 accumulation inside, BF16
    results), SiLU*up in BF16, FP32 weighted sum, BF16 out."""
    m, k = topk_ids.shape
    i = w.intermediate
    out = torch.zeros((m, w.hidden), dtype=torch.float32, device=x.device)
    rw = topk_weights.reshape(-1)
    for e, routes in _routes_by_expert(torch, topk_ids, w.experts, expert_map):
        w13 = dequantize(torch, w.format, w.w13[e], w.w13_scale[e], torch.float32).to(torch.bfloat16)
        w2 = dequantize(torch, w.format, w.w2[e], w.w2_scale[e], torch.float32).to(torch.bfloat16)
        tokens = routes // k
        gu = x[tokens] @ w13.T
        h = torch.nn.functional.silu(gu[:, :i]) * gu[:, i:]
        out.index_add_(0, tokens, (h @ w2.T).float() * rw[routes].unsqueeze(1))
    return out.to(torch.bfloat16)


def error_stats(torch, out, ref) -> dict:
    """Relative Frobenius error, cosine similarity and max abs difference of out against ref."""
    o, r = out.to(torch.float64).flatten(), ref.to(torch.float64).flatten()
    denom = torch.linalg.vector_norm(r).item()
    rel = torch.linalg.vector_norm(o - r).item() / denom if denom > 0 else torch.linalg.vector_norm(o).item()
    cos = torch.nn.functional.cosine_similarity(o, r, dim=0).item() if denom > 0 else 1.0
    return {"rel_err": rel, "cosine": cos, "max_abs": (o - r).abs().max().item() if o.numel() else 0.0}
