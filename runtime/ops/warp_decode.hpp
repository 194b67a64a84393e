// Warp decode MoE: the gate/up and down kernel families, the keys dispatch launches for a shape (also
// what the planner prewarms), and the op.
#pragma once

#include <cuda.h>

#include <string>
#include <utility>

#include "chordrt/chordrt.h"
#include "heuristics/warp_decode.hpp"
#include "kernels_src/warp_decode/params.cuh"
#include "runtime/jit_family.hpp"
#include "runtime/model_plan.hpp"

namespace chordrt::ops {

// The template values of gate_up_kernel / down_kernel, in their order.
struct WarpDecodeGateUpKey {
  int format, hidden, intermediate, experts, top_k, max_tokens, k_split, row_tiles, n_tiles, stage_groups, stages,
      has_map;
};
struct WarpDecodeDownKey {
  int format, hidden, intermediate, experts, top_k, max_tokens, warps, k_chunks, row_tiles, n_tiles, stage_groups,
      stages, has_map;
};

namespace wd = chord::warp_decode;

struct WarpDecodeGateUpFamily : JitFamily<WarpDecodeGateUpFamily, WarpDecodeGateUpKey> {
  using K = WarpDecodeGateUpKey;
  static constexpr std::string_view kName = "warp_decode.gate_up";
  static constexpr std::array<KeyField<K>, 12> kFields{{
      {"format", &K::format, 0, 1},
      {"hidden", &K::hidden, 32, 1 << 20},
      {"intermediate", &K::intermediate, 32, 1 << 20},
      {"experts", &K::experts, 1, wd::kMaxExperts},
      {"top_k", &K::top_k, 1, wd::kMaxTopK},
      {"max_tokens", &K::max_tokens, 8, wd::kMaxTokens},
      {"k_split", &K::k_split, 1, 16},
      {"row_tiles", &K::row_tiles, 1, 2},
      {"n_tiles", &K::n_tiles, 1, wd::kMaxNTiles},
      {"stage_groups", &K::stage_groups, 2, wd::kMaxStageGroups},
      {"stages", &K::stages, wd::kMinStages, wd::kMaxStages},
      {"has_map", &K::has_map, 0, 1},
  }};
  // "" when the kernel template accepts the key (beyond the field ranges), else why not.
  static std::string error(const K& k);
  static KernelProgram program(const K& k);
  static std::vector<K> examples(const DeviceFacts& facts);
};

struct WarpDecodeDownFamily : JitFamily<WarpDecodeDownFamily, WarpDecodeDownKey> {
  using K = WarpDecodeDownKey;
  static constexpr std::string_view kName = "warp_decode.down";
  static constexpr std::array<KeyField<K>, 13> kFields{{
      {"format", &K::format, 0, 1},
      {"hidden", &K::hidden, 32, 1 << 20},
      {"intermediate", &K::intermediate, 32, 1 << 20},
      {"experts", &K::experts, 1, wd::kMaxExperts},
      {"top_k", &K::top_k, 1, wd::kMaxTopK},
      {"max_tokens", &K::max_tokens, 8, wd::kMaxTokens},
      {"warps", &K::warps, 1, 16},
      {"k_chunks", &K::k_chunks, 1, 1 << 15},
      {"row_tiles", &K::row_tiles, 1, 2},
      {"n_tiles", &K::n_tiles, 1, wd::kMaxNTiles},
      {"stage_groups", &K::stage_groups, 2, wd::kMaxStageGroups},
      {"stages", &K::stages, wd::kMinStages, wd::kMaxStages},
      {"has_map", &K::has_map, 0, 1},
  }};
  static std::string error(const K& k);
  static KernelProgram program(const K& k);
  static std::vector<K> examples(const DeviceFacts& facts);
};

struct WarpDecodeKeys {
  WarpDecodeGateUpKey gate_up;
  WarpDecodeDownKey down;
};
// The keys dispatch launches for `tokens` tokens of shape s on a device: the heuristics' configs, then
// CHORD_WARP_DECODE_CONFIG, checked as the families check them (INVALID_ARGUMENT naming the field).
// The planner calls the same function.
WarpDecodeKeys warp_decode_keys(const heuristics::WarpDecodeShape& s, int64_t tokens, const DeviceFacts& facts);
// The keys of given configs (tests, and the override path).
WarpDecodeKeys warp_decode_keys_of(const heuristics::WarpDecodeShape& s, const heuristics::WarpDecodeGateUpConfig& g,
                                   const heuristics::WarpDecodeDownConfig& d);

// Why warp decode cannot serve a shape at this token count ({CHORD_SUCCESS, ""} when it can): the shape
// checks of warp_decode_moe, also what the decode-path choice asks.
struct ShapeRejection {
  chord_status_t status;
  std::string why;
};
ShapeRejection warp_decode_shape_rejection(int32_t format, int64_t num_tokens, int32_t hidden, int32_t intermediate,
                                           int32_t num_experts, int32_t top_k);
size_t warp_decode_moe_workspace_size(int64_t num_tokens, int32_t top_k, int32_t intermediate);
// Dispatch: validate, resolve the keys, launch gate/up then down (programmatic dependent launch).
void warp_decode_moe(const chord_warp_decode_moe_args_t& args, CUstream stream);

// The kernels of this family a model's deployment dispatches (1..128 tokens).
void plan_warp_decode(const ModelPlanInput& in, PlanBuilder& plan);

}  // namespace chordrt::ops
