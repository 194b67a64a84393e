// The query's NoPE dims for F16 MMAs against E4M3 keys (decode.cuh, decode_wgmma.cuh): a warp holds one
// head's 512 dims (lane l: dims 16l..16l+15 as two uint4 of BF16) and scales them by 2^e, e chosen so the
// row's max |q| lands in [2^14, 2^15): every BF16 value is exact in F16 and nothing overflows.
#pragma once

#include "common/types.cuh"

namespace chord::sparse_mla {

// The lane's 16 values as F16 (lo: dims 16l..16l+7, hi: the next 8); returns 2^-e, the factor that takes
// S back to q's units.
__device__ __forceinline__ float q_to_f16_prescaled(const uint4 v0, const uint4 v1, uint4& lo, uint4& hi) {
  const uint32_t w[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
  float f[16], amax = 0.f;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    f[2 * j] = __uint_as_float(w[j] << 16);
    f[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
    amax = fmaxf(amax, fmaxf(fabsf(f[2 * j]), fabsf(f[2 * j + 1])));
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(~0u, amax, o));
  const int e = amax > 0.f ? min(120, max(-120, 14 - (static_cast<int>(__float_as_uint(amax) >> 23) - 127))) : 0;
  const float pre = __uint_as_float(static_cast<uint32_t>(e + 127) << 23);
  uint32_t h[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) h[j] = pack_f16x2(f[2 * j] * pre, f[2 * j + 1] * pre);
  lo = make_uint4(h[0], h[1], h[2], h[3]);
  hi = make_uint4(h[4], h[5], h[6], h[7]);
  return __uint_as_float(static_cast<uint32_t>(127 - e) << 23);
}

}  // namespace chord::sparse_mla
