// The W4A16 MoE weights shared by the grouped and indexed GEMM families: the one packer family
// (w4a16.pack: a compressed-tensors checkpoint weight -> one layout), the one weight type
// (chord_w4a16_weight_t) and its checks at dispatch.
#pragma once

#include <cuda.h>

#include <array>
#include <initializer_list>
#include <string>

#include "chordrt/chordrt.h"
#include "kernels_src/w4a16/params.cuh"
#include "runtime/jit_family.hpp"

namespace chordrt::ops {

using W4a16Layout = chord::w4a16::Layout;

// LAYOUT (a W4a16Layout), N, K of the packer kernel.
struct W4a16PackKey {
  int layout, n, k;
};
struct W4a16PackFamily : JitFamily<W4a16PackFamily, W4a16PackKey> {
  static constexpr std::string_view kName = "w4a16.pack";
  static constexpr std::array<KeyField<W4a16PackKey>, 3> kFields{{
      {"layout", &W4a16PackKey::layout, 0, chord::w4a16::kLayouts - 1},
      {"n", &W4a16PackKey::n, chord::w4a16::kRowMultiple, chord::w4a16::kMaxDim},
      {"k", &W4a16PackKey::k, chord::w4a16::block_k(W4a16Layout::kWgmmaK64), chord::w4a16::kMaxDim},
  }};
  static KernelProgram program(const W4a16PackKey& k);
  static std::vector<W4a16PackKey> examples(const DeviceFacts& facts);
};

// The packer for a weight of this layout and shape (dispatch and the planners).
W4a16PackKey w4a16_pack_key(W4a16Layout layout, int64_t n, int64_t k);

// "WGMMA_K64", "WGMMA_K128", "MMA" (the chord_w4a16_layout_t names without the prefix).
const char* w4a16_layout_name(W4a16Layout layout);

// "" when (layout, num_experts, n, k) is a weight the layout holds, else why not, naming the field, what
// it must be and its value.
std::string w4a16_shape_error(int64_t layout, int64_t num_experts, int64_t n, int64_t k);

// Binds a packed weight's fields together, so a struct not produced by w4a16_pack (or edited since) is
// caught at dispatch.
uint64_t w4a16_weight_tag(const chord_w4a16_weight_t& w);

// Throw chordrt::Error.
void w4a16_weight_sizes(int32_t layout, int32_t num_experts, int32_t n, int32_t k, size_t* packed_bytes,
                        size_t* scale_bytes);
chord_w4a16_weight_t w4a16_pack(const chord_w4a16_pack_args_t& args, CUstream stream);

// At dispatch: a weight filled by w4a16_pack and not edited since, of one of the `accepted` layouts
// (`needs` says which, e.g. "the contiguous GEMM needs layout WGMMA_K64"), with its buffers.
const chord_w4a16_weight_t& check_w4a16_weight(const char* op, const chord_w4a16_weight_t* w,
                                               std::initializer_list<W4a16Layout> accepted, const char* needs);

}  // namespace chordrt::ops
