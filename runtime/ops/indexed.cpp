// W4A16 indexed MoE GEMMs over vLLM's routing: block_m advice and dispatch.
//   validate -> (optional routing check) -> key (the layout's kernel + heuristics) -> launch.
// Layout WGMMA_K64 runs the grouped family's persistent kernel in its indexed (gathering) mode; layout
// MMA runs kernels_src/indexed/decode.cuh.
#include "runtime/ops/indexed.hpp"

#include <algorithm>
#include <vector>

#include "runtime/core/math.hpp"
#include "runtime/driver.hpp"
#include "runtime/env_config.hpp"
#include "runtime/launch.hpp"
#include "runtime/ops/glue.hpp"
#include "runtime/ops/indexed_routing.hpp"
#include "runtime/ops/resolve_config.hpp"
#include "runtime/ops/validate.hpp"
#include "runtime/ops/w4a16.hpp"

namespace chordrt::ops {

namespace {

namespace ix = chord::indexed;
using heuristics::GroupedConfig;
using heuristics::IndexedDecodeConfig;
using heuristics::IndexedShape;

heuristics::GroupedShape gathering_shape(const IndexedShape& s) {
  return {heuristics::GroupedMode::kIndexed, s.n, s.k, s.experts};
}

// Copies the routing back and checks it (validation mode only: synchronizes the stream).
void validate_routing(const char* op, const chord_indexed_args_t& a, int64_t routes, int experts, CUstream stream) {
  const DriverApi& api = require_driver();
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  check_cuda(api.cuStreamIsCapturing(stream, &capture), "cuStreamIsCapturing");
  if (capture != CU_STREAM_CAPTURE_STATUS_NONE) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT,
                "{}: validate = 1 reads the routing back to the host and cannot run while the stream is capturing", op);
  }
  check_cuda(api.cuStreamSynchronize(stream), "cuStreamSynchronize (routing validation)");
  RoutingSnapshot r;
  check_cuda(api.cuMemcpyDtoH(&r.num_post_padded, reinterpret_cast<CUdeviceptr>(a.num_tokens_post_padded), 4),
             "cuMemcpyDtoH (num_tokens_post_padded)");
  r.sorted_capacity = a.sorted_token_ids_capacity;
  r.expert_capacity = a.expert_ids_capacity;
  r.routes = routes;
  r.experts = experts;
  r.block_m = a.block_m;
  const int64_t slots = std::clamp<int64_t>(r.num_post_padded, 0, a.sorted_token_ids_capacity);
  const int64_t blocks = std::min<int64_t>(slots / a.block_m, a.expert_ids_capacity);
  std::vector<int32_t> sorted(static_cast<size_t>(slots)), expert(static_cast<size_t>(blocks));
  if (slots > 0) {
    check_cuda(api.cuMemcpyDtoH(sorted.data(), reinterpret_cast<CUdeviceptr>(a.sorted_token_ids), slots * 4),
               "cuMemcpyDtoH (sorted_token_ids)");
  }
  if (blocks > 0) {
    check_cuda(api.cuMemcpyDtoH(expert.data(), reinterpret_cast<CUdeviceptr>(a.expert_ids), blocks * 4),
               "cuMemcpyDtoH (expert_ids)");
  }
  r.sorted_ids = sorted;
  r.expert_ids = expert;
  if (const std::string why = routing_error(r); !why.empty()) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: routing check failed: {}", op, why);
  }
}

}  // namespace

KernelProgram IndexedPrefillFamily::program(const IndexedPrefillKey& k) {
  const IndexedShape s{W4a16Layout::kWgmmaK64, k.n, k.k, k.experts};
  if (const std::string why = heuristics::indexed_shape_error(s); !why.empty()) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: {}", kName, why);
  }
  return grouped_gemm_program(kName, gathering_shape(s),
                              {k.block_m, k.slices, k.stages, k.consumers, k.ring, k.stream_k});
}

std::vector<IndexedPrefillKey> IndexedPrefillFamily::examples(const DeviceFacts& facts) {
  // Kimi K2 EP8 and TP8 gate_up at a typical step.
  std::vector<IndexedPrefillKey> out;
  for (const IndexedShape& s :
       {IndexedShape{W4a16Layout::kWgmmaK64, 4096, 7168, 48}, IndexedShape{W4a16Layout::kWgmmaK64, 512, 7168, 384}}) {
    out.push_back(indexed_prefill_key(s, heuristics::select_indexed_block_m(s, 4096, {}, facts), 4096, facts));
  }
  return out;
}

