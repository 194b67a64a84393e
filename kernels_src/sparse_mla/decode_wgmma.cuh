// Sparse MLA decode on wgmma for fp8_ds_mla caches, 64 heads a CTA (heads on wgmma's M): one query
// token, one head group of 64, a contiguous range of the top-k (split-K as in decode.cuh, merged by
// combine.cuh). A producer warp gathers 32-key blocks (one bulk copy per record) into a three-deep raw
// ring; two consumer warpgroups each own 256 of the 512 output dims (O: 64 x 256 FP32 in registers),
// which are also the dims of S = Q K^T each computes (tiles 2c, 2c+1 and half the RoPE dims), so each
// converts only its own half of every block, into its own part of a two-deep key ring, while the
// tensor cores run its S of the block before (no hand-off between warpgroups but the S halves):
//  - conversion: E4M3 as F16 (exact), RoPE dims copied as BF16, invalid keys as zeros, the keys' tile
//    scales and per-warp tile maxima beside them;
//  - S: one accumulator per tile, so each key's tile scale multiplies its column in FP32; the two halves
//    meet in shared memory, both consumers run the same online softmax;
//  - O += P' V per tile (V: the same converted key bytes read MN-major), P' = P x key scale / the block's
//    largest scale of the tile (F16 in [-1, 1]) in registers as wgmma's A; that largest scale goes into
//    O's rescale, as the max does.
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
constexpr uint32_t kProducerRegisters = 40;
constexpr uint32_t kConsumerRegisters = 232;
constexpr int kQColBytes = kWgmmaHeads * kWgmmaColBytes;        // one column block of Q
constexpr int kKeyColBytes = kWgmmaBlockKeys * kWgmmaColBytes;  // one column block of a key block

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

  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (smem_address(smem_raw) & 1023)) & 1023);
  uint8_t* q_s = smem + S.q;
  uint8_t* keys_s = smem + S.keys;
  uint8_t* raw_s = smem + S.raw;
  float4* xchg_s = reinterpret_cast<float4*>(smem + S.xchg);
  float* key_scale_s = reinterpret_cast<float*>(smem + S.key_scale);
  float* tile_part_s = reinterpret_cast<float*>(smem + S.tile_part);
  uint32_t* raw_mask_s = reinterpret_cast<uint32_t*>(smem + S.raw_mask);
  float* inv_pre_s = reinterpret_cast<float*>(smem + S.inv_pre);
  uint64_t* raw_full = reinterpret_cast<uint64_t*>(smem + S.bars);
  uint64_t* raw_empty = raw_full + RS;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
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
    for (int s = 0; s < RS; ++s) {
      mbarrier_init(&raw_full[s], kWgmmaBlockKeys);  // the gathering lanes
      mbarrier_init(&raw_empty[s], 256);             // every consumer thread has converted its part
    }
    fence_barrier_init();
  }
  __syncthreads();

  // Gather (warp 0): lane k brings key k of a block, its slot fetched one block ahead.
  auto fetch_slot = [&](int i) -> int32_t {
    const int pos = key_begin + i * kWgmmaBlockKeys + lane;
    return i < nblocks && pos < key_end ? __ldg(p.indices + t * p.topk + pos) : -1;
  };
  int32_t next_slot = warp == 0 ? fetch_slot(0) : -1;
  auto issue = [&](int i) {
    const int s = i % RS;
    const int32_t slot = next_slot;
    next_slot = fetch_slot(i + 1);
    const bool valid = slot >= 0 && slot < p.num_slots;
    const uint32_t ballot = __ballot_sync(~0u, valid);
    if (lane == 0) raw_mask_s[s] = ballot;
    if (valid) {
      fence_proxy_async();  // after the consumers' generic reads of this stage
      mbarrier_arrive_expect_bytes(&raw_full[s], R.bytes);
      bulk_copy(raw_s + (s * kWgmmaBlockKeys + lane) * R.bytes, p.cache + static_cast<int64_t>(slot) * R.bytes, R.bytes,
                &raw_full[s]);
    } else {
      mbarrier_arrive(&raw_full[s]);  // its converted key is zeros, its raw bytes never read
    }
  };
  if (warp == 0) {
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

  if (warp < 4) {
    // ================= producer: warp 0 refills each raw stage once both consumers converted it =========
    set_max_registers_decrease<kProducerRegisters>();
    if (warp != 0) return;
    for (int i = RS; i < nblocks; ++i) {
      mbarrier_wait(&raw_empty[i % RS], ((i - RS) / RS) & 1);
      issue(i);
    }
    return;
  }

  // ================= consumers =================
  set_max_registers_increase<kConsumerRegisters>();
  const int cw = warp / 4 - 1;                  // consumer 0 / 1: output dims 256 cw ..
  const int lt = threadIdx.x - 128 * (cw + 1);  // 0..127
  const int g = lane / 4, c = lane % 4;
  const int r0 = 16 * (warp % 4) + g, r1 = r0 + 8;  // this thread's heads (rows of every accumulator)
  const float inv_pre[2] = {inv_pre_s[r0], inv_pre_s[r1]};

  // Conversion role: key lt / 4, 64 dims: column block 4 cw + lt % 4 (tile 2 cw + (lt % 4) / 2); RoPE
  // chunk 4 cw + lt % 4 (this consumer's 32 RoPE dims).
  const int ckey = lt / 4, cpart = lt % 4, ctile = 2 * cw + cpart / 2;
  uint32_t mask0 = 0u, mask1 = 0u;  // valid keys of the blocks in key stages 0 and 1
  auto convert = [&](int j) {       // block j -> key stage j & 1 (this consumer's part)
    const int rs = j % RS, ks = j & 1;
    mbarrier_wait(&raw_full[rs], (j / RS) & 1);
    const uint32_t mask = raw_mask_s[rs];
    if (ks) {
      mask1 = mask;
    } else {
      mask0 = mask;
    }
    const bool valid = (mask >> ckey) & 1u;
    const uint8_t* rec = raw_s + (rs * kWgmmaBlockKeys + ckey) * R.bytes;
    uint8_t* kst = keys_s + ks * S.key_stage_bytes;
    uint8_t* col = kst + (4 * cw + cpart) * kKeyColBytes;
    uint4 x[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) x[q] = *reinterpret_cast<const uint4*>(rec + 64 * (4 * cw + cpart) + 16 * q);
    uint4 rope = make_uint4(0, 0, 0, 0);
    if constexpr (ROPE > 0) rope = *reinterpret_cast<const uint4*>(rec + R.rope_offset + 16 * (4 * cw + cpart));
    const float sc = valid ? *reinterpret_cast<const float*>(rec + R.scale_offset + 4 * ctile) : 0.f;
    mbarrier_arrive(&raw_empty[rs]);  // this thread's reads of the stage are done
    const uint4 z = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      uint32_t hv[8];
      e4m3x4_to_f16x2(x[q].x, hv[0], hv[1]);
      e4m3x4_to_f16x2(x[q].y, hv[2], hv[3]);
      e4m3x4_to_f16x2(x[q].z, hv[4], hv[5]);
      e4m3x4_to_f16x2(x[q].w, hv[6], hv[7]);
      *reinterpret_cast<uint4*>(col + swizzled(ckey, 2 * q)) = valid ? make_uint4(hv[0], hv[1], hv[2], hv[3]) : z;
      *reinterpret_cast<uint4*>(col + swizzled(ckey, 2 * q + 1)) = valid ? make_uint4(hv[4], hv[5], hv[6], hv[7]) : z;
    }
    if constexpr (ROPE > 0) {
      *reinterpret_cast<uint4*>(kst + kNope * kKeyColBytes + swizzled(ckey, 4 * cw + cpart)) = valid ? rope : z;
    }
    // Key scales (one thread of each key and tile) and the warp's largest per tile (8 keys).
    if ((cpart & 1) == 0) key_scale_s[(ks * kTiles + ctile) * kWgmmaBlockKeys + ckey] = sc;
    float m = fabsf(sc);
    m = fmaxf(m, __shfl_xor_sync(~0u, m, 4));
    m = fmaxf(m, __shfl_xor_sync(~0u, m, 8));
    m = fmaxf(m, __shfl_xor_sync(~0u, m, 16));
    if (lane == 0 || lane == 2) tile_part_s[(ks * kTiles + ctile) * 4 + warp % 4] = m;
    fence_proxy_async();  // the converted block is read by wgmma
  };

  float o[2][64];  // per owned tile: dims 256 cw + 128 t2 + 8 (n / 4) + 2c + (n % 2), rows r0 / r1 by (n / 2) % 2
