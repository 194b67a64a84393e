// moe_align: vLLM's moe_align_block_size contract from topk_ids, deterministic (each expert's routes in
// ascending route id). One CTA: routes are processed in chunks of THREADS; within a chunk a route's rank
// among the same expert's routes comes from __match_any_sync plus per-warp prefix counts in shared
// memory, so no global scratch is needed and the result does not depend on scheduling.
#pragma once

#include "common/types.cuh"
#include "common/warp.cuh"

namespace chord {

template <int NUM_EXPERTS, int BLOCK_SIZE, bool HAS_EXPERT_MAP, int THREADS>
__global__ void __launch_bounds__(THREADS)
    moe_align_kernel(const int32_t* __restrict__ topk_ids, int32_t num_routes, const int32_t* __restrict__ expert_map,
                     int32_t* __restrict__ sorted_ids, int32_t sorted_capacity, int32_t* __restrict__ expert_ids,
                     int32_t expert_ids_capacity, int32_t* __restrict__ num_post_padded) {
  constexpr int kWarps = THREADS / 32;
  constexpr int kPerThread = (NUM_EXPERTS + THREADS - 1) / THREADS;
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS");
  static_assert(NUM_EXPERTS <= 65535, "per-warp counts are 16-bit");

  __shared__ int32_t s_count[NUM_EXPERTS];       // routes per expert
  __shared__ int32_t s_offset[NUM_EXPERTS + 1];  // exclusive prefix of padded counts
  __shared__ int32_t s_cursor[NUM_EXPERTS];      // next free slot per expert
  __shared__ uint16_t s_warp[kWarps][NUM_EXPERTS];
  __shared__ int32_t s_scan[kWarps];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  for (int e = tid; e < NUM_EXPERTS; e += THREADS) s_count[e] = 0;
  __syncthreads();
  for (int r = tid; r < num_routes; r += THREADS) {
    const int e = topk_ids[r];
    if (static_cast<uint32_t>(e) < static_cast<uint32_t>(NUM_EXPERTS)) atomicAdd(&s_count[e], 1);
  }
  __syncthreads();

  // Exclusive scan of padded counts; thread t owns experts [t*kPerThread, (t+1)*kPerThread).
  int local[kPerThread];
  int sum = 0;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int e = tid * kPerThread + i;
    const int c = e < NUM_EXPERTS ? (s_count[e] + BLOCK_SIZE - 1) / BLOCK_SIZE * BLOCK_SIZE : 0;
    local[i] = sum;
    sum += c;
  }
  const int inclusive = warp_inclusive_scan(sum);
  if (lane == 31) s_scan[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    const int v = lane < kWarps ? s_scan[lane] : 0;
    const int inc = warp_inclusive_scan(v);
    if (lane < kWarps) s_scan[lane] = inc - v;
  }
  __syncthreads();
  const int thread_base = s_scan[warp] + inclusive - sum;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int e = tid * kPerThread + i;
    if (e < NUM_EXPERTS) {
      s_offset[e] = thread_base + local[i];
      s_cursor[e] = thread_base + local[i];
    }
  }
  if (tid == THREADS - 1) s_offset[NUM_EXPERTS] = thread_base + sum;
  __syncthreads();

  const int total = s_offset[NUM_EXPERTS];
  if (tid == 0) *num_post_padded = total;
  for (int e = warp; e < NUM_EXPERTS; e += kWarps) {
    const int id = HAS_EXPERT_MAP ? expert_map[e] : e;
    const int first = s_offset[e] / BLOCK_SIZE, last = s_offset[e + 1] / BLOCK_SIZE;
    for (int b = first + lane; b < last; b += 32) expert_ids[b] = id;
    for (int p = s_offset[e] + s_count[e] + lane; p < s_offset[e + 1]; p += 32) sorted_ids[p] = num_routes;
  }
  for (int b = total / BLOCK_SIZE + tid; b < expert_ids_capacity; b += THREADS) expert_ids[b] = -1;
  for (int p = total + tid; p < sorted_capacity; p += THREADS) sorted_ids[p] = num_routes;

  for (int base = 0; base < num_routes; base += THREADS) {
    for (int i = tid; i < kWarps * NUM_EXPERTS; i += THREADS) (&s_warp[0][0])[i] = 0;
    __syncthreads();
    const int r = base + tid;
    int e = r < num_routes ? topk_ids[r] : -1;
    if (static_cast<uint32_t>(e) >= static_cast<uint32_t>(NUM_EXPERTS)) e = -1;
    const uint32_t same = __match_any_sync(0xffffffffu, e);
    if (e >= 0 && lane == __ffs(same) - 1) s_warp[warp][e] = static_cast<uint16_t>(__popc(same));
    __syncthreads();
    int runs[kPerThread];
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int x = tid + i * THREADS;
      int run = 0;
      if (x < NUM_EXPERTS) {
#pragma unroll 8
        for (int w = 0; w < kWarps; ++w) {
          const int c = s_warp[w][x];
          s_warp[w][x] = static_cast<uint16_t>(run);
          run += c;
        }
      }
      runs[i] = run;
    }
    __syncthreads();
    if (e >= 0) sorted_ids[s_cursor[e] + s_warp[warp][e] + __popc(same & lanemask_lt())] = r;
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int x = tid + i * THREADS;
      if (x < NUM_EXPERTS) s_cursor[x] += runs[i];
    }
  }
}

}  // namespace chord
