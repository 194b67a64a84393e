// chord_moe_decode_path: the faster of warp decode and indexed decode for a shape and token count, among
// the paths that support it (heuristics/moe_decode_path models their times).
#pragma once

#include <cstdint>

#include "chordrt/chordrt.h"
#include "heuristics/moe_decode_path.hpp"
#include "runtime/core/device_facts.hpp"

namespace chordrt::ops {

// The heuristics' view of a C shape (an expert map when the global ids outnumber the local experts).
heuristics::WarpDecodeShape heuristic_shape(const chord_moe_shape_t& shape);

heuristics::MoeDecodePath moe_decode_path(const chord_moe_shape_t& shape, int64_t num_tokens,
                                          const DeviceFacts& facts = {});

}  // namespace chordrt::ops
