// Launch configuration of the warp-decode MoE kernels (gate/up and down), pure functions of the shape,
// the token count and the device.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/core/device_facts.hpp"

namespace chordrt::heuristics {

enum class WeightFormat : int { kInt4Group32 = 0, kMxfp8 = 1 };

struct WarpDecodeShape {
  WeightFormat format = WeightFormat::kInt4Group32;
  int hidden = 0;          // H: gate/up K, down N
  int intermediate = 0;    // I per GPU: gate/up N (each of gate and up), down K
  int experts = 0;         // local experts (the weights' leading dimension)
  int global_experts = 0;  // ids topk_ids may hold; == experts without an expert map
  int top_k = 0;
  bool has_map = false;
};

// Token capacity the kernels are specialized for: the power of two >= tokens, at least 8.
int warp_decode_token_bucket(int64_t tokens);
// Local experts with at least one route when each token picks top_k distinct of global_experts
// uniformly: experts * (1 - (1 - top_k / global_experts)^tokens).
double expected_active_experts(const WarpDecodeShape& s, int64_t tokens);

struct WarpDecodeGateUpConfig {
  int max_tokens;    // token bucket (route table capacity = max_tokens * top_k)
  int k_split;       // warps per CTA, splitting H
  int row_tiles;     // 16-row tiles (8 neurons each) per CTA, sharing the activation fragments
  int n_tiles;       // 8-route MMA column tiles per pass over the weights
  int stage_groups;  // groups of 32 K values per shared-memory stage; 0 = shape not supported
  int stages;        // ring depth per warp (stages - 1 in flight)
};
struct WarpDecodeDownConfig {
  int max_tokens;
  int warps;      // per CTA (16 output rows)
  int k_chunks;   // I split into this many work items per expert, so few experts still fill the warps
  int row_tiles;  // 16-row tiles per CTA
  int n_tiles;
  int stage_groups;
  int stages;
};

// Gate/up: work items of (active expert, 8 neurons per row tile), up to 8 warps over H (even one token's 8 experts then
// give thousands of warps), 128-byte staged rows where the split allows, 2..4 stages within 64 KB.
WarpDecodeGateUpConfig select_warp_decode_gate_up(const WarpDecodeShape& s, int64_t tokens,
                                                  const DeviceFacts& facts = {});
// CTAs of the persistent gate/up grid: as many as are resident at once (the kernel's register cap and
// shared memory per SM), never more than the work items (local experts a batch can reach x neuron blocks).
int64_t warp_decode_gate_up_ctas(const WarpDecodeShape& s, const WarpDecodeGateUpConfig& c, int64_t tokens,
                                 const DeviceFacts& facts = {});
// Down: a CTA per 16 output rows, 8 warps; K chunks so that (expected active experts x chunks) gives
// every warp an item; rings within 48 KB.
WarpDecodeDownConfig select_warp_decode_down(const WarpDecodeShape& s, int64_t tokens, const DeviceFacts& facts = {});
// Stage and shared-memory sizes: kernels_src/warp_decode/params.cuh (stage_bytes, gate_up_dynamic_smem,
// down_dynamic_smem, min_stage_groups), the kernels' own layout.
// Applies "kernel.field=value,..." (kernel: gate_up or down; fields: k_split, n_tiles, stage_groups,
// stages, warps, k_chunks) to the configs, for experiments. Returns an error message for an unknown key
// or a malformed pair ("" on success); the kernel family still validates the result.
std::string apply_warp_decode_override(std::string_view spec, WarpDecodeGateUpConfig& gate_up,
                                       WarpDecodeDownConfig& down);
// Every token count the path serves (1..chord::warp_decode::kMaxTokens): a prewarm compiles their distinct configs.
std::vector<int64_t> warp_decode_prewarm_tokens();

}  // namespace chordrt::heuristics
