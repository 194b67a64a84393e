#include "runtime/ops/moe_decode_path.hpp"

#include <string>

#include "runtime/core/error.hpp"
#include "runtime/ops/validate.hpp"
#include "runtime/ops/w4a16.hpp"
#include "runtime/ops/warp_decode.hpp"

namespace chordrt::ops {

namespace {

// Why the indexed decode path (MMA-layout W4A16 weights: gate/up N = 2I, K = H; down N = H, K = I)
// cannot serve the shape, or "".
std::string indexed_decode_rejection(const chord_moe_shape_t& s) {
  if (s.format != CHORD_WEIGHT_INT4_GROUP32) return "indexed decode serves INT4 group-32 weights only";
  if (s.top_k > 64) return fmt::format("indexed decode takes top_k up to 64, got {}", s.top_k);
  const auto mma = static_cast<int64_t>(CHORD_W4A16_LAYOUT_MMA);
  if (std::string why = w4a16_shape_error(mma, s.num_experts, 2LL * s.intermediate, s.hidden); !why.empty()) {
    return "gate/up: " + why;
  }
  if (std::string why = w4a16_shape_error(mma, s.num_experts, s.hidden, s.intermediate); !why.empty()) {
    return "down: " + why;
  }
  return "";
}

}  // namespace

heuristics::WarpDecodeShape heuristic_shape(const chord_moe_shape_t& s) {
  return {static_cast<heuristics::WeightFormat>(s.format),
          s.hidden,
          s.intermediate,
          s.num_experts,
          s.num_global_experts,
          s.top_k,
          s.num_global_experts != s.num_experts};
}

heuristics::MoeDecodePath moe_decode_path(const chord_moe_shape_t& s, int64_t num_tokens, const DeviceFacts& facts) {
  constexpr const char* op = "moe_decode_path";
  if (s.format != CHORD_WEIGHT_INT4_GROUP32 && s.format != CHORD_WEIGHT_MXFP8) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: unknown weight format {}", op, s.format);
  }
  require_range(num_tokens, 1, INT64_MAX, op, "num_tokens");
  require_range(s.hidden, 1, INT32_MAX, op, "hidden");
  require_range(s.intermediate, 1, INT32_MAX, op, "intermediate");
  require_range(s.num_experts, 1, INT32_MAX, op, "num_experts");
  require_range(s.num_global_experts, s.num_experts, INT32_MAX, op, "num_global_experts");
  require_range(s.top_k, 1, s.num_global_experts, op, "top_k");
  const ShapeRejection warp =
      warp_decode_shape_rejection(s.format, num_tokens, s.hidden, s.intermediate, s.num_experts, s.top_k);
  const std::string indexed = indexed_decode_rejection(s);
  if (warp.status != CHORD_SUCCESS && !indexed.empty()) {
    throw_error(CHORD_ERROR_UNSUPPORTED, "{}: neither decode path serves this shape at {} tokens: warp decode: {}; {}",
                op, num_tokens, warp.why, indexed);
  }
  if (warp.status != CHORD_SUCCESS) return heuristics::MoeDecodePath::kIndexed;
  if (!indexed.empty()) return heuristics::MoeDecodePath::kWarp;
  return heuristics::faster_decode_path(heuristic_shape(s), num_tokens, facts);
}

}  // namespace chordrt::ops
