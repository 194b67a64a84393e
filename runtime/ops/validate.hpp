// Argument checks shared by the operations; each throws INVALID_ARGUMENT naming the argument, what was
// expected and what was given.
#pragma once

#include <cstdint>

#include "runtime/core/error.hpp"

namespace chordrt::ops {

inline void require_pointer(const void* p, const char* op, const char* name, unsigned alignment) {
  if (!p) throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: {} is null", op, name);
  if (reinterpret_cast<uintptr_t>(p) % alignment != 0) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: {} must be {}-byte aligned, got address {}", op, name, alignment, p);
  }
}

inline void require_range(int64_t value, int64_t lo, int64_t hi, const char* op, const char* name) {
  if (value < lo || value > hi) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: {} must be in [{}, {}], got {}", op, name, lo, hi, value);
  }
}

}  // namespace chordrt::ops
