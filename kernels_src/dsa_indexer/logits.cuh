// DSA indexer logits: logits[t, p] = scale_p * sum_h w[t, h] * relu(q[t, h] . k_p) for p < context_lens[t]
// (-inf past it, and for positions whose page is outside the block table or [0, num_pages)).
//
// A streaming kernel: each key is used by one query's heads only, so the bytes of the keys bound it
// (132 per key) once the products run on wgmma. CTA = (query t, a range of KEYS_PER_CTA positions), one
// warpgroup. The query's heads sit in shared memory once as wgmma's B (N = HEADS, K-major E4M3); 64-key
// tiles stream through a STAGES-deep ring as A (M = 64): per tile four m64nHEADSk32 E4M3 wgmmas into
// FP32, then ReLU, the head weights and the sum over heads in registers (each thread holds 2 keys x
// HEADS / 4 heads; two quad shuffles finish the sum), the key scale, one store per key. Several CTAs per
// SM overlap one CTA's products with another's epilogue and keep ~100 KB of keys in flight per SM.
//
// With TMA, tiles arrive by tensor copy (a 3-D map over [page][row][byte], boxes of min(PAGE, 64) rows,
// 128-byte swizzle) with their scales by bulk copy, issued by thread 0 on a per-slot "full" mbarrier
// (only where the page layout allows: logits_uses_tma). Each warp releases a slot on its "empty"
// mbarrier once its wgmmas have read it, and thread 0 refills it before its own epilogue: no block
// barrier in the loop, STAGES tiles in flight. Otherwise every thread cp.asyncs its share into the same
// swizzled layout behind a block barrier per tile. Pages outside the table are never read: their
// positions' logits are -inf whatever the tile holds.
#pragma once

#include "common/async_copy.cuh"
#include "common/tma.cuh"
#include "common/warpgroup.cuh"
#include "common/wgmma_ss_e4m3.cuh"
#include "dsa_indexer/params.cuh"

namespace chord::dsa_indexer {

template <int HEADS, int PAGE, int STAGES, int KEYS_PER_CTA, bool TMA>
__global__ void __launch_bounds__(kLogitsThreads, kLogitsCtasPerSm)
    indexer_logits_kernel(const __grid_constant__ TensorMap key_map, const uint8_t* __restrict__ q,
                          const float* __restrict__ weights, const uint8_t* __restrict__ cache, int64_t num_pages,
                          const int32_t* __restrict__ block_table, int32_t max_pages_per_seq,
                          const int32_t* __restrict__ context_lens, int32_t max_context, float* __restrict__ logits,
                          int32_t chunks) {
  constexpr bool kTma = TMA;
  constexpr int kSegment = PAGE < kTileKeys ? PAGE : kTileKeys;  // keys per tensor copy
  constexpr int kTileBytes = kTileKeys * kHeadDim;
  constexpr int64_t kPageBytes = static_cast<int64_t>(PAGE) * kTokenBytes;
  constexpr LogitsSmem S = logits_smem(HEADS, PAGE, STAGES, KEYS_PER_CTA);
  static_assert(HEADS % 8 == 0 && HEADS >= 8 && HEADS <= kMaxHeads, "heads: a multiple of 8 in [8, 128]");
  static_assert(KEYS_PER_CTA % kTileKeys == 0, "a CTA's range is whole tiles");
  static_assert(STAGES >= kMinStages && STAGES <= kMaxStages, "ring depth");
  static_assert(!TMA || logits_uses_tma(PAGE), "tensor copies need 16-byte aligned pages that tile 64 keys");

  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (smem_address(smem_raw) & 1023)) & 1023);
  uint8_t* q_s = smem + S.q;
  uint8_t* keys_s = smem + S.keys;
  float* scales_s = reinterpret_cast<float*>(smem + S.scales);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + S.barriers);  // a tile landed
  uint64_t* empty = full + STAGES;  // the four warps are done with a slot (tensor copies only)
  int32_t* pages_s = reinterpret_cast<int32_t*>(smem + S.pages);  // -1 = invalid

  const int tid = threadIdx.x, lane = tid & 31, warp = tid / 32;
  const int g = lane / 4, t4 = lane % 4;
  const int64_t t = blockIdx.x / chunks;
  const int start = static_cast<int>(blockIdx.x % chunks) * KEYS_PER_CTA;
  const int end = min(start + KEYS_PER_CTA, max_context);
  const int ctx = min(max(context_lens[t], 0), max_context);
  const int live_end = min(ctx, end);
  float* out = logits + t * max_context;
  for (int p = max(ctx, start) + tid; p < end; p += kLogitsThreads) out[p] = -inf_f32();
  if (live_end <= start) return;

  // The range's block-table entries, validated once (never read a page outside the cache).
  const int page0 = start / PAGE, pages = (live_end - 1) / PAGE - page0 + 1;
  for (int i = tid; i < pages; i += kLogitsThreads) {
    const int index = page0 + i;
    const int32_t page = index < max_pages_per_seq ? block_table[t * max_pages_per_seq + index] : -1;
    pages_s[i] = page >= 0 && page < num_pages ? page : -1;
  }
  if constexpr (kTma) {
    if (tid == 0) {
      prefetch_tensor_map(&key_map);
      for (int s = 0; s < STAGES; ++s) {
        mbarrier_init(&full[s], 1);
        mbarrier_init(&empty[s], kLogitsThreads / 32);
      }
      fence_barrier_init();
    }
  }
  // q -> shared in the 128-byte swizzle: chunk c of head h at h * 128 + (c ^ (h & 7)) * 16.
  const uint8_t* q_t = q + t * HEADS * kHeadDim;
  for (int i = tid; i < HEADS * 8; i += kLogitsThreads) {
    const int h = i / 8, c = i % 8;
    *reinterpret_cast<uint4*>(q_s + h * kHeadDim + ((c ^ (h & 7)) * 16)) =
        __ldg(reinterpret_cast<const uint4*>(q_t + h * kHeadDim + c * 16));
  }
  fence_proxy_async();  // the stores above are read by wgmma (the async proxy)
  // This thread's accumulator columns are heads 8j + 2 t4 and 8j + 2 t4 + 1.
  float w[HEADS / 8][2];
