// DSA top-k: per row t, the positions (or cache slots) of the topk largest logits[t, p] over
// p < n = min(context_lens[t], max_context), in no particular order; -1 past min(topk, n).
//
// One CTA of THREADS per row, a radix select on the order-preserving uint32 image of the floats, digits
// of 11 / 11 / 10 bits:
//   1. histogram of the top 11 bits over the row (16-byte loads) -> the bin B1 where the k-th largest is;
//   2. second read of the row: every value above B1 is emitted, every value in B1 becomes a candidate in
//      shared memory (up to CANDIDATES);
//   3. the other two digits are selected among the candidates only (shared memory), then candidates above
//      the threshold are emitted, and as many equal to it as k still needs.
// If B1 holds more than CANDIDATES values (a near-constant row), step 3 re-reads the row, filtered to B1.
// A row with n <= topk needs no selection: every position is emitted. Counts into the output go through
// warp-aggregated shared atomics, so the order of the output is arbitrary; ties are broken arbitrarily.
#pragma once

#include "common/warp.cuh"
#include "dsa_indexer/params.cuh"

namespace chord::dsa_indexer {

// Ascending floats -> ascending uint32 (negative: all bits flipped; positive: sign set).
__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t b = __float_as_uint(f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

template <int THREADS>
struct TopkBlock {
  static constexpr int kWarps = THREADS / 32;

  // The bin b of hist[0, BINS) with above(b) < need <= above(b) + hist[b], above(b) = the count in bins
  // > b; written to *bin and *above (need >= 1 and <= the total). Callers sync before and after.
  template <int BINS>
  static __device__ void find_bin(const int32_t* hist, int need, int32_t* scratch, int32_t* bin, int32_t* above) {
    constexpr int kPer = BINS >= THREADS ? BINS / THREADS : 1;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid / 32;
    // Thread i owns kPer bins in descending order: BINS - 1 - i * kPer - j.
    int counts[kPer], local = 0;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int d = tid * kPer + j;
      counts[j] = d < BINS ? hist[BINS - 1 - d] : 0;
      local += counts[j];
    }
    const int inclusive = warp_inclusive_scan(local);
    if (lane == 31) scratch[warp] = inclusive;
    __syncthreads();
    if (warp == 0) {
      const int total = lane < kWarps ? scratch[lane] : 0;
      const int scanned = warp_inclusive_scan(total);
      if (lane < kWarps) scratch[32 + lane] = scanned - total;  // exclusive prefix of each warp
    }
    __syncthreads();
    int prefix = scratch[32 + warp] + inclusive - local;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      if (prefix < need && prefix + counts[j] >= need) {
        *bin = BINS - 1 - (tid * kPer + j);
        *above = prefix;
      }
      prefix += counts[j];
    }
  }
};

// Calls f(key, position, valid) for every position of row [0, n) from 16-byte loads, every lane of a
// warp taking part in every call (f may use warp collectives). LOADS loads per lane are issued before any
// is used: one SM streams a whole row, so it needs many bytes in flight (16 KB at one load per thread
// leaves a 64K row at ~16 GB/s). Each of the 4 * LOADS calls is inlined: the rare paths take fewer
// loads to keep the kernel's code (and its cold compile) small.
template <int THREADS, int LOADS, typename F>
__device__ __forceinline__ void for_each_logit(const float* __restrict__ row, int n, F&& f) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  const int vectors = n / 4;
  for (int base = warp * 32; base < vectors; base += THREADS * LOADS) {
    float4 x[LOADS];
#pragma unroll
    for (int u = 0; u < LOADS; ++u) {
      const int v = base + u * THREADS + lane;
      x[u] = v < vectors ? __ldg(reinterpret_cast<const float4*>(row) + v) : make_float4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < LOADS; ++u) {
      const int v = base + u * THREADS + lane;
      const bool valid = v < vectors;
      f(order_key(x[u].x), 4 * v, valid);
      f(order_key(x[u].y), 4 * v + 1, valid);
      f(order_key(x[u].z), 4 * v + 2, valid);
      f(order_key(x[u].w), 4 * v + 3, valid);
    }
  }
  if (warp == 0 && n % 4 != 0) {
    const int p = vectors * 4 + lane;
    const bool valid = p < n;
    f(order_key(valid ? __ldg(row + p) : 0.0f), p, valid);
  }
}

