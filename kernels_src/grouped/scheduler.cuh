// Tile schedule of the persistent grouped GEMM. A tile is (expert, block of BM rows, block of BN weight
// rows); tiles are numbered N-block fastest so the CTAs running at one time share a row block (its
// activations come from L2) and each expert's weights are streamed once per row block.
//   contiguous: row block b covers rows [b*BM, b*BM + BM) of A; its expert is the one non-negative
//               m_indices value among those rows (the contract pads each expert to 128 rows).
//   masked:     the blocks of group g cover its first masked_m[g] rows (clamped to max_m); a prefix sum
//               of blocks per group, built once per CTA in shared memory, maps a tile to its group.
//   indexed:    row block b is block b of vLLM's sorted routing (common/routing.cuh): expert_ids[b] names
//               its expert, the device count of padded slots says how many blocks there are.
// A CTA walks its work as segments (a tile and a range of its K blocks) from a cursor: statically, whole
// tiles blockIdx.x + i * gridDim.x (tiles without work skipped by the caller); with stream-K (STREAM,
// params.cuh), the whole live tiles of its data-parallel waves the same way, then its equal range of the
// stream-K wave's K blocks, walked from its end back to its start (a range ends in the head of a tile the
// next CTAs finish: that part first, so its partial is ready early), live tile l being column block
// l % N_BLOCKS of the (l / N_BLOCKS)-th live row block. Indexed, the live row blocks are those whose expert
// id is in range, listed once per CTA; contiguous, every row block of A (the host knows their count, and a
// block of padding rows only, which the caller skips, is rare: the contract pads experts to 128 rows);
// masked, every block of the prefix sum (each holds at least one of its group's rows).
#pragma once

#include "common/routing.cuh"
#include "common/warp.cuh"
#include "grouped/params.cuh"

namespace chord::grouped {

struct Tile {
  int expert;     // -1: nothing to do (padding-only block, or an expert id outside [0, E))
  int row0;       // first row of A (and of the output) in this tile; indexed: first sorted slot
  int valid_end;  // masked: rows of this group before which outputs are written; contiguous: total rows
  int n_block;
  // Contiguous: bit r % 32 of word r / 32 says row row0 + r is the expert's (written by the epilogue),
  // read once with the expert id instead of one dependent load per output store.
  uint32_t rows_of_expert[kMaxBlockM / 32];
};

// A position in a CTA's work: a tile index; in the stream-K wave (`wave`), the end of the next segment (an
// iteration live tile * K_BLOCKS + K block, exclusive). Positions of a static-only kernel stay 32-bit.
template <bool STREAM>
struct CursorOf {
  long long pos;
  bool wave;
};
template <>
struct CursorOf<false> {
  int pos;
};
struct Segment {
  int index;     // the tile (Scheduler::tile's numbering)
  int live;      // stream-K: the live tile (its iterations start at live * K_BLOCKS)
  int kb0, kb1;  // K blocks [kb0, kb1) of it
};

template <int MODE, int BM, int N_BLOCKS, int EXPERTS, int K_BLOCKS, int STREAM>
struct Scheduler {
  static constexpr int kMaxGroups = kMaxExperts;
  using Cursor = CursorOf<STREAM != 0>;
  const int32_t* routing;  // m_indices [rows] or masked_m [EXPERTS]
  int rows;                // contiguous: m; masked: max_m
  int* block_prefix;       // masked: EXPERTS + 1 ints of shared memory
  IndexedRouting indexed;  // indexed only
  uint16_t* live_list;     // stream-K: kMaxStreamBlocks block ids, then 32 ints of warp counts
  int indexed_blocks = 0;
  int live_blocks = 0;  // stream-K: row blocks with an expert in range (indexed), every row block (others)
  bool stream = false;  // stream-K in use (the live blocks fit the list)
  int whole_tiles = 0;  // stream-K: live tiles run whole before the stream-K wave
  // stream-K: the wave's iterations, where they start, and this CTA's range of them (absolute iterations)
  long long work = 0, wave_begin = 0, begin = 0, end = 0;

  // Every thread of the CTA calls this once, before any tile is asked for.
  __device__ void prepare(int thread, int threads) {
    if constexpr (MODE == kIndexed) indexed_blocks = routing_blocks<BM>(indexed);
    if constexpr (MODE == kIndexed && STREAM) {
      // The live blocks in order, compacted by ballots: a pass of `threads` blocks at a time.
      int* counts = reinterpret_cast<int*>(live_list + kMaxStreamBlocks);
      const int lane = thread % 32, warp = thread / 32, warps = threads / 32;
      int base = 0;
      for (int b0 = 0; b0 < indexed_blocks; b0 += threads) {
        const int b = b0 + thread;
        const int e = b < indexed_blocks ? indexed.expert_ids[b] : -1;
        const bool live = e >= 0 && e < EXPERTS;
        const uint32_t ballot = __ballot_sync(0xffffffffu, live);
        if (lane == 0) counts[warp] = __popc(ballot);
        __syncthreads();
        int before = base, total = base;
        for (int w = 0; w < warps; ++w) {
          before += w < warp ? counts[w] : 0;
          total += counts[w];
        }
        const int at = before + __popc(ballot & lanemask_lt());
        if (live && at < kMaxStreamBlocks) live_list[at] = static_cast<uint16_t>(b);
        base = total;
        __syncthreads();
      }
      live_blocks = base;
      stream = live_blocks <= kMaxStreamBlocks && indexed_blocks <= 65536;  // 16-bit block ids
      plan_stream_wave();
    }
    if constexpr (MODE == kContiguous && STREAM) {
      live_blocks = (rows + BM - 1) / BM;
      stream = true;
      plan_stream_wave();
    }
    if constexpr (MODE == kMasked) {
      // A short serial scan: EXPERTS <= 1024 counts, done once per CTA.
      if (thread == 0) {
        int sum = 0;
        for (int g = 0; g < EXPERTS; ++g) {
          block_prefix[g] = sum;
          const int m = min(max(routing[g], 0), rows);
          sum += (m + BM - 1) / BM;
        }
        block_prefix[EXPERTS] = sum;
      }
      __syncthreads();
      if constexpr (STREAM) {
        live_blocks = block_prefix[EXPERTS];
        stream = true;
        plan_stream_wave();
      }
    }
  }

