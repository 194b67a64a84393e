#include "heuristics/warp_decode.hpp"

#include <algorithm>
#include <cmath>

namespace chordrt::heuristics {

namespace {

struct Split {
  int parts, unroll;
};

// The most parts (<= max_parts, a power of two) and widest unroll (4, 2, 1) with groups divisible by
// parts * unroll; unroll wins over parts (short load batches stall more than a narrower split).
Split split_groups(int groups, int max_parts) {
  for (int unroll : {4, 2, 1}) {
    for (int parts = max_parts; parts >= 1; parts /= 2) {
      if (groups % (parts * unroll) == 0) return {parts, unroll};
    }
  }
  return {1, 1};
}

// One column tile holds 8 routes; a second pays off only when an expert expects more than 8.
int column_tiles(const WarpDecodeShape& s, int64_t tokens) {
  const double active = std::max(1.0, expected_active_experts(s, tokens));
  const double local_routes = static_cast<double>(tokens) * s.top_k * s.experts / std::max(1, s.global_experts);
  return local_routes / active > 8.0 ? 2 : 1;
}

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
  const Split split = split_groups(s.hidden / 32, 8);
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
  const Split split = split_groups(groups, max_chunks);
  return {warp_decode_token_bucket(tokens), kWarps, split.parts, column_tiles(s, tokens), split.unroll};
}

int warp_decode_down_dynamic_smem(const WarpDecodeDownConfig& c) { return c.warps * c.max_tokens * 16 * 4; }

std::vector<int64_t> warp_decode_prewarm_tokens() {
  std::vector<int64_t> tokens(kWarpDecodeMaxTokens);
  for (int64_t m = 1; m <= kWarpDecodeMaxTokens; ++m) tokens[m - 1] = m;
  return tokens;
}

}  // namespace chordrt::heuristics
