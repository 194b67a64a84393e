#include "runtime/core/error.hpp"

namespace chordrt {
namespace {
thread_local std::string g_last_error;
}

void set_last_error(const std::string& message) noexcept {
  try {
    g_last_error = message;
  } catch (...) {
    g_last_error.clear();
  }
}

const char* last_error() noexcept { return g_last_error.c_str(); }

}  // namespace chordrt
