// The C ABI of the W4A16 weights (shared by the grouped and indexed GEMMs): sizes and the packer.
#include "runtime/ops/w4a16.hpp"

#include "runtime/c_api/c_api.hpp"

using chordrt::c_api::guarded;
using chordrt::c_api::read_args;
using chordrt::c_api::write_out;

extern "C" {

CHORD_API chord_status_t chord_w4a16_weight_sizes(int32_t layout, int32_t num_experts, int32_t n, int32_t k,
                                                  size_t* packed_bytes, size_t* scale_bytes) {
  return guarded([&] { chordrt::ops::w4a16_weight_sizes(layout, num_experts, n, k, packed_bytes, scale_bytes); });
}

CHORD_API chord_status_t chord_w4a16_pack(const chord_w4a16_pack_args_t* args, chord_w4a16_weight_t* weight,
                                          CUstream stream) {
  return guarded([&] {
    const auto a = read_args(args, CHORD_W4A16_PACK_ARGS_MIN_SIZE, "chord_w4a16_pack");
    if (!weight) chordrt::throw_error(CHORD_ERROR_INVALID_ARGUMENT, "chord_w4a16_pack: weight is null");
    // The output's struct_size is checked before anything is launched (and again by write_out).
    if (weight->struct_size < CHORD_W4A16_WEIGHT_MIN_SIZE || weight->struct_size > sizeof(chord_w4a16_weight_t)) {
      chordrt::throw_error(CHORD_ERROR_INVALID_ARGUMENT,
                           "chord_w4a16_pack: weight.struct_size must be in [{}, {}], got {}",
                           CHORD_W4A16_WEIGHT_MIN_SIZE, sizeof(chord_w4a16_weight_t), weight->struct_size);
    }
    write_out(weight, chordrt::ops::w4a16_pack(a, stream), CHORD_W4A16_WEIGHT_MIN_SIZE, "chord_w4a16_pack: weight");
  });
}

}  // extern "C"
