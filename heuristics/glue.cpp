#include "heuristics/glue.hpp"

#include <algorithm>

#include "kernels_src/glue/params.cuh"

namespace chordrt::heuristics {

MoeAlignConfig select_moe_align(int num_experts, int64_t num_routes, const DeviceFacts& facts) {
  int warps = 32;
  while (warps > 1 &&
         chord::moe_align_smem_bytes(num_experts, 32 * warps) > static_cast<uint32_t>(facts.max_smem_per_block_optin)) {
    --warps;
  }
  return {32 * warps, num_routes > kMoeAlignClusterMinRoutes ? chord::kMoeAlignMaxCluster : 1};
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
