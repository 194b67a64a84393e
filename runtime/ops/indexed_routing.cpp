#include "runtime/ops/indexed_routing.hpp"

#include <fmt/format.h>

#include <vector>

namespace chordrt::ops {

std::string routing_error(const RoutingSnapshot& r) {
  const int64_t count = r.num_post_padded;
  if (count < 0 || count % r.block_m != 0) {
    return fmt::format("num_tokens_post_padded = {} is not a non-negative multiple of block_m {}", count, r.block_m);
  }
  if (count > r.sorted_capacity) {
    return fmt::format("num_tokens_post_padded = {} exceeds sorted_token_ids' capacity {}", count, r.sorted_capacity);
  }
  if (count / r.block_m > r.expert_capacity) {
    return fmt::format("num_tokens_post_padded = {} needs {} expert_ids, but its capacity is {}", count,
                       count / r.block_m, r.expert_capacity);
  }
  for (int64_t b = 0; b < count / r.block_m; ++b) {
    const int32_t e = r.expert_ids[b];
    if (e < -1 || e >= r.experts) {
      return fmt::format("expert_ids[{}] = {} is neither -1 nor an expert in [0, {})", b, e, r.experts);
    }
  }
  std::vector<int64_t> seen(static_cast<size_t>(r.routes), -1);
  for (int64_t i = 0; i < count; ++i) {
    const int32_t id = r.sorted_ids[i];
    if (id < 0) return fmt::format("sorted_token_ids[{}] = {} is negative", i, id);
    if (id >= r.routes) continue;  // padding
    if (seen[id] >= 0) {
      return fmt::format("sorted_token_ids[{}] = {}: route {} already appears at slot {}", i, id, id, seen[id]);
    }
    seen[id] = i;
  }
  for (int64_t id = 0; id < r.routes; ++id) {
    if (seen[id] < 0) {
      return fmt::format(
          "route {} appears in no block of sorted_token_ids[0, {}): its output row would not be "
          "written",
          id, count);
    }
  }
  return "";
}

}  // namespace chordrt::ops
