// The DSA indexer kernel families (key-cache writer, logits, top-k) and their descriptor builders
// (shared by dispatch and prewarm).
#pragma once

#include "heuristics/dsa_indexer.hpp"
#include "jit_cache/descriptor.hpp"
#include "runtime/model_plan.hpp"
#include "runtime/kernel_registry.hpp"

namespace chordrt::ops {

extern const KernelFamily kDsaKeyCacheWriteFamily;
extern const KernelFamily kDsaIndexerLogitsFamily;
extern const KernelFamily kDsaTopkFamily;

jit::Descriptor dsa_key_cache_write_descriptor(Arch arch, const heuristics::DsaKeyCacheWriteConfig& c);
jit::Descriptor dsa_indexer_logits_descriptor(Arch arch, int heads, int page_size,
                                              const heuristics::DsaLogitsConfig& c);
jit::Descriptor dsa_topk_descriptor(Arch arch, const heuristics::DsaTopkConfig& c);

// The kernels of this family a model's deployment dispatches.
void plan_dsa_indexer(const ModelPlanInput& in, PlanBuilder& plan);

}  // namespace chordrt::ops
