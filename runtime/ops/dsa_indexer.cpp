// DSA indexer: key-cache write, logits and top-k — validate -> descriptor -> kernel -> launch
// (kernels_src/dsa/{key_cache,logits,topk}.cuh).
#include "runtime/ops/dsa_indexer.hpp"

#include <algorithm>

#include "chordrt/chordrt.hpp"
#include "runtime/jit_runtime.hpp"
#include "runtime/launch.hpp"
#include "runtime/ops/validate.hpp"

namespace chordrt::ops {

namespace {

using heuristics::DsaKeyCacheWriteConfig;
using heuristics::DsaLogitsConfig;
using heuristics::DsaTopkConfig;

constexpr jit::FieldSpec kWriteFields[] = {{"warps", INT64_MIN, INT64_MAX}};
constexpr jit::FamilySchema kWriteSchema{"dsa.key_cache_write", kWriteFields};
constexpr jit::FieldSpec kLogitsFields[] = {{"heads", INT64_MIN, INT64_MAX}, {"page_size", INT64_MIN, INT64_MAX}, {"key_warps", INT64_MIN, INT64_MAX}, {"head_groups", INT64_MIN, INT64_MAX}, {"stages", INT64_MIN, INT64_MAX}, {"keys_per_cta", INT64_MIN, INT64_MAX}};
constexpr jit::FamilySchema kLogitsSchema{"dsa.indexer_logits", kLogitsFields};
constexpr jit::FieldSpec kTopkFields[] = {{"threads", INT64_MIN, INT64_MAX}, {"candidates", INT64_MIN, INT64_MAX}};
constexpr jit::FamilySchema kTopkSchema{"dsa.topk", kTopkFields};

KernelProgram write_program(const jit::Descriptor& d) {
  const int64_t warps = d[0];
  if (warps < 1 || warps > 32) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: warps must be in [1, 32]", jit::to_string(d));
  }
  KernelProgram p;
  p.header = "dsa/key_cache.cuh";
  p.name_expression = fmt::format("chord::dsa::key_cache_write_kernel<{}>", warps);
  p.threads = static_cast<uint32_t>(32 * warps);
  return p;
}

DsaLogitsConfig logits_config(const jit::Descriptor& d) {
  return {static_cast<int>(d[2]), static_cast<int>(d[3]), static_cast<int>(d[4]), static_cast<int>(d[5])};
}

KernelProgram logits_program(const jit::Descriptor& d) {
  const auto c = logits_config(d);
  const int heads = static_cast<int>(d[0]), page = static_cast<int>(d[1]);
  if (d[0] != heads || d[1] != page) throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: out of range", jit::to_string(d));
  if (const std::string why = heuristics::dsa_logits_config_error(heads, page, c); !why.empty()) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: {}", jit::to_string(d), why);
  }
  KernelProgram p;
  p.header = "dsa/logits.cuh";
  p.name_expression = fmt::format("chord::dsa::indexer_logits_kernel<{}, {}, {}, {}, {}, {}>", heads, page, c.key_warps,
                                  c.head_groups, c.stages, c.keys_per_cta);
  p.threads = static_cast<uint32_t>(32 * c.key_warps * c.head_groups);
  p.dynamic_smem = static_cast<uint32_t>(heuristics::dsa_logits_dynamic_smem(heads, page, c));
  return p;
}

KernelProgram topk_program(const jit::Descriptor& d) {
  const DsaTopkConfig c{static_cast<int>(d[0]), static_cast<int>(d[1])};
  if (d[0] != c.threads || d[1] != c.candidates) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: out of range", jit::to_string(d));
  }
  if (const std::string why = heuristics::dsa_topk_config_error(c); !why.empty()) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: {}", jit::to_string(d), why);
  }
  KernelProgram p;
  p.header = "dsa/topk.cuh";
  p.name_expression = fmt::format("chord::dsa::topk_kernel<{}, {}>", c.threads, c.candidates);
  p.threads = static_cast<uint32_t>(c.threads);
  p.dynamic_smem = static_cast<uint32_t>(heuristics::dsa_topk_dynamic_smem(c));
  return p;
}

std::vector<jit::Descriptor> write_examples(Arch arch) {
  return {dsa_key_cache_write_descriptor(arch, heuristics::select_dsa_key_cache_write())};
}

