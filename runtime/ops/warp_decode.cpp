// warp_decode_moe: validate -> descriptors (gate/up, down) -> kernels -> two launches.
#include "chordrt/chordrt.hpp"  // TEMPORARY until the family takes its C args struct
#include "runtime/ops/warp_decode.hpp"

#include "runtime/env_config.hpp"
#include "runtime/jit_runtime.hpp"
#include "runtime/launch.hpp"
#include "runtime/ops/validate.hpp"

namespace chordrt::ops {

namespace {

using heuristics::WarpDecodeShape;
using heuristics::WeightFormat;

constexpr jit::FieldSpec kGateUpFields[] = {{"format", INT64_MIN, INT64_MAX}, {"hidden", INT64_MIN, INT64_MAX}, {"intermediate", INT64_MIN, INT64_MAX}, {"experts", INT64_MIN, INT64_MAX}, {"top_k", INT64_MIN, INT64_MAX}, {"max_tokens", INT64_MIN, INT64_MAX}, {"k_split", INT64_MIN, INT64_MAX}, {"row_tiles", INT64_MIN, INT64_MAX}, {"n_tiles", INT64_MIN, INT64_MAX}, {"stage_groups", INT64_MIN, INT64_MAX}, {"stages", INT64_MIN, INT64_MAX}, {"has_map", INT64_MIN, INT64_MAX}};
constexpr jit::FamilySchema kGateUpSchema{"warp_decode.gate_up", kGateUpFields};
constexpr jit::FieldSpec kDownFields[] = {{"format", INT64_MIN, INT64_MAX}, {"hidden", INT64_MIN, INT64_MAX}, {"intermediate", INT64_MIN, INT64_MAX}, {"experts", INT64_MIN, INT64_MAX}, {"top_k", INT64_MIN, INT64_MAX}, {"max_tokens", INT64_MIN, INT64_MAX}, {"warps", INT64_MIN, INT64_MAX}, {"k_chunks", INT64_MIN, INT64_MAX}, {"row_tiles", INT64_MIN, INT64_MAX}, {"n_tiles", INT64_MIN, INT64_MAX}, {"stage_groups", INT64_MIN, INT64_MAX}, {"stages", INT64_MIN, INT64_MAX}, {"has_map", INT64_MIN, INT64_MAX}};
constexpr jit::FamilySchema kDownSchema{"warp_decode.down", kDownFields};

bool power_of_two_in(int64_t v, int64_t lo, int64_t hi) { return v >= lo && v <= hi && (v & (v - 1)) == 0; }

// The ranges both kernels' templates accept; the splits are checked by each program().
void check_common(const jit::Descriptor& d) {
  const int64_t format = d[0], hidden = d[1], inter = d[2], experts = d[3], top_k = d[4], max_tokens = d[5];
  const int64_t has_map = d[static_cast<int>(d.schema->fields.size()) - 1];
  if ((format != 0 && format != 1) || hidden < 32 || hidden % 32 != 0 || hidden > (1 << 20) || inter < 32 ||
      inter % 32 != 0 || inter > (1 << 20) || experts < 1 || experts > heuristics::kWarpDecodeMaxExperts || top_k < 1 ||
      top_k > heuristics::kWarpDecodeMaxTopK || !power_of_two_in(max_tokens, 8, heuristics::kWarpDecodeMaxTokens) ||
      (has_map != 0 && has_map != 1)) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: values out of the kernel's range", jit::to_string(d));
  }
}

// Stage groups: even, at least the format's minimum, at most 8 (a row's scales move as one <= 16-byte
// piece), dividing `groups_per_part`; 2..8 stages.
bool stages_ok(const jit::Descriptor& d, int64_t groups_per_part, int64_t sg, int64_t stages) {
  const auto f = static_cast<heuristics::WeightFormat>(d[0]);
  return sg >= heuristics::warp_decode_min_stage_groups(f) && sg <= 8 && sg % 2 == 0 && groups_per_part % sg == 0 &&
         stages >= 2 && stages <= 8;
}

// "chord::warp_decode::<kernel><v0, v1, ..., true|false>": the templates take the descriptor's fields in
// schema order, the last (has_map) as a bool.
std::string instantiation(std::string_view kernel, const jit::Descriptor& d) {
  const size_t n = d.schema->fields.size();
  std::string args;
  for (size_t i = 0; i + 1 < n; ++i) args += fmt::format("{}, ", d.values[i]);
  return fmt::format("chord::warp_decode::{}<{}{}>", kernel, args, d.values[n - 1] ? "true" : "false");
}

KernelProgram gate_up_program(const jit::Descriptor& d) {
  check_common(d);
  const int64_t k_split = d[6], row_tiles = d[7], n_tiles = d[8], sg = d[9], stages = d[10];
  const int64_t groups = d[1] / 32;
  if (!power_of_two_in(k_split, 1, 16) || groups % k_split != 0 || (row_tiles != 1 && row_tiles != 2) ||
      d[2] % (8 * row_tiles) != 0 || n_tiles < 1 || n_tiles > 4 || !stages_ok(d, groups / k_split, sg, stages)) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT,
                "{}: k_split must divide hidden / 32 into whole stages of stage_groups, row_tiles 1 or 2 dividing "
                "intermediate / 8, n_tiles in [1, 4], stages in [2, 8]",
                jit::to_string(d));
  }
  KernelProgram p;
  p.header = "warp_decode/gate_up.cuh";
  p.name_expression = instantiation("gate_up_kernel", d);
  p.threads = static_cast<uint32_t>(32 * k_split);
  p.dynamic_smem = static_cast<uint32_t>(heuristics::warp_decode_gate_up_dynamic_smem(
      static_cast<heuristics::WeightFormat>(d[0]),
      {static_cast<int>(d[5]), static_cast<int>(k_split), static_cast<int>(row_tiles), static_cast<int>(n_tiles),
       static_cast<int>(sg), static_cast<int>(stages)}));
  return p;
}

