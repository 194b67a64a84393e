// The W4A16 weights: one packer family for the three layouts, the sizes, the packed weight and its checks.
#include "runtime/ops/w4a16.hpp"

#include <xxhash.h>

#include <algorithm>

#include "runtime/core/math.hpp"
#include "runtime/launch.hpp"
#include "runtime/ops/validate.hpp"

namespace chordrt::ops {

namespace w = chord::w4a16;

static_assert(static_cast<int>(W4a16Layout::kWgmmaK64) == CHORD_W4A16_LAYOUT_WGMMA_K64 &&
                  static_cast<int>(W4a16Layout::kWgmmaK128) == CHORD_W4A16_LAYOUT_WGMMA_K128 &&
                  static_cast<int>(W4a16Layout::kMma) == CHORD_W4A16_LAYOUT_MMA,
              "chord_w4a16_layout_t is chord::w4a16::Layout");

const char* w4a16_layout_name(W4a16Layout layout) {
  switch (layout) {
    case W4a16Layout::kWgmmaK64:
      return "WGMMA_K64";
    case W4a16Layout::kWgmmaK128:
      return "WGMMA_K128";
    case W4a16Layout::kMma:
      return "MMA";
  }
  return "?";
}

std::string w4a16_shape_error(int64_t layout, int64_t num_experts, int64_t n, int64_t k) {
  if (layout < 0 || layout >= w::kLayouts) {
    return fmt::format("layout must be in [0, {}] (WGMMA_K64, WGMMA_K128, MMA), got {}", w::kLayouts - 1, layout);
  }
  const auto l = static_cast<W4a16Layout>(layout);
  if (num_experts < 1 || num_experts > w::kMaxExperts) {
    return fmt::format("num_experts must be in [1, {}], got {}", w::kMaxExperts, num_experts);
  }
  if (n < w::kRowMultiple || n % w::kRowMultiple != 0 || n > w::kMaxDim) {
    return fmt::format("n must be a positive multiple of {} up to {}, got {}", w::kRowMultiple, w::kMaxDim, n);
  }
  const int bk = w::block_k(l);
  if (k < bk || k % bk != 0 || k > w::kMaxDim) {
    return fmt::format("k must be a positive multiple of {} for layout {} (up to {}), got {}", bk, w4a16_layout_name(l),
                       w::kMaxDim, k);
  }
  return "";
}

KernelProgram W4a16PackFamily::program(const W4a16PackKey& key) {
  if (const std::string why = w4a16_shape_error(key.layout, 1, key.n, key.k); !why.empty()) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: {}", kName, why);
  }
  KernelProgram p;
  const auto layout = static_cast<W4a16Layout>(key.layout);
  if (layout == W4a16Layout::kMma) {
    p.header = "indexed/pack.cuh";
    p.name_expression = fmt::format("chord::indexed::pack_mma_kernel<{}, {}>", key.n, key.k);
  } else {
    p.header = "grouped/pack.cuh";
    p.name_expression = fmt::format("chord::grouped::pack_kernel<{}, {}, {}>", key.n, key.k, w::block_k(layout));
  }
  p.threads = w::kPackThreads;
  return p;
}

std::vector<W4a16PackKey> W4a16PackFamily::examples(const DeviceFacts&) {
  // Kimi K2 EP8 gate_up and down, one per layout.
  return {w4a16_pack_key(W4a16Layout::kWgmmaK64, 4096, 7168), w4a16_pack_key(W4a16Layout::kWgmmaK128, 7168, 2048),
          w4a16_pack_key(W4a16Layout::kMma, 7168, 2048)};
}

W4a16PackKey w4a16_pack_key(W4a16Layout layout, int64_t n, int64_t k) {
  return {static_cast<int>(layout), static_cast<int>(n), static_cast<int>(k)};
}

uint64_t w4a16_weight_tag(const chord_w4a16_weight_t& wt) {
  const uint64_t fields[] = {0x4A16ull /* the weight type */,       static_cast<uint64_t>(wt.layout),
                             static_cast<uint64_t>(wt.num_experts), static_cast<uint64_t>(wt.n),
                             static_cast<uint64_t>(wt.k),           reinterpret_cast<uint64_t>(wt.packed),
                             reinterpret_cast<uint64_t>(wt.scale)};
  return XXH3_64bits(fields, sizeof(fields));
}

