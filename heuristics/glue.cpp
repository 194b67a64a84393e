#include "heuristics/glue.hpp"

#include <algorithm>

namespace chordrt::heuristics {

MoeAlignConfig select_moe_align(int num_experts, int64_t num_routes, const DeviceFacts& facts) {
  // Shared memory: 4 bytes x (warps x experts + 4 x experts + 1 + warps), as the kernel lays it out.
  const int64_t words = facts.max_smem_per_block_optin / 4 - 4 * int64_t{num_experts} - 1;
  const int64_t warps = std::clamp<int64_t>(words / (num_experts + 1), 1, 32);
  return {static_cast<int>(warps * 32), num_routes > kMoeAlignClusterMinRoutes ? 8 : 1};
}

std::vector<MoeAlignConfig> moe_align_configs(int num_experts, const DeviceFacts& facts) {
  return {select_moe_align(num_experts, 0, facts), select_moe_align(num_experts, kMoeAlignClusterMinRoutes + 1, facts)};
}

ElementwiseConfig select_rowwise(int64_t row_elems) {
  int vec = 8;
  while (vec > 1 && row_elems % vec != 0) vec /= 2;
  const int64_t vecs = row_elems / vec;
  int threads = 32;
  while (threads < 256 && threads < vecs) threads *= 2;
  return {vec, threads, 256 / threads};
}

Grid2D rowwise_grid(int64_t rows, int64_t row_elems, const ElementwiseConfig& c) {
  const int64_t per_cta = static_cast<int64_t>(c.vec) * c.threads;
  const int64_t row_groups = (rows + c.rows_per_cta - 1) / c.rows_per_cta;
  return {static_cast<uint32_t>((row_elems + per_cta - 1) / per_cta),
          static_cast<uint32_t>(std::clamp<int64_t>(row_groups, 1, 65535))};
}

}  // namespace chordrt::heuristics
