// W4A16 grouped MoE GEMMs: pack (checkpoint -> mode layout), contiguous and masked dispatch.
//   validate -> descriptor (shape + heuristics config) -> kernel -> tensor map of A -> launch.
#include "chordrt/chordrt.hpp"  // TEMPORARY until the family takes its C args struct
#include "runtime/ops/grouped.hpp"

#include <xxhash.h>

#include <array>

#include "runtime/driver.hpp"
#include "runtime/env_config.hpp"
#include "runtime/jit_runtime.hpp"
#include "runtime/launch.hpp"
#include "runtime/ops/indexed_routing.hpp"
#include "runtime/ops/validate.hpp"
#include "runtime/ops/w4a16_weight.hpp"

namespace chordrt::ops {

namespace {

using heuristics::GroupedConfig;
using heuristics::GroupedMode;
using heuristics::GroupedShape;

constexpr jit::FieldSpec kPackFields[] = {{"mode", INT64_MIN, INT64_MAX}, {"n", INT64_MIN, INT64_MAX}, {"k", INT64_MIN, INT64_MAX}};
constexpr jit::FamilySchema kPackSchema{"grouped.pack", kPackFields};
constexpr jit::FieldSpec kGemmFields[] = {{"mode", INT64_MIN, INT64_MAX}, {"n", INT64_MIN, INT64_MAX}, {"k", INT64_MIN, INT64_MAX}, {"experts", INT64_MIN, INT64_MAX}, {"block_m", INT64_MIN, INT64_MAX}, {"slices", INT64_MIN, INT64_MAX}, {"stages", INT64_MIN, INT64_MAX}};
constexpr jit::FamilySchema kGemmSchema{"grouped.gemm", kGemmFields};

const char* mode_name(GroupedMode m) { return m == GroupedMode::kContiguous ? "contiguous" : "masked"; }

GroupedMode checked_mode(int64_t v, const std::string& what) {
  if (v != 0 && v != 1) throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: mode must be 0 or 1, got {}", what, v);
  return static_cast<GroupedMode>(v);
}

KernelProgram pack_program(const jit::Descriptor& d) {
  const GroupedMode mode = checked_mode(d[0], jit::to_string(d));
  const int64_t n = d[1], k = d[2], bk = heuristics::grouped_block_k(mode);
  if (n < 64 || n % 64 != 0 || n > (1 << 20) || k < bk || k % bk != 0 || k > (1 << 20)) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: N must be a multiple of 64 and K of {}", jit::to_string(d), bk);
  }
  KernelProgram p;
  p.header = "grouped/pack.cuh";
  p.name_expression = fmt::format("chord::grouped::pack_kernel<{}, {}, {}>", n, k, bk);
  p.threads = kPackThreads;
  return p;
}

GroupedShape shape_of(const jit::Descriptor& d) {
  return {checked_mode(d[0], jit::to_string(d)), d[1], d[2], static_cast<int>(d[3])};
}

KernelProgram gemm_program(const jit::Descriptor& d) {
  const GroupedShape s = shape_of(d);
  const GroupedConfig c{static_cast<int>(d[4]), static_cast<int>(d[5]), static_cast<int>(d[6])};
  if (d[3] < 1 || d[3] > heuristics::kGroupedMaxExperts || d[4] != c.block_m || d[5] != c.slices || d[6] != c.stages) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: values out of the kernel's range", jit::to_string(d));
  }
  if (const std::string why = heuristics::grouped_config_error(s, c); !why.empty()) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: {}", jit::to_string(d), why);
  }
  KernelProgram p;
  p.header = "grouped/gemm.cuh";
  p.name_expression =
      fmt::format("chord::grouped::grouped_gemm_kernel<{}, {}, {}, {}, {}, {}, {}, {}>", static_cast<int>(s.mode), s.n,
                  s.k, s.experts, c.block_m, c.slices, heuristics::grouped_block_k(s.mode), c.stages);
  p.threads = 128 * (1 + heuristics::kGroupedConsumers);
  p.dynamic_smem = static_cast<uint32_t>(heuristics::grouped_dynamic_smem(s, c));
  return p;
}

