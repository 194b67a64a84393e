// DSA indexer logits: logits[t, p] = scale_p * sum_h w[t, h] * relu(q[t, h] . k_p) for p < context_lens[t]
// (-inf past it, and for positions whose page is outside the block table or [0, num_pages)).
//
// A decode-style streaming kernel: each key is used by one query's heads only. CTA = (query t, a range
// of KEYS_PER_CTA positions); KEY_WARPS x HEAD_GROUPS warps. Each warp keeps its query's B fragments
// (HEADS / HEAD_GROUPS heads x 128 dims of E4M3) in registers for the whole range and streams the keys
// through a STAGES-deep cp.async ring of KEY_WARPS * 32 keys per stage (each warp owns 32 keys of a
// stage): mma.sync m16n8k32 E4M3 with keys on M and heads on N, FP32 accumulators; ReLU, the head weights
// and the sum over heads in registers (two quad shuffles), then the key scale and one coalesced store per
// 32 keys. With two head groups (more than 64 heads) the two warps of a key slice add their partial sums
// through shared memory.
//
// The 128 head dims are permuted identically for q and k (a dot product does not care): lane (g, t) of
// an MMA reads bytes [32t, 32t + 32) of its key rows and of its heads, word 2s / 2s + 1 feeding k-step s,
// so a lane's fragments of a key are two 16-byte shared loads. Keys land in shared memory with their
// 16-byte chunks XOR-swizzled by (key & 7): those loads are bank-conflict free.
#pragma once

#include "common/async_copy.cuh"
#include "common/mma.cuh"
#include "common/warpgroup.cuh"
#include "dsa_indexer/params.cuh"