KernelProgram down_program(const jit::Descriptor& d) {
  check_common(d);
  const int64_t warps = d[6], k_chunks = d[7], row_tiles = d[8], n_tiles = d[9], sg = d[10], stages = d[11];
  const int64_t groups = d[2] / 32;
  if (!power_of_two_in(warps, 1, 16) || k_chunks < 1 || groups % k_chunks != 0 || (row_tiles != 1 && row_tiles != 2) ||
      d[1] % (16 * row_tiles) != 0 || n_tiles < 1 || n_tiles > 4 || !stages_ok(d, groups / k_chunks, sg, stages)) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT,
                "{}: k_chunks must divide intermediate / 32 into whole stages of stage_groups, row_tiles 1 or 2 "
                "dividing hidden / 16, n_tiles in [1, 4], stages in [2, 8]",
                jit::to_string(d));
  }
  KernelProgram p;
  p.header = "warp_decode/down.cuh";
  p.name_expression = instantiation("down_kernel", d);
  p.threads = static_cast<uint32_t>(32 * warps);
  p.dynamic_smem = static_cast<uint32_t>(heuristics::warp_decode_down_dynamic_smem(
      static_cast<heuristics::WeightFormat>(d[0]),
      {static_cast<int>(d[5]), static_cast<int>(warps), static_cast<int>(k_chunks), static_cast<int>(row_tiles),
       static_cast<int>(n_tiles), static_cast<int>(sg), static_cast<int>(stages)}));
  return p;
}

// Kimi K2 TP8 INT4 at one token; a small MXFP8 shape with an expert map at the largest bucket; and the
// API's extremes (1024 experts, top-32, 128 tokens: the largest route table in static shared memory).
const WarpDecodeShape kExamples[] = {{WeightFormat::kInt4Group32, 7168, 256, 384, 384, 8, false},
                                     {WeightFormat::kMxfp8, 2048, 384, 16, 128, 8, true},
                                     {WeightFormat::kInt4Group32, 4096, 1536, 1024, 2048, 32, true}};
constexpr int64_t kExampleTokens[] = {1, 128, 128};

std::vector<jit::Descriptor> gate_up_examples(Arch arch) {
  std::vector<jit::Descriptor> out;
  for (size_t i = 0; i < std::size(kExamples); ++i) {
    out.push_back(warp_decode_gate_up_descriptor(
        arch, kExamples[i], heuristics::select_warp_decode_gate_up(kExamples[i], kExampleTokens[i])));
  }
  return out;
}

