// W4A16 grouped MoE GEMMs: contiguous (prefill) and masked (decode) dispatch.
//   validate -> key (heuristics + CHORD_GROUPED_CONFIG) -> kernel -> tensor map of A -> launch.
#include "runtime/ops/grouped.hpp"

#include <algorithm>

#include "kernels_src/indexed/params.cuh"
#include "runtime/core/math.hpp"
#include "runtime/driver.hpp"
#include "runtime/env_config.hpp"
#include "runtime/launch.hpp"
#include "runtime/ops/resolve_config.hpp"
#include "runtime/ops/validate.hpp"
#include "runtime/ops/w4a16.hpp"
#include "runtime/tensor_map.hpp"

namespace chordrt::ops {

namespace {

namespace g = chord::grouped;
using heuristics::GroupedConfig;
using heuristics::GroupedMode;
using heuristics::GroupedShape;

GroupedShape shape_of(const GroupedGemmKey& k) { return {static_cast<GroupedMode>(k.mode), k.n, k.k, k.experts}; }

// The tensor map of A: [rows][k] BF16, boxes of 64 K-values x box_rows rows.
const CUtensorMap& activation_map(const void* a, int64_t rows, int64_t k, int box_rows) {
  TiledTensorMapSpec spec;
  spec.type = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  spec.rank = 2;
  spec.address = a;
  spec.dims = {static_cast<uint64_t>(k), static_cast<uint64_t>(rows), 1};
  spec.strides = {static_cast<uint64_t>(k) * 2, 0};
  spec.box = {64, static_cast<uint32_t>(box_rows), 1};
  return tiled_tensor_map(spec, "grouped GEMM activations");
}

// The widest tile whose stream-K partials chord_grouped_workspace_size covers.
constexpr int kWorkspaceBlockM = 128;
constexpr int kWorkspaceBlockN = g::block_n(g::kMaxSlices, g::kMinConsumers);

// rows: rows of A (contiguous m, masked G * max_m); rows_param: the kernel's `rows` (m, or max_m);
// workspace: stream-K scratch (null: none) of workspace_bytes, aligned (checked by the caller).
void run_gemm(const char* op, GroupedMode mode, const void* a, int64_t rows, int32_t rows_param, int64_t rows_hint,
              const chord_w4a16_weight_t& w, const int32_t* routing, void* out, void* workspace,
              int64_t workspace_bytes, CUstream stream) {
  const GroupedShape s{mode, w.n, w.k, w.num_experts};
  check_override_syntax<GroupedConfig>(op, "CHORD_GROUPED_CONFIG", env_config().grouped_override,
                                       heuristics::apply_grouped_override);
  const ContextState& ctx = JitRuntime::global().context_for(stream);
  // Held to its documented size whether or not this call's kernel uses it (as the indexed GEMM's).
  if (const auto need = static_cast<int64_t>(grouped_workspace_size(ctx.facts.sm_count));
      workspace && workspace_bytes < need) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT,
                "{}: workspace_bytes must be at least chord_grouped_workspace_size({} SMs) = {}, got {}", op,
                ctx.facts.sm_count, need, workspace_bytes);
  }
  const GroupedGemmKey key =
      grouped_gemm_key(s, rows_hint, ctx.facts, env_config().grouped_override, op, workspace != nullptr);
  const LoadedKernel& kernel = GroupedGemmFamily::kernel(key, ctx, stream);
  // A dry run has no driver to encode with (and launches nothing).
  const CUtensorMap map = kernel.dry_run ? CUtensorMap{} : activation_map(a, rows, w.k, key.block_m);
  int64_t tiles = ctx.facts.sm_count;
  if (mode == GroupedMode::kContiguous) {
    tiles = ceil_div<int64_t>(rows, key.block_m) * (w.n / g::block_n(key.slices, key.consumers));
  }
  const auto grid = static_cast<uint32_t>(std::min<int64_t>(tiles, ctx.facts.sm_count));
  const chord::IndexedRouting unused{};  // the kernel's indexed mode only
  const chord::grouped::StreamWorkspace stream_ws =
      key.stream_k ? stream_k_workspace(workspace, grid, kernel.dry_run, stream) : chord::grouped::StreamWorkspace{};
  launch(ctx, kernel, {{grid, 1, 1}, stream}, map, w.packed, w.scale, routing, rows_param, unused, out, stream_ws);
}

}  // namespace

