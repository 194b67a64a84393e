// The C ABI of sparse MLA decode and its cache writer.
#include "runtime/ops/sparse_mla.hpp"

#include "runtime/c_api/c_api.hpp"

using chordrt::c_api::guarded;
using chordrt::c_api::read_args;

extern "C" {

CHORD_API size_t chord_mla_cache_record_bytes(int32_t format, int32_t rope_dims) {
  return chordrt::ops::mla_cache_record_bytes(format, rope_dims);
}

CHORD_API chord_status_t chord_mla_cache_write(const chord_mla_cache_write_args_t* args, CUstream stream) {
  return guarded([&] {
    chordrt::ops::mla_cache_write(read_args(args, CHORD_MLA_CACHE_WRITE_ARGS_MIN_SIZE, "chord_mla_cache_write"),
                                  stream);
  });
}

CHORD_API chord_status_t chord_sparse_mla_decode_workspace_size(const chord_sparse_mla_decode_args_t* args,
                                                                size_t* bytes) {
  return guarded([&] {
    constexpr const char* what = "chord_sparse_mla_decode_workspace_size";
    const auto a = read_args(args, CHORD_SPARSE_MLA_DECODE_ARGS_MIN_SIZE, what);
    if (!bytes) chordrt::throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: bytes is null", what);
    *bytes = chordrt::ops::sparse_mla_decode_workspace_size(a);
  });
}

CHORD_API chord_status_t chord_sparse_mla_decode(const chord_sparse_mla_decode_args_t* args, CUstream stream) {
  return guarded([&] {
    chordrt::ops::sparse_mla_decode(read_args(args, CHORD_SPARSE_MLA_DECODE_ARGS_MIN_SIZE, "chord_sparse_mla_decode"),
                                    stream);
  });
}

}  // extern "C"
