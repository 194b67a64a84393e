// The MoE glue operations (moe_align, silu_and_mul, moe_combine): their kernel families and the
// descriptors dispatch uses for a shape (also what the planner prewarms).
#pragma once

#include <cuda.h>

#include "chordrt/chordrt.h"
#include "heuristics/glue.hpp"
#include "kernels_src/glue/params.cuh"
#include "runtime/jit_family.hpp"
#include "runtime/model_plan.hpp"

namespace chordrt::ops {

struct MoeAlignKey {
  int num_experts, block_size, has_expert_map, threads, cluster;
};
struct MoeAlignFamily : JitFamily<MoeAlignFamily, MoeAlignKey> {
  static constexpr std::string_view kName = "glue.moe_align";
  static constexpr std::array<KeyField<MoeAlignKey>, 5> kFields{{
      {"num_experts", &MoeAlignKey::num_experts, 1, chord::kMoeAlignMaxExperts},
      {"block_size", &MoeAlignKey::block_size, 1, chord::kMoeAlignMaxBlockSize},
      {"has_expert_map", &MoeAlignKey::has_expert_map, 0, 1},
      {"threads", &MoeAlignKey::threads, 32, 1024},
      {"cluster", &MoeAlignKey::cluster, 1, chord::kMoeAlignMaxCluster},
  }};
  static KernelProgram program(const MoeAlignKey& k);
  static std::vector<MoeAlignKey> examples(const DeviceFacts& facts);
};

// VEC, THREADS, ROWS_PER_CTA of the row-wise kernels.
struct RowwiseKey {
  int vec, threads, rows_per_cta;
};
struct SiluAndMulFamily : JitFamily<SiluAndMulFamily, RowwiseKey> {
  static constexpr std::string_view kName = "glue.silu_and_mul";
  static constexpr std::array<KeyField<RowwiseKey>, 3> kFields{{
      {"vec", &RowwiseKey::vec, 1, 8},
      {"threads", &RowwiseKey::threads, 32, chord::kRowwiseMaxThreads},
      {"rows_per_cta", &RowwiseKey::rows_per_cta, 1, chord::kRowwiseMaxThreads / 32},
  }};
  static KernelProgram program(const RowwiseKey& k);
  static std::vector<RowwiseKey> examples(const DeviceFacts& facts);
};

struct MoeCombineKey {
  int top_k, vec, threads, rows_per_cta, filtered;
};
struct MoeCombineFamily : JitFamily<MoeCombineFamily, MoeCombineKey> {
  static constexpr std::string_view kName = "glue.moe_combine";
  static constexpr std::array<KeyField<MoeCombineKey>, 5> kFields{{
      {"top_k", &MoeCombineKey::top_k, 1, chord::kMoeMaxTopK},
      {"vec", &MoeCombineKey::vec, 1, 8},
      {"threads", &MoeCombineKey::threads, 32, chord::kRowwiseMaxThreads},
      {"rows_per_cta", &MoeCombineKey::rows_per_cta, 1, chord::kRowwiseMaxThreads / 32},
      {"filtered", &MoeCombineKey::filtered, 0, 1},
  }};
  static KernelProgram program(const MoeCombineKey& k);
  static std::vector<MoeCombineKey> examples(const DeviceFacts& facts);
};

// The keys dispatch uses for a shape on a device (and what the planner prewarms).
MoeAlignKey moe_align_key(int num_experts, int block_size, bool has_expert_map, int64_t routes,
                          const DeviceFacts& facts);
// Every moe_align key dispatch can pick for this expert count and block size.
std::vector<MoeAlignKey> moe_align_keys(int num_experts, int block_size, bool has_expert_map, const DeviceFacts& facts);
RowwiseKey silu_and_mul_key(int64_t intermediate);
MoeCombineKey moe_combine_key(int top_k, int64_t hidden, bool filtered);

int64_t moe_align_sorted_capacity(int64_t num_tokens, int32_t top_k, int32_t num_experts, int32_t block_size);

// The glue kernels a model's deployment dispatches (moe_align at every block size the GEMM families
// align to, silu_and_mul, moe_combine).
void plan_glue(const ModelPlanInput& in, PlanBuilder& plan);

// Dispatch: validate, resolve the key, launch. Throw chordrt::Error.
void moe_align(const chord_moe_align_args_t& args, CUstream stream);
void silu_and_mul(const chord_silu_and_mul_args_t& args, CUstream stream);
void moe_combine(const chord_moe_combine_args_t& args, CUstream stream);

}  // namespace chordrt::ops