template <int THREADS, int CANDIDATES>
__global__ void __launch_bounds__(THREADS)
    topk_kernel(const float* __restrict__ logits, int32_t max_context, const int32_t* __restrict__ context_lens,
                int32_t topk, const int32_t* __restrict__ block_table, int32_t max_pages_per_seq, int32_t page_size,
                int32_t* __restrict__ indices) {
  constexpr int kBins = kTopkBins;
  // Loads in flight per lane: 8 for the first read of the row (from HBM; one add per value), 4 for the
  // second (from L2, issue-bound by the emit/collect body), 1 for the overflow re-reads (rare).
  constexpr int kHistLoads = 8, kSelectLoads = 4, kOverflowLoads = 1;
  static_assert(THREADS % 32 == 0 && THREADS <= 1024 && kBins % THREADS == 0, "THREADS: warps dividing 2048");
  extern __shared__ __align__(16) uint8_t smem[];
  int32_t* hist = reinterpret_cast<int32_t*>(smem);                       // [kBins]
  uint32_t* cand_key = reinterpret_cast<uint32_t*>(hist + kBins);         // [CANDIDATES]
  int32_t* cand_pos = reinterpret_cast<int32_t*>(cand_key + CANDIDATES);  // [CANDIDATES]
  __shared__ int32_t scratch[64];
  __shared__ int32_t emitted, candidates, equal_taken, bin, above;

  const int tid = threadIdx.x, lane = tid & 31;
  const int64_t r = blockIdx.x;
  const int n = min(max(context_lens[r], 0), max_context);
  const float* row = logits + r * max_context;
  int32_t* out = indices + r * topk;
  const int32_t* table = block_table ? block_table + r * max_pages_per_seq : nullptr;
  // Position -> cache slot through the row's block table (-1 for a position whose page is outside it).
  auto slot_of = [&](int p) -> int32_t {
    if (!table) return p;
    const int index = p / page_size;
    const int32_t page = index < max_pages_per_seq ? __ldg(table + index) : -1;
    return page < 0 ? -1 : static_cast<int32_t>(static_cast<int64_t>(page) * page_size + p % page_size);
  };

  if (n <= topk) {  // everything is selected
    for (int i = tid; i < topk; i += THREADS) out[i] = i < n ? slot_of(i) : -1;
    return;
  }
  // Emits position p where take (all lanes of the warp call this together).
  auto emit = [&](bool take, int p) {
    const uint32_t mask = __ballot_sync(0xffffffffu, take);
    if (!mask) return;
    int base = 0;
    if (lane == __ffs(mask) - 1) base = atomicAdd(&emitted, __popc(mask));
    base = __shfl_sync(0xffffffffu, base, __ffs(mask) - 1);
    if (take) out[base + __popc(mask & lanemask_lt())] = slot_of(p);
  };

  for (int i = tid; i < kBins; i += THREADS) hist[i] = 0;
  if (tid == 0) emitted = candidates = equal_taken = 0;
  __syncthreads();
  for_each_logit<THREADS, kHistLoads>(row, n, [&](uint32_t key, int, bool valid) {
    if (valid) atomicAdd(&hist[key >> 21], 1);
  });
  __syncthreads();
  TopkBlock<THREADS>::template find_bin<kBins>(hist, topk, scratch, &bin, &above);
  __syncthreads();
  const uint32_t b1 = bin;
  int need = topk - above;  // still to take from bin b1

  for_each_logit<THREADS, kSelectLoads>(row, n, [&](uint32_t key, int p, bool valid) {
    emit(valid && (key >> 21) > b1, p);
    const bool in_bin = valid && (key >> 21) == b1;
    const uint32_t mask = __ballot_sync(0xffffffffu, in_bin);
    if (!mask) return;
    int base = 0;
    if (lane == __ffs(mask) - 1) base = atomicAdd(&candidates, __popc(mask));
    base = __shfl_sync(0xffffffffu, base, __ffs(mask) - 1) + __popc(mask & lanemask_lt());
    if (in_bin && base < CANDIDATES) cand_key[base] = key, cand_pos[base] = p;
  });
  __syncthreads();
  const int count = candidates;

  // The rest only looks at bin b1: the shared candidates, or (overflow) the row filtered to b1.
  auto for_each_candidate = [&](auto&& f) {
    if (count <= CANDIDATES) {
      for (int base = (tid / 32) * 32; base < count; base += THREADS) {
        const int i = base + lane;
        const bool valid = i < count;
        f(valid ? cand_key[i] : 0u, valid ? cand_pos[i] : 0, valid);
      }
    } else {
      // A bin of more than CANDIDATES values: a near-constant row, rare enough for the light loop.
      for_each_logit<THREADS, kOverflowLoads>(
          row, n, [&](uint32_t key, int p, bool valid) { f(key, p, valid && (key >> 21) == b1); });
    }
  };

  // Digit 2: bits [10, 21).
  for (int i = tid; i < kBins; i += THREADS) hist[i] = 0;
  __syncthreads();
  for_each_candidate([&](uint32_t key, int, bool valid) {
    if (valid) atomicAdd(&hist[(key >> 10) & 0x7ff], 1);
  });
  __syncthreads();
  TopkBlock<THREADS>::template find_bin<kBins>(hist, need, scratch, &bin, &above);
  __syncthreads();
  const uint32_t b2 = bin;
  need -= above;

  // Digit 3: bits [0, 10), among the candidates whose second digit is b2.
  for (int i = tid; i < 1024; i += THREADS) hist[i] = 0;
  __syncthreads();
  for_each_candidate([&](uint32_t key, int, bool valid) {
    if (valid && ((key >> 10) & 0x7ff) == b2) atomicAdd(&hist[key & 0x3ff], 1);
  });
  __syncthreads();
  TopkBlock<THREADS>::template find_bin<1024>(hist, need, scratch, &bin, &above);
  __syncthreads();
  const uint32_t threshold = (b1 << 21) | (b2 << 10) | static_cast<uint32_t>(bin);
  need -= above;  // values equal to the threshold to take

  for_each_candidate([&](uint32_t key, int p, bool valid) {
    const bool equal = valid && key == threshold;
    const bool take = (valid && key > threshold) || (equal && atomicAdd(&equal_taken, 1) < need);
    emit(take, p);
  });
}

}  // namespace chord::dsa_indexer
