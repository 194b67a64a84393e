// Sparse MLA decode on wgmma for fp8_ds_mla caches, 64 heads a CTA (heads on wgmma's M): one query
// token, one head group of 64, a contiguous range of the top-k (split-K as in decode.cuh, merged by
// combine.cuh). Three warpgroups:
//  - producer: gathers 32-key blocks (one bulk copy per record) into a two-deep raw ring, then converts
//    each block into the wgmma layout (params.cuh): E4M3 as F16 (exact), RoPE dims copied as BF16,
//    invalid keys as zeros; the keys' tile scales and each tile's largest scale beside them;
//  - two consumers, each owning 256 of the 512 output dims (O: 64 x 256 FP32 in registers). S = Q K^T is
//    split by dims (consumer c: tiles 2c, 2c+1 and half the RoPE dims, one accumulator per tile, so each
//    key's tile scale multiplies its column in FP32), the two halves meet in shared memory, both run the
//    same online softmax. For O += P V (V: the same converted key bytes read MN-major), P times the key's
//    scale over the block's largest of the tile (F16 in [-1, 1]) stays in registers as wgmma's A, one
//    variant per tile; that largest scale goes into O's rescale, as the max does.
// Every product is exact, as in decode.cuh: Q's NoPE dims are F16 scaled per head by a power of two (max
// |q| in [2^14, 2^15)), exact for BF16 q; F16 holds every E4M3 value.
#pragma once

#include "common/fp8.cuh"
#include "common/tma.cuh"
#include "common/warpgroup.cuh"
#include "common/wgmma_16bit.cuh"
#include "sparse_mla/params.cuh"

