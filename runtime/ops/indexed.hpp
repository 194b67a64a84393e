// The W4A16 indexed GEMM families over vLLM's routing (prefill: the grouped kernel gathering routed
// rows; decode: the mma.sync kernel) and the keys dispatch uses for a shape (also what the planner
// prewarms). Weights: runtime/ops/w4a16.hpp (layouts WGMMA_K64, MMA).
#pragma once

#include <cuda.h>

#include "chordrt/chordrt.h"
#include "heuristics/indexed.hpp"
#include "kernels_src/indexed/params.cuh"
#include "runtime/jit_family.hpp"
#include "runtime/model_plan.hpp"
#include "runtime/ops/grouped.hpp"

namespace chordrt::ops {

// The grouped kernel in mode kIndexed (BLOCK_K 64): N, K, EXPERTS, BM (the routing's block_m), SLICES, STAGES,
// CONSUMERS, RING, STREAM (stream-K over the call's workspace).
struct IndexedPrefillKey {
  int n, k, experts, block_m, slices, stages, consumers, ring, stream_k;
};
struct IndexedPrefillFamily : JitFamily<IndexedPrefillFamily, IndexedPrefillKey> {
  static constexpr std::string_view kName = "indexed.prefill";
  static constexpr std::array<KeyField<IndexedPrefillKey>, 9> kFields{{
      {"n", &IndexedPrefillKey::n, chord::grouped::block_n(1, chord::grouped::kMinConsumers), chord::w4a16::kMaxDim},
      {"k", &IndexedPrefillKey::k, chord::grouped::block_k_of_mode(chord::grouped::kIndexed), chord::w4a16::kMaxDim},
      {"experts", &IndexedPrefillKey::experts, 1, chord::indexed::kMaxExperts},
      {"block_m", &IndexedPrefillKey::block_m, chord::grouped::kMinBlockM, chord::grouped::kMaxBlockM},
      {"slices", &IndexedPrefillKey::slices, 1, chord::grouped::kMaxSlices},
      {"stages", &IndexedPrefillKey::stages, chord::grouped::kMinStages, chord::grouped::kMaxStages},
      {"consumers", &IndexedPrefillKey::consumers, chord::grouped::kMinConsumers, chord::grouped::kMaxConsumers},
      {"ring", &IndexedPrefillKey::ring, chord::grouped::kRingBlock, chord::grouped::kRingHalf},
      {"stream_k", &IndexedPrefillKey::stream_k, 0, 1},
  }};
  static KernelProgram program(const IndexedPrefillKey& k);
  static std::vector<IndexedPrefillKey> examples(const DeviceFacts& facts);
};

// chord::indexed::indexed_decode_kernel<N, K, EXPERTS, BM, DEPTH>.
struct IndexedDecodeKey {
  int n, k, experts, block_m, depth;
};
struct IndexedDecodeFamily : JitFamily<IndexedDecodeFamily, IndexedDecodeKey> {
  static constexpr std::string_view kName = "indexed.decode";
  static constexpr std::array<KeyField<IndexedDecodeKey>, 5> kFields{{
      {"n", &IndexedDecodeKey::n, chord::indexed::kDecodeRowsPerCta, chord::w4a16::kMaxDim},
      {"k", &IndexedDecodeKey::k, chord::indexed::kChunk, chord::w4a16::kMaxDim},
      {"experts", &IndexedDecodeKey::experts, 1, chord::indexed::kMaxExperts},
      {"block_m", &IndexedDecodeKey::block_m, chord::indexed::kDecodeMinBlockM, chord::indexed::kDecodeMaxBlockM},
      {"depth", &IndexedDecodeKey::depth, 1, chord::indexed::kDecodeMaxDepth},
  }};
  static KernelProgram program(const IndexedDecodeKey& k);
  static std::vector<IndexedDecodeKey> examples(const DeviceFacts& facts);
};

// The keys dispatch uses for a weight shape, the routing's block_m and the routes (tokens * top_k) on a
// device (and what the planner prewarms, with no override). The shape's layout picks the family.
// `override_spec` (CHORD_INDEXED_CONFIG) overrides the prefill kernel's slices, stages, consumers and
// ring and stream_k, checked like CHORD_GROUPED_CONFIG; block_m is the routing's and cannot be overridden.
// `stream_k_workspace`: the call brings a stream-K workspace (stream_k 1 is not allowed without one).
IndexedPrefillKey indexed_prefill_key(const heuristics::IndexedShape& s, int block_m, int64_t routes,
                                      const DeviceFacts& facts, std::string_view override_spec = {},
                                      bool stream_k_workspace = false);
IndexedDecodeKey indexed_decode_key(const heuristics::IndexedShape& s, int block_m);

// The kernels of this family (its packers, and moe_align at the block sizes it picks) a model's
// deployment dispatches.
void plan_indexed(const ModelPlanInput& in, PlanBuilder& plan);

// Throw chordrt::Error.
int32_t indexed_block_m(int32_t layout, int32_t num_experts, int32_t n, int32_t k, int64_t routed_rows,
                        int32_t profile);
void indexed_gemm(const chord_indexed_args_t& args, CUstream stream);
// chord_indexed_gemm_workspace_size: the stream-K workspace of the widest tile (512 weight rows) on num_sms
// CTAs; 0 when block_m (8..256, a multiple of 8) or num_sms (1..1024) is out of range.
size_t indexed_gemm_workspace_size(int32_t block_m, int32_t num_sms);

}  // namespace chordrt::ops
