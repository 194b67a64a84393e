"""The DSA indexer (DeepSeek-V3.2 style): its FP8 key cache writer, the logits and the top-k selection.

The key cache is paged: page p of page_size tokens holds page_size 128-byte E4M3 keys, then page_size
FP32 scales (chordrt.indexer_cache_page_bytes(page_size) = 132 * page_size bytes); any tensor dtype may
hold it, its page count is its byte size divided by the page size in bytes. Slot s is token s % page_size
of page s // page_size.

Each op has a raw-pointer layer (``<op>_raw``: integer device addresses, explicit sizes, a CUstream int;
it fills the C args struct and makes the one C call) and a torch layer over it; the public ``<op>`` takes
either.

    chordrt.indexer_cache_write(k, slot_mapping, cache, page_size=64)
    logits = chordrt.dsa_indexer_logits(q_fp8, weights, cache, block_table, context_lens, page_size=64)
    indices = chordrt.dsa_topk(logits, context_lens, 2048, block_table=block_table, page_size=64)  # slots
"""

from __future__ import annotations

import ctypes
from typing import Optional

from ._core import (
    STATUS_T,
    STREAM_T,
    SizedStruct,
    TorchCall,
    address,
    check,
    check_int,
    invalid,
    lib,
    prototype,
    raw_stream,
    size,
    torch_module_of,
)

__all__ = [
    "IndexerCacheWriteArgs",
    "DsaIndexerArgs",
    "DsaTopkArgs",
    "indexer_cache_page_bytes",
    "indexer_cache_write",
    "indexer_cache_write_raw",
    "dsa_indexer_logits",
    "dsa_indexer_logits_raw",
    "dsa_topk",
    "dsa_topk_raw",
]

# ---- the C mirror -----------------------------------------------------------------------------------


class IndexerCacheWriteArgs(SizedStruct):
    """chord_indexer_cache_write_args_t (pointer fields are raw device addresses)."""

    _c_name_ = "chord_indexer_cache_write_args_t"
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("num_tokens", ctypes.c_int64),
        ("k", ctypes.c_void_p),  # BF16 [num_tokens, 128]
        ("slot_mapping", ctypes.c_void_p),  # const int64_t* [num_tokens]
        ("cache", ctypes.c_void_p),  # [num_pages] pages of chord_indexer_cache_page_bytes(page_size)
        ("page_size", ctypes.c_int32),
        ("num_pages", ctypes.c_int64),
    ]


class DsaIndexerArgs(SizedStruct):
    """chord_dsa_indexer_args_t (pointer fields are raw device addresses)."""

    _c_name_ = "chord_dsa_indexer_args_t"
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("num_heads", ctypes.c_int32),
        ("num_tokens", ctypes.c_int64),
        ("q", ctypes.c_void_p),  # E4M3 [T, H, 128]
        ("weights", ctypes.c_void_p),  # const float* [T, H]
        ("cache", ctypes.c_void_p),
        ("page_size", ctypes.c_int32),
        ("num_pages", ctypes.c_int64),
        ("block_table", ctypes.c_void_p),  # const int32_t* [T, max_pages_per_seq]
        ("max_pages_per_seq", ctypes.c_int32),
        ("context_lens", ctypes.c_void_p),  # const int32_t* [T]
        ("max_context", ctypes.c_int32),
        ("logits", ctypes.c_void_p),  # float* [T, max_context]
    ]


class DsaTopkArgs(SizedStruct):
    """chord_dsa_topk_args_t (pointer fields are raw device addresses)."""

    _c_name_ = "chord_dsa_topk_args_t"
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("num_tokens", ctypes.c_int64),
        ("topk", ctypes.c_int32),
        ("logits", ctypes.c_void_p),  # const float* [T, max_context]
        ("max_context", ctypes.c_int32),
        ("context_lens", ctypes.c_void_p),  # const int32_t* [T]
        ("block_table", ctypes.c_void_p),  # optional const int32_t* [T, max_pages_per_seq]
        ("max_pages_per_seq", ctypes.c_int32),
        ("page_size", ctypes.c_int32),
        ("indices", ctypes.c_void_p),  # int32_t* [T, topk]
    ]


