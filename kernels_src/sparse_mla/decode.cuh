// Sparse MLA decode: for one query token and HG of its heads, attention over the cache records its
// indices select, a contiguous range of 64-key blocks per CTA (split-K when splits > 1: the FP32 partials
// and their LSEs go to a workspace and sparse_mla/combine.cuh merges them).
//
// Per block (mma.sync m16n8k16, heads on the N side so 8 heads fill an MMA):
//  - each warp brings 64 / WARPS records into shared memory with one bulk copy per lane (invalid keys: zeros);
//  - S^T = K Q^T: warp (key group kg, head split hs) takes 16 keys x HS heads over all 512 + RoPE dims.
//    E4M3 values convert exactly to F16 and run F16 MMAs against a per-head power-of-two prescaled
//    F16 q; each 128-dim tile's FP32 scale multiplies that tile's partial sums (one FMA per key, not per
//    value). BF16 caches and the RoPE dims run BF16 MMAs;
//  - an online softmax with the block's max per head shared through shared memory, P to shared memory;
//  - O^T += V^T P^T: warp w owns 512 / WARPS dims (inside one scale tile) for all HG heads. The tile's
//    scale folds into P (scaled by s_key / s_max of the block, so P stays in [0, 1] for F16) and s_max
//    into the accumulator's rescale.
// K's dims are permuted inside each 16-dim piece so a lane reads its A fragments as one 16-byte load;
// q uses the same permutation, and the rows of each key group are ordered so those loads are free of
// bank conflicts.
#pragma once

#include "common/fp8.cuh"
#include "common/mma.cuh"
#include "common/tma.cuh"
#include "sparse_mla/params.cuh"
#include "sparse_mla/q_prescale.cuh"

namespace chord::sparse_mla {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <bool F16>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (F16) {
    mma_f16_m16n8k16(d, a, b0, b1);
  } else {
    mma_bf16_m16n8k16(d, a, b0, b1);
  }
}

