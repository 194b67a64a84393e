"""Torch references for the DSA indexer (needs torch): the key cache layout, the logits and the top-k.

Used by the GPU tests and the benchmark, so both check against the same functions:

    keys, scales = quantize_keys(torch, k)                                   # bytes and FP32 scales, exact
    cache = write_cache(torch, k, slot_mapping, cache, page_size)            # expected cache bytes
    ref = reference_logits(torch, q, weights, cache, block_table, context_lens, page_size, max_context)
    ok = check_topk(torch, indices, logits, context_lens, topk)              # sets, ties allowed

Cache (SPEC 3.5): page p of page_size tokens = page_size 128-byte E4M3 keys, then page_size FP32 scales;
slot s is token s % page_size of page s // page_size.
"""

from __future__ import annotations

from .moe_reference import error_stats  # noqa: F401 (re-exported: the bench reports through it)

HEAD_DIM = 128
TOKEN_BYTES = HEAD_DIM + 4
FLT_MIN = 1.1754943508222875e-38
E4M3_MAX = 448.0


def page_bytes(page_size: int) -> int:
    return page_size * TOKEN_BYTES


def quantize_keys(torch, k):
    """k [N, 128] (any float dtype) -> (E4M3 bytes uint8 [N, 128], scales float32 [N]): per row scale =
    max(amax / 448, FLT_MIN), values RN(k / scale) saturated to +-448 (what the writer computes)."""
    x = k.float()
    amax = x.abs().amax(dim=1)
    # A tensor divisor: torch turns division by a Python scalar into a multiplication by its reciprocal,
    # which rounds differently from the writer's IEEE division.
    scale = torch.clamp(amax / torch.full_like(amax, E4M3_MAX), min=FLT_MIN)
    values = (x / scale[:, None]).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return values.view(torch.uint8), scale


def write_cache(torch, k, slot_mapping, cache, page_size):
    """The bytes `cache` ([num_pages, page_bytes] uint8 view of any dtype) holds after writing k's rows to
    their slots (a new tensor; slots -1 or >= num_pages * page_size are skipped; slots must be unique)."""
    flat = cache.view(torch.uint8).reshape(-1).clone()
    pb = page_bytes(page_size)
    num_slots = flat.numel() // pb * page_size
    slots = slot_mapping.long()
    keep = (slots >= 0) & (slots < num_slots)
    values, scales = quantize_keys(torch, k[keep])
    slots = slots[keep]
    page, offset = slots // page_size, slots % page_size
    key_at = (page * pb + offset * HEAD_DIM)[:, None] + torch.arange(HEAD_DIM, device=flat.device)
    flat[key_at.reshape(-1)] = values.reshape(-1)
    scale_at = (page * pb + page_size * HEAD_DIM + offset * 4)[:, None] + torch.arange(4, device=flat.device)
    flat[scale_at.reshape(-1)] = scales.contiguous().view(torch.uint8).reshape(-1)
    return flat.reshape(-1, pb)


def read_cache(torch, cache, page_size):
    """(keys float32 [num_slots, 128] as stored (no scale), scales float32 [num_slots]) of a cache."""
    pb = page_bytes(page_size)
    pages = cache.view(torch.uint8).reshape(-1, pb)
    keys = pages[:, :page_size * HEAD_DIM].reshape(-1, HEAD_DIM).contiguous().view(torch.float8_e4m3fn).float()
    scales = pages[:, page_size * HEAD_DIM:].contiguous().view(torch.float32).reshape(-1)
    return keys, scales


def slots_of(torch, block_table_row, positions, page_size, num_pages):
    """(slots, valid) of context positions through one block-table row: valid when the page index is in
    the table and the page in [0, num_pages)."""
    index = positions // page_size
    in_table = index < block_table_row.numel()
    page = block_table_row.long()[index.clamp(max=max(block_table_row.numel() - 1, 0))]
    valid = in_table & (page >= 0) & (page < num_pages)
    return torch.where(valid, page * page_size + positions % page_size, torch.zeros_like(page)), valid


def reference_logits(torch, q, weights, cache, block_table, context_lens, page_size, max_context):
    """float32 [T, max_context]: sum_h w[t, h] * relu(q[t, h] . k_p) * scale_p from dequantized q and k in
    FP32 (TF32 off) for p < context_lens[t] with a valid page, -inf elsewhere."""
    keys, scales = read_cache(torch, cache, page_size)
    num_pages = scales.numel() // page_size
    qf = q.view(torch.float8_e4m3fn).float()
    out = torch.full((q.shape[0], max_context), float("-inf"), dtype=torch.float32, device=q.device)
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        for t in range(q.shape[0]):
            n = max(0, min(int(context_lens[t]), max_context))
            if n == 0:
                continue
            pos = torch.arange(n, device=q.device)
            slots, valid = slots_of(torch, block_table[t], pos, page_size, num_pages)
            dots = qf[t] @ keys[slots].T  # [H, n]
            row = (torch.relu(dots) * weights[t].float()[:, None]).sum(0) * scales[slots]
            out[t, :n] = torch.where(valid, row, torch.full_like(row, float("-inf")))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    return out


def check_topk(torch, indices, logits, context_lens, topk, block_table=None, page_size=None):
    """Asserts that indices [T, topk] is a valid top-k of each row of logits: the first min(topk, n)
    entries are distinct positions < n (slots through block_table when given, whose pages must then be
    unique per row) whose logits form the same multiset as torch.topk's, the rest -1."""
    rows, width = logits.shape
    for t in range(rows):
        n = max(0, min(int(context_lens[t]), width))
        k = min(topk, n)
        got = indices[t].long()
        assert bool((got[k:] == -1).all()), f"row {t}: entries past min(topk, n) = {k} are not all -1"
        sel = got[:k]
        if block_table is not None:
            table = block_table[t].long()
            inverse = {int(p): i for i, p in enumerate(table.tolist())}
            pages = (sel // page_size).tolist()
            assert all(p in inverse for p in pages), f"row {t}: a slot's page is not in the row's block table"
            sel = torch.tensor([inverse[p] for p in pages], device=sel.device, dtype=torch.long) * page_size + \
                sel % page_size
        assert bool(((sel >= 0) & (sel < n)).all()), f"row {t}: a position outside [0, {n})"
        assert torch.unique(sel).numel() == k, f"row {t}: repeated positions"
        if k:
            want = torch.topk(logits[t, :n], k).values.sort().values
            have = logits[t, sel].sort().values
            assert torch.equal(have, want), f"row {t}: selected values differ from torch.topk's"

