/* chordrt C ABI: JIT-compiled MoE and sparse-attention kernels for NVIDIA GPUs.
 *
 * Conventions (as in NCCL / cuBLASLt):
 *  - every function returns a chord_status_t; chord_last_error() gives the thread's last message;
 *  - no exception crosses this boundary;
 *  - every operation takes an explicit CUstream (0 = the legacy default stream);
 *  - every operation takes one args struct that begins with `size_t struct_size`: set it to sizeof the
 *    struct you compiled against. A library accepts any size from the struct's CHORD_<NAME>_MIN_SIZE (its
 *    required fields) up to its own sizeof; fields past the caller's size read as zero, so a caller
 *    built against an older header keeps working when later versions append optional fields.
 * Device pointers are raw CUdeviceptr values cast to pointers (e.g. torch's tensor.data_ptr()). */
#ifndef CHORDRT_H_
#define CHORDRT_H_

#include <stddef.h>
#include <stdint.h>

#if defined(CHORDRT_BUILDING)
#define CHORD_API __attribute__((visibility("default")))
#else
#define CHORD_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Same type as cuda.h's CUstream; repeating the typedef is valid C11/C++. */
typedef struct CUstream_st* CUstream;

/* 2: every operation takes one versioned args struct; one W4A16 weight type for both GEMM families. */
#define CHORD_ABI_VERSION 2

/* The size of an args struct up to and including `field` (its required part). */
#define CHORD_ARGS_SIZE_UNTIL(type, field) (offsetof(type, field) + sizeof(((type*)0)->field))

typedef enum chord_status {
  CHORD_SUCCESS = 0,
  CHORD_ERROR_INVALID_ARGUMENT = 1,  /* null pointer, bad shape, misalignment, bad option struct */
  CHORD_ERROR_UNSUPPORTED = 2,       /* valid request this build or device cannot serve */
  CHORD_ERROR_NO_DRIVER = 3,         /* compile-only mode: no usable libcuda.so.1 */
  CHORD_ERROR_NO_DEVICE = 4,         /* driver present but no CUDA device / context */
  CHORD_ERROR_NVRTC_UNAVAILABLE = 5, /* libnvrtc could not be loaded */
  CHORD_ERROR_COMPILE_FAILED = 6,    /* NVRTC rejected a kernel; the message carries its log */
  CHORD_ERROR_CAPTURE_MISS = 7,      /* kernel not loaded while the stream is capturing a graph */
  CHORD_ERROR_STRICT_MISS = 8,       /* CHORD_JIT_STRICT=1 and the kernel is in no cache layer */
  CHORD_ERROR_CUDA = 9,              /* a CUDA driver call failed */
  CHORD_ERROR_CACHE = 10,            /* the cache could not be read or written where it had to be */
  CHORD_ERROR_INTERNAL = 11
} chord_status_t;

CHORD_API const char* chord_status_string(chord_status_t status);
/* The message of the last failing call on this thread ("" if none). Valid until the next call. */
CHORD_API const char* chord_last_error(void);
CHORD_API void chord_get_version(int* major, int* minor, int* patch);
CHORD_API int chord_abi_version(void);

typedef struct chord_runtime_info {
  size_t struct_size;
  int driver_available; /* 0 in compile-only mode */
  int driver_version;   /* e.g. 13000; 0 when absent */
  int device_count;
  int nvrtc_major, nvrtc_minor; /* 0 when libnvrtc is missing */
  int cache_memory_only;        /* 1 when the disk cache is unusable and kernels live in memory only */
  const char* cache_dir;        /* primary cache directory; valid for the life of the process */
  uint64_t kernels_compiled;    /* NVRTC compiles done by this process */
  uint64_t disk_hits;           /* kernels loaded from a disk cache layer */
  uint64_t kernels_loaded;      /* (context, kernel) pairs loaded into the memo */
} chord_runtime_info_t;
#define CHORD_RUNTIME_INFO_MIN_SIZE sizeof(chord_runtime_info_t)
CHORD_API chord_status_t chord_get_runtime_info(chord_runtime_info_t* info);