template <int FORMAT, int ROPE, int H, int HG, int WARPS, int STAGES>
// Two 8-warp CTAs per SM up to 16 heads (<= 128 registers); beyond, one CTA holds the accumulators
// (16 warps: <= 128 registers each as well).
__global__ void __launch_bounds__(WARPS * 32, WARPS == 8 && HG <= 16 ? 2 : 1)
    sparse_mla_decode_kernel(const DecodeParams p) {
  constexpr DecodeSmem S = decode_smem(FORMAT, ROPE, HG, WARPS, STAGES);
  constexpr RecordLayout R = record_layout(FORMAT, ROPE);
  static_assert(R.bytes > 0, "format 0 (fp8_ds_mla) or 1 (bf16); RoPE dims 64, or 0 on NoPE layers");
  static_assert(R.bytes % 16 == 0, "records move as 16-byte pieces");
  constexpr bool kFp8 = R.fp8;
  // S-phase warps per key group split the heads (8 or more each), else the dims (two halves, partial
  // sums exchanged in pairs).
  constexpr int kHeadSplits = WARPS / 4 < HG / 8 ? WARPS / 4 : HG / 8;
  constexpr int kDimSplits = WARPS / 4 / kHeadSplits;
  constexpr int HS = HG / kHeadSplits;  // heads of one S-phase warp
  constexpr int NTS = HS / 8;
  constexpr int NT = HG / 8;
  constexpr int DPW = kNopeDims / WARPS;  // P.V dims of one warp
  constexpr int GROUPS = DPW / 32;
  static_assert(WARPS == 4 || WARPS == 8 || WARPS == 16, "4 key groups of 16 keys, times head or dim splits");
  static_assert(kDimSplits == 1 || (kDimSplits == 2 && kHeadSplits == 1 && NTS == 1),
                "dim splits only in pairs, for 8 heads");
  static_assert(H % HG == 0 && HS % 8 == 0, "heads split into whole MMA N tiles");
  static_assert(kTileDims % DPW == 0, "a P.V warp stays inside one scale tile");

  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* raw = smem + S.raw;
  uint8_t* q_s = smem + S.q;
  uint8_t* rope_s = smem + S.rope;
  float* p_s = reinterpret_cast<float*>(smem + S.p);
  float* red_s = reinterpret_cast<float*>(smem + S.red);
  float* l_s = reinterpret_cast<float*>(smem + S.sum);
  float* inv_pre_s = reinterpret_cast<float*>(smem + S.inv_pre);
  uint32_t* mask_s = reinterpret_cast<uint32_t*>(smem + S.mask);
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + S.bars);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int head0 = (blockIdx.x % (H / HG)) * HG;
  const int split = blockIdx.x / (H / HG);
  const int64_t t = blockIdx.y;

  // The combine kernel may be scheduled as soon as every CTA runs; it waits for this grid to finish.
  asm volatile("griddepcontrol.launch_dependents;");

  int len = p.topk;
  if (p.topk_length) len = max(0, min(p.topk_length[t], p.topk));
  const int block_begin = split * p.blocks_per_split;
  const int nblocks = max(0, min((len + kBlockKeys - 1) / kBlockKeys, block_begin + p.blocks_per_split) - block_begin);

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) mbarrier_init(&bars[s], kBlockKeys);
    fence_barrier_init();
  }
  __syncthreads();

  // Every warp issues 64 / WARPS records, one per lane, so the warps reach the next barrier together
  // (ncu: loads on two warps made barrier stalls ~20% of the issue slots). Zeros (not stale bytes, which
  // may be NaN) stand in for invalid keys. The slot of block i is fetched one issue ahead, so the index
  // load's latency is off the path between a block's last barrier and the next one.
  constexpr int kRecordsPerWarp = kBlockKeys / WARPS;
  const bool loader = lane < kRecordsPerWarp;
  const int record = warp * kRecordsPerWarp + lane;
  auto fetch_slot = [&](int i) -> int32_t {
    const int pos = (block_begin + i) * kBlockKeys + record;
    return loader && i < nblocks && pos < len ? __ldg(p.indices + t * p.topk + pos) : -1;
  };
  int32_t next_slot = fetch_slot(0);
  auto issue = [&](int i) {
    const int stage = i % STAGES;
    const int32_t slot = next_slot;
    next_slot = fetch_slot(i + 1);
    const bool valid = slot >= 0 && slot < p.num_slots;
    const uint32_t ballot = __ballot_sync(~0u, valid);
    if (lane == 0) mask_s[stage * WARPS + warp] = ballot;
    if (!loader) return;
    uint8_t* row = raw + (stage * kBlockKeys + record) * S.row_bytes;
    if (valid) {
      fence_proxy_async();  // after this thread's earlier zero stores to the row
      mbarrier_arrive_expect_bytes(&bars[stage], R.bytes);
      bulk_copy(row, p.cache + static_cast<int64_t>(slot) * R.bytes, R.bytes, &bars[stage]);
    } else {
#pragma unroll 4
      for (int o = 0; o < R.bytes; o += 16) *reinterpret_cast<uint4*>(row + o) = make_uint4(0, 0, 0, 0);
      mbarrier_arrive(&bars[stage]);
    }
  };
  for (int i = 0; i < STAGES && i < nblocks; ++i) issue(i);

  // q into shared memory: the NoPE part as F16 times 2^e per head (max |q| lands in [2^14, 2^15), so
  // every BF16 value is exact and nothing overflows) for E4M3 caches, as BF16 for BF16 caches.
  for (int hh = warp; hh < HG; hh += WARPS) {
    const bf16* qrow = p.q + (t * H + head0 + hh) * R.dims;
    const uint4 v0 = *reinterpret_cast<const uint4*>(qrow + lane * 16);
    const uint4 v1 = *reinterpret_cast<const uint4*>(qrow + lane * 16 + 8);
    uint4* dst = reinterpret_cast<uint4*>(q_s + hh * S.q_row_bytes + lane * 32);
    if constexpr (kFp8) {
      uint4 lo, hi;
      const float inv_pre = q_to_f16_prescaled(v0, v1, lo, hi);
      dst[0] = lo;
      dst[1] = hi;
      if (lane == 0) inv_pre_s[hh] = inv_pre;
    } else {
      dst[0] = v0;
      dst[1] = v1;
      if (lane == 0) inv_pre_s[hh] = 1.f;
    }
    if constexpr (ROPE > 0) {
      if (lane < ROPE / 8) {
        *reinterpret_cast<uint4*>(rope_s + hh * S.rope_row_bytes + lane * 16) =
            *reinterpret_cast<const uint4*>(qrow + kNopeDims + lane * 8);
      }
    }
  }
  __syncthreads();

  // S-phase role: 16 keys of the block (rows ordered so 16-byte loads avoid bank conflicts) x HS heads.
  const int kg = warp % 4, hs = (warp / 4) % kHeadSplits, dh = warp / 4 / kHeadSplits;
  const int key0 = 16 * kg + (g >> 1) + 4 * (g & 1), key1 = key0 + 8;
  float inv_pre[NTS][2];
