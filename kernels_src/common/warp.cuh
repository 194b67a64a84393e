// Warp-level helpers.
#pragma once

#include "common/types.cuh"

namespace chord {

__device__ __forceinline__ uint32_t lanemask_lt() {
  uint32_t m;
  asm("mov.u32 %0, %%lanemask_lt;" : "=r"(m));
  return m;
}

__device__ __forceinline__ int warp_inclusive_scan(int v) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    int n = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v += n;
  }
  return v;
}

// Bits needed to represent every value in [0, v].
__host__ __device__ constexpr int bit_width(int v) {
  int b = 0;
  while ((1 << b) <= v) ++b;
  return b;
}

// The lanes whose key equals this lane's (keys < 2^BITS), from BITS ballots. Same result as
// __match_any_sync, but a fixed ~2*BITS instructions: match.any's cost grows with the number of distinct
// keys; swapping it for this took moe_align from 143 to 105 us at 65536 routes on the H200 (~600 cycles
// saved per 32-route step with ~30 distinct experts).
template <int BITS>
__device__ __forceinline__ uint32_t match_any_by_ballot(uint32_t key) {
  uint32_t same = 0xffffffffu;
#pragma unroll
  for (int b = 0; b < BITS; ++b) {
    const uint32_t bit = (key >> b) & 1u;
    const uint32_t ones = __ballot_sync(0xffffffffu, bit);
    same &= bit ? ones : ~ones;
  }
  return same;
}

}  // namespace chord
