// INT4 group-32 weights (stored nibble = q + 8) dequantized straight into BF16x2 MMA fragments.
#pragma once

#include "common/mma.cuh"

namespace chord {

// One packed word -> the four A-fragment registers it feeds. Nibble i is the low half and nibble i + 4 the
// high half of register i; registers 0 and 2 belong to the lane's first row (scale0, a BF16 pair of one
// scale), 1 and 3 to its second (scale1). 0x4300 | nibble is 128 + nibble in BF16 exactly; minus 136 is q,
// times the scale gives RN(q * s): the unfused BF16 rounding, so every layout dequantizes identically.
__device__ __forceinline__ void dequant_int4_word(uint32_t word, uint32_t scale0, uint32_t scale1, uint32_t (&a)[4]) {
  constexpr uint32_t kNibbles = 0x000F000Fu, k128 = 0x43004300u, k136 = 0x43084308u;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t biased = and_or(word >> (4 * i), kNibbles, k128);
    a[i] = mul_bf16x2(sub_bf16x2(biased, k136), (i & 1) ? scale1 : scale0);
  }
}

// A BF16 scale (its bits) in both halves of a register.
__device__ __forceinline__ uint32_t bf16_pair(uint32_t bits) { return (bits & 0xFFFFu) | (bits << 16); }

}  // namespace chord