typedef struct chord_prewarm_summary {
  size_t struct_size;
  int compiled, cached, failed;
  double median_compile_ms, max_compile_ms;
} chord_prewarm_summary_t;
#define CHORD_PREWARM_SUMMARY_MIN_SIZE sizeof(chord_prewarm_summary_t)
/* Compiles (into the disk cache) every kernel a deployment of a model dispatches, in this process.
 * model: a preset name ("kimi-k2", "deepseek-v3") or a path to a Hugging Face config.json;
 * deployment: "tp1", "tp8", "ep8", ...; arch: "sm_90a". Works without a GPU. */
CHORD_API chord_status_t chord_prewarm_model(const char* model, const char* deployment, const char* arch,
                                             chord_prewarm_summary_t* summary);

/* ---- MoE glue ------------------------------------------------------------------------------------- */

/* Capacity (elements) sorted_token_ids needs: routes + min(routes, num_experts)*(block_size-1), where
 * routes = num_tokens*top_k (each non-empty expert pads at most block_size-1 slots). vLLM's bound,
 * routes + num_experts*(block_size-1), is never smaller, so buffers sized by it are accepted too.
 * -1 for a negative num_tokens, a top_k, num_experts or block_size below 1, or a size past INT64_MAX. */
CHORD_API int64_t chord_moe_align_sorted_capacity(int64_t num_tokens, int32_t top_k, int32_t num_experts,
                                                  int32_t block_size);

typedef struct chord_moe_align_args {
  size_t struct_size;
  const int32_t* topk_ids; /* [num_tokens, top_k] global expert ids; ids outside [0, num_experts) are dropped */
  int64_t num_tokens;
  int32_t top_k;
  int32_t num_experts;
  int32_t block_size;
  int32_t* sorted_token_ids;
  int64_t sorted_token_ids_capacity; /* >= chord_moe_align_sorted_capacity(...) */
  int32_t* expert_ids;
  int64_t expert_ids_capacity; /* >= ceil(sorted capacity / block_size) */
  int32_t* num_tokens_post_padded; /* [1] */
  /* Optional [num_experts] map from global expert id to local id, -1 = not on this GPU (may be left out
   * of a smaller struct: CHORD_MOE_ALIGN_ARGS_MIN_SIZE). */
  const int32_t* expert_map;
} chord_moe_align_args_t;
#define CHORD_MOE_ALIGN_ARGS_MIN_SIZE CHORD_ARGS_SIZE_UNTIL(chord_moe_align_args_t, num_tokens_post_padded)

/* vLLM's moe_align_block_size contract. Writes, for route id r = token*top_k + j:
 *  sorted_token_ids: each expert's routes in ascending r, padded to a multiple of block_size with the
 *    sentinel num_tokens*top_k; the whole tail up to the capacity is filled with the sentinel;
 *  expert_ids: one per block (expert_map[e] when a map is given, so -1 for non-local experts), -1 past
 *    the used blocks up to expert_ids_capacity;
 *  num_tokens_post_padded[0]: number of used entries of sorted_token_ids (a multiple of block_size).
 * Nothing is read back to the host: the call is graph-capturable. */
CHORD_API chord_status_t chord_moe_align(const chord_moe_align_args_t* args, CUstream stream);

typedef struct chord_silu_and_mul_args {
  size_t struct_size;
  const void* input; /* [rows, 2*intermediate] BF16: gate half then up half */
  void* output;      /* [rows, intermediate] BF16 */
  int64_t rows;
  int64_t intermediate;
} chord_silu_and_mul_args_t;
#define CHORD_SILU_AND_MUL_ARGS_MIN_SIZE sizeof(chord_silu_and_mul_args_t)

/* output = silu(gate) * up computed in FP32. Pointers 16-byte aligned when intermediate % 8 == 0. */
CHORD_API chord_status_t chord_silu_and_mul(const chord_silu_and_mul_args_t* args, CUstream stream);

