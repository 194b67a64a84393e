// Launch configuration of the MoE glue kernels (moe_align, silu_and_mul, moe_combine).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/core/device_facts.hpp"

namespace chordrt::heuristics {

struct MoeAlignConfig {
  int threads;  // per CTA; its per-warp count rows take 4 * (threads/32) * experts bytes of smem (glue/params.cuh)
  int cluster;  // CTAs in the (single) cluster
};
// Above this many routes a cluster of 8 CTAs shares the work: one CTA is issue-bound at ~1.6 ns per route
// (measured on the H200), while the cluster adds ~1 us of barriers and DSMEM reads.
inline constexpr int64_t kMoeAlignClusterMinRoutes = 2048;
// Threads: the most warps (up to 32) whose count rows fit the device's opt-in shared memory, so the most
// route loads are in flight. Cluster: 8 above kMoeAlignClusterMinRoutes routes, else 1.
MoeAlignConfig select_moe_align(int num_experts, int64_t num_routes, const DeviceFacts& facts = {});
// Every config select_moe_align can return for this expert count (what prewarm must compile).
std::vector<MoeAlignConfig> moe_align_configs(int num_experts, const DeviceFacts& facts = {});

struct ElementwiseConfig {
  int vec;           // BF16 values per access (8 = 16 bytes)
  int threads;       // threads along a row (32..256)
  int rows_per_cta;  // rows one CTA covers, so that a CTA has 256 threads even for short rows
};
// Widest vector that divides `row_elems`, just enough threads to cover a row (32..256), and enough rows
// per CTA for 256 threads (CTAs of one short row each were half-occupying the SMs: a 32-thread CTA per
// 256-wide row ran at 52% of the read bandwidth).
ElementwiseConfig select_rowwise(int64_t row_elems);

struct Grid2D {
  uint32_t x, y;
};
// CTAs along the row (x) and over groups of rows_per_cta rows (y, capped at the hardware's 65535;
// kernels stride over y).
Grid2D rowwise_grid(int64_t rows, int64_t row_elems, const ElementwiseConfig& config);

}  // namespace chordrt::heuristics
