// warp_decode_moe: validate -> keys (heuristics, CHORD_WARP_DECODE_CONFIG) -> kernels -> two launches.
#include "runtime/ops/warp_decode.hpp"

#include <algorithm>

#include "runtime/env_config.hpp"
#include "runtime/launch.hpp"
#include "runtime/ops/resolve_config.hpp"
#include "runtime/ops/validate.hpp"

namespace chordrt::ops {

namespace {

using heuristics::WarpDecodeShape;
using heuristics::WeightFormat;

bool power_of_two(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

// What both kernels require of the shape and of one warp's K share (`groups_per_part` groups of 32).
std::string common_error(int format, int hidden, int intermediate, int max_tokens, int64_t groups_per_part, int sg) {
  if (hidden % 32 != 0 || intermediate % 32 != 0) {
    return fmt::format("hidden and intermediate must be multiples of 32, got {} and {}", hidden, intermediate);
  }
  if (!power_of_two(max_tokens)) return fmt::format("max_tokens must be a power of two, got {}", max_tokens);
  if (sg < wd::min_stage_groups(format) || sg % 2 != 0 || groups_per_part % sg != 0) {
    return fmt::format("stage_groups must be even, at least {} and divide the {} groups of a warp's share, got {}",
                       wd::min_stage_groups(format), groups_per_part, sg);
  }
  return "";
}

// "chord::warp_decode::<kernel><v0, v1, ..., true|false>": the templates take the key's fields in order,
// the last (has_map) as a bool.
template <class Family, class Key>
std::string instantiation(std::string_view kernel, const Key& k) {
  std::string args;
  for (size_t i = 0; i + 1 < Family::kFields.size(); ++i) args += fmt::format("{}, ", k.*(Family::kFields[i].member));
  return fmt::format("chord::warp_decode::{}<{}{}>", kernel, args, k.has_map ? "true" : "false");
}

template <class Family>
void require_valid(const typename Family::K& k) {
  if (const std::string why = Family::error(k); !why.empty()) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: {}", Family::kName, why);
  }
}

// Kimi K2 TP8 INT4 at one token; a small MXFP8 shape with an expert map at the largest bucket; and the
// API's extremes (1024 experts, top-32, 128 tokens: the largest route table in static shared memory).
const WarpDecodeShape kExamples[] = {{WeightFormat::kInt4Group32, 7168, 256, 384, 384, 8, false},
                                     {WeightFormat::kMxfp8, 2048, 384, 16, 128, 8, true},
                                     {WeightFormat::kInt4Group32, 4096, 1536, 1024, 2048, 32, true}};
constexpr int64_t kExampleTokens[] = {1, 128, 128};

// One kernel's keys (Member of WarpDecodeKeys) at the examples.
template <auto Member>
auto example_keys(const DeviceFacts& facts) {
  std::vector<std::remove_cvref_t<decltype(std::declval<WarpDecodeKeys>().*Member)>> out;
  for (size_t i = 0; i < std::size(kExamples); ++i)
    out.push_back(warp_decode_keys(kExamples[i], kExampleTokens[i], facts).*Member);
  return out;
}

}  // namespace

std::string WarpDecodeGateUpFamily::error(const K& k) {
  if (!power_of_two(k.k_split) || (k.hidden / 32) % k.k_split != 0) {
    return fmt::format("k_split must be a power of two dividing hidden / 32 = {}, got {}", k.hidden / 32, k.k_split);
  }
  if (k.intermediate % (8 * k.row_tiles) != 0) {
    return fmt::format("row_tiles {} must divide intermediate / 8 = {}", k.row_tiles, k.intermediate / 8);
  }
  return common_error(k.format, k.hidden, k.intermediate, k.max_tokens, k.hidden / 32 / k.k_split, k.stage_groups);
}

KernelProgram WarpDecodeGateUpFamily::program(const K& k) {
  require_valid<WarpDecodeGateUpFamily>(k);
  KernelProgram p;
  p.header = "warp_decode/gate_up.cuh";
  p.name_expression = instantiation<WarpDecodeGateUpFamily>("gate_up_kernel", k);
  p.threads = static_cast<uint32_t>(32 * k.k_split);
  p.dynamic_smem =
      static_cast<uint32_t>(wd::gate_up_dynamic_smem(k.format, k.k_split, k.stage_groups, k.row_tiles, k.stages));
  return p;
}

std::vector<WarpDecodeGateUpKey> WarpDecodeGateUpFamily::examples(const DeviceFacts& facts) {
  return example_keys<&WarpDecodeKeys::gate_up>(facts);
}

std::string WarpDecodeDownFamily::error(const K& k) {
  if (!power_of_two(k.warps)) return fmt::format("warps must be a power of two, got {}", k.warps);
  if ((k.intermediate / 32) % k.k_chunks != 0) {
    return fmt::format("k_chunks must divide intermediate / 32 = {}, got {}", k.intermediate / 32, k.k_chunks);
  }
  if (k.hidden % (16 * k.row_tiles) != 0) {
    return fmt::format("row_tiles {} must divide hidden / 16 = {}", k.row_tiles, k.hidden / 16);
  }
  return common_error(k.format, k.hidden, k.intermediate, k.max_tokens, k.intermediate / 32 / k.k_chunks,
                      k.stage_groups);
}

KernelProgram WarpDecodeDownFamily::program(const K& k) {
  require_valid<WarpDecodeDownFamily>(k);
  KernelProgram p;
  p.header = "warp_decode/down.cuh";
  p.name_expression = instantiation<WarpDecodeDownFamily>("down_kernel", k);
  p.threads = static_cast<uint32_t>(32 * k.warps);
  p.dynamic_smem = static_cast<uint32_t>(
      wd::down_dynamic_smem(k.format, k.warps, k.max_tokens, k.stage_groups, k.row_tiles, k.stages));
  return p;
}

std::vector<WarpDecodeDownKey> WarpDecodeDownFamily::examples(const DeviceFacts& facts) {
  return example_keys<&WarpDecodeKeys::down>(facts);
}

WarpDecodeKeys warp_decode_keys_of(const WarpDecodeShape& s, const heuristics::WarpDecodeGateUpConfig& g,
                                   const heuristics::WarpDecodeDownConfig& d) {
  const int format = static_cast<int>(s.format), map = s.has_map ? 1 : 0;
  return {{format, s.hidden, s.intermediate, s.experts, s.top_k, g.max_tokens, g.k_split, g.row_tiles, g.n_tiles,
           g.stage_groups, g.stages, map},
          {format, s.hidden, s.intermediate, s.experts, s.top_k, d.max_tokens, d.warps, d.k_chunks, d.row_tiles,
           d.n_tiles, d.stage_groups, d.stages, map}};
}

namespace {

using Configs = std::pair<heuristics::WarpDecodeGateUpConfig, heuristics::WarpDecodeDownConfig>;

std::string apply_override(std::string_view spec, Configs& c) {
  return heuristics::apply_warp_decode_override(spec, c.first, c.second);
}

}  // namespace

WarpDecodeKeys warp_decode_keys(const WarpDecodeShape& s, int64_t tokens, const DeviceFacts& facts) {
  const Configs chosen =
      resolve_config("warp_decode_moe", "CHORD_WARP_DECODE_CONFIG", env_config().warp_decode_override,
                     Configs{heuristics::select_warp_decode_gate_up(s, tokens, facts),
                             heuristics::select_warp_decode_down(s, tokens, facts)},
                     apply_override, [&](const Configs& c) -> std::string {
                       // The field ranges, then each kernel's own check: the same ones program() applies.
                       const WarpDecodeKeys k = warp_decode_keys_of(s, c.first, c.second);
                       try {
                         (void)WarpDecodeGateUpFamily::descriptor(facts.arch, k.gate_up);
                         (void)WarpDecodeDownFamily::descriptor(facts.arch, k.down);
                       } catch (const Error& e) {
                         return e.what();
                       }
                       if (std::string why = WarpDecodeGateUpFamily::error(k.gate_up); !why.empty()) {
                         return fmt::format("{}: {}", WarpDecodeGateUpFamily::kName, why);
                       }
                       if (std::string why = WarpDecodeDownFamily::error(k.down); !why.empty()) {
                         return fmt::format("{}: {}", WarpDecodeDownFamily::kName, why);
                       }
                       return "";
                     });
  return warp_decode_keys_of(s, chosen.first, chosen.second);
}

size_t warp_decode_moe_workspace_size(int64_t num_tokens, int32_t top_k, int32_t intermediate) {
  if (num_tokens <= 0 || top_k <= 0 || intermediate <= 0) return 0;
  size_t bytes = 2;
  for (const auto factor :
       {static_cast<uint64_t>(num_tokens), static_cast<uint64_t>(top_k), static_cast<uint64_t>(intermediate)}) {
    if (__builtin_mul_overflow(bytes, factor, &bytes)) return SIZE_MAX;  // no buffer is that large
  }
  return bytes;
}

ShapeRejection warp_decode_shape_rejection(int32_t format, int64_t num_tokens, int32_t hidden, int32_t intermediate,
                                           int32_t num_experts, int32_t top_k) {
  const auto out_of = [](const char* name, int64_t v, int64_t lo, int64_t hi) {
    return ShapeRejection{CHORD_ERROR_INVALID_ARGUMENT, fmt::format("{} must be in [{}, {}], got {}", name, lo, hi, v)};
  };
  if (format != CHORD_WEIGHT_INT4_GROUP32 && format != CHORD_WEIGHT_MXFP8) {
    return {CHORD_ERROR_INVALID_ARGUMENT, fmt::format("unknown weight format {}", format)};
  }
  if (num_tokens < 0 || num_tokens > wd::kMaxTokens) return out_of("num_tokens", num_tokens, 0, wd::kMaxTokens);
  if (hidden < 32 || hidden > (1 << 20)) return out_of("hidden", hidden, 32, 1 << 20);
  if (intermediate < 32 || intermediate > (1 << 20)) return out_of("intermediate", intermediate, 32, 1 << 20);
  if (hidden % 32 != 0 || intermediate % 32 != 0) {
    return {CHORD_ERROR_INVALID_ARGUMENT,
            fmt::format("hidden and intermediate must be multiples of the group size 32, got {} and {}", hidden,
                        intermediate)};
  }
  const int64_t k_multiple = 32 * wd::min_stage_groups(format);
  if (hidden % k_multiple != 0 || intermediate % k_multiple != 0) {
    return {CHORD_ERROR_UNSUPPORTED,
            fmt::format("{} weights need hidden and intermediate to be multiples of {} (whole shared-memory stages), "
                        "got {} and {}",
                        format == CHORD_WEIGHT_INT4_GROUP32 ? "INT4" : "MXFP8", k_multiple, hidden, intermediate)};
  }
  if (num_experts < 1 || num_experts > wd::kMaxExperts) return out_of("num_experts", num_experts, 1, wd::kMaxExperts);
  if (top_k < 1 || top_k > wd::kMaxTopK) return out_of("top_k", top_k, 1, wd::kMaxTopK);
  return {CHORD_SUCCESS, ""};
}

void warp_decode_moe(const chord_warp_decode_moe_args_t& a, CUstream stream) {
  constexpr const char* op = "warp_decode_moe";
  if (const ShapeRejection r =
          warp_decode_shape_rejection(a.format, a.num_tokens, a.hidden, a.intermediate, a.num_experts, a.top_k);
      r.status != CHORD_SUCCESS) {
    throw_error(r.status, "{}: {}", op, r.why);
  }
  if (a.expert_map) require_range(a.num_global_experts, 1, INT32_MAX, op, "num_global_experts");
  if (a.num_tokens == 0) return;  // nothing is read or written
  require_pointer(a.x, op, "x", 16);
  require_pointer(a.topk_ids, op, "topk_ids", 4);
  require_pointer(a.topk_weights, op, "topk_weights", 4);
  require_pointer(a.w13, op, "w13", 16);
  require_pointer(a.w2, op, "w2", 16);
  const unsigned scale_align = a.format == CHORD_WEIGHT_INT4_GROUP32 ? 2 : 1;
  require_pointer(a.w13_scale, op, "w13_scale", scale_align);
  require_pointer(a.w2_scale, op, "w2_scale", scale_align);
  if (a.expert_map) require_pointer(a.expert_map, op, "expert_map", 4);
  require_pointer(a.workspace, op, "workspace", 16);
  require_pointer(a.output, op, "output", 16);
  const size_t need = warp_decode_moe_workspace_size(a.num_tokens, a.top_k, a.intermediate);
  if (a.workspace_bytes < need) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT,
                "{}: workspace must hold [num_tokens*top_k, intermediate] BF16 = {} bytes, got {}", op, need,
                a.workspace_bytes);
  }

  const WarpDecodeShape s{static_cast<WeightFormat>(a.format),
                          a.hidden,
                          a.intermediate,
                          a.num_experts,
                          a.expert_map ? a.num_global_experts : a.num_experts,
                          a.top_k,
                          a.expert_map != nullptr};
  check_override_syntax<Configs>(op, "CHORD_WARP_DECODE_CONFIG", env_config().warp_decode_override, apply_override);
  const ContextState& ctx = JitRuntime::global().context_for(stream);
  const WarpDecodeKeys keys = warp_decode_keys(s, a.num_tokens, ctx.facts);
  const LoadedKernel& gate_up = WarpDecodeGateUpFamily::kernel(keys.gate_up, ctx, stream);
  const LoadedKernel& down = WarpDecodeDownFamily::kernel(keys.down, ctx, stream);

  const int32_t tokens = static_cast<int32_t>(a.num_tokens);
  const int32_t global = s.global_experts;
  const WarpDecodeGateUpKey& g = keys.gate_up;
  const int64_t ctas = heuristics::warp_decode_gate_up_ctas(
      s, {g.max_tokens, g.k_split, g.row_tiles, g.n_tiles, g.stage_groups, g.stages}, a.num_tokens, ctx.facts);
  launch(ctx, gate_up, {{static_cast<uint32_t>(ctas), 1, 1}, stream}, a.x, a.topk_ids, a.expert_map, global, tokens,
         a.w13, a.w13_scale, a.workspace);
  launch(ctx, down,
         {{static_cast<uint32_t>(a.hidden / (16 * keys.down.row_tiles)), 1, 1}, stream, LaunchOrder::kProgrammatic},
         a.workspace, a.topk_weights, a.topk_ids, a.expert_map, global, tokens, a.w2, a.w2_scale, a.output);
}

