// Split-K merge of sparse MLA decode: per (token, head), the splits' normalized FP32 partial outputs are
// weighted by exp(lse_i - max lse), summed, divided by the summed weights (plus the sink's exp), and the
// LSE is rebuilt. Splits without a valid key carry lse = -inf and zeros, and weigh nothing; a query with
// none gets zeros and lse = +inf. One 128-thread CTA per (token, head), 4 dims per thread, the splits'
// loads unrolled so a few rounds of L2 latency cover them (ncu: one warp per row looping over 32 splits
// was latency-bound, 17 us at T = 1).
#pragma once

#include "common/types.cuh"
#include "sparse_mla/params.cuh"

namespace chord::sparse_mla {

template <int H>
__global__ void __launch_bounds__(kCombineThreads) sparse_mla_combine_kernel(const CombineParams p) {
  const int64_t row = blockIdx.x;
  const int d = threadIdx.x * 4;
  // The partials are the previous kernel's results (programmatic launch).
  asm volatile("griddepcontrol.wait;" ::: "memory");
  const float* lse_row = p.part_lse + row * p.splits;
  float lmax = -inf_f32();
  for (int s = 0; s < p.splits; ++s) lmax = fmaxf(lmax, lse_row[s]);
  bf16* dst = p.out + row * kNopeDims + d;
  if (lmax == -inf_f32()) {
    *reinterpret_cast<uint2*>(dst) = make_uint2(0, 0);
    if (threadIdx.x == 0) p.lse[row] = inf_f32();
    return;
  }
  float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
  float wsum = 0.f;
  const float* src = p.part_out + row * p.splits * kNopeDims + d;
#pragma unroll 8
  for (int s = 0; s < p.splits; ++s) {
    const float ls = lse_row[s];
    const float w = ls == -inf_f32() ? 0.f : expf(ls - lmax);
    const float4 x = *reinterpret_cast<const float4*>(src + s * kNopeDims);
    wsum += w;
    o.x = fmaf(w, x.x, o.x);
    o.y = fmaf(w, x.y, o.y);
    o.z = fmaf(w, x.z, o.z);
    o.w = fmaf(w, x.w, o.w);
  }
  float denom = wsum;
  if (p.sink) denom += expf(p.sink[row % H] - lmax);
  const float inv = 1.f / denom;
  *reinterpret_cast<uint2*>(dst) = make_uint2(pack_bf16x2(o.x * inv, o.y * inv), pack_bf16x2(o.z * inv, o.w * inv));
  if (threadIdx.x == 0) p.lse[row] = lmax + logf(wsum);
}

}  // namespace chord::sparse_mla
