#include "heuristics/sparse_mla.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "heuristics/config_override.hpp"
#include "runtime/core/math.hpp"

namespace chordrt::heuristics {

namespace {

constexpr int kSmemReservedPerCta = 1024;
constexpr int kSmemPerSm = 228 * 1024;
// In 64-key block times: a CTA's fixed cost (barriers, q, the first load's latency) and the combine's.
constexpr double kCtaOverheadBlocks = 1.0;
constexpr double kCombineBlocks = 1.0;
// Blocks a split must hold for the 128-head pair to pay for its cluster hand-offs.
constexpr int kPairMinBlocks = 2;

using chord::sparse_mla::kBlockKeys;

// The decode's 64-key blocks of a query's top-k (at least one).
int topk_blocks(const SparseMlaShape& s) { return std::max(1, ceil_div(s.topk, kBlockKeys)); }

size_t decode_smem(const SparseMlaShape& s, const SparseMlaConfig& c) {
  if (c.head_group == chord::sparse_mla::kWgmmaHeads) {
    return static_cast<size_t>(chord::sparse_mla::wgmma_decode_smem(s.rope_dims).bytes);
  }
  return static_cast<size_t>(
      chord::sparse_mla::decode_smem(s.format, s.rope_dims, c.head_group, c.warps, c.stages).bytes);
}

// The WGMMA kernel's fixed shape: three warpgroups, two-deep rings.
constexpr int kWgmmaStages = 2;

// Where the 128-head pair can run: the token's two 64-head groups on the wgmma kernel.
bool pair_fits(const SparseMlaShape& s, const SparseMlaConfig& c) {
  return c.head_group == chord::sparse_mla::kWgmmaHeads && chord::sparse_mla::wgmma_decode_pair_fits(s.num_heads);
}

}  // namespace

std::string sparse_mla_shape_error(const SparseMlaShape& s) {
  namespace sm = chord::sparse_mla;
  if (s.format != sm::kFp8DsMla && s.format != sm::kBf16) {
    return fmt::format("format must be 0 (fp8_ds_mla) or 1 (bf16), got {}", s.format);
  }
  if (s.rope_dims != 0 && s.rope_dims != 64) {
    return fmt::format("rope_dims must be 64, or 0 on NoPE layers, got {}", s.rope_dims);
  }
  if (s.num_heads < 8 || s.num_heads > sm::kMaxHeads || s.num_heads % 8 != 0) {
    return fmt::format("num_heads must be a multiple of 8 in [8, {}], got {}", sm::kMaxHeads, s.num_heads);
  }
  if (s.topk < kBlockKeys || s.topk % kBlockKeys != 0 || s.topk > (1 << 20)) {
    return fmt::format("topk must be a positive multiple of {} up to 2^20, got {}", kBlockKeys, s.topk);
  }
  if (s.num_tokens < 0 || s.num_tokens > sm::kMaxTokens) {
    return fmt::format("num_tokens must be in [0, {}], got {}", sm::kMaxTokens, s.num_tokens);
  }
  return "";
}

SparseMlaConfig select_sparse_mla_kernel(const SparseMlaShape& s, const DeviceFacts& facts) {
  SparseMlaConfig c{};
  // The largest head group whose accumulators fit: 4 warps carry 8-16 heads, 8 warps 32.
  for (int hg : {32, 16, 8}) {
    if (s.num_heads % hg == 0) {
      c.head_group = hg;
      break;
    }
  }
  // 4 warps up to 16 heads (two CTAs per SM). 8 warps (two CTAs of 16 warps per SM; at 8 heads the
  // S-phase splits the dims) measured 3-15% slower at 8 and 16 heads (bench/NOTES.md, v3).
  c.warps = c.head_group >= 32 ? 8 : 4;
  // A grid of 32-head CTAs that leaves SMs idle even split down to single blocks (T = 1 at 32-128 heads)
  // runs the 16-head kernel instead: twice the CTAs, two per SM, each CTA's block chain shorter
  // (measured at T = 1: 19.7 -> 16.7 us at h = 64, even at h = 128 and at T = 2; 8 warps on 16 heads
  // were ~1 us faster at T = 1 but spill under two CTAs' register cap). With the SMs covered, 32-head
  // groups win by 28-30% (T = 32): they gather each record once for twice the heads.
  const int64_t max_splits = std::min(topk_blocks(s), chord::sparse_mla::kMaxSplits);
  if (c.head_group == 32 && s.num_tokens * (s.num_heads / 32) * max_splits < facts.sm_count) {
    c.head_group = 16;
    c.warps = 4;
  }
  // fp8_ds_mla, a multiple of 64 heads: the 16-head kernel only while its grid is one CTA per SM. Two
  // 16-head CTAs sharing an SM each dequantize their own copy of every record; the wgmma kernel converts
  // each once per 64 heads (H100, v19: h = 128 T = 1 19.6 -> 18.1 us, h = 64 T = 2 19.6 -> 18.4; h = 64
  // T = 1, 128 CTAs, stays at 15.1 where wgmma takes 17.2). BF16 caches keep it at T = 1: the mma.sync
  // kernel reads BF16 as is, the wgmma producer converts it (h = 128: 16.2 against 22.4 us).
  const bool wgmma_heads = s.num_heads % chord::sparse_mla::kWgmmaHeads == 0;
  const bool fp8_shares_sms = s.format == chord::sparse_mla::kFp8DsMla && c.head_group == 16 &&
                              s.num_tokens * (s.num_heads / 16) * max_splits > facts.sm_count;
  // A multiple of 64 heads (where the grid covers the SMs), either cache format: 64-head CTAs on wgmma
  // (decode_wgmma.cuh), each record gathered once per 64 heads.
  if (wgmma_heads && (c.head_group == 32 || fp8_shares_sms)) {
    c.head_group = chord::sparse_mla::kWgmmaHeads;
    c.warps = chord::sparse_mla::kWgmmaWarps;
    c.stages = kWgmmaStages;
    c.splits = 1;
    c.blocks_per_split = topk_blocks(s);
    return c;
  }
  // Two stages keep two 4-warp CTAs per SM; deeper rings only where a CTA is alone on its SM anyway.
  c.stages = 2;
  while (c.stages < 4) {
    SparseMlaConfig next = c;
    ++next.stages;
    const size_t deeper = decode_smem(s, next);
    if (deeper > static_cast<size_t>(facts.max_smem_per_block_optin) ||
        deeper + kSmemReservedPerCta > static_cast<size_t>(kSmemPerSm) / sparse_mla_ctas_per_sm(s, c)) {
      break;
    }
    ++c.stages;
  }
  c.splits = 1;
  c.blocks_per_split = topk_blocks(s);
  return c;
}

int sparse_mla_ctas_per_sm(const SparseMlaShape& s, const SparseMlaConfig& c) {
  // Registers: two 4-warp CTAs fit, two 8-warp ones up to 16 heads, one beyond (the kernel's launch
  // bounds; tests/ptxas_report_test.cpp checks each example against ptxas).
  if (c.head_group == chord::sparse_mla::kWgmmaHeads) return 1;
  const int by_regs = c.warps == 4 || c.head_group <= 16 ? 2 : 1;
  const size_t smem = decode_smem(s, c) + kSmemReservedPerCta;
  const int by_smem = static_cast<int>(static_cast<size_t>(kSmemPerSm) / smem);
  return std::max(1, std::min(by_regs, by_smem));
}

SparseMlaConfig select_sparse_mla(const SparseMlaShape& s, const DeviceFacts& facts) {
  SparseMlaConfig c = select_sparse_mla_kernel(s, facts);
  const int blocks = topk_blocks(s);
  const int64_t base = s.num_tokens * (s.num_heads / c.head_group);
  const int64_t slots = static_cast<int64_t>(facts.sm_count) * sparse_mla_ctas_per_sm(s, c);
  double best = 0;
  for (int splits = 1; splits <= std::min(blocks, chord::sparse_mla::kMaxSplits); ++splits) {
    const int per_split = ceil_div(blocks, splits);
    if (splits > 1 && ceil_div(blocks, per_split) != splits) continue;  // same as fewer splits
    const double waves = static_cast<double>(ceil_div<int64_t>(base * splits, slots));
    const double cost = waves * (per_split + kCtaOverheadBlocks) + (splits > 1 ? kCombineBlocks : 0.0);
    if (splits == 1 || cost < best) {
      best = cost;
      c.splits = splits;
      c.blocks_per_split = per_split;
    }
  }
  c.pair = select_sparse_mla_pair(s, c);
  return c;
}

int select_sparse_mla_pair(const SparseMlaShape& s, const SparseMlaConfig& c) {
  // The pair halves each CTA's gather and conversion (H100, v25: fp8 T = 32 / 128 75.3 / 209.5 -> 72.0 /
  // 198.5 us, BF16 89.4 / 262 -> 82.7 / 236) but costs a one-block CTA its cluster hand-offs (fp8 T = 1,
  // 32 splits of one block: 18.5 -> 19.7).
  return pair_fits(s, c) && c.blocks_per_split >= kPairMinBlocks ? 1 : 0;
}

size_t sparse_mla_workspace_bytes(const SparseMlaShape& s, const SparseMlaConfig& c) {
  if (c.splits <= 1) return 0;
  return static_cast<size_t>(s.num_tokens) * static_cast<size_t>(s.num_heads) * static_cast<size_t>(c.splits) *
         (chord::sparse_mla::kNopeDims + 1) * sizeof(float);
}

std::string apply_sparse_mla_override(std::string_view spec, SparseMlaConfig& c) {
  return apply_int_overrides(spec, {{"head_group", &c.head_group},
                                    {"warps", &c.warps},
                                    {"stages", &c.stages},
                                    {"splits", &c.splits},
                                    {"pair", &c.pair}});
}

std::string resolve_sparse_mla_override(std::string_view spec, const SparseMlaShape& s, SparseMlaConfig& c) {
  const SparseMlaConfig before = c;
  constexpr int kUnnamed = std::numeric_limits<int>::min();
  c.pair = kUnnamed;
  if (std::string err = apply_sparse_mla_override(spec, c); !err.empty()) {
    c = before;
    return err;
  }
  if (c.splits != before.splits && c.splits > 0) {
    c.blocks_per_split = ceil_div(topk_blocks(s), c.splits);
  }
  if (c.pair == kUnnamed) c.pair = select_sparse_mla_pair(s, c);
  return "";
}

std::string sparse_mla_config_error(const SparseMlaShape& s, const SparseMlaConfig& c, const DeviceFacts& facts) {
  const int blocks = topk_blocks(s);
  if (c.head_group != 8 && c.head_group != 16 && c.head_group != 32 && c.head_group != 64) {
    return "head_group must be 8, 16, 32 or 64";
  }
  if (s.num_heads % c.head_group != 0) return "head_group must divide num_heads";
  if (c.head_group == chord::sparse_mla::kWgmmaHeads) {
    if (c.warps != chord::sparse_mla::kWgmmaWarps || c.stages != kWgmmaStages) {
      return "head_group 64 (the wgmma kernel) runs 12 warps and 2 stages";
    }
  } else if (c.warps != 4 && c.warps != 8 && c.warps != 16)
    return "warps must be 4, 8 or 16";
  const int head_splits = std::min(c.warps / 4, c.head_group / 8);
  if (c.head_group != chord::sparse_mla::kWgmmaHeads && c.warps / 4 != head_splits &&
      !(c.warps == 8 && c.head_group == 8)) {
    return "the S-phase warps of a key group split the heads 8 or more each (8 warps on 8 heads split the dims)";
  }
  if (c.stages < 2 || c.stages > 8) return "stages must be in [2, 8]";
  if (c.splits < 1 || c.splits > std::min(blocks, chord::sparse_mla::kMaxSplits)) {
    return "splits must be in [1, min(topk / 64, 64)]";
  }
  if (c.blocks_per_split * c.splits < blocks) return "blocks_per_split * splits must cover topk / 64";
  if (c.pair != 0 && c.pair != 1) return "pair must be 0 or 1";
  if (c.pair && !pair_fits(s, c)) return "pair=1 needs 128 heads in two head groups of 64";
  if (decode_smem(s, c) > static_cast<size_t>(facts.max_smem_per_block_optin)) {
    return "shared memory of head_group x stages exceeds the device's per-block limit";
  }
  return "";
}

}  // namespace chordrt::heuristics