typedef struct chord_moe_combine_args {
  size_t struct_size;
  const void* expert_rows;    /* [num_tokens*top_k, hidden] BF16 */
  const float* topk_weights;  /* [num_tokens, top_k] FP32 */
  void* output;               /* [num_tokens, hidden] BF16 */
  int64_t num_tokens;
  int32_t top_k;
  int64_t hidden;
  /* Optional expert-parallel filter: when both are given, route (t, j) contributes only if
   * expert_map[topk_ids[t*top_k + j]] >= 0 (the output is this GPU's partial sum). */
  const int32_t* topk_ids;
  const int32_t* expert_map;
  int32_t num_experts;
} chord_moe_combine_args_t;
#define CHORD_MOE_COMBINE_ARGS_MIN_SIZE CHORD_ARGS_SIZE_UNTIL(chord_moe_combine_args_t, hidden)

/* output[t, :] = sum_j topk_weights[t, j] * expert_rows[t*top_k + j, :] in FP32, written as BF16. */
CHORD_API chord_status_t chord_moe_combine(const chord_moe_combine_args_t* args, CUstream stream);

/* ---- Warp decode MoE ------------------------------------------------------------------------------- */
typedef enum chord_weight_format {
  /* compressed-tensors pack-quantized (the Kimi K2 checkpoint as stored): int32 [E, N, K/8], 8 nibbles
   * per word least significant first along K, value = (nibble - 8) * scale; BF16 scales [E, N, K/32]. */
  CHORD_WEIGHT_INT4_GROUP32 = 0,
  /* OCP MXFP8: E4M3 bytes [E, N, K]; E8M0 scale bytes [E, N, K/32], scale = 2^(byte - 127). */
  CHORD_WEIGHT_MXFP8 = 1
} chord_weight_format_t;

/* Bytes of the BF16 intermediate [num_tokens*top_k, intermediate] warp decode writes between its two
 * kernels (the caller owns it, so the call allocates nothing and is graph-capturable). 0 when a size is
 * 0 or negative; SIZE_MAX when the product does not fit a size_t. */
CHORD_API size_t chord_warp_decode_moe_workspace_size(int64_t num_tokens, int32_t top_k, int32_t intermediate);

typedef struct chord_warp_decode_moe_args {
  size_t struct_size;
  int32_t format;            /* a chord_weight_format_t, as an int: any value is checked, none is undefined */
  int64_t num_tokens;        /* M, 0..128 */
  int32_t hidden;            /* H, a multiple of 32 */
  int32_t intermediate;      /* I on this GPU, a multiple of 32 */
  int32_t num_experts;       /* local experts E: the weights' leading dimension */
  int32_t top_k;             /* 1..32 */
  const void* x;             /* [M, H] BF16, 16-byte aligned */
  const int32_t* topk_ids;   /* [M, top_k]; ids outside [0, E) (or unmapped) contribute nothing */
  const float* topk_weights; /* [M, top_k] */
  const void* w13;           /* gate rows then up rows: [E, 2I, H] in `format`, 16-byte aligned */
  const void* w13_scale;
  const void* w2; /* [E, H, I] */
  const void* w2_scale;
  void* workspace; /* >= chord_warp_decode_moe_workspace_size() bytes, 16-byte aligned */
  size_t workspace_bytes;
  void* output; /* [M, H] BF16: sum_j w[t, j] * down_e(silu(gate_e x) * up_e x) over local experts */
  /* Optional expert parallelism (may be left out of a smaller struct): */
  const int32_t* expert_map;  /* [num_global_experts]: global id -> local id, -1 = elsewhere */
  int32_t num_global_experts; /* with expert_map: how many ids topk_ids may hold */
} chord_warp_decode_moe_args_t;
#define CHORD_WARP_DECODE_MOE_ARGS_MIN_SIZE CHORD_ARGS_SIZE_UNTIL(chord_warp_decode_moe_args_t, output)

/* A whole MoE expert block for a decode batch in two kernels: gate/up (each weight row read once for all
 * routes of its expert, SiLU(gate)*up written once per route) and down (each token's top-k contributions
 * summed in FP32 with the routing weights folded in, written once). No moe_align, padding or combine. */
CHORD_API chord_status_t chord_warp_decode_moe(const chord_warp_decode_moe_args_t* args, CUstream stream);

