// vLLM's moe_align routing contract on the host side: the kernels' argument (mirror of
// kernels_src/common/routing.cuh) and the indexed family's optional validation, a host check of copies
// of the device buffers that reports the first bad entry.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace chordrt::ops {

// chord::IndexedRouting as passed by value to the kernels (same members, same order).
struct IndexedRoutingArg {
  const void* a = nullptr;
  const int32_t* sorted_ids = nullptr;
  const int32_t* expert_ids = nullptr;
  const int32_t* num_post_padded = nullptr;
  int32_t top_k = 1, routes = 0, capacity_blocks = 0;
};
static_assert(sizeof(IndexedRoutingArg) == 48, "must match chord::IndexedRouting");

struct RoutingSnapshot {
  int32_t num_post_padded = 0;
  std::span<const int32_t> sorted_ids;  // the first min(num_post_padded, sorted_capacity) entries
  std::span<const int32_t> expert_ids;  // the first (that) / block_m entries
  int64_t sorted_capacity = 0, expert_capacity = 0;
  int64_t routes = 0;  // num_tokens * top_k; also the sentinel value
  int experts = 0, block_m = 0;
};

// "" when the routing is well formed: the count a multiple of block_m within both buffers, every
// expert id in [-1, E), every slot a route id or a padding value (>= routes), each route at most once
// and every route present (else its output row would never be written). Otherwise the first problem.
std::string routing_error(const RoutingSnapshot& r);

}  // namespace chordrt::ops
