// The MoE glue: moe_align (one CTA, or one cluster of CTAs), silu_and_mul, moe_combine.
//   validate -> key (heuristics) -> kernel -> launch.
#include "runtime/ops/glue.hpp"

#include <algorithm>

#include "runtime/core/math.hpp"
#include "runtime/launch.hpp"
#include "runtime/ops/validate.hpp"

namespace chordrt::ops {

KernelProgram MoeAlignFamily::program(const MoeAlignKey& k) {
  if (k.threads % 32 != 0) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: threads must be a multiple of 32, got {}", kName, k.threads);
  }
  KernelProgram p;
  p.header = "glue/moe_align.cuh";
  p.name_expression = fmt::format("chord::moe_align_kernel<{}, {}, {}, {}, {}>", k.num_experts, k.block_size,
                                  k.has_expert_map ? "true" : "false", k.threads, k.cluster);
  p.threads = static_cast<uint32_t>(k.threads);
  p.dynamic_smem = chord::moe_align_smem_bytes(k.num_experts, k.threads);
  p.cluster = {static_cast<uint32_t>(k.cluster), 1, 1};
  return p;
}

std::vector<MoeAlignKey> MoeAlignFamily::examples(const DeviceFacts& facts) {
  std::vector<MoeAlignKey> out = moe_align_keys(384, 16, true, facts);
  for (const MoeAlignKey& k : moe_align_keys(1024, 128, false, facts)) out.push_back(k);
  return out;
}

MoeAlignKey moe_align_key(int num_experts, int block_size, bool has_expert_map, int64_t routes,
                          const DeviceFacts& facts) {
  const auto c = heuristics::select_moe_align(num_experts, routes, facts);
  return {num_experts, block_size, has_expert_map ? 1 : 0, c.threads, c.cluster};
}

std::vector<MoeAlignKey> moe_align_keys(int num_experts, int block_size, bool has_expert_map,
                                        const DeviceFacts& facts) {
  std::vector<MoeAlignKey> out;
  for (const auto& c : heuristics::moe_align_configs(num_experts, facts)) {
    out.push_back({num_experts, block_size, has_expert_map ? 1 : 0, c.threads, c.cluster});
  }
  return out;
}

int64_t moe_align_sorted_capacity(int64_t num_tokens, int32_t top_k, int32_t num_experts, int32_t block_size) {
  if (num_tokens < 0 || top_k < 1 || num_experts < 1 || block_size < 1) return -1;
  // Every non-empty expert pads at most block_size-1 slots; at most min(routes, experts) are non-empty.
  int64_t routes = 0, padding = 0, total = 0;
  if (__builtin_mul_overflow(num_tokens, int64_t{top_k}, &routes) ||
      __builtin_mul_overflow(std::min<int64_t>(routes, num_experts), int64_t{block_size - 1}, &padding) ||
      __builtin_add_overflow(routes, padding, &total)) {
    return -1;
  }
  return total;
}

