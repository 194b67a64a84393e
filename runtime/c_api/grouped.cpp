// The C ABI of the W4A16 grouped GEMMs.
#include "chordrt/chordrt.hpp"  // TEMPORARY
#include "runtime/c_api/c_api.hpp"

using chordrt::c_api::guarded;
using chordrt::c_api::read_args;

extern "C" {

CHORD_API chord_status_t chord_grouped_weight_sizes(int32_t mode, int32_t num_experts, int32_t n, int32_t k,
                                                    size_t* packed_bytes, size_t* scale_bytes) {
  return guarded([&] { chordrt::grouped_weight_sizes(mode, num_experts, n, k, packed_bytes, scale_bytes); });
}

CHORD_API chord_status_t chord_grouped_pack(const chord_grouped_pack_args_t* args, chord_grouped_weight_t* weight,
                                            CUstream stream) {
  return guarded([&] {
    if (!args || !weight) {
      chordrt::throw_error(CHORD_ERROR_INVALID_ARGUMENT, "chord_grouped_pack: {} is null", args ? "weight" : "args");
    }
    check_struct(args, sizeof(chord_grouped_pack_args_t), "chord_grouped_pack_args_t");
    *weight = chordrt::grouped_pack(*args, stream);
  });
}

CHORD_API chord_status_t chord_grouped_contiguous(const void* a, int64_t m, const chord_grouped_weight_t* weight,
                                                  const int32_t* m_indices, void* out, CUstream stream) {
  return guarded([&] { chordrt::grouped_contiguous(a, m, weight, m_indices, out, stream); });
}

CHORD_API chord_status_t chord_grouped_masked(const void* a, int32_t max_m, const chord_grouped_weight_t* weight,
                                              const int32_t* masked_m, int32_t expected_m, void* out, CUstream stream) {
  return guarded([&] { chordrt::grouped_masked(a, max_m, weight, masked_m, expected_m, out, stream); });
}

}  // extern "C"
