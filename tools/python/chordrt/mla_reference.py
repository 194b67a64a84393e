"""Sparse MLA references (needs torch): the cache writer's exact math, cache decoding, and the attention.

    records = quantize_fp8_ds_mla(kv)                       # uint8 [N, 656 | 528], byte-exact with the writer
    kv32 = records_to_fp32(cache, "fp8_ds_mla", 64)          # [num_slots, 576] dequantized
    out, lse = sparse_mla_reference(q, kv32, indices, scale, topk_length=..., attn_sink=...)

Used by the GPU tests and the benchmark, so both check against the same definitions.
"""

from __future__ import annotations

import torch

LATENT_DIMS = 512
TILE = 128
TILES = LATENT_DIMS // TILE
E4M3_MAX = 448.0
FLT_MIN = torch.finfo(torch.float32).tiny


def _format_name(format) -> str:
    name = getattr(format, "name", format)
    if isinstance(name, int):
        name = ("fp8_ds_mla", "bf16")[name]
    name = str(name).lower()
    if name not in ("fp8_ds_mla", "bf16"):
        raise ValueError(f"unknown MLA cache format {format!r}")
    return name


def record_bytes(format, rope_dims: int) -> int:
    """Bytes of one token's record (as chord_mla_cache_record_bytes)."""
    if rope_dims not in (0, 64):
        raise ValueError(f"rope_dims must be 0 or 64, got {rope_dims}")
    if _format_name(format) == "fp8_ds_mla":
        return LATENT_DIMS + 4 * TILES + 2 * rope_dims
    return 2 * (LATENT_DIMS + rope_dims)


def quantize_fp8_ds_mla(kv):
    """uint8 [N, 656 | 528]: the fp8_ds_mla record of each row of kv (bf16 [N, 576 | 512]).

    Per 128-value tile: scale = max(amax / 448, FLT_MIN) (FP32), values RN(x / scale) saturated to E4M3;
    then the 4 scales, then the RoPE dims as BF16. Divisions are true FP32 divisions (a tensor divisor:
    torch turns division by a Python scalar into a multiplication by its reciprocal on the GPU)."""
    if kv.dtype != torch.bfloat16 or kv.dim() != 2 or kv.shape[1] not in (LATENT_DIMS, LATENT_DIMS + 64):
        raise ValueError(f"kv must be bf16 [N, 576 | 512], got {kv.dtype} {tuple(kv.shape)}")
    n = kv.shape[0]
    x = kv[:, :LATENT_DIMS].float().reshape(n, TILES, TILE)
    amax = x.abs().amax(dim=-1)
    scale = torch.clamp(amax / torch.full_like(amax, E4M3_MAX), min=FLT_MIN)
    values = (x / scale[..., None]).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    parts = [values.reshape(n, LATENT_DIMS).view(torch.uint8), scale.contiguous().view(torch.uint8).reshape(n, 16)]
    if kv.shape[1] > LATENT_DIMS:
        parts.append(kv[:, LATENT_DIMS:].contiguous().view(torch.uint8).reshape(n, 2 * (kv.shape[1] - LATENT_DIMS)))
    return torch.cat(parts, dim=1)


def bf16_records(kv):
    """uint8 [N, 1152 | 1024]: the bf16 record of each row of kv (its bytes)."""
    return kv.contiguous().view(torch.uint8).reshape(kv.shape[0], 2 * kv.shape[1])


def records_of(kv, format):
    """The records the writer makes of kv's rows in `format`."""
    return quantize_fp8_ds_mla(kv) if _format_name(format) == "fp8_ds_mla" else bf16_records(kv)


