// The loop both warp-decode kernels run: one warp streams 16 weight rows at a time through a private
// ring of shared-memory stages (cp.async, STAGES - 1 stages in flight) and multiplies them with up to
// 8 * N_TILES BF16 activation columns on mma.sync.
//
// Why shared memory: loaded straight into registers, each fragment load touched 8 rows (8 L1 wavefronts
// for 128 bytes) and the kernels ran at ~1.7 TB/s with L1 ~82% busy (Nsight Compute, H200). Staged, a
// warp copies whole row segments (16-byte cp.async) and reads fragments with conflict-free LDS, and the
// ring keeps several KB per warp in flight without holding registers.
//
// Work comes as jobs: a job is 16 rows (MMA rows 0-7 and 8-15, each set `row_stride` apart) over
// `stages` stages of SG groups, against one tile of columns. The kernel's Jobs type provides
//   int size()                        job slots of this warp
//   bool get(int j, StreamJob& job)   false for an empty slot (skipped)
//   const bf16* column(int j, int c)  activation row of column c in 0..8*N_TILES-1 (any valid row when
//                                     the column is padding: its results are discarded)
//   void before_columns()             called once before the first activation load
//   void finish(int j, acc)           epilogue of job j (acc: FP32, MMA accumulator layout)
// Activations are loaded into registers one stage ahead (they are small and L2-resident).
#pragma once

#include "common/async_copy.cuh"
#include "warp_decode/weights.cuh"

namespace chord::warp_decode {

struct StreamJob {
  const uint8_t* lo;  // MMA row 0's weights (rows 1..7 follow at row_stride)
  const uint8_t* hi;  // MMA row 8's
  long long row_stride;
  const uint8_t* scale_lo;
  const uint8_t* scale_hi;
  long long scale_row_stride;
  int g_begin;  // first group (of 32 K values)
  int stages;   // SG groups each
};

// Bytes of one stage (weights then scales) and of a warp's ring; the host computes the same numbers
// (heuristics/warp_decode.cpp, warp_decode_stage_bytes).
template <int FORMAT, int SG>
struct StageLayout {
  using F = WeightFormat<FORMAT>;
  static constexpr int kRowPitch = SG * F::kGroupBytes + F::kRowPad;
  static constexpr int kScaleRow = SG * F::kScaleBytes;
  static constexpr int kScalesOffset = 16 * kRowPitch;
  static constexpr int kBytes = (kScalesOffset + 16 * kScaleRow + 15) / 16 * 16;
  static_assert(SG % 2 == 0 && kScaleRow >= 4 && kScaleRow <= 16, "stage: even group count, 4-16 scale bytes a row");
};

template <int FORMAT, int N_TILES, int SG, int STAGES, class Jobs>
struct WarpStream {
  using F = WeightFormat<FORMAT>;
  using L = StageLayout<FORMAT, SG>;
  static constexpr int kRowChunks = SG * F::kGroupBytes / 16;  // 16-byte pieces of a staged row

  Jobs& jobs;
  uint8_t* ring;  // this warp's STAGES * L::kBytes
  int lane;

  // (job, stage): the job's pointers are recomputed from its index when needed, so a cursor costs three
  // registers (a StreamJob per cursor pushed the down kernel into spills).
  struct Cursor {
    int job = -1, stage = 0, stages = 0;
    __device__ bool valid(const Jobs& jobs) const { return job < jobs.size(); }
    __device__ void next_job(Jobs& jobs) {
      stage = 0;
      StreamJob j;
      while (++job < jobs.size()) {
        if (jobs.get(job, j)) {
          stages = j.stages;
          return;
        }
      }
    }
    __device__ void advance(Jobs& jobs) {
      if (++stage == stages) next_job(jobs);
    }
  };

  __device__ void copy_stage(uint8_t* dst, const Cursor& c) const {
    StreamJob j;
    jobs.get(c.job, j);
    const int g0 = j.g_begin + c.stage * SG;
#pragma unroll
    for (unsigned i = lane; i < 16 * kRowChunks; i += 32) {
      const unsigned row = i / kRowChunks, piece = i % kRowChunks;
      const uint8_t* src = (row < 8 ? j.lo : j.hi) + (row % 8) * j.row_stride + g0 * F::kGroupBytes + piece * 16;
      cp_async<16>(dst + row * L::kRowPitch + piece * 16, src);
    }
    if (lane < 16) {
      const uint8_t* src = (lane < 8 ? j.scale_lo : j.scale_hi) + (lane & 7) * j.scale_row_stride + g0 * F::kScaleBytes;
      cp_async<L::kScaleRow>(dst + L::kScalesOffset + lane * L::kScaleRow, src);
    }
  }