void w4a16_weight_sizes(int32_t layout, int32_t num_experts, int32_t n, int32_t k, size_t* packed_bytes,
                        size_t* scale_bytes) {
  if (packed_bytes) *packed_bytes = 0;
  if (scale_bytes) *scale_bytes = 0;
  if (const std::string why = w4a16_shape_error(layout, num_experts, n, k); !why.empty()) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "w4a16_weight_sizes: {}", why);
  }
  if (packed_bytes) *packed_bytes = w::packed_bytes(num_experts, n, k);
  if (scale_bytes) *scale_bytes = w::scale_bytes(num_experts, n, k);
}

chord_w4a16_weight_t w4a16_pack(const chord_w4a16_pack_args_t& a, CUstream stream) {
  constexpr const char* op = "w4a16_pack";
  if (a.bits != w::kBits || a.group_size != w::kGroup || a.symmetric != 1 || a.scale_is_bf16 != 1) {
    throw_error(CHORD_ERROR_UNSUPPORTED,
                "{}: the W4A16 kernels serve symmetric {}-bit weights with group size {} and BF16 scales; got "
                "bits {}, group_size {}, symmetric {}, scale_is_bf16 {}",
                op, w::kBits, w::kGroup, a.bits, a.group_size, a.symmetric, a.scale_is_bf16);
  }
  if (const std::string why = w4a16_shape_error(a.layout, a.num_experts, a.n, a.k); !why.empty()) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: {}", op, why);
  }
  require_pointer(a.weight_packed, op, "weight_packed", 4);
  require_pointer(a.weight_scale, op, "weight_scale", 2);
  require_pointer(a.packed, op, "packed", 16);
  require_pointer(a.scale, op, "scale", 16);
  const uint64_t need_packed = w::packed_bytes(a.num_experts, a.n, a.k);
  const uint64_t need_scale = w::scale_bytes(a.num_experts, a.n, a.k);
  if (a.packed_bytes < need_packed) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: packed_bytes must be >= {} (w4a16_weight_sizes), got {}", op,
                need_packed, a.packed_bytes);
  }
  if (a.scale_bytes < need_scale) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: scale_bytes must be >= {} (w4a16_weight_sizes), got {}", op,
                need_scale, a.scale_bytes);
  }
  const auto layout = static_cast<W4a16Layout>(a.layout);
  const ContextState& ctx = JitRuntime::global().context_for(stream);
  const LoadedKernel& kernel = W4a16PackFamily::kernel(w4a16_pack_key(layout, a.n, a.k), ctx, stream);
  const int64_t words = static_cast<int64_t>(a.num_experts) * a.n * (a.k / 8);
  const auto grid =
      static_cast<uint32_t>(std::min<int64_t>(ceil_div<int64_t>(words, w::kPackThreads), w::kPackMaxCtas));
  launch(ctx, kernel, {{grid, 1, 1}, stream}, a.weight_packed, a.weight_scale, a.num_experts, a.packed, a.scale);
  chord_w4a16_weight_t wt{};
  wt.struct_size = sizeof(wt);
  wt.layout = a.layout;
  wt.num_experts = a.num_experts;
  wt.n = a.n;
  wt.k = a.k;
  wt.packed = a.packed;
  wt.scale = a.scale;
  wt.tag = w4a16_weight_tag(wt);
  return wt;
}

const chord_w4a16_weight_t& check_w4a16_weight(const char* op, const chord_w4a16_weight_t* wt,
                                               std::initializer_list<W4a16Layout> accepted, const char* needs) {
  if (!wt) throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: weight is null", op);
  if (wt->struct_size < CHORD_W4A16_WEIGHT_MIN_SIZE || wt->struct_size > sizeof(chord_w4a16_weight_t)) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: weight.struct_size must be in [{}, {}], got {}", op,
                CHORD_W4A16_WEIGHT_MIN_SIZE, sizeof(chord_w4a16_weight_t), wt->struct_size);
  }
  if (wt->tag != w4a16_weight_tag(*wt)) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT,
                "{}: weight was not filled by w4a16_pack (or its fields were changed since)", op);
  }
  if (const std::string why = w4a16_shape_error(wt->layout, wt->num_experts, wt->n, wt->k); !why.empty()) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: weight: {}", op, why);
  }
  const auto layout = static_cast<W4a16Layout>(wt->layout);
  if (std::find(accepted.begin(), accepted.end(), layout) == accepted.end()) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: weight has layout {}; {}", op, w4a16_layout_name(layout), needs);
  }
  require_pointer(wt->packed, op, "weight.packed", 16);
  require_pointer(wt->scale, op, "weight.scale", 16);
  return *wt;
}

}  // namespace chordrt::ops
