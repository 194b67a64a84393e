#include "runtime/core/logging.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <string_view>

namespace chordrt {

spdlog::logger& logger() {
  static const std::shared_ptr<spdlog::logger> instance = [] {
    auto l = std::make_shared<spdlog::logger>("chordrt", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    l->set_pattern("[chordrt %L] %v");
    l->set_level(spdlog::level::warn);
    // spdlog reads an unknown name as "off", which would silence every warning: only known names count.
    if (const char* level = std::getenv("CHORD_LOG_LEVEL"); level && *level) {
      const std::string_view name(level);
      bool known = false;
      for (const std::string_view k :
           {"trace", "debug", "info", "warn", "warning", "error", "err", "critical", "off"}) {
        known = known || name == k;
      }
      if (known) {
        l->set_level(spdlog::level::from_str(level));
      } else {
        l->warn("CHORD_LOG_LEVEL=\"{}\" is not one of trace, debug, info, warn, error, critical, off; using warn",
                name);
      }
    }
    return l;
  }();
  return *instance;
}

}  // namespace chordrt
