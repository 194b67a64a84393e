#include "runtime/model_plan.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/error.hpp"
#include "runtime/ops/dsa_indexer.hpp"
#include "runtime/ops/glue.hpp"
#include "runtime/ops/grouped.hpp"
#include "runtime/ops/indexed.hpp"
#include "runtime/ops/mla_cache.hpp"
#include "runtime/ops/sparse_mla.hpp"
#include "runtime/ops/warp_decode.hpp"

namespace chordrt {

namespace {

const MoeModelShape kPresets[] = {
    {"kimi-k2", 7168, 2048, 384, 8, "int4", std::nullopt},
    {"deepseek-v3", 7168, 2048, 256, 8, "", std::nullopt},
    // DeepSeek-V3.2: V3's MoE, 128 MLA heads, a 64-head indexer.
    {"deepseek-v3.2", 7168, 2048, 256, 8, "", SparseAttentionShape{128, 64, false, 64, 2048}},
    // Mistral Large 4 (seed 004): hidden 6144, 128 experts top-4 (expert size not assumed: attention
    // only), 64 MLA heads with NoPE layers, a 32-head indexer.
    {"mistral-large-4", 6144, 0, 128, 4, "", SparseAttentionShape{64, 64, true, 32, 2048}},
};

// Block sizes the routing is aligned to by the GEMM families' heuristics (decode 8..24, prefill 32..176
// rounded to the sizes vLLM uses).
constexpr int kAlignBlockSizes[] = {8, 16, 32, 64, 128};

int json_int(const nlohmann::json& config, std::initializer_list<const char*> names, std::string_view path) {
  for (const nlohmann::json* scope : {&config, config.contains("text_config") ? &config["text_config"] : nullptr}) {
    if (!scope) continue;
    for (const char* n : names) {
      if (scope->contains(n) && (*scope)[n].is_number_integer()) return (*scope)[n].get<int>();
    }
  }
  std::string wanted;
  for (const char* n : names) wanted += fmt::format("{}\"{}\"", wanted.empty() ? "" : " or ", n);
  throw_error(CHORD_ERROR_INVALID_ARGUMENT, "model config {}: no integer {} (a MoE config is needed)", path, wanted);
}

// The warp-decode format of a config.json's quantization_config ("" when it has none of ours).
std::string weight_format_of(const nlohmann::json& config) {
  const nlohmann::json* q = nullptr;
  for (const nlohmann::json* scope : {&config, config.contains("text_config") ? &config["text_config"] : nullptr}) {
    if (scope && scope->contains("quantization_config") && (*scope)["quantization_config"].is_object()) {
      q = &(*scope)["quantization_config"];
      break;
    }
  }
  if (!q) return "";
  auto lower = [](std::string v) {
    for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return v;
  };
  for (const char* key : {"quant_method", "quant_algo"}) {
    if (q->contains(key) && (*q)[key].is_string() && lower((*q)[key].get<std::string>()) == "mxfp8") return "mxfp8";
  }
  if (q->value("quant_method", "") == "compressed-tensors" && q->contains("config_groups") &&
      (*q)["config_groups"].is_object()) {
    for (const auto& [name, group] : (*q)["config_groups"].items()) {
      const auto w = group.value("weights", nlohmann::json::object());
      if (w.value("num_bits", 0) == 4 && w.value("group_size", 0) == 32 && w.value("symmetric", false)) return "int4";
    }
  }
  return "";
}

// DSA sparse attention from a config.json (DeepSeek-V3.2's field names), when its MLA is the 512-dim
// latent the sparse MLA kernels serve; none otherwise.
std::optional<SparseAttentionShape> sparse_attention_of(const nlohmann::json& config) {
  const nlohmann::json& c = config.contains("text_config") ? config["text_config"] : config;
  auto get = [&](const char* key, int fallback) {
    return c.contains(key) && c[key].is_number_integer() ? c[key].get<int>() : fallback;
  };
  if (get("index_topk", 0) <= 0 || get("kv_lora_rank", 0) != 512 || get("num_attention_heads", 0) <= 0) {
    return std::nullopt;
  }
  return SparseAttentionShape{get("num_attention_heads", 0), get("qk_rope_head_dim", 64), false,
                              get("index_n_heads", 0), get("index_topk", 0)};
}

// The grouped family under expert parallelism: packers and GEMMs of both projections in both modes, for
// prefill steps of 128 rows per expert up to 64K rows and decode batches of 1..256 expected tokens per
// expert (the heuristics map those onto a few configurations).
template <typename Add>
void add_grouped_descriptors(const MoeModelShape& m, int64_t inter, int experts, jit::Arch arch, Add&& add) {
  using heuristics::GroupedMode;
  const std::pair<int64_t, int64_t> projections[] = {{2 * inter, m.hidden}, {m.hidden, inter}};  // (N, K)
  for (const GroupedMode mode : {GroupedMode::kContiguous, GroupedMode::kMasked}) {
    for (const auto& [n, k] : projections) {
      const heuristics::GroupedShape s{mode, n, k, experts};
      if (!heuristics::grouped_config_error(s, heuristics::select_grouped(s, 1)).empty()) continue;
      add(ops::grouped_pack_descriptor(arch, mode, n, k));
      if (mode == GroupedMode::kContiguous) {
        for (int64_t rows = 128LL * experts; rows <= 65536; rows *= 2) {
          add(ops::grouped_gemm_descriptor(arch, s, heuristics::select_grouped(s, rows)));
        }
      } else {
        for (int64_t expected = 1; expected <= 256; ++expected) {
          add(ops::grouped_gemm_descriptor(arch, s, heuristics::select_grouped(s, expected)));
        }
      }
    }
  }
}

// The indexed family (vLLM routing), EP or TP: both layouts' packers and GEMMs of both projections, for
// steps of 1..128 tokens on the decode layout and 64..64K tokens on the prefill layout, plus moe_align at
// every block size the heuristic picks for them. Routed rows on this GPU: tokens * top_k / EP.
template <typename Add>
void add_indexed_descriptors(const MoeModelShape& m, int64_t inter, const Deployment& dep, jit::Arch arch, Add&& add) {
  using heuristics::IndexedLayout;
  const int experts = m.num_experts / dep.expert_parallel;
  const std::pair<int64_t, int64_t> projections[] = {{2 * inter, m.hidden}, {m.hidden, inter}};  // (N, K)
  for (const auto& [n, k] : projections) {
    for (const IndexedLayout layout : {IndexedLayout::kMma, IndexedLayout::kWgmma}) {
      const heuristics::IndexedShape s{layout, n, k, experts};
      if (!heuristics::indexed_shape_error(s).empty()) continue;
      add(ops::indexed_pack_descriptor(arch, layout, n, k));
      const bool decode = layout == IndexedLayout::kMma;
      for (int64_t tokens = decode ? 1 : 64; tokens <= (decode ? 128 : 65536);
           tokens = decode ? tokens + 1 : tokens * 2) {
        const int64_t rows = std::max<int64_t>(1, tokens * m.top_k / dep.expert_parallel);
        const int bm = heuristics::select_indexed_block_m(s, rows);
        for (const auto& c : heuristics::moe_align_configs(m.num_experts)) {
          add(ops::moe_align_descriptor(arch, m.num_experts, bm, dep.expert_parallel > 1, c));
        }
        if (decode) {
          add(ops::indexed_decode_descriptor(arch, s, heuristics::select_indexed_decode(s, bm)));
        } else {
          add(ops::indexed_prefill_descriptor(arch, s, heuristics::select_indexed_prefill(s, bm, rows)));
        }
      }
    }
  }
}

// Sparse attention: the writers and decode at this deployment's head count, the indexer at the decode
// and prefill shapes its heuristic distinguishes.
template <typename Add>
void add_sparse_attention_descriptors(const SparseAttentionShape& a, const Deployment& dep, jit::Arch arch, Add&& add) {
  const int heads = dep.expert_parallel > 1 ? a.num_heads : a.num_heads / dep.tensor_parallel;  // EP: DP attention
  if (a.num_heads % dep.tensor_parallel != 0 || heads % 8 != 0 || heads > heuristics::kMlaMaxHeads) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT,
                "deployment {}: {} attention heads over TP {} is not a multiple of 8 up to {} per GPU", dep.name,
                a.num_heads, dep.tensor_parallel, heuristics::kMlaMaxHeads);
  }
  for (int rope : {a.rope_dims, 0}) {
    if (rope == 0 && a.rope_dims != 0 && !a.nope_layers) continue;
    add(ops::mla_cache_write_descriptor(arch, CHORD_MLA_CACHE_FP8_DS_MLA, rope));
    const heuristics::SparseMlaShape s{heuristics::MlaCacheFormat::kFp8DsMla, rope, heads, a.index_topk, 1};
    add(ops::sparse_mla_decode_descriptor(arch, s, heuristics::select_sparse_mla_kernel(s, heuristics::DeviceFacts{})));
  }
  add(ops::sparse_mla_combine_descriptor(arch, heads));
  if (a.index_heads == 0) return;
  constexpr int kPage = 64;
  add(ops::dsa_key_cache_write_descriptor(arch, heuristics::select_dsa_key_cache_write()));
  for (int64_t tokens = 1; tokens <= 16384; tokens *= 2) {
    for (int32_t context = 1024; context <= (256 << 10); context *= 2) {
      add(ops::dsa_indexer_logits_descriptor(arch, a.index_heads, kPage,
                                             heuristics::select_dsa_logits({a.index_heads, kPage, tokens, context})));
    }
  }
  add(ops::dsa_topk_descriptor(arch, heuristics::select_dsa_topk(a.index_topk)));
}

