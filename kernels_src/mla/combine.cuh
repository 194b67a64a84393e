// Split-K merge of sparse MLA decode: per (token, head), the splits' normalized FP32 partial outputs are
// weighted by exp(lse_i - max lse), summed, divided by the summed weights (plus the sink's exp), and the
// LSE is rebuilt. Splits without a valid key carry lse = -inf and weigh nothing; a query with none gets
// zeros and lse = +inf. One warp per (token, head), 16 dims per lane.
#pragma once

#include "mla/decode.cuh"

namespace chord::mla {

// Must match runtime/ops/sparse_mla.cpp's host mirror field for field.
struct CombineParams {
  const float* part_out;  // [rows, splits, 512]
  const float* part_lse;  // [rows, splits]
  const float* sink;      // optional [H]
  bf16* out;              // [rows, 512]
  float* lse;             // [rows]
  int64_t rows;           // T * H
  int32_t splits;
};

template <int H>
__global__ void __launch_bounds__(128) sparse_mla_combine_kernel(const CombineParams p) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * 4 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  // The partials are the previous kernel's results (programmatic launch).
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (row >= p.rows) return;
  const float* lse_row = p.part_lse + row * p.splits;
  float lmax = -inf_f32();
  for (int s = lane; s < p.splits; s += 32) lmax = fmaxf(lmax, lse_row[s]);
#pragma unroll
  for (int o = 16; o > 0; o /= 2) lmax = fmaxf(lmax, __shfl_xor_sync(~0u, lmax, o));
  bf16* dst = p.out + row * kNopeDims + lane * 16;
  if (lmax == -inf_f32()) {
    *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
    *reinterpret_cast<uint4*>(dst + 8) = make_uint4(0, 0, 0, 0);
    if (lane == 0) p.lse[row] = inf_f32();
    return;
  }
  float o[16] = {};
  float wsum = 0.f;
  // Unrolled so the splits' loads are in flight together (the loop is latency-bound otherwise). A split
  // without a valid key wrote zeros and weighs 0, so it needs no branch.
#pragma unroll 4
  for (int s = 0; s < p.splits; ++s) {
    const float ls = lse_row[s];
    const float w = ls == -inf_f32() ? 0.f : expf(ls - lmax);
    wsum += w;
    const float4* src = reinterpret_cast<const float4*>(p.part_out + (row * p.splits + s) * kNopeDims + lane * 16);
#pragma unroll
    for (int v = 0; v < 4; ++v) {
      const float4 x = src[v];
      o[4 * v] = fmaf(w, x.x, o[4 * v]);
      o[4 * v + 1] = fmaf(w, x.y, o[4 * v + 1]);
      o[4 * v + 2] = fmaf(w, x.z, o[4 * v + 2]);
      o[4 * v + 3] = fmaf(w, x.w, o[4 * v + 3]);
    }
  }
  float denom = wsum;
  if (p.sink) denom += expf(p.sink[row % H] - lmax);
  const float inv = 1.f / denom;
  uint32_t packed[8];
#pragma unroll
  for (int v = 0; v < 8; ++v) packed[v] = pack_bf16x2(o[2 * v] * inv, o[2 * v + 1] * inv);
  *reinterpret_cast<uint4*>(dst) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  *reinterpret_cast<uint4*>(dst + 8) = make_uint4(packed[4], packed[5], packed[6], packed[7]);
  if (lane == 0) p.lse[row] = lmax + logf(wsum);
}

}  // namespace chord::mla