#pragma unroll
  for (int n = 0; n < 64; ++n) o[0][n] = o[1][n] = 0.f;
  float m_run[2] = {-inf_f32(), -inf_f32()}, l_run[2] = {0.f, 0.f};
  float unit[2] = {1.f, 1.f};  // O's current unit per owned tile (the last block's tile max)
  uint32_t pa[2][2][4];        // [tile][k16 step]: P x key scale / tile max as wgmma A fragments

  const uint64_t q_desc = smem_desc_k_major_sw128(q_s);
  if (nblocks > 0) convert(0);
  for (int i = 0; i < nblocks; ++i) {
    const int ks = i & 1;
    named_barrier(3 + cw, 128);  // this consumer's part of block i is converted
    uint8_t* kst = keys_s + ks * S.key_stage_bytes;
    const uint64_t k_desc = smem_desc_k_major_sw128(kst);
    constexpr uint64_t kQCol = kQColBytes >> 4, kKCol = kKeyColBytes >> 4;

    // ---- S (this consumer's dims): one accumulator per tile, one for its RoPE half ----
    float acc[2][16], accr[16];
#pragma unroll
    for (int n = 0; n < 16; ++n) acc[0][n] = acc[1][n] = accr[n] = 0.f;
    wgmma_fence();
#pragma unroll
    for (int t2 = 0; t2 < 2; ++t2) {
#pragma unroll
      for (int kk = 0; kk < 8; ++kk) {
        const int cb = 2 * (2 * cw + t2) + kk / 4;
        WgmmaSs16<32, false>::mma(acc[t2], q_desc + cb * kQCol + 2 * (kk % 4), k_desc + cb * kKCol + 2 * (kk % 4),
                                  kk > 0);
      }
    }
    if constexpr (ROPE > 0) {
#pragma unroll
      for (int kk = 0; kk < 2; ++kk) {
        const int step = 2 * cw + kk;
        WgmmaSs16<32, true>::mma(accr, q_desc + kNope * kQCol + 2 * step, k_desc + kNope * kKCol + 2 * step, kk > 0);
      }
    }
    wgmma_commit();
    // The next block's conversion runs while the tensor cores compute S (its key stage was last read by
    // this consumer's P.V of block i - 1, complete).
    if (i + 1 < nblocks) convert(i + 1);
    wgmma_wait<0>();
#pragma unroll
    for (int n = 0; n < 16; ++n) fence_operand(acc[0][n]), fence_operand(acc[1][n]), fence_operand(accr[n]);

    const float* part = tile_part_s + ks * kTiles * 4;
    const float u0 = fmaxf(fmaxf(part[8 * cw], part[8 * cw + 1]), fmaxf(part[8 * cw + 2], part[8 * cw + 3]));
    const float u1 = fmaxf(fmaxf(part[8 * cw + 4], part[8 * cw + 5]), fmaxf(part[8 * cw + 6], part[8 * cw + 7]));
    const uint32_t mask = ks ? mask1 : mask0;
    // This thread's keys 8q + 2c + b: their scales of the two owned tiles.
    float sc[2][8];
#pragma unroll
    for (int t2 = 0; t2 < 2; ++t2) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float2 v = *reinterpret_cast<const float2*>(key_scale_s + (ks * kTiles + 2 * cw + t2) * kWgmmaBlockKeys +
                                                          8 * q + 2 * c);
        sc[t2][2 * q] = v.x, sc[t2][2 * q + 1] = v.y;
      }
    }
    float sp[16];
