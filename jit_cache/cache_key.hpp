// The disk-cache key: XXH3-128 over everything that determines the compiled cubin.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace chordrt::jit {

struct KeyInputs {
  std::string canonical_descriptor;  // canonical_serialization(descriptor)
  int nvrtc_major = 0, nvrtc_minor = 0;
  std::vector<std::string> options;  // NVRTC options (normalized by the key: sorted, deduplicated)
  std::string source_fingerprint;    // fingerprint of the exact sources handed to NVRTC
  int abi_version = 0;
};

// 32 lowercase hex characters.
std::string compute_cache_key(const KeyInputs& inputs);

// Hex XXH3-128 of a byte string (used for source fingerprints and checksums).
std::string hex_digest128(std::string_view bytes);

// Rejects option lists that would make keys depend on the machine (absolute paths).
void check_options_are_portable(const std::vector<std::string>& options);

}  // namespace chordrt::jit
