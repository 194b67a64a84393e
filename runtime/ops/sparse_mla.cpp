// sparse_mla_decode: validate -> launch keys (heuristics, CHORD_MLA_CONFIG) -> decode (+ combine).
#include "runtime/ops/sparse_mla.hpp"

#include <cmath>

#include "runtime/env_config.hpp"
#include "runtime/launch.hpp"
#include "runtime/ops/resolve_config.hpp"
#include "runtime/ops/validate.hpp"

namespace chordrt::ops {

namespace {

using heuristics::SparseMlaConfig;
using heuristics::SparseMlaShape;

constexpr const char* kOp = "sparse_mla_decode";

// Mistral Large 4 at TP8 / TP4 (decode), a NoPE layer, a BF16 cache, 128 heads in a prefill chunk, and one
// token at 64 heads (the 16-head kernel).
const SparseMlaShape kExamples[] = {{sm::kFp8DsMla, 64, 8, 2048, 1},     {sm::kFp8DsMla, 64, 16, 2048, 32},
                                    {sm::kFp8DsMla, 0, 8, 2048, 1},      {sm::kBf16, 64, 16, 2048, 1},
                                    {sm::kFp8DsMla, 64, 128, 2048, 128}, {sm::kFp8DsMla, 64, 64, 2048, 1}};

SparseMlaDecodeKey decode_key(const SparseMlaShape& s, const SparseMlaConfig& c) {
  return {s.format, s.rope_dims, s.num_heads, c.head_group, c.warps, c.stages, c.pair};
}

}  // namespace

KernelProgram SparseMlaDecodeFamily::program(const K& k) {
  // The kernel's own constraints: the shape's rule and the config's, at the smallest top-k.
  const SparseMlaShape s{k.format, k.rope_dims, k.heads, sm::kBlockKeys, 1};
  std::string why = heuristics::sparse_mla_shape_error(s);
  if (why.empty()) why = heuristics::sparse_mla_config_error(s, {k.head_group, k.warps, k.stages, 1, 1, k.pair}, {});
  if (!why.empty()) throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: {}", kName, why);
  KernelProgram p;
  p.threads = static_cast<uint32_t>(32 * k.warps);
  if (k.head_group == sm::kWgmmaHeads) {
    p.header = "sparse_mla/decode_wgmma.cuh";
    p.name_expression = fmt::format("chord::sparse_mla::sparse_mla_decode_wgmma_kernel<{}, {}, {}, {}>", k.format,
                                    k.rope_dims, k.heads, k.pair ? "true" : "false");
    p.dynamic_smem = static_cast<uint32_t>(sm::wgmma_decode_smem(k.rope_dims).bytes);
    if (k.pair) p.cluster = {2, 1, 1};
    return p;
  }
  p.header = "sparse_mla/decode.cuh";
  p.name_expression = fmt::format("chord::sparse_mla::sparse_mla_decode_kernel<{}, {}, {}, {}, {}, {}>", k.format,
                                  k.rope_dims, k.heads, k.head_group, k.warps, k.stages);
  p.dynamic_smem = static_cast<uint32_t>(sm::decode_smem(k.format, k.rope_dims, k.head_group, k.warps, k.stages).bytes);
  return p;
}

std::vector<SparseMlaDecodeKey> SparseMlaDecodeFamily::examples(const DeviceFacts& facts) {
  std::vector<K> out;
  for (const auto& s : kExamples) out.push_back(sparse_mla_launch(s, facts).decode);
  return out;
}

KernelProgram SparseMlaCombineFamily::program(const K& k) {
  if (k.heads % 8 != 0) throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: heads must be a multiple of 8", kName);
  KernelProgram p;
  p.header = "sparse_mla/combine.cuh";
  p.name_expression = fmt::format("chord::sparse_mla::sparse_mla_combine_kernel<{}>", k.heads);
  p.threads = sm::kCombineThreads;
  return p;
}

std::vector<SparseMlaCombineKey> SparseMlaCombineFamily::examples(const DeviceFacts&) { return {{8}, {sm::kMaxHeads}}; }

SparseMlaLaunch sparse_mla_launch(const SparseMlaShape& s, const DeviceFacts& facts) {
  const SparseMlaConfig c = resolve_config(
      kOp, "CHORD_MLA_CONFIG", env_config().mla_override, heuristics::select_sparse_mla(s, facts),
      [&](std::string_view spec, SparseMlaConfig& cfg) {
        return heuristics::resolve_sparse_mla_override(spec, s, cfg);
      },
      [&](const SparseMlaConfig& cfg) -> std::string {
        try {
          (void)SparseMlaDecodeFamily::descriptor(facts.arch, decode_key(s, cfg));  // the field ranges
        } catch (const Error& e) {
          return e.what();
        }
        return heuristics::sparse_mla_config_error(s, cfg, facts);
      });
  return {c, decode_key(s, c), {s.num_heads}};
}

namespace {

SparseMlaShape checked_shape(const chord_sparse_mla_decode_args_t& a) {
  const SparseMlaShape s{a.format, a.rope_dims, a.num_heads, a.topk, a.num_tokens};
  if (const std::string why = heuristics::sparse_mla_shape_error(s); !why.empty()) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: {}", kOp, why);
  }
  return s;
}

}  // namespace

size_t sparse_mla_decode_workspace_size(const chord_sparse_mla_decode_args_t& a) {
  const SparseMlaShape s = checked_shape(a);
  if (s.num_tokens == 0) return 0;
  const ContextState& ctx = JitRuntime::global().context_for(nullptr);
  return heuristics::sparse_mla_workspace_bytes(s, sparse_mla_launch(s, ctx.facts).config);
}

