// The W4A16 indexed families (packer, WGMMA prefill, mma.sync decode) and their descriptor builders
// (shared by dispatch and prewarm).
#pragma once

#include "chordrt/chordrt.h"
#include "heuristics/indexed.hpp"
#include "jit_cache/descriptor.hpp"
#include "runtime/model_plan.hpp"
#include "runtime/kernel_registry.hpp"
#include "runtime/ops/glue.hpp"

namespace chordrt::ops {

extern const KernelFamily kIndexedPackFamily;
extern const KernelFamily kIndexedPrefillFamily;
extern const KernelFamily kIndexedDecodeFamily;

jit::Descriptor indexed_pack_descriptor(Arch arch, heuristics::IndexedLayout layout, int64_t n, int64_t k);
jit::Descriptor indexed_prefill_descriptor(Arch arch, const heuristics::IndexedShape& s,
                                           const heuristics::GroupedConfig& c);
jit::Descriptor indexed_decode_descriptor(Arch arch, const heuristics::IndexedShape& s,
                                          const heuristics::IndexedDecodeConfig& c);

// Binds a packed weight's fields together (as grouped_weight_tag).
uint64_t indexed_weight_tag(const chord_indexed_weight_t& w);

// The kernels of this family a model's deployment dispatches.
void plan_indexed(const ModelPlanInput& in, PlanBuilder& plan);

}  // namespace chordrt::ops
