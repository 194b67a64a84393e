// The library's spdlog logger ("chordrt", stderr). Level from CHORD_LOG_LEVEL (trace, debug, info,
// warn, error, off; default warn), read once.
#pragma once

#include <spdlog/spdlog.h>

namespace chordrt {
spdlog::logger& logger();
}
