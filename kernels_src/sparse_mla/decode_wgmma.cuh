// Sparse MLA decode on wgmma for fp8_ds_mla caches, 64 heads a CTA (heads on wgmma's M): one query
// token, one head group of 64, a contiguous range of the top-k (split-K as in decode.cuh, merged by
// combine.cuh). Three warpgroups, so that no warp carries more than one of the per-block chains:
//  - the S warpgroup computes S over all 576 dims: the four NoPE tiles alternate between two
//    accumulators, each folded with its keys' tile scales (FP32, exact products) while the next tile
//    runs, the RoPE dims last (S = S_nope x the head's Q prescale + S_rope); then the online softmax
//    (invalid keys masked by an additive -inf bias), whose P (FP32) and rescales go to the P.V
//    warpgroups through shared memory, and the LSE at the end;
//  - each P.V warpgroup gathers half of every 32-key block (16 records, one bulk copy each) into a
//    three-deep raw ring, converts its half into the two-deep key ring (E4M3 as F16, exact; RoPE dims
//    copied as BF16; invalid keys as zeros; the keys' tile scales and per-warp tile maxima beside them),
//    loading a block's raw bytes under its P.V and storing them once all three warpgroups are done with
//    the stage, and runs P.V for its 256 output dims.
// A P.V warpgroup's O (64 x 256 FP32) sits in registers and takes O += P' V per 128-dim tile (V: the
// converted key bytes read MN-major), P' = P x key scale / the tile's unit (F16) as wgmma's A from
// registers; the unit (a power of two, moved when a block's largest scale leaves [unit / 2^8, unit])
// goes into O's rescale, as the running max does; both move rarely, so most blocks skip it.
// Every product is exact, as in decode.cuh: Q's NoPE dims are F16 scaled per head by a power of two (max
// |q| in [2^14, 2^15)), exact for BF16 q; F16 holds every E4M3 value.
#pragma once

#include "common/fp8.cuh"
#include "common/tma.cuh"
#include "common/warpgroup.cuh"
#include "common/wgmma_16bit.cuh"
#include "sparse_mla/params.cuh"
#include "sparse_mla/q_prescale.cuh"

