// DSA indexer: key-cache write, logits and top-k — validate -> key -> kernel -> launch
// (kernels_src/dsa_indexer/{key_cache,logits,topk}.cuh).
#include "runtime/ops/dsa_indexer.hpp"

#include <algorithm>
#include <tuple>

#include "runtime/core/math.hpp"
#include "runtime/env_config.hpp"
#include "runtime/launch.hpp"
#include "runtime/ops/resolve_config.hpp"
#include "runtime/ops/validate.hpp"
#include "runtime/tensor_map.hpp"

namespace chordrt::ops {

namespace {

using heuristics::DsaLogitsConfig;
using heuristics::DsaTopkConfig;

void require_page_size(int32_t page_size, const char* op) {
  require_range(page_size, 1, di::kMaxPageSize, op, "page_size");
}

void require_max_context(int32_t max_context, const char* op) {
  require_range(max_context, 0, INT32_MAX - 3, op, "max_context");
  if (max_context % 4 != 0) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT,
                "{}: max_context must be a multiple of 4 (16-byte aligned logits rows), got {}", op, max_context);
  }
}

DsaLogitsConfig logits_config(const DsaIndexerLogitsKey& k) { return {k.stages, k.keys_per_cta, k.tma}; }

// The key cache as [page][row][byte] (rows 128 bytes apart, pages 132 * page_size), boxes of
// min(page_size, 64) rows of one page. The kernel never addresses a page outside [0, num_pages).
const CUtensorMap& key_cache_map(const chord_dsa_indexer_args_t& a) {
  TiledTensorMapSpec spec;
  spec.rank = 3;
  spec.address = a.cache;
  spec.dims = {di::kHeadDim, static_cast<uint64_t>(a.page_size),
               static_cast<uint64_t>(std::max<int64_t>(a.num_pages, 1))};
  spec.strides = {di::kHeadDim, static_cast<uint64_t>(di::cache_page_bytes(a.page_size))};
  spec.box = {di::kHeadDim, static_cast<uint32_t>(std::min(a.page_size, di::kTileKeys)), 1};
  return tiled_tensor_map(spec, "DSA indexer key cache");
}

}  // namespace

KernelProgram DsaIndexerCacheWriteFamily::program(const K& k) {
  KernelProgram p;
  p.header = "dsa_indexer/key_cache.cuh";
  p.name_expression = fmt::format("chord::dsa_indexer::key_cache_write_kernel<{}>", k.warps);
  p.threads = static_cast<uint32_t>(32 * k.warps);
  return p;
}

std::vector<DsaIndexerCacheWriteKey> DsaIndexerCacheWriteFamily::examples(const DeviceFacts& facts) {
  return {dsa_indexer_cache_write_key(facts)};
}

KernelProgram DsaIndexerLogitsFamily::program(const K& k) {
  const DsaLogitsConfig c = logits_config(k);
  if (const std::string why = heuristics::dsa_logits_config_error(k.heads, k.page_size, c); !why.empty()) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: {}", kName, why);
  }
  KernelProgram p;
  p.header = "dsa_indexer/logits.cuh";
  p.name_expression = fmt::format("chord::dsa_indexer::indexer_logits_kernel<{}, {}, {}, {}, {}>", k.heads, k.page_size,
                                  k.stages, k.keys_per_cta, k.tma ? "true" : "false");
  p.threads = di::kLogitsThreads;
  p.dynamic_smem = static_cast<uint32_t>(heuristics::dsa_logits_dynamic_smem(k.heads, k.page_size, c));
  return p;
}

// The bench's decode step (64 queries of 64K), a single query, 128 heads, pages of 1 (cp.async), 16
// (four tensor copies per tile) and 64.
std::vector<DsaIndexerLogitsKey> DsaIndexerLogitsFamily::examples(const DeviceFacts& facts) {
  std::vector<K> out;
  for (const auto& [heads, page, tokens, context] : {std::tuple{64, 64, 64, 65536},
                                                     {32, 64, 64, 65536},
                                                     {64, 1, 1, 2048},
                                                     {32, 1, 8, 65536},
                                                     {128, 64, 4, 8192},
                                                     {24, 16, 8, 4096}}) {
    out.push_back(dsa_indexer_logits_key({heads, page, tokens, context}, facts));
  }
  return out;
}

