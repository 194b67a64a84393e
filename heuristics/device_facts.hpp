// What heuristics may know about the device: plain values, so configs are pure functions.
#pragma once

#include "jit_cache/descriptor.hpp"

namespace chordrt::heuristics {

struct DeviceFacts {
  jit::Arch arch{90, 'a'};
  int sm_count = 132;
  int max_smem_per_block_optin = 227 * 1024;
};

}  // namespace chordrt::heuristics
