// The loop both warp-decode kernels run: one warp streams 16 * ROW_TILES weight rows at a time through a
// private ring of shared-memory stages (cp.async, STAGES - 1 stages in flight) and multiplies them with
// up to 8 * N_TILES BF16 activation columns on mma.sync. Two row tiles share one set of activation
// fragments (loads, permutes, the INT4 offset MMA) and the per-stage bookkeeping.
//
// Why shared memory: loaded straight into registers, each fragment load touched 8 rows (8 L1 wavefronts
// for 128 bytes) and the kernels ran at ~1.7 TB/s with L1 ~82% busy (Nsight Compute, H200). Staged, a
// warp copies whole row segments (16-byte cp.async) and reads fragments with conflict-free LDS, and the
// ring keeps several KB per warp in flight without holding registers.
//
// Work comes as jobs: a job is ROW_TILES tiles of 16 rows (tile t: MMA rows 0-7 from lo and 8-15 from
// hi, each set `row_stride` apart, both moved by t * tile_stride) over `stages` stages of SG groups,
// against one tile of columns. The kernel's Jobs type provides
//   int size()                        job slots of this warp
//   bool get(int j, StreamJob& job)   false for an empty slot (skipped)
//   const bf16* column(int j, int c)  activation row of column c in 0..8*N_TILES-1 (any valid row when
//                                     the column is padding: its results are discarded)
//   void before_columns()             called once before the first activation load
//   void finish(int j, acc)           epilogue of job j (acc[row tile][column tile][4]: FP32, MMA
//                                     accumulator layout)
// Activations are loaded into registers one stage ahead (they are small and L2-resident).
#pragma once

#include "common/async_copy.cuh"
#include "warp_decode/weights.cuh"

namespace chord::warp_decode {

struct StreamJob {
  const uint8_t* lo;  // MMA row 0's weights (rows 1..7 follow at row_stride)
  const uint8_t* hi;  // MMA row 8's
  long long row_stride;
  long long tile_stride;  // from one row tile to the next
  const uint8_t* scale_lo;
  const uint8_t* scale_hi;
  long long scale_row_stride;
  long long scale_tile_stride;
  int g_begin;  // first group (of 32 K values)
  int stages;   // SG groups each
};

// Bytes of one stage (weights then scales): warp_decode/params.cuh, which the host uses too.
template <int FORMAT, int SG, int ROW_TILES>
struct StageLayout {
  static constexpr StageBytes kStage = stage_bytes(FORMAT, SG, ROW_TILES);
  static constexpr int kRows = kStage.rows;
  static constexpr int kRowPitch = kStage.row_pitch;
  static constexpr int kScaleRow = kStage.scale_row;
  static constexpr int kScalesOffset = kStage.scales_offset;
  static constexpr int kBytes = kStage.bytes;
  static_assert(SG % 2 == 0 && kScaleRow >= 4 && kScaleRow <= 16, "stage: even group count, 4-16 scale bytes a row");
};

template <int FORMAT, int ROW_TILES, int N_TILES, int SG, int STAGES, class Jobs>
struct WarpStream {
  using F = WeightFormat<FORMAT>;
  using L = StageLayout<FORMAT, SG, ROW_TILES>;
  using Acc = float[ROW_TILES][N_TILES][4];
  static constexpr int kRowChunks = SG * F::kGroupBytes / 16;  // 16-byte pieces of a staged row

  Jobs& jobs;
  uint8_t* ring;  // this warp's STAGES * L::kBytes
  int lane;

  static constexpr int kChunksPerLane = L::kRows * kRowChunks / 32;
  static_assert(L::kRows * kRowChunks % 32 == 0, "a stage's row pieces spread evenly over the lanes");

  // Position of the copy side: the job's source pointers of this lane's pieces are computed once per job
  // (the per-stage address arithmetic was ~70 of ~290 instructions a stage, SASS of the H200 build).
  struct Issue {
    int job = -1, stage = 0, stages = 0;
    const uint8_t* src[kChunksPerLane];
    const uint8_t* scale_src;
  };
  // Position of the compute side: the activation row of this lane's column in each tile.
  struct Compute {
    int job = -1, stage = 0, stages = 0, g_begin = 0;
    const bf16* col[N_TILES];
  };

  // The first non-empty job after c.job (c.job = size() when none is left).
  template <class C>
  __device__ bool next_job(C& c, StreamJob& j) const {
    c.stage = 0;
    while (++c.job < jobs.size()) {
      if (jobs.get(c.job, j)) {
        c.stages = j.stages;
        return true;
      }
    }
    return false;
  }
  __device__ void start(Issue& c) const {
    StreamJob j;
    if (!next_job(c, j)) return;
#pragma unroll
    for (int i = 0; i < kChunksPerLane; ++i) {
      const unsigned chunk = lane + 32 * i, row = chunk / kRowChunks, piece = chunk % kRowChunks;
      c.src[i] = ((row & 15) < 8 ? j.lo : j.hi) + (row / 16) * j.tile_stride + (row & 7) * j.row_stride +
                 j.g_begin * F::kGroupBytes + piece * 16;
    }
    const unsigned srow = lane % L::kRows;  // lanes past kRows (one row tile) copy nothing
    c.scale_src = ((srow & 15) < 8 ? j.scale_lo : j.scale_hi) + (srow / 16) * j.scale_tile_stride +
                  (srow & 7) * j.scale_row_stride + j.g_begin * F::kScaleBytes;
  }
  __device__ void start(Compute& c) const {
    StreamJob j;
    if (!next_job(c, j)) return;
    c.g_begin = j.g_begin;
#pragma unroll
    for (int nt = 0; nt < N_TILES; ++nt) c.col[nt] = jobs.column(c.job, nt * 8 + lane / 4);
  }
  template <class C>
  __device__ void advance(C& c) const {
    if (++c.stage == c.stages) start(c);
  }

