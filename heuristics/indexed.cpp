#include "heuristics/indexed.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <span>

namespace chordrt::heuristics {

namespace {

// Relative cost of one routing block (one weight pass over an expert's tiles) as block_m grows, fitted
// to the H200 bench (bench/results/indexed_bench-h200-20261201a.json, gate_up): wgmma EP8 took 8.5 us
// per block at block_m 32 and 15.7 at 104 (1 + bm/53); TP8's narrow tiles 1.02 at 32 and 2.38 at 120
// (1 + bm/34): the gather and the epilogue weigh more there. mma: a block streams the same weights
// whatever its tokens (EP8 decode, 20 tokens at block_m 8: 222 us; 50 at 16: 263 us): 1 + bm/44.
double block_cost(W4a16Layout layout, IndexedProfile profile, int block_m) {
  if (layout == W4a16Layout::kMma) return 1.0 + block_m / 44.0;
  return 1.0 + block_m / (profile == IndexedProfile::kTensorParallel ? 34.0 : 53.0);
}

namespace g = chord::grouped;

// The prefill tiles in order of preference at block_m, widest first (select_indexed_prefill's comment says
// why): four consumer warpgroups of two slices (512-row tiles) through whichever ring holds block_m's
// accumulators, then narrower ones.
struct Candidates {
  GroupedConfig tiles[4];
  int count;
  std::span<const GroupedConfig> span() const { return {tiles, static_cast<size_t>(count)}; }
};
Candidates prefill_candidates(bool short_tiles, int block_m) {
  const GroupedConfig step{block_m, 2, 2, 4, g::kRingStep}, single{block_m, 2, 2, 4, g::kRingSingle},
      half{block_m, 2, 2, 4, g::kRingHalf}, one_slice{block_m, 1, 2, 4}, two_consumers{block_m, 2, 2, 2};
  if (short_tiles) return {{step, single, one_slice, two_consumers}, 4};
  return {{half, two_consumers}, 2};
}

bool short_k_tiles(const IndexedShape& s) {
  return s.k / grouped_block_k(GroupedMode::kIndexed) <= g::kShortTileKBlocks;
}

bool registers_hold(const GroupedShape& shape, const GroupedConfig& c) {
  return grouped_consumer_registers(shape, c) <= g::consumer_registers(c.consumers, c.ring);
}

// Whether a 512-row tile (four consumers of two slices) holds block_m's tokens in one of the rings.
bool wide_tile_holds(const IndexedShape& s, int block_m) {
  const GroupedShape shape{GroupedMode::kIndexed, s.n, s.k, s.experts};
  if (s.n % g::block_n(2, 4) != 0) return false;
  const Candidates candidates = prefill_candidates(short_k_tiles(s), block_m);
  for (const GroupedConfig& c : candidates.span()) {
    if (c.consumers == 4 && c.slices == 2 && registers_hold(shape, c)) return true;
  }
  return false;
}

}  // namespace

std::string indexed_shape_error(const IndexedShape& s) {
  namespace w = chord::w4a16;
  if (s.layout != W4a16Layout::kWgmmaK64 && s.layout != W4a16Layout::kMma) {
    return fmt::format("layout must be WGMMA_K64 (0) or MMA (2), got {}", static_cast<int>(s.layout));
  }
  if (s.experts < 1 || s.experts > chord::indexed::kMaxExperts) {
    return fmt::format("num_experts must be in [1, {}], got {}", chord::indexed::kMaxExperts, s.experts);
  }
  if (s.n < w::kRowMultiple || s.n % w::kRowMultiple != 0 || s.n > w::kMaxDim) {
    return fmt::format("n must be a positive multiple of {} up to {}, got {}", w::kRowMultiple, w::kMaxDim, s.n);
  }
  const int bk = w::block_k(s.layout);
  if (s.k < bk || s.k % bk != 0 || s.k > w::kMaxDim) {
    return fmt::format("k must be a positive multiple of {} up to {}, got {}", bk, w::kMaxDim, s.k);
  }
  return "";
}

IndexedProfile resolve_indexed_profile(const IndexedShape& s, IndexedProfile requested) {
  if (requested != IndexedProfile::kAuto) return requested;
  return std::min(s.n, s.k) < 1024 ? IndexedProfile::kTensorParallel : IndexedProfile::kExpertParallel;
}

double expected_indexed_blocks(int experts, int64_t routed_rows, int block_m) {
  if (routed_rows <= 0 || experts < 1 || block_m < 1) return 0.0;
  const double rows = static_cast<double>(routed_rows);
  if (experts == 1) return std::ceil(rows / block_m);
  // Rows per expert ~ Binomial(routed_rows, 1/E): sum its pmf over mean +- 12 sigma.
  const double p = 1.0 / experts, mean = rows * p, sigma = std::sqrt(rows * p * (1 - p));
  const int64_t lo = std::max<int64_t>(0, static_cast<int64_t>(mean - 12 * sigma));
  const int64_t hi = std::min<int64_t>(routed_rows, static_cast<int64_t>(mean + 12 * sigma) + 16);
  // pmf(lo) once, then pmf(c + 1) = pmf(c) * (n - c) / (c + 1) * p / (1 - p): no lgamma per term.
  const double x0 = static_cast<double>(lo), odds = p / (1 - p);
  double pmf = std::exp(std::lgamma(rows + 1) - std::lgamma(x0 + 1) - std::lgamma(rows - x0 + 1) + x0 * std::log(p) +
                        (rows - x0) * std::log1p(-p));
  double blocks = 0;
  for (int64_t c = lo; c <= hi; ++c) {
    blocks += pmf * static_cast<double>((c + block_m - 1) / block_m);
    pmf *= (rows - static_cast<double>(c)) / static_cast<double>(c + 1) * odds;
  }
  return experts * blocks;
}

int select_indexed_block_m(const IndexedShape& s, int64_t routed_rows, IndexedProfile profile,
                           const DeviceFacts& facts) {
  const bool mma = s.layout == W4a16Layout::kMma;
  const IndexedProfile p = resolve_indexed_profile(s, profile);
  // wgmma: 128 at most, the largest block whose two-slice (256-row) tiles fit the consumers' registers.
  // At 176 the kernel falls back to one slice, gathers every activation row twice as often per weight
  // row, and ran 1.8-2.4x slower than at 104 (H200, EP8 8192 tokens: 2212 us; bench/NOTES.md).
  const int cap = mma ? 24 : 128;
  // Work units per block (tiles of weight rows) and how many run at once: the time is set by
  // max(units, slots) * the cost of one, so blocks that leave SMs idle are not cheaper.
  const double units_per_block =
      mma ? s.n / double{chord::indexed::kDecodeRowsPerCta} : s.n / double{chord::grouped::block_n(2, 2)};
  const double slots = (mma ? double{chord::indexed::kDecodeCtasPerSm} : 1.0) * facts.sm_count;
  double best_time = 0;
  // wgmma: multiples of 8 while a 512-row tile holds the block (long K: up to 64 through the half ring;
  // short K: 48), of 16 above. 2048 tokens at block_m 56 on the half ring, EP8 gate_up / EP8 down / TP8
  // gate_up: 365.2 / 183.1 / 339.4 us against 374.3 / 185.6 / 382.5 at 64 (H100, bench/NOTES.md "The half
  // ring measured"); with two-consumer tiles 56 had lost to 64 (H200: 667 against 566 us).
  const int step = mma ? 8 : 16;
  int best = step;
  for (int bm = step; bm <= cap; bm += 8) {
    if (!mma && bm % 16 != 0 && !wide_tile_holds(s, bm)) continue;
    const double units = expected_indexed_blocks(s.experts, routed_rows, bm) * units_per_block;
    const double time = std::max(units, slots) * block_cost(s.layout, p, bm);
    if (bm == step || time < best_time * 0.999) {
      best = bm;
      best_time = time;
    }
  }
  return best;
}

GroupedConfig select_indexed_prefill(const IndexedShape& s, int block_m, int64_t routed_rows, const DeviceFacts& facts,
                                     bool stream_k_workspace) {
  const GroupedShape shape{GroupedMode::kIndexed, s.n, s.k, s.experts};
  // The widest tiles whose consumers' registers hold them and that still give every SM one, in order of
  // preference. Four consumer warpgroups of two slices (512-row tiles, Humming's width at 1024-2048
  // tokens) halve each consumer's share of the per-tile dequant and epilogue. On short K (TP8 down, K 256)
  // their fragments fit through the k16 step ring up to block_m 40 (1024 tokens at block_m 32: 226 -> 194
  // us against one slice), through the single ring up to 48 (2048 tokens at block_m 48: 294.6 -> 268.5 us
  // against four consumers of one slice). On long K the half ring (16 fragment registers, the next half's
  // shared-memory reads under the current half's wgmmas) fits them up to block_m 64, with stream-K: 2048
  // tokens at block_m 56, EP8 gate_up / EP8 down 365.2 / 183.1 us against 401.9 / 204.1 at 48 on the single
  // ring; reading ahead, 372.5 -> 336.8 us at EP8 gate_up 2048 and -2.5 / -3.5% at EP8 / TP8 gate_up 1024
  // against the single ring (H100, bench/NOTES.md "The half ring v2 measured"). Then four consumers of one
  // slice (short K only: -13 to -15% against two consumers at block_m <= 64), two of two slices, and at
  // last 128-row tiles, twice as many. This runs on every dispatch, so the blocks are bounded from below
  // (each block holds at most block_m rows; min(rows, E) experts hold one) instead of modelled.
  const int64_t blocks = std::max<int64_t>(std::min<int64_t>(routed_rows, s.experts), routed_rows / block_m);
  const bool short_tiles = short_k_tiles(s);
  GroupedConfig c{block_m, 1, 2, 2};
  const Candidates candidates = prefill_candidates(short_tiles, block_m);
  for (const GroupedConfig& w : candidates.span()) {
    const int64_t wide_n = g::block_n(w.slices, w.consumers);
    if (s.n % wide_n == 0 && registers_hold(shape, w) && blocks * (s.n / wide_n) >= facts.sm_count) {
      c = w;
      break;
    }
  }
  // Stream-K (long K, when the call brings a workspace) balances the last wave, whose tail left a quarter
  // of the SMs idle at 1024 tokens. Only on the one-buffer rings, where it was measured to win: at block_m
  // 32 (above) and at 48, 2048 tokens, EP8 gate_up / EP8 down / TP8 gate_up 412.3 / 217.8 / 408.6 ->
  // 401.9 / 204.1 / 402.5 us; with two consumers of two slices it lost up to 5.5% at 2048-4096 tokens (H100,
  // bench/NOTES.md "The single ring and stream-K as the heuristics' choice"). On the half ring at 2048
  // tokens it wins on EP8 (gate_up 380 against 415-427 us); where every tile runs whole anyway it costs ~1%
  // under ncu (TP8 gate_up 2048, 392 tiles) and measured 7% at TP8 1024 in the bench (NOTES, stop 48).
  // On the TP profile (every block live: no other GPU's experts to skip) where the expected tiles leave no
  // partial wave, the stream-K kernel would only run whole tiles, and there it was slower.
  const bool tp = resolve_indexed_profile(s, IndexedProfile::kAuto) == IndexedProfile::kTensorParallel;
  const auto expected_tiles =
      static_cast<int64_t>(std::llround(expected_indexed_blocks(s.experts, routed_rows, block_m))) *
      (s.n / g::block_n(c.slices, c.consumers));
  const bool all_whole = g::stream_whole_tiles(expected_tiles, facts.sm_count) == expected_tiles;
  c.stream_k = stream_k_workspace && !short_tiles && g::one_buffer_ring(c.ring) && !(tp && all_whole) ? 1 : 0;
  c.stages = grouped_deepest_ring(shape, c, facts);
  return c;
}

std::string indexed_decode_config_error(const IndexedShape& s, const IndexedDecodeConfig& c) {
  if (std::string why = indexed_shape_error(s); !why.empty()) return why;
  namespace ix = chord::indexed;
  if (s.layout != W4a16Layout::kMma) return "the decode kernel reads layout MMA only";
  if (c.block_m < ix::kDecodeMinBlockM || c.block_m > ix::kDecodeMaxBlockM || c.block_m % 8 != 0) {
    return fmt::format(
        "block_m must be a multiple of 8 in [{}, {}] for layout MMA (the decode kernel), got {} (pack with "
        "layout WGMMA_K64 for larger blocks)",
        ix::kDecodeMinBlockM, ix::kDecodeMaxBlockM, c.block_m);
  }
  if (c.depth < 1 || c.depth > ix::kDecodeMaxDepth) {
    return fmt::format("depth must be in [1, {}], got {}", ix::kDecodeMaxDepth, c.depth);
  }
  return "";
}

IndexedDecodeConfig select_indexed_decode(const IndexedShape&, int block_m) {
  // Four chunks ahead fill the DRAM queue at 16 warps per SM; more tokens' activations leave registers for
  // fewer under the 128-register cap of 4 CTAs per SM. Even so block_m 16-32 spill 8-36 bytes per thread
  // (tests/ptxas_report_test.cpp holds the numbers).
  return {block_m, block_m <= 16 ? 4 : (block_m <= 24 ? 3 : 2)};
}

}  // namespace chordrt::heuristics