namespace chord::dsa_indexer {

template <int HEADS, int PAGE, int KEY_WARPS, int HEAD_GROUPS, int STAGES, int KEYS_PER_CTA>
__global__ void __launch_bounds__(KEY_WARPS* HEAD_GROUPS * 32, KEY_WARPS* HEAD_GROUPS == 4 ? 3 : 1)
    indexer_logits_kernel(const uint8_t* __restrict__ q, const float* __restrict__ weights,
                          const uint8_t* __restrict__ cache, int64_t num_pages, const int32_t* __restrict__ block_table,
                          int32_t max_pages_per_seq, const int32_t* __restrict__ context_lens, int32_t max_context,
                          float* __restrict__ logits, int32_t chunks) {
  constexpr int kThreads = KEY_WARPS * HEAD_GROUPS * 32;
  constexpr int kStageKeys = KEY_WARPS * 32;
  constexpr int kTiles = HEADS / 8;                                     // n-tiles of 8 heads
  constexpr int kWarpTiles = (kTiles + HEAD_GROUPS - 1) / HEAD_GROUPS;  // per warp
  constexpr int64_t kPageBytes = static_cast<int64_t>(PAGE) * kTokenBytes;
  // cp.async needs its global source aligned to the copy size: page starts are 132 * PAGE bytes apart.
  constexpr int kCopy = PAGE % 4 == 0 ? 16 : PAGE % 2 == 0 ? 8 : 4;
  constexpr int kPieces = kHeadDim / kCopy;  // copies per key
  constexpr LogitsSmem S = logits_smem(PAGE, KEY_WARPS, HEAD_GROUPS, STAGES, KEYS_PER_CTA);
  static_assert(HEADS % 8 == 0 && HEADS <= 64 * HEAD_GROUPS, "heads: a multiple of 8, at most 64 per warp");
  static_assert(KEYS_PER_CTA % kStageKeys == 0, "a CTA's range is whole stages");
  static_assert(STAGES >= 2, "at least double buffering");

  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* keys_s = smem + S.keys;
  float* scales_s = reinterpret_cast<float*>(smem + S.scales);
  float* partial_s = reinterpret_cast<float*>(smem + S.partial);
  float* weights_s = reinterpret_cast<float*>(smem + S.weights);  // shared, not registers
  int32_t* pages_s = reinterpret_cast<int32_t*>(smem + S.pages);  // -1 = invalid

  const int tid = threadIdx.x, lane = tid & 31, warp = tid / 32;
  const int key_warp = warp % KEY_WARPS, group = warp / KEY_WARPS;
  const int g = lane / 4, t4 = lane % 4;
  const int64_t t = blockIdx.x / chunks;
  const int start = static_cast<int>(blockIdx.x % chunks) * KEYS_PER_CTA;
  const int end = min(start + KEYS_PER_CTA, max_context);
  const int ctx = min(max(context_lens[t], 0), max_context);
  const int live_end = min(ctx, end);
  float* out = logits + t * max_context;
  for (int p = max(ctx, start) + tid; p < end; p += kThreads) out[p] = -inf_f32();
  if (live_end <= start) return;

  // The range's block-table entries, validated once (never read a page outside the cache).
  const int page0 = start / PAGE, pages = (live_end - 1) / PAGE - page0 + 1;
  for (int i = tid; i < pages; i += kThreads) {
    const int index = page0 + i;
    int32_t page = index < max_pages_per_seq ? block_table[t * max_pages_per_seq + index] : -1;
    pages_s[i] = page >= 0 && page < num_pages ? page : -1;
  }
  for (int h = tid; h < HEAD_GROUPS * 64; h += kThreads)
    weights_s[h] = h < HEADS ? __ldg(weights + t * HEADS + h) : 0.0f;

  // This warp's heads: B fragments (8 words per n-tile: bytes [32 t4, +32) of head 8j + g).
  uint32_t qf[kWarpTiles][8];
#pragma unroll
  for (int j = 0; j < kWarpTiles; ++j) {
    const int tile = group * kWarpTiles + j;
    if (tile < kTiles) {
      const uint4* src = reinterpret_cast<const uint4*>(q + (t * HEADS + tile * 8 + g) * kHeadDim + 32 * t4);
      const uint4 lo = __ldg(src), hi = __ldg(src + 1);
      qf[j][0] = lo.x, qf[j][1] = lo.y, qf[j][2] = lo.z, qf[j][3] = lo.w;
      qf[j][4] = hi.x, qf[j][5] = hi.y, qf[j][6] = hi.z, qf[j][7] = hi.w;
    } else {
#pragma unroll
      for (int w = 0; w < 8; ++w) qf[j][w] = 0;
    }
  }
  __syncthreads();  // pages_s, weights_s

  const int blocks = (live_end - start + kStageKeys - 1) / kStageKeys;
  auto issue = [&](int block) {
    const int slot = block % STAGES, base = start + block * kStageKeys;
    uint8_t* ks = keys_s + slot * kStageKeys * kHeadDim;
#pragma unroll 1
    for (int i = tid; i < kStageKeys * kPieces; i += kThreads) {
      const int key = i / kPieces, byte = (i % kPieces) * kCopy, p = base + key;
      const int32_t page = p < live_end ? pages_s[p / PAGE - page0] : -1;
      if (page >= 0) {
        cp_async<kCopy>(ks + key * kHeadDim + (((byte / 16) ^ (key & 7)) * 16) + byte % 16,
                        cache + page * kPageBytes + (p % PAGE) * kHeadDim + byte);
      }
    }
    for (int key = tid; key < kStageKeys; key += kThreads) {
      const int p = base + key;
      const int32_t page = p < live_end ? pages_s[p / PAGE - page0] : -1;
      if (page >= 0) {
        cp_async<4>(scales_s + slot * kStageKeys + key, cache + page * kPageBytes + PAGE * kHeadDim + (p % PAGE) * 4);
      }
    }
  };

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < blocks) issue(s);
    cp_async_commit();
  }
  for (int b = 0; b < blocks; ++b) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();  // stage b landed for everyone; stage b - 1 is consumed, so its slot can refill
    if (b + STAGES - 1 < blocks) issue(b + STAGES - 1);
    cp_async_commit();

    const int slot = b % STAGES;
    const uint8_t* ks = keys_s + (slot * kStageKeys + key_warp * 32) * kHeadDim;
