// The kernel sources embedded at build time (kernels_src/**/*.cuh), handed to NVRTC in memory.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace chordrt {

struct EmbeddedSource {
  std::string_view path;  // relative to kernels_src/, as kernels #include it
  std::string_view text;
};

std::span<const EmbeddedSource> embedded_sources();  // generated

// Hex XXH3-128 over every embedded (path, text); changes whenever any kernel source changes.
const std::string& embedded_sources_fingerprint();

}  // namespace chordrt
