// One token's record in the latent cache (SPEC §3.4). fp8_ds_mla: 512 E4M3 values, 4 FP32 scales (one per
// 128-value tile), then the RoPE dims as BF16; BF16: the 512 + RoPE dims as BF16. A paged cache is an
// array of records, so slot s is record s whatever the page size.
#pragma once

#include "common/types.cuh"

namespace chord::mla {

constexpr int kNopeDims = 512;
constexpr int kTileDims = 128;  // values per FP32 scale in fp8_ds_mla
constexpr int kTiles = kNopeDims / kTileDims;

enum CacheFormat : int { kFp8DsMla = 0, kBf16 = 1 };

template <int FORMAT, int ROPE>
struct Record {
  static_assert(FORMAT == kFp8DsMla || FORMAT == kBf16, "unknown cache format");
  static_assert(ROPE == 0 || ROPE == 64, "RoPE dims are 64, or 0 on NoPE layers");
  static constexpr bool kFp8 = FORMAT == kFp8DsMla;
  static constexpr int kDims = kNopeDims + ROPE;
  static constexpr int kNopeBytes = kFp8 ? kNopeDims : 2 * kNopeDims;
  static constexpr int kScaleOffset = kNopeBytes;  // fp8 only
  static constexpr int kRopeOffset = kNopeBytes + (kFp8 ? 4 * kTiles : 0);
  static constexpr int kBytes = kRopeOffset + 2 * ROPE;
  static_assert(kBytes % 16 == 0, "records move as 16-byte pieces");
};

}  // namespace chord::mla
