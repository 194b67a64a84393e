// vLLM's moe_align routing contract on the host side: the indexed family's optional validation, a host
// check of copies of the device buffers that reports the first bad entry. (The kernels' argument is
// chord::IndexedRouting, kernels_src/indexed/params.cuh.)
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace chordrt::ops {

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