namespace chord::sparse_mla {

namespace wgmma_decode {
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
// The S warpgroup holds no O; each P.V warpgroup holds 128 O registers a thread. The three counts add up
// to the launch allocation (168 a thread at 384 threads: 88 + 2 x 208 = 504): an increase beyond what the
// CTA was given at launch waits forever.
constexpr uint32_t kSRegisters = 88;
constexpr uint32_t kPvRegisters = 208;
static_assert(setmaxnreg_fits_launch(kWgmmaWarps * 32, kSRegisters + 2 * kPvRegisters), "setmaxnreg past the pool");
constexpr int kQColBytes = kWgmmaHeads * kWgmmaColBytes;        // one column block of Q
constexpr int kKeyColBytes = kWgmmaBlockKeys * kWgmmaColBytes;  // one column block of a key block
// Named barriers between the warpgroups (0 is __syncthreads): P of a block written / read, final stats;
// each counts the S warpgroup and both P.V warpgroups.
constexpr uint32_t kProbsFull = 2, kProbsEmpty = 3, kStatsReady = 4, kHandOffThreads = 384;
constexpr float kStaleMax = 8.f;  // log2 units: how far S may exceed the running max before it moves

// Byte offset of 16-byte chunk `chunk` (0-7) of row `row` inside a swizzled column block.
__device__ __forceinline__ int swizzled(int row, int chunk) {
  return row * kWgmmaColBytes + ((chunk ^ (row & 7)) << 4);
}
}  // namespace wgmma_decode

template <int ROPE, int H>
__global__ void __launch_bounds__(kWgmmaWarps * 32, 1) sparse_mla_decode_wgmma_kernel(const DecodeParams p) {
  using namespace wgmma_decode;
  constexpr WgmmaDecodeSmem S = wgmma_decode_smem(ROPE);
  constexpr RecordLayout R = record_layout(kFp8DsMla, ROPE);
  static_assert(R.bytes > 0 && R.bytes % 16 == 0, "RoPE dims 64, or 0 on NoPE layers; records move as 16-byte pieces");
  static_assert(H % kWgmmaHeads == 0, "whole groups of 64 heads");
  constexpr int kNope = kNopeDims / 64;  // NoPE column blocks
  constexpr int RS = kWgmmaRawStages;
  constexpr int HK = kWgmmaHalfKeys;

  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (smem_address(smem_raw) & 1023)) & 1023);
  uint8_t* q_s = smem + S.q;
  uint8_t* keys_s = smem + S.keys;
  uint8_t* raw_s = smem + S.raw;
  float4* probs_s = reinterpret_cast<float4*>(smem + S.probs);
  float4* stats_s = reinterpret_cast<float4*>(smem + S.stats);
  float* key_scale_s = reinterpret_cast<float*>(smem + S.key_scale);
  float* tile_part_s = reinterpret_cast<float*>(smem + S.tile_part);
  float* key_bias_s = reinterpret_cast<float*>(smem + S.key_bias);
  uint32_t* raw_mask_s = reinterpret_cast<uint32_t*>(smem + S.raw_mask);
  float* inv_pre_s = reinterpret_cast<float*>(smem + S.inv_pre);
  uint64_t* raw_full = reinterpret_cast<uint64_t*>(smem + S.bars);  // [RS][2 halves]
  uint64_t* raw_empty = raw_full + RS * kWgmmaHalves;               // [RS][2 halves]
  uint64_t* converted = raw_empty + RS * kWgmmaHalves;              // [2]: both P.V warpgroups stored their halves
  uint64_t* stage_free = converted + 2;                             // [2]: S and both P.V of the stage's block are done

  // The warp index through a shuffle, so that ptxas sees the role branches as warp-uniform (wgmma in a
  // branch it thinks divergent is serialized).
  const int warp = __shfl_sync(~0u, static_cast<int>(threadIdx.x / 32), 0), lane = threadIdx.x % 32;
  const int role = warp / 4;  // 0: S, 1 + h: the P.V warpgroup of half h
  const int head0 = (blockIdx.x % (H / kWgmmaHeads)) * kWgmmaHeads;
  const int split = blockIdx.x / (H / kWgmmaHeads);
  const int64_t t = blockIdx.y;

  // The combine kernel may be scheduled as soon as every CTA runs; it waits for this grid to finish.
  asm volatile("griddepcontrol.launch_dependents;");

  int len = p.topk;
  if (p.topk_length) len = max(0, min(p.topk_length[t], p.topk));
  const int key_begin = split * p.blocks_per_split * kBlockKeys;
  const int key_end = min(len, key_begin + p.blocks_per_split * kBlockKeys);
  const int nblocks = key_end > key_begin ? (key_end - key_begin + kWgmmaBlockKeys - 1) / kWgmmaBlockKeys : 0;

  if (threadIdx.x == 0) {
    for (int s = 0; s < RS * kWgmmaHalves; ++s) {
      mbarrier_init(&raw_full[s], HK);    // the gathering lanes of the half
      mbarrier_init(&raw_empty[s], 128);  // the half's P.V warpgroup has read the stage
    }
    for (int s = 0; s < 2; ++s) {
      mbarrier_init(&converted[s], 256);
      mbarrier_init(&stage_free[s], 384);
    }
    fence_barrier_init();
  }
  __syncthreads();

  // Gather (the first warp of each P.V warpgroup): lane k < 16 brings key 16 h + k of a block, its slot
  // fetched one block ahead.
  const int half = role - 1;
  const bool gather_warp = role > 0 && warp % 4 == 0;
  auto fetch_slot = [&](int i) -> int32_t {
    const int pos = key_begin + i * kWgmmaBlockKeys + HK * half + lane;
    return lane < HK && i < nblocks && pos < key_end ? __ldg(p.indices + t * p.topk + pos) : -1;
  };
  int32_t next_slot = gather_warp ? fetch_slot(0) : -1;
  auto issue = [&](int i) {
    const int s = i % RS;
    const int32_t slot = next_slot;
    next_slot = fetch_slot(i + 1);
    const bool valid = slot >= 0 && slot < p.num_slots;
    const uint32_t ballot = __ballot_sync(~0u, valid);
    if (lane == 0) raw_mask_s[s * kWgmmaHalves + half] = ballot;
    if (lane < HK) {
      uint64_t* full = &raw_full[s * kWgmmaHalves + half];
      if (valid) {
        fence_proxy_async();  // after the warpgroup's generic reads of this stage
        mbarrier_arrive_expect_bytes(full, R.bytes);
        bulk_copy(raw_s + (s * kWgmmaBlockKeys + HK * half + lane) * R.bytes,
                  p.cache + static_cast<int64_t>(slot) * R.bytes, R.bytes, full);
      } else {
        mbarrier_arrive(full);  // its converted key is zeros, its raw bytes never read
      }
    }
  };
  if (gather_warp) {
    for (int i = 0; i < RS && i < nblocks; ++i) issue(i);
  }

  // Q -> shared: warp per head; lane l holds dims 16l..16l+15 (column block l / 4, chunks 2(l % 4), +1).
  for (int hh = warp; hh < kWgmmaHeads; hh += kWgmmaWarps) {
    const bf16* qrow = p.q + (t * H + head0 + hh) * R.dims;
    const uint4 v0 = *reinterpret_cast<const uint4*>(qrow + lane * 16);
    const uint4 v1 = *reinterpret_cast<const uint4*>(qrow + lane * 16 + 8);
    uint4 lo, hi;
    const float inv_pre = q_to_f16_prescaled(v0, v1, lo, hi);
    uint8_t* col = q_s + (lane / 4) * kQColBytes;
    *reinterpret_cast<uint4*>(col + swizzled(hh, 2 * (lane % 4))) = lo;
    *reinterpret_cast<uint4*>(col + swizzled(hh, 2 * (lane % 4) + 1)) = hi;
    if (lane == 0) inv_pre_s[hh] = inv_pre;
    if constexpr (ROPE > 0) {
      if (lane < ROPE / 8) {
        *reinterpret_cast<uint4*>(q_s + kNope * kQColBytes + swizzled(hh, lane)) =
            *reinterpret_cast<const uint4*>(qrow + kNopeDims + lane * 8);
      }
    }
  }
  fence_proxy_async();  // Q is read by wgmma (the async proxy)
  __syncthreads();

  const int lt = threadIdx.x % 128;
  const int g = lane / 4, c = lane % 4;
  const int r0 = 16 * (warp % 4) + g, r1 = r0 + 8;  // this thread's heads (rows of every accumulator)
  constexpr uint64_t kQCol = kQColBytes >> 4, kKCol = kKeyColBytes >> 4;

  if (role == 0) {
    // ================= S warpgroup: S, softmax, LSE =================
    set_max_registers_decrease<kSRegisters>();
    const float inv_pre[2] = {inv_pre_s[r0], inv_pre_s[r1]};
    const uint64_t q_desc = smem_desc_k_major_sw128(q_s);
    // S in pieces, each its own wgmma batch into accumulator piece % 2: the four NoPE tiles, then the
    // RoPE dims (BF16, unscaled) where the layer has them. The NoPE sum is folded without the head's
    // prescale (a power of two), applied once with the RoPE piece or the softmax's scale.
    constexpr int kPieces = kTiles + (ROPE > 0 ? 1 : 0);
    const float row_scale[2] = {ROPE > 0 ? p.scale_log2 : p.scale_log2 * inv_pre[0],
                                ROPE > 0 ? p.scale_log2 : p.scale_log2 * inv_pre[1]};
    float acc[2][16];
    auto issue_piece = [&](int piece, int ks) {
      const uint64_t k_desc = smem_desc_k_major_sw128(keys_s + ks * S.key_stage_bytes);
      float(&a)[16] = acc[piece & 1];
      wgmma_fence();
      if (piece == kTiles) {  // RoPE
#pragma unroll
        for (int kk = 0; kk < ROPE / 16; ++kk) {
          WgmmaSs16<32, true>::mma(a, q_desc + kNope * kQCol + 2 * kk, k_desc + kNope * kKCol + 2 * kk, kk > 0);
        }
      } else {
#pragma unroll
        for (int kk = 0; kk < 8; ++kk) {
          const int cb = 2 * piece + kk / 4;
          WgmmaSs16<32, false>::mma(a, q_desc + cb * kQCol + 2 * (kk % 4), k_desc + cb * kKCol + 2 * (kk % 4), kk > 0);
        }
      }
      wgmma_commit();
    };
    float m_run[2] = {-inf_f32(), -inf_f32()}, l_run[2] = {0.f, 0.f};
    for (int i = 0; i < nblocks; ++i) {
      const int ks = i & 1;
      mbarrier_wait(&converted[ks], (i >> 1) & 1);
      issue_piece(0, ks);
      issue_piece(1, ks);
      // The block's key masks, read before the stage goes back.
      float2 bias[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        bias[q] = *reinterpret_cast<const float2*>(key_bias_s + ks * kWgmmaBlockKeys + 8 * q + 2 * c);
      }
      // ---- S: fold each finished piece while the next one runs ----
      float sp[16];
#pragma unroll
      for (int piece = 0; piece < kPieces; ++piece) {
        if (piece + 1 < kPieces) {
          wgmma_wait<1>();
        } else {
          wgmma_wait<0>();
        }
        float(&a)[16] = acc[piece & 1];
#pragma unroll
        for (int n = 0; n < 16; ++n) fence_operand(a[n]);
        if (piece == kTiles) {  // RoPE: S = S_nope x prescale + S_rope
#pragma unroll
          for (int n = 0; n < 16; ++n) sp[n] = fmaf(sp[n], inv_pre[(n >> 1) & 1], a[n]);
        } else {
          const float* scale = key_scale_s + (ks * kTiles + piece) * kWgmmaBlockKeys;
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            const float2 sc = *reinterpret_cast<const float2*>(scale + 8 * q + 2 * c);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int n = 4 * q + e;
              const float w = (e & 1) ? sc.y : sc.x;
              sp[n] = piece == 0 ? w * a[n] : fmaf(w, a[n], sp[n]);
            }
          }
        }
        if (piece + 2 < kPieces) issue_piece(piece + 2, ks);
      }
      mbarrier_arrive(&stage_free[ks]);  // S has read the stage's keys, scales and masks

      // ---- online softmax (log2 units); thread rows r0 (n % 4 < 2), r1 ----
      float mx[2] = {-inf_f32(), -inf_f32()};
