// sparse_mla_decode: validate -> config (heuristics, CHORD_MLA_CONFIG) -> descriptors -> decode (+ combine).
#include "runtime/ops/sparse_mla.hpp"

#include <cmath>

#include "chordrt/chordrt.hpp"
#include "runtime/env_config.hpp"
#include "runtime/jit_runtime.hpp"
#include "runtime/launch.hpp"
#include "runtime/ops/validate.hpp"

namespace chordrt::ops {

namespace {

using heuristics::MlaCacheFormat;
using heuristics::SparseMlaConfig;
using heuristics::SparseMlaShape;

constexpr jit::FieldSpec kDecodeFields[] = {{"format", INT64_MIN, INT64_MAX}, {"rope_dims", INT64_MIN, INT64_MAX}, {"heads", INT64_MIN, INT64_MAX}, {"head_group", INT64_MIN, INT64_MAX}, {"warps", INT64_MIN, INT64_MAX}, {"stages", INT64_MIN, INT64_MAX}};
constexpr jit::FamilySchema kDecodeSchema{"mla.decode", kDecodeFields};
constexpr jit::FieldSpec kCombineFields[] = {{"heads", INT64_MIN, INT64_MAX}};
constexpr jit::FamilySchema kCombineSchema{"mla.combine", kCombineFields};

// Host mirrors of kernels_src/mla/decode.cuh's DecodeParams and combine.cuh's CombineParams.
struct DecodeParams {
  const void* q;
  const void* cache;
  const int32_t* indices;
  const int32_t* topk_length;
  const float* sink;
  void* out;
  float* lse;
  float* part_out;
  float* part_lse;
  int64_t num_slots;
  int32_t topk;
  int32_t splits;
  int32_t blocks_per_split;
  float scale_log2;
};
static_assert(sizeof(DecodeParams) == 96);

struct CombineParams {
  const float* part_out;
  const float* part_lse;
  const float* sink;
  void* out;
  float* lse;
  int32_t splits;
};
static_assert(sizeof(CombineParams) == 48);

bool heads_ok(int64_t h) { return h >= 8 && h <= heuristics::kMlaMaxHeads && h % 8 == 0; }

SparseMlaShape shape_of(const jit::Descriptor& d) {
  return {static_cast<MlaCacheFormat>(d[0]), static_cast<int>(d[1]), static_cast<int>(d[2]), heuristics::kMlaBlockKeys,
          1};
}

KernelProgram decode_program(const jit::Descriptor& d) {
  const int64_t format = d[0], rope = d[1], heads = d[2];
  const SparseMlaConfig c{static_cast<int>(d[3]), static_cast<int>(d[4]), static_cast<int>(d[5]), 1, 1};
  const std::string err = (format != 0 && format != 1) || (rope != 0 && rope != 64) || !heads_ok(heads)
                              ? "format 0/1, rope_dims 0/64, heads a multiple of 8 in [8, 128]"
                              : heuristics::sparse_mla_config_error(shape_of(d), c, heuristics::DeviceFacts{});
  if (!err.empty()) throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: {}", jit::to_string(d), err);
  KernelProgram p;
  p.header = "mla/decode.cuh";
  p.name_expression = fmt::format("chord::mla::sparse_mla_decode_kernel<{}, {}, {}, {}, {}, {}>", format, rope, heads,
                                  c.head_group, c.warps, c.stages);
  p.threads = static_cast<uint32_t>(32 * c.warps);
  p.dynamic_smem = static_cast<uint32_t>(heuristics::sparse_mla_dynamic_smem(
      static_cast<MlaCacheFormat>(format), static_cast<int>(rope), c.head_group, c.warps, c.stages));
  return p;
}

KernelProgram combine_program(const jit::Descriptor& d) {
  if (!heads_ok(d[0])) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: heads must be a multiple of 8 in [8, 128]", jit::to_string(d));
  }
  KernelProgram p;
  p.header = "mla/combine.cuh";
  p.name_expression = fmt::format("chord::mla::sparse_mla_combine_kernel<{}>", d[0]);
  p.threads = 128;  // kernels_src/mla/combine.cuh: kCombineThreads, 4 of the 512 dims each
  return p;
}

// Mistral Large 4 at TP8 / TP4 (decode), a NoPE layer, a BF16 cache, and 128 heads in a prefill chunk.
const SparseMlaShape kExamples[] = {{MlaCacheFormat::kFp8DsMla, 64, 8, 2048, 1},
                                    {MlaCacheFormat::kFp8DsMla, 64, 16, 2048, 32},
                                    {MlaCacheFormat::kFp8DsMla, 0, 8, 2048, 1},
                                    {MlaCacheFormat::kBf16, 64, 16, 2048, 1},
                                    {MlaCacheFormat::kFp8DsMla, 64, 128, 2048, 128}};

std::vector<jit::Descriptor> decode_examples(Arch arch) {
  std::vector<jit::Descriptor> out;
  for (const auto& s : kExamples) {
    out.push_back(sparse_mla_decode_descriptor(arch, s, heuristics::select_sparse_mla(s, heuristics::DeviceFacts{})));
  }
  return out;
}

std::vector<jit::Descriptor> combine_examples(Arch arch) {
  return {sparse_mla_combine_descriptor(arch, 8), sparse_mla_combine_descriptor(arch, 128)};
}

}  // namespace

