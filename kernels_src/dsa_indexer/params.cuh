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
constexpr int kMaxHeadsPerWarp = 64;  // a logits warp holds up to 64 heads' q fragments in registers
constexpr int kMaxTopk = 4096;
constexpr int kTopkBins = 2048;  // the first radix digit: 11 bits

// A page of the key cache: page_size 128-byte E4M3 keys, then page_size FP32 scales (0 outside
// [1, kMaxPageSize]).
CHORD_HD constexpr int64_t cache_page_bytes(int64_t page_size) {
  return page_size >= 1 && page_size <= kMaxPageSize ? page_size * kTokenBytes : 0;
}

// Shared memory of one logits CTA (offsets in bytes from the dynamic base).
struct LogitsSmem {
  int stage_keys;  // keys per stage: key_warps * 32
  int keys;        // [stages][stage_keys][128] E4M3, 16-byte chunks swizzled
  int scales;      // [stages][stage_keys] FP32
  int partial;     // [head_groups][stage_keys] FP32: the second head group's sums
  int weights;     // [head_groups * 64] FP32
  int pages;       // [keys_per_cta / page + 1] int32 block-table entries (a range may straddle a page)
  int bytes;
};
CHORD_HD constexpr LogitsSmem logits_smem(int page, int key_warps, int head_groups, int stages, int keys_per_cta) {
  LogitsSmem s{};
  s.stage_keys = key_warps * 32;
  s.keys = 0;
  s.scales = s.keys + stages * s.stage_keys * kHeadDim;
  s.partial = s.scales + stages * s.stage_keys * 4;
  s.weights = s.partial + head_groups * s.stage_keys * 4;
  s.pages = s.weights + head_groups * kMaxHeadsPerWarp * 4;
  s.bytes = s.pages + ((keys_per_cta + page - 1) / page + 1) * 4;
  return s;
}

// Shared memory of one top-k CTA: the histogram, then the candidates' keys and positions.
CHORD_HD constexpr int topk_dynamic_smem(int candidates) { return kTopkBins * 4 + candidates * 8; }

}  // namespace chord::dsa_indexer
