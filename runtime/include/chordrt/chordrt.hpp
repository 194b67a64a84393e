// chordrt C++ API: a header-only layer over the C ABI (chordrt.h). Same operations and the same args
// structs; every failure is thrown as chordrt::Error carrying the status and chord_last_error().
//   auto a = chordrt::args<chord_moe_align_args_t>();   // struct_size set, everything else zero
//   a.topk_ids = ...;  chordrt::moe_align(a, stream);
#pragma once

#include <chordrt/chordrt.h>

#include <chordrt/error.hpp>
#include <cstdint>
#include <string>
#include <string_view>

namespace chordrt {

// Throws chordrt::Error(status, chord_last_error()) unless status is CHORD_SUCCESS.
inline void check(chord_status_t status) {
  if (status != CHORD_SUCCESS) throw Error(status, chord_last_error());
}

// A zeroed args struct with its struct_size set.
template <class T>
T args() {
  T t{};
  t.struct_size = sizeof(T);
  return t;
}

struct Version {
  int major, minor, patch;
};
inline Version version() noexcept {
  Version v{};
  chord_get_version(&v.major, &v.minor, &v.patch);
  return v;
}

inline chord_runtime_info_t runtime_info() {
  auto info = args<chord_runtime_info_t>();
  check(chord_get_runtime_info(&info));
  return info;
}

// Compiles every kernel that `deployment` of `model` (preset name or config.json path) dispatches.
inline chord_prewarm_summary_t prewarm_model(const std::string& model, const std::string& deployment,
                                             const std::string& arch = "sm_90a") {
  auto summary = args<chord_prewarm_summary_t>();
  check(chord_prewarm_model(model.c_str(), deployment.c_str(), arch.c_str(), &summary));
  return summary;
}

// ---- MoE glue -------------------------------------------------------------------------------------

inline int64_t moe_align_sorted_capacity(int64_t num_tokens, int32_t top_k, int32_t num_experts, int32_t block_size) {
  return chord_moe_align_sorted_capacity(num_tokens, top_k, num_experts, block_size);
}
inline void moe_align(const chord_moe_align_args_t& a, CUstream stream) { check(chord_moe_align(&a, stream)); }
inline void silu_and_mul(const chord_silu_and_mul_args_t& a, CUstream stream) { check(chord_silu_and_mul(&a, stream)); }
inline void moe_combine(const chord_moe_combine_args_t& a, CUstream stream) { check(chord_moe_combine(&a, stream)); }

// ---- Warp decode MoE ------------------------------------------------------------------------------

inline size_t warp_decode_moe_workspace_size(int64_t num_tokens, int32_t top_k, int32_t intermediate) {
  return chord_warp_decode_moe_workspace_size(num_tokens, top_k, intermediate);
}
inline void warp_decode_moe(const chord_warp_decode_moe_args_t& a, CUstream stream) {
  check(chord_warp_decode_moe(&a, stream));
}

// The faster decode path for this shape and token count (chord_moe_decode_path).
inline chord_moe_decode_path_t moe_decode_path(chord_moe_shape_t shape, int64_t num_tokens) {
  shape.struct_size = sizeof shape;
  int32_t path = 0;
  check(chord_moe_decode_path(&shape, num_tokens, &path));
  return static_cast<chord_moe_decode_path_t>(path);
}

// ---- W4A16 MoE weights and GEMMs (grouped, indexed) ---------------------------------------------------

struct W4a16Sizes {
  size_t packed_bytes, scale_bytes;
};
inline W4a16Sizes w4a16_weight_sizes(chord_w4a16_layout_t layout, int32_t num_experts, int32_t n, int32_t k) {
  W4a16Sizes s{};
  check(chord_w4a16_weight_sizes(layout, num_experts, n, k, &s.packed_bytes, &s.scale_bytes));
  return s;
}
// The packed weight (its buffers are the args' packed / scale, usable once the stream reaches the packer).
inline chord_w4a16_weight_t w4a16_pack(const chord_w4a16_pack_args_t& a, CUstream stream) {
  auto w = args<chord_w4a16_weight_t>();
  check(chord_w4a16_pack(&a, &w, stream));
  return w;
}
// 0 when num_sms is out of range.
inline size_t grouped_workspace_size(int32_t num_sms) { return chord_grouped_workspace_size(num_sms); }
inline void grouped_contiguous(const chord_grouped_contiguous_args_t& a, CUstream stream) {
  check(chord_grouped_contiguous(&a, stream));
}
inline void grouped_masked(const chord_grouped_masked_args_t& a, CUstream stream) {
  check(chord_grouped_masked(&a, stream));
}
inline int32_t indexed_block_m(chord_w4a16_layout_t layout, int32_t num_experts, int32_t n, int32_t k,
                               int64_t routed_rows, chord_indexed_profile_t profile = CHORD_INDEXED_PROFILE_AUTO) {
  int32_t block_m = 0;
  check(chord_indexed_block_m(layout, num_experts, n, k, routed_rows, profile, &block_m));
  return block_m;
}
// 0 when block_m or num_sms is out of range.
inline size_t indexed_gemm_workspace_size(int32_t block_m, int32_t num_sms) {
  return chord_indexed_gemm_workspace_size(block_m, num_sms);
}
inline void indexed_gemm(const chord_indexed_args_t& a, CUstream stream) { check(chord_indexed_gemm(&a, stream)); }

// ---- Sparse MLA decode and the DSA indexer -----------------------------------------------------------

inline size_t mla_cache_record_bytes(chord_mla_cache_format_t format, int32_t rope_dims) {
  return chord_mla_cache_record_bytes(format, rope_dims);
}
inline void mla_cache_write(const chord_mla_cache_write_args_t& a, CUstream stream) {
  check(chord_mla_cache_write(&a, stream));
}
inline size_t sparse_mla_decode_workspace_size(const chord_sparse_mla_decode_args_t& a) {
  size_t bytes = 0;
  check(chord_sparse_mla_decode_workspace_size(&a, &bytes));
  return bytes;
}
inline void sparse_mla_decode(const chord_sparse_mla_decode_args_t& a, CUstream stream) {
  check(chord_sparse_mla_decode(&a, stream));
}

inline size_t indexer_cache_page_bytes(int32_t page_size) { return chord_indexer_cache_page_bytes(page_size); }
inline void indexer_cache_write(const chord_indexer_cache_write_args_t& a, CUstream stream) {
  check(chord_indexer_cache_write(&a, stream));
}
inline void dsa_indexer_logits(const chord_dsa_indexer_args_t& a, CUstream stream) {
  check(chord_dsa_indexer_logits(&a, stream));
}
inline void dsa_topk(const chord_dsa_topk_args_t& a, CUstream stream) { check(chord_dsa_topk(&a, stream)); }

}  // namespace chordrt
