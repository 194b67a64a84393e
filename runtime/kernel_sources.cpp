#include "runtime/kernel_sources.hpp"

#include <fmt/format.h>

#include "jit_cache/cache_key.hpp"

namespace chordrt {

const std::string& embedded_sources_fingerprint() {
  static const std::string fingerprint = [] {
    std::string material;
    for (const auto& s : embedded_sources()) {
      fmt::format_to(std::back_inserter(material), "{}:{}={}:", s.path.size(), s.path, s.text.size());
      material.append(s.text);
    }
    return jit::hex_digest128(material);
  }();
  return fingerprint;
}

}  // namespace chordrt
