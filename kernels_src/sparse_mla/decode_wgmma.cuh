// Sparse MLA decode on wgmma, 64 heads a CTA (heads on wgmma's M), either cache format: one query
// token, one head group of 64, a contiguous range of the top-k in 64-key blocks (split-K as in decode.cuh,
// merged by combine.cuh). Three warpgroups:
//  - the producer loads every record of a block straight into registers (a key's bytes spread over four
//    lanes; slots fetched two blocks ahead, the next block's records asked of L2 by a bulk prefetch while
//    this one converts, its loads issued before its buffer is free) and
//    stores the key dequantized into a two-deep key buffer: E4M3 x tile scale as F16 (one rounding of the
//    exact product, relative error 2^-11; saturated past F16's range) or, from a BF16 cache, BF16 as F16
//    (exact in F16's normal range, saturated beyond), RoPE dims as BF16, invalid keys as zeros with an
//    additive -inf bias for the softmax;
//  - the S warpgroup computes S = Q K^T over all 576 dims into one accumulator (Q's NoPE and RoPE dims
//    prescaled by the same power of two per head, exact in F16 / BF16), the online softmax, and P.V for
//    output dims 0-255 with P (F16) from registers; it hands P and the rows' rescales to
//  - the second P.V warpgroup, which runs P.V for dims 256-511 with P from shared memory.
// A key buffer goes back to the producer once S and both P.V warpgroups are done with it (at 128 heads the
// token's two CTAs, one per 64 heads, form a cluster: each producer gathers and converts one round of 32
// of every block's 64 keys and stores them into both CTAs' buffers, the peer's through st.async
// completing bytes of the peer's key_full; a buffer goes back to both producers, one arrival a consumer
// warp each, local and remote); at the end both
// P.V warpgroups stage O in shared memory (over Q and the key buffers) and write whole rows. P stays below
// 2^8: the running max moves only when a block's exceeds it by more than kStaleMax, so O's rescale (by the
// moved max) is rare. Every hand-off is on an mbarrier (compute-sanitizer's racecheck models those, not
// bar.arrive: tools/racecheck_named_barrier_probe.cu).
#pragma once

#include "common/cluster.cuh"
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
// The S warpgroup holds O for 256 dims (128), S (32) and P's fragments (16, still read by the P.V in
// flight during the next block's softmax); the second P.V warpgroup O alone; the producer two keys' bytes
// (88). The three add up to the launch allocation (168 a thread); ptxas ignores every setmaxnreg when one
// role's code needs more than its count (216 / 160 / 128: no spills, NVRTC, 2026-12-06).
constexpr uint32_t kSRegisters = 216;
constexpr uint32_t kPvRegisters = 160;
constexpr uint32_t kProducerRegisters = 128;
static_assert(setmaxnreg_fits_launch(kWgmmaWarps * 32, kSRegisters + kPvRegisters + kProducerRegisters),
              "setmaxnreg past the pool");
constexpr int kQColBytes = kWgmmaHeads * kWgmmaColBytes;        // one column block of Q
constexpr int kKeyColBytes = kWgmmaBlockKeys * kWgmmaColBytes;  // one column block of a key buffer
constexpr uint64_t kQCol = kQColBytes >> 4, kKCol = kKeyColBytes >> 4, kKStep = (16 * kWgmmaColBytes) >> 4;
constexpr float kStaleMax = 8.f;                    // log2 units: how far S may exceed the running max before it moves
constexpr int kKeysPerLane = kWgmmaBlockKeys / 32;  // the producer: 32 keys a round, four lanes a key

// Byte offset of 16-byte chunk `chunk` (0-7) of row `row` inside a swizzled column block.
__device__ __forceinline__ int swizzled(int row, int chunk) {
  return row * kWgmmaColBytes + ((chunk ^ (row & 7)) << 4);
}
}  // namespace wgmma_decode

