#include "heuristics/warp_decode.hpp"

#include <algorithm>
#include <cmath>

namespace chordrt::heuristics {

namespace {

struct Split {
  int parts, unroll;
};

// The most parts (a power of two <= max_parts) whose share of the groups has a divisor in
// [4, max_unroll] (or is shorter than 4), with the largest such divisor as the unroll: the loads of
// `unroll` groups are in flight together, and the bytes in flight (parts x unroll x 16 rows) are what
// hides DRAM latency.
Split split_groups(int groups, int max_parts, int max_unroll) {
  for (int parts = max_parts; parts >= 1; parts /= 2) {
    if (groups % parts != 0) continue;
    const int per = groups / parts;
    for (int unroll = std::min(per, max_unroll); unroll >= 1; --unroll) {
      if (per % unroll == 0 && (unroll >= 4 || per < 4)) return {parts, unroll};
    }
  }
  for (int unroll = std::min(groups, max_unroll); unroll >= 1; --unroll) {
    if (groups % unroll == 0) return {1, unroll};
  }
  return {1, 1};
}

// One column tile holds 8 routes; a second pays off only when an expert expects more than 8.
int column_tiles(const WarpDecodeShape& s, int64_t tokens) {
  const double active = std::max(1.0, expected_active_experts(s, tokens));
  const double local_routes = static_cast<double>(tokens) * s.top_k * s.experts / std::max(1, s.global_experts);
  return local_routes / active > 8.0 ? 2 : 1;
}

// Unrolls whose registers fit the kernels' launch bounds (gate/up 3 CTAs of 256 threads per SM, 85
// registers; down 4 CTAs, 64, half the unroll with two column tiles) without spilling (ptxas reports).
constexpr int kGateUpMaxUnroll = 8;
constexpr int kDownMaxUnroll = 4;

}  // namespace

int warp_decode_token_bucket(int64_t tokens) {
  int bucket = 8;
  while (bucket < tokens) bucket *= 2;
  return bucket;
}

double expected_active_experts(const WarpDecodeShape& s, int64_t tokens) {
  if (s.global_experts <= 0 || tokens <= 0) return 0.0;
  const double p = std::min(1.0, static_cast<double>(s.top_k) / s.global_experts);
  return s.experts * (1.0 - std::pow(1.0 - p, static_cast<double>(tokens)));
}

WarpDecodeGateUpConfig select_warp_decode_gate_up(const WarpDecodeShape& s, int64_t tokens, const DeviceFacts&) {
  const Split split = split_groups(s.hidden / 32, 8, kGateUpMaxUnroll);
  return {warp_decode_token_bucket(tokens), split.parts, column_tiles(s, tokens), split.unroll};
}

WarpDecodeDownConfig select_warp_decode_down(const WarpDecodeShape& s, int64_t tokens, const DeviceFacts&) {
  constexpr int kWarps = 8;
  const int groups = s.intermediate / 32;
  const double active = std::max(1.0, expected_active_experts(s, tokens));
  const int wanted = std::clamp(static_cast<int>(std::ceil(kWarps / active)), 1, kWarps);
  int max_chunks = 1;
  while (max_chunks * 2 <= wanted) max_chunks *= 2;
  if (max_chunks < wanted) max_chunks *= 2;
  const int n_tiles = column_tiles(s, tokens);
  const Split split = split_groups(groups, max_chunks, n_tiles == 1 ? kDownMaxUnroll : kDownMaxUnroll / 2);
  return {warp_decode_token_bucket(tokens), kWarps, split.parts, n_tiles, split.unroll};
}

int warp_decode_down_dynamic_smem(const WarpDecodeDownConfig& c) { return c.warps * c.max_tokens * 16 * 4; }

std::vector<int64_t> warp_decode_prewarm_tokens() {
  std::vector<int64_t> tokens(kWarpDecodeMaxTokens);
  for (int64_t m = 1; m <= kWarpDecodeMaxTokens; ++m) tokens[m - 1] = m;
  return tokens;
}

}  // namespace chordrt::heuristics