  __device__ void load_columns(uint4 (&xb)[SG][N_TILES], const Cursor& c) const {
    const int g = lane / 4, t = lane % 4;
    StreamJob j;
    jobs.get(c.job, j);
#pragma unroll
    for (int nt = 0; nt < N_TILES; ++nt) {
      const bf16* row = jobs.column(c.job, nt * 8 + g) + (j.g_begin + c.stage * SG) * 32 + 8 * t;
#pragma unroll
      for (int j = 0; j < SG; ++j) xb[j][nt] = __ldg(reinterpret_cast<const uint4*>(row + j * 32));
    }
  }

  __device__ void compute_stage(const uint8_t* stage, const uint4 (&xb)[SG][N_TILES], float (&acc)[N_TILES][4]) const {
    const int g = lane / 4, t = lane % 4;
    const uint8_t* row_lo = stage + g * L::kRowPitch;
    const uint8_t* row_hi = row_lo + 8 * L::kRowPitch;
    const uint8_t* scale_lo = stage + L::kScalesOffset + g * L::kScaleRow;
    const uint8_t* scale_hi = scale_lo + 8 * L::kScaleRow;
#pragma unroll
    for (int j = 0; j < SG; ++j) {
      uint32_t lo[4], hi[4];
      F::dequant(F::load(row_lo, j, t), lo);
      F::dequant(F::load(row_hi, j, t), hi);
      const float sl = F::scale(scale_lo, j), sh = F::scale(scale_hi, j);
      const uint32_t a0[4] = {lo[0], hi[0], lo[1], hi[1]}, a1[4] = {lo[2], hi[2], lo[3], hi[3]};
#pragma unroll
      for (int nt = 0; nt < N_TILES; ++nt) {
        uint32_t b[4];
        F::b_pairs(xb[j][nt], b);
        float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (F::kOffset) {
          constexpr uint32_t kC[4] = {F::kOffsetA, F::kOffsetA, F::kOffsetA, F::kOffsetA};
          mma_bf16_m16n8k16(d, kC, b[0], b[1]);
          mma_bf16_m16n8k16(d, kC, b[2], b[3]);
        }
        mma_bf16_m16n8k16(d, a0, b[0], b[1]);
        mma_bf16_m16n8k16(d, a1, b[2], b[3]);
        acc[nt][0] += sl * d[0];
        acc[nt][1] += sl * d[1];
        acc[nt][2] += sh * d[2];
        acc[nt][3] += sh * d[3];
      }
    }
  }

  __device__ void run() {
    static_assert(STAGES >= 2, "a ring needs two stages");
    Cursor in, out;
    in.next_job(jobs);
    out = in;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
      if (in.valid(jobs)) {
        copy_stage(ring + s * L::kBytes, in);
        in.advance(jobs);
      }
      cp_async_commit();
    }
    jobs.before_columns();
    uint4 xb[SG][N_TILES];
    if (out.valid(jobs)) load_columns(xb, out);
    float acc[N_TILES][4] = {};
    int slot = 0;
    while (out.valid(jobs)) {
      cp_async_wait<STAGES - 2>();
      __syncwarp();  // every lane's copies of this stage landed; the slot refilled below is read out
      if (in.valid(jobs)) {
        copy_stage(ring + (slot == 0 ? STAGES - 1 : slot - 1) * L::kBytes, in);
        in.advance(jobs);
      }
      cp_async_commit();
      Cursor next = out;
      next.advance(jobs);
      // Register copies below, not a ping-pong pair: unrolling two steps spilled at the register cap.
      uint4 xn[SG][N_TILES];
      if (next.valid(jobs)) load_columns(xn, next);
      compute_stage(ring + slot * L::kBytes, xb, acc);
      if (next.job != out.job) {
        jobs.finish(out.job, acc);
#pragma unroll
        for (int nt = 0; nt < N_TILES; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
      }
#pragma unroll
      for (int j = 0; j < SG; ++j) {
#pragma unroll
        for (int nt = 0; nt < N_TILES; ++nt) xb[j][nt] = xn[j][nt];
      }
      out = next;
      slot = slot + 1 == STAGES ? 0 : slot + 1;
    }
    cp_async_wait<0>();
  }
};

}  // namespace chord::warp_decode
