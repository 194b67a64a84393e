// The C ABI of the W4A16 indexed GEMMs.
#include "runtime/ops/indexed.hpp"

#include "runtime/c_api/c_api.hpp"

using chordrt::c_api::guarded;
using chordrt::c_api::read_args;

extern "C" {

CHORD_API chord_status_t chord_indexed_block_m(int32_t layout, int32_t num_experts, int32_t n, int32_t k,
                                               int64_t routed_rows, int32_t profile, int32_t* block_m) {
  return guarded([&] {
    if (!block_m) chordrt::throw_error(CHORD_ERROR_INVALID_ARGUMENT, "chord_indexed_block_m: block_m is null");
    *block_m = 0;
    *block_m = chordrt::ops::indexed_block_m(layout, num_experts, n, k, routed_rows, profile);
  });
}

CHORD_API size_t chord_indexed_gemm_workspace_size(int32_t block_m, int32_t num_sms) {
  return chordrt::ops::indexed_gemm_workspace_size(block_m, num_sms);
}

CHORD_API chord_status_t chord_indexed_gemm(const chord_indexed_args_t* args, CUstream stream) {
  return guarded(
      [&] { chordrt::ops::indexed_gemm(read_args(args, CHORD_INDEXED_ARGS_MIN_SIZE, "chord_indexed_gemm"), stream); });
}

}  // extern "C"