// Kimi K2 EP8 gate_up and down in both modes at typical hints, and a small odd shape.
struct Example {
  GroupedShape shape;
  int64_t rows_hint;
};
const Example kExamples[] = {{{GroupedMode::kContiguous, 4096, 7168, 48}, 48 * 256},
                             {{GroupedMode::kContiguous, 7168, 2048, 48}, 48 * 128},
                             {{GroupedMode::kMasked, 4096, 7168, 48}, 16},
                             {{GroupedMode::kMasked, 7168, 2048, 12}, 64},
                             {{GroupedMode::kMasked, 384, 640, 3}, 200}};

std::vector<jit::Descriptor> pack_examples(Arch arch) {
  return {grouped_pack_descriptor(arch, GroupedMode::kContiguous, 4096, 7168),
          grouped_pack_descriptor(arch, GroupedMode::kMasked, 7168, 2048)};
}

std::vector<jit::Descriptor> gemm_examples(Arch arch) {
  std::vector<jit::Descriptor> out;
  for (const Example& e : kExamples) {
    out.push_back(grouped_gemm_descriptor(arch, e.shape, heuristics::select_grouped(e.shape, e.rows_hint)));
  }
  return out;
}

void check_shape(const char* op, int64_t mode, int64_t experts, int64_t n, int64_t k) {
  const GroupedMode m = checked_mode(mode, op);
  require_range(experts, 1, heuristics::kGroupedMaxExperts, op, "num_experts");
  require_range(n, 128, 1 << 20, op, "n");
  require_range(k, 64, 1 << 20, op, "k");
  const int64_t bk = heuristics::grouped_block_k(m);
  if (n % 128 != 0 || k % bk != 0) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT,
                "{}: {} mode needs N a multiple of 128 and K a multiple of {}, got {} and {}", op, mode_name(m), bk, n,
                k);
  }
}

// A weight given to a GEMM of `mode`: produced by grouped_pack, for this mode.
void check_weight(const char* op, const chord_grouped_weight_t* w, GroupedMode mode) {
  check_w4a16_weight(op, w, "grouped_pack", grouped_weight_tag);
  if (w->mode != static_cast<int32_t>(mode)) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT,
                "{}: weight was packed for {} mode (BLOCK_K {}); the {} GEMM needs a weight packed with mode {}", op,
                w->mode == 0 ? "contiguous" : "masked", w->mode == 0 ? 64 : 128, mode_name(mode), mode_name(mode));
  }
  check_shape(op, w->mode, w->num_experts, w->n, w->k);
}