#pragma unroll
  for (int n = 0; n < NTS; ++n) {
#pragma unroll
    for (int i = 0; i < 2; ++i) inv_pre[n][i] = inv_pre_s[hs * HS + 8 * n + 2 * c + i];
  }
  // P.V role: dims [dbase, dbase + DPW) for all HG heads (C fragment columns = heads 8n + 2c + i).
  const int dbase = warp * DPW;
  const int tile = dbase / kTileDims;

  float m_run[NT][2], m_s[NTS][2], l_part[NTS][2], acc[2 * GROUPS][NT][4];
#pragma unroll
  for (int n = 0; n < NT; ++n) m_run[n][0] = m_run[n][1] = -inf_f32();
#pragma unroll
  for (int n = 0; n < NTS; ++n) m_s[n][0] = m_s[n][1] = -inf_f32(), l_part[n][0] = l_part[n][1] = 0.f;
#pragma unroll
  for (int m = 0; m < 2 * GROUPS; ++m) {
#pragma unroll
    for (int n = 0; n < NT; ++n) acc[m][n][0] = acc[m][n][1] = acc[m][n][2] = acc[m][n][3] = 0.f;
  }
  float smax_prev = 1.f;

  for (int i = 0; i < nblocks; ++i) {
    const int stage = i % STAGES;
    mbarrier_wait(&bars[stage], (i / STAGES) & 1);
    const uint8_t* rows = raw + stage * kBlockKeys * S.row_bytes;
    auto key_valid = [&](int key) {
      return (mask_s[stage * WARPS + key / kRecordsPerWarp] >> (key % kRecordsPerWarp)) & 1u;
    };

    // ---- S^T = K Q^T ----
    float s[NTS][4];
#pragma unroll
    for (int n = 0; n < NTS; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
    const uint8_t* k0 = rows + key0 * S.row_bytes;
    const uint8_t* k1 = rows + key1 * S.row_bytes;
    const uint8_t* qh = q_s + (hs * HS + g) * S.q_row_bytes;
    if constexpr (kFp8) {
#pragma unroll
      for (int tt = 0; tt < kTiles / kDimSplits; ++tt) {
        const int tl = dh * (kTiles / kDimSplits) + tt;
        // Four independent MMA chains per N tile (64-dim half x even/odd k-step): ncu showed fixed-latency
        // dependency stalls as the largest share.
        float part[4][NTS][4];
#pragma unroll
        for (int n = 0; n < NTS; ++n) {
#pragma unroll
          for (int r = 0; r < 4; ++r) part[0][n][r] = part[1][n][r] = part[2][n][r] = part[3][n][r] = 0.f;
        }
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int d0 = tl * kTileDims + half * 64 + 16 * c;
          const uint4 x0 = *reinterpret_cast<const uint4*>(k0 + d0);
          const uint4 x1 = *reinterpret_cast<const uint4*>(k1 + d0);
          const uint32_t w0[4] = {x0.x, x0.y, x0.z, x0.w}, w1[4] = {x1.x, x1.y, x1.z, x1.w};
          uint32_t a[4][4];
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            e4m3x4_to_f16x2(w0[j], a[j][0], a[j][2]);
            e4m3x4_to_f16x2(w1[j], a[j][1], a[j][3]);
          }
#pragma unroll
          for (int n = 0; n < NTS; ++n) {
            const uint4* qp = reinterpret_cast<const uint4*>(qh + 8 * n * S.q_row_bytes + 2 * d0);
            const uint4 qa = qp[0], qb = qp[1];
            const uint32_t qw[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
#pragma unroll
            for (int j = 0; j < 4; ++j) mma_f16_m16n8k16(part[2 * half + (j & 1)][n], a[j], qw[2 * j], qw[2 * j + 1]);
          }
        }
        const float sc0 = *reinterpret_cast<const float*>(k0 + R.scale_offset + 4 * tl);
        const float sc1 = *reinterpret_cast<const float*>(k1 + R.scale_offset + 4 * tl);
#pragma unroll
        for (int n = 0; n < NTS; ++n) {
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const float t0 = (part[0][n][j] + part[1][n][j]) + (part[2][n][j] + part[3][n][j]);
            const float t1 = (part[0][n][2 + j] + part[1][n][2 + j]) + (part[2][n][2 + j] + part[3][n][2 + j]);
            s[n][j] = fmaf(t0, sc0 * inv_pre[n][j], s[n][j]);
            s[n][2 + j] = fmaf(t1, sc1 * inv_pre[n][j], s[n][2 + j]);
          }
        }
      }
    } else {
#pragma unroll
      for (int cc = 0; cc < kNopeDims / 64 / kDimSplits; ++cc) {
        const int d0 = (dh * (kNopeDims / 64 / kDimSplits) + cc) * 64 + 16 * c;
        const uint4* kp0 = reinterpret_cast<const uint4*>(k0 + 2 * d0);
        const uint4* kp1 = reinterpret_cast<const uint4*>(k1 + 2 * d0);
        const uint4 x0 = kp0[0], y0 = kp0[1], x1 = kp1[0], y1 = kp1[1];
        const uint32_t w0[8] = {x0.x, x0.y, x0.z, x0.w, y0.x, y0.y, y0.z, y0.w};
        const uint32_t w1[8] = {x1.x, x1.y, x1.z, x1.w, y1.x, y1.y, y1.z, y1.w};
#pragma unroll
        for (int n = 0; n < NTS; ++n) {
          const uint4* qp = reinterpret_cast<const uint4*>(qh + 8 * n * S.q_row_bytes + 2 * d0);
          const uint4 qa = qp[0], qb = qp[1];
          const uint32_t qw[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const uint32_t a[4] = {w0[2 * j], w1[2 * j], w0[2 * j + 1], w1[2 * j + 1]};
            mma_bf16_m16n8k16(s[n], a, qw[2 * j], qw[2 * j + 1]);
          }
        }
      }
    }
    if (ROPE > 0 && dh == kDimSplits - 1) {
      const uint4* kp0 = reinterpret_cast<const uint4*>(k0 + R.rope_offset + 32 * c);
      const uint4* kp1 = reinterpret_cast<const uint4*>(k1 + R.rope_offset + 32 * c);
      const uint4 x0 = kp0[0], y0 = kp0[1], x1 = kp1[0], y1 = kp1[1];
      const uint32_t w0[8] = {x0.x, x0.y, x0.z, x0.w, y0.x, y0.y, y0.z, y0.w};
      const uint32_t w1[8] = {x1.x, x1.y, x1.z, x1.w, y1.x, y1.y, y1.z, y1.w};
#pragma unroll
      for (int n = 0; n < NTS; ++n) {
        const uint4* qp = reinterpret_cast<const uint4*>(rope_s + (hs * HS + 8 * n + g) * S.rope_row_bytes + 32 * c);
        const uint4 qa = qp[0], qb = qp[1];
        const uint32_t qw[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
#pragma unroll
        for (int j = 0; j < ROPE / 16; ++j) {
          const uint32_t a[4] = {w0[2 * j], w1[2 * j], w0[2 * j + 1], w1[2 * j + 1]};
          mma_bf16_m16n8k16(s[n], a, qw[2 * j], qw[2 * j + 1]);
        }
      }
    }

    // ---- online softmax (log2 units) ----
    // Each S-phase warp keeps its own running max per head (m_s); P is relative to it, and the P.V warps
    // rebase each key group's P on the CTA max when they read it, so no barrier separates S from P.
    if constexpr (kDimSplits == 2) {
      float4* partial = reinterpret_cast<float4*>(smem + S.partial) + kg * 32 + lane;
      if (dh == 1) *partial = make_float4(s[0][0], s[0][1], s[0][2], s[0][3]);
      asm volatile("bar.sync %0, 64;" ::"r"(1 + kg) : "memory");
      if (dh == 0) {
        const float4 o = *partial;
        s[0][0] += o.x, s[0][1] += o.y, s[0][2] += o.z, s[0][3] += o.w;
      }
    }
    const bool v0 = key_valid(key0), v1 = key_valid(key1);
#pragma unroll
    for (int n = 0; n < NTS && dh == 0; ++n) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        s[n][j] = v0 ? s[n][j] * p.scale_log2 : -inf_f32();
        s[n][2 + j] = v1 ? s[n][2 + j] * p.scale_log2 : -inf_f32();
        float mx = fmaxf(s[n][j], s[n][2 + j]);
        mx = fmaxf(mx, __shfl_xor_sync(~0u, mx, 4));
        mx = fmaxf(mx, __shfl_xor_sync(~0u, mx, 8));
        mx = fmaxf(mx, __shfl_xor_sync(~0u, mx, 16));
        const float mn = fmaxf(m_s[n][j], mx);
        const float a = mn == -inf_f32() ? 1.f : exp2f(m_s[n][j] - mn);
        m_s[n][j] = mn;
        const float ms = mn == -inf_f32() ? 0.f : mn;
        const float p0 = exp2f(s[n][j] - ms), p1 = exp2f(s[n][2 + j] - ms);
        l_part[n][j] = l_part[n][j] * a + p0 + p1;
        const int head = hs * HS + 8 * n + 2 * c + j;
        float* prow = p_s + head * S.p_row;
        prow[key0] = p0;
        prow[key1] = p1;
        if (g == 0) red_s[kg * HG + head] = mn;
      }
    }
    __syncthreads();

    // The CTA's running max per head: the max of the key groups' (each is monotone over blocks).
    auto cta_max = [&](int head) {
      return fmaxf(fmaxf(red_s[head], red_s[HG + head]), fmaxf(red_s[2 * HG + head], red_s[3 * HG + head]));
    };
    float alpha[NT][2];
