#include "heuristics/sparse_mla.hpp"

#include <algorithm>

#include "heuristics/config_override.hpp"

namespace chordrt::heuristics {

namespace {

constexpr int kSmemReservedPerCta = 1024;
constexpr int kSmemPerSm = 228 * 1024;
// In 64-key block times: a CTA's fixed cost (barriers, q, the first load's latency) and the combine's.
constexpr double kCtaOverheadBlocks = 1.0;
constexpr double kCombineBlocks = 1.0;

int ceil_div(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

}  // namespace

size_t mla_record_bytes(int64_t format, int64_t rope_dims) {
  if (rope_dims != 0 && rope_dims != 64) return 0;
  const auto rope = static_cast<size_t>(rope_dims);
  if (format == static_cast<int>(MlaCacheFormat::kFp8DsMla)) return kMlaNopeDims + 4 * sizeof(float) + 2 * rope;
  if (format == static_cast<int>(MlaCacheFormat::kBf16)) return 2 * (kMlaNopeDims + rope);
  return 0;
}

size_t sparse_mla_dynamic_smem(MlaCacheFormat format, int rope_dims, int head_group, int warps, int stages) {
  const size_t record = mla_record_bytes(static_cast<int>(format), rope_dims);
  const size_t row = format == MlaCacheFormat::kFp8DsMla ? record : record + 16;
  const size_t hg = static_cast<size_t>(head_group);
  size_t bytes = static_cast<size_t>(stages) * kMlaBlockKeys * row;       // records
  bytes += hg * (2 * kMlaNopeDims + 16);                                  // q NoPE
  bytes += hg * (2 * static_cast<size_t>(rope_dims) + 16);                // q RoPE
  bytes += hg * (kMlaBlockKeys + 8) * 4;                                  // P
  bytes += 2 * 4 * hg * 4 + hg * 4;                                       // key-group maxima, sums, prescales
  bytes = (bytes + static_cast<size_t>(stages) * warps * 4 + 7) / 8 * 8;  // valid-key bits per warp
  bytes += static_cast<size_t>(stages) * 8;                               // barriers
  return bytes + (warps == 8 && head_group == 8 ? 4 * 32 * 16 : 0);       // dim-split partial sums
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
  // Two stages keep two 4-warp CTAs per SM; deeper rings only where a CTA is alone on its SM anyway.
  c.stages = 2;
  while (c.stages < 4) {
    const size_t deeper = sparse_mla_dynamic_smem(s.format, s.rope_dims, c.head_group, c.warps, c.stages + 1);
    if (deeper > static_cast<size_t>(facts.max_smem_per_block_optin) ||
        deeper + kSmemReservedPerCta > static_cast<size_t>(kSmemPerSm) / sparse_mla_ctas_per_sm(s, c)) {
      break;
    }
    ++c.stages;
  }
  c.splits = 1;
  c.blocks_per_split = std::max(1, ceil_div(s.topk, kMlaBlockKeys));
  return c;
}

int sparse_mla_ctas_per_sm(const SparseMlaShape& s, const SparseMlaConfig& c) {
  // ptxas: 4-warp configs use <= 192 registers (two CTAs fit 64K); 8-warp ones <= 128 up to 16 heads
  // (two), up to 255 beyond (one).
  const int by_regs = c.warps == 4 || c.head_group <= 16 ? 2 : 1;
  const size_t smem =
      sparse_mla_dynamic_smem(s.format, s.rope_dims, c.head_group, c.warps, c.stages) + kSmemReservedPerCta;
  const int by_smem = static_cast<int>(static_cast<size_t>(kSmemPerSm) / smem);
  return std::max(1, std::min(by_regs, by_smem));
}

SparseMlaConfig select_sparse_mla(const SparseMlaShape& s, const DeviceFacts& facts) {
  SparseMlaConfig c = select_sparse_mla_kernel(s, facts);
  const int blocks = std::max(1, ceil_div(s.topk, kMlaBlockKeys));
  const int64_t base = s.num_tokens * (s.num_heads / c.head_group);
  const int64_t slots = static_cast<int64_t>(facts.sm_count) * sparse_mla_ctas_per_sm(s, c);
  double best = 0;
  for (int splits = 1; splits <= std::min(blocks, kMlaMaxSplits); ++splits) {
    const int per_split = ceil_div(blocks, splits);
    if (splits > 1 && ceil_div(blocks, per_split) != splits) continue;  // same as fewer splits
    const double waves = static_cast<double>(ceil_div(base * splits, slots));
    const double cost = waves * (per_split + kCtaOverheadBlocks) + (splits > 1 ? kCombineBlocks : 0.0);
    if (splits == 1 || cost < best) {
      best = cost;
      c.splits = splits;
      c.blocks_per_split = per_split;
    }
  }
  return c;
}

size_t sparse_mla_workspace_bytes(const SparseMlaShape& s, const SparseMlaConfig& c) {
  if (c.splits <= 1) return 0;
  return static_cast<size_t>(s.num_tokens) * static_cast<size_t>(s.num_heads) * static_cast<size_t>(c.splits) *
         (kMlaNopeDims + 1) * sizeof(float);
}

std::string apply_sparse_mla_override(std::string_view spec, SparseMlaConfig& c) {
  return apply_int_overrides(
      spec, {{"head_group", &c.head_group}, {"warps", &c.warps}, {"stages", &c.stages}, {"splits", &c.splits}});
}

std::string sparse_mla_config_error(const SparseMlaShape& s, const SparseMlaConfig& c, const DeviceFacts& facts) {
  const int blocks = std::max(1, ceil_div(s.topk, kMlaBlockKeys));
  if (c.head_group != 8 && c.head_group != 16 && c.head_group != 32 && c.head_group != 64) {
    return "head_group must be 8, 16, 32 or 64";
  }
  if (s.num_heads % c.head_group != 0) return "head_group must divide num_heads";
  if (c.warps != 4 && c.warps != 8 && c.warps != 16) return "warps must be 4, 8 or 16";
  const int head_splits = std::min(c.warps / 4, c.head_group / 8);
  if (c.warps / 4 != head_splits && !(c.warps == 8 && c.head_group == 8)) {
    return "the S-phase warps of a key group split the heads 8 or more each (8 warps on 8 heads split the dims)";
  }

  if (c.stages < 2 || c.stages > 8) return "stages must be in [2, 8]";
  if (c.splits < 1 || c.splits > std::min(blocks, kMlaMaxSplits)) {
    return "splits must be in [1, min(topk / 64, 64)]";
  }
  if (c.blocks_per_split * c.splits < blocks) return "blocks_per_split * splits must cover topk / 64";
  if (sparse_mla_dynamic_smem(s.format, s.rope_dims, c.head_group, c.warps, c.stages) >
      static_cast<size_t>(facts.max_smem_per_block_optin)) {
    return "shared memory of head_group x stages exceeds the device's per-block limit";
  }
  return "";
}

}  // namespace chordrt::heuristics
