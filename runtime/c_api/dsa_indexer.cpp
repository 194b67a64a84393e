// The C ABI of the DSA indexer: key cache writer, logits, top-k.
#include "chordrt/chordrt.hpp"  // TEMPORARY
#include "runtime/c_api/c_api.hpp"

using chordrt::c_api::guarded;
using chordrt::c_api::read_args;

extern "C" {

CHORD_API size_t chord_indexer_cache_page_bytes(int32_t page_size) {
  return chordrt::indexer_cache_page_bytes(page_size);
}

CHORD_API chord_status_t chord_indexer_cache_write(const chord_indexer_cache_write_args_t* args, CUstream stream) {
  return guarded([&] {
    if (!args) chordrt::throw_error(CHORD_ERROR_INVALID_ARGUMENT, "chord_indexer_cache_write: args is null");
    check_struct(args, sizeof(chord_indexer_cache_write_args_t), "chord_indexer_cache_write_args_t");
    chordrt::indexer_cache_write(*args, stream);
  });
}

CHORD_API chord_status_t chord_dsa_indexer_logits(const chord_dsa_indexer_args_t* args, CUstream stream) {
  return guarded([&] {
    if (!args) chordrt::throw_error(CHORD_ERROR_INVALID_ARGUMENT, "chord_dsa_indexer_logits: args is null");
    check_struct(args, sizeof(chord_dsa_indexer_args_t), "chord_dsa_indexer_args_t");
    chordrt::dsa_indexer_logits(*args, stream);
  });
}

CHORD_API chord_status_t chord_dsa_topk(const chord_dsa_topk_args_t* args, CUstream stream) {
  return guarded([&] {
    if (!args) chordrt::throw_error(CHORD_ERROR_INVALID_ARGUMENT, "chord_dsa_topk: args is null");
    check_struct(args, sizeof(chord_dsa_topk_args_t), "chord_dsa_topk_args_t");
    chordrt::dsa_topk(*args, stream);
  });
}

}  // extern "C"