#pragma unroll
    for (int n = 0; n < 16; ++n) {
      const int kq = 2 * (n >> 2) + (n & 1);
      sp[n] = fmaf(inv_pre[(n >> 1) & 1], fmaf(sc[0][kq], acc[0][n], sc[1][kq] * acc[1][n]), ROPE > 0 ? accr[n] : 0.f);
    }
    // The two halves meet: each consumer writes its partial, both read the other's (same sum either way);
    // [4 float4 of a thread][128 threads], so a warp's float4 accesses are 512 contiguous bytes. The
    // second barrier keeps the next block's partial from overwriting one not yet read.
#pragma unroll
    for (int n = 0; n < 16; n += 4)
      xchg_s[(cw * 4 + n / 4) * 128 + lt] = make_float4(sp[n], sp[n + 1], sp[n + 2], sp[n + 3]);
    named_barrier(2, 256);
#pragma unroll
    for (int n = 0; n < 16; n += 4) {
      const float4 x = xchg_s[((1 - cw) * 4 + n / 4) * 128 + lt];
      sp[n] += x.x, sp[n + 1] += x.y, sp[n + 2] += x.z, sp[n + 3] += x.w;
    }
    named_barrier(2, 256);

    // ---- online softmax (log2 units); thread rows r0 (n % 4 < 2), r1 ----
    float mx[2] = {-inf_f32(), -inf_f32()};
