// The C ABI: argument structs checked, exceptions turned into a status and the thread's last error.
#include <new>

#include "chordrt/chordrt.h"
#include "chordrt/chordrt.hpp"
#include "runtime/error.hpp"

namespace {

template <typename F>
chord_status_t guarded(F&& body) noexcept {
  try {
    body();
    return CHORD_SUCCESS;
  } catch (const chordrt::Error& e) {
    chordrt::set_last_error(e.what());
    return e.status();
  } catch (const std::bad_alloc&) {
    chordrt::set_last_error("out of host memory");
    return CHORD_ERROR_INTERNAL;
  } catch (const std::exception& e) {
    chordrt::set_last_error(e.what());
    return CHORD_ERROR_INTERNAL;
  } catch (...) {
    chordrt::set_last_error("unknown exception");
    return CHORD_ERROR_INTERNAL;
  }
}

// Options structs may come from older callers (smaller) but never claim to be larger than we know, nor
// smaller than their first version.
template <typename T>
void check_struct(const T* p, size_t first_version_size, const char* what) {
  if (!p) return;
  if (p->struct_size < first_version_size || p->struct_size > sizeof(T)) {
    chordrt::throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: struct_size must be in [{}, {}], got {}", what,
                         first_version_size, sizeof(T), p->struct_size);
  }
}

}  // namespace

