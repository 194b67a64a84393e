// silu_and_mul: out[r, i] = silu(in[r, i]) * in[r, I + i], FP32 math, BF16 in/out (vLLM's w13 layout:
// gate half then up half). VEC BF16 values per thread per access; THREADS threads span a row and a CTA
// holds ROWS_PER_CTA such rows (short rows would otherwise make tiny CTAs); rows stride over gridDim.y.
#pragma once

#include "common/types.cuh"

namespace chord {

template <int VEC, int THREADS, int ROWS_PER_CTA>
__global__ void __launch_bounds__(THREADS* ROWS_PER_CTA)
    silu_and_mul_kernel(const bf16* __restrict__ in, bf16* __restrict__ out, int64_t rows, int64_t inter) {
  const int64_t col = (static_cast<int64_t>(blockIdx.x) * THREADS + threadIdx.x % THREADS) * VEC;
  if (col >= inter) return;
  for (int64_t r = static_cast<int64_t>(blockIdx.y) * ROWS_PER_CTA + threadIdx.x / THREADS; r < rows;
       r += static_cast<int64_t>(gridDim.y) * ROWS_PER_CTA) {
    const bf16* gate_row = in + r * 2 * inter;
    const Bf16Vec<VEC> g = load_vec<VEC>(gate_row + col);
    const Bf16Vec<VEC> u = load_vec<VEC>(gate_row + inter + col);
    Bf16Vec<VEC> o;
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      const float x = to_float(g.v[i]);
      o.v[i] = to_bf16(x / (1.0f + __expf(-x)) * to_float(u.v[i]));
    }
    store_vec<VEC>(out + r * inter + col, o);
  }
}

}  // namespace chord