void moe_align(const chord_moe_align_args_t& a, CUstream stream) {
  constexpr const char* op = "moe_align";
  // With no tokens topk_ids is never read (an empty tensor may have a null data pointer); the outputs
  // are still written.
  if (a.num_tokens != 0 || a.topk_ids) require_pointer(a.topk_ids, op, "topk_ids", 4);
  require_pointer(a.sorted_token_ids, op, "sorted_token_ids", 4);
  require_pointer(a.expert_ids, op, "expert_ids", 4);
  require_pointer(a.num_tokens_post_padded, op, "num_tokens_post_padded", 4);
  if (a.expert_map) require_pointer(a.expert_map, op, "expert_map", 4);
  require_range(a.top_k, 1, chord::kMoeMaxTopK, op, "top_k");
  require_range(a.num_experts, 1, chord::kMoeAlignMaxExperts, op, "num_experts");
  require_range(a.block_size, 1, chord::kMoeAlignMaxBlockSize, op, "block_size");
  require_range(a.num_tokens, 0, (int64_t{1} << 30) / a.top_k, op, "num_tokens");
  const int64_t needed = moe_align_sorted_capacity(a.num_tokens, a.top_k, a.num_experts, a.block_size);
  if (a.sorted_token_ids_capacity < needed || a.sorted_token_ids_capacity > INT32_MAX) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT,
                "moe_align: sorted_token_ids_capacity must be >= {} (num_tokens*top_k + min(routes, experts)*"
                "(block_size-1)) and fit int32, got {}",
                needed, a.sorted_token_ids_capacity);
  }
  const int64_t needed_blocks = ceil_div<int64_t>(needed, a.block_size);
  if (a.expert_ids_capacity < needed_blocks || a.expert_ids_capacity > INT32_MAX) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "moe_align: expert_ids_capacity must be >= {} blocks, got {}",
                needed_blocks, a.expert_ids_capacity);
  }
  const ContextState& ctx = JitRuntime::global().context_for(stream);
  const int32_t routes = static_cast<int32_t>(a.num_tokens * a.top_k);
  const MoeAlignKey key = moe_align_key(a.num_experts, a.block_size, a.expert_map != nullptr, routes, ctx.facts);
  const LoadedKernel& k = MoeAlignFamily::kernel(key, ctx, stream);
  launch(ctx, k, {{static_cast<uint32_t>(key.cluster), 1, 1}, stream}, a.topk_ids, routes, a.expert_map,
         a.sorted_token_ids, static_cast<int32_t>(a.sorted_token_ids_capacity), a.expert_ids,
         static_cast<int32_t>(a.expert_ids_capacity), a.num_tokens_post_padded);
}

namespace {
void check_rowwise(std::string_view family, const RowwiseKey& k) {
  if ((k.vec & (k.vec - 1)) != 0 || k.threads % 32 != 0 || k.threads * k.rows_per_cta > chord::kRowwiseMaxThreads) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT,
                "{}: vec must be a power of two, threads a multiple of 32 and threads*rows_per_cta <= {}, got vec={}, "
                "threads={}, rows_per_cta={}",
                family, chord::kRowwiseMaxThreads, k.vec, k.threads, k.rows_per_cta);
  }
}
}  // namespace

KernelProgram SiluAndMulFamily::program(const RowwiseKey& k) {
  check_rowwise(kName, k);
  KernelProgram p;
  p.header = "glue/silu_and_mul.cuh";
  p.name_expression = fmt::format("chord::silu_and_mul_kernel<{}, {}, {}>", k.vec, k.threads, k.rows_per_cta);
  p.threads = static_cast<uint32_t>(k.threads * k.rows_per_cta);
  return p;
}

std::vector<RowwiseKey> SiluAndMulFamily::examples(const DeviceFacts&) {
  return {silu_and_mul_key(2048), silu_and_mul_key(7)};
}

RowwiseKey silu_and_mul_key(int64_t intermediate) {
  const auto c = heuristics::select_rowwise(intermediate);
  return {c.vec, c.threads, c.rows_per_cta};
}

KernelProgram MoeCombineFamily::program(const MoeCombineKey& k) {
  check_rowwise(kName, {k.vec, k.threads, k.rows_per_cta});
  KernelProgram p;
  p.header = "glue/moe_combine.cuh";
  p.name_expression = fmt::format("chord::moe_combine_kernel<{}, {}, {}, {}, {}>", k.top_k, k.vec, k.threads,
                                  k.rows_per_cta, k.filtered ? "true" : "false");
  p.threads = static_cast<uint32_t>(k.threads * k.rows_per_cta);
  return p;
}

std::vector<MoeCombineKey> MoeCombineFamily::examples(const DeviceFacts&) {
  return {moe_combine_key(8, 7168, false), moe_combine_key(1, 100, true)};
}

MoeCombineKey moe_combine_key(int top_k, int64_t hidden, bool filtered) {
  const auto c = heuristics::select_rowwise(hidden);
  return {top_k, c.vec, c.threads, c.rows_per_cta, filtered ? 1 : 0};
}