template <int FORMAT, int ROPE, int H, bool PAIR>
__global__ void __launch_bounds__(kWgmmaWarps * 32, 1) sparse_mla_decode_wgmma_kernel(const DecodeParams p) {
  using namespace wgmma_decode;
  constexpr WgmmaDecodeSmem S = wgmma_decode_smem(ROPE);
  constexpr RecordLayout R = record_layout(FORMAT, ROPE);
  static_assert(R.bytes > 0 && R.bytes % 16 == 0, "RoPE dims 64, or 0 on NoPE layers; records move as 16-byte pieces");
  static_assert(H % kWgmmaHeads == 0, "whole groups of 64 heads");
  constexpr int kNope = kNopeDims / 64;  // NoPE column blocks
  // The token's two head groups as a cluster sharing each block's gather (params.cuh, heuristics).
  static_assert(!PAIR || wgmma_decode_pair_fits(H), "a pair is the token's two 64-head groups");
  constexpr bool kPair = PAIR;
  constexpr uint32_t kPeerBytes = 32 * S.col_blocks * kWgmmaColBytes;  // the peer's round of a block, stored here

  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (smem_address(smem_raw) & 1023)) & 1023);
  uint8_t* q_s = smem + S.q;
  uint8_t* keys_s = smem + S.keys;
  uint8_t* probs_s = smem + S.probs;
  float* alpha_s = reinterpret_cast<float*>(smem + S.alpha);
  float* denom_s = reinterpret_cast<float*>(smem + S.denom);
  float* sink_s = reinterpret_cast<float*>(smem + S.sink);
  float* key_bias_s = reinterpret_cast<float*>(smem + S.key_bias);
  float* inv_pre_s = reinterpret_cast<float*>(smem + S.inv_pre);
  uint64_t* key_full = reinterpret_cast<uint64_t*>(smem + S.bars);  // [2]: the producer(s) stored the block
  uint64_t* key_empty = key_full + 2;       // [2]: S and both P.V warpgroups (of both CTAs of a pair) are done
  uint64_t* probs_full = key_empty + 2;     // P and the rescales of a block written (S warpgroup)
  uint64_t* probs_empty = probs_full + 1;   // ... and read by the second P.V warpgroup's wgmma
  uint64_t* denom_ready = probs_empty + 1;  // the rows' final denominators written (S warpgroup)
  uint64_t* pv_done = denom_ready + 1;      // the second P.V warpgroup's last wgmma complete
  uint64_t* staged = pv_done + 1;           // both warpgroups' O in the staging rows
  uint64_t* q_full = staged + 1;            // Q's rows landed (in key buffer 0)

  // The warp index through a shuffle, so that ptxas sees the role branches as warp-uniform (wgmma in a
  // branch it thinks divergent is serialized).
  const int warp = __shfl_sync(~0u, static_cast<int>(threadIdx.x / 32), 0), lane = threadIdx.x % 32;
  const int role = warp / 4;  // 0: S (+ P.V of dims 0-255), 1: P.V of dims 256-511, 2: producer
  const int head0 = (blockIdx.x % (H / kWgmmaHeads)) * kWgmmaHeads;
  const int split = blockIdx.x / (H / kWgmmaHeads);
  const int64_t t = blockIdx.y;
  const uint32_t rank = kPair ? cluster_ctarank() : 0u, peer = rank ^ 1u;  // rank: the head group
  // The first output row (token x heads + head group) read again where it is written (in a pair): volatile
  // special register reads are not hoisted, so ptxas does not hold prologue values across the main loop
  // (with the remote releases' addresses the S warpgroup spilled them).
  auto out_row0 = [&]() -> int64_t {
    uint32_t x, y;
    asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(x));
    asm volatile("mov.u32 %0, %%ctaid.y;" : "=r"(y));
    return static_cast<int64_t>(y) * H + (x % (H / kWgmmaHeads)) * kWgmmaHeads;
  };

  // The combine kernel may be scheduled as soon as every CTA runs; it waits for this grid to finish.
  asm volatile("griddepcontrol.launch_dependents;");

  int len = p.topk;
  if (p.topk_length) len = max(0, min(p.topk_length[t], p.topk));
  const int key_begin = split * p.blocks_per_split * kWgmmaBlockKeys;
  const int key_end = min(len, key_begin + p.blocks_per_split * kWgmmaBlockKeys);
  const int nblocks = key_end > key_begin ? (key_end - key_begin + kWgmmaBlockKeys - 1) / kWgmmaBlockKeys : 0;

  if (threadIdx.x == 0) {
    for (int b = 0; b < 2; ++b) {
      mbarrier_init(&key_full[b], 128);
      // Every S and P.V thread (256), or in a pair one arrival per consumer warp of both CTAs (2 x 8).
      mbarrier_init(&key_empty[b], kPair ? 16 : 256);
    }
    mbarrier_init(probs_full, 128);
    mbarrier_init(probs_empty, 128);
    mbarrier_init(denom_ready, 128);
    mbarrier_init(pv_done, 128);
    mbarrier_init(staged, 256);
    mbarrier_init(q_full, 1);
    fence_barrier_init();
  }
  __syncthreads();  // the barriers initialized before anyone waits on them

  // Q -> shared: the group's 64 rows arrive in key buffer 0 by one bulk copy (one round of memory latency;
  // ncu: a warp loading its six heads' rows in turn spent a third of a one-block CTA's time there), then
  // warp per head, lane l holds dims 16l..16l+15 (column block l / 4, chunks 2(l % 4), +1). The RoPE dims
  // take the head's NoPE prescale too (a power of two: exact in BF16), so S is one sum.
  constexpr uint32_t kQBytes = kWgmmaHeads * R.dims * 2;
  static_assert(kQBytes <= S.key_buffer_bytes, "Q's rows fit in key buffer 0");
  if (threadIdx.x == 0) {
    mbarrier_arrive_expect_bytes(q_full, kQBytes);
    bulk_copy(keys_s, p.q + (t * H + head0) * R.dims, kQBytes, q_full);
  }
  if (threadIdx.x < kWgmmaHeads) {
    sink_s[threadIdx.x] = p.splits == 1 && p.sink ? p.sink[head0 + threadIdx.x] * kLog2e : -inf_f32();
  }
  // The producer's lanes (role 2). Lane l of warp w: keys 8w + l % 8 + 32 r (round r), and of each 64-dim
  // column block (NoPE and RoPE) two 8-dim chunks of piece = l / 8: 2 piece and 2 piece + 1 (16 contiguous
  // E4M3 bytes, one load), or in a pair piece and piece + 4, so that each store instruction writes 64
  // contiguous bytes of each of its 8 keys (the peer's copy goes through distributed shared memory, which
  // wants coalesced 32-byte segments). Functions of the lane rather than values: held across Q's prologue
  // by every warp they spilled a consumer register (NVRTC, E4M3 at 128 heads).
  auto lane_key = [&]() { return 8 * (warp % 4) + lane % 8; };
  auto lane_piece = [&]() { return lane / 8; };
  // The slot of key kbase + 32 r of block j (-1 past the split's keys).
  auto fetch_slot = [&](int kbase, int j, int r) -> int32_t {
    const int pos = key_begin + j * kWgmmaBlockKeys + kbase + 32 * r;
    return j < nblocks && pos < key_end ? __ldg(p.indices + t * p.topk + pos) : -1;
  };
  // A key's four lanes share its slots: the lane of piece r holds round r's (two registers a lane, not
  // four) and asks L2 for that round's record (in a pair only the rounds this CTA converts).
  static_assert(kKeysPerLane <= 4, "a round's slots held by the lane of that piece");
  auto prefetch_record = [&](int piece, int32_t slot) {
    if (piece < kKeysPerLane && (!kPair || piece == static_cast<int>(rank)) && slot >= 0 && slot < p.num_slots) {
      bulk_prefetch_l2(p.cache + static_cast<int64_t>(slot) * R.bytes, static_cast<uint32_t>(R.bytes));
    }
  };
  // Block 0's records asked of L2 before Q's rows land: the index and record loads' two memory latencies
  // run under Q's copy and conversion instead of after them (the whole chain of a one-block CTA, T = 1).
  if (role == 2) prefetch_record(lane_piece(), fetch_slot(lane_key(), 0, lane_piece() % kKeysPerLane));
  mbarrier_wait(q_full, 0);
  for (int hh = warp; hh < kWgmmaHeads; hh += kWgmmaWarps) {
    const uint8_t* qrow = keys_s + hh * R.dims * 2;
    uint4 lo, hi;
    const float inv_pre = q_to_f16_prescaled(*reinterpret_cast<const uint4*>(qrow + lane * 32),
                                             *reinterpret_cast<const uint4*>(qrow + lane * 32 + 16), lo, hi);
    uint8_t* col = q_s + (lane / 4) * kQColBytes;
    *reinterpret_cast<uint4*>(col + swizzled(hh, 2 * (lane % 4))) = lo;
    *reinterpret_cast<uint4*>(col + swizzled(hh, 2 * (lane % 4) + 1)) = hi;
    if (lane == 0) inv_pre_s[hh] = inv_pre;
    if constexpr (ROPE > 0) {
      if (lane < ROPE / 8) {
        const float pre = __uint_as_float(0x7f000000u - __float_as_uint(inv_pre));  // 1 / inv_pre: 2^e
        const uint4 r = *reinterpret_cast<const uint4*>(qrow + 2 * kNopeDims + lane * 16);
        const uint32_t w[4] = {r.x, r.y, r.z, r.w};
        uint32_t o[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          o[j] = pack_bf16x2(__uint_as_float(w[j] << 16) * pre, __uint_as_float(w[j] & 0xffff0000u) * pre);
        }
        *reinterpret_cast<uint4*>(q_s + kNope * kQColBytes + swizzled(hh, lane)) = make_uint4(o[0], o[1], o[2], o[3]);
      }
    }
  }
  fence_proxy_async();  // Q is read by wgmma (the async proxy)
  if constexpr (kPair) {
    cluster_sync();  // both CTAs' barriers exist before either touches the other's
  } else {
    __syncthreads();
  }
  // A pair's CTA stays until its peer is done storing into it and arriving on its barriers.
  auto leave = [&]() {
    if constexpr (kPair) cluster_sync();
  };
  // A consumer's release of key buffer b (its wgmma reads of it waited on): every thread, or in a pair
  // one lane a warp, to its own producer and to the peer's, which stores into this buffer too.
  auto release_keys = [&](int b) {
    if constexpr (kPair) {
      __syncwarp();
      if (lane == 0) {
        mbarrier_arrive(&key_empty[b]);
        mbarrier_arrive_remote(remote_shared_address(&key_empty[b], peer));
      }
    } else {
      mbarrier_arrive(&key_empty[b]);
    }
  };

  const int g = lane / 4, c = lane % 4;
  const int r0 = 16 * (warp % 4) + g, r1 = r0 + 8;  // this thread's heads (rows of every accumulator)

  if (role == 2) {
    // ================= producer: records -> registers -> dequantized key buffers =================
    set_max_registers_decrease<kProducerRegisters>();
    const int kbase = lane_key(), piece = lane_piece(), round = piece % kKeysPerLane;
    const int chunk0 = kPair ? piece : 2 * piece, chunk1 = chunk0 + (kPair ? 4 : 1);
    // Slots two blocks ahead: block j + 1's records are asked of L2 while block j is converted (the slot
    // loads of j + 2 have a block's time to land before that prefetch needs them).
    int32_t next = fetch_slot(kbase, 0, round), ahead = fetch_slot(kbase, 1, round);
    auto slot_of = [&](int r) { return __shfl_sync(~0u, next, lane % 8 + 8 * r); };
    auto prefetch_next = [&]() { prefetch_record(piece, next); };  // block j + 1's (after advance)
    auto advance = [&](int j) {  // the slots of blocks j + 1 and j + 2 (j: the block just read)
      next = ahead;
      ahead = fetch_slot(kbase, j + 2, round);
    };
    // This CTA's rounds: both, or in a pair round `rank` (the peer converts the other); every round's
    // validity, for the keys' mask biases.
    constexpr int kRounds = kPair ? 1 : kKeysPerLane;
    auto round_key = [&](int q) { return kbase + 32 * (kPair ? static_cast<int>(rank) : q); };
    // Element `rank` of a two-round array (q in a single CTA) by selects: indexing by a runtime value would
    // put the array in local memory.
    static_assert(!kPair || kKeysPerLane == 2, "a pair splits a block's two rounds");
    auto pick = [&](const auto& a, int q) { return kPair ? (rank ? a[1] : a[0]) : a[q]; };
    const uint32_t peer_keys = kPair ? remote_shared_address(keys_s, peer) : 0u;
    const bool expects_peer = kPair && warp % 4 == 0 && lane == 0;  // its arrival expects the peer's bytes
    for (int j = 0; j < nblocks; ++j) {
      const int b = j & 1;
      uint8_t* buf = keys_s + b * S.key_buffer_bytes;
      // The buffer's previous block (j - 2) must be done with before it is overwritten (in a pair, by
      // both CTAs' consumers). CTA scope even for the peer's remote arrivals: no data flows from the
      // consumers to this producer, only the order of their completed reads before these writes, and an
      // acquire at cluster scope costs an L1 invalidation (CCTL.IVALL) every block.
      auto wait_buffer = [&]() {
        if (j >= 2) mbarrier_wait(&key_empty[b], ((j >> 1) & 1) ^ 1);
      };
      // 16 bytes at `dst`, and in a pair at the same offset of the peer's buffer (st.async, completing
      // bytes of the peer's key_full[b]).
      const uint32_t peer_full = kPair ? remote_shared_address(&key_full[b], peer) : 0u;
      auto store = [&](uint8_t* dst, const uint4& v) {
        *reinterpret_cast<uint4*>(dst) = v;
        if constexpr (kPair) st_async_16(peer_keys + static_cast<uint32_t>(dst - keys_s), v, peer_full);
      };
      int32_t slot[kKeysPerLane];
      bool valid[kKeysPerLane];
#pragma unroll
      for (int r = 0; r < kKeysPerLane; ++r) {
        slot[r] = slot_of(r);
        valid[r] = slot[r] >= 0 && slot[r] < p.num_slots;
      }
      if constexpr (R.fp8) {
        // Every round's loads before the buffer wait; invalid keys load zeros (and their bias masks them).
        uint4 nope[kRounds][kNope], rope[kRounds][2];
        float4 scale[kRounds];
#pragma unroll
        for (int q = 0; q < kRounds; ++q) {
          scale[q] = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
          for (int cb = 0; cb < kNope; ++cb) nope[q][cb] = make_uint4(0, 0, 0, 0);
          rope[q][0] = rope[q][1] = make_uint4(0, 0, 0, 0);
          if (pick(valid, q)) {
            const uint8_t* rec = p.cache + static_cast<int64_t>(pick(slot, q)) * R.bytes;
            scale[q] = __ldg(reinterpret_cast<const float4*>(rec + R.scale_offset));
#pragma unroll
            for (int cb = 0; cb < kNope; ++cb) {
              if constexpr (kPair) {
                const uint2 lo = __ldg(reinterpret_cast<const uint2*>(rec + 64 * cb + 8 * chunk0));
                const uint2 hi = __ldg(reinterpret_cast<const uint2*>(rec + 64 * cb + 8 * chunk1));
                nope[q][cb] = make_uint4(lo.x, lo.y, hi.x, hi.y);
              } else {
                nope[q][cb] = __ldg(reinterpret_cast<const uint4*>(rec + 64 * cb + 8 * chunk0));
              }
            }
            if constexpr (ROPE > 0) {
              rope[q][0] = __ldg(reinterpret_cast<const uint4*>(rec + R.rope_offset + 16 * chunk0));
              rope[q][1] = __ldg(reinterpret_cast<const uint4*>(rec + R.rope_offset + 16 * chunk1));
            }
          }
        }
        advance(j);
        prefetch_next();
        wait_buffer();
#pragma unroll
        for (int q = 0; q < kRounds; ++q) {
          const int key = round_key(q);
          const float sc[4] = {scale[q].x, scale[q].y, scale[q].z, scale[q].w};
#pragma unroll
          for (int cb = 0; cb < kNope; ++cb) {  // 16 E4M3 -> 16 F16 (x the tile's scale): chunks chunk0, chunk1
            const uint32_t w[4] = {nope[q][cb].x, nope[q][cb].y, nope[q][cb].z, nope[q][cb].w};
            uint32_t hv[8];
#pragma unroll
            for (int k = 0; k < 4; ++k) {
              e4m3x4_to_f16x2(w[k], hv[2 * k], hv[2 * k + 1]);
              hv[2 * k] = f16x2_scaled(hv[2 * k], sc[cb / 2]);
              hv[2 * k + 1] = f16x2_scaled(hv[2 * k + 1], sc[cb / 2]);
            }
            uint8_t* col = buf + cb * kKeyColBytes;
            store(col + swizzled(key, chunk0), make_uint4(hv[0], hv[1], hv[2], hv[3]));
            store(col + swizzled(key, chunk1), make_uint4(hv[4], hv[5], hv[6], hv[7]));
          }
          if constexpr (ROPE > 0) {
            uint8_t* col = buf + kNope * kKeyColBytes;
            store(col + swizzled(key, chunk0), rope[q][0]);
            store(col + swizzled(key, chunk1), rope[q][1]);
          }
        }
      } else {
        // BF16 records: NoPE dims as BF16 -> F16 (exact in F16's normal range, saturated beyond); one round
        // at a time (a key is 16 loads a lane), the first round's loads issued before the buffer wait.
        advance(j);
        prefetch_next();
#pragma unroll
        for (int q = 0; q < kRounds; ++q) {
          const int key = round_key(q);
          uint4 nope[kNope][2], rope[2];
#pragma unroll
          for (int cb = 0; cb < kNope; ++cb) nope[cb][0] = nope[cb][1] = make_uint4(0, 0, 0, 0);
          rope[0] = rope[1] = make_uint4(0, 0, 0, 0);
          if (pick(valid, q)) {
            const uint8_t* rec = p.cache + static_cast<int64_t>(pick(slot, q)) * R.bytes;
#pragma unroll
            for (int cb = 0; cb < kNope; ++cb) {
              nope[cb][0] = __ldg(reinterpret_cast<const uint4*>(rec + 128 * cb + 16 * chunk0));
              nope[cb][1] = __ldg(reinterpret_cast<const uint4*>(rec + 128 * cb + 16 * chunk1));
            }
            if constexpr (ROPE > 0) {
              rope[0] = __ldg(reinterpret_cast<const uint4*>(rec + R.rope_offset + 16 * chunk0));
              rope[1] = __ldg(reinterpret_cast<const uint4*>(rec + R.rope_offset + 16 * chunk1));
            }
          }
          if (q == 0) wait_buffer();
#pragma unroll
          for (int cb = 0; cb < kNope; ++cb) {
            uint8_t* col = buf + cb * kKeyColBytes;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const uint4 w = nope[cb][h];
              store(col + swizzled(key, h ? chunk1 : chunk0),
                    make_uint4(bf16x2_to_f16x2_satfinite(w.x), bf16x2_to_f16x2_satfinite(w.y),
                               bf16x2_to_f16x2_satfinite(w.z), bf16x2_to_f16x2_satfinite(w.w)));
            }
          }
          if constexpr (ROPE > 0) {
            uint8_t* col = buf + kNope * kKeyColBytes;
            store(col + swizzled(key, chunk0), rope[0]);
            store(col + swizzled(key, chunk1), rope[1]);
          }
        }
      }
      if (piece == 0) {
#pragma unroll
        for (int r = 0; r < kKeysPerLane; ++r)
          key_bias_s[b * kWgmmaBlockKeys + kbase + 32 * r] = valid[r] ? 0.f : -inf_f32();
      }
      fence_proxy_async();  // the block is read by wgmma
      if (expects_peer) {
        mbarrier_arrive_expect_bytes(&key_full[b], kPeerBytes);
      } else {
        mbarrier_arrive(&key_full[b]);
      }
    }
    leave();
    return;
  }

  const uint64_t key_desc0 = smem_desc_k_major_sw128(keys_s);
  // O of this warpgroup's 256 dims: dims 256 role + 8 (n / 4) + 2c + (n % 2), rows r0 / r1 by (n / 2) % 2.
  float o[128];
