// W4A16 indexed MoE GEMMs over vLLM's routing: pack (checkpoint -> layout), block_m advice, dispatch.
//   validate -> (optional routing check) -> descriptor (layout's kernel + heuristics config) -> launch.
// The wgmma layout runs the grouped family's persistent kernel in its indexed (gathering) mode; the mma
// layout runs kernels_src/indexed/decode.cuh.
#include "chordrt/chordrt.hpp"  // TEMPORARY until the family takes its C args struct
#include "runtime/ops/indexed.hpp"

#include <xxhash.h>

#include <algorithm>
#include <vector>

#include "runtime/driver.hpp"
#include "runtime/jit_runtime.hpp"
#include "runtime/launch.hpp"
#include "runtime/ops/indexed_routing.hpp"
#include "runtime/ops/validate.hpp"
#include "runtime/ops/w4a16_weight.hpp"

namespace chordrt::ops {

namespace {

using heuristics::GroupedConfig;
using heuristics::IndexedDecodeConfig;
using heuristics::IndexedLayout;
using heuristics::IndexedShape;

constexpr jit::FieldSpec kPackFields[] = {{"layout", INT64_MIN, INT64_MAX}, {"n", INT64_MIN, INT64_MAX}, {"k", INT64_MIN, INT64_MAX}};
constexpr jit::FamilySchema kPackSchema{"indexed.pack", kPackFields};
constexpr jit::FieldSpec kPrefillFields[] = {{"n", INT64_MIN, INT64_MAX}, {"k", INT64_MIN, INT64_MAX}, {"experts", INT64_MIN, INT64_MAX}, {"block_m", INT64_MIN, INT64_MAX}, {"slices", INT64_MIN, INT64_MAX}, {"stages", INT64_MIN, INT64_MAX}};
constexpr jit::FamilySchema kPrefillSchema{"indexed.prefill", kPrefillFields};
constexpr jit::FieldSpec kDecodeFields[] = {{"n", INT64_MIN, INT64_MAX}, {"k", INT64_MIN, INT64_MAX}, {"experts", INT64_MIN, INT64_MAX}, {"block_m", INT64_MIN, INT64_MAX}, {"depth", INT64_MIN, INT64_MAX}};
constexpr jit::FamilySchema kDecodeSchema{"indexed.decode", kDecodeFields};
constexpr int kMaxTopK = 64;

IndexedLayout checked_layout(int64_t v, const std::string& what) {
  if (v != 0 && v != 1)
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: layout must be 0 (wgmma) or 1 (mma), got {}", what, v);
  return static_cast<IndexedLayout>(v);
}

void check_shape(const std::string& what, const IndexedShape& s) {
  if (const std::string why = heuristics::indexed_shape_error(s); !why.empty()) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: {}", what, why);
  }
}

KernelProgram pack_program(const jit::Descriptor& d) {
  const std::string what = jit::to_string(d);
  const IndexedLayout layout = checked_layout(d[0], what);
  check_shape(what, {layout, d[1], d[2], 1});
  KernelProgram p;
  if (layout == IndexedLayout::kWgmma) {
    p.header = "grouped/pack.cuh";
    p.name_expression = fmt::format("chord::grouped::pack_kernel<{}, {}, 64>", d[1], d[2]);
  } else {
    p.header = "indexed/pack.cuh";
    p.name_expression = fmt::format("chord::indexed::pack_mma_kernel<{}, {}>", d[1], d[2]);
  }
  p.threads = kPackThreads;
  return p;
}

KernelProgram prefill_program(const jit::Descriptor& d) {
  const std::string what = jit::to_string(d);
  const heuristics::GroupedShape g{heuristics::GroupedMode::kIndexed, d[0], d[1], static_cast<int>(d[2])};
  const GroupedConfig c{static_cast<int>(d[3]), static_cast<int>(d[4]), static_cast<int>(d[5])};
  check_shape(what, {IndexedLayout::kWgmma, d[0], d[1], static_cast<int>(d[2])});
  if (d[3] != c.block_m || d[4] != c.slices || d[5] != c.stages) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: values out of the kernel's range", what);
  }
  if (const std::string why = heuristics::grouped_config_error(g, c); !why.empty()) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: {}", what, why);
  }
  KernelProgram p;
  p.header = "grouped/gemm.cuh";
  p.name_expression = fmt::format("chord::grouped::grouped_gemm_kernel<2, {}, {}, {}, {}, {}, 64, {}>", g.n, g.k,
                                  g.experts, c.block_m, c.slices, c.stages);
  p.threads = 128 * (1 + heuristics::kGroupedConsumers);
  p.dynamic_smem = static_cast<uint32_t>(heuristics::grouped_dynamic_smem(g, c));
  return p;
}

