// The indexed decode profile's packed weight layout ("mma" layout), shared by its packer and kernel.
//
// The decode kernel runs mma.sync m16n8k16 with the weights as A (16 weight rows on MMA M) and up to 8
// tokens per MMA on N. A warp streams whole 16-row tiles along K, so each tile is one contiguous run:
// words [E][N/16][K/64 chunk][lane 32][word 4], one 16-byte load per lane per 64 K values.
// K is permuted inside a chunk so that lane (g = lane/4, t = lane%4) also reads its activations as one
// 32-byte run: k16 step j's logical k {2t, 2t+1, 2t+8, 2t+9} (the fragment's) are the physical k
// 16t + 4j + {0, 1, 2, 3} (a reduction order change only; A and B use the same map). Its 8 nibbles, in
// the order dequant_int4_word() takes them (nibble i low half, i + 4 high half of register i):
//   nibble 0, 4: row r0 = 16*tile + g, k 16t+4j, +1        (register 0)
//   nibble 1, 5: row r1 = r0 + 8,      k 16t+4j, +1        (register 1)
//   nibble 2, 6: row r0,               k 16t+4j+2, +3      (register 2)
//   nibble 3, 7: row r1,               k 16t+4j+2, +3      (register 3)
// A lane's 16 K values of a chunk lie in one quantization group (2*chunk + t/2), so it needs one scale
// per row: scales are BF16 pairs [E][N/16][K/32][g 8][(r0, r1)], one 4-byte load per lane per chunk.
#pragma once

#include "common/types.cuh"
#include "indexed/params.cuh"

namespace chord::indexed {

// Word offset of (expert, 16-row tile, chunk) in the packed weight.
template <int N, int K>
__device__ __forceinline__ long long tile_chunk_offset(int expert, int tile, int chunk) {
  return ((static_cast<long long>(expert) * (N / kTileRows) + tile) * (K / kChunk) + chunk) * 128;
}

// Offset (in scale pairs) of (expert, 16-row tile, group) in the packed scales.
template <int N, int K>
__device__ __forceinline__ long long tile_group_offset(int expert, int tile, int group) {
  return ((static_cast<long long>(expert) * (N / kTileRows) + tile) * (K / kGroup) + group) * 8;
}

}  // namespace chord::indexed