#pragma unroll
  for (int n = 0; n < 128; ++n) o[n] = 0.f;
  auto v_desc = [&](int b) {
    return smem_desc_mn_major_sw128(keys_s + b * S.key_buffer_bytes + 4 * role * kKeyColBytes, kKeyColBytes);
  };
  auto rescale_o = [&](const float(&alpha)[2]) {
    if (alpha[0] != 1.f || alpha[1] != 1.f) {
#pragma unroll
      for (int n = 0; n < 128; ++n) o[n] *= alpha[(n >> 1) & 1];
    }
  };
  // The epilogue, from the rows' final denominators (0: no valid key): this warpgroup's 256 dims of O into
  // the staging rows (over Q and the key buffers: every wgmma of both warpgroups is done by then), then
  // the 256 threads of both write whole rows, 16 bytes a store (ncu: the 8-byte fragment stores split in
  // two went out half a sector at a time and took a third of a one-block CTA's time).
  auto epilogue = [&](const float(&denom)[2]) {
    float* out_s = reinterpret_cast<float*>(smem + S.out);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float f = denom[r] > 0.f ? 1.f / denom[r] : 0.f;
      float* row = out_s + (r ? r1 : r0) * kWgmmaOutRow + 256 * role + 2 * c;
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        const int n = 4 * i + 2 * r;
        *reinterpret_cast<float2*>(row + 8 * i) = make_float2(o[n] * f, o[n + 1] * f);
      }
    }
    mbarrier_arrive(staged);
    mbarrier_wait(staged, 0);
    const int tid = threadIdx.x;  // 0-255: the S and second P.V warpgroups
    if (p.splits > 1) {
      constexpr int kPer = kNopeDims / 4;  // float4 a row
#pragma unroll 8
      for (int k = tid; k < kWgmmaHeads * kPer; k += 256) {
        const int row = k / kPer, q = k % kPer;
        const int64_t th = (kPair ? out_row0() : t * H + head0) + row;
        *reinterpret_cast<float4*>(p.part_out + (th * p.splits + split) * kNopeDims + 4 * q) =
            *reinterpret_cast<const float4*>(out_s + row * kWgmmaOutRow + 4 * q);
      }
    } else {
      constexpr int kPer = kNopeDims / 8;  // 8 BF16 a store
#pragma unroll 8
      for (int k = tid; k < kWgmmaHeads * kPer; k += 256) {
        const int row = k / kPer, q = k % kPer;
        const float4 a = *reinterpret_cast<const float4*>(out_s + row * kWgmmaOutRow + 8 * q);
        const float4 b = *reinterpret_cast<const float4*>(out_s + row * kWgmmaOutRow + 8 * q + 4);
        *reinterpret_cast<uint4*>(p.out + ((kPair ? out_row0() : t * H + head0) + row) * kNopeDims + 8 * q) =
            make_uint4(pack_bf16x2(a.x, a.y), pack_bf16x2(a.z, a.w), pack_bf16x2(b.x, b.y), pack_bf16x2(b.z, b.w));
      }
    }
  };

  if (role == 1) {
    // ================= second P.V warpgroup: dims 256-511, P from shared memory =================
    set_max_registers_decrease<kPvRegisters>();
    const uint64_t p_desc = smem_desc_k_major_sw128(probs_s);
    for (int i = 0; i < nblocks; ++i) {
      const int b = i & 1;
      mbarrier_wait(&key_full[b], (i >> 1) & 1);
      mbarrier_wait(probs_full, i & 1);
      const float alpha[2] = {alpha_s[r0], alpha_s[r1]};
      rescale_o(alpha);
      wgmma_fence();
#pragma unroll
      for (int s = 0; s < 4; ++s) WgmmaSsF16MnB<256>::mma(o, p_desc + 2 * s, v_desc(b) + s * kKStep, true);
      wgmma_commit();
      wgmma_wait<0>();
#pragma unroll
      for (int n = 0; n < 128; ++n) fence_operand(o[n]);
      mbarrier_arrive(probs_empty);
      release_keys(b);
    }
    mbarrier_arrive(pv_done);
    mbarrier_wait(denom_ready, 0);
    const float denom[2] = {denom_s[r0], denom_s[r1]};
    epilogue(denom);
    leave();
    return;
  }

  // ================= S warpgroup: S, softmax, LSE, P.V of dims 0-255 =================
  set_max_registers_increase<kSRegisters>();
  const float inv_pre[2] = {inv_pre_s[r0], inv_pre_s[r1]};
  const float row_scale[2] = {p.scale_log2 * inv_pre[0], p.scale_log2 * inv_pre[1]};
  const uint64_t q_desc = smem_desc_k_major_sw128(q_s);
  float sacc[32];     // S, then P, of the block: keys 8 (n / 4) + 2c + (n % 2), rows r0 / r1 by (n / 2) % 2
  uint32_t pa[4][4];  // the previous block's P as wgmma A fragments (F16), per k16 step
  float m_run[2] = {-inf_f32(), -inf_f32()}, l_run[2] = {0.f, 0.f};

  auto issue_s = [&](int b) {
    const uint64_t k_desc = key_desc0 + b * (S.key_buffer_bytes >> 4);
    wgmma_fence();
#pragma unroll
    for (int cb = 0; cb < kNope; ++cb) {
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        WgmmaSs16<64, false>::mma(sacc, q_desc + cb * kQCol + 2 * kk, k_desc + cb * kKCol + 2 * kk, cb + kk > 0);
      }
    }
    if constexpr (ROPE > 0) {
#pragma unroll
      for (int kk = 0; kk < ROPE / 16; ++kk) {
        WgmmaSs16<64, true>::mma(sacc, q_desc + kNope * kQCol + 2 * kk, k_desc + kNope * kKCol + 2 * kk, true);
      }
    }
    wgmma_commit();
  };
  auto issue_pv = [&](int b) {
#pragma unroll
    for (int s = 0; s < 4; ++s) WgmmaRsF16MnB<256>::mma(o, pa[s], v_desc(b) + s * kKStep, true);
    wgmma_commit();
  };
  // The online softmax of block i (S complete in sacc): P into sacc (F16-safe: < 2^kStaleMax), its row
  // sums into l_run, P and the rescales to the second P.V warpgroup; returns the rows' rescales.
  // The block's key biases (0 / -inf), read before its S is waited on: their shared-memory latency then
  // hides under the wgmma instead of stalling the softmax.
  auto load_bias = [&](int b, float2(&bias)[8]) {
#pragma unroll
    for (int q = 0; q < 8; ++q)
      bias[q] = *reinterpret_cast<const float2*>(key_bias_s + b * kWgmmaBlockKeys + 8 * q + 2 * c);
  };
  auto softmax = [&](int i, const float2(&bias)[8], float(&alpha)[2]) {
#pragma unroll
    for (int n = 0; n < 32; ++n) fence_operand(sacc[n]);
    float mx[2] = {-inf_f32(), -inf_f32()};
#pragma unroll
    for (int q = 0; q < 8; ++q) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int n = 4 * q + e;
        sacc[n] = fmaf(sacc[n], row_scale[e >> 1], (e & 1) ? bias[q].y : bias[q].x);
        mx[e >> 1] = fmaxf(mx[e >> 1], sacc[n]);
      }
    }
    float base[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(~0u, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(~0u, mx[r], 2));
      const bool move = mx[r] > m_run[r] + kStaleMax;
      alpha[r] = move ? exp2f(m_run[r] - mx[r]) : 1.f;
      if (move) m_run[r] = mx[r];
      base[r] = m_run[r] == -inf_f32() ? 0.f : m_run[r];
    }
    float rsum[2] = {0.f, 0.f};