KernelProgram DsaIndexerTopkFamily::program(const K& k) {
  if (const std::string why = heuristics::dsa_topk_config_error({k.threads, k.candidates}); !why.empty()) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: {}", kName, why);
  }
  KernelProgram p;
  p.header = "dsa_indexer/topk.cuh";
  p.name_expression = fmt::format("chord::dsa_indexer::topk_kernel<{}, {}>", k.threads, k.candidates);
  p.threads = static_cast<uint32_t>(k.threads);
  p.dynamic_smem = static_cast<uint32_t>(di::topk_dynamic_smem(k.candidates));
  return p;
}

std::vector<DsaIndexerTopkKey> DsaIndexerTopkFamily::examples(const DeviceFacts& facts) {
  return {dsa_indexer_topk_key(2048, facts)};
}

DsaIndexerCacheWriteKey dsa_indexer_cache_write_key(const DeviceFacts&) {
  return {heuristics::select_dsa_key_cache_write().warps};
}

DsaIndexerLogitsKey dsa_indexer_logits_key(const heuristics::DsaLogitsShape& s, const DeviceFacts& facts) {
  const DsaLogitsConfig c = resolve_config(
      "dsa_indexer_logits", "CHORD_DSA_CONFIG", env_config().dsa_override, heuristics::select_dsa_logits(s, facts),
      heuristics::apply_dsa_logits_override, [&](const DsaLogitsConfig& cfg) {
        return heuristics::dsa_logits_config_error(s.heads, s.page_size, cfg, facts);
      });
  return {s.heads, s.page_size, c.stages, c.keys_per_cta, c.tma};
}

DsaIndexerTopkKey dsa_indexer_topk_key(int topk, const DeviceFacts& facts) {
  const DsaTopkConfig c = heuristics::select_dsa_topk(topk, facts);
  return {c.threads, c.candidates};
}

size_t indexer_cache_page_bytes(int32_t page_size) { return static_cast<size_t>(di::cache_page_bytes(page_size)); }

void indexer_cache_write(const chord_indexer_cache_write_args_t& a, CUstream stream) {
  constexpr const char* op = "indexer_cache_write";
  require_range(a.num_tokens, 0, INT64_MAX / di::kHeadDim, op, "num_tokens");
  require_page_size(a.page_size, op);
  require_range(a.num_pages, 0, INT64_MAX / di::cache_page_bytes(a.page_size), op, "num_pages");
  if (a.num_tokens == 0) return;  // nothing is read or written
  require_pointer(a.k, op, "k", 16);
  require_pointer(a.slot_mapping, op, "slot_mapping", 8);
  require_pointer(a.cache, op, "cache", 16);
  const ContextState& ctx = JitRuntime::global().context_for(stream);
  const DsaIndexerCacheWriteKey key = dsa_indexer_cache_write_key(ctx.facts);
  const LoadedKernel& k = DsaIndexerCacheWriteFamily::kernel(key, ctx, stream);
  const uint32_t grid = heuristics::dsa_key_cache_write_grid(a.num_tokens, {key.warps}, ctx.facts);
  launch(ctx, k, {{grid, 1, 1}, stream}, static_cast<const chord::bf16*>(a.k), a.slot_mapping,
         static_cast<uint8_t*>(a.cache), a.num_tokens, a.page_size, a.num_pages);
}

