#include "heuristics/dsa_indexer.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "runtime/core/math.hpp"

namespace chordrt::heuristics {

namespace {

constexpr int kReservedSmemPerCta = 1024;  // the driver's per-CTA reservation on sm_90

bool power_of_two(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

}  // namespace

DsaKeyCacheWriteConfig select_dsa_key_cache_write() { return {8}; }

uint32_t dsa_key_cache_write_grid(int64_t num_tokens, const DsaKeyCacheWriteConfig& c, const DeviceFacts& facts) {
  // A few waves of 256-thread CTAs; beyond that the kernel's stride loop is as good as more CTAs.
  const int64_t cap = int64_t{facts.sm_count} * 64;
  return static_cast<uint32_t>(std::clamp<int64_t>(ceil_div<int64_t>(num_tokens, c.warps), 1, cap));
}

int dsa_logits_ctas_per_sm(const DsaLogitsConfig& c) { return c.head_groups == 1 ? 3 : 1; }

int dsa_logits_dynamic_smem(int page_size, const DsaLogitsConfig& c) {
  return chord::dsa_indexer::logits_smem(page_size, c.key_warps, c.head_groups, c.stages, c.keys_per_cta).bytes;
}

DsaLogitsConfig select_dsa_logits(const DsaLogitsShape& s, const DeviceFacts& facts) {
  DsaLogitsConfig c{4, s.heads > 64 ? 2 : 1, 2, 8192};
  const int64_t resident = int64_t{facts.sm_count} * dsa_logits_ctas_per_sm(c);
  const int64_t rows = std::max<int64_t>(s.num_tokens, 1);
  while (c.keys_per_cta > 512 && rows * ceil_div(std::max(s.max_context, 1), c.keys_per_cta) < 8 * resident) {
    c.keys_per_cta /= 2;
  }
  if (s.page_size == 1) c.keys_per_cta = std::min(c.keys_per_cta, 2048);
  const int per_cta =
      (facts.max_smem_per_block_optin + kReservedSmemPerCta) / dsa_logits_ctas_per_sm(c) - kReservedSmemPerCta;
  while (c.stages < 8) {
    DsaLogitsConfig deeper = c;
    ++deeper.stages;
    if (dsa_logits_dynamic_smem(s.page_size, deeper) > std::min(per_cta, facts.max_smem_per_block_optin)) {
      break;
    }
    c = deeper;
  }
  return c;
}

int64_t dsa_logits_chunks(int32_t max_context, const DsaLogitsConfig& c) {
  return ceil_div(std::max(max_context, 0), c.keys_per_cta);
}

std::string dsa_heads_error(int heads, std::string_view name) {
  if (heads < 8 || heads > chord::dsa_indexer::kMaxHeads || heads % 8 != 0) {
    return fmt::format("{} must be a multiple of 8 in [8, {}], got {}", name, chord::dsa_indexer::kMaxHeads, heads);
  }
  return "";
}

std::string dsa_logits_config_error(int heads, int page_size, const DsaLogitsConfig& c, const DeviceFacts& facts) {
  if (std::string why = dsa_heads_error(heads, "heads"); !why.empty()) return why;
  if (page_size < 1 || page_size > chord::dsa_indexer::kMaxPageSize) {
    return fmt::format("page_size must be in [1, {}], got {}", chord::dsa_indexer::kMaxPageSize, page_size);
  }
  if (c.key_warps != 4) return fmt::format("key_warps must be 4, got {}", c.key_warps);
  if (c.head_groups != 1 && c.head_groups != 2) return fmt::format("head_groups must be 1 or 2, got {}", c.head_groups);
  if (heads > chord::dsa_indexer::kMaxHeadsPerWarp * c.head_groups) {
    return fmt::format("{} heads need {} head groups (64 heads per warp at most), got {}", heads, (heads + 63) / 64,
                       c.head_groups);
  }
  if (c.stages < 2 || c.stages > 8) return fmt::format("stages must be in [2, 8], got {}", c.stages);
  if (!power_of_two(c.keys_per_cta) || c.keys_per_cta < c.key_warps * 32 || c.keys_per_cta > 8192) {
    return fmt::format("keys_per_cta must be a power of two in [{}, 8192], got {}", c.key_warps * 32, c.keys_per_cta);
  }
  if (const int smem = dsa_logits_dynamic_smem(page_size, c); smem > facts.max_smem_per_block_optin) {
    return fmt::format("the config needs {} bytes of shared memory, the device allows {}", smem,
                       facts.max_smem_per_block_optin);
  }
  return "";
}

DsaTopkConfig select_dsa_topk(int topk, const DeviceFacts& facts) {
  (void)topk;
  (void)facts;
  return {1024, 8192};
}

std::string dsa_topk_config_error(const DsaTopkConfig& c, const DeviceFacts& facts) {
  if (c.threads < 32 || c.threads > 1024 || !power_of_two(c.threads)) {
    return fmt::format("threads must be a power of two in [32, 1024], got {}", c.threads);
  }
  if (c.candidates < 256 || c.candidates > 16384 || c.candidates % 256 != 0) {
    return fmt::format("candidates must be a multiple of 256 in [256, 16384], got {}", c.candidates);
  }
  if (chord::dsa_indexer::topk_dynamic_smem(c.candidates) > facts.max_smem_per_block_optin) {
    return fmt::format("candidates {} need {} bytes of shared memory, the device allows {}", c.candidates,
                       chord::dsa_indexer::topk_dynamic_smem(c.candidates), facts.max_smem_per_block_optin);
  }
  return "";
}

}  // namespace chordrt::heuristics