const KernelFamily kSparseMlaDecodeFamily{kDecodeSchema, decode_program, decode_examples};
const KernelFamily kSparseMlaCombineFamily{kCombineSchema, combine_program, combine_examples};

jit::Descriptor sparse_mla_decode_descriptor(Arch arch, const SparseMlaShape& s, const SparseMlaConfig& c) {
  return jit::Descriptor(kDecodeSchema, arch,
                         {static_cast<int64_t>(s.format), s.rope_dims, s.num_heads, c.head_group, c.warps, c.stages});
}

jit::Descriptor sparse_mla_combine_descriptor(Arch arch, int num_heads) {
  return jit::Descriptor(kCombineSchema, arch, {num_heads});
}

}  // namespace chordrt::ops

namespace chordrt {

namespace {

constexpr const char* kOp = "sparse_mla_decode";

heuristics::SparseMlaShape checked_shape(const chord_sparse_mla_decode_args_t& a) {
  if (a.format != CHORD_MLA_CACHE_FP8_DS_MLA && a.format != CHORD_MLA_CACHE_BF16) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: unknown cache format {} (0 = fp8_ds_mla, 1 = bf16)", kOp, a.format);
  }
  if (a.rope_dims != 0 && a.rope_dims != 64) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: rope_dims must be 64, or 0 on NoPE layers, got {}", kOp,
                a.rope_dims);
  }
  if (a.num_heads < 8 || a.num_heads > heuristics::kMlaMaxHeads || a.num_heads % 8 != 0) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: num_heads must be a multiple of 8 in [8, {}], got {}", kOp,
                heuristics::kMlaMaxHeads, a.num_heads);
  }
  if (a.topk < heuristics::kMlaBlockKeys || a.topk % heuristics::kMlaBlockKeys != 0 || a.topk > (1 << 20)) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: topk must be a positive multiple of 64 up to 2^20, got {}", kOp,
                a.topk);
  }
  ops::require_range(a.num_tokens, 0, heuristics::kMlaMaxTokens, kOp, "num_tokens");
  return {static_cast<heuristics::MlaCacheFormat>(a.format), a.rope_dims, a.num_heads, a.topk, a.num_tokens};
}

heuristics::SparseMlaConfig resolve_config(const heuristics::SparseMlaShape& s, const heuristics::DeviceFacts& facts) {
  heuristics::SparseMlaConfig c = heuristics::select_sparse_mla(s, facts);
  if (const std::string& spec = env_config().mla_override; !spec.empty()) {
    const int splits_before = c.splits;
    std::string err = heuristics::apply_sparse_mla_override(spec, c);
    if (err.empty() && c.splits != splits_before && c.splits > 0) {
      const int blocks = s.topk / heuristics::kMlaBlockKeys;
      c.blocks_per_split = (blocks + c.splits - 1) / c.splits;
    }
    if (err.empty()) err = heuristics::sparse_mla_config_error(s, c, facts);
    if (!err.empty()) throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: CHORD_MLA_CONFIG=\"{}\": {}", kOp, spec, err);
  }
  return c;
}

}  // namespace

size_t sparse_mla_decode_workspace_size(const chord_sparse_mla_decode_args_t& a) {
  const heuristics::SparseMlaShape s = checked_shape(a);
  if (s.num_tokens == 0) return 0;
  const ContextState& ctx = JitRuntime::global().context_for(nullptr);
  return heuristics::sparse_mla_workspace_bytes(s, resolve_config(s, ctx.facts));
}