#pragma unroll 1  // one tile's fragments and accumulators live at a time (64 heads: 160 registers)
    for (int mt = 0; mt < 2; ++mt) {
      // Rows g and g + 8 of this 16-key tile; (key & 7) == g for both.
      const uint8_t* r0 = ks + (mt * 16 + g) * kHeadDim;
      const uint8_t* r1 = r0 + 8 * kHeadDim;
      const uint4 a0l = *reinterpret_cast<const uint4*>(r0 + (((2 * t4) ^ g) * 16));
      const uint4 a0h = *reinterpret_cast<const uint4*>(r0 + (((2 * t4 + 1) ^ g) * 16));
      const uint4 a1l = *reinterpret_cast<const uint4*>(r1 + (((2 * t4) ^ g) * 16));
      const uint4 a1h = *reinterpret_cast<const uint4*>(r1 + (((2 * t4 + 1) ^ g) * 16));
      const uint32_t k0[8] = {a0l.x, a0l.y, a0l.z, a0l.w, a0h.x, a0h.y, a0h.z, a0h.w};
      const uint32_t k1[8] = {a1l.x, a1l.y, a1l.z, a1l.w, a1h.x, a1h.y, a1h.z, a1h.w};
      float acc[kWarpTiles][4];
#pragma unroll
      for (int j = 0; j < kWarpTiles; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        const uint32_t a[4] = {k0[2 * s], k1[2 * s], k0[2 * s + 1], k1[2 * s + 1]};
#pragma unroll
        for (int j = 0; j < kWarpTiles; ++j) {
          // Warp-uniform; kept a run-time test even for one group: with it ptxas schedules 64 heads in
          // 152 registers instead of spilling at the 168 that three CTAs per SM allow.
          if (group * kWarpTiles + j < kTiles) mma_e4m3_m16n8k32(acc[j], a, qf[j][2 * s], qf[j][2 * s + 1]);
        }
      }
      // acc[j] = {D[g][2t4], D[g][2t4 + 1], D[g + 8][2t4], D[g + 8][2t4 + 1]} of heads 8j + 2t4 (+1).
      float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
      for (int j = 0; j < kWarpTiles; ++j) {
        const float2 w = *reinterpret_cast<const float2*>(weights_s + (group * kWarpTiles + j) * 8 + 2 * t4);
        s0 = fmaf(fmaxf(acc[j][0], 0.0f), w.x, s0);
        s0 = fmaf(fmaxf(acc[j][1], 0.0f), w.y, s0);
        s1 = fmaf(fmaxf(acc[j][2], 0.0f), w.x, s1);
        s1 = fmaf(fmaxf(acc[j][3], 0.0f), w.y, s1);
      }
      s0 += __shfl_xor_sync(0xffffffffu, s0, 1);
      s1 += __shfl_xor_sync(0xffffffffu, s1, 1);
      s0 += __shfl_xor_sync(0xffffffffu, s0, 2);
      s1 += __shfl_xor_sync(0xffffffffu, s1, 2);
      if (t4 < 2) partial_s[group * kStageKeys + key_warp * 32 + mt * 16 + g + 8 * t4] = t4 == 0 ? s0 : s1;
    }
    if constexpr (HEAD_GROUPS == 1) {
      __syncwarp();
    } else {
      named_barrier(1 + key_warp, 32 * HEAD_GROUPS);  // the warps sharing this key slice
    }
    if (group == 0) {
      const int key = key_warp * 32 + lane, p = start + b * kStageKeys + key;
      if (p < live_end) {
        float sum = partial_s[key];
#pragma unroll
        for (int h = 1; h < HEAD_GROUPS; ++h) sum += partial_s[h * kStageKeys + key];
        out[p] = pages_s[p / PAGE - page0] >= 0 ? sum * scales_s[slot * kStageKeys + key] : -inf_f32();
      }
    }
  }
}

}  // namespace chord::dsa_indexer
