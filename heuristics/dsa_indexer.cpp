#include "heuristics/dsa_indexer.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "heuristics/config_override.hpp"
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

int dsa_logits_dynamic_smem(int heads, int page_size, const DsaLogitsConfig& c) {
  return chord::dsa_indexer::logits_smem(heads, page_size, c.stages, c.keys_per_cta).bytes;
}

DsaLogitsConfig select_dsa_logits(const DsaLogitsShape& s, const DeviceFacts& facts) {
  namespace di = chord::dsa_indexer;
  const int ctas_per_sm = di::kLogitsCtasPerSm;
  DsaLogitsConfig c{di::kMinStages, di::kMaxKeysPerCta, di::logits_uses_tma(s.page_size) ? 1 : 0};
  const int64_t resident = int64_t{facts.sm_count} * ctas_per_sm;
  const int64_t rows = std::max<int64_t>(s.num_tokens, 1);
  while (c.keys_per_cta > di::kMinKeysPerCta &&
         rows * ceil_div(std::max(s.max_context, 1), c.keys_per_cta) < 4 * resident) {
    c.keys_per_cta /= 2;
  }
  if (s.page_size == 1) c.keys_per_cta = std::min(c.keys_per_cta, 2048);
  const int per_cta =
      std::min((facts.max_smem_per_block_optin + kReservedSmemPerCta) / ctas_per_sm - kReservedSmemPerCta,
               facts.max_smem_per_block_optin);
  while (c.stages < di::kMaxStages) {
    DsaLogitsConfig deeper = c;
    ++deeper.stages;
    if (dsa_logits_dynamic_smem(s.heads, s.page_size, deeper) > per_cta) break;
    c = deeper;
  }
  return c;
}

std::string apply_dsa_logits_override(std::string_view spec, DsaLogitsConfig& c) {
  return apply_int_overrides(spec, {{"stages", &c.stages}, {"keys_per_cta", &c.keys_per_cta}, {"tma", &c.tma}});
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
  namespace di = chord::dsa_indexer;
  if (c.stages < di::kMinStages || c.stages > di::kMaxStages) {
    return fmt::format("stages must be in [{}, {}], got {}", di::kMinStages, di::kMaxStages, c.stages);
  }
  if (!power_of_two(c.keys_per_cta) || c.keys_per_cta < di::kMinKeysPerCta || c.keys_per_cta > di::kMaxKeysPerCta) {
    return fmt::format("keys_per_cta must be a power of two in [{}, {}], got {}", di::kMinKeysPerCta,
                       di::kMaxKeysPerCta, c.keys_per_cta);
  }
  if (c.tma != 0 && c.tma != 1) return fmt::format("tma must be 0 or 1, got {}", c.tma);
  if (c.tma == 1 && !di::logits_uses_tma(page_size)) {
    return fmt::format("tma=1 needs a page size that is a multiple of 4 and tiles 64 keys, got {}", page_size);
  }
  if (const int smem = dsa_logits_dynamic_smem(heads, page_size, c); smem > facts.max_smem_per_block_optin) {
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
