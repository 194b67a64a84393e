// The W4A16 grouped GEMM's contract (kernels_src/grouped/gemm.cuh; also the indexed family's prefill,
// which runs it in its gathering mode): the modes, the template ranges, the tile constants and the
// shared-memory layout, shared by the kernel, heuristics/grouped and runtime/ops.
#pragma once

#include "common/host_device.cuh"
#include "w4a16/params.cuh"

namespace chord::grouped {

// The MODE template argument.
enum : int { kContiguous = 0, kMasked = 1, kIndexed = 2 };

constexpr int kSliceRows = 64;  // weight rows of one wgmma (M)
constexpr int kGroup = w4a16::kGroup;
// Consumer warpgroups (warpgroup 0 produces): 2, or 4 for small token tiles, where twice the consumer
// warps hide the dequant chains (each with half the registers).
constexpr int kMinConsumers = 2, kMaxConsumers = 4;
CHORD_HD constexpr bool valid_consumers(int consumers) { return consumers == 2 || consumers == 4; }
CHORD_HD constexpr int threads(int consumers) { return 128 * (1 + consumers); }
constexpr int kMaxExperts = w4a16::kMaxExperts;
constexpr int kMinBlockM = 8, kMaxBlockM = 256;  // wgmma N: tokens per tile, a multiple of 8
constexpr int kMaxSlices = 2;                    // 64-row slices per consumer
constexpr int kMinStages = 2, kMaxStages = 16;
// A tile of at most this many K blocks is short: its fixed costs (pipeline restart, epilogue) weigh like
// its wgmmas (TP down, K 256: 4 blocks). There the main loop dequantizes the next tile's first K block
// under the last wgmmas, and the indexed prefill takes four consumer warpgroups (H200, bench/NOTES.md v5, v6).
constexpr int kShortTileKBlocks = 8;
constexpr int kSmemAlign = 1024;  // the kernel aligns its dynamic shared memory (128-byte swizzle atoms)

// The RING template argument: how a consumer's dequantized fragments are buffered in registers.
//   kRingBlock:  two K-block buffers; block kb + 1 is dequantized while block kb's wgmmas run.
//   kRingStep:   two k16-step buffers, the block's packed words held in registers (half the fragments).
//   kRingSingle: one K-block buffer; a block's wgmmas complete before the next block is dequantized into
//                it, so the overlap of dequant and tensor pipe comes from the other consumer warpgroups
//                (half the block ring's fragment registers: 32 for two slices, so four consumers fit).
//   kRingHalf:   one half-K-block buffer; the single ring dequantizing and issuing a block in two halves
//                (16 fragment registers for two slices: with 112 registers four consumers hold 56-64-token
//                tiles). Long K only.
enum : int { kRingBlock = 0, kRingStep = 1, kRingSingle = 2, kRingHalf = 3 };
CHORD_HD constexpr bool valid_ring(int ring) { return ring >= kRingBlock && ring <= kRingHalf; }
// The rings whose four consumers complete each batch of wgmmas before dequantizing the next one.
CHORD_HD constexpr bool one_buffer_ring(int ring) { return ring == kRingSingle || ring == kRingHalf; }

// setmaxnreg of the producer warpgroup, and of each consumer: what the producer's release leaves. The launch
// allocates 65536 / threads rounded down to 8 per thread (168 with 2 consumers, 96 with 4). A producer at 40
// frees 128 x (168 - 40) = 16384 = 256 x (232 - 168), or 128 x 56 = 7168 >= 512 x (104 - 96). Four consumers on
// a one-buffer ring take the producer to 32, which leaves them 112 (128 x 64 = 8192 = 512 x 16), the most the
// CTA's pool allows (launch: 96, as 104 x 640 > 65536): two slices at block_m 48 (single) or 64 (half) then
// compile without spills (NVRTC; the single ring at 104 spilled 48 bytes and ptxas serialized every wgmma).
// The other configurations keep the measured 40 / 104.
CHORD_HD constexpr int producer_registers(int consumers, int ring) {
  return consumers == 4 && one_buffer_ring(ring) ? 32 : 40;
}
CHORD_HD constexpr int consumer_registers(int consumers, int ring) {
  return consumers == 2 ? 232 : (one_buffer_ring(ring) ? 112 : 104);
}

// The STREAM template argument (every mode, long K): data-parallel waves, then one stream-K
// wave. Whole tiles in the static order (tile i + grid * j) for all waves but the last one or two, so a row block's
// column tiles are in flight together and its activations come from L2 after the first read (contiguous
// ranges over all tiles broke that: bench/NOTES.md "Stream-K v1"); the remaining grid + (tiles mod grid)
// tiles' K blocks, numbered tile by tile, are split into one equal range per CTA, so every SM finishes
// together whatever the routing's count of blocks (whole tiles idle most SMs through a last partial wave). A CTA walks
// its range backwards, so the head of a tile that later CTAs finish (the end of its range) is its first segment: it
// writes that partial (one per CTA at most) before anything else. A tile cut between CTAs is finished by the CTA
// holding its last K block (the start of that CTA's range, walked last): it adds the FP32 partials of the earlier CTAs
// that share the tile, in CTA order, then runs the epilogue. Waiting only on lower CTA indices, dispatched first, keeps
// progress guaranteed when not every CTA is resident at once. The live row blocks (expert id in range) are listed once
// per CTA in shared memory; a routing with more than kMaxStreamBlocks of them (tens of waves: the last one costs
// little) is scheduled statically by the same kernel.
constexpr int kMaxStreamBlocks = 2048;
// The kernel's view of the caller's workspace: flags [grid][kMaxConsumers] (zeroed before the launch; 1 once
// that CTA's consumer warpgroup wrote its partial), then partials [grid][block_n * BM] FP32.
struct StreamWorkspace {
  int32_t* flags;
  float* partials;
};
CHORD_HD constexpr int64_t stream_flags_bytes(int64_t grid) { return (grid * kMaxConsumers * 4 + 255) / 256 * 256; }
CHORD_HD constexpr int64_t stream_workspace_bytes(int64_t grid, int64_t bm, int64_t block_n) {
  return stream_flags_bytes(grid) + grid * bm * block_n * 4;
}
// Tiles run whole before the stream-K wave: all when the last wave is at least 7/8 full (whole tiles then
// lose at most 1/8 of a tile's time, about what the partials cost), none when there are fewer tiles than
// CTAs, else all waves but the last full one (the stream-K wave then holds 1-2 tiles a CTA).
CHORD_HD constexpr int64_t stream_whole_tiles(int64_t tiles, int64_t grid) {
  const int64_t last = tiles % grid;
  if (last == 0 || last * 8 >= grid * 7) return tiles;
  return tiles / grid >= 1 ? (tiles / grid - 1) * grid : 0;
}
// CTA c's range of the stream-K wave's `work` iterations is [stream_begin(c), stream_begin(c + 1)).
CHORD_HD constexpr int64_t stream_begin(int64_t cta, int64_t work, int64_t grid) { return work * cta / grid; }
// The CTA whose range holds iteration pos (the last one, where ranges are empty).
CHORD_HD constexpr int64_t stream_cta_of(int64_t pos, int64_t work, int64_t grid) {
  return ((pos + 1) * grid - 1) / work;
}

// The packed layout each mode reads, and its K block (a stage holds one).
CHORD_HD constexpr w4a16::Layout layout_of_mode(int mode) {
  return mode == kMasked ? w4a16::Layout::kWgmmaK128 : w4a16::Layout::kWgmmaK64;
}
CHORD_HD constexpr int block_k_of_mode(int mode) { return w4a16::block_k(layout_of_mode(mode)); }

// Weight rows of a tile: every consumer's slices.
CHORD_HD constexpr int block_n(int slices, int consumers) { return consumers * slices * kSliceRows; }

// The dynamic shared memory (bytes from the 1024-aligned base): STAGES ring stages of [activation
// tile | packed weights | scales], the consumers' epilogue tiles, the full/empty barriers, the
// masked scheduler's prefix table [experts + 1].
struct GemmSmemLayout {
  int act_chunk_bytes;  // BM rows x 64 BF16, 128-byte swizzled
  int act_bytes, block_n, weight_bytes, scale_bytes, stage_bytes;
  int epilogue_pitch;  // BF16 per token row (+16 bytes: banks)
  int epilogue_bytes, barrier_offset, prefix_offset;
};
// After the masked prefix table, indexed stream-K's list of live row blocks (16-bit block ids) and the warps'
// counts that build it (contiguous stream-K takes every row block and needs none).
constexpr int kStreamListBytes = kMaxStreamBlocks * 2 + 32 * 4;
CHORD_HD constexpr GemmSmemLayout gemm_smem_layout(int bm, int slices, int block_k, int stages, int consumers) {
  GemmSmemLayout l{};
  l.act_chunk_bytes = bm * 128;
  l.act_bytes = block_k / 64 * l.act_chunk_bytes;
  l.block_n = block_n(slices, consumers);
  l.weight_bytes = l.block_n * block_k / 2;
  l.scale_bytes = block_k / kGroup * l.block_n * 2;
  l.stage_bytes = (l.act_bytes + l.weight_bytes + l.scale_bytes + 1023) / 1024 * 1024;
  l.epilogue_pitch = slices * kSliceRows + 8;
  l.epilogue_bytes = consumers * bm * l.epilogue_pitch * 2;
  l.barrier_offset = stages * l.stage_bytes + l.epilogue_bytes;
  l.prefix_offset = l.barrier_offset + 2 * stages * 8;
  return l;
}
// The stream-K list's offset: after the prefix table, 16-byte aligned.
CHORD_HD constexpr int stream_list_offset(const GemmSmemLayout& l, int experts) {
  return (l.prefix_offset + (experts + 1) * 4 + 15) / 16 * 16;
}
// What a launch of (mode, bm, slices, stages, experts, consumers, stream) needs, the alignment slack included.
CHORD_HD constexpr int gemm_smem_bytes(int mode, int bm, int slices, int stages, int experts, int consumers,
                                       bool stream = false) {
  const GemmSmemLayout l = gemm_smem_layout(bm, slices, block_k_of_mode(mode), stages, consumers);
  const int end = stream && mode == kIndexed ? stream_list_offset(l, experts) + kStreamListBytes
                                             : l.prefix_offset + (experts + 1) * 4;
  return end + kSmemAlign;
}

// The layout as the kernel names it.
template <int BM, int SLICES, int BLOCK_K, int STAGES, int CONSUMERS>
struct GemmSmem {
  static constexpr GemmSmemLayout kLayout = gemm_smem_layout(BM, SLICES, BLOCK_K, STAGES, CONSUMERS);
  static constexpr int kActChunkBytes = kLayout.act_chunk_bytes;
  static constexpr int kActBytes = kLayout.act_bytes;
  static constexpr int kBlockN = kLayout.block_n;
  static constexpr int kWeightBytes = kLayout.weight_bytes;
  static constexpr int kScaleBytes = kLayout.scale_bytes;
  static constexpr int kStageBytes = kLayout.stage_bytes;
  static constexpr int kEpiloguePitch = kLayout.epilogue_pitch;
  static constexpr int kEpilogueBytes = kLayout.epilogue_bytes;
  static constexpr int kBarrierOffset = kLayout.barrier_offset;
  static constexpr int kPrefixOffset = kLayout.prefix_offset;
};

}  // namespace chord::grouped