std::vector<jit::Descriptor> down_examples(Arch arch) {
  std::vector<jit::Descriptor> out;
  for (size_t i = 0; i < std::size(kExamples); ++i) {
    out.push_back(warp_decode_down_descriptor(arch, kExamples[i],
                                              heuristics::select_warp_decode_down(kExamples[i], kExampleTokens[i])));
  }
  return out;
}

}  // namespace

const KernelFamily kWarpDecodeGateUpFamily{kGateUpSchema, gate_up_program, gate_up_examples};
const KernelFamily kWarpDecodeDownFamily{kDownSchema, down_program, down_examples};

jit::Descriptor warp_decode_gate_up_descriptor(Arch arch, const WarpDecodeShape& s,
                                               const heuristics::WarpDecodeGateUpConfig& c) {
  return jit::Descriptor(kGateUpSchema, arch,
                         {static_cast<int64_t>(s.format), s.hidden, s.intermediate, s.experts, s.top_k, c.max_tokens,
                          c.k_split, c.row_tiles, c.n_tiles, c.stage_groups, c.stages, s.has_map ? 1 : 0});
}

jit::Descriptor warp_decode_down_descriptor(Arch arch, const WarpDecodeShape& s,
                                            const heuristics::WarpDecodeDownConfig& c) {
  return jit::Descriptor(kDownSchema, arch,
                         {static_cast<int64_t>(s.format), s.hidden, s.intermediate, s.experts, s.top_k, c.max_tokens,
                          c.warps, c.k_chunks, c.row_tiles, c.n_tiles, c.stage_groups, c.stages, s.has_map ? 1 : 0});
}

}  // namespace chordrt::ops

