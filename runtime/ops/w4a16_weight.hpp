// The W4A16 families' packed weights (grouped, indexed), shared: the packed sizes, the packer's scheme and
// buffer checks and launch, the filled weight struct and its checks at dispatch. Args is
// chord_grouped_pack_args_t or chord_indexed_pack_args_t, Weight chord_grouped_weight_t or
// chord_indexed_weight_t: the same fields but for the kind (mode or layout).
#pragma once

#include <algorithm>

#include "runtime/jit_runtime.hpp"
#include "runtime/launch.hpp"
#include "runtime/ops/validate.hpp"

namespace chordrt::ops {

constexpr int kPackThreads = 256;

// Bytes of a packed weight (N*K/2 per expert) and its BF16 scales (one per 32 values); the shape is checked.
inline void w4a16_sizes(int32_t num_experts, int32_t n, int32_t k, size_t* packed_bytes, size_t* scale_bytes) {
  const size_t elements = static_cast<size_t>(num_experts) * static_cast<size_t>(n) * static_cast<size_t>(k);
  if (packed_bytes) *packed_bytes = elements / 2;
  if (scale_bytes) *scale_bytes = elements / 32 * 2;
}

inline bool w4a16_scheme_served(int32_t bits, int32_t group_size, int32_t symmetric, int32_t scale_is_bf16) {
  return bits == 4 && group_size == 32 && symmetric == 1 && scale_is_bf16 == 1;
}

// The weight struct a packer hands back: the args' shape and buffers, its kind, and the tag over them.
template <class Weight, class Args>
Weight w4a16_packed_weight(const Args& a, int32_t Weight::*kind, int32_t value, uint64_t (*tag)(const Weight&)) {
  Weight w{};
  w.struct_size = sizeof(w);
  w.*kind = value;
  w.num_experts = a.num_experts;
  w.n = a.n;
  w.k = a.k;
  w.packed = a.packed;
  w.scale = a.scale;
  w.tag = tag(w);
  return w;
}

// At dispatch: a weight struct of this version, filled by `packer` and not edited since, with its buffers.
template <class Weight>
void check_w4a16_weight(const char* op, const Weight* w, const char* packer, uint64_t (*tag)(const Weight&)) {
  if (!w) throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: weight is null", op);
  if (w->struct_size != sizeof(Weight)) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: weight.struct_size must be {}, got {}", op, sizeof(Weight),
                w->struct_size);
  }
  if (w->tag != tag(*w)) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: weight was not filled by {} (or its fields were changed since)", op,
                packer);
  }
  require_pointer(w->packed, op, "weight.packed", 16);
  require_pointer(w->scale, op, "weight.scale", 16);
}

// descriptor_for(arch) names the packer kernel.
template <class Args, class DescriptorFor>
void launch_w4a16_pack(const char* op, const char* family, const Args& a, size_t need_packed, size_t need_scale,
                       DescriptorFor&& descriptor_for, CUstream stream) {
  if (!w4a16_scheme_served(a.bits, a.group_size, a.symmetric, a.scale_is_bf16)) {
    throw_error(CHORD_ERROR_UNSUPPORTED,
                "{}: the {} family serves symmetric 4-bit weights with group size 32 and BF16 scales; got bits {}, "
                "group_size {}, symmetric {}, scale_is_bf16 {}",
                op, family, a.bits, a.group_size, a.symmetric, a.scale_is_bf16);
  }
  require_pointer(a.weight_packed, op, "weight_packed", 4);
  require_pointer(a.weight_scale, op, "weight_scale", 2);
  require_pointer(a.packed, op, "packed", 16);
  require_pointer(a.scale, op, "scale", 16);
  if (a.packed_bytes < need_packed || a.scale_bytes < need_scale) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: packed/scale buffers must hold {} and {} bytes, got {} and {}", op,
                need_packed, need_scale, a.packed_bytes, a.scale_bytes);
  }
  JitRuntime& rt = JitRuntime::global();
  const ContextState& ctx = rt.context_for(stream);
  const LoadedKernel& kernel = rt.kernel(descriptor_for(ctx.facts.arch), ctx, stream);
  const int64_t words = static_cast<int64_t>(a.num_experts) * a.n * (a.k / 8);
  const uint32_t grid = static_cast<uint32_t>(std::min<int64_t>((words + kPackThreads - 1) / kPackThreads, 8 * 1024));
  const int32_t experts = a.num_experts;
  const void* args[] = {&a.weight_packed, &a.weight_scale, &experts, &a.packed, &a.scale};
  launch(ctx, kernel, {grid, 1, 1}, stream, const_cast<void**>(args));
}

}  // namespace chordrt::ops
