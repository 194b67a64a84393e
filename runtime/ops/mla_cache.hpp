// The MLA latent cache writer's kernel family and descriptor builder (shared by dispatch and prewarm),
// and the record sizes of the cache formats (also what the sparse MLA decode reads).
#pragma once

#include <cstddef>
#include <cstdint>

#include "chordrt/chordrt.h"
#include "jit_cache/descriptor.hpp"
#include "runtime/kernel_registry.hpp"

namespace chordrt::ops {

extern const KernelFamily kMlaCacheWriteFamily;

// Bytes of one token's record; 0 unless format is a chord_mla_cache_format_t and rope_dims 0 or 64.
size_t mla_record_bytes(int64_t format, int64_t rope_dims);

jit::Descriptor mla_cache_write_descriptor(jit::Arch arch, chord_mla_cache_format_t format, int rope_dims);

}  // namespace chordrt::ops
