#include "runtime/env_config.hpp"

#include <unistd.h>

#include <cstdlib>

#include "jit_cache/disk_cache.hpp"
#include "runtime/core/logging.hpp"

namespace chordrt {

namespace {
std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}
}  // namespace

EnvConfig EnvConfig::from_environment() {
  EnvConfig c;
  if (auto dir = env("CHORD_CACHE_DIR"); !dir.empty()) {
    c.cache_dir = dir;
  } else if (auto xdg = env("XDG_CACHE_HOME"); !xdg.empty()) {
    c.cache_dir = std::filesystem::path(xdg) / "chordrt";
  } else if (auto home = env("HOME"); !home.empty()) {
    c.cache_dir = std::filesystem::path(home) / ".cache" / "chordrt";
  } else {
    c.cache_dir = std::filesystem::temp_directory_path() / ("chordrt-cache-" + std::to_string(::getuid()));
  }
  std::string layers = env("CHORD_CACHE_PATH");
  size_t start = 0;
  while (start <= layers.size() && !layers.empty()) {
    size_t end = layers.find(':', start);
    std::string part = layers.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!part.empty()) c.cache_layers.emplace_back(part);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  if (auto cap = env("CHORD_CACHE_MAX_SIZE"); !cap.empty()) {
    try {
      c.cache_max_bytes = jit::parse_size(cap);
    } catch (const std::exception& e) {
      logger().warn("ignoring CHORD_CACHE_MAX_SIZE: {}", e.what());
    }
  }
  if (const std::string t = env("CHORD_CACHE_LOCK_TIMEOUT"); !t.empty()) {
    char* end = nullptr;
    const double s = std::strtod(t.c_str(), &end);
    if (end && *end == '\0' && s >= 0 && s <= 86400) {
      c.cache_lock_timeout_s = s;
    } else {
      logger().warn("CHORD_CACHE_LOCK_TIMEOUT=\"{}\" is not a number of seconds in [0, 86400]; using {}", t,
                    c.cache_lock_timeout_s);
    }
  }
  if (const std::string strict = env("CHORD_JIT_STRICT"); strict == "1") {
    c.strict = true;
  } else if (!strict.empty() && strict != "0") {
    logger().warn("CHORD_JIT_STRICT=\"{}\" is neither 0 nor 1; strict mode stays off", strict);
  }
  c.record_misses = env("CHORD_RECORD_MISSES");
  c.launch_log = env("CHORD_LAUNCH_LOG");
  c.warp_decode_override = env("CHORD_WARP_DECODE_CONFIG");
  c.grouped_override = env("CHORD_GROUPED_CONFIG");
  c.indexed_override = env("CHORD_INDEXED_CONFIG");
  c.mla_override = env("CHORD_MLA_CONFIG");
  c.dsa_override = env("CHORD_DSA_CONFIG");
  return c;
}

const EnvConfig& env_config() {
  static const EnvConfig c = EnvConfig::from_environment();
  return c;
}

}  // namespace chordrt
