// The C ABI of the W4A16 indexed GEMMs.
#include "chordrt/chordrt.hpp"  // TEMPORARY
#include "runtime/c_api/c_api.hpp"

using chordrt::c_api::guarded;
using chordrt::c_api::read_args;

extern "C" {

CHORD_API chord_status_t chord_indexed_weight_sizes(int32_t layout, int32_t num_experts, int32_t n, int32_t k,
                                                    size_t* packed_bytes, size_t* scale_bytes) {
  return guarded([&] { chordrt::indexed_weight_sizes(layout, num_experts, n, k, packed_bytes, scale_bytes); });
}

CHORD_API chord_status_t chord_indexed_pack(const chord_indexed_pack_args_t* args, chord_indexed_weight_t* weight,
                                            CUstream stream) {
  return guarded([&] {
    if (!args || !weight) {
      chordrt::throw_error(CHORD_ERROR_INVALID_ARGUMENT, "chord_indexed_pack: {} is null", args ? "weight" : "args");
    }
    check_struct(args, sizeof(chord_indexed_pack_args_t), "chord_indexed_pack_args_t");
    *weight = chordrt::indexed_pack(*args, stream);
  });
}

CHORD_API chord_status_t chord_indexed_block_m(int32_t layout, int32_t num_experts, int32_t n, int32_t k,
                                               int64_t routed_rows, int32_t profile, int32_t* block_m) {
  return guarded([&] {
    if (!block_m) chordrt::throw_error(CHORD_ERROR_INVALID_ARGUMENT, "chord_indexed_block_m: block_m is null");
    *block_m = 0;
    *block_m = chordrt::indexed_block_m(layout, num_experts, n, k, routed_rows, profile);
  });
}

CHORD_API chord_status_t chord_indexed_gemm(const chord_indexed_args_t* args, CUstream stream) {
  return guarded([&] {
    if (!args) chordrt::throw_error(CHORD_ERROR_INVALID_ARGUMENT, "chord_indexed_gemm: args is null");
    check_struct(args, sizeof(chord_indexed_args_t), "chord_indexed_args_t");
    chordrt::indexed_gemm(*args, stream);
  });
}

}  // extern "C"