// Tensor maps of A, encoded once per (address, rows, K, box rows) and kept per thread: encoding costs
// host time on every call otherwise (and the same activation buffers recur every step).
const CUtensorMap& activation_map(const void* a, int64_t rows, int64_t k, int box_rows) {
  struct Entry {
    const void* a = nullptr;
    int64_t rows = 0, k = 0;
    int box_rows = 0;
    CUtensorMap map{};
  };
  thread_local std::array<Entry, 16> entries;
  thread_local size_t next = 0;
  for (const Entry& e : entries) {
    if (e.a == a && e.rows == rows && e.k == k && e.box_rows == box_rows) return e.map;
  }
  Entry& e = entries[next++ % entries.size()];
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(k) * 2};
  const cuuint32_t box[2] = {64, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  check_cuda(require_driver().cuTensorMapEncodeTiled(&e.map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(a),
                                                     dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                                     CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
             "cuTensorMapEncodeTiled (grouped GEMM activations)");
  e.a = a;
  e.rows = rows;
  e.k = k;
  e.box_rows = box_rows;
  return e.map;
}

GroupedConfig configured(const char* op, const GroupedShape& s, int64_t rows_hint, const ContextState& ctx) {
  GroupedConfig c = heuristics::select_grouped(s, rows_hint, ctx.facts);
  if (const std::string& spec = env_config().grouped_override; !spec.empty()) {
    if (const std::string err = heuristics::apply_grouped_override(spec, c); !err.empty()) {
      throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: CHORD_GROUPED_CONFIG: {}", op, err);
    }
    if (const std::string why = heuristics::grouped_config_error(s, c, ctx.facts); !why.empty()) {
      throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: CHORD_GROUPED_CONFIG: {}", op, why);
    }
  }
  return c;
}

void run_gemm(const char* op, GroupedMode mode, const void* a, int64_t rows, int32_t rows_param, int64_t rows_hint,
              const chord_grouped_weight_t& w, const int32_t* routing, void* out, CUstream stream) {
  const GroupedShape s{mode, w.n, w.k, w.num_experts};
  JitRuntime& rt = JitRuntime::global();
  const ContextState& ctx = rt.context_for(stream);
  const GroupedConfig c = configured(op, s, rows_hint, ctx);
  const LoadedKernel& kernel = rt.kernel(grouped_gemm_descriptor(ctx.facts.arch, s, c), ctx, stream);
  const CUtensorMap& map = activation_map(a, rows, w.k, c.block_m);
  int64_t tiles = static_cast<int64_t>(ctx.facts.sm_count);
  if (mode == GroupedMode::kContiguous) tiles = (rows + c.block_m - 1) / c.block_m * (w.n / (128 * c.slices));
  const uint32_t grid = static_cast<uint32_t>(std::min<int64_t>(tiles, ctx.facts.sm_count));
  const IndexedRoutingArg unused{};  // this kernel's indexed mode only
  const void* args[] = {&map, &w.packed, &w.scale, &routing, &rows_param, &unused, &out};
  launch(ctx, kernel, {grid, 1, 1}, stream, const_cast<void**>(args));
}

}  // namespace

const KernelFamily kGroupedPackFamily{kPackSchema, pack_program, pack_examples};
const KernelFamily kGroupedGemmFamily{kGemmSchema, gemm_program, gemm_examples};

uint64_t grouped_weight_tag(const chord_grouped_weight_t& w) {
  const uint64_t fields[] = {static_cast<uint64_t>(w.mode),        static_cast<uint64_t>(w.num_experts),
                             static_cast<uint64_t>(w.n),           static_cast<uint64_t>(w.k),
                             reinterpret_cast<uint64_t>(w.packed), reinterpret_cast<uint64_t>(w.scale)};
  return XXH3_64bits(fields, sizeof(fields));
}

jit::Descriptor grouped_pack_descriptor(Arch arch, GroupedMode mode, int64_t n, int64_t k) {
  return jit::Descriptor(kPackSchema, arch, {static_cast<int64_t>(mode), n, k});
}

jit::Descriptor grouped_gemm_descriptor(Arch arch, const GroupedShape& s, const GroupedConfig& c) {
  return jit::Descriptor(kGemmSchema, arch,
                         {static_cast<int64_t>(s.mode), s.n, s.k, s.experts, c.block_m, c.slices, c.stages});
}

}  // namespace chordrt::ops