extern "C" {

CHORD_API const char* chord_status_string(chord_status_t status) {
  switch (status) {
    case CHORD_SUCCESS:
      return "CHORD_SUCCESS: no error";
    case CHORD_ERROR_INVALID_ARGUMENT:
      return "CHORD_ERROR_INVALID_ARGUMENT: an argument is invalid";
    case CHORD_ERROR_UNSUPPORTED:
      return "CHORD_ERROR_UNSUPPORTED: the request is valid but not supported";
    case CHORD_ERROR_NO_DRIVER:
      return "CHORD_ERROR_NO_DRIVER: no CUDA driver (compile-only mode)";
    case CHORD_ERROR_NO_DEVICE:
      return "CHORD_ERROR_NO_DEVICE: no CUDA device";
    case CHORD_ERROR_NVRTC_UNAVAILABLE:
      return "CHORD_ERROR_NVRTC_UNAVAILABLE: libnvrtc could not be loaded";
    case CHORD_ERROR_COMPILE_FAILED:
      return "CHORD_ERROR_COMPILE_FAILED: NVRTC could not compile a kernel";
    case CHORD_ERROR_CAPTURE_MISS:
      return "CHORD_ERROR_CAPTURE_MISS: kernel not loaded during graph capture";
    case CHORD_ERROR_STRICT_MISS:
      return "CHORD_ERROR_STRICT_MISS: kernel not prewarmed (CHORD_JIT_STRICT=1)";
    case CHORD_ERROR_CUDA:
      return "CHORD_ERROR_CUDA: a CUDA driver call failed";
    case CHORD_ERROR_CACHE:
      return "CHORD_ERROR_CACHE: the kernel cache failed";
    case CHORD_ERROR_INTERNAL:
      return "CHORD_ERROR_INTERNAL: internal error";
  }
  return "unknown chord_status_t value";
}

CHORD_API const char* chord_last_error(void) { return chordrt::last_error(); }

CHORD_API void chord_get_version(int* major, int* minor, int* patch) {
  const auto v = chordrt::version();
  if (major) *major = v.major;
  if (minor) *minor = v.minor;
  if (patch) *patch = v.patch;
}

CHORD_API int chord_abi_version(void) { return CHORD_ABI_VERSION; }

CHORD_API chord_status_t chord_get_runtime_info(chord_runtime_info_t* info) {
  return guarded([&] {
    if (!info) chordrt::throw_error(CHORD_ERROR_INVALID_ARGUMENT, "chord_get_runtime_info: info is null");
    check_struct(info, sizeof(chord_runtime_info_t), "chord_runtime_info_t");
    const auto r = chordrt::runtime_info();
    // Initialized once: the primary directory is fixed for the life of the process, and assigning it on
    // every call would be a data race between threads calling this concurrently.
    static const std::string cache_dir = r.cache_dir;
    info->driver_available = r.driver_available;
    info->driver_version = r.driver_version;
    info->device_count = r.device_count;
    info->nvrtc_major = r.nvrtc_major;
    info->nvrtc_minor = r.nvrtc_minor;
    info->cache_memory_only = r.cache_memory_only;
    info->cache_dir = cache_dir.c_str();
    info->kernels_compiled = r.kernels_compiled;
    info->disk_hits = r.disk_hits;
    info->kernels_loaded = r.kernels_loaded;
  });
}

CHORD_API chord_status_t chord_prewarm_model(const char* model, const char* deployment, const char* arch,
                                             chord_prewarm_summary_t* summary) {
  return guarded([&] {
    if (!model || !deployment || !arch) {
      chordrt::throw_error(CHORD_ERROR_INVALID_ARGUMENT, "chord_prewarm_model: {} is null",
                           !model        ? "model"
                           : !deployment ? "deployment"
                                         : "arch");
    }
    check_struct(summary, sizeof(chord_prewarm_summary_t), "chord_prewarm_summary_t");
    const auto s = chordrt::prewarm_model(model, deployment, arch);
    if (summary) {
      summary->compiled = s.compiled;
      summary->cached = s.cached;
      summary->failed = s.failed;
      summary->median_compile_ms = s.median_compile_ms;
      summary->max_compile_ms = s.max_compile_ms;
    }
    if (s.failed > 0) {
      chordrt::throw_error(CHORD_ERROR_COMPILE_FAILED, "chord_prewarm_model: {} of {} kernels failed to compile",
                           s.failed, s.failed + s.compiled + s.cached);
    }
  });
}

CHORD_API int64_t chord_moe_align_sorted_capacity(int64_t num_tokens, int32_t top_k, int32_t num_experts,
                                                  int32_t block_size) {
  return chordrt::moe_align_sorted_capacity(num_tokens, top_k, num_experts, block_size);
}

CHORD_API chord_status_t chord_moe_align(const int32_t* topk_ids, int64_t num_tokens, int32_t top_k,
                                         int32_t num_experts, int32_t block_size, int32_t* sorted_token_ids,
                                         int64_t sorted_token_ids_capacity, int32_t* expert_ids,
                                         int64_t expert_ids_capacity, int32_t* num_tokens_post_padded,
                                         const chord_moe_align_options_t* options, CUstream stream) {
  return guarded([&] {
    check_struct(options, sizeof(chord_moe_align_options_t), "chord_moe_align_options_t");
    const chordrt::MoeAlignArgs a{.topk_ids = topk_ids,
                                  .num_tokens = num_tokens,
                                  .top_k = top_k,
                                  .num_experts = num_experts,
                                  .block_size = block_size,
                                  .expert_map = options ? options->expert_map : nullptr,
                                  .sorted_token_ids = sorted_token_ids,
                                  .sorted_token_ids_capacity = sorted_token_ids_capacity,
                                  .expert_ids = expert_ids,
                                  .expert_ids_capacity = expert_ids_capacity,
                                  .num_tokens_post_padded = num_tokens_post_padded};
    chordrt::moe_align(a, stream);
  });
}

CHORD_API chord_status_t chord_silu_and_mul(const void* input, void* output, int64_t rows, int64_t intermediate,
                                            CUstream stream) {
  return guarded([&] { chordrt::silu_and_mul({input, output, rows, intermediate}, stream); });
}

CHORD_API chord_status_t chord_moe_combine(const void* expert_rows, const float* topk_weights, void* output,
                                           int64_t num_tokens, int32_t top_k, int64_t hidden,
                                           const chord_moe_combine_options_t* options, CUstream stream) {
  return guarded([&] {
    check_struct(options, sizeof(chord_moe_combine_options_t), "chord_moe_combine_options_t");
    const chordrt::MoeCombineArgs a{.expert_rows = expert_rows,
                                    .topk_weights = topk_weights,
                                    .output = output,
                                    .num_tokens = num_tokens,
                                    .top_k = top_k,
                                    .hidden = hidden,
                                    .topk_ids = options ? options->topk_ids : nullptr,
                                    .expert_map = options ? options->expert_map : nullptr,
                                    .num_experts = options ? options->num_experts : 0};
    chordrt::moe_combine(a, stream);
  });
}

CHORD_API size_t chord_warp_decode_moe_workspace_size(int64_t num_tokens, int32_t top_k, int32_t intermediate) {
  return chordrt::warp_decode_moe_workspace_size(num_tokens, top_k, intermediate);
}

CHORD_API chord_status_t chord_warp_decode_moe(const chord_warp_decode_moe_args_t* args, CUstream stream) {
  return guarded([&] {
    if (!args) chordrt::throw_error(CHORD_ERROR_INVALID_ARGUMENT, "chord_warp_decode_moe: args is null");
    check_struct(args, sizeof(chord_warp_decode_moe_args_t), "chord_warp_decode_moe_args_t");
    if (args->format != CHORD_WEIGHT_INT4_GROUP32 && args->format != CHORD_WEIGHT_MXFP8) {
      chordrt::throw_error(CHORD_ERROR_INVALID_ARGUMENT, "warp_decode_moe: unknown weight format {}", args->format);
    }
    const chordrt::WarpDecodeMoeArgs a{.format = static_cast<chord_weight_format_t>(args->format),
                                       .num_tokens = args->num_tokens,
                                       .hidden = args->hidden,
                                       .intermediate = args->intermediate,
                                       .num_experts = args->num_experts,
                                       .top_k = args->top_k,
                                       .x = args->x,
                                       .topk_ids = args->topk_ids,
                                       .topk_weights = args->topk_weights,
                                       .w13 = args->w13,
                                       .w13_scale = args->w13_scale,
                                       .w2 = args->w2,
                                       .w2_scale = args->w2_scale,
                                       .expert_map = args->expert_map,
                                       .num_global_experts = args->num_global_experts,
                                       .workspace = args->workspace,
                                       .workspace_bytes = args->workspace_bytes,
                                       .output = args->output};
    chordrt::warp_decode_moe(a, stream);
  });
}

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
