// Packer: compressed-tensors pack-quantized INT4 (int32 [E, N, K/8], nibble = q + 8, least significant
// first along K; BF16 scales [E, N, K/32]) -> the grouped layout of layout.cuh for one BLOCK_K, and the
// scales transposed to [E, K/32, N]. One thread per packed word, then one per scale; memory-bound and run
// once per weight.
#pragma once

#include "grouped/layout.cuh"

namespace chord::grouped {

template <int N, int K, int BLOCK_K>
__global__ void __launch_bounds__(w4a16::kPackThreads)
    pack_kernel(const uint32_t* __restrict__ weight, const bf16* __restrict__ scale, int experts,
                uint32_t* __restrict__ packed, bf16* __restrict__ packed_scale) {
  static_assert(N % kSliceRows == 0 && K % BLOCK_K == 0 && BLOCK_K % 64 == 0, "shape outside the layout");
  constexpr int kChunks = BLOCK_K / 64, kSlices = N / kSliceRows, kBlocks = K / BLOCK_K;
  const long long words = static_cast<long long>(experts) * N * K / 8;
  const long long scales = static_cast<long long>(experts) * N * (K / kGroup);
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < words; i += stride) {
    // Decompose i in the order of the packed layout.
    const int j = static_cast<int>(i & 3), lane = static_cast<int>((i >> 2) & 31);
    long long rest = i >> 7;
    const int chunk = static_cast<int>(rest % kChunks);
    rest /= kChunks;
    const int warp = static_cast<int>(rest & 3);
    rest >>= 2;
    const int k_block = static_cast<int>(rest % kBlocks);
    rest /= kBlocks;
    const int slice = static_cast<int>(rest % kSlices);
    const long long expert = rest / kSlices;
    const int g = lane >> 2, t = lane & 3;
    const int r0 = slice * kSliceRows + warp * 16 + g;
    const int k0 = k_block * BLOCK_K + (chunk * 4 + j) * 16 + 2 * t;  // k0, k0+1 and k0+8, k0+9
    const uint32_t* row0 = weight + (expert * N + r0) * (K / 8);
    const uint32_t* row1 = row0 + 8 * (K / 8);
    auto nib = [](const uint32_t* row, int k) { return (row[k >> 3] >> (4 * (k & 7))) & 0xFu; };
    const uint32_t v = nib(row0, k0) | nib(row1, k0) << 4 | nib(row0, k0 + 8) << 8 | nib(row1, k0 + 8) << 12 |
                       nib(row0, k0 + 1) << 16 | nib(row1, k0 + 1) << 20 | nib(row0, k0 + 9) << 24 |
                       nib(row1, k0 + 9) << 28;
    packed[i] = v;
  }
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < scales; i += stride) {
    // Output order [E, K/32, N]; read [E, N, K/32].
    const int n = static_cast<int>(i % N);
    const long long eg = i / N;
    const int group = static_cast<int>(eg % (K / kGroup));
    const long long expert = eg / (K / kGroup);
    packed_scale[i] = scale[(expert * N + n) * (K / kGroup) + group];
  }
}

}  // namespace chord::grouped
