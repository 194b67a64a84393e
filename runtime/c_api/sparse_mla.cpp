// The C ABI of sparse MLA decode and its cache writer.
#include "chordrt/chordrt.hpp"  // TEMPORARY
#include "runtime/c_api/c_api.hpp"

using chordrt::c_api::guarded;
using chordrt::c_api::read_args;

extern "C" {

CHORD_API size_t chord_mla_cache_record_bytes(int32_t format, int32_t rope_dims) {
  return chordrt::mla_cache_record_bytes(format, rope_dims);
}

CHORD_API chord_status_t chord_mla_cache_write(const chord_mla_cache_write_args_t* args, CUstream stream) {
  return guarded([&] {
    if (!args) chordrt::throw_error(CHORD_ERROR_INVALID_ARGUMENT, "chord_mla_cache_write: args is null");
    check_struct(args, sizeof(chord_mla_cache_write_args_t), "chord_mla_cache_write_args_t");
    chordrt::mla_cache_write(*args, stream);
  });
}

CHORD_API chord_status_t chord_sparse_mla_decode_workspace_size(const chord_sparse_mla_decode_args_t* args,
                                                                size_t* bytes) {
  return guarded([&] {
    if (!args)
      chordrt::throw_error(CHORD_ERROR_INVALID_ARGUMENT, "chord_sparse_mla_decode_workspace_size: args is null");
    if (!bytes)
      chordrt::throw_error(CHORD_ERROR_INVALID_ARGUMENT, "chord_sparse_mla_decode_workspace_size: bytes is null");
    check_struct(args, sizeof(chord_sparse_mla_decode_args_t), "chord_sparse_mla_decode_args_t");
    *bytes = chordrt::sparse_mla_decode_workspace_size(*args);
  });
}

CHORD_API chord_status_t chord_sparse_mla_decode(const chord_sparse_mla_decode_args_t* args, CUstream stream) {
  return guarded([&] {
    if (!args) chordrt::throw_error(CHORD_ERROR_INVALID_ARGUMENT, "chord_sparse_mla_decode: args is null");
    check_struct(args, sizeof(chord_sparse_mla_decode_args_t), "chord_sparse_mla_decode_args_t");
    chordrt::sparse_mla_decode(*args, stream);
  });
}

}  // extern "C"
