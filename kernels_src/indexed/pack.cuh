// Packer: compressed-tensors pack-quantized INT4 (int32 [E, N, K/8], nibble = q + 8, least significant
// first along K; BF16 scales [E, N, K/32]) -> the decode ("mma") layout of indexed/layout.cuh. One thread
// per packed word, then one per scale pair; memory-bound and run once per weight. (The prefill ("wgmma")
// layout is the grouped family's BLOCK_K 64 layout and reuses its packer.)
#pragma once

#include "indexed/layout.cuh"

namespace chord::indexed {

template <int N, int K>
__global__ void __launch_bounds__(w4a16::kPackThreads)
    pack_mma_kernel(const uint32_t* __restrict__ weight, const bf16* __restrict__ scale, int experts,
                    uint32_t* __restrict__ packed, uint32_t* __restrict__ packed_scale) {
  static_assert(N % kTileRows == 0 && K % kChunk == 0, "shape outside the layout");
  constexpr int kTiles = N / kTileRows, kChunks = K / kChunk, kGroups = K / kGroup;
  const long long words = static_cast<long long>(experts) * N * K / 8;
  const long long pairs = static_cast<long long>(experts) * kTiles * kGroups * 8;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  auto nib = [&](long long expert, int row, int k) {
    return (weight[(expert * N + row) * (K / 8) + (k >> 3)] >> (4 * (k & 7))) & 0xFu;
  };
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < words; i += stride) {
    const int j = static_cast<int>(i & 3), lane = static_cast<int>((i >> 2) & 31);
    long long rest = i >> 7;
    const int chunk = static_cast<int>(rest % kChunks);
    rest /= kChunks;
    const int tile = static_cast<int>(rest % kTiles);
    const long long expert = rest / kTiles;
    const int r0 = tile * kTileRows + (lane >> 2), r1 = r0 + 8;
    const int k = chunk * kChunk + 16 * (lane & 3) + 4 * j;
    packed[i] = nib(expert, r0, k) | nib(expert, r1, k) << 4 | nib(expert, r0, k + 2) << 8 |
                nib(expert, r1, k + 2) << 12 | nib(expert, r0, k + 1) << 16 | nib(expert, r1, k + 1) << 20 |
                nib(expert, r0, k + 3) << 24 | nib(expert, r1, k + 3) << 28;
  }
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < pairs; i += stride) {
    const int g = static_cast<int>(i & 7);
    long long rest = i >> 3;
    const int group = static_cast<int>(rest % kGroups);
    rest /= kGroups;
    const int tile = static_cast<int>(rest % kTiles);
    const long long expert = rest / kTiles;
    const long long r0 = expert * N + tile * kTileRows + g;
    packed_scale[i] = static_cast<uint32_t>(scale[r0 * kGroups + group].bits) |
                      static_cast<uint32_t>(scale[(r0 + 8) * kGroups + group].bits) << 16;
  }
}

}  // namespace chord::indexed
