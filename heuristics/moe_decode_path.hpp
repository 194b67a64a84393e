// Which of chordrt's two decode paths runs a whole MoE block faster: warp decode (chord_warp_decode_moe)
// or indexed decode (moe_align, two MMA-layout indexed GEMMs, silu_and_mul, moe_combine). A pure model of
// both paths' time, fitted to the decode crossover benchmark on the H200; the op (runtime/ops/
// moe_decode_path) adds what each path supports.
#pragma once

#include <cstdint>

#include "heuristics/warp_decode.hpp"
#include "runtime/core/device_facts.hpp"

namespace chordrt::heuristics {

enum class MoeDecodePath : int { kWarp = 0, kIndexed = 1 };

struct DecodePathTimes {
  double warp_us, indexed_us;
};

// Bytes of one local expert's weights and scales (gate/up and down) in the shape's format.
double moe_expert_bytes(const WarpDecodeShape& s);
// Modeled µs of each path for `tokens` (each as if it supported the shape): a fixed cost (launches, the
// first weight bytes' latency, the glue kernels) plus the expected touched experts' bytes at the path's
// sustained fraction of the device's streaming read.
DecodePathTimes model_decode_path_times(const WarpDecodeShape& s, int64_t tokens, const DeviceFacts& facts = {});
// The faster path by that model.
MoeDecodePath faster_decode_path(const WarpDecodeShape& s, int64_t tokens, const DeviceFacts& facts = {});

}  // namespace chordrt::heuristics