prototype("chord_indexer_cache_page_bytes", ctypes.c_size_t, [ctypes.c_int32])  # page_size
prototype("chord_indexer_cache_write", STATUS_T, [ctypes.POINTER(IndexerCacheWriteArgs), STREAM_T])
prototype("chord_dsa_indexer_logits", STATUS_T, [ctypes.POINTER(DsaIndexerArgs), STREAM_T])
prototype("chord_dsa_topk", STATUS_T, [ctypes.POINTER(DsaTopkArgs), STREAM_T])

HEAD_DIM = 128


def indexer_cache_page_bytes(page_size: int) -> int:
    """chord_indexer_cache_page_bytes(): 132 * page_size, 0 outside [1, 1024]."""
    return int(lib().chord_indexer_cache_page_bytes(check_int(page_size, "indexer_cache_page_bytes", "page_size")))


def _cache_pages(call: TorchCall, cache, page_size: int) -> int:
    """The pages a torch cache holds (checked: CUDA, contiguous, a whole number of pages)."""
    torch, op = call.torch, call.op
    if not isinstance(cache, torch.Tensor):
        raise invalid(op, f"cache must be a torch.Tensor like the other arguments, got {type(cache).__name__}")
    call.tensor(cache, "cache", cache.dtype)
    page_bytes = indexer_cache_page_bytes(page_size)
    if page_bytes == 0:
        raise invalid(op, f"page_size must be in [1, 1024], got {page_size}")
    nbytes = cache.numel() * cache.element_size()
    if nbytes % page_bytes != 0:
        raise invalid(op, f"cache holds {nbytes} bytes (shape {tuple(cache.shape)}, {cache.dtype}), not a whole "
                           f"number of {page_bytes}-byte pages (page_size {page_size})")
    return nbytes // page_bytes


def indexer_cache_write(k, slot_mapping, cache, page_size: int, stream=None, *, num_tokens: Optional[int] = None,
                        num_pages: Optional[int] = None) -> None:
    """chord_indexer_cache_write(): quantizes each row of k into its slot (per token scale =
    max(amax / 448, FLT_MIN), values RN(k / scale) saturated to E4M3); slot -1 (or past the cache) skips.

    torch: k bf16 [T, 128], slot_mapping int64 [T], cache any contiguous CUDA tensor of whole pages.
    Raw pointers: num_tokens and num_pages must be given."""
    op = "indexer_cache_write"
    page_size = check_int(page_size, op, "page_size")
    torch = torch_module_of(k, slot_mapping, cache)
    if torch is None:
        indexer_cache_write_raw(k, slot_mapping, cache, page_size, num_tokens, num_pages, stream)
        return None
    call = TorchCall(torch, op, stream)
    call.tensor(k, "k", torch.bfloat16, ndim=2)
    if k.shape[1] != HEAD_DIM:
        raise invalid(op, f"k must be [T, {HEAD_DIM}], got shape {tuple(k.shape)}")
    rows = k.shape[0]
    call.tensor(slot_mapping, "slot_mapping", torch.int64, shape=(rows,))
    pages = _cache_pages(call, cache, page_size)
    for name, given, actual in (("num_tokens", num_tokens, rows), ("num_pages", num_pages, pages)):
        if given is not None and given != actual:
            raise invalid(op, f"{name}={given} disagrees with the tensors ({actual})")
    with call.guard():
        indexer_cache_write_raw(k.data_ptr(), slot_mapping.data_ptr(), cache.data_ptr(), page_size, rows, pages,
                                call.stream())
    return None


def indexer_cache_write_raw(k, slot_mapping, cache, page_size: int, num_tokens: int, num_pages: int,
                            stream=None) -> None:
    """chord_indexer_cache_write() on raw device addresses (ints) and explicit sizes; stream a CUstream."""
    op = "indexer_cache_write"
    args = IndexerCacheWriteArgs(num_tokens=size(num_tokens, op, "num_tokens"), k=address(k, op, "k"),
                                 slot_mapping=address(slot_mapping, op, "slot_mapping"),
                                 cache=address(cache, op, "cache"), page_size=check_int(page_size, op, "page_size"),
                                 num_pages=size(num_pages, op, "num_pages"))
    check(lib().chord_indexer_cache_write(ctypes.byref(args), raw_stream(stream)))


def _fp8_dtypes(torch):
    return tuple(d for d in (getattr(torch, "float8_e4m3fn", None), torch.uint8) if d is not None)


