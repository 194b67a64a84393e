// The C ABI's shared machinery: exceptions turned into a status and the thread's last error, and args
// structs read by their declared size.
#pragma once

#include <cstring>
#include <new>

#include "chordrt/chordrt.h"
#include "runtime/core/error.hpp"

namespace chordrt::c_api {

template <typename F>
chord_status_t guarded(F&& body) noexcept {
  try {
    body();
    return CHORD_SUCCESS;
  } catch (const Error& e) {
    set_last_error(e.what());
    return e.status();
  } catch (const std::bad_alloc&) {
    set_last_error("out of host memory");
    return CHORD_ERROR_INTERNAL;
  } catch (const std::exception& e) {
    set_last_error(e.what());
    return CHORD_ERROR_INTERNAL;
  } catch (...) {
    set_last_error("unknown exception");
    return CHORD_ERROR_INTERNAL;
  }
}

// A caller's args struct as this library's version of it: struct_size must lie in [min_size, sizeof(T)]
// (a caller built against an older header passes a smaller struct); the fields past it read as zero.
template <typename T>
T read_args(const T* p, size_t min_size, const char* what) {
  if (!p) throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: args is null", what);
  if (p->struct_size < min_size || p->struct_size > sizeof(T)) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: struct_size must be in [{}, {}], got {}", what, min_size, sizeof(T),
                p->struct_size);
  }
  T copy{};
  std::memcpy(static_cast<void*>(&copy), p, p->struct_size);
  return copy;
}

// Output structs (filled by the library): struct_size as for read_args. A call checks it before doing
// any work (check_out), so that a bad struct cannot cost a whole run; only that many bytes are written.
template <typename T>
void check_out(const T* p, size_t min_size, const char* what) {
  if (p->struct_size < min_size || p->struct_size > sizeof(T)) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: struct_size must be in [{}, {}], got {}", what, min_size, sizeof(T),
                p->struct_size);
  }
}

template <typename T>
void write_out(T* p, const T& value, size_t min_size, const char* what) {
  check_out(p, min_size, what);
  const size_t size = p->struct_size;
  std::memcpy(static_cast<void*>(p), &value, size);
  p->struct_size = size;
}

}  // namespace chordrt::c_api
