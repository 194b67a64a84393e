// MLA latent cache writer: one warp per token row of kv [T, 512 + ROPE_DIMS] BF16, written into record
// slot_mapping[t] of the cache (skipped when the slot is -1 or outside [0, num_slots)).
//   FORMAT 0 (fp8_ds_mla): 512 E4M3 bytes, 4 FP32 scales (one per 128-value tile), ROPE_DIMS BF16.
//     scale = max(amax / 448, FLT_MIN), value = RN(x / scale) saturated to E4M3. Both divisions are IEEE
//     (div.rn) so a host or torch reference reproduces every byte.
//   FORMAT 1 (bf16): the row copied as it is, (512 + ROPE_DIMS) BF16.
// Rows stride over the grid, so any grid size covers any T.
#pragma once

#include "common/fp8.cuh"
#include "sparse_mla/params.cuh"

namespace chord::sparse_mla {

__device__ __forceinline__ float bf16_bits_to_float(uint32_t bits16) { return __uint_as_float(bits16 << 16); }

template <int ROPE_DIMS>
__device__ __forceinline__ void write_fp8_ds_mla(const bf16* __restrict__ row, uint8_t* __restrict__ rec, int lane) {
  // Lane l holds values [tile * 128 + 4l, +4) of every tile: 8-byte loads, 4-byte stores.
  uint2 raw[kTiles];
#pragma unroll
  for (int t = 0; t < kTiles; ++t) raw[t] = *reinterpret_cast<const uint2*>(row + t * kTileDims + lane * 4);
#pragma unroll
  for (int t = 0; t < kTiles; ++t) {
    const float x0 = bf16_bits_to_float(raw[t].x & 0xffffu), x1 = bf16_bits_to_float(raw[t].x >> 16);
    const float x2 = bf16_bits_to_float(raw[t].y & 0xffffu), x3 = bf16_bits_to_float(raw[t].y >> 16);
    float amax = fmaxf(fmaxf(fabsf(x0), fabsf(x1)), fmaxf(fabsf(x2), fabsf(x3)));
#pragma unroll
    for (int d = 16; d >= 1; d >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, d));
    const float scale = fmaxf(div_rn(amax, 448.0f), 1.17549435e-38f);  // FLT_MIN
    const uint32_t packed = e4m3x2_satfinite(div_rn(x0, scale), div_rn(x1, scale)) |
                            (e4m3x2_satfinite(div_rn(x2, scale), div_rn(x3, scale)) << 16);
    *reinterpret_cast<uint32_t*>(rec + t * kTileDims + lane * 4) = packed;
    if (lane == t) reinterpret_cast<float*>(rec + kNopeDims)[t] = scale;
  }
  if constexpr (ROPE_DIMS > 0) {
    const uint32_t* src = reinterpret_cast<const uint32_t*>(row + kNopeDims);
    uint32_t* dst = reinterpret_cast<uint32_t*>(rec + kNopeDims + kTiles * 4);
    for (int i = lane; i < ROPE_DIMS / 2; i += 32) dst[i] = src[i];
  }
}

template <int ROPE_DIMS>
__device__ __forceinline__ void write_bf16(const bf16* __restrict__ row, uint8_t* __restrict__ rec, int lane) {
  constexpr int kChunks = (kNopeDims + ROPE_DIMS) * 2 / 16;
  const uint4* src = reinterpret_cast<const uint4*>(row);
  uint4* dst = reinterpret_cast<uint4*>(rec);
  for (int i = lane; i < kChunks; i += 32) dst[i] = src[i];
}

template <int FORMAT, int ROPE_DIMS, int WARPS>
__global__ void __launch_bounds__(WARPS * 32)
    cache_write_kernel(const bf16* __restrict__ kv, const int64_t* __restrict__ slot_mapping,
                       uint8_t* __restrict__ cache, int64_t num_tokens, int64_t num_slots) {
  constexpr int64_t kRecordBytes = record_layout(FORMAT, ROPE_DIMS).bytes;
  static_assert(kRecordBytes > 0, "format 0 (fp8_ds_mla) or 1 (bf16); rope_dims 0 or 64");
  constexpr int kRowDims = kNopeDims + ROPE_DIMS;
  const int lane = threadIdx.x & 31;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * WARPS + threadIdx.x / 32; t < num_tokens;
       t += static_cast<int64_t>(gridDim.x) * WARPS) {
    const int64_t slot = slot_mapping[t];
    if (slot < 0 || slot >= num_slots) continue;  // warp-uniform
    const bf16* row = kv + t * kRowDims;
    uint8_t* rec = cache + slot * kRecordBytes;
    if constexpr (FORMAT == 0) {
      write_fp8_ds_mla<ROPE_DIMS>(row, rec, lane);
    } else {
      write_bf16<ROPE_DIMS>(row, rec, lane);
    }
  }
}

}  // namespace chord::sparse_mla
