// The W4A16 grouped GEMM family (contiguous prefill, masked decode) and the key dispatch uses for a shape
// (also what the planner prewarms). Weights: runtime/ops/w4a16.hpp (layouts WGMMA_K64, WGMMA_K128).
#pragma once

#include <cuda.h>

#include <string_view>

#include "chordrt/chordrt.h"
#include "heuristics/grouped.hpp"
#include "kernels_src/grouped/params.cuh"
#include "runtime/jit_family.hpp"
#include "runtime/model_plan.hpp"

namespace chordrt::ops {

// The GEMM's template: MODE (a chord::grouped mode), N, K, EXPERTS, BM, SLICES, STAGES, CONSUMERS, RING
// (BLOCK_K follows from the mode). The indexed family's prefill is the same kernel in mode kIndexed
// (IndexedPrefillFamily).
struct GroupedGemmKey {
  int mode, n, k, experts, block_m, slices, stages, consumers, ring;
  int stream_k = 0;  // long K, with the call's workspace
};
struct GroupedGemmFamily : JitFamily<GroupedGemmFamily, GroupedGemmKey> {
  static constexpr std::string_view kName = "grouped.gemm";
  static constexpr std::array<KeyField<GroupedGemmKey>, 10> kFields{{
      {"mode", &GroupedGemmKey::mode, chord::grouped::kContiguous, chord::grouped::kMasked},
      {"n", &GroupedGemmKey::n, chord::grouped::block_n(1, chord::grouped::kMinConsumers), chord::w4a16::kMaxDim},
      {"k", &GroupedGemmKey::k, chord::w4a16::block_k(chord::w4a16::Layout::kWgmmaK64), chord::w4a16::kMaxDim},
      {"experts", &GroupedGemmKey::experts, 1, chord::grouped::kMaxExperts},
      {"block_m", &GroupedGemmKey::block_m, chord::grouped::kMinBlockM, chord::grouped::kMaxBlockM},
      {"slices", &GroupedGemmKey::slices, 1, chord::grouped::kMaxSlices},
      {"stages", &GroupedGemmKey::stages, chord::grouped::kMinStages, chord::grouped::kMaxStages},
      {"consumers", &GroupedGemmKey::consumers, chord::grouped::kMinConsumers, chord::grouped::kMaxConsumers},
      {"ring", &GroupedGemmKey::ring, chord::grouped::kRingBlock, chord::grouped::kRingHalf},
      {"stream_k", &GroupedGemmKey::stream_k, 0, 1},
  }};
  static KernelProgram program(const GroupedGemmKey& k);
  static std::vector<GroupedGemmKey> examples(const DeviceFacts& facts);
};

// The kernel of any mode (kIndexed included) for a shape and a configuration; throws INVALID_ARGUMENT
// with heuristics::grouped_config_error's reason. `family` names the error.
KernelProgram grouped_gemm_program(std::string_view family, const heuristics::GroupedShape& s,
                                   const heuristics::GroupedConfig& c);

// The key dispatch uses for a shape on a device: the heuristic's configuration for rows_hint, then
// `override_spec` (CHORD_GROUPED_CONFIG, "" for none) checked by grouped_config_error (stream_k 1 also
// needs stream_k_workspace: the call's workspace, which holds the tile's partials); `op` names
// errors. The planner calls it with "".
GroupedGemmKey grouped_gemm_key(const heuristics::GroupedShape& s, int64_t rows_hint, const DeviceFacts& facts,
                                std::string_view override_spec = {}, const char* op = "grouped",
                                bool stream_k_workspace = false);

// The stream-K kernel's view of a caller's workspace (chord::grouped::stream_workspace_bytes' layout) for a
// grid of `grid` CTAs, its flags cleared on `stream` (not in a dry run, which launches nothing). Shared by the
// grouped GEMMs and the indexed prefill.
chord::grouped::StreamWorkspace stream_k_workspace(void* workspace, uint32_t grid, bool dry_run, CUstream stream);

// chord_grouped_workspace_size: flags and partials of the widest tile the heuristics pick
// (block_m 128, 256 weight rows) on num_sms SMs; 0 when num_sms is outside [1, 1024].
size_t grouped_workspace_size(int32_t num_sms);

// The kernels of this family (and its packers) a model's deployment dispatches.
void plan_grouped(const ModelPlanInput& in, PlanBuilder& plan);

// Dispatch: validate, resolve the key, launch. Throw chordrt::Error.
void grouped_contiguous(const chord_grouped_contiguous_args_t& args, CUstream stream);
void grouped_masked(const chord_grouped_masked_args_t& args, CUstream stream);

}  // namespace chordrt::ops
