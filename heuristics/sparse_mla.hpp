// Launch configuration of sparse MLA decode: the head group a CTA owns (the MMA N extent), its warps and
// pipeline depth, and how many CTAs split each query's top-k. Pure functions of the shape and device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "kernels_src/sparse_mla/params.cuh"
#include "runtime/core/device_facts.hpp"

namespace chordrt::heuristics {

struct SparseMlaShape {
  int format = chord::sparse_mla::kFp8DsMla;  // a chord::sparse_mla::CacheFormat
  int rope_dims = 64;
  int num_heads = 0;
  int topk = 0;
  int64_t num_tokens = 0;
};

struct SparseMlaConfig {
  int head_group;  // heads per CTA: 8, 16, 32 (decode.cuh) or 64 (decode_wgmma.cuh, fp8_ds_mla); divides num_heads
  int warps;       // decode.cuh: 4, 8 or 16 (four 16-key groups, times head or dim splits); decode_wgmma.cuh: 12
  int stages;      // 64-key blocks in flight per CTA
  int splits;      // CTAs sharing one (token, head group)'s top-k; > 1 adds the combine kernel
  int blocks_per_split;
  int pair;  // 1: a token's two 64-head CTAs as a 2-CTA cluster sharing each block's gather (128 heads)
};

// "" when the kernels serve the shape (format, RoPE dims, a multiple of 8 heads up to 128, topk a
// positive multiple of 64 up to 2^20, tokens up to 65535), else why not: the one statement of the rule
// that dispatch, the kernel families and the planner apply.
std::string sparse_mla_shape_error(const SparseMlaShape& s);

// Head group, warps and stages for the shape (no split yet).
SparseMlaConfig select_sparse_mla_kernel(const SparseMlaShape& s, const DeviceFacts& facts);
// Adds the split: the count that minimizes waves x blocks per split (+ the combine's cost) on the SMs.
SparseMlaConfig select_sparse_mla(const SparseMlaShape& s, const DeviceFacts& facts);

// The 128-head cluster pair (1) where the config runs two 64-head groups on wgmma and each split holds
// enough blocks to pay for the cluster's hand-offs, else 0.
int select_sparse_mla_pair(const SparseMlaShape& s, const SparseMlaConfig& c);

// CTAs of one config resident per SM (shared memory and registers).
int sparse_mla_ctas_per_sm(const SparseMlaShape& s, const SparseMlaConfig& c);

// Workspace bytes for the FP32 partials (0 without a split).
size_t sparse_mla_workspace_bytes(const SparseMlaShape& s, const SparseMlaConfig& c);

// "head_group=16,warps=4,stages=2,splits=8,pair=0" (any subset): experiment overrides; returns an error
// message or "" (the result is validated by the caller against the shape).
std::string apply_sparse_mla_override(std::string_view spec, SparseMlaConfig& c);
// The override applied to shape s's config: the named fields set, the ones that follow from them
// re-derived (blocks_per_split from splits; pair by select_sparse_mla_pair unless named). The config is
// unchanged when the spec is bad.
std::string resolve_sparse_mla_override(std::string_view spec, const SparseMlaShape& s, SparseMlaConfig& c);
// "" when the config can serve the shape, else why not.
std::string sparse_mla_config_error(const SparseMlaShape& s, const SparseMlaConfig& c, const DeviceFacts& facts);

}  // namespace chordrt::heuristics