// The MoE kernels (glue, warp decode, the W4A16 families) of a deployment.
template <typename Add>
void add_moe_descriptors(const MoeModelShape& m, const Deployment& dep, jit::Arch arch, Add&& add) {
  if (m.moe_intermediate % dep.tensor_parallel != 0) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "deployment {}: moe_intermediate {} is not divisible by TP {}", dep.name,
                m.moe_intermediate, dep.tensor_parallel);
  }
  if (m.num_experts % dep.expert_parallel != 0) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "deployment {}: {} experts are not divisible by EP {}", dep.name,
                m.num_experts, dep.expert_parallel);
  }
  const bool ep = dep.expert_parallel > 1;
  const int64_t inter = m.moe_intermediate / dep.tensor_parallel;
  for (int block : kAlignBlockSizes) {
    for (const auto& c : heuristics::moe_align_configs(m.num_experts)) {
      add(ops::moe_align_descriptor(arch, m.num_experts, block, ep, c));
    }
  }
  add(ops::silu_and_mul_descriptor(arch, inter));
  add(ops::moe_combine_descriptor(arch, m.top_k, m.hidden, ep));
  if (!m.weight_format.empty()) {
    const heuristics::WarpDecodeShape s{
        m.weight_format == "int4" ? heuristics::WeightFormat::kInt4Group32 : heuristics::WeightFormat::kMxfp8,
        m.hidden,
        static_cast<int>(inter),
        m.num_experts / dep.expert_parallel,
        m.num_experts,
        m.top_k,
        ep};
    for (int64_t tokens : heuristics::warp_decode_prewarm_tokens()) {
      const auto gu = heuristics::select_warp_decode_gate_up(s, tokens);
      const auto dn = heuristics::select_warp_decode_down(s, tokens);
      if (gu.stage_groups == 0 || dn.stage_groups == 0) break;  // shape not served by warp decode
      add(ops::warp_decode_gate_up_descriptor(arch, s, gu));
      add(ops::warp_decode_down_descriptor(arch, s, dn));
    }
  }
  if (m.weight_format == "int4") {
    add_indexed_descriptors(m, inter, dep, arch, add);
    if (ep) add_grouped_descriptors(m, inter, m.num_experts / dep.expert_parallel, arch, add);
  }
}

}  // namespace

