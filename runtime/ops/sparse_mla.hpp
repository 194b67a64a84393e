// Sparse MLA: the latent cache writer, decode and split-K combine kernel families, the keys dispatch
// launches for a shape (also what the planner prewarms), and the ops.
#pragma once

#include <cuda.h>

#include <array>
#include <string>
#include <vector>

#include "chordrt/chordrt.h"
#include "heuristics/sparse_mla.hpp"
#include "kernels_src/sparse_mla/params.cuh"
#include "runtime/jit_family.hpp"
#include "runtime/model_plan.hpp"

namespace chordrt::ops {

namespace sm = chord::sparse_mla;

// The template values of cache_write_kernel, sparse_mla_decode_kernel and sparse_mla_combine_kernel.
struct SparseMlaCacheWriteKey {
  int format, rope_dims, warps;
};
struct SparseMlaDecodeKey {
  int format, rope_dims, heads, head_group, warps, stages;
  int pair;  // 1: the wgmma kernel's two head groups of a token as a 2-CTA cluster (128 heads)
};
struct SparseMlaCombineKey {
  int heads;
};

struct SparseMlaCacheWriteFamily : JitFamily<SparseMlaCacheWriteFamily, SparseMlaCacheWriteKey> {
  using K = SparseMlaCacheWriteKey;
  static constexpr std::string_view kName = "sparse_mla.cache_write";
  static constexpr std::array<KeyField<K>, 3> kFields{{
      {"format", &K::format, sm::kFp8DsMla, sm::kBf16},
      {"rope_dims", &K::rope_dims, 0, 64},
      {"warps", &K::warps, 1, 32},
  }};
  static KernelProgram program(const K& k);
  static std::vector<K> examples(const DeviceFacts& facts);
};

struct SparseMlaDecodeFamily : JitFamily<SparseMlaDecodeFamily, SparseMlaDecodeKey> {
  using K = SparseMlaDecodeKey;
  static constexpr std::string_view kName = "sparse_mla.decode";
  static constexpr std::array<KeyField<K>, 7> kFields{{
      {"format", &K::format, sm::kFp8DsMla, sm::kBf16},
      {"rope_dims", &K::rope_dims, 0, 64},
      {"heads", &K::heads, 8, sm::kMaxHeads},
      {"head_group", &K::head_group, 8, 64},
      {"warps", &K::warps, 4, 16},
      {"stages", &K::stages, 2, 8},
      {"pair", &K::pair, 0, 1},
  }};
  static KernelProgram program(const K& k);
  static std::vector<K> examples(const DeviceFacts& facts);
};

struct SparseMlaCombineFamily : JitFamily<SparseMlaCombineFamily, SparseMlaCombineKey> {
  using K = SparseMlaCombineKey;
  static constexpr std::string_view kName = "sparse_mla.combine";
  static constexpr std::array<KeyField<K>, 1> kFields{{{"heads", &K::heads, 8, sm::kMaxHeads}}};
  static KernelProgram program(const K& k);
  static std::vector<K> examples(const DeviceFacts& facts);
};

SparseMlaCacheWriteKey sparse_mla_cache_write_key(int format, int rope_dims);

// What dispatch launches for a shape on a device: the heuristic's config, then CHORD_MLA_CONFIG, checked
// as the decode family checks it (INVALID_ARGUMENT naming the variable and the field). The planner and
// the workspace query call the same function. The shape must pass heuristics::sparse_mla_shape_error.
struct SparseMlaLaunch {
  heuristics::SparseMlaConfig config;
  SparseMlaDecodeKey decode;
  SparseMlaCombineKey combine;  // launched when config.splits > 1
};
SparseMlaLaunch sparse_mla_launch(const heuristics::SparseMlaShape& s, const DeviceFacts& facts);

size_t mla_cache_record_bytes(int32_t format, int32_t rope_dims);
void mla_cache_write(const chord_mla_cache_write_args_t& args, CUstream stream);
size_t sparse_mla_decode_workspace_size(const chord_sparse_mla_decode_args_t& args);
// Dispatch: validate, resolve the launch, decode (then combine, programmatic dependent launch).
void sparse_mla_decode(const chord_sparse_mla_decode_args_t& args, CUstream stream);

// The writers, decode at this deployment's head count (and the NoPE layers' variants) and the combine.
void plan_sparse_mla(const ModelPlanInput& in, PlanBuilder& plan);

}  // namespace chordrt::ops
