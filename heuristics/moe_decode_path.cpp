#include "heuristics/moe_decode_path.hpp"

#include <algorithm>
#include <cmath>

namespace chordrt::heuristics {

namespace {

// Fitted to bench/decode_crossover_bench.py on the H200 (six shapes x 1..128 tokens, least squares on
// log time per path; bench/NOTES.md "decode crossover"): warp decode costs 7 µs plus its bytes at 51.6% of
// peak DRAM bandwidth for H = 7168, less for a shorter H (x (H / 7168)^0.45: its gate/up warps stream
// H / 32 / k_split groups per item, so a short H leaves more per-item overhead per byte); indexed decode
// costs 11 µs + 5 µs per 1024 of H (one token's serial K chain in the MMA kernels) plus its bytes at 72.6%.
constexpr double kWarpFixedUs = 7.0, kWarpFraction = 0.516, kWarpHiddenExponent = 0.45;
constexpr double kIndexedFixedUs = 11.0, kIndexedUsPer1024Hidden = 5.0, kIndexedFraction = 0.726;

double bytes_us(double bytes, double fraction, const DeviceFacts& facts) {
  return bytes / (fraction * facts.dram_peak_tbps * 1e6);
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
  const double warp_fraction = kWarpFraction * std::pow(s.hidden / 7168.0, kWarpHiddenExponent);
  return {kWarpFixedUs + bytes_us(bytes * passes, warp_fraction, facts),
          kIndexedFixedUs + kIndexedUsPer1024Hidden * s.hidden / 1024.0 + bytes_us(bytes, kIndexedFraction, facts)};
}

MoeDecodePath faster_decode_path(const WarpDecodeShape& s, int64_t tokens, const DeviceFacts& facts) {
  const DecodePathTimes t = model_decode_path_times(s, tokens, facts);
  return t.indexed_us < t.warp_us ? MoeDecodePath::kIndexed : MoeDecodePath::kWarp;
}

}  // namespace chordrt::heuristics