void sparse_mla_decode(const chord_sparse_mla_decode_args_t& a, CUstream stream) {
  const SparseMlaShape s = checked_shape(a);
  if (!std::isfinite(a.softmax_scale)) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: softmax_scale must be finite, got {}", kOp, a.softmax_scale);
  }
  if (s.num_tokens == 0) return;  // nothing is read or written
  require_range(a.num_slots, 1, int64_t{1} << 31, kOp, "num_slots");
  require_pointer(a.q, kOp, "q", 16);
  require_pointer(a.cache, kOp, "cache", 16);
  require_pointer(a.indices, kOp, "indices", 4);
  if (a.topk_length) require_pointer(a.topk_length, kOp, "topk_length", 4);
  if (a.attn_sink) require_pointer(a.attn_sink, kOp, "attn_sink", 4);
  require_pointer(a.out, kOp, "out", 16);
  require_pointer(a.lse, kOp, "lse", 4);

  if (a.workspace) require_pointer(a.workspace, kOp, "workspace", 16);
  check_override_syntax<SparseMlaConfig>(kOp, "CHORD_MLA_CONFIG", env_config().mla_override,
                                         heuristics::apply_sparse_mla_override);
  const ContextState& ctx = JitRuntime::global().context_for(stream);
  const SparseMlaLaunch l = sparse_mla_launch(s, ctx.facts);
  const SparseMlaConfig& c = l.config;
  const size_t need = heuristics::sparse_mla_workspace_bytes(s, c);
  if (need > 0) {
    require_pointer(a.workspace, kOp, "workspace", 16);
    if (a.workspace_bytes < need) {
      throw_error(CHORD_ERROR_INVALID_ARGUMENT,
                  "{}: workspace must hold {} bytes (chord_sparse_mla_decode_workspace_size: {} splits of the top-k), "
                  "got {}",
                  kOp, need, c.splits, a.workspace_bytes);
    }
  }
  const LoadedKernel& decode = SparseMlaDecodeFamily::kernel(l.decode, ctx, stream);

  const int64_t rows = s.num_tokens * s.num_heads;
  float* part_out = need > 0 ? static_cast<float*>(a.workspace) : nullptr;
  float* part_lse = need > 0 ? part_out + rows * c.splits * sm::kNopeDims : nullptr;
  constexpr float kLog2e = 1.4426950408889634f;
  const sm::DecodeParams p{static_cast<const chord::bf16*>(a.q),
                           static_cast<const uint8_t*>(a.cache),
                           a.indices,
                           a.topk_length,
                           a.attn_sink,
                           static_cast<chord::bf16*>(a.out),
                           a.lse,
                           part_out,
                           part_lse,
                           a.num_slots,
                           a.topk,
                           c.splits,
                           c.blocks_per_split,
                           a.softmax_scale * kLog2e};
  launch(ctx, decode,
         {{static_cast<uint32_t>(c.splits * (s.num_heads / c.head_group)), static_cast<uint32_t>(s.num_tokens), 1},
          stream},
         p);
  if (c.splits > 1) {
    const LoadedKernel& combine = SparseMlaCombineFamily::kernel(l.combine, ctx, stream);
    const sm::CombineParams cp{part_out, part_lse, a.attn_sink, static_cast<chord::bf16*>(a.out), a.lse, c.splits};
    launch(ctx, combine, {{static_cast<uint32_t>(rows), 1, 1}, stream, LaunchOrder::kProgrammatic}, cp);
  }
}

void plan_sparse_mla(const ModelPlanInput& in, PlanBuilder& plan) {
  if (!in.model.attention) return;
  const SparseAttentionShape& a = *in.model.attention;
  const Deployment& dep = in.deployment;
  const int heads = dep.expert_parallel > 1 ? a.num_heads : a.num_heads / dep.tensor_parallel;  // EP: DP attention
  const Arch arch = in.facts.arch;
  // The cache format is the engine's choice (vLLM: fp8_ds_mla, or BF16 with an "auto" KV-cache dtype):
  // both are planned, a few kernels each.
  for (const int format : {sm::kFp8DsMla, sm::kBf16}) {
    for (const int rope : {a.rope_dims, 0}) {
      if (rope == 0 && a.rope_dims != 0 && !a.nope_layers) continue;
      SparseMlaShape s{format, rope, heads, a.index_topk, 1};
      std::string why = a.num_heads % dep.tensor_parallel != 0
                            ? fmt::format("{} heads do not split over TP {}", a.num_heads, dep.tensor_parallel)
                            : heuristics::sparse_mla_shape_error(s);
      if (!why.empty()) throw_error(CHORD_ERROR_INVALID_ARGUMENT, "deployment {}: sparse MLA: {}", dep.name, why);
      plan.add(SparseMlaCacheWriteFamily::descriptor(arch, sparse_mla_cache_write_key(format, rope)));
      // The kernel depends on the token count only through the small-grid head group (heuristics):
      // the two ends of the range cover both choices.
      for (const int64_t tokens : {int64_t{1}, int64_t{sm::kMaxTokens}}) {
        s.num_tokens = tokens;
        const SparseMlaLaunch l = sparse_mla_launch(s, in.facts);
        plan.add(SparseMlaDecodeFamily::descriptor(arch, l.decode));
        plan.add(SparseMlaCombineFamily::descriptor(arch, l.combine));
      }
    }
  }
}

}  // namespace chordrt::ops