/* ---- Choosing the decode path --------------------------------------------------------------------- */
typedef enum chord_moe_decode_path {
  CHORD_MOE_DECODE_WARP = 0,   /* chord_warp_decode_moe */
  CHORD_MOE_DECODE_INDEXED = 1 /* chord_moe_align, chord_indexed_gemm (MMA layout) for gate/up and down,
                                  chord_silu_and_mul, chord_moe_combine */
} chord_moe_decode_path_t;

/* A MoE layer's expert block as one GPU holds it. */
typedef struct chord_moe_shape {
  size_t struct_size;
  int32_t format;             /* a chord_weight_format_t */
  int32_t hidden;             /* H */
  int32_t intermediate;       /* I on this GPU */
  int32_t num_experts;        /* local experts */
  int32_t num_global_experts; /* ids topk_ids may hold (== num_experts without expert parallelism) */
  int32_t top_k;
} chord_moe_shape_t;

/* The faster of the two decode paths for `num_tokens` tokens (a chord_moe_decode_path_t in *path), among
 * those that serve the shape: a model of both paths' time fitted to their measured crossover on the H200
 * (not a table of measured points). CHORD_ERROR_UNSUPPORTED when neither path serves the shape. Host only:
 * no GPU, no allocation. */
CHORD_API chord_status_t chord_moe_decode_path(const chord_moe_shape_t* shape, int64_t num_tokens, int32_t* path);

/* ---- W4A16 MoE weights (shared by the grouped and indexed GEMM families) --------------------------- */
typedef enum chord_w4a16_layout {
  CHORD_W4A16_LAYOUT_WGMMA_K64 = 0,  /* WGMMA, BLOCK_K 64: grouped contiguous (prefill) and indexed prefill */
  CHORD_W4A16_LAYOUT_WGMMA_K128 = 1, /* WGMMA, BLOCK_K 128: grouped masked (decode) */
  CHORD_W4A16_LAYOUT_MMA = 2         /* mma.sync swap-AB: indexed decode (block_m 8..32) */
} chord_w4a16_layout_t;

/* A W4A16 weight packed for one layout. Filled by chord_w4a16_pack; every GEMM checks every field (and
 * the tag, which binds them together) and rejects a weight of a layout it cannot read, naming the
 * layout it needs. The caller owns the two device buffers. */
typedef struct chord_w4a16_weight {
  size_t struct_size;
  int32_t layout; /* a chord_w4a16_layout_t */
  int32_t num_experts;
  int32_t n; /* output features per expert, a multiple of 128 */
  int32_t k; /* input features, a multiple of 64 (128 for WGMMA_K128) */
  void* packed;
  void* scale;
  uint64_t tag;
} chord_w4a16_weight_t;
#define CHORD_W4A16_WEIGHT_MIN_SIZE sizeof(chord_w4a16_weight_t)

/* Device bytes the packed weight and its scales need (both 0 and INVALID_ARGUMENT for a bad shape). */
CHORD_API chord_status_t chord_w4a16_weight_sizes(int32_t layout, int32_t num_experts, int32_t n, int32_t k,
                                                  size_t* packed_bytes, size_t* scale_bytes);

typedef struct chord_w4a16_pack_args {
  size_t struct_size;
  int32_t layout; /* a chord_w4a16_layout_t */
  int32_t num_experts, n, k;
  /* The checkpoint's quantization scheme; anything but 4 bits, group 32, symmetric, BF16 scales is
   * rejected with CHORD_ERROR_UNSUPPORTED. */
  int32_t bits, group_size, symmetric, scale_is_bf16;
  const void* weight_packed; /* int32 [E, N, K/8], nibble = q + 8, least significant first along K */
  const void* weight_scale;  /* BF16 [E, N, K/32] */
  void* packed;              /* >= packed_bytes of chord_w4a16_weight_sizes, 16-byte aligned */
  size_t packed_bytes;
  void* scale; /* >= scale_bytes, 16-byte aligned */
  size_t scale_bytes;
} chord_w4a16_pack_args_t;
#define CHORD_W4A16_PACK_ARGS_MIN_SIZE sizeof(chord_w4a16_pack_args_t)

