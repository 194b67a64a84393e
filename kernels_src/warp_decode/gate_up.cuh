// Warp-decode gate/up: h[r, n] = SiLU(x[t] . gate[e, n]) * (x[t] . up[e, n]) for every route
// r = t * TOP_K + j of a decode batch with local expert e, written once as BF16.
//
// Work items are (active expert, block of 8 * ROW_TILES neurons); the grid is persistent (about the CTAs
// that fit on the device) and CTA b takes items b, b + gridDim.x, ... Each row tile is 16 weight rows (8
// gate rows on MMA rows 0-7, the matching up rows on 8-15, so one lane ends with gate and up of the same
// neuron); they are streamed once for all the expert's routes, which are the MMA columns (8 per tile;
// more routes take more passes). K_SPLIT warps split the hidden dimension, each through its own
// shared-memory ring (warp_stream.cuh) that runs on from one item into the next, so the weight copies
// of item i + 1 are in flight while item i's K_SPLIT FP32 partials meet in shared memory.
#pragma once

#include "warp_decode/route_table.cuh"
#include "warp_decode/warp_stream.cuh"

namespace chord::warp_decode {

template <int FORMAT, int HIDDEN, int INTER, int EXPERTS, int TOP_K, int CAPACITY, int K_SPLIT, int ROW_TILES,
          int N_TILES, int SG>
struct GateUpJobs {
  using F = WeightFormat<FORMAT>;
  static constexpr int kColumns = 8 * N_TILES, kNeurons = 8 * ROW_TILES, kRowBlocks = INTER / kNeurons;
  static constexpr int kGroupsPerWarp = HIDDEN / 32 / K_SPLIT;
  static constexpr long long kRowBytes = F::row_bytes(HIDDEN), kScaleRowBytes = F::scale_row_bytes(HIDDEN);
  // A row tile: 8 gate rows, then the matching 8 up rows INTER rows further (warp_stream.cuh).
  static constexpr long long kRowStride = kRowBytes, kHiOffset = INTER * kRowBytes, kTileStride = 8 * kRowBytes;
  static constexpr long long kScaleRowStride = kScaleRowBytes, kScaleHiOffset = INTER * kScaleRowBytes,
                             kScaleTileStride = 8 * kScaleRowBytes;
  // INT4: warp w streams stages w, w + K_SPLIT, ... of SG groups, so at any time the CTA's warps read
  // neighbouring 64-byte pieces of each row, not pieces a warp's share apart: 10-17% faster at 8-64 tokens
  // (H200). MXFP8's 128-byte pieces measured 7% slower that way and keep contiguous shares.
  static constexpr bool kInterleaved = FORMAT == kInt4Group32;
  static constexpr int kStageStride = kInterleaved ? K_SPLIT * SG : SG;
  const RouteTable<EXPERTS, CAPACITY>& table;
  const bf16* x;
  bf16* h;
  const uint8_t* w13;
  const uint8_t* w13_scale;
  float* partial;  // [K_SPLIT][ROW_TILES][N_TILES][4][32]
  // Job j = (item blockIdx.x + gridDim.x * (j >> pass_bits), column pass j & (2^pass_bits - 1)); 2^pass_bits
  // passes cover the busiest expert. Every warp of the CTA sees the same jobs (and skips the same empty
  // passes), so the barriers in finish() pair up.
  int warp, items, pass_bits;

