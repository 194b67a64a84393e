// The sparse MLA decode families (decode, split-K combine) and their descriptor builders (shared by
// dispatch and prewarm).
#pragma once

#include "heuristics/sparse_mla.hpp"
#include "jit_cache/descriptor.hpp"
#include "runtime/kernel_registry.hpp"

namespace chordrt::ops {

extern const KernelFamily kSparseMlaDecodeFamily;
extern const KernelFamily kSparseMlaCombineFamily;

jit::Descriptor sparse_mla_decode_descriptor(jit::Arch arch, const heuristics::SparseMlaShape& s,
                                             const heuristics::SparseMlaConfig& c);
jit::Descriptor sparse_mla_combine_descriptor(jit::Arch arch, int num_heads);

}  // namespace chordrt::ops