/* Launches the packer on `stream` and fills *weight (usable once the stream reaches that point). */
CHORD_API chord_status_t chord_w4a16_pack(const chord_w4a16_pack_args_t* args, chord_w4a16_weight_t* weight,
                                          CUstream stream);

/* ---- W4A16 grouped MoE GEMMs (SM90: contiguous prefill, masked decode) ------------------------------ */
typedef struct chord_grouped_contiguous_args {
  size_t struct_size;
  const void* a;                      /* [m, K] BF16, 16-byte aligned */
  int64_t m;                          /* rows of a (may be 0) */
  const chord_w4a16_weight_t* weight; /* layout WGMMA_K64 */
  const int32_t* m_indices;           /* [m] expert of each row; -1 = padding row */
  void* out;                          /* [m, N] BF16 */
  /* Optional (may be left out of a smaller struct): stream-K scratch, as chord_indexed_args_t's. With it the
   * heuristics split the last wave's K blocks where whole tiles would leave the SMs idle for a sixth of the
   * kernel or more, so every SM ends together; without it (NULL) whole tiles are scheduled statically.
   * >= chord_grouped_workspace_size(number of SMs) bytes, 16-byte aligned, contents any (the call clears
   * what it needs on the stream); calls running at the same time need their own. */
  void* workspace;
  int64_t workspace_bytes;
} chord_grouped_contiguous_args_t;
#define CHORD_GROUPED_CONTIGUOUS_ARGS_MIN_SIZE CHORD_ARGS_SIZE_UNTIL(chord_grouped_contiguous_args_t, out)

/* Bytes of the grouped GEMMs' stream-K workspace (chord_grouped_contiguous_args_t's and
 * chord_grouped_masked_args_t's) on a GPU of num_sms SMs (1..1024), for tiles of
 * up to 128 rows of a and 256 weight rows (every configuration the heuristics pick); 0 when num_sms is out of
 * range. */
CHORD_API size_t chord_grouped_workspace_size(int32_t num_sms);

/* out = a times the weight of expert m_indices[row]. Each expert's rows are contiguous and padded to a
 * multiple of 128; a padding row (-1, or an id outside [0, E)) is skipped and not written. */
CHORD_API chord_status_t chord_grouped_contiguous(const chord_grouped_contiguous_args_t* args, CUstream stream);

typedef struct chord_grouped_masked_args {
  size_t struct_size;
  const void* a; /* [G*max_m, K] (or [G, max_m, K]) BF16, 16-byte aligned */
  int32_t max_m;
  const chord_w4a16_weight_t* weight; /* layout WGMMA_K128 */
  const int32_t* masked_m;            /* [G] on the device: rows of group g, clamped to [0, max_m] */
  int32_t expected_m;                 /* > 0, host: only picks the kernel configuration */
  void* out;                          /* [G*max_m, N] BF16 (flat); rows past masked_m[g] untouched */
  /* Optional (may be left out of a smaller struct): stream-K scratch of chord_grouped_workspace_size(SMs)
   * bytes, as chord_grouped_contiguous_args_t's. Used only under CHORD_GROUPED_CONFIG="stream_k=1" for now
   * (the masked heuristics keep whole tiles until its measurement); NULL: none. */
  void* workspace;
  int64_t workspace_bytes;
} chord_grouped_masked_args_t;
#define CHORD_GROUPED_MASKED_ARGS_MIN_SIZE CHORD_ARGS_SIZE_UNTIL(chord_grouped_masked_args_t, out)

/* out = a times expert g's weight for the first masked_m[g] rows of each group g (never read by the
 * host: graph-capturable). */
CHORD_API chord_status_t chord_grouped_masked(const chord_grouped_masked_args_t* args, CUstream stream);

