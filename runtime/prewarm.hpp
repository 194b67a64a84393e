// Compiling descriptors ahead of time (chord-jit prewarm, chordrt::prewarm_model).
#pragma once

#include <span>
#include <string>
#include <vector>

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

// The descriptors of a JSON-lines file: one descriptor per line, or a miss recorded by
// CHORD_RECORD_MISSES ({"descriptor": ..., "reason": ...}); blank lines skipped. Distinct descriptors in
// order of first appearance (de-duplicated through a hash set: linear in the lines). Throws
// INVALID_ARGUMENT naming the line for anything else, and for a path that is not a regular file.
std::vector<jit::Descriptor> read_descriptor_lines(const std::string& path);

}  // namespace chordrt
