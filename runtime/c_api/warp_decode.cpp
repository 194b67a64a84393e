// The C ABI of warp decode.
#include "runtime/ops/warp_decode.hpp"

#include "runtime/c_api/c_api.hpp"

using chordrt::c_api::guarded;
using chordrt::c_api::read_args;

extern "C" {

CHORD_API size_t chord_warp_decode_moe_workspace_size(int64_t num_tokens, int32_t top_k, int32_t intermediate) {
  return chordrt::ops::warp_decode_moe_workspace_size(num_tokens, top_k, intermediate);
}

CHORD_API chord_status_t chord_warp_decode_moe(const chord_warp_decode_moe_args_t* args, CUstream stream) {
  return guarded([&] {
    chordrt::ops::warp_decode_moe(read_args(args, CHORD_WARP_DECODE_MOE_ARGS_MIN_SIZE, "chord_warp_decode_moe"),
                                  stream);
  });
}

}  // extern "C"