void dsa_indexer_logits(const chord_dsa_indexer_args_t& a, CUstream stream) {
  constexpr const char* op = "dsa_indexer_logits";
  if (const std::string why = heuristics::dsa_heads_error(a.num_heads, "num_heads"); !why.empty()) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: {}", op, why);
  }
  require_range(a.num_tokens, 0, INT32_MAX, op, "num_tokens");
  require_page_size(a.page_size, op);
  require_range(a.num_pages, 0, INT64_MAX / di::cache_page_bytes(a.page_size), op, "num_pages");
  require_range(a.max_pages_per_seq, 0, INT32_MAX, op, "max_pages_per_seq");
  require_max_context(a.max_context, op);
  if (a.num_tokens == 0 || a.max_context == 0) return;  // no logits to write
  require_pointer(a.q, op, "q", 16);
  require_pointer(a.weights, op, "weights", 4);
  require_pointer(a.cache, op, "cache", 16);
  if (a.max_pages_per_seq > 0) require_pointer(a.block_table, op, "block_table", 4);
  require_pointer(a.context_lens, op, "context_lens", 4);
  require_pointer(a.logits, op, "logits", 16);

  check_override_syntax<DsaLogitsConfig>(op, "CHORD_DSA_CONFIG", env_config().dsa_override,
                                         heuristics::apply_dsa_logits_override);
  const ContextState& ctx = JitRuntime::global().context_for(stream);
  const DsaIndexerLogitsKey key =
      dsa_indexer_logits_key({a.num_heads, a.page_size, a.num_tokens, a.max_context}, ctx.facts);
  const int64_t chunks = heuristics::dsa_logits_chunks(a.max_context, logits_config(key));
  if (a.num_tokens * chunks > INT32_MAX) {
    throw_error(CHORD_ERROR_UNSUPPORTED,
                "{}: num_tokens * ceil(max_context / {}) must be at most {} CTAs, got {} * {} (split the batch)", op,
                key.keys_per_cta, INT32_MAX, a.num_tokens, chunks);
  }
  const LoadedKernel& k = DsaIndexerLogitsFamily::kernel(key, ctx, stream);
  // A dry run has no driver to encode with; the cp.async kernels ignore the map.
  const CUtensorMap map = k.dry_run || !key.tma ? CUtensorMap{} : key_cache_map(a);
  launch(ctx, k, {{static_cast<uint32_t>(a.num_tokens * chunks), 1, 1}, stream}, map, static_cast<const uint8_t*>(a.q),
         a.weights, static_cast<const uint8_t*>(a.cache), a.num_pages, a.block_table, a.max_pages_per_seq,
         a.context_lens, a.max_context, a.logits, static_cast<int32_t>(chunks));
}

void dsa_topk(const chord_dsa_topk_args_t& a, CUstream stream) {
  constexpr const char* op = "dsa_topk";
  require_range(a.num_tokens, 0, INT32_MAX, op, "num_tokens");
  require_range(a.topk, 1, di::kMaxTopk, op, "topk");
  require_max_context(a.max_context, op);
  if (a.block_table) {
    require_page_size(a.page_size, op);
    require_range(a.max_pages_per_seq, 1, INT32_MAX, op, "max_pages_per_seq");
  }
  if (a.num_tokens == 0) return;
  if (a.max_context > 0) require_pointer(a.logits, op, "logits", 16);
  require_pointer(a.context_lens, op, "context_lens", 4);
  if (a.block_table) require_pointer(a.block_table, op, "block_table", 4);
  require_pointer(a.indices, op, "indices", 4);

  const ContextState& ctx = JitRuntime::global().context_for(stream);
  const LoadedKernel& k = DsaIndexerTopkFamily::kernel(dsa_indexer_topk_key(a.topk, ctx.facts), ctx, stream);
  launch(ctx, k, {{static_cast<uint32_t>(a.num_tokens), 1, 1}, stream}, a.logits, a.max_context, a.context_lens, a.topk,
         a.block_table, a.max_pages_per_seq, a.page_size, a.indices);
}

void plan_dsa_indexer(const ModelPlanInput& in, PlanBuilder& plan) {
  if (!in.model.attention || in.model.attention->index_heads == 0) return;
  const SparseAttentionShape& a = *in.model.attention;
  const Arch arch = in.facts.arch;
  constexpr int kPage = 64;
  plan.add(DsaIndexerCacheWriteFamily::descriptor(arch, dsa_indexer_cache_write_key(in.facts)));
  // Up to 16K tokens x 256K context (page 64).
  for (int64_t tokens = 1; tokens <= 16384; tokens *= 2) {
    for (int32_t context = 1024; context <= (256 << 10); context *= 2) {
      plan.add(DsaIndexerLogitsFamily::descriptor(
          arch, dsa_indexer_logits_key({a.index_heads, kPage, tokens, context}, in.facts)));
    }
  }
  plan.add(DsaIndexerTopkFamily::descriptor(arch, dsa_indexer_topk_key(a.index_topk, in.facts)));
}

}  // namespace chordrt::ops
