// Configuration of the W4A16 grouped GEMM (contiguous prefill, masked decode, and the indexed family's
// gathering prefill): pure functions of the shape, the rows hint and the device facts. Tile constants
// and the shared-memory layout come from kernels_src/grouped/params.cuh (the kernel's own).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kernels_src/grouped/params.cuh"
#include "runtime/core/device_facts.hpp"

namespace chordrt::heuristics {

// The kernel's MODE. kIndexed: gathering vLLM-routed rows (the indexed family's prefill).
enum class GroupedMode : int {
  kContiguous = chord::grouped::kContiguous,
  kMasked = chord::grouped::kMasked,
  kIndexed = chord::grouped::kIndexed,
};

// The packed layout's K block: contiguous and indexed 64, masked 128 (a shared-memory stage holds one).
constexpr int grouped_block_k(GroupedMode mode) { return chord::grouped::block_k_of_mode(static_cast<int>(mode)); }

struct GroupedShape {
  GroupedMode mode = GroupedMode::kContiguous;
  int64_t n = 0, k = 0;
  int experts = 0;
};

struct GroupedConfig {
  int block_m = 128;  // tokens per tile (wgmma N), a multiple of 8 up to 256
  int slices = 2;     // 64-row weight slices per consumer warpgroup: tile N = 128 * slices
  int stages = 4;     // shared-memory ring depth, one K block per stage
  int consumers = 2;  // consumer warpgroups, 2 or 4: tile N = 64 * slices * consumers
  int ring = 0;       // chord::grouped::kRingBlock / kRingStep / kRingSingle / kRingHalf: fragment buffering
  int stream_k = 0;   // 1: stream-K over the caller's workspace (indexed and contiguous modes, long K; params.cuh)
};

// Dynamic shared memory of a configuration: chord::grouped::gemm_smem_bytes, the kernel's layout.
int64_t grouped_dynamic_smem(const GroupedShape& s, const GroupedConfig& c);

// Registers per consumer thread the configuration needs (accumulators + the ring's fragment buffers: two
// of a K block, two of a k16 step plus the block's packed words, or one of a K block; + ~40 for addresses
// and scales), checked
// against the chord::grouped::consumer_registers a consumer gets.
int grouped_consumer_registers(const GroupedShape& s, const GroupedConfig& c);

// The deepest ring (at most 8 stages) of c's tile that fits the device's shared memory.
int grouped_deepest_ring(const GroupedShape& s, GroupedConfig c, const DeviceFacts& facts = {});

// "" when (s, c) is a valid kernel, else why not, naming the field (n, k, experts, block_m, slices,
// stages, consumers, ring, stream_k), its range and its value. The one check of program() and of CHORD_GROUPED_CONFIG.
std::string grouped_config_error(const GroupedShape& s, const GroupedConfig& c, const DeviceFacts& facts = {});

// rows_hint: contiguous m (total rows, padding included); masked expected_m (tokens per expert).
// stream_k_workspace: the (contiguous) call brings a stream-K workspace; then long K takes stream-K where whole
// tiles would idle the SMs for 1/6 of the kernel or more.
GroupedConfig select_grouped(const GroupedShape& s, int64_t rows_hint, const DeviceFacts& facts = {},
                             bool stream_k_workspace = false);

// Experiments: "block_m=64,slices=1,stages=6,consumers=4,ring=1,stream_k=0" overrides fields of c; returns "" or
// what was wrong.
std::string apply_grouped_override(std::string_view spec, GroupedConfig& c);

}  // namespace chordrt::heuristics