namespace chordrt {

void grouped_weight_sizes(int32_t mode, int32_t num_experts, int32_t n, int32_t k, size_t* packed_bytes,
                          size_t* scale_bytes) {
  constexpr const char* op = "grouped_weight_sizes";
  if (packed_bytes) *packed_bytes = 0;
  if (scale_bytes) *scale_bytes = 0;
  ops::check_shape(op, mode, num_experts, n, k);
  ops::w4a16_sizes(num_experts, n, k, packed_bytes, scale_bytes);
}

chord_grouped_weight_t grouped_pack(const chord_grouped_pack_args_t& a, CUstream stream) {
  size_t need_packed = 0, need_scale = 0;
  if (ops::w4a16_scheme_served(a.bits, a.group_size, a.symmetric, a.scale_is_bf16)) {
    grouped_weight_sizes(a.mode, a.num_experts, a.n, a.k, &need_packed, &need_scale);
  }
  const auto mode = static_cast<heuristics::GroupedMode>(a.mode);
  ops::launch_w4a16_pack(
      "grouped_pack", "grouped", a, need_packed, need_scale,
      [&](Arch arch) { return ops::grouped_pack_descriptor(arch, mode, a.n, a.k); }, stream);
  return ops::w4a16_packed_weight(a, &chord_grouped_weight_t::mode, a.mode, ops::grouped_weight_tag);
}

void grouped_contiguous(const void* a, int64_t m, const chord_grouped_weight_t* w, const int32_t* m_indices, void* out,
                        CUstream stream) {
  constexpr const char* op = "grouped_contiguous";
  ops::check_weight(op, w, heuristics::GroupedMode::kContiguous);
  ops::require_range(m, 0, INT32_MAX, op, "m");
  if (m == 0) return;
  ops::require_pointer(a, op, "a", 16);
  ops::require_pointer(m_indices, op, "m_indices", 4);
  ops::require_pointer(out, op, "out", 16);
  ops::run_gemm(op, heuristics::GroupedMode::kContiguous, a, m, static_cast<int32_t>(m), m, *w, m_indices, out, stream);
}

void grouped_masked(const void* a, int32_t max_m, const chord_grouped_weight_t* w, const int32_t* masked_m,
                    int32_t expected_m, void* out, CUstream stream) {
  constexpr const char* op = "grouped_masked";
  ops::check_weight(op, w, heuristics::GroupedMode::kMasked);
  ops::require_range(max_m, 1, INT32_MAX / w->num_experts, op, "max_m");
  ops::require_range(expected_m, 1, INT32_MAX, op, "expected_m");
  ops::require_pointer(a, op, "a", 16);
  ops::require_pointer(masked_m, op, "masked_m", 4);
  ops::require_pointer(out, op, "out", 16);
  ops::run_gemm(op, heuristics::GroupedMode::kMasked, a, static_cast<int64_t>(max_m) * w->num_experts, max_m,
                std::min(expected_m, max_m), *w, masked_m, out, stream);
}

}  // namespace chordrt

namespace chordrt::ops {

// Under expert parallelism: packers and GEMMs of both projections in both modes, for prefill steps of
// 128 rows per expert up to 64K rows and decode batches of 1..256 expected tokens per expert (the
// heuristics map those onto a few configurations).
void plan_grouped(const ModelPlanInput& in, PlanBuilder& plan) {
  const MoeModelShape& m = in.model;
  if (m.moe_intermediate <= 0 || m.weight_format != "int4" || in.deployment.expert_parallel <= 1) return;
  using heuristics::GroupedMode;
  const int experts = m.num_experts / in.deployment.expert_parallel;
  const int64_t inter = m.moe_intermediate / in.deployment.tensor_parallel;
  const Arch arch = in.facts.arch;
  const std::pair<int64_t, int64_t> projections[] = {{2 * inter, m.hidden}, {m.hidden, inter}};  // (N, K)
  for (const GroupedMode mode : {GroupedMode::kContiguous, GroupedMode::kMasked}) {
    for (const auto& [n, k] : projections) {
      const heuristics::GroupedShape s{mode, n, k, experts};
      if (!heuristics::grouped_config_error(s, heuristics::select_grouped(s, 1, in.facts), in.facts).empty()) continue;
      plan.add(grouped_pack_descriptor(arch, mode, n, k));
      if (mode == GroupedMode::kContiguous) {
        for (int64_t rows = 128LL * experts; rows <= 65536; rows *= 2) {
          plan.add(grouped_gemm_descriptor(arch, s, heuristics::select_grouped(s, rows, in.facts)));
        }
      } else {
        for (int64_t expected = 1; expected <= 256; ++expected) {
          plan.add(grouped_gemm_descriptor(arch, s, heuristics::select_grouped(s, expected, in.facts)));
        }
      }
    }
  }
}

}  // namespace chordrt::ops
