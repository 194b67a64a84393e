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
// Work comes as jobs: a job is ROW_TILES tiles of 16 rows (tile t: MMA rows 0-7 from `rows`, 8-15 from
// `rows + kHiOffset`, each set kRowStride apart, both moved by t * kTileStride; the scales likewise with
// the kScale* strides) over `stages` stages of SG groups, against one tile of columns. The strides are
// compile-time constants of the kernel's Jobs type, so every copy of a stage is one base pointer plus an
// immediate offset; so is kStageStride, the groups from one stage of a job to its next (SG: contiguous;
// K_SPLIT * SG when the warps of a CTA interleave their stages along K). Jobs provides
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
  const uint8_t* rows;    // MMA row 0's weights of the first row tile
  const uint8_t* scales;  // its scales
  int g_begin;            // first group (of 32 K values)
  int stages;             // SG groups each
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

  // Position of the copy side: this lane's source pointer for the job (stage 0), computed once per job.
  // The lane copies piece lane % kRowChunks of rows r0 + kRowStep * i, r0 = lane / kRowChunks < kRowStep.
  // With kRowStep dividing 8 or equal to 16, row_offset(r0 + kRowStep * i) = row_offset(r0) +
  // row_offset(kRowStep * i): each copy is the lane's pointer plus a constant.
  static constexpr int kRowStep = 32 / kRowChunks;
  static_assert(32 % kRowChunks == 0 && (kRowStep <= 8 || kRowStep == 16), "a stage row is 2..16 pieces");
  struct Issue {
    int job = -1, stage = 0, stages = 0;
    const uint8_t* src;
    const uint8_t* scale_src;
  };
  // Bytes from MMA row 0 of the first row tile to staged row `row` (0..kRows-1) of a job.
  CHORD_HD static constexpr long long row_offset(int row) {
    return ((row & 15) < 8 ? 0 : Jobs::kHiOffset) + (row / 16) * Jobs::kTileStride + (row & 7) * Jobs::kRowStride;
  }
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
    const unsigned r0 = lane / kRowChunks, piece = lane % kRowChunks;
    c.src = j.rows + row_offset(r0) + j.g_begin * F::kGroupBytes + piece * 16;
    const unsigned srow = lane % L::kRows;  // lanes past kRows (one row tile) copy nothing
    c.scale_src = j.scales + ((srow & 15) < 8 ? 0 : Jobs::kScaleHiOffset) + (srow / 16) * Jobs::kScaleTileStride +
                  (srow & 7) * Jobs::kScaleRowStride + j.g_begin * F::kScaleBytes;
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
    const uint8_t* src = c.src + c.stage * (Jobs::kStageStride * F::kGroupBytes);
    uint8_t* row_dst = dst + (lane / kRowChunks) * L::kRowPitch + (lane % kRowChunks) * 16;
