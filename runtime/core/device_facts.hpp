// What heuristics (and the planner, for an offline target) may know about the device: plain values, so configs are pure
// functions.
#pragma once

#include "runtime/core/arch.hpp"

namespace chordrt {

struct DeviceFacts {
  Arch arch{90, 'a'};
  int sm_count = 132;
  int max_smem_per_block_optin = 227 * 1024;
  // Peak DRAM bandwidth from the memory clock and bus width (an H200: 3.2 GHz x 2 x 6144 bits = 4.9 TB/s;
  // its streaming read reaches ~95% of it). Models that weigh bytes against fixed costs use it.
  double dram_peak_tbps = 4.92;

  // The facts an offline prewarm (no device) plans for: sm_90a means an H100/H200 SXM (132 SMs,
  // 227 KB of opt-in shared memory per block, an H200's bandwidth), the defaults above, with `arch` as given.
  static DeviceFacts offline(Arch arch) {
    DeviceFacts f;
    f.arch = arch;
    return f;
  }
};

}  // namespace chordrt