#pragma unroll
      for (int q = 0; q < 4; ++q) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int n = 4 * q + e;
          sp[n] = fmaf(sp[n], row_scale[e >> 1], (e & 1) ? bias[q].y : bias[q].x);
          mx[e >> 1] = fmaxf(mx[e >> 1], sp[n]);
        }
      }
      float base[2], alpha[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(~0u, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(~0u, mx[r], 2));
        // The running max moves only when a block's exceeds it by more than kStaleMax: P stays below
        // 2^kStaleMax (FP32 sums; P' in F16), and alpha is 1 in most blocks.
        const bool move = mx[r] > m_run[r] + kStaleMax;
        alpha[r] = move ? exp2f(m_run[r] - mx[r]) : 1.f;
        if (move) m_run[r] = mx[r];
        base[r] = m_run[r] == -inf_f32() ? 0.f : m_run[r];
      }
      float rsum[2] = {0.f, 0.f};
#pragma unroll
      for (int n = 0; n < 16; ++n) {
        sp[n] = exp2f(sp[n] - base[(n >> 1) & 1]);
        rsum[(n >> 1) & 1] += sp[n];
      }
      l_run[0] = l_run[0] * alpha[0] + rsum[0];
      l_run[1] = l_run[1] * alpha[1] + rsum[1];

      // ---- P to the P.V warpgroups ([5][128 threads] float4: a warp's accesses are 512 contiguous bytes) ----
      if (i > 0) named_barrier(kProbsEmpty, kHandOffThreads);  // both have read the previous block's P
