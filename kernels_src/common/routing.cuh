// vLLM's MoE routing contract as the indexed kernels read it: the device side of chord::IndexedRouting
// (indexed/params.cuh, where the contract is described).
#pragma once

#include "common/types.cuh"
#include "indexed/params.cuh"

namespace chord {

// Blocks that carry routes: the device count rounded up to blocks, clamped to the buffers.
template <int BM>
__device__ __forceinline__ int routing_blocks(const IndexedRouting& r) {
  const int padded = *r.num_post_padded;
  return padded <= 0 ? 0 : min((padded + BM - 1) / BM, r.capacity_blocks);
}

// The token row a sorted slot reads, or -1 for padding.
__device__ __forceinline__ int routing_token_of(const IndexedRouting& r, int slot) {
  const int route = r.sorted_ids[slot];
  return route >= 0 && route < r.routes ? route / r.top_k : -1;
}

// The output row a sorted slot writes, or -1 for padding.
__device__ __forceinline__ int routing_route_of(const IndexedRouting& r, int slot) {
  const int route = r.sorted_ids[slot];
  return route >= 0 && route < r.routes ? route : -1;
}

}  // namespace chord
