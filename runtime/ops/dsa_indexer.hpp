// The DSA indexer: key-cache writer, logits and top-k kernel families, the keys dispatch launches for a
// shape (also what the planner prewarms), and the ops.
#pragma once

#include <cuda.h>

#include <array>
#include <string>
#include <vector>

#include "chordrt/chordrt.h"
#include "heuristics/dsa_indexer.hpp"
#include "kernels_src/dsa_indexer/params.cuh"
#include "runtime/jit_family.hpp"
#include "runtime/model_plan.hpp"

namespace chordrt::ops {

namespace di = chord::dsa_indexer;

// The template values of key_cache_write_kernel, indexer_logits_kernel and topk_kernel.
struct DsaIndexerCacheWriteKey {
  int warps;
};
struct DsaIndexerLogitsKey {
  int heads, page_size, stages, keys_per_cta, tma;
};
struct DsaIndexerTopkKey {
  int threads, candidates;
};

struct DsaIndexerCacheWriteFamily : JitFamily<DsaIndexerCacheWriteFamily, DsaIndexerCacheWriteKey> {
  using K = DsaIndexerCacheWriteKey;
  static constexpr std::string_view kName = "dsa_indexer.cache_write";
  static constexpr std::array<KeyField<K>, 1> kFields{{{"warps", &K::warps, 1, 32}}};
  static KernelProgram program(const K& k);
  static std::vector<K> examples(const DeviceFacts& facts);
};

struct DsaIndexerLogitsFamily : JitFamily<DsaIndexerLogitsFamily, DsaIndexerLogitsKey> {
  using K = DsaIndexerLogitsKey;
  static constexpr std::string_view kName = "dsa_indexer.logits";
  static constexpr std::array<KeyField<K>, 5> kFields{{
      {"heads", &K::heads, 8, di::kMaxHeads},
      {"page_size", &K::page_size, 1, di::kMaxPageSize},
      {"stages", &K::stages, di::kMinStages, di::kMaxStages},
      {"keys_per_cta", &K::keys_per_cta, di::kMinKeysPerCta, di::kMaxKeysPerCta},
      {"tma", &K::tma, 0, 1},
  }};
  static KernelProgram program(const K& k);
  static std::vector<K> examples(const DeviceFacts& facts);
};

struct DsaIndexerTopkFamily : JitFamily<DsaIndexerTopkFamily, DsaIndexerTopkKey> {
  using K = DsaIndexerTopkKey;
  static constexpr std::string_view kName = "dsa_indexer.topk";
  static constexpr std::array<KeyField<K>, 2> kFields{{
      {"threads", &K::threads, 32, 1024},
      {"candidates", &K::candidates, 256, 16384},
  }};
  static KernelProgram program(const K& k);
  static std::vector<K> examples(const DeviceFacts& facts);
};

// The keys dispatch launches on a device (the planner calls the same functions; the logits key applies
// CHORD_DSA_CONFIG, as sparse_mla_launch applies CHORD_MLA_CONFIG).
DsaIndexerCacheWriteKey dsa_indexer_cache_write_key(const DeviceFacts& facts);
DsaIndexerLogitsKey dsa_indexer_logits_key(const heuristics::DsaLogitsShape& s, const DeviceFacts& facts);
DsaIndexerTopkKey dsa_indexer_topk_key(int topk, const DeviceFacts& facts);

size_t indexer_cache_page_bytes(int32_t page_size);
void indexer_cache_write(const chord_indexer_cache_write_args_t& args, CUstream stream);
void dsa_indexer_logits(const chord_dsa_indexer_args_t& args, CUstream stream);
void dsa_topk(const chord_dsa_topk_args_t& args, CUstream stream);

// The key writer, logits at the decode and prefill shapes the heuristic distinguishes, and top-k.
void plan_dsa_indexer(const ModelPlanInput& in, PlanBuilder& plan);

}  // namespace chordrt::ops
