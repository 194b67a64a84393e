// DSA indexer key-cache writer: one warp per token row of k [T, 128] BF16, quantized into the slot
// slot_mapping[t] of a paged cache (skipped when the slot is -1 or outside [0, num_pages * page_size)).
// A page holds page_size 128-byte E4M3 keys, then page_size FP32 scales (132 bytes per token): per token
// scale = max(amax / 448, FLT_MIN), value = RN(k / scale) saturated to E4M3, both divisions IEEE so a
// torch reference reproduces every byte. page_size stays a runtime argument (one kernel for all pages).
#pragma once

#include "common/fp8.cuh"
#include "dsa_indexer/params.cuh"

namespace chord::dsa_indexer {

template <int WARPS>
__global__ void __launch_bounds__(WARPS * 32)
    key_cache_write_kernel(const bf16* __restrict__ k, const int64_t* __restrict__ slot_mapping,
                           uint8_t* __restrict__ cache, int64_t num_tokens, int32_t page_size, int64_t num_pages) {
  const int lane = threadIdx.x & 31;
  const int64_t num_slots = num_pages * page_size;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * WARPS + threadIdx.x / 32; t < num_tokens;
       t += static_cast<int64_t>(gridDim.x) * WARPS) {
    const int64_t slot = slot_mapping[t];
    if (slot < 0 || slot >= num_slots) continue;  // warp-uniform
    // Lane l holds values [4l, 4l + 4): one 8-byte load, one 4-byte store (132-byte pages keep 4-byte
    // alignment for every page size).
    const uint2 raw = *reinterpret_cast<const uint2*>(k + t * kHeadDim + lane * 4);
    const float x0 = __uint_as_float(raw.x << 16), x1 = __uint_as_float(raw.x & 0xffff0000u);
    const float x2 = __uint_as_float(raw.y << 16), x3 = __uint_as_float(raw.y & 0xffff0000u);
    float amax = fmaxf(fmaxf(fabsf(x0), fabsf(x1)), fmaxf(fabsf(x2), fabsf(x3)));
#pragma unroll
    for (int d = 16; d >= 1; d >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, d));
    const float scale = fmaxf(div_rn(amax, 448.0f), 1.17549435e-38f);  // FLT_MIN
    const int64_t page = slot / page_size, offset = slot % page_size;
    uint8_t* base = cache + page * page_size * kTokenBytes;
    *reinterpret_cast<uint32_t*>(base + offset * kHeadDim + lane * 4) =
        e4m3x2_satfinite(div_rn(x0, scale), div_rn(x1, scale)) |
        (e4m3x2_satfinite(div_rn(x2, scale), div_rn(x3, scale)) << 16);
    if (lane == 0) reinterpret_cast<float*>(base + static_cast<int64_t>(page_size) * kHeadDim)[offset] = scale;
  }
}

}  // namespace chord::dsa_indexer
