// Configuration of the W4A16 indexed family (vLLM routing): the deployment profile, the block_m a
// routing should be aligned with, and each profile kernel's configuration. Pure functions of the shape,
// the routed rows and the device facts.
#pragma once

#include <cstdint>
#include <string>

#include "heuristics/grouped.hpp"
#include "kernels_src/indexed/params.cuh"
#include "runtime/core/device_facts.hpp"

namespace chordrt::heuristics {

// Chosen at packing: the WGMMA prefill/mixed kernel's layout (kWgmmaK64) or the mma.sync decode
// kernel's (kMma); the indexed GEMMs read no other.
using W4a16Layout = chord::w4a16::Layout;
// EP (a few wide experts per GPU) or TP (every expert, sliced narrow). kAuto deduces it from the shape.
enum class IndexedProfile : int { kAuto = 0, kExpertParallel = 1, kTensorParallel = 2 };

struct IndexedShape {
  W4a16Layout layout = W4a16Layout::kWgmmaK64;
  int64_t n = 0, k = 0;
  int experts = 0;
};

// "" when the layout is one the indexed GEMMs read and can hold the shape (n a multiple of 128, k of 64,
// 1..1024 experts), else why not, naming the field.
std::string indexed_shape_error(const IndexedShape& s);

// TP when the per-expert slice is narrow (N or K under 1024: an intermediate dimension cut by TP),
// EP otherwise. An explicit profile is returned as given.
IndexedProfile resolve_indexed_profile(const IndexedShape& s, IndexedProfile requested);

// Expected sum over experts of ceil(rows_e / block_m) when `routed_rows` routes land independently and
// uniformly on `experts` experts (vLLM's benchmark routing): the blocks moe_align will produce.
double expected_indexed_blocks(int experts, int64_t routed_rows, int block_m);

// The block_m to align the routing with (moe_align's block_size) for `routed_rows` routes on this GPU.
// Minimizes the expected blocks times a block's cost over the layout's block_m range: the mma layout
// picks 8/16/24; the wgmma layout multiples of 8 while a 512-row tile holds the block (up to 64 on long K,
// 48 on short K), of 16 above, up to 128.
int select_indexed_block_m(const IndexedShape& s, int64_t routed_rows, IndexedProfile profile = IndexedProfile::kAuto,
                           const DeviceFacts& facts = {});

// Prefill (wgmma layout): the grouped kernel in indexed mode, tile rows = the routing's block_m.
// stream_k_workspace: the call brings a stream-K workspace (chord_indexed_args_t.workspace), which lets
// the configurations measured faster with stream-K use it.
GroupedConfig select_indexed_prefill(const IndexedShape& s, int block_m, int64_t routed_rows,
                                     const DeviceFacts& facts = {}, bool stream_k_workspace = false);

// Decode (mma layout).
struct IndexedDecodeConfig {
  int block_m = 8;
  int depth = 4;  // 64-K chunks of weights loaded ahead per warp
};
std::string indexed_decode_config_error(const IndexedShape& s, const IndexedDecodeConfig& c);
IndexedDecodeConfig select_indexed_decode(const IndexedShape& s, int block_m);

}  // namespace chordrt::heuristics
