// moe_align: vLLM's moe_align_block_size contract from topk_ids, deterministic (each expert's routes in
// ascending route id), in one CTA or one cluster of CLUSTER CTAs, without global scratch.
//
// Warp w (of all the cluster's warps) owns the contiguous route segment [w*seg, (w+1)*seg). Pass A: each
// warp walks its segment 32 routes at a time and counts routes per expert into its own shared-memory row
// (a ballot-based match groups the lanes of one expert; the group's leader adds the group size). A
// column-wise exclusive scan over the CTA's warps gives every (warp, expert) its start within the CTA's
// share of the expert's run; with a cluster, each CTA then reads the other CTAs' per-expert counts from
// their shared memory (DSMEM) for its own start and the totals. The padded per-expert scan gives the runs'
// offsets. Pass B walks the segments again and places each route at
// offset[e] + cta_base[e] + row[w][e] + rank among its group. Segments are ordered, so routes end up in
// ascending order. One CTA is issue-bound at ~1.6 ns per route (measured), hence the cluster for large
// inputs.
#pragma once

#include "common/cluster.cuh"
#include "common/types.cuh"
#include "common/warp.cuh"
#include "glue/params.cuh"

namespace chord {

// Routes a lane loads ahead in one go, so a warp has that many loads in flight per trip to memory.
constexpr int kMoeAlignLoadsInFlight = 4;

template <int NUM_EXPERTS, int BLOCK_SIZE, bool HAS_EXPERT_MAP, int THREADS, int CLUSTER>
__global__ void __launch_bounds__(THREADS)
    moe_align_kernel(const int32_t* __restrict__ topk_ids, int32_t num_routes, const int32_t* __restrict__ expert_map,
                     int32_t* __restrict__ sorted_ids, int32_t sorted_capacity, int32_t* __restrict__ expert_ids,
                     int32_t expert_ids_capacity, int32_t* __restrict__ num_post_padded) {
  constexpr int kWarps = THREADS / 32;
  constexpr int kPerThread = (NUM_EXPERTS + THREADS - 1) / THREADS;
  constexpr int kUnroll = kMoeAlignLoadsInFlight;
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS");

  constexpr MoeAlignSmem kSmem = moe_align_smem(NUM_EXPERTS, THREADS);
  extern __shared__ int32_t smem[];
  int32_t* s_row = smem + kSmem.row;              // [kWarps][NUM_EXPERTS]: counts, then starts
  int32_t* s_cta_count = smem + kSmem.cta_count;  // [NUM_EXPERTS] this CTA's routes per expert
  int32_t* s_cta_base = smem + kSmem.cta_base;    // [NUM_EXPERTS] routes of lower-ranked CTAs
  int32_t* s_count = smem + kSmem.count;          // [NUM_EXPERTS] routes per expert, all CTAs
  int32_t* s_offset = smem + kSmem.offset;        // [NUM_EXPERTS + 1] padded run offsets
  int32_t* s_scan = smem + kSmem.scan;            // [kWarps]

  uint32_t smem_size;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(smem_size));
  if (smem_size < moe_align_smem_bytes(NUM_EXPERTS, THREADS)) __trap();

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int rank = CLUSTER > 1 ? static_cast<int>(cluster_ctarank()) : 0;
  const int cluster_warp = rank * kWarps + warp, cluster_tid = rank * THREADS + tid;
  const int seg = (num_routes + kWarps * CLUSTER - 1) / (kWarps * CLUSTER);
  const int seg_begin = min(cluster_warp * seg, num_routes), seg_end = min(seg_begin + seg, num_routes);
  int32_t* my_row = s_row + warp * NUM_EXPERTS;

  for (int i = tid; i < kWarps * NUM_EXPERTS; i += THREADS) s_row[i] = 0;
  __syncthreads();

  // Walks this warp's segment in steps of 32 routes; visit(route, expert or -1, lanes of that expert).
  auto walk = [&](auto&& visit) {
    for (int base = seg_begin; base < seg_end; base += 32 * kUnroll) {
      int e[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int r = base + u * 32 + lane;
        e[u] = r < seg_end ? topk_ids[r] : -1;
        if (static_cast<uint32_t>(e[u]) >= static_cast<uint32_t>(NUM_EXPERTS)) e[u] = -1;  // dropped
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (base + u * 32 >= seg_end) break;  // warp-uniform
        // Dropped routes share the key NUM_EXPERTS, so they form their own group.
        const uint32_t same = match_any_by_ballot<bit_width(NUM_EXPERTS)>(e[u] >= 0 ? e[u] : NUM_EXPERTS);
        visit(base + u * 32 + lane, e[u], same);
        __syncwarp();
        if (e[u] >= 0 && lane == __ffs(same) - 1) my_row[e[u]] += __popc(same);
        __syncwarp();
      }
    }
  };

  walk([](int, int, uint32_t) {});  // pass A: per-warp counts
  __syncthreads();

  // Column scan over warps: row[w][e] becomes the start of warp w's routes within expert e's run.
  for (int x = tid; x < NUM_EXPERTS; x += THREADS) {
    int run = 0;
#pragma unroll 8
    for (int w = 0; w < kWarps; ++w) {
      const int c = s_row[w * NUM_EXPERTS + x];
      s_row[w * NUM_EXPERTS + x] = run;
      run += c;
    }
    s_cta_count[x] = run;
  }
  if constexpr (CLUSTER > 1) {
    cluster_sync();  // every CTA's counts are complete
    for (int x = tid; x < NUM_EXPERTS; x += THREADS) {
      int before = 0, all = 0;
#pragma unroll
      for (int c = 0; c < CLUSTER; ++c) {
        const int v = c == rank ? s_cta_count[x] : load_shared_remote(&s_cta_count[x], c);
        before += c < rank ? v : 0;
        all += v;
      }
      s_cta_base[x] = before;
      s_count[x] = all;
    }
    cluster_sync();  // no CTA reads another's shared memory after this (and none exits before it)
  } else {
    __syncthreads();
    for (int x = tid; x < NUM_EXPERTS; x += THREADS) {
      s_cta_base[x] = 0;
      s_count[x] = s_cta_count[x];
    }
    __syncthreads();
  }

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
    if (e < NUM_EXPERTS) s_offset[e] = thread_base + local[i];
  }
  if (tid == THREADS - 1) s_offset[NUM_EXPERTS] = thread_base + sum;
  __syncthreads();

  const int total = s_offset[NUM_EXPERTS];
  if (cluster_tid == 0) *num_post_padded = total;
  for (int e = cluster_warp; e < NUM_EXPERTS; e += kWarps * CLUSTER) {
    const int id = HAS_EXPERT_MAP ? expert_map[e] : e;
    const int first = s_offset[e] / BLOCK_SIZE, last = s_offset[e + 1] / BLOCK_SIZE;
    for (int b = first + lane; b < last; b += 32) expert_ids[b] = id;
    for (int p = s_offset[e] + s_count[e] + lane; p < s_offset[e + 1]; p += 32) sorted_ids[p] = num_routes;
  }
  for (int b = total / BLOCK_SIZE + cluster_tid; b < expert_ids_capacity; b += THREADS * CLUSTER) expert_ids[b] = -1;
  for (int p = total + cluster_tid; p < sorted_capacity; p += THREADS * CLUSTER) sorted_ids[p] = num_routes;

  // Pass B: placement (row[w][e] advances as the warp's routes of e are placed).
  walk([&](int r, int e, uint32_t same) {
    if (e >= 0) sorted_ids[s_offset[e] + s_cta_base[e] + my_row[e] + __popc(same & lanemask_lt())] = r;
  });
}

}  // namespace chord