  __device__ void copy_stage(uint8_t* dst, const Issue& c) const {
#pragma unroll
    for (int i = 0; i < kChunksPerLane; ++i) {
      const unsigned chunk = lane + 32 * i, row = chunk / kRowChunks, piece = chunk % kRowChunks;
      cp_async<16>(dst + row * L::kRowPitch + piece * 16, c.src[i] + c.stage * (SG * F::kGroupBytes));
    }
    if (lane < L::kRows) {
      cp_async<L::kScaleRow>(dst + L::kScalesOffset + lane * L::kScaleRow, c.scale_src + c.stage * L::kScaleRow);
    }
  }

  __device__ void load_columns(uint4 (&xb)[SG][N_TILES], const Compute& c) const {
    const int group = c.g_begin + c.stage * SG;
#pragma unroll
    for (int nt = 0; nt < N_TILES; ++nt) {
      const bf16* row = c.col[nt] + group * 32 + 8 * (lane % 4);
#pragma unroll
      for (int j = 0; j < SG; ++j) xb[j][nt] = __ldg(reinterpret_cast<const uint4*>(row + j * 32));
    }
  }

  __device__ void compute_stage(const uint8_t* stage, const uint4 (&xb)[SG][N_TILES], Acc& acc) const {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int j = 0; j < SG; ++j) {
      uint32_t b[N_TILES][4];
      float offset[N_TILES][4];  // INT4: -136 * sum(x) per column, the start of every row tile's sum
#pragma unroll
      for (int nt = 0; nt < N_TILES; ++nt) {
        F::b_pairs(xb[j][nt], b[nt]);
        offset[nt][0] = offset[nt][1] = offset[nt][2] = offset[nt][3] = 0.0f;
        if (F::kOffset) {
          constexpr uint32_t kC[4] = {F::kOffsetA, F::kOffsetA, F::kOffsetA, F::kOffsetA};
          mma_bf16_m16n8k16(offset[nt], kC, b[nt][0], b[nt][1]);
          mma_bf16_m16n8k16(offset[nt], kC, b[nt][2], b[nt][3]);
        }
      }
#pragma unroll
      for (int rt = 0; rt < ROW_TILES; ++rt) {
        const uint8_t* row_lo = stage + (16 * rt + g) * L::kRowPitch;
        const uint8_t* scale_lo = stage + L::kScalesOffset + (16 * rt + g) * L::kScaleRow;
        uint32_t lo[4], hi[4];
        F::dequant(F::load(row_lo, j, t), lo);
        F::dequant(F::load(row_lo + 8 * L::kRowPitch, j, t), hi);
        const float sl = F::scale(scale_lo, j), sh = F::scale(scale_lo + 8 * L::kScaleRow, j);
        const uint32_t a0[4] = {lo[0], hi[0], lo[1], hi[1]}, a1[4] = {lo[2], hi[2], lo[3], hi[3]};
#pragma unroll
        for (int nt = 0; nt < N_TILES; ++nt) {
          float d[4] = {offset[nt][0], offset[nt][1], offset[nt][2], offset[nt][3]};
          mma_bf16_m16n8k16(d, a0, b[nt][0], b[nt][1]);
          mma_bf16_m16n8k16(d, a1, b[nt][2], b[nt][3]);
          acc[rt][nt][0] += sl * d[0];
          acc[rt][nt][1] += sl * d[1];
          acc[rt][nt][2] += sh * d[2];
          acc[rt][nt][3] += sh * d[3];
        }
      }
    }
  }

  __device__ void run() {
    static_assert(STAGES >= 2, "a ring needs two stages");
    const int size = jobs.size();
    Issue in;
    start(in);
    Compute out;
    start(out);
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
      if (in.job < size) {
        copy_stage(ring + s * L::kBytes, in);
        advance(in);
      }
      cp_async_commit();
    }
    jobs.before_columns();
    uint4 xb[SG][N_TILES];
    if (out.job < size) load_columns(xb, out);
    Acc acc = {};
    int slot = 0;
    while (out.job < size) {
      cp_async_wait<STAGES - 2>();
      __syncwarp();  // every lane's copies of this stage landed; the slot refilled below is read out
      if (in.job < size) {
        copy_stage(ring + (slot == 0 ? STAGES - 1 : slot - 1) * L::kBytes, in);
        advance(in);
      }
      cp_async_commit();
      const int job = out.job;
      advance(out);
      // Register copies below, not a ping-pong pair: unrolling two steps spilled at the register cap.
      uint4 xn[SG][N_TILES];
      if (out.job < size) load_columns(xn, out);
      compute_stage(ring + slot * L::kBytes, xb, acc);
      if (out.job != job) {
        jobs.finish(job, acc);
#pragma unroll
        for (int rt = 0; rt < ROW_TILES; ++rt) {
#pragma unroll
          for (int nt = 0; nt < N_TILES; ++nt) acc[rt][nt][0] = acc[rt][nt][1] = acc[rt][nt][2] = acc[rt][nt][3] = 0.0f;
        }
      }
#pragma unroll
      for (int j = 0; j < SG; ++j) {
#pragma unroll
        for (int nt = 0; nt < N_TILES; ++nt) xb[j][nt] = xn[j][nt];
      }
      slot = slot + 1 == STAGES ? 0 : slot + 1;
    }
    cp_async_wait<0>();
  }
};

}  // namespace chord::warp_decode
