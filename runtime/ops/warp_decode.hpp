// The warp-decode MoE kernel families and their descriptor builders (shared by dispatch and prewarm).
#pragma once

#include "heuristics/warp_decode.hpp"
#include "jit_cache/descriptor.hpp"
#include "runtime/model_plan.hpp"
#include "runtime/kernel_registry.hpp"

namespace chordrt::ops {

extern const KernelFamily kWarpDecodeGateUpFamily;
extern const KernelFamily kWarpDecodeDownFamily;

jit::Descriptor warp_decode_gate_up_descriptor(Arch arch, const heuristics::WarpDecodeShape& s,
                                               const heuristics::WarpDecodeGateUpConfig& c);
jit::Descriptor warp_decode_down_descriptor(Arch arch, const heuristics::WarpDecodeShape& s,
                                            const heuristics::WarpDecodeDownConfig& c);

// The kernels of this family a model's deployment dispatches.
void plan_warp_decode(const ModelPlanInput& in, PlanBuilder& plan);

}  // namespace chordrt::ops