KernelProgram grouped_gemm_program(std::string_view family, const GroupedShape& s, const GroupedConfig& c) {
  if (const std::string why = heuristics::grouped_config_error(s, c); !why.empty()) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: {}", family, why);
  }
  KernelProgram p;
  p.header = "grouped/gemm.cuh";
  p.name_expression = fmt::format("chord::grouped::grouped_gemm_kernel<{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}>",
                                  static_cast<int>(s.mode), s.n, s.k, s.experts, c.block_m, c.slices,
                                  heuristics::grouped_block_k(s.mode), c.stages, c.consumers, c.ring, c.stream_k);
  p.threads = g::threads(c.consumers);
  p.dynamic_smem = static_cast<uint32_t>(heuristics::grouped_dynamic_smem(s, c));
  return p;
}

KernelProgram GroupedGemmFamily::program(const GroupedGemmKey& k) {
  return grouped_gemm_program(kName, shape_of(k), {k.block_m, k.slices, k.stages, k.consumers, k.ring, k.stream_k});
}

std::vector<GroupedGemmKey> GroupedGemmFamily::examples(const DeviceFacts& facts) {
  // Kimi K2 EP8 gate_up and down in both modes at typical hints, and a small odd shape.
  struct Example {
    GroupedShape shape;
    int64_t rows_hint;
  };
  const Example examples[] = {{{GroupedMode::kContiguous, 4096, 7168, 48}, 48 * 256},
                              {{GroupedMode::kContiguous, 7168, 2048, 48}, 48 * 128},
                              {{GroupedMode::kMasked, 4096, 7168, 48}, 16},
                              {{GroupedMode::kMasked, 7168, 2048, 12}, 64},
                              {{GroupedMode::kMasked, 384, 640, 3}, 200}};
  std::vector<GroupedGemmKey> out;
  for (const Example& e : examples) out.push_back(grouped_gemm_key(e.shape, e.rows_hint, facts));
  return out;
}

GroupedGemmKey grouped_gemm_key(const GroupedShape& s, int64_t rows_hint, const DeviceFacts& facts,
                                std::string_view override_spec, const char* op, bool stream_k_workspace) {
  const GroupedConfig c = resolve_config(
      op, "CHORD_GROUPED_CONFIG", std::string(override_spec),
      heuristics::select_grouped(s, rows_hint, facts, stream_k_workspace), heuristics::apply_grouped_override,
      [&](const GroupedConfig& cfg) {
        if (std::string why = heuristics::grouped_config_error(s, cfg, facts); !why.empty()) return why;
        if (cfg.stream_k != 0 && !stream_k_workspace) {
          return std::string("stream_k 1 needs the call's workspace (the args struct's workspace)");
        }
        if (cfg.stream_k != 0 &&
            (cfg.block_m > kWorkspaceBlockM || g::block_n(cfg.slices, cfg.consumers) > kWorkspaceBlockN)) {
          return fmt::format(
              "stream_k 1 with block_m {} and {} weight rows a tile: the workspace holds tiles of at most {} x {}",
              cfg.block_m, g::block_n(cfg.slices, cfg.consumers), kWorkspaceBlockM, kWorkspaceBlockN);
        }
        return std::string();
      });
  return {.mode = static_cast<int>(s.mode),
          .n = static_cast<int>(s.n),
          .k = static_cast<int>(s.k),
          .experts = s.experts,
          .block_m = c.block_m,
          .slices = c.slices,
          .stages = c.stages,
          .consumers = c.consumers,
          .ring = c.ring,
          .stream_k = c.stream_k};
}

chord::grouped::StreamWorkspace stream_k_workspace(void* workspace, uint32_t grid, bool dry_run, CUstream stream) {
  auto* base = static_cast<uint8_t*>(workspace);
  if (!dry_run) {
    check_cuda(require_driver().cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(base), 0,
                                                 static_cast<size_t>(grid) * g::kMaxConsumers, stream),
               "cuMemsetD32Async (stream-K flags)");
  }
  return {reinterpret_cast<int32_t*>(base), reinterpret_cast<float*>(base + g::stream_flags_bytes(grid))};
}

size_t grouped_workspace_size(int32_t num_sms) {
  if (num_sms < 1 || num_sms > 1024) return 0;
  return static_cast<size_t>(g::stream_workspace_bytes(num_sms, kWorkspaceBlockM, kWorkspaceBlockN));
}

