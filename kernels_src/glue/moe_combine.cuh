// moe_combine: out[t, :] = sum_j w[t, j] * rows[t*TOP_K + j, :], FP32 accumulation, BF16 out; threads
// and rows per CTA as in silu_and_mul.cuh. With
// FILTER, a route whose expert is not local (expert_map[id] < 0 or id out of range) contributes nothing
// and its row is never read (the GEMM left it unwritten).
#pragma once

#include "common/types.cuh"

namespace chord {

template <int TOP_K, int VEC, int THREADS, int ROWS_PER_CTA, bool FILTER>
__global__ void __launch_bounds__(THREADS* ROWS_PER_CTA)
    moe_combine_kernel(const bf16* __restrict__ rows, const float* __restrict__ weights, bf16* __restrict__ out,
                       int64_t tokens, int64_t hidden, const int32_t* __restrict__ topk_ids,
                       const int32_t* __restrict__ expert_map, int32_t num_experts) {
  const int64_t col = (static_cast<int64_t>(blockIdx.x) * THREADS + threadIdx.x % THREADS) * VEC;
  if (col >= hidden) return;
  for (int64_t t = static_cast<int64_t>(blockIdx.y) * ROWS_PER_CTA + threadIdx.x / THREADS; t < tokens;
       t += static_cast<int64_t>(gridDim.y) * ROWS_PER_CTA) {
    float acc[VEC];
#pragma unroll
    for (int i = 0; i < VEC; ++i) acc[i] = 0.0f;
#pragma unroll
    for (int j = 0; j < TOP_K; ++j) {
      const int64_t route = t * TOP_K + j;
      if (FILTER) {
        const int32_t e = topk_ids[route];
        if (static_cast<uint32_t>(e) >= static_cast<uint32_t>(num_experts) || expert_map[e] < 0) continue;
      }
      const float w = weights[route];
      const Bf16Vec<VEC> v = load_vec<VEC>(rows + route * hidden + col);
#pragma unroll
      for (int i = 0; i < VEC; ++i) acc[i] += w * to_float(v.v[i]);
    }
    Bf16Vec<VEC> o;
#pragma unroll
    for (int i = 0; i < VEC; ++i) o.v[i] = to_bf16(acc[i]);
    store_vec<VEC>(out + t * hidden + col, o);
  }
}

}  // namespace chord