def records_to_fp32(cache, format, rope_dims: int, dtype=torch.float32, latent_f16=False):
    """[num_slots, 512 + rope_dims] (dtype, float32 by default): every record of `cache` (any dtype,
    contiguous) decoded: e4m3 * its tile's scale, RoPE / bf16 values widened. NaN records stay NaN.
    latent_f16: the 512 latent values rounded to F16 once (as the 64-head wgmma kernel stores its keys)."""
    rec = record_bytes(format, rope_dims)
    raw = cache.contiguous().reshape(-1).view(torch.uint8)
    if raw.numel() % rec != 0:
        raise ValueError(f"cache holds {raw.numel()} bytes, not a whole number of {rec}-byte records")
    raw = raw.reshape(-1, rec)
    n = raw.shape[0]
    if _format_name(format) == "bf16":
        kv = raw.view(torch.bfloat16).to(dtype)
        lat, rope = kv[:, :LATENT_DIMS], kv[:, LATENT_DIMS:]
    else:
        lat = raw[:, :LATENT_DIMS].contiguous().view(torch.float8_e4m3fn).to(dtype).reshape(n, TILES, TILE)
        scale = raw[:, LATENT_DIMS:LATENT_DIMS + 4 * TILES].contiguous().view(torch.float32).to(dtype)
        lat = (lat * scale[..., None]).reshape(n, LATENT_DIMS)
        rope = raw[:, LATENT_DIMS + 4 * TILES:].contiguous().view(torch.bfloat16).to(dtype)
    if latent_f16:
        lat = lat.to(torch.float16).to(dtype)
    return torch.cat([lat, rope], dim=1) if rope_dims else lat


def valid_mask(indices, num_slots: int, topk_length=None):
    """bool [T, topk]: index in [0, num_slots) and (with topk_length) position < topk_length[t]."""
    idx = indices.long()
    valid = (idx >= 0) & (idx < num_slots)
    if topk_length is not None:
        pos = torch.arange(idx.shape[1], device=idx.device)
        valid &= pos[None, :] < topk_length.long()[:, None]
    return valid


def sparse_mla_reference(q, kv, indices, softmax_scale, topk_length=None, attn_sink=None, *, dtype=torch.float64,
                         chunk_bytes=256 << 20):
    """(out float32 [T, h, 512], lse float32 [T, h]) of q [T, h, D] over kv [num_slots, D] (D = 512 +
    rope dims; kv as records_to_fp32 gives it), computed in `dtype` (float64 by default), T in chunks
    of at most chunk_bytes of gathered keys.

    Key j of token t is kv[indices[t, j]] unless invalid (-1, outside [0, num_slots), or j >=
    topk_length[t]); duplicates count as often as they appear. s_j = scale * q . k_j over all D dims;
    lse = log(sum_j exp(s_j)) over the valid keys (+inf if none; the sink not included); out = sum_j
    exp(s_j) v_j / (sum_j exp(s_j) + exp(attn_sink[h])) with v_j = k_j's first 512 dims; 0 if no key."""
    t_count, heads, dims = q.shape
    if kv.dim() != 2 or kv.shape[1] != dims:
        raise ValueError(f"kv must be [num_slots, {dims}] (q's last dimension), got {tuple(kv.shape)}")
    valid = valid_mask(indices, kv.shape[0], topk_length)
    idx = torch.where(valid, indices.long(), torch.zeros_like(indices, dtype=torch.long))
    topk = indices.shape[1]
    out = torch.empty((t_count, heads, LATENT_DIMS), dtype=torch.float32, device=q.device)
    lse = torch.empty((t_count, heads), dtype=torch.float32, device=q.device)
    sink = attn_sink.to(dtype) if attn_sink is not None else None
    chunk = max(1, chunk_bytes // max(1, topk * dims * torch.finfo(dtype).bits // 8))
    for c0 in range(0, t_count, chunk):
        sl = slice(c0, min(t_count, c0 + chunk))
        v = valid[sl]
        # where, not a multiply: unselected (NaN) rows gathered for invalid entries must not leak
        keys = torch.where(v[..., None], kv[idx[sl]].to(dtype), torch.zeros((), dtype=dtype, device=kv.device))
        s = torch.bmm(q[sl].to(dtype), keys.transpose(1, 2)) * softmax_scale  # [c, h, topk]
        s = s.masked_fill(~v[:, None, :], float("-inf"))
        m = s.amax(dim=-1)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        p = torch.exp(s - m[..., None])
        total = p.sum(dim=-1)
        any_key = total > 0
        lse[sl] = torch.where(any_key, m + torch.log(total), torch.full_like(m, float("inf"))).float()
        denom = total + torch.exp(sink[None, :] - m) if sink is not None else total
        o = torch.bmm(p, keys[..., :LATENT_DIMS]) / torch.where(any_key, denom, torch.ones_like(denom))[..., None]
        out[sl] = torch.where(any_key[..., None], o, torch.zeros_like(o)).float()
    return out, lse