  // Stream-K: the whole tiles run before the wave, and this CTA's range of the wave's iterations.
  __device__ void plan_stream_wave() {
    const long long tiles = static_cast<long long>(live_blocks) * N_BLOCKS;
    whole_tiles = static_cast<int>(stream_whole_tiles(tiles, gridDim.x));
    wave_begin = static_cast<long long>(whole_tiles) * K_BLOCKS;
    work = (tiles - whole_tiles) * K_BLOCKS;
    begin = wave_begin + stream_begin(blockIdx.x, work, gridDim.x);
    end = wave_begin + stream_begin(blockIdx.x + 1, work, gridDim.x);
  }

  __device__ int tiles() const {
    if constexpr (MODE == kMasked) {
      return block_prefix[EXPERTS] * N_BLOCKS;
    } else if constexpr (MODE == kIndexed) {
      return indexed_blocks * N_BLOCKS;
    } else {
      return (rows + BM - 1) / BM * N_BLOCKS;
    }
  }

  __device__ bool streaming() const { return STREAM && stream; }
  __device__ Cursor first() const {
    if constexpr (STREAM) {
      if (!stream) return {static_cast<long long>(blockIdx.x), false};
      return static_cast<int>(blockIdx.x) < whole_tiles ? Cursor{blockIdx.x, false} : Cursor{end, true};
    } else {
      return {static_cast<int>(blockIdx.x)};
    }
  }
  __device__ bool done(Cursor c) const {
    if constexpr (STREAM) {
      if (streaming()) return c.wave && c.pos <= begin;
    }
    return c.pos >= tiles();
  }
  // Live tile l's index in tile()'s numbering.
  __device__ int live_tile(int l) const {
    if constexpr (MODE != kIndexed) return l;
    return live_list[l / N_BLOCKS] * N_BLOCKS + l % N_BLOCKS;
  }
  __device__ Segment segment(Cursor c) const {
    if (!streaming()) return {static_cast<int>(c.pos), static_cast<int>(c.pos), 0, K_BLOCKS};
    if constexpr (STREAM) {
      if (!c.wave) return {live_tile(static_cast<int>(c.pos)), static_cast<int>(c.pos), 0, K_BLOCKS};
    }
    const int live = static_cast<int>((c.pos - 1) / K_BLOCKS);
    const long long tile_begin = static_cast<long long>(live) * K_BLOCKS;
    const int kb1 = static_cast<int>(c.pos - tile_begin);
    const int kb0 = begin > tile_begin ? static_cast<int>(begin - tile_begin) : 0;
    return {live_tile(live), live, kb0, kb1};
  }
  __device__ Cursor after(Cursor c) const {
    if (!streaming()) return {static_cast<decltype(c.pos)>(c.pos + static_cast<int>(gridDim.x))};
    if constexpr (STREAM) {
      if (!c.wave) {
        const long long next = c.pos + gridDim.x;
        return next < whole_tiles ? Cursor{next, false} : Cursor{end, true};
      }
      const Segment s = segment(c);
      return {c.pos - (s.kb1 - s.kb0), true};
    }
    return c;
  }

  // Warp-collective (all 32 lanes): the same answer in every warp that asks.
  __device__ Tile tile(int index) const {
    Tile t;
    t.n_block = index % N_BLOCKS;
    const int block = index / N_BLOCKS;
    if constexpr (MODE == kMasked) {
      int lo = 0, hi = EXPERTS - 1;  // last group whose prefix <= block
      while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (block_prefix[mid] <= block)
          lo = mid;
        else
          hi = mid - 1;
      }
      t.expert = lo;
      t.row0 = lo * rows + (block - block_prefix[lo]) * BM;
      t.valid_end = lo * rows + min(max(routing[lo], 0), rows);
    } else if constexpr (MODE == kIndexed) {
      const int e = indexed.expert_ids[block];
      t.expert = e >= 0 && e < EXPERTS ? e : -1;
      t.row0 = block * BM;
      t.valid_end = indexed.routes;
    } else {
      t.row0 = block * BM;
      t.valid_end = rows;
      constexpr int kWords = (BM + 31) / 32;
      int id[kWords];
      int e = -1;
#pragma unroll
      for (int w = 0; w < kWords; ++w) {
        const int r = threadIdx.x % 32 + 32 * w;
        id[w] = r < BM && t.row0 + r < rows ? routing[t.row0 + r] : -1;
        if (id[w] < EXPERTS) e = max(e, id[w]);  // ids >= E count as padding
      }
      e = __reduce_max_sync(0xffffffffu, e);
      t.expert = e;
#pragma unroll
      for (int w = 0; w < kWords; ++w) t.rows_of_expert[w] = __ballot_sync(0xffffffffu, e >= 0 && id[w] == e);
    }
    return t;
  }
};

}  // namespace chord::grouped
