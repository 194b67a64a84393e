// W4A16 grouped GEMM (SM90): out[row, n] = sum_k A[row, k] * W_e[n, k] for the expert e of each row.
//
// Persistent and warp-specialized: warpgroup 0 is the producer (one thread issues tensor copies of the
// activation tile and bulk copies of packed-weight and scale tiles into a STAGES-deep ring, each stage
// completing on its `full` mbarrier); the CONSUMERS other warpgroups (2 or 4) consume. A consumer
// dequantizes its weight rows straight into wgmma A-operand registers (weights on wgmma M, BM tokens on
// wgmma N, the activation tile read from shared memory by descriptor), so dequantized weights never go
// back to shared memory. The fragment registers are buffered as RING says (params.cuh): kRingBlock issues a
// K block's wgmmas and commits, then loads and dequantizes the next block into the other register buffer
// while they run (wait<1> frees the older buffer and its ring stage); kRingStep does the same one k16 step
// deep, the block's packed words and scale pairs read into registers once (a wait per step, half the
// fragment registers); kRingSingle waits for a block's wgmmas before dequantizing the next block into the
// one buffer, leaving the overlap to the other consumer warpgroups (four of two slices fit their 112
// registers with one K block of fragments: Humming's arrangement); kRingHalf does the same by half blocks,
// so 56-64-token tiles fit. Dequant is exact per element:
// 0x4300 | nibble is 128 + nibble in BF16, minus 136 gives q, times the group's BF16 scale gives RN(q * s),
// the unfused BF16 rounding. FP32 accumulators; the epilogue goes through shared memory to 16-byte row
// stores of the valid rows only.
//
// Indexed mode (the W4A16 indexed family's prefill profile) gathers instead: the activation rows of a
// tile are routes of vLLM's sorted routing, so all four producer warps copy them with cp.async (16 bytes
// per lane, written in the tensor map's 128-byte swizzle so the consumers cannot tell the difference,
// zeros for padding slots; each thread keeps its rows' tokens in registers for the whole tile and asks
// L2 for 256 bytes, the next K block of the row included), and the epilogue scatters each token column
// to its route's output row.
#pragma once

#include "common/gpu_flags.cuh"
#include "common/int4.cuh"
#include "common/tma.cuh"
#include "common/warpgroup.cuh"
#include "grouped/layout.cuh"
#include "grouped/params.cuh"
#include "grouped/scheduler.cuh"

