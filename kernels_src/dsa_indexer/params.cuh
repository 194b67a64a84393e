// The DSA indexer kernels' contract (key_cache.cuh, logits.cuh, topk.cuh): the key cache page format,
// the template ranges and both shared-memory layouts. Shared by the kernels, heuristics/dsa_indexer and
// runtime/ops/dsa_indexer.
#pragma once

#include "common/host_device.cuh"

namespace chord::dsa_indexer {

constexpr int kHeadDim = 128;
constexpr int kTokenBytes = kHeadDim + 4;  // E4M3 key + FP32 scale
constexpr int kMaxPageSize = 1024;
constexpr int kMaxHeads = 128;
constexpr int kMaxTopk = 4096;
constexpr int kTopkBins = 2048;  // the first radix digit: 11 bits

// A page of the key cache: page_size 128-byte E4M3 keys, then page_size FP32 scales (0 outside
// [1, kMaxPageSize]).
CHORD_HD constexpr int64_t cache_page_bytes(int64_t page_size) {
  return page_size >= 1 && page_size <= kMaxPageSize ? page_size * kTokenBytes : 0;
}

// The logits kernel: one warpgroup per CTA, 64-key tiles (wgmma M), every head on N.
constexpr int kLogitsThreads = 128;
constexpr int kTileKeys = 64;
constexpr int kMinKeysPerCta = 256, kMaxKeysPerCta = 8192;
constexpr int kMinStages = 2, kMaxStages = 8;

// Resident CTAs per SM the kernel's launch bounds promise (<= 128 registers: HEADS / 2 accumulators and
// HEADS / 4 weights per thread fit at 128 heads); the heuristic sizes the ring to fit them in shared
// memory. 16 warps per SM hide one CTA's wgmma -> epilogue chain behind the others' (at 128 heads, 3 CTAs
// of 7 stages ran 8% slower than 4 CTAs of 3).
constexpr int kLogitsCtasPerSm = 4;

// Tiles can arrive by tensor copy when a page's keys are 16-byte aligned (page_size % 4 == 0) and a
// 64-key tile is whole pages or part of one; otherwise (or by choice) by cp.async, 4-16 bytes at a time.
CHORD_HD constexpr bool logits_uses_tma(int page) {
  return page % 4 == 0 && (page % kTileKeys == 0 || kTileKeys % page == 0);
}

// Shared memory of one logits CTA: offsets in bytes from the dynamic base rounded up to 1024 (the
// 128-byte swizzle's atom), which `bytes` leaves room for.
struct LogitsSmem {
  int q;         // [heads][128] E4M3, 16-byte chunks swizzled by (head & 7): wgmma's B
  int keys;      // [stages][64][128] E4M3, 16-byte chunks swizzled by (key & 7): wgmma's A
  int scales;    // [stages][64] FP32
  int barriers;  // [2][stages] mbarriers (tensor copies): full, empty
  int pages;     // [keys_per_cta / page + 1] int32 block-table entries (a range may straddle a page)
  int bytes;
};
CHORD_HD constexpr LogitsSmem logits_smem(int heads, int page, int stages, int keys_per_cta) {
  LogitsSmem s{};
  s.q = 0;
  s.keys = s.q + heads * kHeadDim;  // a multiple of 1024: heads is a multiple of 8
  s.scales = s.keys + stages * kTileKeys * kHeadDim;
  s.barriers = s.scales + stages * kTileKeys * 4;
  s.pages = s.barriers + 2 * stages * 8;
  s.bytes = s.pages + ((keys_per_cta + page - 1) / page + 1) * 4 + 1024;
  return s;
}

// Shared memory of one top-k CTA: the histogram, then the candidates' keys and positions.
CHORD_HD constexpr int topk_dynamic_smem(int candidates) { return kTopkBins * 4 + candidates * 8; }

}  // namespace chord::dsa_indexer
