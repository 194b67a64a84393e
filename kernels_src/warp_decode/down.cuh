// Warp-decode down projection with the top-k combine folded in:
// out[t, n] = sum over t's routes r (local expert e, weight w_r) of w_r * (h[r] . down[e, n]), FP32, BF16 out.
//
// CTA blockIdx.x owns 16 output rows for every token. Its work items are (active expert, K chunk); warp
// w takes items w, w + WARPS, ... and, per item, reads the expert's 16 weight rows once for all routes
// of that expert (the MMA columns). Each partial, scaled by its route's weight, is added into the warp's
// own [token][row] FP32 accumulator in shared memory (atomically: a token may route twice to one
// expert). The warps' accumulators are summed in a fixed order, so the result does not depend on
// scheduling. Tokens without a local route get 0 (the EP partial sum).
#pragma once

#include "warp_decode/route_table.cuh"
#include "warp_decode/weights.cuh"

namespace chord::warp_decode {

template <int FORMAT, int HIDDEN, int INTER, int EXPERTS, int TOP_K, int MAX_TOKENS, int WARPS, int K_CHUNKS,
          int N_TILES, int UNROLL, bool HAS_MAP>
__global__ void __launch_bounds__(32 * WARPS, 4)
    down_kernel(const bf16* __restrict__ h, const float* __restrict__ topk_weights,
                const int32_t* __restrict__ topk_ids, const int32_t* __restrict__ expert_map,
                int32_t num_global_experts, int32_t num_tokens, const uint8_t* __restrict__ w2,
                const uint8_t* __restrict__ w2_scale, bf16* __restrict__ out) {
  using F = WeightFormat<FORMAT>;
  constexpr int kGroups = INTER / 32, kGroupsPerItem = kGroups / K_CHUNKS, kColumns = 8 * N_TILES;
  constexpr long long kRowBytes = F::row_bytes(INTER), kScaleRowBytes = F::scale_row_bytes(INTER);
  static_assert(INTER % 32 == 0 && kGroups % K_CHUNKS == 0 && kGroupsPerItem % UNROLL == 0, "bad K split");
  static_assert(HIDDEN % 16 == 0, "output rows come in blocks of 16");

  __shared__ RouteTable<EXPERTS, MAX_TOKENS * TOP_K> table;
  extern __shared__ float acc_smem[];  // [WARPS][MAX_TOKENS][16]
  for (int i = threadIdx.x; i < WARPS * MAX_TOKENS * 16; i += 32 * WARPS) acc_smem[i] = 0.0f;
  build_route_table<EXPERTS, MAX_TOKENS * TOP_K, 32 * WARPS, HAS_MAP>(table, topk_ids, expert_map, num_global_experts,
                                                                      num_tokens * TOP_K);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int row0 = blockIdx.x * 16;
  float* my_acc = acc_smem + warp * MAX_TOKENS * 16;
  const int items = table.num_active * K_CHUNKS;
  // Launched early behind gate/up (programmatic dependent launch): the weights do not depend on it, so
  // pull this warp's first item into L2 before waiting for h. Without the launch attribute the wait
  // returns at once.
  if (warp < items) {
    const int expert = table.active[warp / K_CHUNKS], chunk = warp % K_CHUNKS;
    constexpr int kChunkBytes = static_cast<int>(kRowBytes / K_CHUNKS);
    const uint8_t* row = w2 + (static_cast<long long>(expert) * HIDDEN + row0 + lane % 16) * kRowBytes + chunk * kChunkBytes;
    for (int off = (lane / 16) * 128; off < kChunkBytes; off += 256) {
      asm volatile("prefetch.global.L2 [%0];" ::"l"(row + off));
    }
  }
  asm volatile("griddepcontrol.wait;" ::: "memory");
  for (int item = warp; item < items; item += WARPS) {
    const int expert = table.active[item / K_CHUNKS], chunk = item % K_CHUNKS;
    const int count = table.count[expert];
    const int32_t* routes = table.routes + table.offset[expert];
    const long long row = static_cast<long long>(expert) * HIDDEN + row0 + g;
    const uint8_t* a_lo = w2 + row * kRowBytes;
    const uint8_t* a_hi = a_lo + 8 * kRowBytes;
    const uint8_t* s_lo = w2_scale + row * kScaleRowBytes;
    const uint8_t* s_hi = s_lo + 8 * kScaleRowBytes;
    for (int c0 = 0; c0 < count; c0 += kColumns) {
      const bf16* b_rows[N_TILES];
#pragma unroll
      for (int nt = 0; nt < N_TILES; ++nt) {
        const int c = c0 + nt * 8 + g;
        b_rows[nt] = h + static_cast<long long>(routes[c < count ? c : 0]) * INTER;  // padding: any valid row
      }
      float acc[N_TILES][4] = {};
      mma_weight_rows<FORMAT, N_TILES, UNROLL>(acc, a_lo, a_hi, s_lo, s_hi, b_rows, chunk * kGroupsPerItem,
                                               (chunk + 1) * kGroupsPerItem, t);
#pragma unroll
      for (int nt = 0; nt < N_TILES; ++nt) {
#pragma unroll
        for (int p = 0; p < 2; ++p) {
          const int c = c0 + nt * 8 + 2 * t + p;
          if (c < count) {
            const int r = routes[c];
            const float w = __ldg(topk_weights + r);
            float* a = my_acc + (r / TOP_K) * 16;
            atomicAdd(a + g, w * acc[nt][p]);
            atomicAdd(a + g + 8, w * acc[nt][p + 2]);
          }
        }
      }
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < num_tokens * 16; i += 32 * WARPS) {
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) s += acc_smem[w * MAX_TOKENS * 16 + i];
    out[static_cast<long long>(i / 16) * HIDDEN + row0 + i % 16] = to_bf16(s);
  }
}

}  // namespace chord::warp_decode
