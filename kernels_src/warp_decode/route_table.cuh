// Per-CTA table of a decode batch's routes grouped by local expert, built from topk_ids directly (no
// moe_align pass, no global scratch). Every CTA of the warp-decode kernels builds its own copy: the
// routes of a decode batch are a few KB read from L2, cheaper than another launch.
#pragma once

#include "common/warp.cuh"
#include "warp_decode/params.cuh"

namespace chord::warp_decode {

template <int EXPERTS, int CAPACITY>
struct RouteTable {
  int32_t offset[EXPERTS];  // first slot of each local expert's routes in `routes`
  int32_t count[EXPERTS];
  int32_t active[EXPERTS];  // local ids of the experts with at least one route, ascending
  int32_t num_active;
  int32_t max_count;         // routes of the busiest expert
  int32_t routes[CAPACITY];  // route ids (token * top_k + j), grouped by expert
};
static_assert(sizeof(RouteTable<3, 5>) == route_table_bytes(3, 5), "params.cuh sizes the table for the host");

// Route r = token * top_k + j goes to local expert expert_map[topk_ids[r]] (HAS_MAP) or topk_ids[r];
// ids outside [0, num_global) and experts outside [0, EXPERTS) (not on this GPU) are dropped. The order
// of one expert's routes depends on atomics; results do not (each route is its own MMA column).
// Ends with __syncthreads(), so the table and anything written before the call are visible.
template <int EXPERTS, int CAPACITY, int THREADS, bool HAS_MAP>
__device__ __forceinline__ void build_route_table(RouteTable<EXPERTS, CAPACITY>& tb,
                                                  const int32_t* __restrict__ topk_ids,
                                                  const int32_t* __restrict__ expert_map, int32_t num_global,
                                                  int32_t num_routes) {
  constexpr int kPerThread = (CAPACITY + THREADS - 1) / THREADS;
  for (int i = threadIdx.x; i < EXPERTS; i += THREADS) tb.count[i] = 0;
  int id[kPerThread];
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int r = threadIdx.x + j * THREADS;
    id[j] = r < num_routes ? __ldg(topk_ids + r) : -1;
  }
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    int e = id[j];
    if (HAS_MAP) e = static_cast<uint32_t>(e) < static_cast<uint32_t>(num_global) ? __ldg(expert_map + e) : -1;
    id[j] = static_cast<uint32_t>(e) < static_cast<uint32_t>(EXPERTS) ? e : -1;
  }
  __syncthreads();
  int slot[kPerThread];
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) slot[j] = id[j] >= 0 ? atomicAdd(&tb.count[id[j]], 1) : 0;
  __syncthreads();
  if (threadIdx.x < 32) {  // one warp scans the counts into offsets and the active list
    constexpr int kPerLane = (EXPERTS + 31) / 32;
    const int base = threadIdx.x * kPerLane;
    int routes = 0, actives = 0, busiest = 0;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int c = base + i < EXPERTS ? tb.count[base + i] : 0;
      routes += c;
      actives += c > 0;
      busiest = max(busiest, c);
    }
    busiest = __reduce_max_sync(0xffffffffu, busiest);
    const int routes_incl = warp_inclusive_scan(routes), actives_incl = warp_inclusive_scan(actives);
    int r = routes_incl - routes, a = actives_incl - actives;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      if (base + i < EXPERTS) {
        const int c = tb.count[base + i];
        tb.offset[base + i] = r;
        r += c;
        if (c > 0) tb.active[a++] = base + i;
      }
    }
    if (threadIdx.x == 31) {
      tb.num_active = actives_incl;
      tb.max_count = busiest;
    }
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    if (id[j] >= 0) tb.routes[tb.offset[id[j]] + slot[j]] = threadIdx.x + j * THREADS;
  }
  __syncthreads();
}

}  // namespace chord::warp_decode
