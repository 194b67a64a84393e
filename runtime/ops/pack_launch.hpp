// Shared by the W4A16 families' packers (grouped, indexed): the scheme and buffer checks, and the launch
// of one packer kernel over the checkpoint's words. Args is chord_grouped_pack_args_t or
// chord_indexed_pack_args_t (the same fields but for the mode/layout).
#pragma once

#include <algorithm>

#include "runtime/jit_runtime.hpp"
#include "runtime/launch.hpp"
#include "runtime/ops/validate.hpp"

namespace chordrt::ops {

constexpr int kPackThreads = 256;

// descriptor_for(arch) names the packer kernel.
template <class Args, class DescriptorFor>
void launch_w4a16_pack(const char* op, const char* family, const Args& a, size_t need_packed, size_t need_scale,
                       DescriptorFor&& descriptor_for, CUstream stream) {
  if (a.bits != 4 || a.group_size != 32 || a.symmetric != 1 || a.scale_is_bf16 != 1) {
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