#pragma unroll
      for (int n = 0; n < 16; n += 4) probs_s[(n / 4) * 128 + lt] = make_float4(sp[n], sp[n + 1], sp[n + 2], sp[n + 3]);
      probs_s[4 * 128 + lt] = make_float4(alpha[0], alpha[1], 0.f, 0.f);
      named_barrier_arrive(kProbsFull, kHandOffThreads);
    }
    float l_fin[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l_fin[r] = l_run[r];
      l_fin[r] += __shfl_xor_sync(~0u, l_fin[r], 1);
      l_fin[r] += __shfl_xor_sync(~0u, l_fin[r], 2);
    }
    stats_s[lt] = make_float4(l_fin[0], l_fin[1], m_run[0], m_run[1]);
    named_barrier_arrive(kStatsReady, kHandOffThreads);
    if (c == 0) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int64_t th = t * H + head0 + (r ? r1 : r0);
        const bool any = m_run[r] != -inf_f32();
        const float lse = (m_run[r] + log2f(l_fin[r])) * kLn2;
        if (p.splits > 1) {
          p.part_lse[th * p.splits + split] = any ? lse : -inf_f32();
        } else {
          p.lse[th] = any ? lse : inf_f32();
        }
      }
    }
    return;
  }

  // ================= P.V warpgroups: gather and convert half of each block, P.V of 256 dims =================
  set_max_registers_increase<kPvRegisters>();
  const int cw = half;  // output dims 256 cw ..

  float o[2][64];  // per owned tile: dims 256 cw + 128 t2 + 8 (n / 4) + 2c + (n % 2), rows r0 / r1 by (n / 2) % 2
