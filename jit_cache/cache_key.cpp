#include "jit_cache/cache_key.hpp"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>

#include "runtime/core/error.hpp"

namespace chordrt::jit {

std::string hex_digest128(std::string_view bytes) {
  XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  return fmt::format("{:016x}{:016x}", h.high64, h.low64);
}

void check_options_are_portable(const std::vector<std::string>& options) {
  for (const auto& o : options) {
    auto eq = o.find('=');
    std::string_view value = eq == std::string::npos ? std::string_view(o) : std::string_view(o).substr(eq + 1);
    if (value.starts_with('/') || o.starts_with("-I")) {
      throw_error(CHORD_ERROR_INTERNAL, "NVRTC option \"{}\" names a path: keys must not depend on install paths", o);
    }
  }
}

std::string compute_cache_key(const KeyInputs& in) {
  check_options_are_portable(in.options);
  std::vector<std::string> options = in.options;
  std::sort(options.begin(), options.end());
  options.erase(std::unique(options.begin(), options.end()), options.end());

  std::string material;
  auto add = [&](std::string_view name, std::string_view value) {
    fmt::format_to(std::back_inserter(material), "{}:{}={}:{};", name.size(), name, value.size(), value);
  };
  add("abi", std::to_string(in.abi_version));
  add("nvrtc", fmt::format("{}.{}", in.nvrtc_major, in.nvrtc_minor));
  for (const auto& o : options) add("option", o);
  add("sources", in.source_fingerprint);
  add("descriptor", in.canonical_descriptor);
  return hex_digest128(material);
}

}  // namespace chordrt::jit
