// Compiling descriptors ahead of time (chord-jit prewarm, chordrt::prewarm_model).
#pragma once

#include <span>
#include <string>

#include "jit_cache/descriptor.hpp"
#include "runtime/jit_runtime.hpp"

namespace chordrt {

struct PrewarmItem {
  std::string descriptor;
  bool ok = false;
  bool cached = false;  // found in a cache layer, nothing compiled
  double compile_ms = 0;
  std::string error;
};

struct PrewarmSummary {
  int compiled = 0, cached = 0, failed = 0;
  double median_compile_ms = 0, max_compile_ms = 0;
};

// Never throws: failures are reported in the item.
PrewarmItem prewarm_one(JitRuntime& runtime, const jit::Descriptor& d);
PrewarmSummary summarize(std::span<const PrewarmItem> items);

}  // namespace chordrt