void silu_and_mul(const chord_silu_and_mul_args_t& a, CUstream stream) {
  constexpr const char* op = "silu_and_mul";
  require_range(a.rows, 0, INT64_MAX / 4, op, "rows");
  require_range(a.intermediate, 1, INT32_MAX, op, "intermediate");
  require_addressable(op, "input [rows, 2 * intermediate] BF16", {a.rows, a.intermediate}, 4);
  if (a.rows == 0) return;  // nothing is read or written: empty tensors may have null pointers
  const RowwiseKey key = silu_and_mul_key(a.intermediate);
  // Vector accesses need the row starts aligned to the vector width.
  const unsigned align = 2u * static_cast<unsigned>(key.vec);
  require_pointer(a.input, op, "input", align);
  require_pointer(a.output, op, "output", align);
  const ContextState& ctx = JitRuntime::global().context_for(stream);
  const LoadedKernel& k = SiluAndMulFamily::kernel(key, ctx, stream);
  const auto grid = heuristics::rowwise_grid(a.rows, a.intermediate, heuristics::select_rowwise(a.intermediate));
  launch(ctx, k, {{grid.x, grid.y, 1}, stream}, a.input, a.output, a.rows, a.intermediate);
}

void moe_combine(const chord_moe_combine_args_t& a, CUstream stream) {
  constexpr const char* op = "moe_combine";
  require_range(a.num_tokens, 0, INT32_MAX, op, "num_tokens");
  require_range(a.top_k, 1, chord::kMoeMaxTopK, op, "top_k");
  require_range(a.hidden, 1, INT32_MAX, op, "hidden");
  require_addressable(op, "expert_rows [num_tokens * top_k, hidden] BF16", {a.num_tokens, a.top_k, a.hidden}, 2);
  if (a.num_tokens == 0) return;  // nothing is read or written: empty tensors may have null pointers
  const bool filtered = a.topk_ids || a.expert_map;
  const MoeCombineKey key = moe_combine_key(a.top_k, a.hidden, filtered);
  const unsigned align = 2u * static_cast<unsigned>(key.vec);
  require_pointer(a.expert_rows, op, "expert_rows", align);
  require_pointer(a.topk_weights, op, "topk_weights", 4);
  require_pointer(a.output, op, "output", align);
  if (filtered) {
    if (!a.topk_ids || !a.expert_map) {
      throw_error(CHORD_ERROR_INVALID_ARGUMENT,
                  "moe_combine: the expert-parallel filter needs both topk_ids and expert_map (got {} and {})",
                  a.topk_ids ? "topk_ids" : "null", a.expert_map ? "expert_map" : "null");
    }
    require_pointer(a.topk_ids, op, "topk_ids", 4);
    require_pointer(a.expert_map, op, "expert_map", 4);
    require_range(a.num_experts, 1, INT32_MAX, op, "num_experts");
  }
  const ContextState& ctx = JitRuntime::global().context_for(stream);
  const LoadedKernel& k = MoeCombineFamily::kernel(key, ctx, stream);
  const auto grid = heuristics::rowwise_grid(a.num_tokens, a.hidden, heuristics::select_rowwise(a.hidden));
  launch(ctx, k, {{grid.x, grid.y, 1}, stream}, a.expert_rows, a.topk_weights, a.output, a.num_tokens, a.hidden,
         a.topk_ids, a.expert_map, a.num_experts);
}

}  // namespace chordrt::ops

namespace chordrt::ops {

namespace {
// Block sizes the routing is aligned to by the GEMM families' heuristics (decode 8..24, prefill 32..176
// rounded to the sizes vLLM uses).
constexpr int kAlignBlockSizes[] = {8, 16, 32, 64, 128};
}  // namespace

void plan_glue(const ModelPlanInput& in, PlanBuilder& plan) {
  const MoeModelShape& m = in.model;
  if (m.moe_intermediate <= 0) return;
  const bool ep = in.deployment.expert_parallel > 1;
  const Arch arch = in.facts.arch;
  for (int block : kAlignBlockSizes) {
    for (const MoeAlignKey& k : moe_align_keys(m.num_experts, block, ep, in.facts)) {
      plan.add(MoeAlignFamily::descriptor(arch, k));
    }
  }
  plan.add(SiluAndMulFamily::descriptor(arch, silu_and_mul_key(m.moe_intermediate / in.deployment.tensor_parallel)));
  plan.add(MoeCombineFamily::descriptor(arch, moe_combine_key(m.top_k, m.hidden, ep)));
}

}  // namespace chordrt::ops