KernelProgram IndexedDecodeFamily::program(const IndexedDecodeKey& k) {
  const IndexedShape s{W4a16Layout::kMma, k.n, k.k, k.experts};
  if (const std::string why = heuristics::indexed_decode_config_error(s, {k.block_m, k.depth}); !why.empty()) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: {}", kName, why);
  }
  KernelProgram p;
  p.header = "indexed/decode.cuh";
  p.name_expression =
      fmt::format("chord::indexed::indexed_decode_kernel<{}, {}, {}, {}, {}>", k.n, k.k, k.experts, k.block_m, k.depth);
  p.threads = ix::kDecodeThreads;
  return p;
}

std::vector<IndexedDecodeKey> IndexedDecodeFamily::examples(const DeviceFacts&) {
  // Kimi K2 EP8 down at the smallest and a larger decode block.
  const IndexedShape s{W4a16Layout::kMma, 7168, 2048, 48};
  return {indexed_decode_key(s, 8), indexed_decode_key(s, 24)};
}

IndexedPrefillKey indexed_prefill_key(const IndexedShape& s, int block_m, int64_t routes, const DeviceFacts& facts,
                                      std::string_view override_spec, bool stream_k_workspace) {
  const GroupedConfig selected = heuristics::select_indexed_prefill(s, block_m, routes, facts, stream_k_workspace);
  if (const std::string why = heuristics::grouped_config_error(gathering_shape(s), selected, facts); !why.empty()) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "indexed_gemm: block_m {} (layout WGMMA_K64): {}", block_m, why);
  }
  const GroupedConfig c =
      resolve_config("indexed_gemm", "CHORD_INDEXED_CONFIG", std::string(override_spec), selected,
                     heuristics::apply_grouped_override, [&](const GroupedConfig& cfg) {
                       if (cfg.block_m != block_m)
                         return std::string("block_m is the routing's (the call's block_m), not a key here");
                       if (cfg.stream_k != 0 && !stream_k_workspace)
                         return std::string("stream_k 1 needs the call's workspace (chord_indexed_args_t.workspace)");
                       return heuristics::grouped_config_error(gathering_shape(s), cfg, facts);
                     });
  return {static_cast<int>(s.n),
          static_cast<int>(s.k),
          s.experts,
          c.block_m,
          c.slices,
          c.stages,
          c.consumers,
          c.ring,
          c.stream_k};
}

IndexedDecodeKey indexed_decode_key(const IndexedShape& s, int block_m) {
  const IndexedDecodeConfig c = heuristics::select_indexed_decode(s, block_m);
  return {static_cast<int>(s.n), static_cast<int>(s.k), s.experts, c.block_m, c.depth};
}

int32_t indexed_block_m(int32_t layout, int32_t num_experts, int32_t n, int32_t k, int64_t routed_rows,
                        int32_t profile) {
  constexpr const char* op = "indexed_block_m";
  const IndexedShape s{static_cast<W4a16Layout>(layout), n, k, num_experts};
  if (layout != CHORD_W4A16_LAYOUT_WGMMA_K64 && layout != CHORD_W4A16_LAYOUT_MMA) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT,
                "{}: layout must be WGMMA_K64 ({}) or MMA ({}): the indexed GEMMs read no other, got {}", op,
                static_cast<int>(CHORD_W4A16_LAYOUT_WGMMA_K64), static_cast<int>(CHORD_W4A16_LAYOUT_MMA), layout);
  }
  if (const std::string why = heuristics::indexed_shape_error(s); !why.empty()) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: {}", op, why);
  }
  require_range(routed_rows, 0, INT32_MAX, op, "routed_rows");
  require_range(profile, CHORD_INDEXED_PROFILE_AUTO, CHORD_INDEXED_PROFILE_TP, op, "profile");
  // Needs no device: chosen for the H100/H200 facts an offline prewarm plans with (the planner picks the
  // same block sizes for them).
  return heuristics::select_indexed_block_m(s, routed_rows, static_cast<heuristics::IndexedProfile>(profile),
                                            DeviceFacts{});
}

