#include "heuristics/glue.hpp"

#include <algorithm>

namespace chordrt::heuristics {

MoeAlignConfig select_moe_align(int num_experts) {
  // 1024 threads keep the per-warp count table (64 B per expert) within 48 KB up to 512 experts; beyond
  // that 512 threads halve it.
  return {num_experts <= 512 ? 1024 : 512};
}

ElementwiseConfig select_rowwise(int64_t row_elems) {
  int vec = 8;
  while (vec > 1 && row_elems % vec != 0) vec /= 2;
  const int64_t vecs = row_elems / vec;
  int threads = 32;
  while (threads < 256 && threads < vecs) threads *= 2;
  return {vec, threads};
}

Grid2D rowwise_grid(int64_t rows, int64_t row_elems, const ElementwiseConfig& c) {
  const int64_t per_cta = static_cast<int64_t>(c.vec) * c.threads;
  return {static_cast<uint32_t>((row_elems + per_cta - 1) / per_cta),
          static_cast<uint32_t>(std::clamp<int64_t>(rows, 1, 65535))};
}

}  // namespace chordrt::heuristics