void grouped_contiguous(const chord_grouped_contiguous_args_t& a, CUstream stream) {
  constexpr const char* op = "grouped_contiguous";
  const chord_w4a16_weight_t& w = check_w4a16_weight(op, a.weight, {W4a16Layout::kWgmmaK64},
                                                     "the contiguous GEMM needs a weight packed with layout WGMMA_K64");
  require_range(a.m, 0, INT32_MAX, op, "m");
  if (a.m == 0) return;  // nothing is read or written: empty tensors may have null pointers
  require_pointer(a.a, op, "a", 16);
  require_pointer(a.m_indices, op, "m_indices", 4);
  require_pointer(a.out, op, "out", 16);
  require_range(a.workspace_bytes, 0, INT64_MAX, op, "workspace_bytes");
  if (a.workspace) require_pointer(a.workspace, op, "workspace", 16);
  run_gemm(op, GroupedMode::kContiguous, a.a, a.m, static_cast<int32_t>(a.m), a.m, w, a.m_indices, a.out, a.workspace,
           a.workspace_bytes, stream);
}

void grouped_masked(const chord_grouped_masked_args_t& a, CUstream stream) {
  constexpr const char* op = "grouped_masked";
  const chord_w4a16_weight_t& w = check_w4a16_weight(op, a.weight, {W4a16Layout::kWgmmaK128},
                                                     "the masked GEMM needs a weight packed with layout WGMMA_K128");
  require_range(a.max_m, 1, INT32_MAX / w.num_experts, op, "max_m");
  require_range(a.expected_m, 1, INT32_MAX, op, "expected_m");
  require_pointer(a.a, op, "a", 16);
  require_pointer(a.masked_m, op, "masked_m", 4);
  require_pointer(a.out, op, "out", 16);
  require_range(a.workspace_bytes, 0, INT64_MAX, op, "workspace_bytes");
  if (a.workspace) require_pointer(a.workspace, op, "workspace", 16);
  run_gemm(op, GroupedMode::kMasked, a.a, static_cast<int64_t>(a.max_m) * w.num_experts, a.max_m,
           std::min(a.expected_m, a.max_m), w, a.masked_m, a.out, a.workspace, a.workspace_bytes, stream);
}

// Under expert parallelism: packers and GEMMs of both projections in both modes, for prefill steps of
// 128 rows per expert up to 64K rows and decode batches of 1..256 expected tokens per expert (the
// heuristics map those onto a few configurations).
void plan_grouped(const ModelPlanInput& in, PlanBuilder& plan) {
  const MoeModelShape& m = in.model;
  if (m.moe_intermediate <= 0 || m.weight_format != "int4" || in.deployment.expert_parallel <= 1) return;
  const int experts = m.num_experts / in.deployment.expert_parallel;
  const int64_t inter = m.moe_intermediate / in.deployment.tensor_parallel;
  const Arch arch = in.facts.arch;
  const std::pair<int64_t, int64_t> projections[] = {{2 * inter, m.hidden}, {m.hidden, inter}};  // (N, K)
  for (const GroupedMode mode : {GroupedMode::kContiguous, GroupedMode::kMasked}) {
    for (const auto& [n, k] : projections) {
      const GroupedShape s{mode, n, k, experts};
      if (!heuristics::grouped_config_error(s, heuristics::select_grouped(s, 1, in.facts), in.facts).empty()) continue;
      plan.add(W4a16PackFamily::descriptor(arch, w4a16_pack_key(g::layout_of_mode(static_cast<int>(mode)), n, k)));
      if (mode == GroupedMode::kContiguous) {
        for (int64_t rows = 128LL * experts; rows <= 65536; rows *= 2) {
          // Calls without and with a stream-K workspace.
          for (const bool workspace : {false, true}) {
            plan.add(
                GroupedGemmFamily::descriptor(arch, grouped_gemm_key(s, rows, in.facts, {}, "grouped", workspace)));
          }
        }
      } else {
        for (int64_t expected = 1; expected <= 256; ++expected) {
          plan.add(GroupedGemmFamily::descriptor(arch, grouped_gemm_key(s, expected, in.facts)));
        }
      }
    }
  }
}

}  // namespace chordrt::ops
