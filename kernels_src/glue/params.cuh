// The MoE glue kernels' contract (moe_align, silu_and_mul, moe_combine): the template ranges and
// moe_align's shared-memory layout, shared by the kernels, heuristics/glue and runtime/ops.
#pragma once

#include "common/host_device.cuh"

namespace chord {

// moe_align: the kernel's template ranges.
constexpr int kMoeAlignMaxExperts = 1024;
constexpr int kMoeAlignMaxBlockSize = 1024;
constexpr int kMoeAlignMaxCluster = 8;
constexpr int kMoeMaxTopK = 64;  // moe_align and moe_combine

// moe_align's dynamic shared memory, in int32 words: [warps][experts] per-warp rows, then this CTA's
// count, the lower CTAs' base, the totals (each [experts]), the padded offsets [experts + 1] and the
// scan scratch [warps]. The kernel traps when it is launched with less.
struct MoeAlignSmem {
  int32_t row, cta_count, cta_base, count, offset, scan, words;
};
CHORD_HD constexpr MoeAlignSmem moe_align_smem(int experts, int threads) {
  const int warps = threads / 32;
  MoeAlignSmem s{};
  s.row = 0;
  s.cta_count = warps * experts;
  s.cta_base = s.cta_count + experts;
  s.count = s.cta_base + experts;
  s.offset = s.count + experts;
  s.scan = s.offset + experts + 1;
  s.words = s.scan + warps;
  return s;
}
CHORD_HD constexpr uint32_t moe_align_smem_bytes(int experts, int threads) {
  return 4u * static_cast<uint32_t>(moe_align_smem(experts, threads).words);
}

// silu_and_mul / moe_combine: VEC BF16 values per access, THREADS along a row, ROWS_PER_CTA rows per CTA.
constexpr int kRowwiseMaxThreads = 1024;  // THREADS * ROWS_PER_CTA

}  // namespace chord