#pragma unroll
    for (int n = 0; n < NT; ++n) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const float mn = cta_max(8 * n + 2 * c + j);
        alpha[n][j] = mn == -inf_f32() ? 1.f : exp2f(m_run[n][j] - mn);
        m_run[n][j] = mn;
      }
    }
    // rebase[n][kg]: 2^(m_kg - m) for this lane's B-fragment head 8n + g.
    float rebase[NT][4];
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      const float mn = cta_max(8 * n + g);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float mk = red_s[k * HG + 8 * n + g];
        rebase[n][k] = mk == -inf_f32() ? 0.f : exp2f(mk - mn);
      }
    }

    // ---- O^T += V^T P^T ----
    float kscale_mul = 1.f;
    if constexpr (kFp8) {
      const float* sc = reinterpret_cast<const float*>(rows + R.scale_offset + 4 * tile);
      float smax = fmaxf(sc[lane * (S.row_bytes / 4)], sc[(lane + 32) * (S.row_bytes / 4)]);
#pragma unroll
      for (int o = 16; o > 0; o /= 2) smax = fmaxf(smax, __shfl_xor_sync(~0u, smax, o));
      smax = smax > 0.f ? smax : 1.f;
      const float ratio = smax_prev / smax;
      smax_prev = smax;
      kscale_mul = 1.f / smax;
#pragma unroll
      for (int n = 0; n < NT; ++n) alpha[n][0] *= ratio, alpha[n][1] *= ratio;
    }
