// chordrt C++ API. Same operations as the C ABI (chordrt.h); errors are thrown as chordrt::Error.
#pragma once

#include <chordrt/chordrt.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace chordrt {

class CHORD_API Error : public std::runtime_error {
 public:
  Error(chord_status_t status, const std::string& message) : std::runtime_error(message), status_(status) {}
  chord_status_t status() const noexcept { return status_; }

 private:
  chord_status_t status_;
};

struct Version {
  int major, minor, patch;
};
CHORD_API Version version() noexcept;

struct RuntimeInfo {
  bool driver_available = false;
  int driver_version = 0;
  int device_count = 0;
  int nvrtc_major = 0, nvrtc_minor = 0;
  bool cache_memory_only = false;
  std::string cache_dir;
  uint64_t kernels_compiled = 0, disk_hits = 0, kernels_loaded = 0;
};
CHORD_API RuntimeInfo runtime_info();

struct PrewarmSummary {
  int compiled = 0, cached = 0, failed = 0;
  double median_compile_ms = 0, max_compile_ms = 0;
};
// Compiles every kernel that `deployment` of `model` (preset name or config.json path) dispatches.
CHORD_API PrewarmSummary prewarm_model(std::string_view model, std::string_view deployment,
                                       std::string_view arch = "sm_90a");

// ---- MoE glue -------------------------------------------------------------------------------------

CHORD_API int64_t moe_align_sorted_capacity(int64_t num_tokens, int32_t top_k, int32_t num_experts, int32_t block_size);

struct MoeAlignArgs {
  const int32_t* topk_ids = nullptr;  // [num_tokens, top_k]
  int64_t num_tokens = 0;
  int32_t top_k = 0;
  int32_t num_experts = 0;
  int32_t block_size = 0;
  const int32_t* expert_map = nullptr;  // optional [num_experts], -1 = not local
  int32_t* sorted_token_ids = nullptr;
  int64_t sorted_token_ids_capacity = 0;
  int32_t* expert_ids = nullptr;
  int64_t expert_ids_capacity = 0;
  int32_t* num_tokens_post_padded = nullptr;  // [1]
};
CHORD_API void moe_align(const MoeAlignArgs& args, CUstream stream);

struct SiluAndMulArgs {
  const void* input = nullptr;  // [rows, 2*intermediate] BF16
  void* output = nullptr;       // [rows, intermediate] BF16
  int64_t rows = 0;
  int64_t intermediate = 0;
};
CHORD_API void silu_and_mul(const SiluAndMulArgs& args, CUstream stream);

struct MoeCombineArgs {
  const void* expert_rows = nullptr;    // [num_tokens*top_k, hidden] BF16
  const float* topk_weights = nullptr;  // [num_tokens, top_k]
  void* output = nullptr;               // [num_tokens, hidden] BF16
  int64_t num_tokens = 0;
  int32_t top_k = 0;
  int64_t hidden = 0;
  const int32_t* topk_ids = nullptr;  // optional EP filter, with expert_map
  const int32_t* expert_map = nullptr;
  int32_t num_experts = 0;
};
CHORD_API void moe_combine(const MoeCombineArgs& args, CUstream stream);

// ---- Warp decode MoE ------------------------------------------------------------------------------

CHORD_API size_t warp_decode_moe_workspace_size(int64_t num_tokens, int32_t top_k, int32_t intermediate);

// Fields as in chord_warp_decode_moe_args_t.
struct WarpDecodeMoeArgs {
  chord_weight_format_t format = CHORD_WEIGHT_INT4_GROUP32;
  int64_t num_tokens = 0;
  int32_t hidden = 0;
  int32_t intermediate = 0;
  int32_t num_experts = 0;
  int32_t top_k = 0;
  const void* x = nullptr;
  const int32_t* topk_ids = nullptr;
  const float* topk_weights = nullptr;
  const void* w13 = nullptr;
  const void* w13_scale = nullptr;
  const void* w2 = nullptr;
  const void* w2_scale = nullptr;
  const int32_t* expert_map = nullptr;
  int32_t num_global_experts = 0;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  void* output = nullptr;
};
CHORD_API void warp_decode_moe(const WarpDecodeMoeArgs& args, CUstream stream);

// ---- W4A16 grouped MoE GEMMs ------------------------------------------------------------------------
// As the chord_grouped_* functions (same structs); errors are thrown as chordrt::Error.

CHORD_API void grouped_weight_sizes(int32_t mode, int32_t num_experts, int32_t n, int32_t k, size_t* packed_bytes,
                                    size_t* scale_bytes);
CHORD_API chord_grouped_weight_t grouped_pack(const chord_grouped_pack_args_t& args, CUstream stream);
CHORD_API void grouped_contiguous(const void* a, int64_t m, const chord_grouped_weight_t* weight,
                                  const int32_t* m_indices, void* out, CUstream stream);
CHORD_API void grouped_masked(const void* a, int32_t max_m, const chord_grouped_weight_t* weight,
                              const int32_t* masked_m, int32_t expected_m, void* out, CUstream stream);

// ---- W4A16 indexed MoE GEMMs ------------------------------------------------------------------------
// As the chord_indexed_* functions (same structs); errors are thrown as chordrt::Error.

CHORD_API void indexed_weight_sizes(int32_t layout, int32_t num_experts, int32_t n, int32_t k, size_t* packed_bytes,
                                    size_t* scale_bytes);
CHORD_API chord_indexed_weight_t indexed_pack(const chord_indexed_pack_args_t& args, CUstream stream);
CHORD_API int32_t indexed_block_m(int32_t layout, int32_t num_experts, int32_t n, int32_t k, int64_t routed_rows,
                                  int32_t profile = CHORD_INDEXED_PROFILE_AUTO);
CHORD_API void indexed_gemm(const chord_indexed_args_t& args, CUstream stream);

// ---- Sparse MLA decode and the DSA indexer -----------------------------------------------------------
// As the chord_* functions (same structs); errors are thrown as chordrt::Error.

CHORD_API size_t mla_cache_record_bytes(int32_t format, int32_t rope_dims);
CHORD_API void mla_cache_write(const chord_mla_cache_write_args_t& args, CUstream stream);
CHORD_API size_t sparse_mla_decode_workspace_size(const chord_sparse_mla_decode_args_t& args);
CHORD_API void sparse_mla_decode(const chord_sparse_mla_decode_args_t& args, CUstream stream);

CHORD_API size_t indexer_cache_page_bytes(int32_t page_size);
CHORD_API void indexer_cache_write(const chord_indexer_cache_write_args_t& args, CUstream stream);
CHORD_API void dsa_indexer_logits(const chord_dsa_indexer_args_t& args, CUstream stream);
CHORD_API void dsa_topk(const chord_dsa_topk_args_t& args, CUstream stream);

}  // namespace chordrt
