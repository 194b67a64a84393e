// The grouped family's packed weight layout, shared by its packer and its GEMM kernel.
//
// The GEMM feeds dequantized weights to wgmma as the register operand A (weight rows on wgmma M, tokens
// on wgmma N), so the packer stores each thread's A fragments contiguously: per 64-row slice and BLOCK_K
// block, [warp 4][chunk BLOCK_K/64][lane 32][word 4]: one 16-byte shared load gives a lane its words for
// 64 K values. Word j of a chunk is k16 step 4*chunk + j; lane (g = lane/4, t = lane%4) of warp w covers
// rows r0 = 16w + g and r1 = r0 + 8. Its 8 nibbles, in the order the dequant's (w >> 4i) & 0x000F000F
// pulls them out as BF16 pairs (nibble i low half, nibble i + 4 high half):
//   nibble 0, 4: row r0, k 2t, 2t+1      (fragment register 0)
//   nibble 1, 5: row r1, k 2t, 2t+1      (register 1)
//   nibble 2, 6: row r0, k 2t+8, 2t+9    (register 2)
//   nibble 3, 7: row r1, k 2t+8, 2t+9    (register 3)
// Scales are BF16 [E, K/32, N] (N contiguous): a K block's scales for a tile are BLOCK_K/32 runs of the
// tile's N, each one bulk copy.
#pragma once

#include "common/types.cuh"
#include "grouped/params.cuh"

namespace chord::grouped {

// Words of one (slice, K block) tile.
template <int BLOCK_K>
constexpr int slice_block_words() {
  return kSliceRows * BLOCK_K / 8;
}

// Word offset of (expert, slice, K block) in the packed weight.
template <int N, int K, int BLOCK_K>
__device__ __forceinline__ long long slice_block_offset(int expert, int slice, int k_block) {
  constexpr int kSlices = N / kSliceRows, kBlocks = K / BLOCK_K;
  return ((static_cast<long long>(expert) * kSlices + slice) * kBlocks + k_block) * slice_block_words<BLOCK_K>();
}

}  // namespace chord::grouped