/* ---- W4A16 indexed MoE GEMMs (vLLM routing: sorted_token_ids / expert_ids / num_tokens_post_padded) -- */
typedef enum chord_indexed_profile {
  CHORD_INDEXED_PROFILE_AUTO = 0, /* deduced from the shape: TP when N or K < 1024 */
  CHORD_INDEXED_PROFILE_EP = 1,   /* a few wide experts per GPU */
  CHORD_INDEXED_PROFILE_TP = 2    /* every expert, sliced narrow */
} chord_indexed_profile_t;

/* The block_m to build the routing with (moe_align's block_size) for `routed_rows` routes landing on this
 * GPU's num_experts experts, for a weight of `layout` (WGMMA_K64 or MMA) with this N and K. profile: a
 * chord_indexed_profile_t. */
CHORD_API chord_status_t chord_indexed_block_m(int32_t layout, int32_t num_experts, int32_t n, int32_t k,
                                               int64_t routed_rows, int32_t profile, int32_t* block_m);

typedef struct chord_indexed_args {
  size_t struct_size;
  const void* a;      /* [num_tokens, K] BF16, 16-byte aligned: route r reads row r / top_k */
  int64_t num_tokens; /* rows of a (for the down projection: M*topk rows with top_k = 1) */
  int32_t top_k;      /* 1..64 */
  int32_t block_m;    /* the routing's block size: WGMMA_K64 8..256 step 8, MMA 8..32 step 8 */
  const chord_w4a16_weight_t* weight; /* layout WGMMA_K64 (prefill) or MMA (decode) */
  const int32_t* sorted_token_ids;    /* [sorted_token_ids_capacity]: route ids, padding >= num_tokens*top_k */
  int64_t sorted_token_ids_capacity;
  const int32_t* expert_ids; /* [expert_ids_capacity]: one per block, -1 = not on this GPU (skipped) */
  int64_t expert_ids_capacity;
  const int32_t* num_tokens_post_padded; /* [1] on the device; never read by the host unless validating */
  void* out; /* [num_tokens*top_k, N] BF16: row r = a[r / top_k] @ W[expert of r's block]^T; rows of
                routes in no live block are not written */
  /* Optional (may be left out of a smaller struct): */
  int32_t validate; /* 1: read the routing back and check it first (synchronizes; not while capturing) */
  /* Stream-K scratch for layout WGMMA_K64 (ignored for MMA): with it every SM ends together whatever the
   * routing's count of blocks (partial tiles are summed in FP32, in a fixed order: bitwise deterministic);
   * without it (NULL) whole tiles are scheduled statically. >= chord_indexed_gemm_workspace_size(block_m,
   * number of SMs) bytes, 16-byte aligned, contents any (the call clears what it needs on the stream);
   * calls running at the same time need their own. */
  void* workspace;
  int64_t workspace_bytes;
} chord_indexed_args_t;
#define CHORD_INDEXED_ARGS_MIN_SIZE CHORD_ARGS_SIZE_UNTIL(chord_indexed_args_t, out)

/* Bytes of chord_indexed_args_t's stream-K workspace for a routing of block_m (8..256, a multiple of 8) on a
 * GPU of num_sms SMs (1..1024); 0 when either is out of range. */
CHORD_API size_t chord_indexed_gemm_workspace_size(int32_t block_m, int32_t num_sms);

/* One projection over vLLM's routing: gate_up with top_k = topk on [M, K], down with top_k = 1 on the
 * [M*topk, I] activations, then chord_moe_combine. Graph-capturable when validate = 0. */
CHORD_API chord_status_t chord_indexed_gemm(const chord_indexed_args_t* args, CUstream stream);

/* ---- Sparse MLA decode (DeepSeek-V3.2 / Mistral Large 4 attention) ---------------------------------- */
typedef enum chord_mla_cache_format {
  /* per token: 512 E4M3 latent values, 4 FP32 scales (one per 128 values, value = e4m3 * scale), then
   * rope_dims BF16 RoPE values: 656 bytes with 64 RoPE dims, 528 on NoPE layers */
  CHORD_MLA_CACHE_FP8_DS_MLA = 0,
  /* per token: 512 + rope_dims BF16 values: 1152 bytes, 1024 on NoPE layers */
  CHORD_MLA_CACHE_BF16 = 1
} chord_mla_cache_format_t;

