// silu_and_mul: validate -> descriptor -> kernel -> launch.
#include "heuristics/glue.hpp"
#include "runtime/jit_runtime.hpp"
#include "runtime/launch.hpp"
#include "runtime/ops/glue.hpp"
#include "runtime/ops/validate.hpp"

namespace chordrt::ops {

namespace {

constexpr std::string_view kFields[] = {"vec", "threads", "rows_per_cta"};
constexpr jit::FamilySchema kSchema{"glue.silu_and_mul", kFields};

KernelProgram program(const jit::Descriptor& d) {
  const int64_t vec = d[0], threads = d[1], rows_per_cta = d[2];
  if ((vec != 1 && vec != 2 && vec != 4 && vec != 8) || threads < 32 || threads > 1024 || threads % 32 != 0 ||
      rows_per_cta < 1 || threads * rows_per_cta > 1024) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: values out of the kernel's range", jit::to_string(d));
  }
  KernelProgram p;
  p.header = "glue/silu_and_mul.cuh";
  p.name_expression = fmt::format("chord::silu_and_mul_kernel<{}, {}, {}>", vec, threads, rows_per_cta);
  p.threads = static_cast<uint32_t>(threads * rows_per_cta);
  return p;
}

std::vector<jit::Descriptor> examples(jit::Arch arch) {
  return {silu_and_mul_descriptor(arch, 2048), silu_and_mul_descriptor(arch, 7)};
}

}  // namespace

const KernelFamily kSiluAndMulFamily{kSchema, program, examples};

jit::Descriptor silu_and_mul_descriptor(jit::Arch arch, int64_t intermediate) {
  const auto c = heuristics::select_rowwise(intermediate);
  return jit::Descriptor(kSchema, arch, {c.vec, c.threads, c.rows_per_cta});
}

}  // namespace chordrt::ops

namespace chordrt {

void silu_and_mul(const SiluAndMulArgs& a, CUstream stream) {
  constexpr const char* op = "silu_and_mul";
  ops::require_range(a.rows, 0, INT64_MAX / 4, op, "rows");
  ops::require_range(a.intermediate, 1, INT32_MAX, op, "intermediate");
  if (a.rows == 0) return;  // nothing is read or written: empty tensors may have null pointers
  const auto config = heuristics::select_rowwise(a.intermediate);
  // Vector accesses need the row starts aligned to the vector width.
  const unsigned align = 2u * static_cast<unsigned>(config.vec);
  ops::require_pointer(a.input, op, "input", align);
  ops::require_pointer(a.output, op, "output", align);
  JitRuntime& rt = JitRuntime::global();
  const ContextState& ctx = rt.context_for(stream);
  const jit::Descriptor d = ops::silu_and_mul_descriptor(ctx.facts.arch, a.intermediate);
  const LoadedKernel& k = rt.kernel(d, ctx, stream);
  const auto grid = heuristics::rowwise_grid(a.rows, a.intermediate, config);
  const void* args[] = {&a.input, &a.output, &a.rows, &a.intermediate};
  launch(ctx, k, {grid.x, grid.y, 1}, stream, const_cast<void**>(args));
}

}  // namespace chordrt