#pragma unroll
  for (int n = 0; n < 64; ++n) o[0][n] = o[1][n] = 0.f;
  float unit[2] = {0.f, 0.f};  // O's unit per owned tile: a power of two, moved rarely (issue_pv)
  uint32_t pa[2][2][4];        // [tile][k16 step]: P x key scale / tile max as wgmma A fragments

  // O = O x f + P' V over this warpgroup's two tiles of key stage ks; sp: this thread's P (FP32, keys
  // 8 (n / 4) + 2c + (n % 2) of rows r0 / r1 by (n / 2) % 2), alpha: the rows' max rescale. The tile
  // units move by powers of two, only when a block's scales leave [unit / 2^8, unit], and the running
  // max only in steps of > kStaleMax, so most blocks skip O's rescale (128 multiplies a thread).
  auto issue_pv = [&](int ks, const float(&sp)[16], const float(&alpha)[2]) {
    float nu[2];
    bool rescale = alpha[0] != 1.f || alpha[1] != 1.f;
#pragma unroll
    for (int t2 = 0; t2 < 2; ++t2) {
      const float* part = tile_part_s + (ks * kTiles + 2 * cw + t2) * kWgmmaHalves;
      const float u = fmaxf(part[0], part[1]);
      // The block's largest scale rounded up to a power of two replaces the unit when above it, or when
      // 2^8 below it (so that a single large scale cannot push later blocks' P' into F16 underflow); a
      // block without a nonzero scale adds nothing and keeps it.
      const float want = __int_as_float((__float_as_int(u) + 0x007fffff) & 0x7f800000);
      nu[t2] = u > 0.f && (want > unit[t2] || want * 256.f < unit[t2]) ? want : unit[t2];
      rescale |= nu[t2] != unit[t2];
      const float inv_u = nu[t2] > 0.f ? 1.f / nu[t2] : 0.f;
      const float* scale = key_scale_s + (ks * kTiles + 2 * cw + t2) * kWgmmaBlockKeys;
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float2 sc = *reinterpret_cast<const float2*>(scale + 8 * q + 2 * c);
        const float a = sc.x * inv_u, b = sc.y * inv_u;
        pa[t2][q / 2][2 * (q % 2)] = pack_f16x2(sp[4 * q] * a, sp[4 * q + 1] * b);
        pa[t2][q / 2][2 * (q % 2) + 1] = pack_f16x2(sp[4 * q + 2] * a, sp[4 * q + 3] * b);
      }
    }
    if (__any_sync(~0u, rescale)) {
#pragma unroll
      for (int t2 = 0; t2 < 2; ++t2) {
        const float ratio = nu[t2] > 0.f ? unit[t2] / nu[t2] : 1.f;
        const float f[2] = {alpha[0] * ratio, alpha[1] * ratio};
#pragma unroll
        for (int n = 0; n < 64; ++n) o[t2][n] *= f[(n >> 1) & 1];
      }
    }
    unit[0] = nu[0], unit[1] = nu[1];
    uint8_t* kst = keys_s + ks * S.key_stage_bytes;
    wgmma_fence();