/* Bytes of one token's record in a cache of `format` (a chord_mla_cache_format_t) with rope_dims 64 or 0;
 * 0 for anything else. A paged cache is [num_pages, page_size] records, so slot s is record s. */
CHORD_API size_t chord_mla_cache_record_bytes(int32_t format, int32_t rope_dims);

typedef struct chord_mla_cache_write_args {
  size_t struct_size;
  int32_t format;              /* a chord_mla_cache_format_t */
  int32_t rope_dims;           /* 64, or 0 on NoPE layers */
  int64_t num_tokens;          /* rows of kv */
  const void* kv;              /* [num_tokens, 512 + rope_dims] BF16, contiguous, 16-byte aligned */
  const int64_t* slot_mapping; /* [num_tokens]: the record each row goes to; -1 (or >= num_slots) = skip */
  void* cache;                 /* [num_slots] records, 16-byte aligned */
  int64_t num_slots;
} chord_mla_cache_write_args_t;
#define CHORD_MLA_CACHE_WRITE_ARGS_MIN_SIZE sizeof(chord_mla_cache_write_args_t)

/* Quantizes (fp8_ds_mla: per 128-value tile scale = max(amax / 448, FLT_MIN), values RN(x / scale)
 * saturated to E4M3; RoPE kept BF16) or copies (BF16) each row into its record. */
CHORD_API chord_status_t chord_mla_cache_write(const chord_mla_cache_write_args_t* args, CUstream stream);

typedef struct chord_sparse_mla_decode_args {
  size_t struct_size;
  int32_t format;             /* the cache's chord_mla_cache_format_t */
  int32_t num_heads;          /* h on this GPU: a multiple of 8 up to 128 (8/16/32/64/128 are the presets) */
  int32_t rope_dims;          /* 64, or 0 on NoPE layers */
  int32_t topk;               /* indices per query token: a multiple of 64 */
  int64_t num_tokens;         /* T query tokens (a decode batch, or a prefill chunk) */
  const void* q;              /* [T, h, 512 + rope_dims] BF16, contiguous, 16-byte aligned */
  const void* cache;          /* [num_slots] records of `format`, 16-byte aligned */
  int64_t num_slots;          /* indices outside [0, num_slots) count as invalid, like -1 */
  const int32_t* indices;     /* [T, topk] cache slots; -1 = invalid (skipped) */
  const int32_t* topk_length; /* optional [T]: only indices[t, :topk_length[t]] count */
  const float* attn_sink;     /* optional [h]: a logit per head that joins the softmax denominator only */
  float softmax_scale;
  void* out;       /* [T, h, 512] BF16; zero where a query has no valid key */
  float* lse;      /* [T, h] natural-log sum of exp(scale * q.k) over valid keys (the sink not
                      included); +inf where a query has no valid key */
  /* Needed when chord_sparse_mla_decode_workspace_size() is not 0 (a struct that ends before them has
   * none: CHORD_SPARSE_MLA_DECODE_ARGS_MIN_SIZE). */
  void* workspace; /* >= that many bytes, 16-byte aligned */
  size_t workspace_bytes;
} chord_sparse_mla_decode_args_t;
#define CHORD_SPARSE_MLA_DECODE_ARGS_MIN_SIZE CHORD_ARGS_SIZE_UNTIL(chord_sparse_mla_decode_args_t, lse)

/* Bytes of FP32 partial results the split top-k needs for these args on the current context's device
 * (0 when the heuristic does not split). Depends on num_tokens, num_heads, topk and the device only. */
CHORD_API chord_status_t chord_sparse_mla_decode_workspace_size(const chord_sparse_mla_decode_args_t* args,
                                                                size_t* bytes);

/* Attention of each query token over its selected cache records: out = softmax(scale * q K^T) V with
 * K = the 512 + rope_dims dims of each record and V its first 512. Graph-capturable. */
CHORD_API chord_status_t chord_sparse_mla_decode(const chord_sparse_mla_decode_args_t* args, CUstream stream);

