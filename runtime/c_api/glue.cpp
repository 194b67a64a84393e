// The C ABI of the MoE glue: moe_align, silu_and_mul, moe_combine.
#include "runtime/ops/glue.hpp"

#include "runtime/c_api/c_api.hpp"

using chordrt::c_api::guarded;
using chordrt::c_api::read_args;

extern "C" {

CHORD_API int64_t chord_moe_align_sorted_capacity(int64_t num_tokens, int32_t top_k, int32_t num_experts,
                                                  int32_t block_size) {
  return chordrt::ops::moe_align_sorted_capacity(num_tokens, top_k, num_experts, block_size);
}

CHORD_API chord_status_t chord_moe_align(const chord_moe_align_args_t* args, CUstream stream) {
  return guarded(
      [&] { chordrt::ops::moe_align(read_args(args, CHORD_MOE_ALIGN_ARGS_MIN_SIZE, "chord_moe_align"), stream); });
}

CHORD_API chord_status_t chord_silu_and_mul(const chord_silu_and_mul_args_t* args, CUstream stream) {
  return guarded([&] {
    chordrt::ops::silu_and_mul(read_args(args, CHORD_SILU_AND_MUL_ARGS_MIN_SIZE, "chord_silu_and_mul"), stream);
  });
}

CHORD_API chord_status_t chord_moe_combine(const chord_moe_combine_args_t* args, CUstream stream) {
  return guarded([&] {
    chordrt::ops::moe_combine(read_args(args, CHORD_MOE_COMBINE_ARGS_MIN_SIZE, "chord_moe_combine"), stream);
  });
}

}  // extern "C"