#pragma unroll
    for (int m = 0; m < 2 * GROUPS; ++m) {
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        acc[m][n][0] *= alpha[n][0];
        acc[m][n][1] *= alpha[n][1];
        acc[m][n][2] *= alpha[n][0];
        acc[m][n][3] *= alpha[n][1];
      }
    }
#pragma unroll
    for (int ks = 0; ks < kBlockKeys / 16; ++ks) {
      const int ka = 16 * ks + 2 * c;  // this lane's keys: ka, ka + 1, ka + 8, ka + 9
      const uint8_t* ra = rows + ka * S.row_bytes;
      constexpr int RB = S.row_bytes;
      float f[4] = {1.f, 1.f, 1.f, 1.f};
      if constexpr (kFp8) {
        const int so = R.scale_offset + 4 * tile;
        f[0] = *reinterpret_cast<const float*>(ra + so) * kscale_mul;
        f[1] = *reinterpret_cast<const float*>(ra + RB + so) * kscale_mul;
        f[2] = *reinterpret_cast<const float*>(ra + 8 * RB + so) * kscale_mul;
        f[3] = *reinterpret_cast<const float*>(ra + 9 * RB + so) * kscale_mul;
      }
      // BF16 caches: P as a BF16 pair hi + lo (P's 8 bits alone cost up to 2e-3 of |v| on short rows).
      uint32_t b[NT][2], b_lo[kFp8 ? 1 : NT][2];
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        const float* pr = p_s + (8 * n + g) * S.p_row + ka;
        float2 p01 = *reinterpret_cast<const float2*>(pr);
        float2 p89 = *reinterpret_cast<const float2*>(pr + 8);
        // Keys ka..ka+9 are all in key group ks.
        p01.x *= rebase[n][ks], p01.y *= rebase[n][ks], p89.x *= rebase[n][ks], p89.y *= rebase[n][ks];
        if constexpr (kFp8) {
          b[n][0] = pack_f16x2(p01.x * f[0], p01.y * f[1]);
          b[n][1] = pack_f16x2(p89.x * f[2], p89.y * f[3]);
        } else {
          b[n][0] = pack_bf16x2(p01.x, p01.y);
          b[n][1] = pack_bf16x2(p89.x, p89.y);
          b_lo[n][0] =
              pack_bf16x2(p01.x - __uint_as_float(b[n][0] << 16), p01.y - __uint_as_float(b[n][0] & 0xffff0000u));
          b_lo[n][1] =
              pack_bf16x2(p89.x - __uint_as_float(b[n][1] << 16), p89.y - __uint_as_float(b[n][1] & 0xffff0000u));
        }
      }
