// The sparse MLA kernels' contract (cache_write.cuh, decode.cuh, combine.cuh): the latent cache record
// (SPEC §3.4), the by-value parameter structs, the decode kernel's shared-memory layout and the template
// ranges. Shared by the kernels, heuristics/sparse_mla and runtime/ops/sparse_mla*.
#pragma once

#include "common/host_device.cuh"

#if !defined(__CUDACC_RTC__)
#include <cstddef>
#endif

namespace chord::sparse_mla {

constexpr int kNopeDims = 512;
constexpr int kTileDims = 128;  // values per FP32 scale in fp8_ds_mla
constexpr int kTiles = kNopeDims / kTileDims;
constexpr int kBlockKeys = 64;  // keys per decode pipeline stage
constexpr int kMaxHeads = 128;
constexpr int kMaxSplits = 64;
constexpr int kMaxTokens = 65535;               // grid.y
constexpr int kCombineThreads = kNopeDims / 4;  // 4 dims per thread
constexpr int kCacheWriteWarps = 4;             // one warp per token row

enum CacheFormat : int { kFp8DsMla = 0, kBf16 = 1 };

// One token's record: fp8_ds_mla is 512 E4M3 values, 4 FP32 scales (one per 128-value tile), then the
// RoPE dims as BF16; BF16 is the 512 + RoPE dims as BF16. A paged cache is an array of records, so slot
// s is record s whatever the page size. dims = bytes = 0 for an unknown format or RoPE dims other than
// 0 / 64 (no arithmetic on an unchecked rope: the C ABI passes it straight through).
struct RecordLayout {
  bool fp8;
  int dims, nope_bytes, scale_offset, rope_offset, bytes;
};
CHORD_HD constexpr RecordLayout record_layout(int format, int rope) {
  RecordLayout r{format == kFp8DsMla, 0, 0, 0, 0, 0};
  if ((format != kFp8DsMla && format != kBf16) || (rope != 0 && rope != 64)) return r;
  r.dims = kNopeDims + rope;
  r.nope_bytes = r.fp8 ? kNopeDims : 2 * kNopeDims;
  r.scale_offset = r.nope_bytes;  // fp8 only
  r.rope_offset = r.nope_bytes + (r.fp8 ? 4 * kTiles : 0);
  r.bytes = r.rope_offset + 2 * rope;
  return r;
}
static_assert(record_layout(kFp8DsMla, 64).bytes == 656 && record_layout(kBf16, 64).bytes == 1152 &&
                  record_layout(kFp8DsMla, 0).bytes == 528 && record_layout(kBf16, 0).bytes == 1024,
              "SPEC §3.4 record sizes");

// Shared memory of one decode CTA, in bytes from the dynamic base.
struct DecodeSmem {
  int row_bytes, q_row_bytes, rope_row_bytes, p_row;  // p_row in floats
  int raw, q, rope, p;
  int red;      // [4 key groups][HG] running maxima
  int sum;      // [4 key groups][HG] denominators (at the end)
  int inv_pre;  // [HG] q prescales
  int mask;     // [STAGES][WARPS] u32: valid keys, a bit per record
  int bars;     // [STAGES] mbarriers
  int partial;  // partial S of the second dim-split warp of each key group (8 warps on 8 heads): [4][32][4]
  int bytes;
};
CHORD_HD constexpr DecodeSmem decode_smem(int format, int rope, int hg, int warps, int stages) {
  const RecordLayout r = record_layout(format, rope);
  DecodeSmem s{};
  // BF16 rows are 0 mod 128 bytes long; 16 more spread the P.V loads of neighbouring keys over the banks.
  s.row_bytes = r.fp8 ? r.bytes : r.bytes + 16;
  s.q_row_bytes = 2 * kNopeDims + 16;
  s.rope_row_bytes = 2 * rope + 16;
  s.p_row = kBlockKeys + 8;
  s.raw = 0;
  s.q = s.raw + stages * kBlockKeys * s.row_bytes;
  s.rope = s.q + hg * s.q_row_bytes;
  s.p = s.rope + hg * s.rope_row_bytes;
  s.red = s.p + hg * s.p_row * 4;
  s.sum = s.red + 4 * hg * 4;
  s.inv_pre = s.sum + 4 * hg * 4;
  s.mask = s.inv_pre + hg * 4;
  s.bars = (s.mask + stages * warps * 4 + 7) / 8 * 8;
  s.partial = s.bars + stages * 8;
  s.bytes = s.partial + (warps == 8 && hg == 8 ? 4 * 32 * 4 * 4 : 0);
  return s;
}

// decode_wgmma.cuh (fp8_ds_mla, 64 heads a CTA): three warpgroups. The S warpgroup computes S and the
// softmax and hands P over through shared memory; each of the two P.V warpgroups gathers half of every
// 32-key block (16 records) into a raw ring, converts that half into the two-deep key ring and runs P.V
// for 256 output dims. The query and each converted key block are stored as column blocks of 64 dims,
// each [rows][128 bytes] in the 128-byte swizzle (16-byte chunk c of row r at r * 128 + (c ^ (r % 8)) *
// 16): K-major for S = Q K^T, the same key bytes MN-major for P.V.
constexpr int kWgmmaHeads = 64;
constexpr int kWgmmaBlockKeys = 32;
constexpr int kWgmmaWarps = 12;  // the S warpgroup, then the two P.V warpgroups
constexpr int kWgmmaColBytes = 128;
constexpr int kWgmmaRawStages = 3;
constexpr int kWgmmaHalves = 2;                                 // P.V warpgroups: halves of a block's keys
constexpr int kWgmmaHalfKeys = kWgmmaBlockKeys / kWgmmaHalves;  // keys one P.V warpgroup gathers and converts
constexpr int kWgmmaConvertWarps = 4 * kWgmmaHalves;            // warps converting a block

struct WgmmaDecodeSmem {
  int col_blocks;       // 64-dim column blocks of a key or query row (8 NoPE, + 1 RoPE)
  int q;                // [col_blocks][64 heads][128 B]: NoPE as F16 prescaled per head, RoPE as BF16
  int keys;             // [2 stages][col_blocks][32 keys][128 B]: NoPE E4M3 as F16 (exact), RoPE BF16
  int key_stage_bytes;  //
  int raw;              // [kWgmmaRawStages][32 keys][record]: the gathered records (keys 16 h.. by half h)
  int probs;            // [5][128 threads] float4: a block's P (FP32, 4 float4 a thread), then its rescales
  int stats;            // [128 threads] float4: the final row sums and maxima, S warpgroup -> P.V warpgroups
  int key_scale;        // [2 stages][4 tiles][32 keys] FP32: the converted keys' scales (0: invalid key)
  int tile_part;        // [2 stages][4 tiles][8 warps] FP32: largest scale magnitude of a converting warp's keys
  int key_bias;         // [2 stages][32 keys] FP32: 0 for a valid key, -inf for an invalid one (S's mask)
  int raw_mask;         // [kWgmmaRawStages][2 halves] u32: valid keys of a gathered half block
  int inv_pre;          // [64] q prescales
  int bars;             // raw_full[RS][2], raw_empty[RS][2], converted[2], stage_free[2]
  int bytes;            // plus 1024 for aligning the base
};
CHORD_HD constexpr WgmmaDecodeSmem wgmma_decode_smem(int rope) {
  const RecordLayout r = record_layout(kFp8DsMla, rope);
  WgmmaDecodeSmem s{};
  s.col_blocks = (kNopeDims + rope) / 64;
  s.q = 0;
  s.keys = s.q + s.col_blocks * kWgmmaHeads * kWgmmaColBytes;
  s.key_stage_bytes = s.col_blocks * kWgmmaBlockKeys * kWgmmaColBytes;
  s.raw = s.keys + 2 * s.key_stage_bytes;
  s.probs = s.raw + kWgmmaRawStages * kWgmmaBlockKeys * r.bytes;
  s.stats = s.probs + 5 * 128 * 16;
  s.key_scale = s.stats + 128 * 16;
  s.tile_part = s.key_scale + 2 * kTiles * kWgmmaBlockKeys * 4;
  s.key_bias = s.tile_part + 2 * kTiles * kWgmmaConvertWarps * 4;
  s.raw_mask = s.key_bias + 2 * kWgmmaBlockKeys * 4;
  s.inv_pre = s.raw_mask + kWgmmaRawStages * kWgmmaHalves * 4;
  s.bars = (s.inv_pre + kWgmmaHeads * 4 + 7) / 8 * 8;
  s.bytes = s.bars + (2 * kWgmmaRawStages * kWgmmaHalves + 4) * 8 + 1024;
  return s;
}
static_assert(wgmma_decode_smem(64).bytes <= 227 * 1024, "one WGMMA decode CTA per SM");

// decode.cuh's by-value argument (runtime/ops/sparse_mla.cpp fills this same struct).
struct DecodeParams {
  const bf16* q;               // [T, H, 512 + ROPE]
  const uint8_t* cache;        // records
  const int32_t* indices;      // [T, topk]
  const int32_t* topk_length;  // optional [T]
  const float* sink;           // optional [H]
  bf16* out;                   // [T, H, 512]
  float* lse;                  // [T, H]
  float* part_out;             // [T, H, splits, 512] when splits > 1
  float* part_lse;             // [T, H, splits]
  int64_t num_slots;
  int32_t topk;
  int32_t splits;
  int32_t blocks_per_split;
  float scale_log2;  // softmax scale * log2(e)
};
static_assert(sizeof(DecodeParams) == 96, "the by-value kernel argument's size");
#if !defined(__CUDACC_RTC__)  // NVRTC has no offsetof
static_assert(offsetof(DecodeParams, part_lse) == 64 && offsetof(DecodeParams, num_slots) == 72 &&
                  offsetof(DecodeParams, topk) == 80 && offsetof(DecodeParams, scale_log2) == 92,
              "the by-value kernel argument's layout");
#endif

// combine.cuh's by-value argument.
struct CombineParams {
  const float* part_out;  // [rows, splits, 512]
  const float* part_lse;  // [rows, splits]
  const float* sink;      // optional [H]
  bf16* out;              // [rows, 512]
  float* lse;             // [rows]; one CTA per row (token, head)
  int32_t splits;
};
static_assert(sizeof(CombineParams) == 48, "the by-value kernel argument's size");
#if !defined(__CUDACC_RTC__)
static_assert(offsetof(CombineParams, lse) == 32 && offsetof(CombineParams, splits) == 40,
              "the by-value kernel argument's layout");
#endif

}  // namespace chord::sparse_mla