#pragma unroll
    for (int i = 0; i < kChunksPerLane; ++i) {
      if constexpr (F::kL2Prefetch256) {
        cp_async_16_l2_256(row_dst + kRowStep * i * L::kRowPitch, src + row_offset(kRowStep * i));
      } else {
        cp_async<16>(row_dst + kRowStep * i * L::kRowPitch, src + row_offset(kRowStep * i));
      }
    }
    if (lane < L::kRows) {
      cp_async<L::kScaleRow>(dst + L::kScalesOffset + lane * L::kScaleRow,
                             c.scale_src + c.stage * (Jobs::kStageStride * F::kScaleBytes));
    }
  }

  __device__ void load_columns(uint4 (&xb)[SG][N_TILES], const Compute& c) const {
    const int group = c.g_begin + c.stage * Jobs::kStageStride;
#pragma unroll
    for (int nt = 0; nt < N_TILES; ++nt) {
      const bf16* row = c.col[nt] + group * 32 + 8 * (lane % 4);
#pragma unroll
      for (int j = 0; j < SG; ++j) xb[j][nt] = __ldg(reinterpret_cast<const uint4*>(row + j * 32));
    }
  }

  __device__ void compute_stage(const uint8_t* stage, const uint4 (&xb)[SG][N_TILES], Acc& acc) const {
    const int g = lane / 4, t = lane % 4;
    // Scales of this lane's rows (g and g + 8 of each row tile) for the whole stage, one load per row.
    typename F::template ScaleWords<SG> s_lo[ROW_TILES], s_hi[ROW_TILES];
#pragma unroll
    for (int rt = 0; rt < ROW_TILES; ++rt) {
      const uint8_t* scale_lo = stage + L::kScalesOffset + (16 * rt + g) * L::kScaleRow;
      load_words(scale_lo, s_lo[rt]);
      load_words(scale_lo + 8 * L::kScaleRow, s_hi[rt]);
    }
    uint32_t words[ROW_TILES][4];  // ldmatrix formats: this lane's words of two groups
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
        typename F::Raw w_lo, w_hi;
        if constexpr (F::kLdmatrix) {
          // Groups j and j + 1 of rows g and g + 8 in one ldmatrix.x4 at even j (matrices: lo j, hi j,
          // lo j + 1, hi j + 1; lane L addresses row L % 8 of matrix L / 8).
          if (j % 2 == 0) {
            const uint8_t* row = stage + (16 * rt + (lane >> 3 & 1) * 8 + (lane & 7)) * L::kRowPitch;
            ldmatrix_x4(row + (j + (lane >> 4)) * F::kGroupBytes, words[rt]);
          }
          w_lo = words[rt][2 * (j % 2)];
          w_hi = words[rt][2 * (j % 2) + 1];
        } else {
          const uint8_t* row_lo = stage + (16 * rt + g) * L::kRowPitch;
          w_lo = F::load(row_lo, j, t);
          w_hi = F::load(row_lo + 8 * L::kRowPitch, j, t);
        }
        uint32_t lo[4], hi[4];
        F::dequant(w_lo, lo);
        F::dequant(w_hi, hi);
        const uint32_t a0[4] = {lo[0], hi[0], lo[1], hi[1]}, a1[4] = {lo[2], hi[2], lo[3], hi[3]};
#pragma unroll
        for (int nt = 0; nt < N_TILES; ++nt) {
          float d[4];
          mma_bf16_m16n8k16(d, a0, b[nt][0], b[nt][1], offset[nt]);  // C = the offset: no copy of it per tile
          mma_bf16_m16n8k16(d, a1, b[nt][2], b[nt][3]);
          const float sl = F::template scale<SG>(s_lo[rt], j), sh = F::template scale<SG>(s_hi[rt], j);
          acc[rt][nt][0] += sl * d[0];
          acc[rt][nt][1] += sl * d[1];
          acc[rt][nt][2] += sh * d[2];
          acc[rt][nt][3] += sh * d[3];
        }
      }
    }
  }

  // One stage: refill the slot read last, compute this slot with `cur` while `next` (the following
  // stage's activations) loads, finish a job that ends here. False once the last stage is done.
  __device__ bool step(Issue& in, Compute& out, int& slot, Acc& acc, const uint4 (&cur)[SG][N_TILES],
                       uint4 (&next)[SG][N_TILES]) const {
    const int size = jobs.size();
    cp_async_wait<STAGES - 2>();
    __syncwarp();  // every lane's copies of this stage landed; the slot refilled below is read out
    if (in.job < size) {
      copy_stage(ring + (slot == 0 ? STAGES - 1 : slot - 1) * L::kBytes, in);
      advance(in);
    }
    cp_async_commit();
    const int job = out.job;
    advance(out);
    if (out.job < size) load_columns(next, out);
    compute_stage(ring + slot * L::kBytes, cur, acc);
    if (out.job != job) {
      jobs.finish(job, acc);
#pragma unroll
      for (int rt = 0; rt < ROW_TILES; ++rt) {
#pragma unroll
        for (int nt = 0; nt < N_TILES; ++nt) acc[rt][nt][0] = acc[rt][nt][1] = acc[rt][nt][2] = acc[rt][nt][3] = 0.0f;
      }
    }
    slot = slot + 1 == STAGES ? 0 : slot + 1;
    return out.job < size;
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
    // Two activation buffers taking turns (two steps per iteration), so no register copies between stages.
    uint4 xa[SG][N_TILES], xb[SG][N_TILES];
    if (out.job < size) load_columns(xa, out);
    Acc acc = {};
    int slot = 0;
    if (out.job < size) {
      while (step(in, out, slot, acc, xa, xb) && step(in, out, slot, acc, xb, xa)) {
      }
    }
    cp_async_wait<0>();
  }
};

}  // namespace chord::warp_decode