#pragma unroll
      for (int gr = 0; gr < GROUPS; ++gr) {
        const int d = dbase + 32 * gr + 4 * g;
        // Rows g / g+8 of the first MMA are dims d, d+1; of the second d+2, d+3.
        uint32_t a1[4], a2[4];
        if constexpr (kFp8) {
          const uint32_t x = *reinterpret_cast<const uint32_t*>(ra + d);
          const uint32_t y = *reinterpret_cast<const uint32_t*>(ra + RB + d);
          const uint32_t z = *reinterpret_cast<const uint32_t*>(ra + 8 * RB + d);
          const uint32_t w = *reinterpret_cast<const uint32_t*>(ra + 9 * RB + d);
          e4m3x4_to_f16x2(byte_perm(x, y, 0x5140), a1[0], a1[1]);
          e4m3x4_to_f16x2(byte_perm(z, w, 0x5140), a1[2], a1[3]);
          e4m3x4_to_f16x2(byte_perm(x, y, 0x7362), a2[0], a2[1]);
          e4m3x4_to_f16x2(byte_perm(z, w, 0x7362), a2[2], a2[3]);
        } else {
          const uint2 x = *reinterpret_cast<const uint2*>(ra + 2 * d);
          const uint2 y = *reinterpret_cast<const uint2*>(ra + RB + 2 * d);
          const uint2 z = *reinterpret_cast<const uint2*>(ra + 8 * RB + 2 * d);
          const uint2 w = *reinterpret_cast<const uint2*>(ra + 9 * RB + 2 * d);
          a1[0] = byte_perm(x.x, y.x, 0x5410);
          a1[1] = byte_perm(x.x, y.x, 0x7632);
          a1[2] = byte_perm(z.x, w.x, 0x5410);
          a1[3] = byte_perm(z.x, w.x, 0x7632);
          a2[0] = byte_perm(x.y, y.y, 0x5410);
          a2[1] = byte_perm(x.y, y.y, 0x7632);
          a2[2] = byte_perm(z.y, w.y, 0x5410);
          a2[3] = byte_perm(z.y, w.y, 0x7632);
        }
#pragma unroll
        for (int n = 0; n < NT; ++n) {
          mma16816<kFp8>(acc[2 * gr][n], a1, b[n][0], b[n][1]);
          mma16816<kFp8>(acc[2 * gr + 1][n], a2, b[n][0], b[n][1]);
          if constexpr (!kFp8) {
            mma16816<false>(acc[2 * gr][n], a1, b_lo[n][0], b_lo[n][1]);
            mma16816<false>(acc[2 * gr + 1][n], a2, b_lo[n][0], b_lo[n][1]);
          }
        }
      }
    }
    __syncthreads();  // the stage and P are free
    if (i + STAGES < nblocks) issue(i + STAGES);
  }

  // ---- the softmax denominators: lanes of a key group, then the 4 key groups rebased on the CTA max ----
  __syncthreads();  // red_s holds the key groups' maxima until every warp has read them