#pragma unroll
  for (int j = 0; j < HEADS / 8; ++j) {
    const float2 v = __ldg(reinterpret_cast<const float2*>(weights + t * HEADS + 8 * j + 2 * t4));
    w[j][0] = v.x, w[j][1] = v.y;
  }
  __syncthreads();  // pages_s, q_s, the barriers

  const int blocks = (live_end - start + kTileKeys - 1) / kTileKeys;
  // The page of position p (< live_end), or -1.
  auto page_of = [&](int p) { return p < live_end ? pages_s[p / PAGE - page0] : -1; };
  auto issue = [&](int block) {
    const int slot = block % STAGES, base = start + block * kTileKeys;
    uint8_t* ks = keys_s + slot * kTileBytes;
    float* ss = scales_s + slot * kTileKeys;
    if constexpr (kTma) {
      if (tid != 0) return;
      uint32_t bytes = 0;
#pragma unroll
      for (int seg = 0; seg < kTileKeys / kSegment; ++seg) {
        bytes += page_of(base + seg * kSegment) >= 0 ? kSegment * kTokenBytes : 0;
      }
      mbarrier_arrive_expect_bytes(&full[slot], bytes);  // 0 bytes: the phase completes on the arrival
#pragma unroll
      for (int seg = 0; seg < kTileKeys / kSegment; ++seg) {
        const int p = base + seg * kSegment;
        const int32_t page = page_of(p);
        if (page < 0) continue;
        tensor_copy_3d(ks + seg * kSegment * kHeadDim, &key_map, 0, p % PAGE, page, &full[slot]);
        bulk_copy(ss + seg * kSegment, cache + page * kPageBytes + PAGE * kHeadDim + (p % PAGE) * 4, kSegment * 4,
                  &full[slot]);
      }
    } else {
      // cp.async needs its global source aligned to the copy size: page starts are 132 * PAGE bytes apart.
      constexpr int kCopy = PAGE % 4 == 0 ? 16 : PAGE % 2 == 0 ? 8 : 4;
      constexpr int kPieces = kHeadDim / kCopy;
#pragma unroll 1
      for (int i = tid; i < kTileKeys * kPieces; i += kLogitsThreads) {
        const int key = i / kPieces, byte = (i % kPieces) * kCopy, p = base + key;
        const int32_t page = page_of(p);
        if (page >= 0) {
          cp_async<kCopy>(ks + key * kHeadDim + (((byte / 16) ^ (key & 7)) * 16) + byte % 16,
                          cache + page * kPageBytes + (p % PAGE) * kHeadDim + byte);
        }
      }
      if (tid < kTileKeys) {
        const int p = base + tid;
        const int32_t page = page_of(p);
        if (page >= 0) cp_async<4>(ss + tid, cache + page * kPageBytes + PAGE * kHeadDim + (p % PAGE) * 4);
      }
      cp_async_commit();
    }
  };

  // Tensor copies refill a slot as soon as its wgmmas are done (the ring holds STAGES tiles ahead);
  // cp.async refills at the next block barrier (STAGES - 1 ahead).
  for (int s = 0; s < (kTma ? STAGES : STAGES - 1); ++s) {
    if (s < blocks) {
      issue(s);
    } else if constexpr (!kTma) {
      cp_async_commit();  // keep one group per stage: the wait below counts groups
    }
  }
  const uint64_t q_desc = smem_desc_k_major_sw128(q_s);
  for (int b = 0; b < blocks; ++b) {
    const int slot = b % STAGES;
    if constexpr (kTma) {
      mbarrier_wait(&full[slot], (b / STAGES) & 1);
    } else {
      cp_async_wait<STAGES - 2>();
      fence_proxy_async();
      __syncthreads();  // stage b landed; every thread is done with stage b - 1, whose slot refills
      if (b + STAGES - 1 < blocks) {
        issue(b + STAGES - 1);
      } else {
        cp_async_commit();
      }
    }

    // D[key][head] = k . q over 128 dims: four k32 steps, each descriptor advanced by 32 bytes inside the
    // swizzled 128-byte rows.
    float acc[HEADS / 2];
    const uint64_t k_desc = smem_desc_k_major_sw128(keys_s + slot * kTileBytes);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 32; ++kk) {
      WgmmaSsE4m3<HEADS>::mma(acc, k_desc + 2 * kk, q_desc + 2 * kk, kk > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < HEADS / 2; ++i) fence_operand(acc[i]);
    // This lane's key (t4 < 2) and its scale, read before the slot is released.
    const int key = 16 * warp + g + 8 * t4, p = start + b * kTileKeys + key;
    const float scale = t4 < 2 ? scales_s[slot * kTileKeys + key] : 0.0f;
    if constexpr (kTma) {
      __syncwarp();
      if (lane == 0) mbarrier_arrive(&empty[slot]);
      if (tid == 0 && b + STAGES < blocks) {
        mbarrier_wait(&empty[slot], (b / STAGES) & 1);
        issue(b + STAGES);
      }
    }

    // acc[4j..4j+3] = D[16 warp + g][8j + 2t4 (+1)], D[16 warp + g + 8][8j + 2t4 (+1)].
    float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
    for (int j = 0; j < HEADS / 8; ++j) {
      s0 = fmaf(fmaxf(acc[4 * j + 0], 0.0f), w[j][0], s0);
      s0 = fmaf(fmaxf(acc[4 * j + 1], 0.0f), w[j][1], s0);
      s1 = fmaf(fmaxf(acc[4 * j + 2], 0.0f), w[j][0], s1);
      s1 = fmaf(fmaxf(acc[4 * j + 3], 0.0f), w[j][1], s1);
    }
    s0 += __shfl_xor_sync(0xffffffffu, s0, 1);
    s1 += __shfl_xor_sync(0xffffffffu, s1, 1);
    s0 += __shfl_xor_sync(0xffffffffu, s0, 2);
    s1 += __shfl_xor_sync(0xffffffffu, s1, 2);
    if (t4 < 2 && p < live_end) out[p] = page_of(p) >= 0 ? (t4 == 0 ? s0 : s1) * scale : -inf_f32();
  }
}

}  // namespace chord::dsa_indexer