/* ---- DSA indexer ----------------------------------------------------------------------------------- */
/* The indexer key cache: pages of page_size tokens, 132 bytes per token; within a page the page_size
 * 128-byte E4M3 keys come first, then the page_size FP32 scales (key value = e4m3 * scale). */
CHORD_API size_t chord_indexer_cache_page_bytes(int32_t page_size);

typedef struct chord_indexer_cache_write_args {
  size_t struct_size;
  int64_t num_tokens;
  const void* k;               /* [num_tokens, 128] BF16, contiguous, 16-byte aligned */
  const int64_t* slot_mapping; /* [num_tokens]: page = slot / page_size; -1 (or >= num_pages*page_size) = skip */
  void* cache;                 /* [num_pages] pages, 16-byte aligned */
  int32_t page_size;           /* tokens per page, 1..1024 */
  int64_t num_pages;
} chord_indexer_cache_write_args_t;
#define CHORD_INDEXER_CACHE_WRITE_ARGS_MIN_SIZE sizeof(chord_indexer_cache_write_args_t)

/* Per token: scale = max(amax / 448, FLT_MIN), values RN(k / scale) saturated to E4M3. */
CHORD_API chord_status_t chord_indexer_cache_write(const chord_indexer_cache_write_args_t* args, CUstream stream);

typedef struct chord_dsa_indexer_args {
  size_t struct_size;
  int32_t num_heads;          /* H_i indexer heads: 32 or 64 (any multiple of 8 up to 128) */
  int64_t num_tokens;         /* T query tokens */
  const void* q;              /* [T, H_i, 128] E4M3, contiguous, 16-byte aligned */
  const float* weights;       /* [T, H_i]: per-head weights (with q's scale folded in) */
  const void* cache;          /* the indexer key cache (chord_indexer_cache_page_bytes(page_size) per page) */
  int32_t page_size;          /* 1..1024 */
  int64_t num_pages;          /* pages in the cache: block-table entries outside [0, num_pages) are invalid */
  const int32_t* block_table; /* [T, max_pages_per_seq]: query t's context position p is in page
                                 block_table[t, p / page_size] */
  int32_t max_pages_per_seq;
  const int32_t* context_lens; /* [T]: query t sees positions [0, context_lens[t]) */
  int32_t max_context;         /* logits row length: >= every context_lens[t], a multiple of 4 */
  float* logits;               /* [T, max_context] FP32: sum_h w[t,h] * relu(q[t,h] . k_p) * scale_p; -inf
                                  past context_lens[t] */
} chord_dsa_indexer_args_t;
#define CHORD_DSA_INDEXER_ARGS_MIN_SIZE sizeof(chord_dsa_indexer_args_t)

/* The indexer's logits for every (query, context position). Graph-capturable. */
CHORD_API chord_status_t chord_dsa_indexer_logits(const chord_dsa_indexer_args_t* args, CUstream stream);

typedef struct chord_dsa_topk_args {
  size_t struct_size;
  int64_t num_tokens;  /* T rows */
  int32_t topk;        /* k selected per row (2048 in DSA), 1..4096 */
  const float* logits; /* [T, max_context] as written by chord_dsa_indexer_logits */
  int32_t max_context;
  const int32_t* context_lens; /* [T]: only positions [0, context_lens[t]) compete */
  const int32_t* block_table;  /* optional [T, max_pages_per_seq]: convert positions to cache slots
                                  (block_table[t, p / page_size] * page_size + p % page_size) */
  int32_t max_pages_per_seq;
  int32_t page_size;
  int32_t* indices; /* [T, topk]: the positions (or slots) of the topk largest logits, in no particular
                       order (ties broken arbitrarily); -1 past min(topk, context_lens[t]) */
} chord_dsa_topk_args_t;
#define CHORD_DSA_TOPK_ARGS_MIN_SIZE sizeof(chord_dsa_topk_args_t)

/* Top-k selection per row (radix select); its output feeds chord_sparse_mla_decode's indices (with
 * topk_length = min(topk, context_lens)). Graph-capturable. */
CHORD_API chord_status_t chord_dsa_topk(const chord_dsa_topk_args_t* args, CUstream stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CHORDRT_H_ */
