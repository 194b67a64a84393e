// Argument checks shared by the operations; each throws INVALID_ARGUMENT naming the argument, what was
// expected and what was given.
#pragma once

#include <cstdint>
#include <initializer_list>

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

// A tensor of `elements` (a product of sizes) elements of `element_bytes` bytes must be addressable: its
// byte size fits int64 (sizes that multiply past it would wrap in index arithmetic).
inline void require_addressable(const char* op, const char* name, std::initializer_list<int64_t> sizes,
                                int64_t element_bytes) {
  int64_t bytes = element_bytes;
  for (const int64_t n : sizes) {
    if (n < 0 || __builtin_mul_overflow(bytes, n, &bytes)) {
      throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: {} would be larger than 2^63 bytes (the sizes overflow)", op,
                  name);
    }
  }
}

}  // namespace chordrt::ops
