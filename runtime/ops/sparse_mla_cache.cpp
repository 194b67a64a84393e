// mla_cache_write: validate -> key -> kernel -> launch (kernels_src/sparse_mla/cache_write.cuh).
#include <algorithm>

#include "runtime/core/math.hpp"
#include "runtime/launch.hpp"
#include "runtime/ops/sparse_mla.hpp"
#include "runtime/ops/validate.hpp"

namespace chordrt::ops {

namespace {

// Rows stride over the grid past this many CTAs (enough to fill an H200 many times over).
constexpr int64_t kMaxBlocks = 1 << 16;

}  // namespace

KernelProgram SparseMlaCacheWriteFamily::program(const K& k) {
  if (sm::record_layout(k.format, k.rope_dims).bytes == 0) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: rope_dims must be 64, or 0 on NoPE layers, got {}", kName,
                k.rope_dims);
  }
  KernelProgram p;
  p.header = "sparse_mla/cache_write.cuh";
  p.name_expression = fmt::format("chord::sparse_mla::cache_write_kernel<{}, {}, {}>", k.format, k.rope_dims, k.warps);
  p.threads = static_cast<uint32_t>(32 * k.warps);
  return p;
}

std::vector<SparseMlaCacheWriteKey> SparseMlaCacheWriteFamily::examples(const DeviceFacts&) {
  std::vector<K> out;
  for (const int format : {sm::kFp8DsMla, sm::kBf16}) {
    for (const int rope : {64, 0}) out.push_back(sparse_mla_cache_write_key(format, rope));
  }
  return out;
}

SparseMlaCacheWriteKey sparse_mla_cache_write_key(int format, int rope_dims) {
  return {format, rope_dims, sm::kCacheWriteWarps};
}

size_t mla_cache_record_bytes(int32_t format, int32_t rope_dims) {
  return static_cast<size_t>(sm::record_layout(format, rope_dims).bytes);
}

void mla_cache_write(const chord_mla_cache_write_args_t& a, CUstream stream) {
  constexpr const char* op = "mla_cache_write";
  if (a.format != sm::kFp8DsMla && a.format != sm::kBf16) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: format must be 0 (fp8_ds_mla) or 1 (bf16), got {}", op, a.format);
  }
  if (a.rope_dims != 0 && a.rope_dims != 64) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: rope_dims must be 64 or 0 (NoPE), got {}", op, a.rope_dims);
  }
  const int64_t record = sm::record_layout(a.format, a.rope_dims).bytes;
  const int64_t row_bytes = 2 * (sm::kNopeDims + a.rope_dims);
  require_range(a.num_tokens, 0, INT64_MAX / row_bytes, op, "num_tokens");
  require_range(a.num_slots, 1, INT64_MAX / record, op, "num_slots");
  if (a.num_tokens == 0) return;  // nothing is read or written: empty tensors may have null pointers
  require_pointer(a.kv, op, "kv", 16);
  require_pointer(a.slot_mapping, op, "slot_mapping", alignof(int64_t));
  require_pointer(a.cache, op, "cache", 16);
  const ContextState& ctx = JitRuntime::global().context_for(stream);
  const SparseMlaCacheWriteKey key = sparse_mla_cache_write_key(a.format, a.rope_dims);
  const LoadedKernel& k = SparseMlaCacheWriteFamily::kernel(key, ctx, stream);
  const int64_t blocks = std::min<int64_t>(ceil_div<int64_t>(a.num_tokens, key.warps), kMaxBlocks);
  launch(ctx, k, {{static_cast<uint32_t>(blocks), 1, 1}, stream}, static_cast<const chord::bf16*>(a.kv), a.slot_mapping,
         static_cast<uint8_t*>(a.cache), a.num_tokens, a.num_slots);
}

}  // namespace chordrt::ops