namespace chordrt {

size_t warp_decode_moe_workspace_size(int64_t num_tokens, int32_t top_k, int32_t intermediate) {
  if (num_tokens <= 0 || top_k <= 0 || intermediate <= 0) return 0;
  return static_cast<size_t>(num_tokens) * static_cast<size_t>(top_k) * static_cast<size_t>(intermediate) * 2;
}

void warp_decode_moe(const WarpDecodeMoeArgs& a, CUstream stream) {
  constexpr const char* op = "warp_decode_moe";
  using heuristics::WarpDecodeShape;
  if (a.format != CHORD_WEIGHT_INT4_GROUP32 && a.format != CHORD_WEIGHT_MXFP8) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: unknown weight format {}", op, static_cast<int>(a.format));
  }
  ops::require_range(a.num_tokens, 0, heuristics::kWarpDecodeMaxTokens, op, "num_tokens");
  ops::require_range(a.hidden, 32, 1 << 20, op, "hidden");
  ops::require_range(a.intermediate, 32, 1 << 20, op, "intermediate");
  if (a.hidden % 32 != 0 || a.intermediate % 32 != 0) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT,
                "{}: hidden and intermediate must be multiples of the group size 32, got {} and {}", op, a.hidden,
                a.intermediate);
  }
  const int64_t k_multiple =
      32 * heuristics::warp_decode_min_stage_groups(static_cast<heuristics::WeightFormat>(a.format));
  if (a.hidden % k_multiple != 0 || a.intermediate % k_multiple != 0) {
    throw_error(
        CHORD_ERROR_UNSUPPORTED,
        "{}: {} weights need hidden and intermediate to be multiples of {} (whole shared-memory stages), got {} "
        "and {}",
        op, a.format == CHORD_WEIGHT_INT4_GROUP32 ? "INT4" : "MXFP8", k_multiple, a.hidden, a.intermediate);
  }
  ops::require_range(a.num_experts, 1, heuristics::kWarpDecodeMaxExperts, op, "num_experts");
  ops::require_range(a.top_k, 1, heuristics::kWarpDecodeMaxTopK, op, "top_k");
  if (a.expert_map) ops::require_range(a.num_global_experts, 1, INT32_MAX, op, "num_global_experts");
  if (a.num_tokens == 0) return;  // nothing is read or written
  ops::require_pointer(a.x, op, "x", 16);
  ops::require_pointer(a.topk_ids, op, "topk_ids", 4);
  ops::require_pointer(a.topk_weights, op, "topk_weights", 4);
  ops::require_pointer(a.w13, op, "w13", 16);
  ops::require_pointer(a.w2, op, "w2", 16);
  const unsigned scale_align = a.format == CHORD_WEIGHT_INT4_GROUP32 ? 2 : 1;
  ops::require_pointer(a.w13_scale, op, "w13_scale", scale_align);
  ops::require_pointer(a.w2_scale, op, "w2_scale", scale_align);
  if (a.expert_map) ops::require_pointer(a.expert_map, op, "expert_map", 4);
  ops::require_pointer(a.workspace, op, "workspace", 16);
  ops::require_pointer(a.output, op, "output", 16);
  const size_t need = warp_decode_moe_workspace_size(a.num_tokens, a.top_k, a.intermediate);
  if (a.workspace_bytes < need) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT,
                "{}: workspace must hold [num_tokens*top_k, intermediate] BF16 = {} bytes, got {}", op, need,
                a.workspace_bytes);
  }

  const WarpDecodeShape s{
      static_cast<heuristics::WeightFormat>(a.format),     a.hidden, a.intermediate,         a.num_experts,
      a.expert_map ? a.num_global_experts : a.num_experts, a.top_k,  a.expert_map != nullptr};
  JitRuntime& rt = JitRuntime::global();
  const ContextState& ctx = rt.context_for(stream);
  auto gu = heuristics::select_warp_decode_gate_up(s, a.num_tokens, ctx.facts);
  auto dn = heuristics::select_warp_decode_down(s, a.num_tokens, ctx.facts);
  if (const std::string& spec = env_config().warp_decode_override; !spec.empty()) {
    if (const std::string err = heuristics::apply_warp_decode_override(spec, gu, dn); !err.empty()) {
      throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: CHORD_WARP_DECODE_CONFIG: {}", op, err);
    }
  }
  const LoadedKernel& gate_up = rt.kernel(ops::warp_decode_gate_up_descriptor(ctx.facts.arch, s, gu), ctx, stream);
  const LoadedKernel& down = rt.kernel(ops::warp_decode_down_descriptor(ctx.facts.arch, s, dn), ctx, stream);

  const int32_t tokens = static_cast<int32_t>(a.num_tokens);
  const int32_t global = s.global_experts;
  const int64_t slots = std::min<int64_t>(a.num_tokens * a.top_k, a.num_experts);
  const void* gate_up_args[] = {&a.x, &a.topk_ids, &a.expert_map, &global, &tokens, &a.w13, &a.w13_scale, &a.workspace};
  launch(ctx, gate_up, {static_cast<uint32_t>(a.intermediate / (8 * gu.row_tiles)), static_cast<uint32_t>(slots), 1},
         stream, const_cast<void**>(gate_up_args));
  const void* down_args[] = {&a.workspace, &a.topk_weights, &a.topk_ids, &a.expert_map, &global,
                             &tokens,      &a.w2,           &a.w2_scale, &a.output};
  launch(ctx, down, {static_cast<uint32_t>(a.hidden / (16 * dn.row_tiles)), 1, 1}, stream,
         const_cast<void**>(down_args), LaunchOrder::kProgrammatic);
}

}  // namespace chordrt

namespace chordrt::ops {

void plan_warp_decode(const ModelPlanInput& in, PlanBuilder& plan) {
  const MoeModelShape& m = in.model;
  if (m.moe_intermediate <= 0 || m.weight_format.empty()) return;
  const Deployment& dep = in.deployment;
  const heuristics::WarpDecodeShape s{
      m.weight_format == "int4" ? heuristics::WeightFormat::kInt4Group32 : heuristics::WeightFormat::kMxfp8,
      m.hidden,
      m.moe_intermediate / dep.tensor_parallel,
      m.num_experts / dep.expert_parallel,
      m.num_experts,
      m.top_k,
      dep.expert_parallel > 1};
  for (int64_t tokens : heuristics::warp_decode_prewarm_tokens()) {
    const auto gu = heuristics::select_warp_decode_gate_up(s, tokens, in.facts);
    const auto dn = heuristics::select_warp_decode_down(s, tokens, in.facts);
    if (gu.stage_groups == 0 || dn.stage_groups == 0) break;  // shape not served by warp decode
    plan.add(warp_decode_gate_up_descriptor(in.facts.arch, s, gu));
    plan.add(warp_decode_down_descriptor(in.facts.arch, s, dn));
  }
}

}  // namespace chordrt::ops
