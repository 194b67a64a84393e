// Split-K merge of sparse MLA decode: per (token, head), the splits' normalized FP32 partial outputs are
// weighted by exp(lse_i - max lse), summed, divided by the summed weights (plus the sink's exp), and the
// LSE is rebuilt. Splits without a valid key carry lse = -inf and zeros, and weigh nothing; a query with
// none gets zeros and lse = +inf. One CTA per (token, head): the LSEs read once into shared memory, then
// kCombineGroups groups of 128 threads (4 dims a thread) take every kCombineGroups-th split, their loads
// unrolled, and add up through shared memory: one or two rounds of memory latency where one group walking
// 32 splits took eight (ncu: 8.5 us a CTA at T = 1, 64 heads, 32 splits).
#pragma once

#include "common/types.cuh"
#include "sparse_mla/params.cuh"

namespace chord::sparse_mla {

template <int H>
__global__ void __launch_bounds__(kCombineThreads) sparse_mla_combine_kernel(const CombineParams p) {
  constexpr int kDimThreads = kNopeDims / 4;
  __shared__ float lse_s[kMaxSplits];
  __shared__ float4 part_s[kCombineGroups - 1][kDimThreads];
  const int64_t row = blockIdx.x;
  const int group = threadIdx.x / kDimThreads, d = threadIdx.x % kDimThreads * 4;
  // The partials are the previous kernel's results (programmatic launch).
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (threadIdx.x < p.splits) lse_s[threadIdx.x] = p.part_lse[row * p.splits + threadIdx.x];
  __syncthreads();
  float lmax = -inf_f32();
  for (int s = 0; s < p.splits; ++s) lmax = fmaxf(lmax, lse_s[s]);
  bf16* dst = p.out + row * kNopeDims + d;
  if (lmax == -inf_f32()) {
    if (group == 0) *reinterpret_cast<uint2*>(dst) = make_uint2(0, 0);
    if (threadIdx.x == 0) p.lse[row] = inf_f32();
    return;
  }
  auto weight = [&](int s) {
    const float ls = lse_s[s];
    return ls == -inf_f32() ? 0.f : expf(ls - lmax);
  };
  float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
  const float* src = p.part_out + row * p.splits * kNopeDims + d;
#pragma unroll 8
  for (int s = group; s < p.splits; s += kCombineGroups) {
    const float w = weight(s);
    const float4 x = *reinterpret_cast<const float4*>(src + s * kNopeDims);
    o.x = fmaf(w, x.x, o.x);
    o.y = fmaf(w, x.y, o.y);
    o.z = fmaf(w, x.z, o.z);
    o.w = fmaf(w, x.w, o.w);
  }
  if (group > 0) part_s[group - 1][threadIdx.x % kDimThreads] = o;
  __syncthreads();
  if (group > 0) return;
#pragma unroll
  for (int k = 0; k < kCombineGroups - 1; ++k) {
    const float4 x = part_s[k][threadIdx.x];
    o.x += x.x, o.y += x.y, o.z += x.z, o.w += x.w;
  }
  float wsum = 0.f;
  for (int s = 0; s < p.splits; ++s) wsum += weight(s);
  float denom = wsum;
  if (p.sink) denom += expf(p.sink[row % H] - lmax);
  const float inv = 1.f / denom;
  *reinterpret_cast<uint2*>(dst) = make_uint2(pack_bf16x2(o.x * inv, o.y * inv), pack_bf16x2(o.z * inv, o.w * inv));
  if (threadIdx.x == 0) p.lse[row] = lmax + logf(wsum);
}

}  // namespace chord::sparse_mla
