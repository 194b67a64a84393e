// W4A16 indexed decode GEMM (mma.sync, operands swapped): out[route, n] = sum_k A[route / top_k, k] *
// W_e[n, k] for the routes of each block of vLLM's sorted routing.
//
// Few routes per expert: the weights are the large operand, so they sit on MMA M (16 rows per m16n8k16,
// dequantized from the "mma" layout straight into A registers) and the block's BM tokens on MMA N, 8 per
// MMA. A CTA = 128 weight rows x one routing block; each of its 4 warps streams two 16-row tiles over
// the whole K, DEPTH chunks of weights ahead in registers, and reads its activations (the block's token
// rows, 32 contiguous bytes per lane per chunk) through L1, where the CTA's four warps and the CTAs of the
// neighbouring row ranges of the same block find them. Small enough for 4 CTAs per SM (16 warps) to keep
// the DRAM queue full.
// Epilogue: FP32 accumulators -> BF16 through shared memory -> 64-byte row segments of each valid route.
#pragma once

#include "common/int4.cuh"
#include "common/routing.cuh"
#include "indexed/layout.cuh"
#include "indexed/params.cuh"

namespace chord::indexed {

// Weights are read once: keep them out of L1 (the activations live there).
__device__ __forceinline__ uint4 load_streaming(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

template <int N, int K, int EXPERTS, int BM, int DEPTH>
__global__ void __launch_bounds__(kDecodeThreads, kDecodeCtasPerSm)
    indexed_decode_kernel(const uint4* __restrict__ packed, const uint32_t* __restrict__ packed_scale,
                          const IndexedRouting routing, bf16* __restrict__ out) {
  static_assert(BM % 8 == 0 && BM >= 8 && BM <= 32, "the decode profile serves block_m 8..32");
  static_assert(N % kDecodeRowsPerCta == 0 && K % kChunk == 0, "shape must tile exactly");
  constexpr int kTok = BM / 8, kWarpTiles = 2, kChunks = K / kChunk, kPitch = kWarpTiles * kTileRows + 8;
  constexpr int kRowRanges = N / kDecodeRowsPerCta;
  __shared__ alignas(16) bf16 staging[kDecodeThreads / 32][BM][kPitch];

  // Semi-static schedule: CTA x takes row range x % kRowRanges (the fastest index, so the CTAs running
  // together share a block's activations in L2) and visits routing blocks x / kRowRanges, + slots,
  // + 2 slots, ... (slots = gridDim.x / kRowRanges, about two waves, set by the host). A block of a -1
  // expert (another GPU's under EP) costs one load; a run of live blocks spreads over the slots.
  const int range = blockIdx.x % kRowRanges, slots = gridDim.x / kRowRanges;
  const int blocks = routing_blocks<BM>(routing);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int tile0 = (range * kDecodeRowsPerCta + warp * kWarpTiles * kTileRows) / kTileRows;
  const int n0 = tile0 * kTileRows;
  bf16(*stage)[kPitch] = staging[warp];

  for (int block = blockIdx.x / kRowRanges; block < blocks; block += slots) {
    const int expert = routing.expert_ids[block];
    if (expert < 0 || expert >= EXPERTS) continue;
    // Token column g of each 8-token MMA: its activation run (16t .. 16t+15 of each chunk), or none.
    const uint4* act[kTok];
#pragma unroll
    for (int j = 0; j < kTok; ++j) {
      const int token = routing_token_of(routing, block * BM + 8 * j + g);
      act[j] =
          token < 0 ? nullptr : reinterpret_cast<const uint4*>(routing.a + static_cast<long long>(token) * K + 16 * t);
    }
    const uint4* wsrc[kWarpTiles];
    const uint32_t* ssrc[kWarpTiles];
#pragma unroll
    for (int m = 0; m < kWarpTiles; ++m) {
      wsrc[m] = packed + tile_chunk_offset<N, K>(expert, tile0 + m, 0) / 4 + lane;
      ssrc[m] = packed_scale + tile_group_offset<N, K>(expert, tile0 + m, 0) + (t / 2) * 8 + g;
    }

    float acc[kWarpTiles][kTok][4] = {};
    uint4 wq[DEPTH][kWarpTiles];
    uint32_t sq[DEPTH][kWarpTiles];
    auto fetch = [&](int d, int chunk) {
      if (chunk < kChunks) {
#pragma unroll
        for (int m = 0; m < kWarpTiles; ++m) {
          wq[d][m] = load_streaming(wsrc[m] + chunk * 32);
          sq[d][m] = __ldg(ssrc[m] + chunk * 16);
        }
      }
    };
#pragma unroll
    for (int d = 0; d < DEPTH; ++d) fetch(d, d);

    for (int c0 = 0; c0 < kChunks; c0 += DEPTH) {
#pragma unroll
      for (int d = 0; d < DEPTH; ++d) {
        const int chunk = c0 + d;
        if (chunk >= kChunks) break;
        uint4 b[kTok][2];
#pragma unroll
        for (int j = 0; j < kTok; ++j) {
          if (act[j]) {
            b[j][0] = __ldg(act[j] + chunk * 8);
            b[j][1] = __ldg(act[j] + chunk * 8 + 1);
          } else {
            b[j][0] = b[j][1] = make_uint4(0, 0, 0, 0);
          }
        }
        uint4 w[kWarpTiles];
        uint32_t s[kWarpTiles];
#pragma unroll
        for (int m = 0; m < kWarpTiles; ++m) {
          w[m] = wq[d][m];
          s[m] = sq[d][m];
        }
        fetch(d, chunk + DEPTH);
#pragma unroll
        for (int m = 0; m < kWarpTiles; ++m) {
          const uint32_t words[4] = {w[m].x, w[m].y, w[m].z, w[m].w};
          const uint32_t scale0 = bf16_pair(s[m]), scale1 = bf16_pair(s[m] >> 16);
#pragma unroll
          for (int step = 0; step < 4; ++step) {
            uint32_t a[4];
            dequant_int4_word(words[step], scale0, scale1, a);
#pragma unroll
            for (int j = 0; j < kTok; ++j) {
              const uint4& v = b[j][step / 2];
              mma_bf16_m16n8k16(acc[m][j], a, step % 2 ? v.z : v.x, step % 2 ? v.w : v.y);
            }
          }
        }
      }
    }

    // Lane (g, t) holds rows 16m + g (+8) of its warp's 32 and tokens 8j + 2t (+1).
#pragma unroll
    for (int m = 0; m < kWarpTiles; ++m) {
#pragma unroll
      for (int j = 0; j < kTok; ++j) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          stage[8 * j + 2 * t + (r & 1)][16 * m + g + 8 * (r >> 1)] = to_bf16(acc[m][j][r]);
        }
      }
    }
    __syncwarp();
    for (int v = lane; v < BM * 4; v += 32) {
      const int token = v / 4, col = (v % 4) * 8;
      const int route = routing_route_of(routing, block * BM + token);
      if (route >= 0) {
        *reinterpret_cast<uint4*>(out + static_cast<long long>(route) * N + n0 + col) =
            *reinterpret_cast<const uint4*>(&stage[token][col]);
      }
    }
    __syncwarp();  // the staging tile is rewritten by the next block
  }
}

}  // namespace chord::indexed
