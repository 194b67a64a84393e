#include "heuristics/warp_decode.hpp"

#include <algorithm>
#include <cmath>

#include "heuristics/config_override.hpp"
#include "kernels_src/warp_decode/params.cuh"

namespace chordrt::heuristics {

namespace {

struct Split {
  int parts, stage_groups;
};

// The most parts (a power of two <= max_parts) whose share of the groups is a whole number of stages
// of 4 groups, else of the format's minimum (INT4 2); {1, 0} when the groups allow neither. Longer
// stages would spread the per-stage overhead, but the activations of the next stage sit in registers
// (4 per group and column tile, twice): 8 groups took the INT4 kernels to 160+ registers.
Split split_groups(WeightFormat f, int groups, int max_parts) {
  const int choices[] = {4, chord::warp_decode::min_stage_groups(static_cast<int>(f))};
  for (int sg : choices) {
    for (int parts = max_parts; parts >= 1; parts /= 2) {
      if (groups % parts == 0 && (groups / parts) % sg == 0) return {parts, sg};
    }
  }
  return {1, 0};
}

// Ring depth: as many stages (2..4) as keep the CTA's rings within `budget` bytes.
int ring_stages(WeightFormat f, int warps, int stage_groups, int row_tiles, int budget) {
  if (stage_groups == 0) return 2;
  const int per_stage = warps * chord::warp_decode::stage_bytes(static_cast<int>(f), stage_groups, row_tiles).bytes;
  return std::clamp(budget / per_stage, 2, 4);
}

// One column tile holds 8 routes; a second pays off only when an expert expects more than 8.
int column_tiles(const WarpDecodeShape& s, int64_t tokens, double active) {
  const double local_routes = static_cast<double>(tokens) * s.top_k * s.experts / std::max(1, s.global_experts);
  return local_routes / std::max(1.0, active) > 8.0 ? 2 : 1;
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

// Two row tiles per CTA halve the activation work per weight byte, but also the CTAs: only when the
// grid keeps at least 16 warps per SM with them.
int row_tiles(int64_t units_of_two_tiles, int warps_per_unit, const DeviceFacts& facts) {
  return units_of_two_tiles * warps_per_unit >= 16LL * facts.sm_count ? 2 : 1;
}

WarpDecodeGateUpConfig select_warp_decode_gate_up(const WarpDecodeShape& s, int64_t tokens, const DeviceFacts& facts) {
  const Split split = split_groups(s.format, s.hidden / 32, 8);
  const double active = expected_active_experts(s, tokens);
  const int nt = column_tiles(s, tokens, active);
  const int rt = s.intermediate % 16 == 0 && nt < chord::warp_decode::kMaxTilesPerWarp
                     ? row_tiles(static_cast<int64_t>(s.intermediate / 16 * active), split.parts, facts)
                     : 1;
  return {warp_decode_token_bucket(tokens),
          split.parts,
          rt,
          nt,
          split.stage_groups,
          ring_stages(s.format, split.parts, split.stage_groups, rt, 64 << 10)};
}

namespace {

// CTAs per SM that fit the kernel's register cap and the SM's shared memory (each CTA also costs the
// driver's 1 KB reservation on sm_90).
int64_t resident_ctas(int warps, int row_tiles, int n_tiles, int64_t smem_per_cta, const DeviceFacts& facts) {
  constexpr int64_t kReservedSmemPerCta = 1024;
  const int64_t smem_per_sm = facts.max_smem_per_block_optin + kReservedSmemPerCta;
  const int64_t by_smem = smem_per_sm / (smem_per_cta + kReservedSmemPerCta);
  return std::max<int64_t>(
      1, std::min<int64_t>(chord::warp_decode::resident_ctas_bound(warps, row_tiles, n_tiles), by_smem));
}

}  // namespace

int64_t warp_decode_gate_up_ctas(const WarpDecodeShape& s, const WarpDecodeGateUpConfig& c, int64_t tokens,
                                 const DeviceFacts& facts) {
  namespace wd = chord::warp_decode;
  const int format = static_cast<int>(s.format);
  const int64_t smem = wd::gate_up_dynamic_smem(format, c.k_split, c.stage_groups, c.row_tiles, c.stages) +
                       wd::gate_up_static_smem(s.experts, c.max_tokens * s.top_k, c.k_split, c.row_tiles, c.n_tiles);
  const int64_t items =
      std::min<int64_t>(std::max<int64_t>(tokens, 1) * s.top_k, s.experts) * (s.intermediate / (8 * c.row_tiles));
  return std::min(items, facts.sm_count * resident_ctas(c.k_split, c.row_tiles, c.n_tiles, smem, facts));
}

WarpDecodeDownConfig select_warp_decode_down(const WarpDecodeShape& s, int64_t tokens, const DeviceFacts& facts) {
  namespace wd = chord::warp_decode;
  const int groups = s.intermediate / 32;
  const double active = std::max(1.0, expected_active_experts(s, tokens));
  // A down CTA walks every active expert. Two row tiles measured 5-11% faster for Kimi TP8 INT4 at 1, 8
  // and 32 tokens (8-187 active experts, 224 CTAs = 13.6 warps per SM); untested with fewer warps per SM
  // or under 4 active experts, so those keep one tile.
  const auto long_items = [&](int warps) {
    return active >= 4 && static_cast<int64_t>(s.hidden / 32) * warps >= 12LL * facts.sm_count;
  };
  const auto config = [&](int warps, int rt) {
    const int wanted = std::clamp(static_cast<int>(std::ceil(warps / active)), 1, warps);
    int max_chunks = 1;
    while (max_chunks * 2 <= wanted) max_chunks *= 2;
    if (max_chunks < wanted) max_chunks *= 2;
    const Split split = split_groups(s.format, groups, max_chunks);
    return WarpDecodeDownConfig{warp_decode_token_bucket(tokens),
                                warps,
                                split.parts,
                                rt,
                                column_tiles(s, tokens, active),
                                split.stage_groups,
                                ring_stages(s.format, warps, split.stage_groups, rt, 48 << 10)};
  };
  // 8 warps: measured 11-13% faster than 4 for Kimi TP8 at 8-32 tokens, equal for EP8 (sweep on the H200).
  // The per-warp [token][row] accumulators grow with the token bucket: the first of 8 warps with the
  // preferred row tiles, 8 warps with one tile, 4 warps, that keeps two CTAs per SM (a CTA's start and end
  // then overlap another's stream) wherever the grid has more CTAs than SMs. Except INT4 with two row
  // tiles, which one CTA per SM runs faster: its dequant makes it issue-bound at big buckets, and the
  // second tile shares the activation work (Kimi K2 INT4 at 64 / 128 tokens: TP8 -5% / -27%, EP8 0% / -9%;
  // MXFP8, cheaper to convert, was 4% / 9% slower that way: sweeps/warp_decode_down_rt2-*).
  WarpDecodeDownConfig chosen{};
  for (const int warps : {8, 4}) {
    const bool two_rows = s.hidden % 32 == 0 && long_items(warps) &&
                          column_tiles(s, tokens, active) < chord::warp_decode::kMaxTilesPerWarp;
    for (const int rt : {two_rows ? 2 : 1, 1}) {
      const WarpDecodeDownConfig c = config(warps, rt);
      if (chosen.warps == 0) chosen = c;
      const int64_t smem =
          wd::down_dynamic_smem(static_cast<int>(s.format), warps, c.max_tokens, c.stage_groups, rt, c.stages) +
          wd::route_table_bytes(s.experts, c.max_tokens * s.top_k);
      const int64_t ctas = s.hidden / (16 * rt);
      const bool int4_two_tiles =
          s.format == WeightFormat::kInt4Group32 && rt == 2 && smem <= facts.max_smem_per_block_optin;
      if (ctas <= facts.sm_count || int4_two_tiles || resident_ctas(warps, rt, c.n_tiles, smem, facts) >= 2) return c;
    }
  }
  return chosen;
}

std::string apply_warp_decode_override(std::string_view spec, WarpDecodeGateUpConfig& g, WarpDecodeDownConfig& d) {
  // Keys name the kernel too; say so when an item lacks it.
  for (std::string_view rest = spec; !rest.empty();) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    const size_t dot = item.find('.'), eq = item.find('=');
    if (dot == std::string_view::npos || eq == std::string_view::npos || eq < dot) {
      return "expected kernel.field=value, got \"" + std::string(item) + "\"";
    }
  }
  return apply_int_overrides(spec, {{"gate_up.k_split", &g.k_split},
                                    {"gate_up.row_tiles", &g.row_tiles},
                                    {"gate_up.n_tiles", &g.n_tiles},
                                    {"gate_up.stage_groups", &g.stage_groups},
                                    {"gate_up.stages", &g.stages},
                                    {"down.warps", &d.warps},
                                    {"down.k_chunks", &d.k_chunks},
                                    {"down.row_tiles", &d.row_tiles},
                                    {"down.n_tiles", &d.n_tiles},
                                    {"down.stage_groups", &d.stage_groups},
                                    {"down.stages", &d.stages}});
}

std::vector<int64_t> warp_decode_prewarm_tokens() {
  std::vector<int64_t> tokens(chord::warp_decode::kMaxTokens);
  for (int64_t m = 1; m <= chord::warp_decode::kMaxTokens; ++m) tokens[m - 1] = m;
  return tokens;
}

}  // namespace chordrt::heuristics
