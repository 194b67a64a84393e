// Warp-decode gate/up: h[r, n] = SiLU(x[t] . gate[e, n]) * (x[t] . up[e, n]) for every route
// r = t * TOP_K + j of a decode batch with local expert e, written once as BF16.
//
// CTA (blockIdx.x, blockIdx.y) = (8 * ROW_TILES neurons, the blockIdx.y-th active expert). Each row tile
// is 16 weight rows (8 gate rows on MMA rows 0-7, the matching up rows on 8-15, so one lane ends with
// gate and up of the same neuron); they are streamed once for all the expert's routes, which are the MMA
// columns (8 per tile; more routes take more passes). K_SPLIT warps split the hidden dimension, each through its own
// shared-memory ring (warp_stream.cuh); their FP32 partials meet in shared memory. CTAs whose slot has no expert exit
// after the route table.
#pragma once

#include "warp_decode/route_table.cuh"
#include "warp_decode/warp_stream.cuh"

namespace chord::warp_decode {

template <int HIDDEN, int INTER, int TOP_K, int K_SPLIT, int ROW_TILES, int N_TILES>
struct GateUpJobs {
  static constexpr int kColumns = 8 * N_TILES;
  const bf16* x;
  bf16* h;
  const int32_t* routes;  // this expert's, in the route table
  int count;
  StreamJob rows;  // this warp's K range of the rows
  float* partial;  // [K_SPLIT][ROW_TILES][N_TILES][4][32]
  int warp, neuron0;

  __device__ int size() const { return (count + kColumns - 1) / kColumns; }
  __device__ bool get(int, StreamJob& job) const {
    job = rows;
    return true;
  }
  __device__ const bf16* column(int j, int c) const {
    const int i = j * kColumns + c;
    return x + static_cast<long long>(routes[i < count ? i : j * kColumns] / TOP_K) * HIDDEN;
  }
  __device__ void before_columns() const {}
  // (row tile, column tile, column parity, lane): gate in acc[p], up in acc[p + 2]; the K_SPLIT partials
  // summed in order.
  __device__ void finish(int j, const float (&acc)[ROW_TILES][N_TILES][4]) const {
    constexpr int kTiles = ROW_TILES * N_TILES;
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int rt = 0; rt < ROW_TILES; ++rt) {
#pragma unroll
      for (int nt = 0; nt < N_TILES; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i)
          partial[(((warp * ROW_TILES + rt) * N_TILES + nt) * 4 + i) * 32 + lane] = acc[rt][nt][i];
      }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < kTiles * 64; i += 32 * K_SPLIT) {
      const int tile = i / 64, rt = tile / N_TILES, nt = tile % N_TILES, p = (i / 32) % 2, ln = i % 32;
      const int c = j * kColumns + nt * 8 + 2 * (ln % 4) + p;
      if (c >= count) continue;
      float gate = 0.0f, up = 0.0f;
#pragma unroll
      for (int w = 0; w < K_SPLIT; ++w) {
        gate += partial[((w * kTiles + tile) * 4 + p) * 32 + ln];
        up += partial[((w * kTiles + tile) * 4 + p + 2) * 32 + ln];
      }
      h[static_cast<long long>(routes[c]) * INTER + neuron0 + 8 * rt + ln / 4] =
          to_bf16(gate / (1.0f + __expf(-gate)) * up);
    }
    __syncthreads();
  }
};

template <int FORMAT, int HIDDEN, int INTER, int EXPERTS, int TOP_K, int MAX_TOKENS, int K_SPLIT, int ROW_TILES,
          int N_TILES, int SG, int STAGES, bool HAS_MAP>
// Registers capped for 24 resident warps per SM (16 with two row or column tiles).
__global__ void __launch_bounds__(32 * K_SPLIT, (N_TILES * ROW_TILES == 1 ? 768 : 512) / (32 * K_SPLIT))
    gate_up_kernel(const bf16* __restrict__ x, const int32_t* __restrict__ topk_ids,
                   const int32_t* __restrict__ expert_map, int32_t num_global_experts, int32_t num_tokens,
                   const uint8_t* __restrict__ w13, const uint8_t* __restrict__ w13_scale, bf16* __restrict__ h) {
  using F = WeightFormat<FORMAT>;
  using Layout = StageLayout<FORMAT, SG, ROW_TILES>;
  using Jobs = GateUpJobs<HIDDEN, INTER, TOP_K, K_SPLIT, ROW_TILES, N_TILES>;
  constexpr int kGroups = HIDDEN / 32, kGroupsPerWarp = kGroups / K_SPLIT;
  constexpr long long kRowBytes = F::row_bytes(HIDDEN), kScaleRowBytes = F::scale_row_bytes(HIDDEN);
  static_assert(HIDDEN % 32 == 0 && kGroups % K_SPLIT == 0 && kGroupsPerWarp % SG == 0, "bad K split");
  static_assert(INTER % (8 * ROW_TILES) == 0, "neurons come in blocks of 8 per row tile");

  // The down kernel may launch now (programmatic dependent launch): its route table and first weight
  // stages overlap this kernel; it waits for h with griddepcontrol.wait.
  asm volatile("griddepcontrol.launch_dependents;");
  __shared__ RouteTable<EXPERTS, MAX_TOKENS * TOP_K> table;
  __shared__ float partial[K_SPLIT * ROW_TILES * N_TILES * 4 * 32];
  extern __shared__ __align__(16) uint8_t ring[];  // K_SPLIT rings
  if (dynamic_smem_size() < gate_up_dynamic_smem(FORMAT, K_SPLIT, SG, ROW_TILES, STAGES)) __trap();
  build_route_table<EXPERTS, MAX_TOKENS * TOP_K, 32 * K_SPLIT, HAS_MAP>(table, topk_ids, expert_map, num_global_experts,
                                                                        num_tokens * TOP_K);
  if (static_cast<int>(blockIdx.y) >= table.num_active) return;
  const int expert = table.active[blockIdx.y];
  const int warp = threadIdx.x / 32;
  const int neuron0 = blockIdx.x * 8 * ROW_TILES;
  const long long gate_row = static_cast<long long>(expert) * 2 * INTER + neuron0;
  const StreamJob rows{w13 + gate_row * kRowBytes,
                       w13 + (gate_row + INTER) * kRowBytes,
                       kRowBytes,
                       8 * kRowBytes,
                       w13_scale + gate_row * kScaleRowBytes,
                       w13_scale + (gate_row + INTER) * kScaleRowBytes,
                       kScaleRowBytes,
                       8 * kScaleRowBytes,
                       warp * kGroupsPerWarp,
                       kGroupsPerWarp / SG};
  Jobs jobs{x, h, table.routes + table.offset[expert], table.count[expert], rows, partial, warp, neuron0};
  WarpStream<FORMAT, ROW_TILES, N_TILES, SG, STAGES, Jobs> stream{jobs, ring + warp * STAGES * Layout::kBytes,
                                                                  static_cast<int>(threadIdx.x % 32)};
  stream.run();
}

}  // namespace chord::warp_decode