void plan_warp_decode(const ModelPlanInput& in, PlanBuilder& plan) {
  const MoeModelShape& m = in.model;
  if (m.moe_intermediate <= 0 || m.weight_format.empty()) return;
  const Deployment& dep = in.deployment;
  const WarpDecodeShape s{m.weight_format == "int4" ? WeightFormat::kInt4Group32 : WeightFormat::kMxfp8,
                          m.hidden,
                          m.moe_intermediate / dep.tensor_parallel,
                          m.num_experts / dep.expert_parallel,
                          m.num_experts,
                          m.top_k,
                          dep.expert_parallel > 1};
  // Shapes warp decode does not serve (K not a whole number of stages) plan nothing.
  if (s.hidden % (32 * wd::min_stage_groups(static_cast<int>(s.format))) != 0 ||
      s.intermediate % (32 * wd::min_stage_groups(static_cast<int>(s.format))) != 0) {
    return;
  }
  for (int64_t tokens : heuristics::warp_decode_prewarm_tokens()) {
    const WarpDecodeKeys k = warp_decode_keys(s, tokens, in.facts);
    plan.add(WarpDecodeGateUpFamily::descriptor(in.facts.arch, k.gate_up));
    plan.add(WarpDecodeDownFamily::descriptor(in.facts.arch, k.down));
  }
}

}  // namespace chordrt::ops
