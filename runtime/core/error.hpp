// Errors inside chordrt: throw chordrt::Error with a precise message; the C ABI turns it into a status
// plus the thread's last-error string.
#pragma once

#include <chordrt/error.hpp>
#include <fmt/format.h>

#include <string>

namespace chordrt {

template <typename... Args>
[[noreturn]] void throw_error(chord_status_t status, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(status, fmt::format(format, std::forward<Args>(args)...));
}

// Thread-local last error used by the C ABI.
void set_last_error(const std::string& message) noexcept;
const char* last_error() noexcept;

}  // namespace chordrt