KernelProgram decode_program(const jit::Descriptor& d) {
  const std::string what = jit::to_string(d);
  const IndexedShape s{IndexedLayout::kMma, d[0], d[1], static_cast<int>(d[2])};
  const IndexedDecodeConfig c{static_cast<int>(d[3]), static_cast<int>(d[4])};
  if (d[2] != s.experts || d[3] != c.block_m || d[4] != c.depth) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: values out of the kernel's range", what);
  }
  if (const std::string why = heuristics::indexed_decode_config_error(s, c); !why.empty()) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: {}", what, why);
  }
  KernelProgram p;
  p.header = "indexed/decode.cuh";
  p.name_expression =
      fmt::format("chord::indexed::indexed_decode_kernel<{}, {}, {}, {}, {}>", s.n, s.k, s.experts, c.block_m, c.depth);
  p.threads = heuristics::kIndexedDecodeThreads;
  return p;
}

// Kimi K2 EP8 and TP8 shapes at typical step sizes.
std::vector<jit::Descriptor> pack_examples(Arch arch) {
  return {indexed_pack_descriptor(arch, IndexedLayout::kWgmma, 4096, 7168),
          indexed_pack_descriptor(arch, IndexedLayout::kMma, 7168, 2048)};
}

std::vector<jit::Descriptor> prefill_examples(Arch arch) {
  std::vector<jit::Descriptor> out;
  const IndexedShape shapes[] = {{IndexedLayout::kWgmma, 4096, 7168, 48}, {IndexedLayout::kWgmma, 512, 7168, 384}};
  for (const IndexedShape& s : shapes) {
    const int bm = heuristics::select_indexed_block_m(s, 4096);
    out.push_back(indexed_prefill_descriptor(arch, s, heuristics::select_indexed_prefill(s, bm, 4096)));
  }
  return out;
}

std::vector<jit::Descriptor> decode_examples(Arch arch) {
  const IndexedShape s{IndexedLayout::kMma, 7168, 2048, 48};
  return {indexed_decode_descriptor(arch, s, heuristics::select_indexed_decode(s, 8)),
          indexed_decode_descriptor(arch, s, heuristics::select_indexed_decode(s, 24))};
}

void check_weight(const char* op, const chord_indexed_weight_t* w) {
  check_w4a16_weight(op, w, "indexed_pack", indexed_weight_tag);
  checked_layout(w->layout, op);
  check_shape(op, {static_cast<IndexedLayout>(w->layout), w->n, w->k, w->num_experts});
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

const KernelFamily kIndexedPackFamily{kPackSchema, pack_program, pack_examples};
const KernelFamily kIndexedPrefillFamily{kPrefillSchema, prefill_program, prefill_examples};
const KernelFamily kIndexedDecodeFamily{kDecodeSchema, decode_program, decode_examples};

uint64_t indexed_weight_tag(const chord_indexed_weight_t& w) {
  const uint64_t fields[] = {0x1D3Eull /* family */,
                             static_cast<uint64_t>(w.layout),
                             static_cast<uint64_t>(w.num_experts),
                             static_cast<uint64_t>(w.n),
                             static_cast<uint64_t>(w.k),
                             reinterpret_cast<uint64_t>(w.packed),
                             reinterpret_cast<uint64_t>(w.scale)};
  return XXH3_64bits(fields, sizeof(fields));
}

jit::Descriptor indexed_pack_descriptor(Arch arch, IndexedLayout layout, int64_t n, int64_t k) {
  return jit::Descriptor(kPackSchema, arch, {static_cast<int64_t>(layout), n, k});
}

jit::Descriptor indexed_prefill_descriptor(Arch arch, const IndexedShape& s, const GroupedConfig& c) {
  return jit::Descriptor(kPrefillSchema, arch, {s.n, s.k, s.experts, c.block_m, c.slices, c.stages});
}

jit::Descriptor indexed_decode_descriptor(Arch arch, const IndexedShape& s, const IndexedDecodeConfig& c) {
  return jit::Descriptor(kDecodeSchema, arch, {s.n, s.k, s.experts, c.block_m, c.depth});
}

}  // namespace chordrt::ops

