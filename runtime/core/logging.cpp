#include "runtime/core/logging.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>

namespace chordrt {

spdlog::logger& logger() {
  static const std::shared_ptr<spdlog::logger> instance = [] {
    auto l = std::make_shared<spdlog::logger>("chordrt", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    l->set_pattern("[chordrt %L] %v");
    const char* level = std::getenv("CHORD_LOG_LEVEL");
    l->set_level(level && *level ? spdlog::level::from_str(level) : spdlog::level::warn);
    return l;
  }();
  return *instance;
}

}  // namespace chordrt