namespace chord::sparse_mla {

namespace wgmma_decode {
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr uint32_t kProducerRegisters = 56;
constexpr uint32_t kConsumerRegisters = 224;
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

  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (smem_address(smem_raw) & 1023)) & 1023);
  uint8_t* q_s = smem + S.q;
  uint8_t* keys_s = smem + S.keys;
  uint8_t* raw_s = smem + S.raw;
  float* xchg_s = reinterpret_cast<float*>(smem + S.xchg);
  float* key_scale_s = reinterpret_cast<float*>(smem + S.key_scale);
  float* tile_max_s = reinterpret_cast<float*>(smem + S.tile_max);
  uint32_t* key_mask_s = reinterpret_cast<uint32_t*>(smem + S.key_mask);
  uint32_t* raw_mask_s = reinterpret_cast<uint32_t*>(smem + S.raw_mask);
  float* inv_pre_s = reinterpret_cast<float*>(smem + S.inv_pre);
  float* red_s = reinterpret_cast<float*>(smem + S.red);
  uint64_t* raw_full = reinterpret_cast<uint64_t*>(smem + S.bars);
  uint64_t* key_full = raw_full + 2;
  uint64_t* key_empty = raw_full + 4;

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
    for (int s = 0; s < 2; ++s) {
      mbarrier_init(&raw_full[s], kWgmmaBlockKeys);  // the gathering lanes
      mbarrier_init(&key_full[s], 128);              // the producer warpgroup
      mbarrier_init(&key_empty[s], 256);             // both consumers
    }
    fence_barrier_init();
  }
  __syncthreads();

  // Gather (producer warp 0): lane k brings key k of a block, its slot fetched one block ahead.
  auto fetch_slot = [&](int i) -> int32_t {
    const int pos = key_begin + i * kWgmmaBlockKeys + lane;
    return i < nblocks && pos < key_end ? __ldg(p.indices + t * p.topk + pos) : -1;
  };
  int32_t next_slot = warp == 0 ? fetch_slot(0) : -1;
  auto issue = [&](int i) {
    const int s = i & 1;
    const int32_t slot = next_slot;
    next_slot = fetch_slot(i + 1);
    const bool valid = slot >= 0 && slot < p.num_slots;
    const uint32_t ballot = __ballot_sync(~0u, valid);
    if (lane == 0) raw_mask_s[s] = ballot;
    if (valid) {
      fence_proxy_async();  // the producer's earlier generic reads of this stage
      mbarrier_arrive_expect_bytes(&raw_full[s], R.bytes);
      bulk_copy(raw_s + (s * kWgmmaBlockKeys + lane) * R.bytes, p.cache + static_cast<int64_t>(slot) * R.bytes, R.bytes,
                &raw_full[s]);
    } else {
      mbarrier_arrive(&raw_full[s]);  // its converted key is zeros, its raw bytes never read
    }
  };
  if (warp == 0) {
    for (int i = 0; i < 2 && i < nblocks; ++i) issue(i);
  }

  // Q -> shared: warp per head; lane l holds dims 16l..16l+15 (column block l / 4, chunks 2(l % 4), +1).
  for (int hh = warp; hh < kWgmmaHeads; hh += kWgmmaWarps) {
    const bf16* qrow = p.q + (t * H + head0 + hh) * R.dims;
    const uint4 v0 = *reinterpret_cast<const uint4*>(qrow + lane * 16);
    const uint4 v1 = *reinterpret_cast<const uint4*>(qrow + lane * 16 + 8);
    const uint32_t w[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
    float f[16], amax = 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      f[2 * j] = __uint_as_float(w[j] << 16);
      f[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
      amax = fmaxf(amax, fmaxf(fabsf(f[2 * j]), fabsf(f[2 * j + 1])));
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(~0u, amax, o));
    const int e = amax > 0.f ? min(120, max(-120, 14 - (static_cast<int>(__float_as_uint(amax) >> 23) - 127))) : 0;
    const float pre = __uint_as_float(static_cast<uint32_t>(e + 127) << 23);
    uint32_t h[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) h[j] = pack_f16x2(f[2 * j] * pre, f[2 * j + 1] * pre);
    uint8_t* col = q_s + (lane / 4) * kQColBytes;
    *reinterpret_cast<uint4*>(col + swizzled(hh, 2 * (lane % 4))) = make_uint4(h[0], h[1], h[2], h[3]);
    *reinterpret_cast<uint4*>(col + swizzled(hh, 2 * (lane % 4) + 1)) = make_uint4(h[4], h[5], h[6], h[7]);
    if (lane == 0) inv_pre_s[hh] = __uint_as_float(static_cast<uint32_t>(127 - e) << 23);
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
    // ================= producer =================
    set_max_registers_decrease<kProducerRegisters>();
    const int pt = threadIdx.x;             // 0..127
    const int key = pt / 4, tile = pt % 4;  // this thread converts tile `tile` of key `key`
    for (int i = 0; i < nblocks; ++i) {
      const int s = i & 1;
      mbarrier_wait(&raw_full[s], (i >> 1) & 1);
      if (i >= 2) mbarrier_wait(&key_empty[s], ((i - 2) >> 1) & 1);
      const uint32_t mask = raw_mask_s[s];
      const bool valid = (mask >> key) & 1u;
      const uint8_t* rec = raw_s + (s * kWgmmaBlockKeys + key) * R.bytes;
      const float sc = valid ? *reinterpret_cast<const float*>(rec + R.scale_offset + 4 * tile) : 0.f;
      // The block's largest scale magnitude per tile: lanes of one tile (stride 4), then the 4 warps.
      float m = fabsf(sc);
      m = fmaxf(m, __shfl_xor_sync(~0u, m, 4));
      m = fmaxf(m, __shfl_xor_sync(~0u, m, 8));
      m = fmaxf(m, __shfl_xor_sync(~0u, m, 16));
      if (lane < 4) red_s[warp * kTiles + lane] = m;
      named_barrier(1, 128);
      const float tmax =
          fmaxf(fmaxf(red_s[tile], red_s[kTiles + tile]), fmaxf(red_s[2 * kTiles + tile], red_s[3 * kTiles + tile]));
      if (pt < kTiles) tile_max_s[s * kTiles + pt] = tmax;
      if (pt == 0) key_mask_s[s] = mask;
      key_scale_s[(s * kTiles + tile) * kWgmmaBlockKeys + key] = sc;
      uint8_t* kst = keys_s + s * S.key_stage_bytes;
      if (valid) {
#pragma unroll
        for (int j = 0; j < 8; ++j) {  // 16 values: chunks 2j, 2j+1 of the tile (column blocks 2 tile + j / 4)
          const uint4 x = *reinterpret_cast<const uint4*>(rec + tile * kTileDims + 16 * j);
          const uint32_t xw[4] = {x.x, x.y, x.z, x.w};
          uint32_t hv[8];
#pragma unroll
          for (int k = 0; k < 4; ++k) e4m3x4_to_f16x2(xw[k], hv[2 * k], hv[2 * k + 1]);
          uint8_t* col = kst + (2 * tile + j / 4) * kKeyColBytes;
          *reinterpret_cast<uint4*>(col + swizzled(key, 2 * (j % 4))) = make_uint4(hv[0], hv[1], hv[2], hv[3]);
          *reinterpret_cast<uint4*>(col + swizzled(key, 2 * (j % 4) + 1)) = make_uint4(hv[4], hv[5], hv[6], hv[7]);
        }
        if constexpr (ROPE > 0) {  // 64 BF16 = 8 chunks: 2 a thread
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            *reinterpret_cast<uint4*>(kst + kNope * kKeyColBytes + swizzled(key, 2 * tile + j)) =
                *reinterpret_cast<const uint4*>(rec + R.rope_offset + 16 * (2 * tile + j));
          }
        }
      } else {
        const uint4 z = make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int j = 0; j < 16; ++j) {
          *reinterpret_cast<uint4*>(kst + (2 * tile + j / 8) * kKeyColBytes + swizzled(key, j % 8)) = z;
        }
        if constexpr (ROPE > 0) {
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            *reinterpret_cast<uint4*>(kst + kNope * kKeyColBytes + swizzled(key, 2 * tile + j)) = z;
          }
        }
      }
      fence_proxy_async();  // the converted block is read by wgmma
      mbarrier_arrive(&key_full[s]);
      named_barrier(1, 128);  // every producer thread is done with raw stage s (and red_s)
      if (warp == 0 && i + 2 < nblocks) issue(i + 2);
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

  float o[2][64];  // per owned tile: dims 256 cw + 128 t2 + 8 (n / 4) + 2c + (n % 2), rows r0 / r1 by (n / 2) % 2