namespace chordrt {

void indexed_weight_sizes(int32_t layout, int32_t num_experts, int32_t n, int32_t k, size_t* packed_bytes,
                          size_t* scale_bytes) {
  constexpr const char* op = "indexed_weight_sizes";
  if (packed_bytes) *packed_bytes = 0;
  if (scale_bytes) *scale_bytes = 0;
  const auto l = ops::checked_layout(layout, op);
  ops::check_shape(op, {l, n, k, num_experts});
  ops::w4a16_sizes(num_experts, n, k, packed_bytes, scale_bytes);
}

chord_indexed_weight_t indexed_pack(const chord_indexed_pack_args_t& a, CUstream stream) {
  size_t need_packed = 0, need_scale = 0;
  if (ops::w4a16_scheme_served(a.bits, a.group_size, a.symmetric, a.scale_is_bf16)) {
    indexed_weight_sizes(a.layout, a.num_experts, a.n, a.k, &need_packed, &need_scale);
  }
  const auto layout = static_cast<heuristics::IndexedLayout>(a.layout);
  ops::launch_w4a16_pack(
      "indexed_pack", "indexed", a, need_packed, need_scale,
      [&](Arch arch) { return ops::indexed_pack_descriptor(arch, layout, a.n, a.k); }, stream);
  return ops::w4a16_packed_weight(a, &chord_indexed_weight_t::layout, a.layout, ops::indexed_weight_tag);
}

int32_t indexed_block_m(int32_t layout, int32_t num_experts, int32_t n, int32_t k, int64_t routed_rows,
                        int32_t profile) {
  constexpr const char* op = "indexed_block_m";
  const heuristics::IndexedShape s{ops::checked_layout(layout, op), n, k, num_experts};
  ops::check_shape(op, s);
  ops::require_range(routed_rows, 0, INT32_MAX, op, "routed_rows");
  ops::require_range(profile, 0, 2, op, "profile");
  return heuristics::select_indexed_block_m(s, routed_rows, static_cast<heuristics::IndexedProfile>(profile));
}

void indexed_gemm(const chord_indexed_args_t& a, CUstream stream) {
  constexpr const char* op = "indexed_gemm";
  ops::check_weight(op, a.weight);
  const chord_indexed_weight_t& w = *a.weight;
  const auto layout = static_cast<heuristics::IndexedLayout>(w.layout);
  const heuristics::IndexedShape s{layout, w.n, w.k, w.num_experts};
  ops::require_range(a.top_k, 1, ops::kMaxTopK, op, "top_k");
  ops::require_range(a.num_tokens, 0, (INT32_MAX - 1) / a.top_k, op, "num_tokens");
  if (layout == heuristics::IndexedLayout::kWgmma) {
    if (a.block_m < 8 || a.block_m > 256 || a.block_m % 8 != 0) {
      throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: the wgmma layout serves block_m 8..256 in steps of 8, got {}", op,
                  a.block_m);
    }
  } else if (const std::string why = heuristics::indexed_decode_config_error(s, {a.block_m, 1}); !why.empty()) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: {}", op, why);
  }
  ops::require_range(a.sorted_token_ids_capacity, 0, INT32_MAX, op, "sorted_token_ids_capacity");
  ops::require_range(a.expert_ids_capacity, 0, INT32_MAX, op, "expert_ids_capacity");
  ops::require_range(a.validate, 0, 1, op, "validate");
  const int64_t routes = a.num_tokens * a.top_k;
  if (routes == 0) return;
  ops::require_pointer(a.a, op, "a", 16);
  ops::require_pointer(a.sorted_token_ids, op, "sorted_token_ids", 4);
  ops::require_pointer(a.expert_ids, op, "expert_ids", 4);
  ops::require_pointer(a.num_tokens_post_padded, op, "num_tokens_post_padded", 4);
  ops::require_pointer(a.out, op, "out", 16);
  if (a.validate) ops::validate_routing(op, a, routes, w.num_experts, stream);

  // Blocks the kernels may visit: what both buffers hold (the device count is clamped to it).
  const int64_t capacity_blocks = std::min(a.sorted_token_ids_capacity / a.block_m, a.expert_ids_capacity);
  if (capacity_blocks == 0) return;
  const ops::IndexedRoutingArg routing{a.a,
                                       a.sorted_token_ids,
                                       a.expert_ids,
                                       a.num_tokens_post_padded,
                                       a.top_k,
                                       static_cast<int32_t>(routes),
                                       static_cast<int32_t>(capacity_blocks)};
  JitRuntime& rt = JitRuntime::global();
  const ContextState& ctx = rt.context_for(stream);
  if (layout == heuristics::IndexedLayout::kWgmma) {
    const heuristics::GroupedConfig c = heuristics::select_indexed_prefill(s, a.block_m, routes, ctx.facts);
    if (const std::string why = heuristics::grouped_config_error(
            {heuristics::GroupedMode::kIndexed, w.n, w.k, w.num_experts}, c, ctx.facts);
        !why.empty()) {
      throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: block_m {}: {}", op, a.block_m, why);
    }
    const LoadedKernel& kernel = rt.kernel(ops::indexed_prefill_descriptor(ctx.facts.arch, s, c), ctx, stream);
    const CUtensorMap unused_map{};  // the gathering mode loads activations itself
    const int32_t* no_rows = nullptr;
    const int32_t zero = 0;
    const int64_t tiles = capacity_blocks * (w.n / (128 * c.slices));
    const uint32_t grid = static_cast<uint32_t>(std::min<int64_t>(tiles, ctx.facts.sm_count));
    const void* args[] = {&unused_map, &w.packed, &w.scale, &no_rows, &zero, &routing, &a.out};
    launch(ctx, kernel, {grid, 1, 1}, stream, const_cast<void**>(args));
  } else {
    const heuristics::IndexedDecodeConfig c = heuristics::select_indexed_decode(s, a.block_m);
    const LoadedKernel& kernel = rt.kernel(ops::indexed_decode_descriptor(ctx.facts.arch, s, c), ctx, stream);
    const void* args[] = {&w.packed, &w.scale, &routing, &a.out};
    // Slots per row range: about two waves of 4 CTAs per SM, at most one per block.
    const int64_t ranges = w.n / heuristics::kIndexedDecodeRows;
    const int64_t slots = std::clamp<int64_t>((8 * ctx.facts.sm_count + ranges - 1) / ranges, 1, capacity_blocks);
    const int64_t ctas = slots * ranges;
    launch(ctx, kernel, {static_cast<uint32_t>(ctas), 1, 1}, stream, const_cast<void**>(args));
  }
}

}  // namespace chordrt

