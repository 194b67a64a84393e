// Warp-decode gate/up: h[r, n] = SiLU(x[t] . gate[e, n]) * (x[t] . up[e, n]) for every route
// r = t * TOP_K + j of a decode batch with local expert e, written once as BF16.
//
// CTA (blockIdx.x, blockIdx.y) = (8 neurons, the blockIdx.y-th active expert). Its 16 weight rows (8 gate
// rows on MMA rows 0-7, the matching up rows on 8-15, so one lane ends with gate and up of the same
// neuron) are read once for all the expert's routes, which are the MMA columns (8 per tile). K_SPLIT
// warps split the hidden dimension; their FP32 partials meet in shared memory. CTAs whose slot has no
// expert exit after the route table.
#pragma once

#include "warp_decode/route_table.cuh"
#include "warp_decode/weights.cuh"

namespace chord::warp_decode {

template <int FORMAT, int HIDDEN, int INTER, int EXPERTS, int TOP_K, int MAX_TOKENS, int K_SPLIT, int N_TILES,
          int UNROLL, bool HAS_MAP>
__global__ void __launch_bounds__(32 * K_SPLIT, 3)
    gate_up_kernel(const bf16* __restrict__ x, const int32_t* __restrict__ topk_ids,
                   const int32_t* __restrict__ expert_map, int32_t num_global_experts, int32_t num_tokens,
                   const uint8_t* __restrict__ w13, const uint8_t* __restrict__ w13_scale, bf16* __restrict__ h) {
  using F = WeightFormat<FORMAT>;
  constexpr int kGroups = HIDDEN / 32, kGroupsPerWarp = kGroups / K_SPLIT, kColumns = 8 * N_TILES;
  constexpr long long kRowBytes = F::row_bytes(HIDDEN), kScaleRowBytes = F::scale_row_bytes(HIDDEN);
  static_assert(HIDDEN % 32 == 0 && kGroups % K_SPLIT == 0 && kGroupsPerWarp % UNROLL == 0, "bad K split");
  static_assert(INTER % 8 == 0, "neurons come in blocks of 8");

  // The down kernel may launch now (programmatic dependent launch): its route table and weight prefetch
  // overlap this kernel; it waits for h with griddepcontrol.wait.
  asm volatile("griddepcontrol.launch_dependents;");
  __shared__ RouteTable<EXPERTS, MAX_TOKENS * TOP_K> table;
  __shared__ float partial[K_SPLIT][N_TILES][4][32];
  build_route_table<EXPERTS, MAX_TOKENS * TOP_K, 32 * K_SPLIT, HAS_MAP>(table, topk_ids, expert_map,
                                                                        num_global_experts, num_tokens * TOP_K);
  if (static_cast<int>(blockIdx.y) >= table.num_active) return;
  const int expert = table.active[blockIdx.y];
  const int count = table.count[expert];
  const int32_t* routes = table.routes + table.offset[expert];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int neuron0 = blockIdx.x * 8;
  const long long gate_row = static_cast<long long>(expert) * 2 * INTER + neuron0 + g;
  const uint8_t* a_lo = w13 + gate_row * kRowBytes;
  const uint8_t* a_hi = a_lo + INTER * kRowBytes;
  const uint8_t* s_lo = w13_scale + gate_row * kScaleRowBytes;
  const uint8_t* s_hi = s_lo + INTER * kScaleRowBytes;

  for (int c0 = 0; c0 < count; c0 += kColumns) {
    const bf16* b_rows[N_TILES];
#pragma unroll
    for (int nt = 0; nt < N_TILES; ++nt) {
      const int c = c0 + nt * 8 + g;
      b_rows[nt] = x + static_cast<long long>(routes[c < count ? c : 0] / TOP_K) * HIDDEN;  // padding: any valid row
    }
    float acc[N_TILES][4] = {};
    mma_weight_rows<FORMAT, N_TILES, UNROLL>(acc, a_lo, a_hi, s_lo, s_hi, b_rows, warp * kGroupsPerWarp,
                                             (warp + 1) * kGroupsPerWarp, t);
#pragma unroll
    for (int nt = 0; nt < N_TILES; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) partial[warp][nt][i][lane] = acc[nt][i];
    }
    __syncthreads();
    // (tile, column parity, lane): gate in d[p], up in d[p + 2]; the K_SPLIT partials summed in order.
    for (int i = threadIdx.x; i < N_TILES * 64; i += 32 * K_SPLIT) {
      const int nt = i / 64, p = (i / 32) % 2, ln = i % 32;
      const int c = c0 + nt * 8 + 2 * (ln % 4) + p;
      if (c >= count) continue;
      float gate = 0.0f, up = 0.0f;
#pragma unroll
      for (int w = 0; w < K_SPLIT; ++w) {
        gate += partial[w][nt][p][ln];
        up += partial[w][nt][p + 2][ln];
      }
      h[static_cast<long long>(routes[c]) * INTER + neuron0 + ln / 4] = to_bf16(gate / (1.0f + __expf(-gate)) * up);
    }
    __syncthreads();
  }
}

}  // namespace chord::warp_decode