def dsa_indexer_logits(q, weights, cache, block_table, context_lens, page_size: int, max_context: Optional[int] = None,
                       logits=None, stream=None, *, num_heads: Optional[int] = None, num_tokens: Optional[int] = None,
                       num_pages: Optional[int] = None, max_pages_per_seq: Optional[int] = None):
    """chord_dsa_indexer_logits(): logits[t, p] = scale_p * sum_h weights[t, h] * relu(q[t, h] . k_p) for
    p < context_lens[t], -inf past it (and where block_table points outside the cache).

    torch: q float8_e4m3fn (or uint8 bytes) [T, H, 128]; weights float32 [T, H]; cache as for
    indexer_cache_write; block_table int32 [T, max_pages_per_seq]; context_lens int32 [T]; max_context
    defaults to max_pages_per_seq * page_size rounded up to a multiple of 4; logits float32
    [T, max_context] (allocated when not given, and returned).
    Raw pointers: num_heads, num_tokens, num_pages, max_pages_per_seq and max_context must be given."""
    op = "dsa_indexer_logits"
    page_size = check_int(page_size, op, "page_size")
    torch = torch_module_of(q, weights, cache, block_table, context_lens, logits)
    if torch is None:
        dsa_indexer_logits_raw(q, weights, cache, block_table, context_lens, page_size, max_context, logits, stream,
                               num_heads=num_heads, num_tokens=num_tokens, num_pages=num_pages,
                               max_pages_per_seq=max_pages_per_seq)
        return None
    call = TorchCall(torch, op, stream)
    if not isinstance(q, torch.Tensor) or q.dtype not in _fp8_dtypes(torch):
        raise invalid(op, f"q must be a torch.float8_e4m3fn (or uint8) tensor, got "
                           f"{q.dtype if isinstance(q, torch.Tensor) else type(q).__name__}")
    call.tensor(q, "q", q.dtype, ndim=3)
    rows, heads, dims = q.shape
    if dims != HEAD_DIM:
        raise invalid(op, f"q must be [T, H, {HEAD_DIM}], got shape {tuple(q.shape)}")
    call.tensor(weights, "weights", torch.float32, shape=(rows, heads))
    call.tensor(block_table, "block_table", torch.int32, ndim=2)
    if block_table.shape[0] != rows:
        raise invalid(op, f"block_table must have T = {rows} rows, got shape {tuple(block_table.shape)}")
    call.tensor(context_lens, "context_lens", torch.int32, shape=(rows,))
    pages = _cache_pages(call, cache, page_size)
    table_pages = block_table.shape[1]
    if max_context is None:
        max_context = -(-table_pages * page_size // 4) * 4
    max_context = check_int(max_context, op, "max_context")
    if logits is None:
        logits = torch.empty((rows, max_context), dtype=torch.float32, device=call.device)
    call.tensor(logits, "logits", torch.float32, shape=(rows, max_context))
    for name, given, actual in (("num_heads", num_heads, heads), ("num_tokens", num_tokens, rows),
                                ("num_pages", num_pages, pages), ("max_pages_per_seq", max_pages_per_seq, table_pages)):
        if given is not None and given != actual:
            raise invalid(op, f"{name}={given} disagrees with the tensors ({actual})")
    with call.guard():
        dsa_indexer_logits_raw(q.data_ptr(), weights.data_ptr(), cache.data_ptr(), block_table.data_ptr(),
                               context_lens.data_ptr(), page_size, max_context, logits.data_ptr(), call.stream(),
                               num_heads=heads, num_tokens=rows, num_pages=pages, max_pages_per_seq=table_pages)
    return logits


def dsa_indexer_logits_raw(q, weights, cache, block_table, context_lens, page_size: int, max_context: int, logits,
                           stream=None, *, num_heads: int, num_tokens: int, num_pages: int,
                           max_pages_per_seq: int) -> None:
    """chord_dsa_indexer_logits() on raw device addresses (ints) and explicit sizes; stream a CUstream."""
    op = "dsa_indexer_logits"
    args = DsaIndexerArgs(num_heads=size(num_heads, op, "num_heads"), num_tokens=size(num_tokens, op, "num_tokens"),
                          q=address(q, op, "q"), weights=address(weights, op, "weights"),
                          cache=address(cache, op, "cache"), page_size=check_int(page_size, op, "page_size"),
                          num_pages=size(num_pages, op, "num_pages"),
                          block_table=address(block_table, op, "block_table"),
                          max_pages_per_seq=size(max_pages_per_seq, op, "max_pages_per_seq"),
                          context_lens=address(context_lens, op, "context_lens"),
                          max_context=size(max_context, op, "max_context"), logits=address(logits, op, "logits"))
    check(lib().chord_dsa_indexer_logits(ctypes.byref(args), raw_stream(stream)))


def dsa_topk(logits, context_lens, topk: int = 2048, block_table=None, page_size: Optional[int] = None, indices=None,
             stream=None, *, num_tokens: Optional[int] = None, max_context: Optional[int] = None,
             max_pages_per_seq: Optional[int] = None):
    """chord_dsa_topk(): per row, the positions of the topk largest logits[t, :context_lens[t]] (in no
    particular order, ties broken arbitrarily), as cache slots block_table[t, p // page_size] * page_size +
    p % page_size when block_table is given; -1 past min(topk, context_lens[t]).

    torch: logits float32 [T, max_context]; context_lens int32 [T]; block_table int32
    [T, max_pages_per_seq] (with page_size); indices int32 [T, topk] (allocated when not given, and
    returned). Raw pointers: num_tokens, max_context (and max_pages_per_seq with a table) must be given."""
    op = "dsa_topk"
    topk = check_int(topk, op, "topk")
    if block_table is not None and page_size is None:
        raise invalid(op, "page_size is required with a block_table")
    page_size = 0 if page_size is None else check_int(page_size, op, "page_size")
    torch = torch_module_of(logits, context_lens, block_table, indices)
    if torch is None:
        dsa_topk_raw(logits, context_lens, topk, block_table, page_size, indices, stream, num_tokens=num_tokens,
                     max_context=max_context, max_pages_per_seq=max_pages_per_seq)
        return None
    call = TorchCall(torch, op, stream)
    call.tensor(logits, "logits", torch.float32, ndim=2)
    rows, width = logits.shape
    call.tensor(context_lens, "context_lens", torch.int32, shape=(rows,))
    table_pages = 0
    if block_table is not None:
        call.tensor(block_table, "block_table", torch.int32, ndim=2)
        if block_table.shape[0] != rows:
            raise invalid(op, f"block_table must have T = {rows} rows, got shape {tuple(block_table.shape)}")
        table_pages = block_table.shape[1]
    if indices is None:
        indices = torch.empty((rows, topk), dtype=torch.int32, device=call.device)
    call.tensor(indices, "indices", torch.int32, shape=(rows, topk))
    for name, given, actual in (("num_tokens", num_tokens, rows), ("max_context", max_context, width),
                                ("max_pages_per_seq", max_pages_per_seq, table_pages)):
        if given is not None and given != actual:
            raise invalid(op, f"{name}={given} disagrees with the tensors ({actual})")
    with call.guard():
        dsa_topk_raw(logits.data_ptr(), context_lens.data_ptr(), topk,
                     block_table.data_ptr() if block_table is not None else None, page_size, indices.data_ptr(),
                     call.stream(), num_tokens=rows, max_context=width, max_pages_per_seq=table_pages)
    return indices


def dsa_topk_raw(logits, context_lens, topk: int, block_table, page_size: int, indices, stream=None, *,
                 num_tokens: int, max_context: int, max_pages_per_seq: Optional[int] = None) -> None:
    """chord_dsa_topk() on raw device addresses (ints; block_table None = positions, not slots) and explicit
    sizes (max_pages_per_seq with a block table); stream a CUstream."""
    op = "dsa_topk"
    args = DsaTopkArgs(num_tokens=size(num_tokens, op, "num_tokens"), topk=check_int(topk, op, "topk"),
                       logits=address(logits, op, "logits"), max_context=size(max_context, op, "max_context"),
                       context_lens=address(context_lens, op, "context_lens"),
                       block_table=address(block_table, op, "block_table"),
                       max_pages_per_seq=size(max_pages_per_seq, op, "max_pages_per_seq", required=False),
                       page_size=check_int(page_size, op, "page_size"), indices=address(indices, op, "indices"))
    check(lib().chord_dsa_topk(ctypes.byref(args), raw_stream(stream)))
