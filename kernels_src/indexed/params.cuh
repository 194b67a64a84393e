// The W4A16 indexed GEMMs' contract (vLLM routing): the routing argument every indexed kernel (the
// decode kernel, and the grouped kernel in its gathering mode) takes by value, and the decode kernel's
// template ranges and tile constants, shared by the kernels, heuristics/indexed and runtime/ops.
#pragma once

#include "common/host_device.cuh"
#include "w4a16/params.cuh"

#if !defined(__CUDACC_RTC__)
#include <cstddef>
#endif

namespace chord {

// vLLM's MoE routing contract (moe_align's outputs) as the kernels read it (common/routing.cuh):
//   sorted_ids: route ids (token * top_k + j), each expert's run padded to a multiple of block_m with a
//               sentinel >= routes; only the first *num_post_padded entries mean anything.
//   expert_ids: one per block of block_m entries; -1 (or any id outside [0, E)) = not on this GPU, skip.
// The buffers may be over-allocated (capacity_blocks is what the host knows fits); the device count is
// never read back by the host, so a launch stays graph-capturable.
struct IndexedRouting {
  const bf16* a;  // [tokens, K]: the row of route r is r / top_k
  const int32_t* sorted_ids;
  const int32_t* expert_ids;
  const int32_t* num_post_padded;
  int32_t top_k;
  int32_t routes;           // tokens * top_k: ids at or past it (and negative ones) are padding
  int32_t capacity_blocks;  // blocks both buffers hold
};
static_assert(sizeof(IndexedRouting) == 48, "the by-value kernel argument's size");
#if !defined(__CUDACC_RTC__)  // NVRTC has no offsetof; the host checks the offsets it fills
static_assert(offsetof(IndexedRouting, sorted_ids) == 8 && offsetof(IndexedRouting, num_post_padded) == 24 &&
                  offsetof(IndexedRouting, top_k) == 32 && offsetof(IndexedRouting, routes) == 36 &&
                  offsetof(IndexedRouting, capacity_blocks) == 40,
              "the by-value kernel argument's layout");
#endif

}  // namespace chord

namespace chord::indexed {

constexpr int kMaxExperts = w4a16::kMaxExperts;
constexpr int kMaxTopK = 64;
constexpr int kGroup = w4a16::kGroup;

// The "mma" layout (indexed/layout.cuh): 16-row tiles (mma.sync M), 64-K chunks per lane load.
constexpr int kTileRows = 16;
constexpr int kChunk = 64;

// The decode kernel: 4 warps x 2 tiles x 16 rows per CTA, 4 CTAs per SM; block_m 8..32 (4 MMAs of 8
// tokens), DEPTH chunks of weights loaded ahead per warp.
constexpr int kDecodeThreads = 128;
constexpr int kDecodeRowsPerCta = 128;
constexpr int kDecodeCtasPerSm = 4;
constexpr int kDecodeMinBlockM = 8, kDecodeMaxBlockM = 32;
constexpr int kDecodeMaxDepth = 8;

}  // namespace chord::indexed
