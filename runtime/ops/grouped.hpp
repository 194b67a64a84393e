// The W4A16 grouped families (packer, GEMM) and their descriptor builders (shared by dispatch and prewarm).
#pragma once

#include "chordrt/chordrt.h"
#include "heuristics/grouped.hpp"
#include "jit_cache/descriptor.hpp"
#include "runtime/model_plan.hpp"
#include "runtime/kernel_registry.hpp"

namespace chordrt::ops {

extern const KernelFamily kGroupedPackFamily;
extern const KernelFamily kGroupedGemmFamily;

jit::Descriptor grouped_pack_descriptor(Arch arch, heuristics::GroupedMode mode, int64_t n, int64_t k);
jit::Descriptor grouped_gemm_descriptor(Arch arch, const heuristics::GroupedShape& s,
                                        const heuristics::GroupedConfig& c);

// Binds a packed weight's fields together, so a struct not produced by grouped_pack (or edited since) is
// caught at dispatch.
uint64_t grouped_weight_tag(const chord_grouped_weight_t& w);

// The kernels of this family a model's deployment dispatches.
void plan_grouped(const ModelPlanInput& in, PlanBuilder& plan);

}  // namespace chordrt::ops
