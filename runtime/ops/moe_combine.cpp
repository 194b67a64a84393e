// moe_combine: validate -> descriptor -> kernel -> launch.
#include "heuristics/glue.hpp"
#include "runtime/jit_runtime.hpp"
#include "runtime/launch.hpp"
#include "runtime/ops/glue.hpp"
#include "runtime/ops/validate.hpp"

namespace chordrt::ops {

namespace {

constexpr std::string_view kFields[] = {"top_k", "vec", "threads", "rows_per_cta", "filtered"};
constexpr jit::FamilySchema kSchema{"glue.moe_combine", kFields};
constexpr int kMaxTopK = 64;

KernelProgram program(const jit::Descriptor& d) {
  const int64_t top_k = d[0], vec = d[1], threads = d[2], rows_per_cta = d[3], filtered = d[4];
  if (top_k < 1 || top_k > kMaxTopK || (vec != 1 && vec != 2 && vec != 4 && vec != 8) || threads < 32 ||
      threads > 1024 || threads % 32 != 0 || rows_per_cta < 1 || threads * rows_per_cta > 1024 ||
      (filtered != 0 && filtered != 1)) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: values out of the kernel's range", jit::to_string(d));
  }
  KernelProgram p;
  p.header = "glue/moe_combine.cuh";
  p.name_expression = fmt::format("chord::moe_combine_kernel<{}, {}, {}, {}, {}>", top_k, vec, threads, rows_per_cta,
                                  filtered ? "true" : "false");
  p.threads = static_cast<uint32_t>(threads * rows_per_cta);
  return p;
}

std::vector<jit::Descriptor> examples(jit::Arch arch) {
  return {moe_combine_descriptor(arch, 8, 7168, false), moe_combine_descriptor(arch, 1, 100, true)};
}

}  // namespace

const KernelFamily kMoeCombineFamily{kSchema, program, examples};

jit::Descriptor moe_combine_descriptor(jit::Arch arch, int top_k, int64_t hidden, bool filtered) {
  const auto c = heuristics::select_rowwise(hidden);
  return jit::Descriptor(kSchema, arch, {top_k, c.vec, c.threads, c.rows_per_cta, filtered ? 1 : 0});
}

}  // namespace chordrt::ops

namespace chordrt {

void moe_combine(const MoeCombineArgs& a, CUstream stream) {
  constexpr const char* op = "moe_combine";
  ops::require_range(a.num_tokens, 0, INT32_MAX, op, "num_tokens");
  ops::require_range(a.top_k, 1, ops::kMaxTopK, op, "top_k");
  ops::require_range(a.hidden, 1, INT32_MAX, op, "hidden");
  if (a.num_tokens == 0) return;  // nothing is read or written: empty tensors may have null pointers
  const auto config = heuristics::select_rowwise(a.hidden);
  const unsigned align = 2u * static_cast<unsigned>(config.vec);
  ops::require_pointer(a.expert_rows, op, "expert_rows", align);
  ops::require_pointer(a.topk_weights, op, "topk_weights", 4);
  ops::require_pointer(a.output, op, "output", align);
  const bool filtered = a.topk_ids || a.expert_map;
  if (filtered) {
    if (!a.topk_ids || !a.expert_map) {
      throw_error(CHORD_ERROR_INVALID_ARGUMENT,
                  "moe_combine: the expert-parallel filter needs both topk_ids and expert_map (got {} and {})",
                  a.topk_ids ? "topk_ids" : "null", a.expert_map ? "expert_map" : "null");
    }
    ops::require_pointer(a.topk_ids, op, "topk_ids", 4);
    ops::require_pointer(a.expert_map, op, "expert_map", 4);
    ops::require_range(a.num_experts, 1, INT32_MAX, op, "num_experts");
  }
  JitRuntime& rt = JitRuntime::global();
  const ContextState& ctx = rt.context_for(stream);
  const jit::Descriptor d = ops::moe_combine_descriptor(ctx.facts.arch, a.top_k, a.hidden, filtered);
  const LoadedKernel& k = rt.kernel(d, ctx, stream);
  const auto grid = heuristics::rowwise_grid(a.num_tokens, a.hidden, config);
  const void* args[] = {&a.expert_rows, &a.topk_weights, &a.output,     &a.num_tokens,
                        &a.hidden,      &a.topk_ids,     &a.expert_map, &a.num_experts};
  launch(ctx, k, {grid.x, grid.y, 1}, stream, const_cast<void**>(args));
}

}  // namespace chordrt
