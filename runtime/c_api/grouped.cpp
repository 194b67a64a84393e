// The C ABI of the W4A16 grouped GEMMs.
#include "runtime/ops/grouped.hpp"

#include "runtime/c_api/c_api.hpp"

using chordrt::c_api::guarded;
using chordrt::c_api::read_args;

extern "C" {

CHORD_API chord_status_t chord_grouped_contiguous(const chord_grouped_contiguous_args_t* args, CUstream stream) {
  return guarded([&] {
    chordrt::ops::grouped_contiguous(
        read_args(args, CHORD_GROUPED_CONTIGUOUS_ARGS_MIN_SIZE, "chord_grouped_contiguous"), stream);
  });
}

CHORD_API size_t chord_grouped_workspace_size(int32_t num_sms) { return chordrt::ops::grouped_workspace_size(num_sms); }

CHORD_API chord_status_t chord_grouped_masked(const chord_grouped_masked_args_t* args, CUstream stream) {
  return guarded([&] {
    chordrt::ops::grouped_masked(read_args(args, CHORD_GROUPED_MASKED_ARGS_MIN_SIZE, "chord_grouped_masked"), stream);
  });
}

}  // extern "C"