#pragma unroll
  for (int n = 0; n < 64; ++n) o[0][n] = o[1][n] = 0.f;
  float m_run[2] = {-inf_f32(), -inf_f32()}, l_run[2] = {0.f, 0.f};
  float unit[2] = {1.f, 1.f};  // O's current unit per owned tile (the last block's tile max)
  uint32_t pa[2][2][4];        // [tile][k16 step]: P x key scale / tile max as wgmma A fragments

  const uint64_t q_desc = smem_desc_k_major_sw128(q_s);
  for (int i = 0; i < nblocks; ++i) {
    const int s = i & 1;
    mbarrier_wait(&key_full[s], (i >> 1) & 1);
    uint8_t* kst = keys_s + s * S.key_stage_bytes;
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
    wgmma_wait<0>();  // also the previous block's P.V (wait<1> here made ptxas serialize every wgmma)
    if (i > 0) mbarrier_arrive(&key_empty[(i - 1) & 1]);
#pragma unroll
    for (int n = 0; n < 16; ++n) fence_operand(acc[0][n]), fence_operand(acc[1][n]), fence_operand(accr[n]);
#pragma unroll
    for (int n = 0; n < 64; ++n) fence_operand(o[0][n]), fence_operand(o[1][n]);

    const float* tmax = tile_max_s + s * kTiles;
    const float u0 = tmax[2 * cw], u1 = tmax[2 * cw + 1];
    const uint32_t mask = key_mask_s[s];
    // This thread's keys 8q + 2c + b: their scales of the two owned tiles.
    float sc[2][8];
#pragma unroll
    for (int t2 = 0; t2 < 2; ++t2) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float2 v = *reinterpret_cast<const float2*>(key_scale_s + (s * kTiles + 2 * cw + t2) * kWgmmaBlockKeys +
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
    // The two halves meet: each consumer writes its partial, both read the other's (same sum either way).
    // [4 float4 of a thread][128 threads]: a warp's float4 accesses are 512 contiguous bytes.
    float4* mine = reinterpret_cast<float4*>(xchg_s) + ((i & 1) * 2 + cw) * 4 * 128 + lt;
    const float4* theirs = reinterpret_cast<const float4*>(xchg_s) + ((i & 1) * 2 + (1 - cw)) * 4 * 128 + lt;
#pragma unroll
    for (int n = 0; n < 16; n += 4) mine[n / 4 * 128] = make_float4(sp[n], sp[n + 1], sp[n + 2], sp[n + 3]);
    named_barrier(2, 256);
#pragma unroll
    for (int n = 0; n < 16; n += 4) {
      const float4 x = theirs[n / 4 * 128];
      sp[n] += x.x, sp[n + 1] += x.y, sp[n + 2] += x.z, sp[n + 3] += x.w;
    }

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
    float rs[2] = {0.f, 0.f};
#pragma unroll
    for (int n = 0; n < 16; ++n) {
      sp[n] = exp2f(sp[n] - base[(n >> 1) & 1]);
      rs[(n >> 1) & 1] += sp[n];
    }
    l_run[0] = l_run[0] * alpha[0] + rs[0];
    l_run[1] = l_run[1] * alpha[1] + rs[1];

    // ---- O: rescale (max and tile unit), then O += P' V per owned tile, P' = P x scale / unit ----
    // A tile without a valid key this block has unit 0 and adds nothing: its unit stays.
    const float nu[2] = {u0 > 0.f ? u0 : unit[0], u1 > 0.f ? u1 : unit[1]};
#pragma unroll
    for (int t2 = 0; t2 < 2; ++t2) {
      const float inv_u = 1.f / nu[t2];
#pragma unroll
      for (int ks = 0; ks < 2; ++ks) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int n = 8 * ks + 2 * j;
          const int kq = 2 * (n >> 2);
          pa[t2][ks][j] = pack_f16x2(sp[n] * (sc[t2][kq] * inv_u), sp[n + 1] * (sc[t2][kq + 1] * inv_u));
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
      for (int ks = 0; ks < 2; ++ks) {
        WgmmaRsF16MnB<128>::mma(o[t2], pa[t2][ks], v_desc + ks * ((16 * kWgmmaColBytes) >> 4), true);
      }
    }
    wgmma_commit();
  }
  wgmma_wait<0>();
#pragma unroll
  for (int n = 0; n < 64; ++n) fence_operand(o[0][n]), fence_operand(o[1][n]);

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
