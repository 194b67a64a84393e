// The MoE glue operations' kernel families and descriptor builders (shared by dispatch and prewarm).
#pragma once

#include "heuristics/device_facts.hpp"
#include "heuristics/glue.hpp"
#include "jit_cache/descriptor.hpp"
#include "runtime/kernel_registry.hpp"

namespace chordrt::ops {

extern const KernelFamily kMoeAlignFamily;
extern const KernelFamily kSiluAndMulFamily;
extern const KernelFamily kMoeCombineFamily;

jit::Descriptor moe_align_descriptor(jit::Arch arch, int num_experts, int block_size, bool has_expert_map,
                                     const heuristics::MoeAlignConfig& config);
jit::Descriptor silu_and_mul_descriptor(jit::Arch arch, int64_t intermediate);
jit::Descriptor moe_combine_descriptor(jit::Arch arch, int top_k, int64_t hidden, bool filtered);

}  // namespace chordrt::ops