Deployment Deployment::parse(std::string_view text) {
  Deployment d;
  d.name = std::string(text);
  int n = 0;
  auto digits = text.size() > 2 ? text.substr(2) : std::string_view();
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (text.size() <= 2 || ec != std::errc() || end != digits.data() + digits.size() || n < 1 || n > 1024 ||
      !(text.starts_with("tp") || text.starts_with("ep"))) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "deployment: expected tpN or epN (e.g. tp8, ep16), got \"{}\"", text);
  }
  (text.starts_with("tp") ? d.tensor_parallel : d.expert_parallel) = n;
  return d;
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& p : kPresets) names.push_back(p.name);
  return names;
}

MoeModelShape resolve_model(std::string_view preset_or_path) {
  for (const auto& p : kPresets) {
    if (p.name == preset_or_path) return p;
  }
  const std::string path(preset_or_path);
  std::ifstream in(path);
  if (!in) {
    std::string names;
    for (const auto& p : kPresets) names += " " + p.name;
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "model: \"{}\" is neither a preset (known:{}) nor a readable file", path,
                names);
  }
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "model config {}: not valid JSON ({})", path, e.what());
  }
  MoeModelShape m;
  m.name = path;
  m.hidden = json_int(config, {"hidden_size"}, path);
  m.moe_intermediate = json_int(config, {"moe_intermediate_size"}, path);
  m.num_experts = json_int(config, {"n_routed_experts", "num_experts", "num_local_experts"}, path);
  m.top_k = json_int(config, {"num_experts_per_tok", "moe_topk"}, path);
  m.weight_format = weight_format_of(config);
  m.attention = sparse_attention_of(config);
  if (m.hidden <= 0 || m.moe_intermediate <= 0 || m.num_experts <= 0 || m.top_k <= 0 || m.top_k > m.num_experts) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT,
                "model config {}: implausible MoE shape (hidden {}, moe_intermediate {}, experts {}, top-k {})", path,
                m.hidden, m.moe_intermediate, m.num_experts, m.top_k);
  }
  return m;
}

std::vector<jit::Descriptor> plan_descriptors(const MoeModelShape& m, const Deployment& dep, jit::Arch arch) {
  std::vector<jit::Descriptor> out;
  auto add = [&](const jit::Descriptor& d) {
    if (std::find(out.begin(), out.end(), d) == out.end()) out.push_back(d);
  };
  if (m.moe_intermediate > 0) add_moe_descriptors(m, dep, arch, add);
  if (m.attention) add_sparse_attention_descriptors(*m.attention, dep, arch, add);
  return out;
}

}  // namespace chordrt