void sparse_mla_decode(const chord_sparse_mla_decode_args_t& a, CUstream stream) {
  const heuristics::SparseMlaShape s = checked_shape(a);
  if (!std::isfinite(a.softmax_scale)) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: softmax_scale must be finite, got {}", kOp, a.softmax_scale);
  }
  if (s.num_tokens == 0) return;  // nothing is read or written
  ops::require_range(a.num_slots, 1, int64_t{1} << 31, kOp, "num_slots");
  ops::require_pointer(a.q, kOp, "q", 16);
  ops::require_pointer(a.cache, kOp, "cache", 16);
  ops::require_pointer(a.indices, kOp, "indices", 4);
  if (a.topk_length) ops::require_pointer(a.topk_length, kOp, "topk_length", 4);
  if (a.attn_sink) ops::require_pointer(a.attn_sink, kOp, "attn_sink", 4);
  ops::require_pointer(a.out, kOp, "out", 16);
  ops::require_pointer(a.lse, kOp, "lse", 4);

  JitRuntime& rt = JitRuntime::global();
  const ContextState& ctx = rt.context_for(stream);
  const heuristics::SparseMlaConfig c = resolve_config(s, ctx.facts);
  const size_t need = heuristics::sparse_mla_workspace_bytes(s, c);
  if (need > 0) {
    ops::require_pointer(a.workspace, kOp, "workspace", 16);
    if (a.workspace_bytes < need) {
      throw_error(CHORD_ERROR_INVALID_ARGUMENT,
                  "{}: workspace must hold {} bytes (chord_sparse_mla_decode_workspace_size: {} splits of the top-k), "
                  "got {}",
                  kOp, need, c.splits, a.workspace_bytes);
    }
  }
  const LoadedKernel& decode = rt.kernel(ops::sparse_mla_decode_descriptor(ctx.facts.arch, s, c), ctx, stream);

  const int64_t rows = s.num_tokens * s.num_heads;
  float* part_out = need > 0 ? static_cast<float*>(a.workspace) : nullptr;
  float* part_lse = need > 0 ? part_out + rows * c.splits * heuristics::kMlaNopeDims : nullptr;
  constexpr float kLog2e = 1.4426950408889634f;
  const ops::DecodeParams p{a.q,
                            a.cache,
                            a.indices,
                            a.topk_length,
                            a.attn_sink,
                            a.out,
                            a.lse,
                            part_out,
                            part_lse,
                            a.num_slots,
                            a.topk,
                            c.splits,
                            c.blocks_per_split,
                            a.softmax_scale * kLog2e};
  const void* args[] = {&p};
  launch(ctx, decode,
         {static_cast<uint32_t>(c.splits * (s.num_heads / c.head_group)), static_cast<uint32_t>(s.num_tokens), 1},
         stream, const_cast<void**>(args));
  if (c.splits > 1) {
    const LoadedKernel& combine =
        rt.kernel(ops::sparse_mla_combine_descriptor(ctx.facts.arch, s.num_heads), ctx, stream);
    const ops::CombineParams cp{part_out, part_lse, a.attn_sink, a.out, a.lse, c.splits};
    const void* cargs[] = {&cp};
    launch(ctx, combine, {static_cast<uint32_t>(rows), 1, 1}, stream, const_cast<void**>(cargs),
           LaunchOrder::kProgrammatic);
  }
}

}  // namespace chordrt

namespace chordrt::ops {

// The writers and decode at this deployment's head count (and the NoPE layers' variants).
void plan_sparse_mla(const ModelPlanInput& in, PlanBuilder& plan) {
  if (!in.model.attention) return;
  const SparseAttentionShape& a = *in.model.attention;
  const Deployment& dep = in.deployment;
  const int heads = dep.expert_parallel > 1 ? a.num_heads : a.num_heads / dep.tensor_parallel;  // EP: DP attention
  if (a.num_heads % dep.tensor_parallel != 0 || heads % 8 != 0 || heads > heuristics::kMlaMaxHeads) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT,
                "deployment {}: {} attention heads over TP {} is not a multiple of 8 up to {} per GPU", dep.name,
                a.num_heads, dep.tensor_parallel, heuristics::kMlaMaxHeads);
  }
  const Arch arch = in.facts.arch;
  for (int rope : {a.rope_dims, 0}) {
    if (rope == 0 && a.rope_dims != 0 && !a.nope_layers) continue;
    plan.add(mla_cache_write_descriptor(arch, CHORD_MLA_CACHE_FP8_DS_MLA, rope));
    const heuristics::SparseMlaShape s{heuristics::MlaCacheFormat::kFp8DsMla, rope, heads, a.index_topk, 1};
    plan.add(sparse_mla_decode_descriptor(arch, s, heuristics::select_sparse_mla_kernel(s, in.facts)));
  }
  plan.add(sparse_mla_combine_descriptor(arch, heads));
}

}  // namespace chordrt::ops
