// Warp-decode down projection with the top-k combine folded in:
// out[t, n] = sum over t's routes r (local expert e, weight w_r) of w_r * (h[r] . down[e, n]), FP32, BF16 out.
//
// CTA blockIdx.x owns 16 * ROW_TILES output rows for every token. Its work items are (active expert, K
// chunk); warp w takes items w, w + WARPS, ... and streams each item's rows once for all routes of that
// expert (the MMA columns; more than 8 * N_TILES routes take more passes). Each partial, scaled by its
// route's weight, is added into the warp's own [token][row] FP32 accumulator in shared memory
// (atomically: a token may route twice to one expert). The warps' accumulators are summed in a fixed
// order, so the result does not depend on scheduling. Tokens without a local route get 0 (the EP
// partial sum).
#pragma once

#include "warp_decode/route_table.cuh"
#include "warp_decode/warp_stream.cuh"

namespace chord::warp_decode {

template <int FORMAT, int HIDDEN, int INTER, int EXPERTS, int TOP_K, int CAPACITY, int WARPS, int K_CHUNKS,
          int ROW_TILES, int N_TILES, int SG>
struct DownJobs {
  using F = WeightFormat<FORMAT>;
  static constexpr int kColumns = 8 * N_TILES, kGroupsPerItem = INTER / 32 / K_CHUNKS, kRows = 16 * ROW_TILES;
  static constexpr long long kRowBytes = F::row_bytes(INTER), kScaleRowBytes = F::scale_row_bytes(INTER);
  // A row tile: 16 consecutive output rows (warp_stream.cuh).
  static constexpr long long kRowStride = kRowBytes, kHiOffset = 8 * kRowBytes, kTileStride = 16 * kRowBytes;
  static constexpr long long kScaleRowStride = kScaleRowBytes, kScaleHiOffset = 8 * kScaleRowBytes,
                             kScaleTileStride = 16 * kScaleRowBytes;
  static constexpr int kStageStride = SG;  // an item's K chunk, stage after stage
  const RouteTable<EXPERTS, CAPACITY>& table;
  const bf16* h;
  const float* topk_weights;
  const uint8_t* w2;
  const uint8_t* w2_scale;
  float* acc_smem;  // this warp's [tokens][kRows]
  // Job j = (item warp + WARPS * (j >> pass_bits), column pass j & (2^pass_bits - 1)); 2^pass_bits
  // passes cover the busiest expert (a power of two: no integer division per stage).
  int warp, row0, items, pass_bits;

  __device__ int size() const { return items > warp ? ((items - warp + WARPS - 1) / WARPS) << pass_bits : 0; }
  __device__ int pass_of(int j) const { return j & ((1 << pass_bits) - 1); }
  __device__ int expert_of(int j) const { return table.active[(warp + WARPS * (j >> pass_bits)) / K_CHUNKS]; }
  __device__ bool get(int j, StreamJob& job) const {
    const int item = warp + WARPS * (j >> pass_bits), expert = table.active[item / K_CHUNKS];
    if (pass_of(j) * kColumns >= table.count[expert]) return false;
    const long long row = static_cast<long long>(expert) * HIDDEN + row0;
    job = {w2 + row * kRowBytes, w2_scale + row * kScaleRowBytes, (item % K_CHUNKS) * kGroupsPerItem,
           kGroupsPerItem / SG};
    return true;
  }
  __device__ int route(int j, int c) const {
    const int expert = expert_of(j), first = pass_of(j) * kColumns, i = first + c;
    return table.routes[table.offset[expert] + (i < table.count[expert] ? i : first)];
  }
  __device__ const bf16* column(int j, int c) const { return h + static_cast<long long>(route(j, c)) * INTER; }
  // h comes from the gate/up kernel launched just before (programmatic dependent launch); the weight
  // stages already in flight do not depend on it.
  __device__ void before_columns() const { asm volatile("griddepcontrol.wait;" ::: "memory"); }
  __device__ void finish(int j, const float (&acc)[ROW_TILES][N_TILES][4]) const {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int expert = expert_of(j), first = pass_of(j) * kColumns, count = table.count[expert];
#pragma unroll
    for (int nt = 0; nt < N_TILES; ++nt) {
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        const int c = nt * 8 + 2 * t + p;
        if (first + c < count) {
          const int r = route(j, c);
          const float w = __ldg(topk_weights + r);
          float* a = acc_smem + (r / TOP_K) * kRows;
#pragma unroll
          for (int rt = 0; rt < ROW_TILES; ++rt) {
            atomicAdd(a + 16 * rt + g, w * acc[rt][nt][p]);
            atomicAdd(a + 16 * rt + g + 8, w * acc[rt][nt][p + 2]);
          }
        }
      }
    }
  }
};

