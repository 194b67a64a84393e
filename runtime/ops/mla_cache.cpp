// mla_cache_write: validate -> descriptor -> kernel -> launch (kernels_src/mla/cache_write.cuh).
#include "chordrt/chordrt.hpp"  // TEMPORARY until the family takes its C args struct
#include "runtime/ops/mla_cache.hpp"

#include <algorithm>

#include "heuristics/sparse_mla.hpp"
#include "runtime/jit_runtime.hpp"
#include "runtime/launch.hpp"
#include "runtime/ops/validate.hpp"

namespace chordrt::ops {

namespace {

constexpr jit::FieldSpec kFields[] = {{"format", INT64_MIN, INT64_MAX}, {"rope_dims", INT64_MIN, INT64_MAX}, {"warps", INT64_MIN, INT64_MAX}};
constexpr jit::FamilySchema kSchema{"mla.cache_write", kFields};
// One warp per token row; 4 rows per CTA keeps decode-sized batches (1..256 rows) spread over many SMs.
constexpr int kWarps = 4;
// Rows stride over the grid past this many CTAs (enough to fill an H200 many times over).
constexpr int64_t kMaxBlocks = 1 << 16;

bool known_format(int64_t format) { return format == CHORD_MLA_CACHE_FP8_DS_MLA || format == CHORD_MLA_CACHE_BF16; }

KernelProgram program(const jit::Descriptor& d) {
  const int64_t format = d[0], rope_dims = d[1], warps = d[2];
  if (!known_format(format) || (rope_dims != 0 && rope_dims != 64) || warps < 1 || warps > 32) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: values out of the kernel's range", jit::to_string(d));
  }
  KernelProgram p;
  p.header = "mla/cache_write.cuh";
  p.name_expression = fmt::format("chord::mla::cache_write_kernel<{}, {}, {}>", format, rope_dims, warps);
  p.threads = static_cast<uint32_t>(32 * warps);
  return p;
}

std::vector<jit::Descriptor> examples(Arch arch) {
  std::vector<jit::Descriptor> out;
  for (const auto format : {CHORD_MLA_CACHE_FP8_DS_MLA, CHORD_MLA_CACHE_BF16}) {
    for (const int rope : {64, 0}) out.push_back(mla_cache_write_descriptor(arch, format, rope));
  }
  return out;
}

}  // namespace

const KernelFamily kMlaCacheWriteFamily{kSchema, program, examples};

jit::Descriptor mla_cache_write_descriptor(Arch arch, chord_mla_cache_format_t format, int rope_dims) {
  return jit::Descriptor(kSchema, arch, {format, rope_dims, kWarps});
}

}  // namespace chordrt::ops

namespace chordrt {

size_t mla_cache_record_bytes(int32_t format, int32_t rope_dims) {
  return heuristics::mla_record_bytes(format, rope_dims);
}

void mla_cache_write(const chord_mla_cache_write_args_t& a, CUstream stream) {
  constexpr const char* op = "mla_cache_write";
  if (!ops::known_format(a.format)) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: format must be {} (fp8_ds_mla) or {} (bf16), got {}", op,
                static_cast<int>(CHORD_MLA_CACHE_FP8_DS_MLA), static_cast<int>(CHORD_MLA_CACHE_BF16), a.format);
  }
  if (a.rope_dims != 0 && a.rope_dims != 64) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: rope_dims must be 64 or 0 (NoPE), got {}", op, a.rope_dims);
  }
  const auto record = static_cast<int64_t>(heuristics::mla_record_bytes(a.format, a.rope_dims));
  const int64_t row_bytes = 2 * (512 + a.rope_dims);
  ops::require_range(a.num_tokens, 0, INT64_MAX / row_bytes, op, "num_tokens");
  ops::require_range(a.num_slots, 1, INT64_MAX / record, op, "num_slots");
  if (a.num_tokens == 0) return;  // nothing is read or written: empty tensors may have null pointers
  ops::require_pointer(a.kv, op, "kv", 16);
  ops::require_pointer(a.slot_mapping, op, "slot_mapping", alignof(int64_t));
  ops::require_pointer(a.cache, op, "cache", 16);
  JitRuntime& rt = JitRuntime::global();
  const ContextState& ctx = rt.context_for(stream);
  const auto format = static_cast<chord_mla_cache_format_t>(a.format);
  const LoadedKernel& k = rt.kernel(ops::mla_cache_write_descriptor(ctx.facts.arch, format, a.rope_dims), ctx, stream);
  const int64_t blocks = std::min<int64_t>((a.num_tokens + ops::kWarps - 1) / ops::kWarps, ops::kMaxBlocks);
  const void* args[] = {&a.kv, &a.slot_mapping, &a.cache, &a.num_tokens, &a.num_slots};
  launch(ctx, k, {static_cast<uint32_t>(blocks), 1, 1}, stream, const_cast<void**>(args));
}

}  // namespace chordrt
