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
constexpr int kMaxTokens = 65535;                                // grid.y
constexpr int kCombineGroups = 4;                                // of the splits, one per 128 threads
constexpr int kCombineThreads = kCombineGroups * kNopeDims / 4;  // 4 dims per thread
constexpr int kCacheWriteWarps = 4;                              // one warp per token row

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

// decode_wgmma.cuh (either cache format, 64 heads a CTA): three warpgroups over 64-key blocks. A producer
// warpgroup loads each record's bytes into registers and stores the keys dequantized (E4M3 x tile scale,
// or BF16, as F16; RoPE as BF16) into a two-deep key buffer; the S warpgroup computes S, the softmax and P.V for
// output dims 0-255 (P from registers), the second P.V warpgroup dims 256-511 (P from shared memory).
// The query and each key buffer are stored as column blocks of 64 dims, each [rows][128 bytes] in the
// 128-byte swizzle (16-byte chunk c of row r at r * 128 + (c ^ (r % 8)) * 16): K-major for S = Q K^T,
// the same key bytes MN-major for P.V; P is one such column block [64 heads][64 keys as F16].
constexpr int kWgmmaHeads = 64;
constexpr int kWgmmaBlockKeys = 64;
constexpr int kWgmmaWarps = 12;  // the S warpgroup, the second P.V warpgroup, the producer
constexpr int kWgmmaColBytes = 128;
static_assert(kWgmmaBlockKeys == kBlockKeys, "split ranges are counted in decode blocks");
// 128 heads may run the token's two head groups as a 2-CTA cluster (the descriptor's `pair`), each producer
// loading half of every block for both CTAs.
CHORD_HD constexpr bool wgmma_decode_pair_fits(int heads) { return heads == 2 * kWgmmaHeads; }

struct WgmmaDecodeSmem {
  int col_blocks;        // 64-dim column blocks of a key or query row (8 NoPE, + 1 RoPE)
  int q;                 // [col_blocks][64 heads][128 B]: q x 2^e (per head): NoPE as F16, RoPE as BF16
  int keys;              // [2 buffers][col_blocks][64 keys][128 B]: NoPE E4M3 x tile scale as F16, RoPE BF16
                         // (buffer 0 holds Q's BF16 rows first, while the prologue converts them)
  int key_buffer_bytes;  //
  int probs;             // [64 heads][128 B]: a block's P as F16, for the second P.V warpgroup
  int alpha;             // [64] FP32: the block's row rescales (1 where the running max stayed)
  int denom;             // [64] FP32: the rows' final softmax denominators (0: no valid key)
  int sink;              // [64] FP32: the attention sink x log2(e) (-inf: none, or split-K)
  int key_bias;          // [2 buffers][64 keys] FP32: 0 for a valid key, -inf for an invalid one
  int inv_pre;           // [64] FP32: 2^-e, q's prescale undone
  int bars;              // key_full[2], key_empty[2], probs_full, probs_empty, denom_ready, pv_done, staged,
                         // q_full
  int out;               // [64 heads][kWgmmaOutRow] FP32: O normalized, at the end (over Q and the key buffers)
  int bytes;             // plus 1024 for aligning the base
};
// Rows of the output staging 8 words past a multiple of 32: a warp's 8-byte fragment stores take two
// wavefronts, the fewest 256 bytes can.
constexpr int kWgmmaOutRow = kNopeDims + 8;
CHORD_HD constexpr WgmmaDecodeSmem wgmma_decode_smem(int rope) {
  WgmmaDecodeSmem s{};
  s.col_blocks = (kNopeDims + rope) / 64;
  s.q = 0;
  s.keys = s.q + s.col_blocks * kWgmmaHeads * kWgmmaColBytes;
  s.key_buffer_bytes = s.col_blocks * kWgmmaBlockKeys * kWgmmaColBytes;
  s.probs = s.keys + 2 * s.key_buffer_bytes;
  s.alpha = s.probs + kWgmmaHeads * kWgmmaColBytes;
  s.denom = s.alpha + kWgmmaHeads * 4;
  s.sink = s.denom + kWgmmaHeads * 4;
  s.key_bias = s.sink + kWgmmaHeads * 4;
  s.inv_pre = s.key_bias + 2 * kWgmmaBlockKeys * 4;
  s.bars = (s.inv_pre + kWgmmaHeads * 4 + 7) / 8 * 8;
  s.out = 0;
  s.bytes = s.bars + 10 * 8 + 1024;
  return s;
}
static_assert(kWgmmaHeads * kWgmmaOutRow * 4 <= wgmma_decode_smem(0).probs,
              "the output staging fits over Q and the key buffers");
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
