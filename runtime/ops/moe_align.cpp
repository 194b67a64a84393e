// moe_align: validate -> descriptor -> kernel -> launch (one CTA, or one cluster of CTAs).
#include <algorithm>

#include "heuristics/glue.hpp"
#include "runtime/jit_runtime.hpp"
#include "runtime/launch.hpp"
#include "runtime/ops/glue.hpp"
#include "runtime/ops/validate.hpp"

namespace chordrt::ops {

namespace {

constexpr std::string_view kFields[] = {"num_experts", "block_size", "has_expert_map", "threads", "cluster"};
constexpr jit::FamilySchema kSchema{"glue.moe_align", kFields};
constexpr int kMaxBlockSize = 1024;
constexpr int kMaxTopK = 64;

KernelProgram program(const jit::Descriptor& d) {
  const int64_t experts = d[0], block = d[1], has_map = d[2], threads = d[3], cluster = d[4];
  if (experts < 1 || experts > heuristics::kMoeAlignMaxExperts || block < 1 || block > kMaxBlockSize ||
      (has_map != 0 && has_map != 1) || threads < 32 || threads > 1024 || threads % 32 != 0 || cluster < 1 ||
      cluster > 8) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: values out of the kernel's range", jit::to_string(d));
  }
  KernelProgram p;
  p.header = "glue/moe_align.cuh";
  p.name_expression = fmt::format("chord::moe_align_kernel<{}, {}, {}, {}, {}>", experts, block,
                                  has_map ? "true" : "false", threads, cluster);
  p.threads = static_cast<uint32_t>(threads);
  // As moe_align_smem_bytes() in the kernel (which traps if it gets less): per-warp rows, three
  // per-expert arrays, offsets, scan scratch.
  const int64_t warps = threads / 32;
  p.dynamic_smem = static_cast<uint32_t>(4 * (warps * experts + 4 * experts + 1 + warps));
  p.cluster = {static_cast<uint32_t>(cluster), 1, 1};
  return p;
}

std::vector<jit::Descriptor> examples(jit::Arch arch) {
  std::vector<jit::Descriptor> out;
  for (const auto& c : heuristics::moe_align_configs(384)) out.push_back(moe_align_descriptor(arch, 384, 16, true, c));
  for (const auto& c : heuristics::moe_align_configs(1024)) {
    out.push_back(moe_align_descriptor(arch, 1024, 128, false, c));
  }
  return out;
}

}  // namespace

const KernelFamily kMoeAlignFamily{kSchema, program, examples};

jit::Descriptor moe_align_descriptor(jit::Arch arch, int num_experts, int block_size, bool has_expert_map,
                                     const heuristics::MoeAlignConfig& config) {
  return jit::Descriptor(kSchema, arch,
                         {num_experts, block_size, has_expert_map ? 1 : 0, config.threads, config.cluster});
}

}  // namespace chordrt::ops

namespace chordrt {

int64_t moe_align_sorted_capacity(int64_t num_tokens, int32_t top_k, int32_t num_experts, int32_t block_size) {
  const int64_t routes = num_tokens * top_k;
  // Every non-empty expert pads at most block_size-1 slots; at most min(routes, experts) are non-empty.
  return routes + std::min<int64_t>(routes, num_experts) * (block_size - 1);
}

void moe_align(const MoeAlignArgs& a, CUstream stream) {
  constexpr const char* op = "moe_align";
  // With no tokens topk_ids is never read (an empty tensor may have a null data pointer); the outputs
  // are still written.
  if (a.num_tokens != 0 || a.topk_ids) ops::require_pointer(a.topk_ids, op, "topk_ids", 4);
  ops::require_pointer(a.sorted_token_ids, op, "sorted_token_ids", 4);
  ops::require_pointer(a.expert_ids, op, "expert_ids", 4);
  ops::require_pointer(a.num_tokens_post_padded, op, "num_tokens_post_padded", 4);
  if (a.expert_map) ops::require_pointer(a.expert_map, op, "expert_map", 4);
  ops::require_range(a.top_k, 1, ops::kMaxTopK, op, "top_k");
  ops::require_range(a.num_experts, 1, heuristics::kMoeAlignMaxExperts, op, "num_experts");
  ops::require_range(a.block_size, 1, ops::kMaxBlockSize, op, "block_size");
  ops::require_range(a.num_tokens, 0, (int64_t{1} << 30) / a.top_k, op, "num_tokens");
  const int64_t needed = moe_align_sorted_capacity(a.num_tokens, a.top_k, a.num_experts, a.block_size);
  if (a.sorted_token_ids_capacity < needed || a.sorted_token_ids_capacity > INT32_MAX) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT,
                "moe_align: sorted_token_ids_capacity must be >= {} (num_tokens*top_k + min(routes, experts)*"
                "(block_size-1)) and fit int32, got {}",
                needed, a.sorted_token_ids_capacity);
  }
  const int64_t needed_blocks = (needed + a.block_size - 1) / a.block_size;
  if (a.expert_ids_capacity < needed_blocks || a.expert_ids_capacity > INT32_MAX) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "moe_align: expert_ids_capacity must be >= {} blocks, got {}",
                needed_blocks, a.expert_ids_capacity);
  }
  JitRuntime& rt = JitRuntime::global();
  const ContextState& ctx = rt.context_for(stream);
  const int32_t routes = static_cast<int32_t>(a.num_tokens * a.top_k);
  // Default device facts (H200), so that prewarm, which has no device, plans the same descriptors.
  const auto config = heuristics::select_moe_align(a.num_experts, routes);
  const jit::Descriptor d =
      ops::moe_align_descriptor(ctx.facts.arch, a.num_experts, a.block_size, a.expert_map != nullptr, config);
  const LoadedKernel& k = rt.kernel(d, ctx, stream);
  const int32_t sorted_cap = static_cast<int32_t>(a.sorted_token_ids_capacity);
  const int32_t blocks_cap = static_cast<int32_t>(a.expert_ids_capacity);
  const void* args[] = {&a.topk_ids, &routes,       &a.expert_map, &a.sorted_token_ids,
                        &sorted_cap, &a.expert_ids, &blocks_cap,   &a.num_tokens_post_padded};
  launch(ctx, k, {static_cast<uint32_t>(config.cluster), 1, 1}, stream, const_cast<void**>(args));
}

}  // namespace chordrt