namespace chordrt::ops {

// EP or TP: both layouts' packers and GEMMs of both projections, for steps of 1..128 tokens on the
// decode layout and 64..64K tokens on the prefill layout, plus moe_align at every block size the
// heuristic picks for them. Routed rows on this GPU: tokens * top_k / EP.
void plan_indexed(const ModelPlanInput& in, PlanBuilder& plan) {
  const MoeModelShape& m = in.model;
  const Deployment& dep = in.deployment;
  if (m.moe_intermediate <= 0 || m.weight_format != "int4") return;
  using heuristics::IndexedLayout;
  const int experts = m.num_experts / dep.expert_parallel;
  const int64_t inter = m.moe_intermediate / dep.tensor_parallel;
  const Arch arch = in.facts.arch;
  const std::pair<int64_t, int64_t> projections[] = {{2 * inter, m.hidden}, {m.hidden, inter}};  // (N, K)
  for (const auto& [n, k] : projections) {
    for (const IndexedLayout layout : {IndexedLayout::kMma, IndexedLayout::kWgmma}) {
      const heuristics::IndexedShape s{layout, n, k, experts};
      if (!heuristics::indexed_shape_error(s).empty()) continue;
      plan.add(indexed_pack_descriptor(arch, layout, n, k));
      const bool decode = layout == IndexedLayout::kMma;
      for (int64_t tokens = decode ? 1 : 64; tokens <= (decode ? 128 : 65536);
           tokens = decode ? tokens + 1 : tokens * 2) {
        const int64_t rows = std::max<int64_t>(1, tokens * m.top_k / dep.expert_parallel);
        const int bm = heuristics::select_indexed_block_m(s, rows);
        for (const MoeAlignKey& a : moe_align_keys(m.num_experts, bm, dep.expert_parallel > 1, in.facts)) {
          plan.add(MoeAlignFamily::descriptor(arch, a));
        }
        if (decode) {
          plan.add(indexed_decode_descriptor(arch, s, heuristics::select_indexed_decode(s, bm)));
        } else {
          plan.add(indexed_prefill_descriptor(arch, s, heuristics::select_indexed_prefill(s, bm, rows, in.facts)));
        }
      }
    }
  }
}

}  // namespace chordrt::ops
