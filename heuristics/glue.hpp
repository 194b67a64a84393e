// Launch configuration of the MoE glue kernels (moe_align, silu_and_mul, moe_combine).
#pragma once

#include <cstdint>

#include "heuristics/device_facts.hpp"

namespace chordrt::heuristics {

struct MoeAlignConfig {
  int threads;  // one CTA; the kernel's per-warp counts take 2 * (threads/32) * experts bytes of smem
};
// Largest expert count the single-CTA kernel's static shared memory holds.
inline constexpr int kMoeAlignMaxExperts = 1024;
MoeAlignConfig select_moe_align(int num_experts);

struct ElementwiseConfig {
  int vec;      // BF16 values per access (8 = 16 bytes)
  int threads;  // threads per CTA along the row
};
// Widest vector that divides `row_elems`, and a CTA just wide enough to cover a row (32..256).
ElementwiseConfig select_rowwise(int64_t row_elems);

struct Grid2D {
  uint32_t x, y;
};
// CTAs along the row (x) and over rows (y, capped at the hardware's 65535; kernels stride over y).
Grid2D rowwise_grid(int64_t rows, int64_t row_elems, const ElementwiseConfig& config);

}  // namespace chordrt::heuristics