  __device__ int size() const { return items << pass_bits; }
  __device__ int item_of(int j) const { return blockIdx.x + gridDim.x * (j >> pass_bits); }
  __device__ int expert_of(int j) const { return table.active[item_of(j) / kRowBlocks]; }
  __device__ int neuron0_of(int j) const { return item_of(j) % kRowBlocks * kNeurons; }
  __device__ int first_column(int j) const { return (j & ((1 << pass_bits) - 1)) * kColumns; }
  __device__ bool get(int j, StreamJob& job) const {
    const int expert = expert_of(j);
    if (first_column(j) >= table.count[expert]) return false;
    const long long gate_row = static_cast<long long>(expert) * 2 * INTER + neuron0_of(j);
    job = {w13 + gate_row * kRowBytes, w13_scale + gate_row * kScaleRowBytes,
           kInterleaved ? warp * SG : warp * kGroupsPerWarp, kGroupsPerWarp / SG};
    return true;
  }
  __device__ int route(int j, int c) const {
    const int expert = expert_of(j), first = first_column(j), i = first + c;
    return table.routes[table.offset[expert] + (i < table.count[expert] ? i : first)];
  }
  __device__ const bf16* column(int j, int c) const { return x + static_cast<long long>(route(j, c) / TOP_K) * HIDDEN; }
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
    const int expert = expert_of(j), first = first_column(j), count = table.count[expert];
    const int neuron0 = neuron0_of(j);
    const int32_t* routes = table.routes + table.offset[expert];
    for (int i = threadIdx.x; i < kTiles * 64; i += 32 * K_SPLIT) {
      const int tile = i / 64, rt = tile / N_TILES, nt = tile % N_TILES, p = (i / 32) % 2, ln = i % 32;
      const int c = first + nt * 8 + 2 * (ln % 4) + p;
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
__global__ void __launch_bounds__(32 * K_SPLIT, resident_ctas_bound(K_SPLIT, ROW_TILES, N_TILES))
    gate_up_kernel(const bf16* __restrict__ x, const int32_t* __restrict__ topk_ids,
                   const int32_t* __restrict__ expert_map, int32_t num_global_experts, int32_t num_tokens,
                   const uint8_t* __restrict__ w13, const uint8_t* __restrict__ w13_scale, bf16* __restrict__ h) {
  using Layout = StageLayout<FORMAT, SG, ROW_TILES>;
  constexpr int kCapacity = MAX_TOKENS * TOP_K;
  using Jobs = GateUpJobs<FORMAT, HIDDEN, INTER, EXPERTS, TOP_K, kCapacity, K_SPLIT, ROW_TILES, N_TILES, SG>;
  static_assert(HIDDEN % 32 == 0 && (HIDDEN / 32) % K_SPLIT == 0 && Jobs::kGroupsPerWarp % SG == 0, "bad K split");
  static_assert(INTER % (8 * ROW_TILES) == 0, "neurons come in blocks of 8 per row tile");

  // The down kernel may launch now (programmatic dependent launch): its route table and first weight
  // stages overlap this kernel; it waits for h with griddepcontrol.wait.
  asm volatile("griddepcontrol.launch_dependents;");
  __shared__ RouteTable<EXPERTS, kCapacity> table;
  __shared__ float partial[K_SPLIT * ROW_TILES * N_TILES * 4 * 32];
  extern __shared__ __align__(16) uint8_t ring[];  // K_SPLIT rings
  if (dynamic_smem_size() < gate_up_dynamic_smem(FORMAT, K_SPLIT, SG, ROW_TILES, STAGES)) __trap();
  build_route_table<EXPERTS, kCapacity, 32 * K_SPLIT, HAS_MAP>(table, topk_ids, expert_map, num_global_experts,
                                                               num_tokens * TOP_K);
  const int total = table.num_active * Jobs::kRowBlocks, b = blockIdx.x, grid = gridDim.x;
  int pass_bits = 0;
  while ((8 * N_TILES << pass_bits) < table.max_count) ++pass_bits;
  const int warp = threadIdx.x / 32;
  Jobs jobs{table, x, h, w13, w13_scale, partial, warp, total > b ? (total - b + grid - 1) / grid : 0, pass_bits};
  WarpStream<FORMAT, ROW_TILES, N_TILES, SG, STAGES, Jobs> stream{jobs, ring + warp * STAGES * Layout::kBytes,
                                                                  static_cast<int>(threadIdx.x % 32)};
  stream.run();
}

}  // namespace chord::warp_decode