// The bench's decode step (64 queries of 64K), a single query, the 128-head split, both page sizes.
std::vector<jit::Descriptor> logits_examples(Arch arch) {
  std::vector<jit::Descriptor> out;
  for (const auto& [heads, page, tokens, context] :
       {std::tuple{64, 64, 64, 65536}, {32, 64, 64, 65536}, {64, 1, 1, 2048}, {32, 1, 8, 65536}, {128, 64, 4, 8192}}) {
    out.push_back(dsa_indexer_logits_descriptor(arch, heads, page,
                                                heuristics::select_dsa_logits({heads, page, tokens, context})));
  }
  return out;
}

std::vector<jit::Descriptor> topk_examples(Arch arch) {
  return {dsa_topk_descriptor(arch, heuristics::select_dsa_topk(2048))};
}

}  // namespace

const KernelFamily kDsaKeyCacheWriteFamily{kWriteSchema, write_program, write_examples};
const KernelFamily kDsaIndexerLogitsFamily{kLogitsSchema, logits_program, logits_examples};
const KernelFamily kDsaTopkFamily{kTopkSchema, topk_program, topk_examples};

jit::Descriptor dsa_key_cache_write_descriptor(Arch arch, const DsaKeyCacheWriteConfig& c) {
  return jit::Descriptor(kWriteSchema, arch, {c.warps});
}

jit::Descriptor dsa_indexer_logits_descriptor(Arch arch, int heads, int page_size, const DsaLogitsConfig& c) {
  return jit::Descriptor(kLogitsSchema, arch, {heads, page_size, c.key_warps, c.head_groups, c.stages, c.keys_per_cta});
}

jit::Descriptor dsa_topk_descriptor(Arch arch, const DsaTopkConfig& c) {
  return jit::Descriptor(kTopkSchema, arch, {c.threads, c.candidates});
}

}  // namespace chordrt::ops

namespace chordrt {

namespace {

void require_page_size(int32_t page_size, const char* op) {
  ops::require_range(page_size, 1, heuristics::kDsaMaxPageSize, op, "page_size");
}

void require_max_context(int32_t max_context, const char* op) {
  ops::require_range(max_context, 0, INT32_MAX - 3, op, "max_context");
  if (max_context % 4 != 0) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT,
                "{}: max_context must be a multiple of 4 (16-byte aligned logits rows), got {}", op, max_context);
  }
}

}  // namespace

size_t indexer_cache_page_bytes(int32_t page_size) {
  return static_cast<size_t>(heuristics::dsa_cache_page_bytes(page_size));
}

void indexer_cache_write(const chord_indexer_cache_write_args_t& a, CUstream stream) {
  constexpr const char* op = "indexer_cache_write";
  ops::require_range(a.num_tokens, 0, INT64_MAX / heuristics::kDsaHeadDim, op, "num_tokens");
  require_page_size(a.page_size, op);
  ops::require_range(a.num_pages, 0, INT64_MAX / heuristics::dsa_cache_page_bytes(a.page_size), op, "num_pages");
  if (a.num_tokens == 0) return;  // nothing is read or written
  ops::require_pointer(a.k, op, "k", 16);
  ops::require_pointer(a.slot_mapping, op, "slot_mapping", 8);
  ops::require_pointer(a.cache, op, "cache", 16);
  JitRuntime& rt = JitRuntime::global();
  const ContextState& ctx = rt.context_for(stream);
  const auto c = heuristics::select_dsa_key_cache_write();
  const LoadedKernel& k = rt.kernel(ops::dsa_key_cache_write_descriptor(ctx.facts.arch, c), ctx, stream);
  const void* args[] = {&a.k, &a.slot_mapping, &a.cache, &a.num_tokens, &a.page_size, &a.num_pages};
  launch(ctx, k, {heuristics::dsa_key_cache_write_grid(a.num_tokens, c, ctx.facts), 1, 1}, stream,
         const_cast<void**>(args));
}