#pragma unroll
  for (int n = 0; n < NTS && dh == 0; ++n) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      float l = l_part[n][j];
      l += __shfl_xor_sync(~0u, l, 4);
      l += __shfl_xor_sync(~0u, l, 8);
      l += __shfl_xor_sync(~0u, l, 16);
      if (g == 0) {
        red_s[kg * HG + hs * HS + 8 * n + 2 * c + j] = m_s[n][j];
        l_s[kg * HG + hs * HS + 8 * n + 2 * c + j] = l;
      }
    }
  }
  __syncthreads();

  const bool split_mode = p.splits > 1;
#pragma unroll
  for (int n = 0; n < NT; ++n) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int head = 8 * n + 2 * c + j;
      const int64_t th = t * H + head0 + head;
      const float m = m_run[n][j];
      float l = 0.f;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float mk = red_s[k * HG + head];
        if (mk != -inf_f32()) l += l_s[k * HG + head] * exp2f(mk - m);
      }
      const bool any = m != -inf_f32();
      const float lse2 = m + log2f(l);
      float denom = l;
      if (!split_mode && p.sink && any) denom += exp2f(p.sink[head0 + head] * kLog2e - m);
      const float f = any ? smax_prev / denom : 0.f;
      if (split_mode) {
        float* dst = p.part_out + (th * p.splits + split) * kNopeDims;
#pragma unroll
        for (int gr = 0; gr < GROUPS; ++gr) {
          const int d = dbase + 32 * gr + 4 * g;
          *reinterpret_cast<float4*>(dst + d) = make_float4(acc[2 * gr][n][j] * f, acc[2 * gr][n][2 + j] * f,
                                                            acc[2 * gr + 1][n][j] * f, acc[2 * gr + 1][n][2 + j] * f);
        }
        if (warp == 0 && g == 0) p.part_lse[th * p.splits + split] = any ? lse2 * kLn2 : -inf_f32();
      } else {
        bf16* dst = p.out + th * kNopeDims;
#pragma unroll
        for (int gr = 0; gr < GROUPS; ++gr) {
          const int d = dbase + 32 * gr + 4 * g;
          *reinterpret_cast<uint2*>(dst + d) =
              make_uint2(pack_bf16x2(acc[2 * gr][n][j] * f, acc[2 * gr][n][2 + j] * f),
                         pack_bf16x2(acc[2 * gr + 1][n][j] * f, acc[2 * gr + 1][n][2 + j] * f));
        }
        if (warp == 0 && g == 0) p.lse[th] = any ? lse2 * kLn2 : inf_f32();
      }
    }
  }
}

}  // namespace chord::sparse_mla
