// Launch configuration of the DSA indexer kernels (key-cache writer, logits, top-k): pure functions of
// the shape and the device facts.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kernels_src/dsa_indexer/params.cuh"
#include "runtime/core/device_facts.hpp"

namespace chordrt::heuristics {

struct DsaKeyCacheWriteConfig {
  int warps;  // tokens per CTA (a warp per token)
};
DsaKeyCacheWriteConfig select_dsa_key_cache_write();
// CTAs for num_tokens rows (the kernel strides over the rest).
uint32_t dsa_key_cache_write_grid(int64_t num_tokens, const DsaKeyCacheWriteConfig& c, const DeviceFacts& facts = {});

struct DsaLogitsShape {
  int heads;
  int page_size;
  int64_t num_tokens;
  int32_t max_context;
};

struct DsaLogitsConfig {
  int stages;        // tile ring depth (64 keys per tile)
  int keys_per_cta;  // context positions per CTA (a power of two, whole tiles)
  int tma;           // 1: tiles by tensor copy (pages where logits_uses_tma), 0: by cp.async
};
// keys_per_cta the largest power of two in [256, 8192] that still gives >= 4 waves of resident CTAs
// (CTAs = tokens * ceil(max_context / keys_per_cta); the host cannot see context_lens, so max_context
// stands for every row); page size 1 caps it at 2048 (its page list is 4 bytes per key); stages the
// deepest ring (2..8) that keeps kLogitsCtasPerSm CTAs per SM in shared memory; tensor copies
// wherever the page size allows them.
DsaLogitsConfig select_dsa_logits(const DsaLogitsShape& s, const DeviceFacts& facts = {});
// CHORD_DSA_CONFIG's "stages=..,keys_per_cta=..,tma=0|1" applied to c; "" or what is wrong with the spec.
std::string apply_dsa_logits_override(std::string_view spec, DsaLogitsConfig& c);
// The config's shared memory (kernels_src/dsa_indexer/params.cuh's layout).
int dsa_logits_dynamic_smem(int heads, int page_size, const DsaLogitsConfig& c);
// Position ranges per query row: ceil(max_context / keys_per_cta).
int64_t dsa_logits_chunks(int32_t max_context, const DsaLogitsConfig& c);
// The heads rule of the logits kernel (a multiple of 8 up to 128), naming the value `name`; "" when met.
// Shared by the op's argument check and dsa_logits_config_error.
std::string dsa_heads_error(int heads, std::string_view name);
// Why (heads, page_size, c) is not a kernel the template accepts ("" when it is).
std::string dsa_logits_config_error(int heads, int page_size, const DsaLogitsConfig& c, const DeviceFacts& facts = {});

struct DsaTopkConfig {
  int threads;     // one CTA per row
  int candidates;  // shared-memory capacity for the values of the first digit's threshold bin
};
// 1024 threads (a row of 64K logits is 16 16-byte loads per thread per pass), 8192 candidates (bin
// occupancy at the top-2048 threshold of 64K Gaussian-like logits is ~1-2K).
DsaTopkConfig select_dsa_topk(int topk, const DeviceFacts& facts = {});
std::string dsa_topk_config_error(const DsaTopkConfig& c, const DeviceFacts& facts = {});

}  // namespace chordrt::heuristics