#pragma unroll
    for (int n = 0; n < 16; ++n) {
      const int key = 8 * (n >> 2) + 2 * c + (n & 1);
      sp[n] = (mask >> key) & 1u ? sp[n] * p.scale_log2 : -inf_f32();
      mx[(n >> 1) & 1] = fmaxf(mx[(n >> 1) & 1], sp[n]);
    }
    float alpha[2], base[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(~0u, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(~0u, mx[r], 2));
      const float mn = fmaxf(m_run[r], mx[r]);
      alpha[r] = mn == -inf_f32() ? 1.f : exp2f(m_run[r] - mn);
      m_run[r] = mn;
      base[r] = mn == -inf_f32() ? 0.f : mn;
    }
    float rsum[2] = {0.f, 0.f};
#pragma unroll
    for (int n = 0; n < 16; ++n) {
      sp[n] = exp2f(sp[n] - base[(n >> 1) & 1]);
      rsum[(n >> 1) & 1] += sp[n];
    }
    l_run[0] = l_run[0] * alpha[0] + rsum[0];
    l_run[1] = l_run[1] * alpha[1] + rsum[1];

    // ---- O: rescale (max and tile unit), then O += P' V per owned tile, P' = P x scale / unit ----
    // A tile without a valid key this block has unit 0 and adds nothing: its unit stays.
    const float nu[2] = {u0 > 0.f ? u0 : unit[0], u1 > 0.f ? u1 : unit[1]};
#pragma unroll
    for (int t2 = 0; t2 < 2; ++t2) {
      const float inv_u = 1.f / nu[t2];
#pragma unroll
      for (int k16 = 0; k16 < 2; ++k16) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int n = 8 * k16 + 2 * j;
          const int kq = 2 * (n >> 2);
          pa[t2][k16][j] = pack_f16x2(sp[n] * (sc[t2][kq] * inv_u), sp[n + 1] * (sc[t2][kq + 1] * inv_u));
        }
      }
      const float f[2] = {alpha[0] * (unit[t2] / nu[t2]), alpha[1] * (unit[t2] / nu[t2])};
#pragma unroll
      for (int n = 0; n < 64; ++n) o[t2][n] *= f[(n >> 1) & 1];
      unit[t2] = nu[t2];
    }
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
    wgmma_wait<0>();  // P.V has read key stage ks: block i + 2 may be converted into it
#pragma unroll
    for (int n = 0; n < 64; ++n) fence_operand(o[0][n]), fence_operand(o[1][n]);
  }

  // ---- epilogue ----
  float l[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] = l_run[r];
    l[r] += __shfl_xor_sync(~0u, l[r], 1);
    l[r] += __shfl_xor_sync(~0u, l[r], 2);
  }
  const bool split_mode = p.splits > 1;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int head = r ? r1 : r0;
    const int64_t th = t * H + head0 + head;
    const float m = m_run[r];
    const bool any = m != -inf_f32();
    float denom = l[r];
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
    if (cw == 0 && c == 0) {
      const float lse = (m + log2f(l[r])) * kLn2;
      if (split_mode) {
        p.part_lse[th * p.splits + split] = any ? lse : -inf_f32();
      } else {
        p.lse[th] = any ? lse : inf_f32();
      }
    }
  }
}

}  // namespace chord::sparse_mla