namespace chord::grouped {

// The output rows (routes) of the tile's tokens this thread stores in the epilogue: -1 for padding.
template <int BM, int VEC_PER_ROW, int STORES>
__device__ __forceinline__ void load_routes(int (&route)[STORES], const IndexedRouting& indexed, int tid, int row0) {
#pragma unroll
  for (int j = 0; j < STORES; ++j) {
    const int v = tid + 128 * j;
    route[j] = v < BM * VEC_PER_ROW ? routing_route_of(indexed, row0 + v / VEC_PER_ROW) : -1;
  }
}

// A thread's packed words and scale pairs (rows g and g + 8) of STEPS k16 steps of a stage's slices, as read
// from shared memory: what the rings dequantize into wgmma fragments.
template <int SLICES, int STEPS>
struct PackedWords {
  uint32_t words[SLICES][STEPS];
  uint32_t scales[SLICES][STEPS / 2][2];  // one pair per 32-K scale group
};

// A compile-time int: one of the two fragment register buffers, or a step count (register arrays need
// constant indices).
template <int V>
struct Const {
  static constexpr int value = V;
};

template <int MODE, int N, int K, int EXPERTS, int BM, int SLICES, int BLOCK_K, int STAGES, int CONSUMERS, int RING,
          int STREAM>
__global__ void __launch_bounds__(threads(CONSUMERS), 1)
    grouped_gemm_kernel(const __grid_constant__ TensorMap act_map, const uint32_t* __restrict__ packed,
                        const bf16* __restrict__ packed_scale, const int32_t* __restrict__ routing, int rows,
                        const IndexedRouting indexed, bf16* __restrict__ out, const StreamWorkspace stream_ws) {
  using Smem = GemmSmem<BM, SLICES, BLOCK_K, STAGES, CONSUMERS>;
  using Mma = WgmmaRs<BM>;
  constexpr int kBlockN = Smem::kBlockN, kNBlocks = N / kBlockN, kKBlocks = K / BLOCK_K;
  constexpr int kSteps = BLOCK_K / 16, kGroups = BLOCK_K / kGroup, kChunks = BLOCK_K / 64;
  static_assert(BM % 8 == 0 && BM >= 8 && BM <= 256, "wgmma N is 8..256 in steps of 8");
  static_assert(N % kBlockN == 0 && K % BLOCK_K == 0, "shape must tile exactly");
  static_assert(valid_consumers(CONSUMERS), "2 or 4 consumer warpgroups");
  static_assert(valid_ring(RING), "kRingBlock, kRingStep, kRingSingle or kRingHalf");
  constexpr bool kStepRing = RING == kRingStep;
  static_assert(setmaxnreg_fits_launch(threads(CONSUMERS), producer_registers(CONSUMERS, RING) +
                                                               CONSUMERS * consumer_registers(CONSUMERS, RING)),
                "setmaxnreg past the pool");
  static_assert(kSteps % 2 == 0, "the step ring starts every K block on fragment buffer 0");
  using Sched = Scheduler<MODE, BM, kNBlocks, EXPERTS, kKBlocks, STREAM>;
  static_assert(EXPERTS >= 1 && EXPERTS <= Sched::kMaxGroups, "experts");
  // Short K (TP down: 4 K blocks a tile) restarts the pipeline empty at every tile. With an even number of
  // K blocks the block ring's main loop ends on buffer 1 (the step ring: always; the single ring has one
  // buffer, free once the last wgmmas are waited for), so there the next tile's first K block (step) is
  // waited for, loaded and dequantized into buffer 0 under the tile's last wgmmas (the single ring: after
  // them), before its epilogue (its ring stage is free by then: every older stage is released). Long K keeps
  // the plain loop (H200, v5 in bench/NOTES.md).
  constexpr bool kLookAhead = (RING != kRingBlock || kKBlocks % 2 == 0) && kKBlocks <= kShortTileKBlocks;
  static_assert(!STREAM || !kLookAhead, "stream-K: long K");
  static_assert(RING != kRingHalf || !kLookAhead, "the half ring: long K");

  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (smem_address(smem_raw) & 1023)) & 1023);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + Smem::kBarrierOffset);
  uint64_t* empty = full + STAGES;
  Sched sched{routing, rows, reinterpret_cast<int*>(smem + Smem::kPrefixOffset), indexed,
              reinterpret_cast<uint16_t*>(smem + stream_list_offset(Smem::kLayout, EXPERTS))};
  constexpr bool kGather = MODE == kIndexed;

  const int warpgroup = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    if constexpr (!kGather) prefetch_tensor_map(&act_map);
    for (int s = 0; s < STAGES; ++s) {
      // Gathering: one cp.async arrival per producer thread, plus the expect-bytes arrival.
      mbarrier_init(&full[s], kGather ? 129 : 1);
      mbarrier_init(&empty[s], 4 * CONSUMERS);  // one arrival per consumer warp
    }
    fence_barrier_init();
  }
  sched.prepare(threadIdx.x, blockDim.x);
  __syncthreads();

  if (warpgroup == 0) {
    set_max_registers_decrease<producer_registers(CONSUMERS, RING)>();
    // The tile's packed slices and scales for K block kb, by bulk copies completing on `bar`.
    auto copy_weights = [&](uint8_t* stage, const Tile& t, int kb, uint64_t* bar) {
      uint8_t* w = stage + Smem::kActBytes;
      for (int q = 0; q < CONSUMERS * SLICES; ++q) {
        bulk_copy(w + q * (kSliceRows * BLOCK_K / 2),
                  packed + slice_block_offset<N, K, BLOCK_K>(t.expert, t.n_block * CONSUMERS * SLICES + q, kb),
                  kSliceRows * BLOCK_K / 2, bar);
      }
      uint8_t* sc = w + Smem::kWeightBytes;
      for (int g = 0; g < kGroups; ++g) {
        bulk_copy(sc + g * kBlockN * 2,
                  packed_scale + (static_cast<long long>(t.expert) * (K / kGroup) + kb * kGroups + g) * N +
                      t.n_block * kBlockN,
                  kBlockN * 2, bar);
      }
    };
    if constexpr (kGather) {
      // Producer thread p copies the 16-byte column p % 8 of the tile rows p / 8 + 16 i (every chunk):
      // the rows' source offsets are read from the routing once per tile and kept in registers, so a
      // copy costs one multiply-add on its row and the stage's base. The destination follows the
      // 128-byte swizzle (chunk col of row r at col ^ (r % 8)); r % 8 is the same for all of a thread's rows.
      constexpr int kRowsPerThread = (BM + 15) / 16;
      const int ptid = threadIdx.x, col = ptid % 8, row0 = ptid / 8;
      const int dst0 = row0 * 128 + ((col ^ (row0 & 7)) << 4);
      int it = 0;
      for (auto c = sched.first(); !sched.done(c); c = sched.after(c)) {
        const Segment seg = sched.segment(c);
        const Tile t = sched.tile(seg.index);
        if (t.expert < 0) continue;
        int token[kRowsPerThread];  // -1: padding slot (zero-filled)
#pragma unroll
        for (int i = 0; i < kRowsPerThread; ++i) {
          token[i] = row0 + 16 * i < BM ? routing_token_of(indexed, t.row0 + row0 + 16 * i) : -1;
        }
        for (int kb = seg.kb0; kb < seg.kb1; ++kb, ++it) {
          const int s = it % STAGES;
          mbarrier_wait(&empty[s], ((it / STAGES) & 1) ^ 1);
          uint8_t* stage = smem + s * Smem::kStageBytes;
          if (ptid == 0) {
            mbarrier_arrive_expect_bytes(&full[s], Smem::kWeightBytes + Smem::kScaleBytes);
            copy_weights(stage, t, kb, &full[s]);
          }
#pragma unroll
          for (int c = 0; c < kChunks; ++c) {
            const bf16* src = indexed.a + kb * BLOCK_K + c * 64 + col * 8;
#pragma unroll
            for (int i = 0; i < kRowsPerThread; ++i) {
              if (row0 + 16 * i < BM) {
                cp_async_16_or_zero(stage + c * Smem::kActChunkBytes + dst0 + i * 16 * 128,
                                    src + static_cast<long long>(max(token[i], 0)) * K, token[i] >= 0);
              }
            }
          }
          cp_async_arrive(&full[s]);
        }
      }
      return;
    }
    if (threadIdx.x >= 32) return;
    int it = 0;
    for (auto c = sched.first(); !sched.done(c); c = sched.after(c)) {
      const Segment seg = sched.segment(c);
      const Tile t = sched.tile(seg.index);
      if (t.expert < 0) continue;
      if (threadIdx.x == 0) {
        for (int kb = seg.kb0; kb < seg.kb1; ++kb, ++it) {
          const int s = it % STAGES;
          mbarrier_wait(&empty[s], ((it / STAGES) & 1) ^ 1);
          uint8_t* stage = smem + s * Smem::kStageBytes;
          mbarrier_arrive_expect_bytes(&full[s], Smem::kActBytes + Smem::kWeightBytes + Smem::kScaleBytes);
          for (int c = 0; c < kChunks; ++c) {
            tensor_copy_2d(stage + c * Smem::kActChunkBytes, &act_map, kb * BLOCK_K + c * 64, t.row0, &full[s]);
          }
          copy_weights(stage, t, kb, &full[s]);
        }
      } else {
        it += seg.kb1 - seg.kb0;
      }
    }
    return;
  }

  set_max_registers_increase<consumer_registers(CONSUMERS, RING)>();
  const int consumer = warpgroup - 1, tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4;
  // This thread's weight rows inside the tile: slice (consumer * SLICES + j), rows 16*warp + g (+8).
  const int row_in_slice = warp * 16 + g;
  bf16* epilogue = reinterpret_cast<bf16*>(smem + STAGES * Smem::kStageBytes) + consumer * BM * Smem::kEpiloguePitch;

  float acc[SLICES][Mma::kAccumulators];
  // Fragment buffers: two of a whole K block, two of one k16 step (the step ring: the block's packed words
  // and scale pairs then stay in registers and each step is dequantized while the previous one's wgmmas
  // run), one of a K block (the single ring) or of half a K block (the half ring).
  constexpr int kFragSteps = kStepRing ? 1 : (RING == kRingHalf ? kSteps / 2 : kSteps);
  constexpr int kFragBuffers = one_buffer_ring(RING) ? 1 : 2;
  uint32_t frag[kFragBuffers][SLICES][kFragSteps][4];
  // Step ring: the current K block's words and scales, read once, dequantized a k16 step at a time.
  PackedWords<SLICES, kSteps> ring;
  int it = 0;

  // Reads k16 steps [FIRST, FIRST + STEPS) of stage `s` for this thread. The half ring reads the next half's
  // under the current half's wgmmas and dequantizes them once those are done.
  auto load_packed = [&](auto steps_tag, int s, auto first_tag) {
    constexpr int STEPS = decltype(steps_tag)::value, FIRST = decltype(first_tag)::value;
    static_assert(FIRST % 2 == 0 && FIRST + STEPS <= kSteps && (STEPS % 4 == 0 || STEPS == 2),
                  "whole blocks, or halves of a 64-K block: whole scale groups");
    const uint8_t* w = smem + s * Smem::kStageBytes + Smem::kActBytes;
    const bf16* sc = reinterpret_cast<const bf16*>(w + Smem::kWeightBytes);
    PackedWords<SLICES, STEPS> p;
#pragma unroll
    for (int j = 0; j < SLICES; ++j) {
      const int slice = consumer * SLICES + j;
      // A 16-byte chunk holds this thread's words of four k16 steps.
      if constexpr (STEPS % 4 == 0) {
#pragma unroll
        for (int c = 0; c < STEPS / 4; ++c) {
          const uint4 v = *reinterpret_cast<const uint4*>(w + slice * (kSliceRows * BLOCK_K / 2) +
                                                          ((warp * kChunks + FIRST / 4 + c) * 32 + lane) * 16);
          p.words[j][4 * c + 0] = v.x;
          p.words[j][4 * c + 1] = v.y;
          p.words[j][4 * c + 2] = v.z;
          p.words[j][4 * c + 3] = v.w;
        }
      } else {
        const uint2 v = *reinterpret_cast<const uint2*>(
            w + slice * (kSliceRows * BLOCK_K / 2) + ((warp * kChunks + FIRST / 4) * 32 + lane) * 16 + FIRST % 4 * 4);
        p.words[j][0] = v.x;
        p.words[j][1] = v.y;
      }
#pragma unroll
      for (int gi = 0; gi < STEPS / 2; ++gi) {
        const bf16* group_scales = sc + (FIRST / 2 + gi) * kBlockN + slice * kSliceRows + row_in_slice;
        p.scales[j][gi][0] = bf16_pair(group_scales[0].bits);
        p.scales[j][gi][1] = bf16_pair(group_scales[8].bits);
      }
    }
    return p;
  };
  // Dequantizes what load_packed read (kFragSteps steps) into frag[BUF].
  auto dequant_packed = [&](auto buf_tag, const auto& p) {
    constexpr int BUF = decltype(buf_tag)::value;
#pragma unroll
    for (int j = 0; j < SLICES; ++j) {
#pragma unroll
      for (int gi = 0; gi < kFragSteps / 2; ++gi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          dequant_int4_word(p.words[j][2 * gi + h], p.scales[j][gi][0], p.scales[j][gi][1], frag[BUF][j][2 * gi + h]);
        }
      }
    }
  };
  // Stage `s`'s k16 steps [FIRST, FIRST + kFragSteps) into frag[BUF] (the whole block but for the half ring).
  auto load_and_dequant = [&](auto buf_tag, int s, auto first_tag) {
    dequant_packed(buf_tag, load_packed(Const<kFragSteps>{}, s, first_tag));
  };

  // Step ring: reads stage `s`'s whole K block for this thread into `ring`.
  auto load_block = [&](int s) { ring = load_packed(Const<kSteps>{}, s, Const<0>{}); };
  // Step ring: dequantizes k16 step `step` of the loaded block into frag[BUF].
  auto dequant_step = [&](auto buf_tag, int step) {
    constexpr int BUF = decltype(buf_tag)::value;
#pragma unroll
    for (int j = 0; j < SLICES; ++j) {
      const int gi = step * 16 / kGroup;
      dequant_int4_word(ring.words[j][step], ring.scales[j][gi][0], ring.scales[j][gi][1], frag[BUF][j][0]);
    }
  };

  // Issues the wgmmas of k16 steps [first, first + kCount) of stage `s` from frag[BUF] (step first + i in
  // frag[BUF][j][i]) and commits them as one batch; `accumulate` false zeroes the accumulators first.
  auto issue = [&](auto buf_tag, auto count_tag, int s, int first, bool accumulate) {
    constexpr int BUF = decltype(buf_tag)::value, kCount = decltype(count_tag)::value;
    const uint8_t* act = smem + s * Smem::kStageBytes;
#pragma unroll
    for (int j = 0; j < SLICES; ++j) {
#pragma unroll
      for (int i = 0; i < Mma::kAccumulators; ++i) fence_operand(acc[j][i]);
    }
    wgmma_fence();
#pragma unroll
    for (int i = 0; i < kCount; ++i) {
      // k16 step: 32 bytes into the 128-byte swizzled row of chunk step / 4.
      const int step = first + i;
      const uint64_t desc = smem_desc_k_major_sw128(act + (step / 4) * Smem::kActChunkBytes) + ((step % 4) * 32 >> 4);
#pragma unroll
      for (int j = 0; j < SLICES; ++j) Mma::mma(acc[j], frag[BUF][j][i], desc, accumulate || i > 0);
    }
    wgmma_commit();
#pragma unroll
    for (int j = 0; j < SLICES; ++j) {
#pragma unroll
      for (int i = 0; i < Mma::kAccumulators; ++i) fence_operand(acc[j][i]);
    }
  };

  // Waits for ring entry `it` to fill. Gathered activations were written by the generic proxy (cp.async):
  // fence before wgmma reads them through the async proxy.
  auto wait_full = [&](int it_next) {
    mbarrier_wait(&full[it_next % STAGES], (it_next / STAGES) & 1);
    if constexpr (kGather) fence_proxy_async();
  };

  auto release = [&](int s) {
    __syncwarp();
    if (lane == 0) mbarrier_arrive(&empty[s]);
  };

  // Segments in the producer's order, those without work (expert < 0) skipped.
  auto tile_at = [&](typename Sched::Cursor c) {
    Tile t{};
    t.expert = -1;
    if (!sched.done(c)) t = sched.tile(sched.segment(c).index);
    return t;
  };
  auto skip_idle = [&](typename Sched::Cursor& c, Tile& t) {
    while (!sched.done(c) && t.expert < 0) {
      c = sched.after(c);
      t = tile_at(c);
    }
  };
  constexpr int kVecPerRow = SLICES * kSliceRows / 8;
  constexpr int kStores = (BM * kVecPerRow + 127) / 128;  // 16-byte output stores per thread and tile
  auto cursor = sched.first();
  Tile tile = tile_at(cursor);
  skip_idle(cursor, tile);
  bool ahead = false;  // frag[0] already holds this tile's first K block
  while (!sched.done(cursor)) {
    const Segment seg = sched.segment(cursor);
    const int count = STREAM ? seg.kb1 - seg.kb0 : kKBlocks;  // K blocks of this segment
    // Loads whose results are needed only at the end of the tile, issued now so the main loop hides them:
    // the next tile (its expert id) and, indexed, the output rows this thread stores. Stream-K loads the rows
    // after its main loop instead: held through it they cost the registers whose lack spilled (NVRTC, 8
    // bytes at block_m 48 on the single ring, 44 at 112 with two consumers), and most of its segments
    // store partial sums, not rows. So does the half ring (4-16 bytes of spills at block_m 64).
    auto next_cursor = sched.after(cursor);
    Tile next = tile_at(next_cursor);
    int route[kStores];
    constexpr bool kRoutesAfterLoop = STREAM || RING == kRingHalf;
    if constexpr (MODE == kIndexed && !kRoutesAfterLoop) load_routes<BM, kVecPerRow>(route, indexed, tid, tile.row0);
    bool look = false;  // the next tile's first K block is loaded during this one
    if (!ahead) {
      wait_full(it);
      if constexpr (kStepRing) {
        load_block(it % STAGES);
        dequant_step(Const<0>{}, 0);
      } else {
        load_and_dequant(Const<0>{}, it % STAGES, Const<0>{});
      }
    }
    if constexpr (RING == kRingSingle) {
      // The single ring: block kb's wgmmas complete before block kb + 1 (at the tile's last block, with
      // kLookAhead, the next tile's first) is dequantized into the one buffer; its stage is released once
      // they are done, but the last block's, which the common code below releases.
      for (int kb = 0; kb < count; ++kb) {
        issue(Const<0>{}, Const<kSteps>{}, (it + kb) % STAGES, 0, kb > 0);
        bool more = kb + 1 < count;
        if constexpr (kLookAhead) {
          if (!more) {
            skip_idle(next_cursor, next);
            look = more = !sched.done(next_cursor);
          }
        }
        wgmma_wait<0>();
        if (kb + 1 < count) release((it + kb) % STAGES);
        if (more) {
          wait_full(it + kb + 1);
          load_and_dequant(Const<0>{}, (it + kb + 1) % STAGES, Const<0>{});
        }
      }
    } else if constexpr (RING == kRingHalf) {
      // The half ring: the single ring over half blocks. Half 0 of block kb is in the buffer; while its
      // wgmmas run, half 1's words and scales are read from the same stage; once they complete half 1 is
      // dequantized and issued, and under its wgmmas half 0 of block kb + 1 is read (its stage waited for).
      // Then the stage is released (but the last block's, which the common code below releases) and the
      // next half 0 dequantized. Shared-memory latency stays off the warpgroup's chain, as in Humming.
      constexpr int kHalf = kSteps / 2;
      for (int kb = 0; kb < count; ++kb) {
        const int s = (it + kb) % STAGES;
        const bool more = kb + 1 < count;
        issue(Const<0>{}, Const<kHalf>{}, s, 0, kb > 0);
        const auto second = load_packed(Const<kHalf>{}, s, Const<kHalf>{});
        wgmma_wait<0>();
        dequant_packed(Const<0>{}, second);
        issue(Const<0>{}, Const<kHalf>{}, s, kHalf, true);
        PackedWords<SLICES, kHalf> next;
        if (more) {
          wait_full(it + kb + 1);
          next = load_packed(Const<kHalf>{}, (it + kb + 1) % STAGES, Const<0>{});
        }
        wgmma_wait<0>();
        if (more) {
          release(s);
          dequant_packed(Const<0>{}, next);
        }
      }
    } else if constexpr (kStepRing) {
      // The step ring's main loop body: issue k16 step `step` of K block kb from frag[BUF], then, once the
      // previous step's batch is done (its buffer is the other one), dequantize the next step into it: this
      // block's next, or at its last step the next K block's first (loaded from the ring first), the next
      // tile's when kLookAhead. The tile's last block (LAST) ends with wait<0> when nothing follows: with a
      // conditional wait<1> in the loop ptxas serialized every wgmma (C7514), and with wait<1> there and
      // wait<0> after the loop it hoisted the epilogue's reads of the accumulators above the wait.
      auto ring_step = [&](auto buf_tag, auto last_tag, int kb, int step) {
        constexpr int BUF = decltype(buf_tag)::value;
        issue(buf_tag, Const<1>{}, (it + kb) % STAGES, step, kb > 0 || step > 0);
        if (step + 1 < kSteps) {
          wgmma_wait<1>();
          if (step == 0 && kb > 0) release((it + kb - 1) % STAGES);  // block kb - 1's last batch is done
          dequant_step(Const<1 - BUF>{}, step + 1);
          return;
        }
        bool more = !decltype(last_tag)::value;
        if constexpr (kLookAhead && decltype(last_tag)::value) {
          skip_idle(next_cursor, next);
          look = more = !sched.done(next_cursor);
        }
        if (more) {
          wait_full(it + kb + 1);
          load_block((it + kb + 1) % STAGES);
          wgmma_wait<1>();
          dequant_step(Const<0>{}, 0);
        } else {
          wgmma_wait<0>();
        }
      };
      auto ring_block = [&](auto last_tag, int kb) {
#pragma unroll
        for (int step = 0; step < kSteps; step += 2) {
          ring_step(Const<0>{}, last_tag, kb, step);
          ring_step(Const<1>{}, last_tag, kb, step + 1);
        }
      };
      for (int kb = 0; kb + 1 < count; ++kb) ring_block(Const<0>{}, kb);
      ring_block(Const<1>{}, count - 1);
    } else {
      // Main loop over K blocks, two per iteration so the register buffer index is a constant.
      for (int kb = 0; kb < count; kb += 2) {
        {
          const int s = (it + kb) % STAGES;
          issue(Const<0>{}, Const<kSteps>{}, s, 0, kb > 0);
          if (kb + 1 < count) wait_full(it + kb + 1);
          wgmma_wait<1>();
          if (kb > 0) release((it + kb - 1) % STAGES);
          if (kb + 1 < count) load_and_dequant(Const<1>{}, (it + kb + 1) % STAGES, Const<0>{});
        }
        if (kb + 1 < count) {
          const int s = (it + kb + 1) % STAGES;
          issue(Const<1>{}, Const<kSteps>{}, s, 0, true);
          if (kb + 2 < count) wait_full(it + kb + 2);
          wgmma_wait<1>();
          release((it + kb) % STAGES);
          if (kb + 2 < count) {
            load_and_dequant(Const<0>{}, (it + kb + 2) % STAGES, Const<0>{});
          } else if constexpr (kLookAhead) {
            skip_idle(next_cursor, next);
            look = !sched.done(next_cursor);
            if (look) {
              wait_full(it + count);
              load_and_dequant(Const<0>{}, (it + count) % STAGES, Const<0>{});
            }
          }
        }
      }
    }
    wgmma_wait<0>();
    release((it + count - 1) % STAGES);
    it += count;

    // Stream-K: a segment that is not the whole tile. One that ends before the tile's last K block (this CTA's
    // first) stores its partial sums (this CTA's slot, the warpgroup's part; float4 q of slice j at
    // [(j * kAccumulators / 4 + q) * 128 + thread]) and raises its flag; the one that ends it (this CTA's last)
    // adds the partials of the earlier CTAs that share the tile, in CTA order (deterministic), then stores it.
    bool store_tile = true;
    if constexpr (STREAM) {
      constexpr int kQuads = Mma::kAccumulators / 4;
      auto slot = [&](long long cta) {
        return reinterpret_cast<float4*>(stream_ws.partials) + cta * (kBlockN * BM / 4) +
               consumer * (SLICES * kQuads * 128);
      };
      if (sched.streaming() && seg.kb1 < kKBlocks) {
        float4* mine = slot(blockIdx.x);
#pragma unroll
        for (int j = 0; j < SLICES; ++j) {
#pragma unroll
          for (int q = 0; q < kQuads; ++q) {
            __stcg(mine + (j * kQuads + q) * 128 + tid,
                   make_float4(acc[j][4 * q], acc[j][4 * q + 1], acc[j][4 * q + 2], acc[j][4 * q + 3]));
          }
        }
        __threadfence();
        named_barrier(1 + consumer, 128);
        if (tid == 0) flag_release(&stream_ws.flags[blockIdx.x * kMaxConsumers + consumer], 1);
        store_tile = false;
      } else if (sched.streaming() && seg.kb0 > 0) {
        const long long first =
            stream_cta_of(static_cast<long long>(seg.live) * kKBlocks - sched.wave_begin, sched.work, gridDim.x);
        for (long long cta = first; cta < blockIdx.x; ++cta) {
          if (stream_begin(cta, sched.work, gridDim.x) == stream_begin(cta + 1, sched.work, gridDim.x)) continue;
          if (tid == 0) {
            while (flag_acquire(&stream_ws.flags[cta * kMaxConsumers + consumer]) == 0) {
            }
          }
          named_barrier(1 + consumer, 128);
          const float4* theirs = slot(cta);
#pragma unroll
          for (int j = 0; j < SLICES; ++j) {
#pragma unroll
            for (int q = 0; q < kQuads; ++q) {
              const float4 v = __ldcg(theirs + (j * kQuads + q) * 128 + tid);
              acc[j][4 * q] += v.x;
              acc[j][4 * q + 1] += v.y;
              acc[j][4 * q + 2] += v.z;
              acc[j][4 * q + 3] += v.w;
            }
          }
        }
      }
    }

    if (store_tile) {
      // Rows loaded after the main loop (stream-K, the half ring): their latency under the stores below.
      if constexpr (MODE == kIndexed && kRoutesAfterLoop) load_routes<BM, kVecPerRow>(route, indexed, tid, tile.row0);
      // Epilogue: accumulator (weight row m, token c) -> shared [token][n] -> 16-byte row stores. Lane (g, t)
      // holds, per 8-token step i, (m = 16*warp + g (+8), c = 8i + 2t (+1)): as BF16 pairs, the fragments of
      // 8x8 matrices (rows m, columns c), which stmatrix.trans stores as [c][m], 16 bytes a token. Lane L
      // addresses token 8i + L % 8 (+8 for matrices 2 and 3) at rows +8 for matrices 1 and 3.
      {
        const int quad = lane / 8, column = lane % 8;
        bf16* const base = epilogue + column * Smem::kEpiloguePitch + 16 * warp + (quad & 1) * 8;
#pragma unroll
        for (int j = 0; j < SLICES; ++j) {
          const float* a = acc[j];
#pragma unroll
          for (int i = 0; i + 1 < BM / 8; i += 2) {
            stmatrix_x4_trans(base + (8 * i + (quad >> 1) * 8) * Smem::kEpiloguePitch + j * kSliceRows,
                              pack_bf16x2(a[4 * i], a[4 * i + 1]), pack_bf16x2(a[4 * i + 2], a[4 * i + 3]),
                              pack_bf16x2(a[4 * i + 4], a[4 * i + 5]), pack_bf16x2(a[4 * i + 6], a[4 * i + 7]));
          }
          if constexpr (BM / 8 % 2 == 1) {  // the last 8 tokens: matrices 0 and 1 (lanes 16-31 ignored)
            constexpr int i = BM / 8 - 1;
            stmatrix_x2_trans(base + 8 * i * Smem::kEpiloguePitch + j * kSliceRows, pack_bf16x2(a[4 * i], a[4 * i + 1]),
                              pack_bf16x2(a[4 * i + 2], a[4 * i + 3]));
          }
        }
      }
      named_barrier(1 + consumer, 128);
      const int n0 = tile.n_block * kBlockN + consumer * SLICES * kSliceRows;
#pragma unroll
      for (int j = 0; j < kStores; ++j) {
        const int v = tid + 128 * j;
        if (v < BM * kVecPerRow) {
          const int token = v / kVecPerRow, col = (v % kVecPerRow) * 8;
          int row = tile.row0 + token;
          bool write = row < tile.valid_end;
          if constexpr (MODE == kContiguous) {
            // token % 32 + 32 * (word) with the word a constant: 128 / kVecPerRow tokens a step divide 32.
            static_assert(32 % (128 / kVecPerRow) == 0, "a store step's tokens stay in one mask word");
            write = write && (tile.rows_of_expert[128 / kVecPerRow * j / 32] >> (token % 32) & 1u);
          }
          if constexpr (MODE == kIndexed) {
            row = route[j];
            write = row >= 0;
          }
          if (write) {
            *reinterpret_cast<uint4*>(out + static_cast<long long>(row) * N + n0 + col) =
                *reinterpret_cast<const uint4*>(epilogue + token * Smem::kEpiloguePitch + col);
          }
        }
      }
      named_barrier(1 + consumer, 128);
    }
    if constexpr (!kLookAhead) skip_idle(next_cursor, next);
    cursor = next_cursor;
    tile = next;
    ahead = look;
  }
}

}  // namespace chord::grouped