template <int FORMAT, int HIDDEN, int INTER, int EXPERTS, int TOP_K, int MAX_TOKENS, int WARPS, int K_CHUNKS,
          int ROW_TILES, int N_TILES, int SG, int STAGES, bool HAS_MAP>
__global__ void __launch_bounds__(32 * WARPS, resident_ctas_bound(WARPS, ROW_TILES, N_TILES))
    down_kernel(const bf16* __restrict__ h, const float* __restrict__ topk_weights,
                const int32_t* __restrict__ topk_ids, const int32_t* __restrict__ expert_map,
                int32_t num_global_experts, int32_t num_tokens, const uint8_t* __restrict__ w2,
                const uint8_t* __restrict__ w2_scale, bf16* __restrict__ out) {
  using Layout = StageLayout<FORMAT, SG, ROW_TILES>;
  constexpr int kCapacity = MAX_TOKENS * TOP_K, kRows = 16 * ROW_TILES;
  using Jobs = DownJobs<FORMAT, HIDDEN, INTER, EXPERTS, TOP_K, kCapacity, WARPS, K_CHUNKS, ROW_TILES, N_TILES, SG>;
  static_assert(INTER % 32 == 0 && (INTER / 32) % K_CHUNKS == 0 && (INTER / 32 / K_CHUNKS) % SG == 0, "bad K split");
  static_assert(HIDDEN % kRows == 0, "output rows come in blocks of 16 per row tile");
  constexpr int kAccFloats = down_accumulator_floats(WARPS, MAX_TOKENS, ROW_TILES);

  __shared__ RouteTable<EXPERTS, kCapacity> table;
  extern __shared__ __align__(16) float acc_smem[];  // [WARPS][MAX_TOKENS][kRows], then WARPS rings
  if (dynamic_smem_size() < down_dynamic_smem(FORMAT, WARPS, MAX_TOKENS, SG, ROW_TILES, STAGES)) __trap();
  for (int i = threadIdx.x; i < kAccFloats; i += 32 * WARPS) acc_smem[i] = 0.0f;
  build_route_table<EXPERTS, kCapacity, 32 * WARPS, HAS_MAP>(table, topk_ids, expert_map, num_global_experts,
                                                             num_tokens * TOP_K);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = blockIdx.x * kRows;
  int pass_bits = 0;
  while ((8 * N_TILES << pass_bits) < table.max_count) ++pass_bits;
  Jobs jobs{table,    h,        topk_weights,
            w2,       w2_scale, acc_smem + warp * MAX_TOKENS * kRows,
            warp,     row0,     table.num_active * K_CHUNKS,
            pass_bits};
  uint8_t* rings = reinterpret_cast<uint8_t*>(acc_smem + kAccFloats);
  WarpStream<FORMAT, ROW_TILES, N_TILES, SG, STAGES, Jobs> stream{jobs, rings + warp * STAGES * Layout::kBytes, lane};
  stream.run();
  __syncthreads();
  for (int i = threadIdx.x; i < num_tokens * kRows; i += 32 * WARPS) {
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) s += acc_smem[w * MAX_TOKENS * kRows + i];
    out[static_cast<long long>(i / kRows) * HIDDEN + row0 + i % kRows] = to_bf16(s);
  }
}

}  // namespace chord::warp_decode