void indexed_gemm(const chord_indexed_args_t& a, CUstream stream) {
  constexpr const char* op = "indexed_gemm";
  const chord_w4a16_weight_t& w =
      check_w4a16_weight(op, a.weight, {W4a16Layout::kWgmmaK64, W4a16Layout::kMma},
                         "the indexed GEMM needs a weight packed with layout WGMMA_K64 (prefill) or MMA (decode)");
  const auto layout = static_cast<W4a16Layout>(w.layout);
  const IndexedShape s{layout, w.n, w.k, w.num_experts};
  require_range(a.top_k, 1, ix::kMaxTopK, op, "top_k");
  require_range(a.num_tokens, 0, (INT32_MAX - 1) / a.top_k, op, "num_tokens");
  if (layout == W4a16Layout::kWgmmaK64) {
    if (a.block_m < chord::grouped::kMinBlockM || a.block_m > chord::grouped::kMaxBlockM || a.block_m % 8 != 0) {
      throw_error(CHORD_ERROR_INVALID_ARGUMENT,
                  "{}: block_m must be a multiple of 8 in [{}, {}] for layout WGMMA_K64, got {}", op,
                  chord::grouped::kMinBlockM, chord::grouped::kMaxBlockM, a.block_m);
    }
  } else if (const std::string why = heuristics::indexed_decode_config_error(s, {a.block_m, 1}); !why.empty()) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: {}", op, why);
  }
  require_range(a.sorted_token_ids_capacity, 0, INT32_MAX, op, "sorted_token_ids_capacity");
  require_range(a.expert_ids_capacity, 0, INT32_MAX, op, "expert_ids_capacity");
  require_range(a.validate, 0, 1, op, "validate");
  require_range(a.workspace_bytes, 0, INT64_MAX, op, "workspace_bytes");
  if (a.workspace) require_pointer(a.workspace, op, "workspace", 16);
  const int64_t routes = a.num_tokens * a.top_k;
  if (routes == 0) return;
  // A routing lists every route (moe_align pads, never drops) in whole blocks of block_m: buffers smaller
  // than ceil(routes / block_m) blocks cannot hold one (and would make the launch a silent no-op).
  const int64_t min_blocks = ceil_div<int64_t>(routes, a.block_m);
  if (a.sorted_token_ids_capacity < min_blocks * a.block_m) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT,
                "{}: sorted_token_ids_capacity must hold every route in whole blocks (ceil(num_tokens * top_k / "
                "block_m) * block_m = {}), got {}",
                op, min_blocks * a.block_m, a.sorted_token_ids_capacity);
  }
  if (a.expert_ids_capacity < min_blocks) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT,
                "{}: expert_ids_capacity must hold at least ceil(num_tokens * top_k / block_m) = {} blocks, got {}", op,
                min_blocks, a.expert_ids_capacity);
  }
  require_pointer(a.a, op, "a", 16);
  require_pointer(a.sorted_token_ids, op, "sorted_token_ids", 4);
  require_pointer(a.expert_ids, op, "expert_ids", 4);
  require_pointer(a.num_tokens_post_padded, op, "num_tokens_post_padded", 4);
  require_pointer(a.out, op, "out", 16);
  if (a.validate) validate_routing(op, a, routes, w.num_experts, stream);

  // Blocks the kernels may visit: what both buffers hold (the device count is clamped to it).
  const int64_t capacity_blocks = std::min(a.sorted_token_ids_capacity / a.block_m, a.expert_ids_capacity);
  const chord::IndexedRouting routing{static_cast<const chord::bf16*>(a.a),
                                      a.sorted_token_ids,
                                      a.expert_ids,
                                      a.num_tokens_post_padded,
                                      a.top_k,
                                      static_cast<int32_t>(routes),
                                      static_cast<int32_t>(capacity_blocks)};
  if (layout == W4a16Layout::kWgmmaK64) {
    check_override_syntax<GroupedConfig>(op, "CHORD_INDEXED_CONFIG", env_config().indexed_override,
                                         heuristics::apply_grouped_override);
  }
  const ContextState& ctx = JitRuntime::global().context_for(stream);
  if (layout == W4a16Layout::kWgmmaK64) {
    const IndexedPrefillKey key =
        indexed_prefill_key(s, a.block_m, routes, ctx.facts, env_config().indexed_override, a.workspace != nullptr);
    const int64_t block_n = chord::grouped::block_n(key.slices, key.consumers);
    const int64_t tiles = capacity_blocks * (w.n / block_n);
    const auto grid = static_cast<uint32_t>(std::min<int64_t>(tiles, ctx.facts.sm_count));
    // A workspace given is held to its documented size whether or not this call's kernel uses it, so a short
    // one fails the first call, not the first one that runs stream-K.
    if (const auto need = static_cast<int64_t>(indexed_gemm_workspace_size(a.block_m, ctx.facts.sm_count));
        a.workspace && a.workspace_bytes < need) {
      throw_error(CHORD_ERROR_INVALID_ARGUMENT,
                  "{}: workspace_bytes must be at least chord_indexed_gemm_workspace_size(block_m {}, {} SMs) = {}, "
                  "got {}",
                  op, a.block_m, ctx.facts.sm_count, need, a.workspace_bytes);
    }
    const LoadedKernel& kernel = IndexedPrefillFamily::kernel(key, ctx, stream);
    const chord::grouped::StreamWorkspace stream_ws =
        key.stream_k ? stream_k_workspace(a.workspace, grid, kernel.dry_run, stream)
                     : chord::grouped::StreamWorkspace{};
    const chord::TensorMap unused_map{};  // the gathering mode loads activations itself
    const int32_t* no_rows = nullptr;
    launch(ctx, kernel, {{grid, 1, 1}, stream}, unused_map, w.packed, w.scale, no_rows, int32_t{0}, routing, a.out,
           stream_ws);
  } else {
    const IndexedDecodeKey key = indexed_decode_key(s, a.block_m);
    const LoadedKernel& kernel = IndexedDecodeFamily::kernel(key, ctx, stream);
    // Slots per row range: about two waves of the CTAs an SM holds, at most one per block.
    const int64_t ranges = w.n / ix::kDecodeRowsPerCta;
    const int64_t slots = std::clamp<int64_t>(
        ceil_div<int64_t>(2LL * ix::kDecodeCtasPerSm * ctx.facts.sm_count, ranges), 1, capacity_blocks);
    launch(ctx, kernel, {{static_cast<uint32_t>(slots * ranges), 1, 1}, stream}, w.packed, w.scale, routing, a.out);
  }
}

