// vLLM's MoE routing contract (moe_align's outputs) as the indexed kernels read it.
//   sorted_ids: route ids (token * top_k + j), each expert's run padded to a multiple of block_m with a
//               sentinel >= routes; only the first *num_post_padded entries mean anything.
//   expert_ids: one per block of block_m entries; -1 (or any id outside [0, E)) = not on this GPU, skip.
// The buffers may be over-allocated (capacity_blocks is what the host knows fits); the device count is
// never read back by the host, so a launch stays graph-capturable.
#pragma once

#include "common/types.cuh"

namespace chord {

struct IndexedRouting {
  const bf16* a;  // [tokens, K]: the row of route r is r / top_k
  const int32_t* sorted_ids;
  const int32_t* expert_ids;
  const int32_t* num_post_padded;
  int32_t top_k;
  int32_t routes;           // tokens * top_k: ids at or past it (and negative ones) are padding
  int32_t capacity_blocks;  // blocks both buffers hold

  // Blocks that carry routes: the device count rounded up to blocks, clamped to the buffers.
  template <int BM>
  __device__ __forceinline__ int blocks() const {
    const int padded = *num_post_padded;
    return padded <= 0 ? 0 : min((padded + BM - 1) / BM, capacity_blocks);
  }

  // The token row a sorted slot reads, or -1 for padding.
  __device__ __forceinline__ int token_of(int slot) const {
    const int route = sorted_ids[slot];
    return route >= 0 && route < routes ? route / top_k : -1;
  }

  // The output row a sorted slot writes, or -1 for padding.
  __device__ __forceinline__ int route_of(int slot) const {
    const int route = sorted_ids[slot];
    return route >= 0 && route < routes ? route : -1;
  }
};

}  // namespace chord
