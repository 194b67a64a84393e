#include "heuristics/moe_decode_path.hpp"

#include <algorithm>
#include <cmath>

namespace chordrt::heuristics {

namespace {

// One path's fitted cost: fixed µs and the fraction of peak DRAM bandwidth its weight stream sustains.
struct PathCost {
  double fixed_us, bandwidth_fraction;
};
// Fitted to bench/decode_crossover_bench.py on the H200 (bench/NOTES.md, "decode crossover").
constexpr PathCost kWarp{10.0, 0.55};
constexpr PathCost kIndexed{25.0, 0.70};

double path_us(const PathCost& c, double bytes, const DeviceFacts& facts) {
  return c.fixed_us + bytes / (c.bandwidth_fraction * facts.dram_peak_tbps * 1e6);
}

}  // namespace

double moe_expert_bytes(const WarpDecodeShape& s) {
  // gate, up and down: 3 H x I values; INT4 half a byte plus a BF16 scale per 32, MXFP8 a byte plus one.
  const double values = 3.0 * s.hidden * s.intermediate;
  return s.format == WeightFormat::kInt4Group32 ? values * (0.5 + 2.0 / 32) : values * (1.0 + 1.0 / 32);
}

DecodePathTimes model_decode_path_times(const WarpDecodeShape& s, int64_t tokens, const DeviceFacts& facts) {
  tokens = std::max<int64_t>(tokens, 1);
  const double active = std::max(1.0, expected_active_experts(s, tokens));
  const double bytes = active * moe_expert_bytes(s);
  // Warp decode streams an expert's rows once per pass of 8 x n_tiles routes (its MMA columns).
  const double routes_per_expert =
      static_cast<double>(tokens) * s.top_k * s.experts / std::max(1, s.global_experts) / active;
  const int columns = 8 * select_warp_decode_gate_up(s, tokens, facts).n_tiles;
  const double passes = std::max(1.0, std::ceil(routes_per_expert / columns));
  return {path_us(kWarp, bytes * passes, facts), path_us(kIndexed, bytes, facts)};
}

MoeDecodePath faster_decode_path(const WarpDecodeShape& s, int64_t tokens, const DeviceFacts& facts) {
  const DecodePathTimes t = model_decode_path_times(s, tokens, facts);
  return t.indexed_us < t.warp_us ? MoeDecodePath::kIndexed : MoeDecodePath::kWarp;
}

}  // namespace chordrt::heuristics