void dsa_indexer_logits(const chord_dsa_indexer_args_t& a, CUstream stream) {
  constexpr const char* op = "dsa_indexer_logits";
  if (a.num_heads < 8 || a.num_heads > heuristics::kDsaMaxHeads || a.num_heads % 8 != 0) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: num_heads must be a multiple of 8 in [8, {}], got {}", op,
                heuristics::kDsaMaxHeads, a.num_heads);
  }
  ops::require_range(a.num_tokens, 0, INT32_MAX, op, "num_tokens");
  require_page_size(a.page_size, op);
  ops::require_range(a.num_pages, 0, INT64_MAX / heuristics::dsa_cache_page_bytes(a.page_size), op, "num_pages");
  ops::require_range(a.max_pages_per_seq, 0, INT32_MAX, op, "max_pages_per_seq");
  require_max_context(a.max_context, op);
  if (a.num_tokens == 0 || a.max_context == 0) return;  // no logits to write
  ops::require_pointer(a.q, op, "q", 16);
  ops::require_pointer(a.weights, op, "weights", 4);
  ops::require_pointer(a.cache, op, "cache", 16);
  if (a.max_pages_per_seq > 0) ops::require_pointer(a.block_table, op, "block_table", 4);
  ops::require_pointer(a.context_lens, op, "context_lens", 4);
  ops::require_pointer(a.logits, op, "logits", 16);

  JitRuntime& rt = JitRuntime::global();
  const ContextState& ctx = rt.context_for(stream);
  const auto c = heuristics::select_dsa_logits({a.num_heads, a.page_size, a.num_tokens, a.max_context}, ctx.facts);
  const int64_t chunks = heuristics::dsa_logits_chunks(a.max_context, c);
  if (a.num_tokens * chunks > INT32_MAX) {
    throw_error(CHORD_ERROR_UNSUPPORTED,
                "{}: num_tokens * ceil(max_context / {}) must be at most {} CTAs, got {} * {} (split the batch)", op,
                c.keys_per_cta, INT32_MAX, a.num_tokens, chunks);
  }
  const LoadedKernel& k =
      rt.kernel(ops::dsa_indexer_logits_descriptor(ctx.facts.arch, a.num_heads, a.page_size, c), ctx, stream);
  const int32_t chunks32 = static_cast<int32_t>(chunks);
  const void* args[] = {
      &a.q,           &a.weights, &a.cache, &a.num_pages, &a.block_table, &a.max_pages_per_seq, &a.context_lens,
      &a.max_context, &a.logits,  &chunks32};
  launch(ctx, k, {static_cast<uint32_t>(a.num_tokens * chunks), 1, 1}, stream, const_cast<void**>(args));
}

void dsa_topk(const chord_dsa_topk_args_t& a, CUstream stream) {
  constexpr const char* op = "dsa_topk";
  ops::require_range(a.num_tokens, 0, INT32_MAX, op, "num_tokens");
  ops::require_range(a.topk, 1, heuristics::kDsaMaxTopk, op, "topk");
  require_max_context(a.max_context, op);
  if (a.block_table) {
    require_page_size(a.page_size, op);
    ops::require_range(a.max_pages_per_seq, 1, INT32_MAX, op, "max_pages_per_seq");
  }
  if (a.num_tokens == 0) return;
  if (a.max_context > 0) ops::require_pointer(a.logits, op, "logits", 16);
  ops::require_pointer(a.context_lens, op, "context_lens", 4);
  if (a.block_table) ops::require_pointer(a.block_table, op, "block_table", 4);
  ops::require_pointer(a.indices, op, "indices", 4);

  JitRuntime& rt = JitRuntime::global();
  const ContextState& ctx = rt.context_for(stream);
  const auto c = heuristics::select_dsa_topk(a.topk, ctx.facts);
  const LoadedKernel& k = rt.kernel(ops::dsa_topk_descriptor(ctx.facts.arch, c), ctx, stream);
  const void* args[] = {&a.logits,      &a.max_context,       &a.context_lens, &a.topk,
                        &a.block_table, &a.max_pages_per_seq, &a.page_size,    &a.indices};
  launch(ctx, k, {static_cast<uint32_t>(a.num_tokens), 1, 1}, stream, const_cast<void**>(args));
}

}  // namespace chordrt

namespace chordrt::ops {

// The indexer's key writer, logits at the decode and prefill shapes its heuristic distinguishes (up to
// 16K tokens x 256K context, page 64) and top-k.
void plan_dsa_indexer(const ModelPlanInput& in, PlanBuilder& plan) {
  if (!in.model.attention || in.model.attention->index_heads == 0) return;
  const SparseAttentionShape& a = *in.model.attention;
  const Arch arch = in.facts.arch;
  constexpr int kPage = 64;
  plan.add(dsa_key_cache_write_descriptor(arch, heuristics::select_dsa_key_cache_write()));
  for (int64_t tokens = 1; tokens <= 16384; tokens *= 2) {
    for (int32_t context = 1024; context <= (256 << 10); context *= 2) {
      plan.add(dsa_indexer_logits_descriptor(
          arch, a.index_heads, kPage, heuristics::select_dsa_logits({a.index_heads, kPage, tokens, context}, in.facts)));
    }
  }
  plan.add(dsa_topk_descriptor(arch, heuristics::select_dsa_topk(a.index_topk, in.facts)));
}

}  // namespace chordrt::ops
