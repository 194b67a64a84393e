// chordrt::Error: a status (chord_status_t) and a message that names what was expected and what was
// given. Thrown by the C++ API (chordrt.hpp) and inside the library, where the C ABI turns it back
// into a status and the thread's last-error string.
#pragma once

#include <chordrt/chordrt.h>

#include <stdexcept>
#include <string>

namespace chordrt {

class CHORD_API Error : public std::runtime_error {
 public:
  Error(chord_status_t status, const std::string& message) : std::runtime_error(message), status_(status) {}
  chord_status_t status() const noexcept { return status_; }

 private:
  chord_status_t status_;
};

}  // namespace chordrt
