#include "runtime/model_plan.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <nlohmann/json.hpp>

#include "runtime/core/error.hpp"
#include "runtime/core/file_read.hpp"
#include "runtime/core/json.hpp"

namespace chordrt {

namespace {

// Hugging Face configs nest a few levels (quantization_config.config_groups.group_0.weights) and take a
// few KB.
constexpr int kMaxConfigDepth = 64;
constexpr uint64_t kMaxConfigBytes = 16 << 20;

const MoeModelShape kPresets[] = {
    {"kimi-k2", 7168, 2048, 384, 8, "int4", std::nullopt},
    {"deepseek-v3", 7168, 2048, 256, 8, "", std::nullopt},
    // DeepSeek-V3.2: V3's MoE, 128 MLA heads, a 64-head indexer.
    {"deepseek-v3.2", 7168, 2048, 256, 8, "", SparseAttentionShape{128, 64, false, 64, 2048}},
    // Mistral Large 4 (seed 004): hidden 6144, 128 experts top-4 (expert size not assumed: attention
    // only), 64 MLA heads with NoPE layers, a 32-head indexer.
    {"mistral-large-4", 6144, 0, 128, 4, "", SparseAttentionShape{64, 64, true, 32, 2048}},
};

int json_int(const nlohmann::json& config, std::initializer_list<const char*> names, std::string_view path) {
  for (const nlohmann::json* scope : {&config, config.contains("text_config") ? &config["text_config"] : nullptr}) {
    if (!scope) continue;
    for (const char* n : names) {
      if (!scope->contains(n) || !(*scope)[n].is_number_integer()) continue;
      // Read as int64 first: get<int>() would silently truncate 4294967552 to 256.
      const int64_t v = (*scope)[n].get<int64_t>();
      if (v < 0 || v > INT32_MAX) {
        throw_error(CHORD_ERROR_INVALID_ARGUMENT, "model config {}: \"{}\" must be in [0, {}], got {}", path, n,
                    INT32_MAX, v);
      }
      return static_cast<int>(v);
    }
  }
  std::string wanted;
  for (const char* n : names) wanted += fmt::format("{}\"{}\"", wanted.empty() ? "" : " or ", n);
  throw_error(CHORD_ERROR_INVALID_ARGUMENT, "model config {}: no integer {} (a MoE config is needed)", path, wanted);
}

// The warp-decode format of a config.json's quantization_config ("" when it has none of ours).
std::string weight_format_of(const nlohmann::json& config, std::string_view path) {
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
  // A field of the wrong JSON type is an error naming it, not the JSON library's type_error.
  auto field = [&](const nlohmann::json& obj, const char* where, const char* key, nlohmann::json::value_t type) {
    if (!obj.is_object() || !obj.contains(key)) return nlohmann::json();
    const nlohmann::json& v = obj[key];
    const bool ok = type == nlohmann::json::value_t::number_integer ? v.is_number_integer() : v.type() == type;
    if (!ok) {
      throw_error(CHORD_ERROR_INVALID_ARGUMENT, "model config {}: {}.{} must be a {}, got {}", path, where, key,
                  nlohmann::json(type).type_name(), v.dump());
    }
    return v;
  };
  using T = nlohmann::json::value_t;
  const nlohmann::json method = field(*q, "quantization_config", "quant_method", T::string);
  const nlohmann::json algo = field(*q, "quantization_config", "quant_algo", T::string);
  for (const nlohmann::json* v : {&method, &algo}) {
    if (v->is_string() && lower(v->get<std::string>()) == "mxfp8") return "mxfp8";
  }
  const nlohmann::json groups = field(*q, "quantization_config", "config_groups", T::object);
  if (method.is_string() && method.get<std::string>() == "compressed-tensors" && groups.is_object()) {
    for (const auto& [name, group] : groups.items()) {
      const nlohmann::json w = field(group, "config_groups.<group>", "weights", T::object);
      const nlohmann::json bits = field(w, "weights", "num_bits", T::number_integer);
      const nlohmann::json size = field(w, "weights", "group_size", T::number_integer);
      const nlohmann::json symmetric = field(w, "weights", "symmetric", T::boolean);
      if (bits == 4 && size == 32 && symmetric == true) return "int4";
    }
  }
  return "";
}

// DSA sparse attention from a config.json (DeepSeek-V3.2's field names), when its MLA is the 512-dim
// latent the sparse MLA kernels serve; none otherwise.
std::optional<SparseAttentionShape> sparse_attention_of(const nlohmann::json& config, std::string_view path) {
  const nlohmann::json& c = config.contains("text_config") ? config["text_config"] : config;
  auto get = [&](const char* key, int fallback) {
    return c.contains(key) && c[key].is_number_integer() ? json_int(c, {key}, path) : fallback;
  };
  if (get("index_topk", 0) <= 0 || get("kv_lora_rank", 0) != 512 || get("num_attention_heads", 0) <= 0) {
    return std::nullopt;
  }
  return SparseAttentionShape{get("num_attention_heads", 0), get("qk_rope_head_dim", 64), false,
                              get("index_n_heads", 0), get("index_topk", 0)};
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
  std::string text, problem;
  switch (read_regular_file(path, text, kMaxConfigBytes, problem)) {
    case ReadResult::kMissing: {
      std::string names;
      for (const auto& p : kPresets) names += " " + p.name;
      throw_error(CHORD_ERROR_INVALID_ARGUMENT, "model: \"{}\" is neither a preset (known:{}) nor a readable file",
                  path, names);
    }
    case ReadResult::kRejected:
      throw_error(CHORD_ERROR_INVALID_ARGUMENT, "model config {}: {}", path, problem);
    case ReadResult::kRead:
      break;
  }
  nlohmann::json config;
  try {
    config = parse_json_bounded(text, kMaxConfigDepth);
  } catch (const std::exception& e) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "model config {}: not valid JSON ({})", path, e.what());
  }
  MoeModelShape m;
  m.name = path;
  m.hidden = json_int(config, {"hidden_size"}, path);
  m.moe_intermediate = json_int(config, {"moe_intermediate_size"}, path);
  m.num_experts = json_int(config, {"n_routed_experts", "num_experts", "num_local_experts"}, path);
  m.top_k = json_int(config, {"num_experts_per_tok", "moe_topk"}, path);
  m.weight_format = weight_format_of(config, path);
  m.attention = sparse_attention_of(config, path);
  if (m.hidden <= 0 || m.moe_intermediate <= 0 || m.num_experts <= 0 || m.top_k <= 0 || m.top_k > m.num_experts) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT,
                "model config {}: implausible MoE shape (hidden {}, moe_intermediate {}, experts {}, top-k {})", path,
                m.hidden, m.moe_intermediate, m.num_experts, m.top_k);
  }
  return m;
}

void PlanBuilder::add(const jit::Descriptor& d) {
  if (std::find(descriptors_.begin(), descriptors_.end(), d) == descriptors_.end()) descriptors_.push_back(d);
}

std::vector<jit::Descriptor> plan_descriptors(const MoeModelShape& m, const Deployment& dep, const DeviceFacts& facts) {
  require_supported(facts.arch);
  if (m.moe_intermediate > 0 && m.moe_intermediate % dep.tensor_parallel != 0) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "deployment {}: moe_intermediate {} is not divisible by TP {}", dep.name,
                m.moe_intermediate, dep.tensor_parallel);
  }
  if (m.moe_intermediate > 0 && m.num_experts % dep.expert_parallel != 0) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "deployment {}: {} experts are not divisible by EP {}", dep.name,
                m.num_experts, dep.expert_parallel);
  }
  PlanBuilder plan;
  const ModelPlanInput in{m, dep, facts};
  for (FamilyPlanner planner : family_planners()) planner(in, plan);
  return plan.take();
}

}  // namespace chordrt