#pragma unroll
    for (int n = 0; n < 32; ++n) {
      sacc[n] = exp2f(sacc[n] - base[(n >> 1) & 1]);
      rsum[(n >> 1) & 1] += sacc[n];
    }
    l_run[0] = l_run[0] * alpha[0] + rsum[0];
    l_run[1] = l_run[1] * alpha[1] + rsum[1];
    // P (F16) and the rescales to the second P.V warpgroup, once it has read the previous block's.
    if (i > 0) mbarrier_wait(probs_empty, (i - 1) & 1);
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      *reinterpret_cast<uint32_t*>(probs_s + swizzled(r0, q) + 4 * c) = pack_f16x2(sacc[4 * q], sacc[4 * q + 1]);
      *reinterpret_cast<uint32_t*>(probs_s + swizzled(r1, q) + 4 * c) = pack_f16x2(sacc[4 * q + 2], sacc[4 * q + 3]);
    }
    if (c == 0) alpha_s[r0] = alpha[0], alpha_s[r1] = alpha[1];
    fence_proxy_async();  // P is read by wgmma
    mbarrier_arrive(probs_full);
  };
  auto pack_p = [&]() {
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      pa[s][0] = pack_f16x2(sacc[8 * s], sacc[8 * s + 1]);
      pa[s][1] = pack_f16x2(sacc[8 * s + 2], sacc[8 * s + 3]);
      pa[s][2] = pack_f16x2(sacc[8 * s + 4], sacc[8 * s + 5]);
      pa[s][3] = pack_f16x2(sacc[8 * s + 6], sacc[8 * s + 7]);
    }
  };

  // Block 0 alone; then each block's S goes out right after the previous block's P.V, and that P.V is
  // waited on first: the previous block's key buffer goes back to the producer as soon as its P.V is done,
  // so the producer converts block i + 1 while S and the softmax of block i run (releasing it after the
  // softmax, as v15 did, left the producer and the S warpgroup in series: ncu, NOTES "v17"). No wgmma is in
  // flight across the loop's back edge (ptxas would serialize every wgmma otherwise).
  if (nblocks > 0) {
    float alpha[2];
    float2 bias[8];
    mbarrier_wait(&key_full[0], 0);
    issue_s(0);
    load_bias(0, bias);
    wgmma_wait<0>();
    softmax(0, bias, alpha);
    pack_p();
  }
  for (int i = 1; i < nblocks; ++i) {
    const int b = i & 1;
    float alpha[2];
    float2 bias[8];
    mbarrier_wait(&key_full[b], (i >> 1) & 1);
    wgmma_fence();
    issue_pv(b ^ 1);
    issue_s(b);
    wgmma_wait<1>();  // P.V of block i - 1
#pragma unroll
    for (int n = 0; n < 128; ++n) fence_operand(o[n]);
    release_keys(b ^ 1);
    load_bias(b, bias);
    wgmma_wait<0>();  // S of block i
    softmax(i, bias, alpha);
    rescale_o(alpha);
    pack_p();
  }
  if (nblocks > 0) {
    const int b = (nblocks - 1) & 1;
    wgmma_fence();
    issue_pv(b);
    wgmma_wait<0>();
#pragma unroll
    for (int n = 0; n < 128; ++n) fence_operand(o[n]);
    release_keys(b);
  }

  float l_fin[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l_fin[r] = l_run[r];
    l_fin[r] += __shfl_xor_sync(~0u, l_fin[r], 1);
    l_fin[r] += __shfl_xor_sync(~0u, l_fin[r], 2);
  }
  // The softmax denominators (with the sink's term) for both P.V warpgroups; 0 where no key was valid.
  float denom[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    denom[r] = m_run[r] != -inf_f32() ? l_fin[r] + exp2f(sink_s[r ? r1 : r0] - m_run[r]) : 0.f;
  }
  if (c == 0) denom_s[r0] = denom[0], denom_s[r1] = denom[1];
  mbarrier_arrive(denom_ready);
  if (c == 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t th = (kPair ? out_row0() : t * H + head0) + (r ? r1 : r0);
      const bool any = m_run[r] != -inf_f32();
      const float lse = (m_run[r] + log2f(l_fin[r])) * kLn2;
      if (p.splits > 1) {
        p.part_lse[th * p.splits + split] = any ? lse : -inf_f32();
      } else {
        p.lse[th] = any ? lse : inf_f32();
      }
    }
  }
  mbarrier_wait(pv_done, 0);
  epilogue(denom);
  leave();
}

}  // namespace chord::sparse_mla