size_t indexed_gemm_workspace_size(int32_t block_m, int32_t num_sms) {
  if (block_m < chord::grouped::kMinBlockM || block_m > chord::grouped::kMaxBlockM || block_m % 8 != 0 || num_sms < 1 ||
      num_sms > 1024) {
    return 0;
  }
  constexpr int kWidest = chord::grouped::block_n(chord::grouped::kMaxSlices, chord::grouped::kMaxConsumers);
  return static_cast<size_t>(chord::grouped::stream_workspace_bytes(num_sms, block_m, kWidest));
}

// EP or TP: both layouts' packers and GEMMs of both projections, the decode layout for 1..128 tokens per
// GPU each routing top_k rows here at most (local routed rows 1..128 * top_k), the prefill layout for
// 64..64K-token steps (tokens * top_k / EP rows here; calls with and without a stream-K workspace), plus
// moe_align at every block size the heuristic picks for them.
void plan_indexed(const ModelPlanInput& in, PlanBuilder& plan) {
  const MoeModelShape& m = in.model;
  const Deployment& dep = in.deployment;
  if (m.moe_intermediate <= 0 || m.weight_format != "int4") return;
  const int experts = m.num_experts / dep.expert_parallel;
  const int64_t inter = m.moe_intermediate / dep.tensor_parallel;
  const Arch arch = in.facts.arch;
  const std::pair<int64_t, int64_t> projections[] = {{2 * inter, m.hidden}, {m.hidden, inter}};  // (N, K)
  auto add_align = [&](int block_m) {
    for (const MoeAlignKey& k : moe_align_keys(m.num_experts, block_m, dep.expert_parallel > 1, in.facts)) {
      plan.add(MoeAlignFamily::descriptor(arch, k));
    }
  };
  for (const auto& [n, k] : projections) {
    for (const W4a16Layout layout : {W4a16Layout::kMma, W4a16Layout::kWgmmaK64}) {
      const IndexedShape s{layout, n, k, experts};
      if (!heuristics::indexed_shape_error(s).empty()) continue;
      plan.add(W4a16PackFamily::descriptor(arch, w4a16_pack_key(layout, n, k)));
      if (layout == W4a16Layout::kMma) {
        for (int64_t rows = 1; rows <= 128LL * m.top_k; ++rows) {
          const int bm = heuristics::select_indexed_block_m(s, rows, {}, in.facts);
          add_align(bm);
          plan.add(IndexedDecodeFamily::descriptor(arch, indexed_decode_key(s, bm)));
        }
      } else {
        for (int64_t tokens = 64; tokens <= 65536; tokens *= 2) {
          const int64_t rows = std::max<int64_t>(1, tokens * m.top_k / dep.expert_parallel);
          const int bm = heuristics::select_indexed_block_m(s, rows, {}, in.facts);
          add_align(bm);
          // Both the call without a workspace and the one with (stream-K where the heuristics take it).
          for (const bool workspace : {false, true}) {
            plan.add(IndexedPrefillFamily::descriptor(arch, indexed_prefill_key(s, bm, rows, in.facts, {}, workspace)));
          }
        }
      }
    }
  }
}

}  // namespace chordrt::ops
