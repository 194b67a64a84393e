// The W4A16 MoE weights' contract, shared by the grouped and indexed GEMM families and their one packer
// family (w4a16.pack): the checkpoint scheme the packers read, the packed layouts (the values of
// chord_w4a16_layout_t), each layout's K block and the shapes every packer and GEMM of a layout accepts.
// The word and scale order of each layout: grouped/layout.cuh (WGMMA), indexed/layout.cuh (MMA).
#pragma once

#include "common/host_device.cuh"

namespace chord::w4a16 {

enum class Layout : int32_t {
  kWgmmaK64 = 0,   // grouped contiguous and indexed prefill: grouped::pack_kernel<N, K, 64>
  kWgmmaK128 = 1,  // grouped masked: grouped::pack_kernel<N, K, 128>
  kMma = 2,        // indexed decode: indexed::pack_mma_kernel<N, K>
};
constexpr int kLayouts = 3;

// The checkpoint scheme (compressed-tensors pack-quantized): symmetric 4-bit values, 8 per int32 word
// along K, nibble = q + 8; one BF16 scale per group of 32 along K.
constexpr int kBits = 4;
constexpr int kGroup = 32;

constexpr int kMaxExperts = 1024;  // the masked scheduler's per-CTA prefix table; the indexed kernels alike
constexpr int kRowMultiple = 128;  // N of every layout: one tile of weight rows of each GEMM
constexpr int kMaxDim = 1 << 20;   // N and K

// The packers: one thread per packed word (then per scale), on at most kPackMaxCtas CTAs.
constexpr int kPackThreads = 256;
constexpr int kPackMaxCtas = 8 * 1024;

// K of one shared-memory stage (WGMMA) or one lane load (MMA): K must be a multiple of it.
CHORD_HD constexpr int block_k(Layout layout) { return layout == Layout::kWgmmaK128 ? 128 : 64; }

// Bytes of a packed weight and of its scales (the same for every layout: N*K/2 and N*K/32 BF16).
CHORD_HD constexpr uint64_t packed_bytes(int experts, int n, int k) {
  return static_cast<uint64_t>(experts) * static_cast<uint64_t>(n) * static_cast<uint64_t>(k) / 2;
}
CHORD_HD constexpr uint64_t scale_bytes(int experts, int n, int k) {
  return static_cast<uint64_t>(experts) * static_cast<uint64_t>(n) * static_cast<uint64_t>(k) / kGroup * 2;
}

}  // namespace chord::w4a16
