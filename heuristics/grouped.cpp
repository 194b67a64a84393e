#include "heuristics/grouped.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "heuristics/config_override.hpp"

namespace chordrt::heuristics {

namespace {

namespace g = chord::grouped;

constexpr int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// Tiles of a configuration when every row block is used (contiguous) or every expert has rows_hint.
int64_t tile_count(const GroupedShape& s, const GroupedConfig& c, int64_t rows_hint) {
  const int64_t n_blocks = s.n / g::block_n(c.slices, c.consumers);
  if (s.mode == GroupedMode::kContiguous) return (rows_hint + c.block_m - 1) / c.block_m * n_blocks;
  return s.experts * ((rows_hint + c.block_m - 1) / c.block_m) * n_blocks;
}

}  // namespace

int grouped_deepest_ring(const GroupedShape& s, GroupedConfig c, const DeviceFacts& facts) {
  for (int stages = 8; stages >= 2; --stages) {
    c.stages = stages;
    if (grouped_dynamic_smem(s, c) <= facts.max_smem_per_block_optin) return stages;
  }
  return 2;
}

int64_t grouped_dynamic_smem(const GroupedShape& s, const GroupedConfig& c) {
  return g::gemm_smem_bytes(static_cast<int>(s.mode), c.block_m, c.slices, c.stages, s.experts, c.consumers,
                            c.stream_k != 0);
}

int grouped_consumer_registers(const GroupedShape& s, const GroupedConfig& c) {
  const int steps = grouped_block_k(s.mode) / 16;
  int fragments = 2 * c.slices * steps * 4;  // kRingBlock
  if (c.ring == g::kRingStep) fragments = 2 * c.slices * 4 + c.slices * steps;
  if (c.ring == g::kRingSingle) fragments = c.slices * steps * 4;
  if (c.ring == g::kRingHalf) fragments = c.slices * steps / 2 * 4;
  // The rest (addresses, indices, loop state): ~40; ~32 for the step ring on long K, where no next tile's
  // first K block is held in flight (NVRTC, four consumers of two slices at K 7168: 96 registers and no
  // spills at block_m 48, 20 bytes of spills at 56), and for the single ring (NVRTC, four consumers of two
  // slices at the 112 registers consumer_registers leaves them: no spills up to block_m 48; at 56, 80 bytes
  // of spills and ptxas waits after every wgmma), and the half ring (long K only). Other configurations keep
  // 40 until measured.
  const bool look_ahead = s.k / grouped_block_k(s.mode) <= chord::grouped::kShortTileKBlocks;
  const bool lean = g::one_buffer_ring(c.ring) || (c.ring == g::kRingStep && !look_ahead);
  return c.slices * c.block_m / 2 + fragments + (lean ? 32 : 40);
}

std::string grouped_config_error(const GroupedShape& s, const GroupedConfig& c, const DeviceFacts& facts) {
  const int64_t bk = grouped_block_k(s.mode);
  if (s.experts < 1 || s.experts > g::kMaxExperts) {
    return fmt::format("experts must be in [1, {}], got {}", g::kMaxExperts, s.experts);
  }
  if (c.slices < 1 || c.slices > g::kMaxSlices) {
    return fmt::format("slices must be in [1, {}], got {}", g::kMaxSlices, c.slices);
  }
  if (!g::valid_consumers(c.consumers)) return fmt::format("consumers must be 2 or 4, got {}", c.consumers);
  if (!g::valid_ring(c.ring)) {
    return fmt::format("ring must be {} (block), {} (step), {} (single) or {} (half), got {}", g::kRingBlock,
                       g::kRingStep, g::kRingSingle, g::kRingHalf, c.ring);
  }
  if (c.ring == g::kRingHalf && s.k / bk <= g::kShortTileKBlocks) {
    return fmt::format("ring {} (half) needs more than {} K blocks (k > {}), got k {}", g::kRingHalf,
                       g::kShortTileKBlocks, g::kShortTileKBlocks * bk, s.k);
  }
  if (const int bn = g::block_n(c.slices, c.consumers); s.n < bn || s.n % bn != 0 || s.n > chord::w4a16::kMaxDim) {
    return fmt::format(
        "n must be a positive multiple of {} (the tile's rows, 64 * slices * consumers) up to {}, got {}", bn,
        chord::w4a16::kMaxDim, s.n);
  }
  if (s.k < bk || s.k % bk != 0 || s.k > chord::w4a16::kMaxDim) {
    return fmt::format("k must be a positive multiple of {} (the mode's K block) up to {}, got {}", bk,
                       chord::w4a16::kMaxDim, s.k);
  }
  if (c.stream_k != 0 && c.stream_k != 1) return fmt::format("stream_k must be 0 or 1, got {}", c.stream_k);
  if (c.stream_k == 1 && s.k / bk <= g::kShortTileKBlocks) {
    return fmt::format("stream_k 1 needs more than {} K blocks (k > {}), got k {}", g::kShortTileKBlocks,
                       g::kShortTileKBlocks * bk, s.k);
  }
  if (c.block_m < g::kMinBlockM || c.block_m > g::kMaxBlockM || c.block_m % 8 != 0) {
    return fmt::format("block_m must be a multiple of 8 in [{}, {}], got {}", g::kMinBlockM, g::kMaxBlockM, c.block_m);
  }
  if (c.stages < g::kMinStages || c.stages > g::kMaxStages) {
    return fmt::format("stages must be in [{}, {}], got {}", g::kMinStages, g::kMaxStages, c.stages);
  }
  if (const int regs = grouped_consumer_registers(s, c); regs > g::consumer_registers(c.consumers, c.ring)) {
    return fmt::format(
        "block_m {} with {} slices needs ~{} registers per consumer thread (at most {} with {} consumers)", c.block_m,
        c.slices, regs, g::consumer_registers(c.consumers, c.ring), c.consumers);
  }
  if (const int64_t smem = grouped_dynamic_smem(s, c); smem > facts.max_smem_per_block_optin) {
    return fmt::format("needs {} bytes of shared memory (at most {})", smem, facts.max_smem_per_block_optin);
  }
  return "";
}

GroupedConfig select_grouped(const GroupedShape& s, int64_t rows_hint, const DeviceFacts& facts,
                             bool stream_k_workspace) {
  GroupedConfig c;
  rows_hint = std::max<int64_t>(rows_hint, 1);
  if (s.mode == GroupedMode::kContiguous) {
    // Tokens on wgmma N: 128-row blocks (the contract's padding) with 256 weight rows per tile while that
    // still fills every SM; smaller tiles for small problems, where filling the GPU matters more.
    const GroupedConfig order[] = {{128, 2, 0}, {128, 1, 0}, {64, 2, 0}, {64, 1, 0}};
    c = order[3];
    for (const GroupedConfig& o : order) {
      if (s.n % g::block_n(o.slices, o.consumers) == 0 && tile_count(s, o, rows_hint) >= facts.sm_count) {
        c = o;
        break;
      }
    }
    // Stream-K where whole tiles would leave the SMs idle for 1/6 or more of the kernel (ceil(waves) >= 1.2 x
    // waves; the host knows the contiguous tile count exactly). Measured (H100, bench/NOTES.md "Contiguous
    // stream-K"): -12% at 1.45 waves (EP32 gate_up, 128 rows an expert), and within the runs' +-5% noise, or
    // slower, at 2.55-10 waves, where the tail is smaller than what the partials and the fix-up cost.
    const int64_t tiles = tile_count(s, c, rows_hint);
    const int64_t grid = std::min<int64_t>(tiles, facts.sm_count);
    const int64_t waves = (tiles + grid - 1) / std::max<int64_t>(grid, 1);
    // (Then the last wave is at most 2/3 full, which the kernel's stream_whole_tiles never runs whole.)
    if (stream_k_workspace && s.k / grouped_block_k(s.mode) > g::kShortTileKBlocks && 5 * waves * grid >= 6 * tiles) {
      c.stream_k = 1;
    }
  } else {
    // Memory-bound decode: a row block a little above the expected tokens per expert (uneven counts
    // spill over it rarely), split in even blocks above 128.
    const double factor = s.k >= 4096 ? 1.3 : 1.25;
    const int64_t want = static_cast<int64_t>(static_cast<double>(rows_hint) * factor + 0.999);
    const int64_t blocks = (want + 127) / 128;
    c.block_m = static_cast<int>(std::clamp<int64_t>(round_up((want + blocks - 1) / blocks, 8), 8, 128));
    // Two 64-row slices per consumer warpgroup when the fragments fit and 256-row tiles still give every
    // SM a tile: with 8 consumer warps per SM the dequant is latency-bound, and a second independent slice
    // per warp took EP8 gate_up at 8 tokens from 343 to 263 us (H200).
    c.slices = 1;
    GroupedConfig wide = c;
    wide.slices = 2;
    if (s.n % g::block_n(wide.slices, wide.consumers) == 0 &&
        grouped_consumer_registers(s, wide) <= g::consumer_registers(wide.consumers, wide.ring) &&
        tile_count(s, wide, rows_hint) >= facts.sm_count) {
      c = wide;
    }
  }
  c.stages = grouped_deepest_ring(s, c, facts);
  return c;
}

std::string apply_grouped_override(std::string_view spec, GroupedConfig& c) {
  return apply_int_overrides(spec, {{"block_m", &c.block_m},
                                    {"slices", &c.slices},
                                    {"stages", &c.stages},
                                    {"consumers", &c.consumers},
                                    {"ring", &c.ring},
                                    {"stream_k", &c.stream_k}});
}

}  // namespace chordrt::heuristics
