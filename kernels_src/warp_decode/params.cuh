// The warp-decode kernels' contract (gate_up.cuh, down.cuh): template ranges, the weight formats' byte
// sizes, one warp's shared-memory stage and both kernels' dynamic shared memory. Shared by the kernels,
// heuristics/warp_decode and runtime/ops/warp_decode.
#pragma once

#include "common/host_device.cuh"

namespace chord::warp_decode {

enum : int { kInt4Group32 = 0, kMxfp8 = 1 };

constexpr int kMaxTokens = 128;  // the largest token bucket (route table capacity = bucket * top_k)
constexpr int kMaxTopK = 32;
constexpr int kMaxExperts = 1024;
constexpr int kMaxStageGroups = 8;  // a row's scales of one stage move as one <= 16-byte piece
constexpr int kMinStages = 2, kMaxStages = 8;
constexpr int kMaxNTiles = 4;

// Bytes per group of 32 K values, of its scale, and the staged row's pad (bank spread: weights.cuh).
struct FormatBytes {
  int group, scale, row_pad;
};
CHORD_HD constexpr FormatBytes format_bytes(int format) {
  return format == kInt4Group32 ? FormatBytes{16, 2, 16} : FormatBytes{32, 1, 32};
}
// Groups per stage a format needs (INT4 2, MXFP8 4: a stage's scales of one row are copied as one
// 4..16-byte piece).
CHORD_HD constexpr int min_stage_groups(int format) { return format == kInt4Group32 ? 2 : 4; }

// One stage of a warp's ring: 16 * row_tiles rows of sg groups (weights, each row padded), then the
// rows' scales; 16-byte aligned.
struct StageBytes {
  int rows, row_pitch, scale_row, scales_offset, bytes;
};
CHORD_HD constexpr StageBytes stage_bytes(int format, int sg, int row_tiles) {
  const FormatBytes f = format_bytes(format);
  StageBytes s{};
  s.rows = 16 * row_tiles;
  s.row_pitch = sg * f.group + f.row_pad;
  s.scale_row = sg * f.scale;
  s.scales_offset = s.rows * s.row_pitch;
  s.bytes = (s.scales_offset + s.rows * s.scale_row + 15) / 16 * 16;
  return s;
}

// Resident warps per SM the kernels' registers are capped for (their launch bounds): 24 with one row and one
// column tile, 16 with more (more accumulators and fragments per lane). A 16-warp one-tile CTA gets 32: two
// such CTAs an SM at 64 registers (61 used, no spill, NVRTC) instead of one, twice the warps to hide a warp's
// stage chain at M = 1 (bench/NOTES.md, "M = 1 gate/up"); no heuristic picks 16 warps yet.
CHORD_HD constexpr int resident_warps_bound(int warps, int row_tiles, int n_tiles) {
  return row_tiles * n_tiles == 1 ? (warps >= 16 ? 32 : 24) : 16;
}
// The 16-warp bound's 128 registers hold two row tiles or two column tiles, not both: INT4 gate/up with 2 x 2
// spills 248 bytes inside its main loop, down 308 (NVRTC, Qwen3 / Kimi shapes at 128 tokens), 1 x 2 and 2 x 1
// at most 48 bytes outside it. The heuristics keep row_tiles * n_tiles within this.
constexpr int kMaxTilesPerWarp = 2;
CHORD_HD constexpr int resident_ctas_bound(int warps, int row_tiles, int n_tiles) {
  const int ctas = resident_warps_bound(warps, row_tiles, n_tiles) / warps;
  return ctas > 0 ? ctas : 1;
}
// Static shared memory of both kernels' route table (route_table.cuh: offset, count, active, two counters,
// the routes).
CHORD_HD constexpr int route_table_bytes(int experts, int capacity) { return (3 * experts + 2 + capacity) * 4; }
// gate_up's static shared memory: the route table and the K_SPLIT warps' partials of one job.
CHORD_HD constexpr int gate_up_static_smem(int experts, int capacity, int k_split, int row_tiles, int n_tiles) {
  return route_table_bytes(experts, capacity) + k_split * row_tiles * n_tiles * 4 * 32 * 4;
}

// gate_up: k_split rings of `stages` stages.
CHORD_HD constexpr int gate_up_dynamic_smem(int format, int k_split, int sg, int row_tiles, int stages) {
  return k_split * stages * stage_bytes(format, sg, row_tiles).bytes;
}
// down: per-warp FP32 accumulators [warps][max_tokens][16 * row_tiles], then the warps' rings.
CHORD_HD constexpr int down_accumulator_floats(int warps, int max_tokens, int row_tiles) {
  return warps * max_tokens * 16 * row_tiles;
}
CHORD_HD constexpr int down_dynamic_smem(int format, int warps, int max_tokens, int sg, int row_tiles, int stages) {
  return down_accumulator_floats(warps, max_tokens, row_tiles) * 4 +
         warps * stages * stage_bytes(format, sg, row_tiles).bytes;
}

}  // namespace chord::warp_decode
