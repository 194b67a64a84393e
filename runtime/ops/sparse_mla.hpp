// The sparse MLA decode families (decode, split-K combine) and their descriptor builders (shared by
// dispatch and prewarm).
#pragma once

#include "heuristics/sparse_mla.hpp"
#include "jit_cache/descriptor.hpp"
#include "runtime/model_plan.hpp"
#include "runtime/ops/mla_cache.hpp"
#include "runtime/kernel_registry.hpp"

namespace chordrt::ops {

extern const KernelFamily kSparseMlaDecodeFamily;
extern const KernelFamily kSparseMlaCombineFamily;

jit::Descriptor sparse_mla_decode_descriptor(Arch arch, const heuristics::SparseMlaShape& s,
                                             const heuristics::SparseMlaConfig& c);
jit::Descriptor sparse_mla_combine_descriptor(Arch arch, int num_heads);

// The kernels of this family a model's deployment dispatches.
void plan_sparse_mla(const ModelPlanInput& in, PlanBuilder& plan);

}  // namespace chordrt::ops
