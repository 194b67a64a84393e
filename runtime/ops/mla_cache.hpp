// The MLA latent cache writer's kernel family and descriptor builder (shared by dispatch and prewarm);
// the record sizes are heuristics::mla_record_bytes (shared with the decoder).
#pragma once

#include <cstddef>
#include <cstdint>

#include "chordrt/chordrt.h"
#include "jit_cache/descriptor.hpp"
#include "runtime/kernel_registry.hpp"

namespace chordrt::ops {

extern const KernelFamily kMlaCacheWriteFamily;

jit::Descriptor mla_cache_write_descriptor(Arch arch, chord_mla_cache_format_t format, int rope_dims);

}  // namespace chordrt::ops
