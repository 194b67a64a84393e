// The C ABI of the DSA indexer: key cache writer, logits, top-k.
#include "runtime/ops/dsa_indexer.hpp"

#include "runtime/c_api/c_api.hpp"

using chordrt::c_api::guarded;
using chordrt::c_api::read_args;

extern "C" {

CHORD_API size_t chord_indexer_cache_page_bytes(int32_t page_size) {
  return chordrt::ops::indexer_cache_page_bytes(page_size);
}

CHORD_API chord_status_t chord_indexer_cache_write(const chord_indexer_cache_write_args_t* args, CUstream stream) {
  return guarded([&] {
    chordrt::ops::indexer_cache_write(
        read_args(args, CHORD_INDEXER_CACHE_WRITE_ARGS_MIN_SIZE, "chord_indexer_cache_write"), stream);
  });
}

CHORD_API chord_status_t chord_dsa_indexer_logits(const chord_dsa_indexer_args_t* args, CUstream stream) {
  return guarded([&] {
    chordrt::ops::dsa_indexer_logits(read_args(args, CHORD_DSA_INDEXER_ARGS_MIN_SIZE, "chord_dsa_indexer_logits"),
                                     stream);
  });
}

CHORD_API chord_status_t chord_dsa_topk(const chord_dsa_topk_args_t* args, CUstream stream) {
  return guarded(
      [&] { chordrt::ops::dsa_topk(read_args(args, CHORD_DSA_TOPK_ARGS_MIN_SIZE, "chord_dsa_topk"), stream); });
}

}  // extern "C"
