// The C ABI of the decode-path choice.
#include "runtime/ops/moe_decode_path.hpp"

#include "runtime/c_api/c_api.hpp"
#include "runtime/core/error.hpp"

using chordrt::c_api::guarded;
using chordrt::c_api::read_args;

extern "C" {

CHORD_API chord_status_t chord_moe_decode_path(const chord_moe_shape_t* shape, int64_t num_tokens, int32_t* path) {
  return guarded([&] {
    if (!path) chordrt::throw_error(CHORD_ERROR_INVALID_ARGUMENT, "chord_moe_decode_path: path is null");
    *path = static_cast<int32_t>(chordrt::ops::moe_decode_path(
        read_args(shape, sizeof(chord_moe_shape_t), "chord_moe_decode_path"), num_tokens));
  });
}

}  // extern "C"