#pragma unroll
    for (int t2 = 0; t2 < 2; ++t2) {
      const uint64_t v_desc = smem_desc_mn_major_sw128(kst + (4 * cw + 2 * t2) * kKeyColBytes, kKeyColBytes);
#pragma unroll
      for (int k16 = 0; k16 < 2; ++k16) {
        WgmmaRsF16MnB<128>::mma(o[t2], pa[t2][k16], v_desc + k16 * ((16 * kWgmmaColBytes) >> 4), true);
      }
    }
    wgmma_commit();
  };

  // Conversion role: key 16 half + lt % 16 of a block, column block lt / 16 (NoPE dims 64 (lt / 16) ..,
  // tile lt / 32: a warp converts one tile of its half's keys) and RoPE chunk lt / 16. A warp's stores
  // of one chunk cover 16 rows: the swizzle spreads them over all banks.
  const int ckey = HK * half + lt % HK, cpart = lt / HK, ctile = cpart / 2;
  uint4 x[4], rope;
  float csc = 0.f;
  bool cvalid = false;
  auto load_raw = [&](int j) {
    const int rs = j % RS;
    mbarrier_wait(&raw_full[rs * kWgmmaHalves + half], (j / RS) & 1);
    cvalid = (raw_mask_s[rs * kWgmmaHalves + half] >> (lt % HK)) & 1u;
    const uint8_t* rec = raw_s + (rs * kWgmmaBlockKeys + ckey) * R.bytes;
#pragma unroll
    for (int q = 0; q < 4; ++q) x[q] = *reinterpret_cast<const uint4*>(rec + 64 * cpart + 16 * q);
    if constexpr (ROPE > 0) rope = *reinterpret_cast<const uint4*>(rec + R.rope_offset + 16 * cpart);
    // An invalid key's stage bytes are stale (no copy was issued): zeros convert to zeros.
    if (!cvalid) {
#pragma unroll
      for (int q = 0; q < 4; ++q) x[q] = make_uint4(0, 0, 0, 0);
      rope = make_uint4(0, 0, 0, 0);
    }
    csc = cvalid ? *reinterpret_cast<const float*>(rec + R.scale_offset + 4 * ctile) : 0.f;
    mbarrier_arrive(&raw_empty[rs * kWgmmaHalves + half]);  // this thread's reads of the stage are done
  };
  // The gather warp refills raw stage j % RS with block j + RS once its whole warpgroup has read block j.
  auto refill = [&](int j) {
    if (gather_warp && j + RS < nblocks) {
      mbarrier_wait(&raw_empty[(j % RS) * kWgmmaHalves + half], (j / RS) & 1);
      issue(j + RS);
    }
  };
  auto store_converted = [&](int ks) {
    uint8_t* col = keys_s + ks * S.key_stage_bytes + cpart * kKeyColBytes;
#pragma unroll
    for (int q = 0; q < 4; ++q) {  // 16 E4M3 -> two 16-byte chunks of F16
      uint32_t hv[8];
      e4m3x4_to_f16x2(x[q].x, hv[0], hv[1]);
      e4m3x4_to_f16x2(x[q].y, hv[2], hv[3]);
      e4m3x4_to_f16x2(x[q].z, hv[4], hv[5]);
      e4m3x4_to_f16x2(x[q].w, hv[6], hv[7]);
      *reinterpret_cast<uint4*>(col + swizzled(ckey, 2 * q)) = make_uint4(hv[0], hv[1], hv[2], hv[3]);
      *reinterpret_cast<uint4*>(col + swizzled(ckey, 2 * q + 1)) = make_uint4(hv[4], hv[5], hv[6], hv[7]);
    }
    if constexpr (ROPE > 0) {
      *reinterpret_cast<uint4*>(keys_s + ks * S.key_stage_bytes + kNope * kKeyColBytes + swizzled(ckey, cpart)) = rope;
    }
    // Key scales, the key masks and the warp's largest scale of its tile (its half's 16 keys).
    if (cpart % 2 == 0) key_scale_s[(ks * kTiles + ctile) * kWgmmaBlockKeys + ckey] = csc;
    if (cpart == 0) key_bias_s[ks * kWgmmaBlockKeys + ckey] = cvalid ? 0.f : -inf_f32();
    float m = fabsf(csc);
    m = fmaxf(m, __shfl_xor_sync(~0u, m, 1));
    m = fmaxf(m, __shfl_xor_sync(~0u, m, 2));
    m = fmaxf(m, __shfl_xor_sync(~0u, m, 4));
    m = fmaxf(m, __shfl_xor_sync(~0u, m, 8));
    if (lane == 0) tile_part_s[(ks * kTiles + ctile) * kWgmmaHalves + half] = m;
    fence_proxy_async();  // the converted block is read by wgmma
    mbarrier_arrive(&converted[ks]);
  };
  for (int j = 0; j < 2 && j < nblocks; ++j) {
    load_raw(j);
    store_converted(j);
    refill(j);
  }
  for (int i = 0; i < nblocks; ++i) {
    const int ks = i & 1;
    mbarrier_wait(&converted[ks], (i >> 1) & 1);  // both halves of block i
    named_barrier(kProbsFull, kHandOffThreads);
    float sp[16];
#pragma unroll
    for (int n = 0; n < 16; n += 4) {
      const float4 v = probs_s[(n / 4) * 128 + lt];
      sp[n] = v.x, sp[n + 1] = v.y, sp[n + 2] = v.z, sp[n + 3] = v.w;
    }
    const float4 av = probs_s[4 * 128 + lt];
    const float alpha[2] = {av.x, av.y};
    if (i + 1 < nblocks) named_barrier_arrive(kProbsEmpty, kHandOffThreads);
    issue_pv(ks, sp, alpha);
    // Block i + 2's raw bytes come in under this P.V; they go into key stage ks once all three
    // warpgroups are done with block i there.
    if (i + 2 < nblocks) load_raw(i + 2);
    wgmma_wait<0>();
#pragma unroll
    for (int n = 0; n < 64; ++n) fence_operand(o[0][n]), fence_operand(o[1][n]);
    mbarrier_arrive(&stage_free[ks]);
    if (i + 2 < nblocks) {
      mbarrier_wait(&stage_free[ks], (i >> 1) & 1);
      store_converted(ks);
      refill(i + 2);
    }
  }
  named_barrier(kStatsReady, kHandOffThreads);
  const float4 st = stats_s[lt];
  const float l_fin[2] = {st.x, st.y}, m_fin[2] = {st.z, st.w};

  // ---- epilogue: this warpgroup's 256 dims ----
  const bool split_mode = p.splits > 1;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int head = r ? r1 : r0;
    const int64_t th = t * H + head0 + head;
    const float m = m_fin[r];
    const bool any = m != -inf_f32();
    float denom = l_fin[r];
    if (!split_mode && p.sink && any) denom += exp2f(p.sink[head0 + head] * kLog2e - m);
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int t2 = i / 16, n = 4 * (i % 16) + 2 * r;
      const int d = 256 * cw + 8 * i + 2 * c;
      const float f = any ? unit[t2] / denom : 0.f;
      const float a = o[t2][n] * f, b = o[t2][n + 1] * f;
      if (split_mode) {
        *reinterpret_cast<float2*>(p.part_out + (th * p.splits + split) * kNopeDims + d) = make_float2(a, b);
      } else {
        *reinterpret_cast<uint32_t*>(p.out + th * kNopeDims + d) = pack_bf16x2(a, b);
      }
    }
  }
}

}  // namespace chord::sparse_mla
