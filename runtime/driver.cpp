#include "runtime/driver.hpp"

#include <dlfcn.h>

#include "runtime/core/error.hpp"

namespace chordrt {

namespace {

// Every entry point is requested at the CUDA 12.0 ABI, the version whose signatures DriverApi spells.
constexpr int kRequestedApiVersion = 12000;
// The optional entry points are requested at the version that introduced them.
constexpr int kOptionalApiVersion = 12040;

using GetProcAddressV2 = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

Driver load_driver() {
  Driver d;
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = ::dlerror();
    d.state = DriverState::kNotFound;
    d.message = fmt::format("libcuda.so.1 could not be loaded ({})", why ? why : "not found");
    return d;
  }
  auto get_proc = reinterpret_cast<GetProcAddressV2>(::dlsym(lib, "cuGetProcAddress_v2"));
  if (!get_proc) {
    d.state = DriverState::kInitFailed;
    d.message = "libcuda.so.1 has no cuGetProcAddress_v2 (driver older than CUDA 12.0)";
    return d;
  }
  std::string missing;
  auto resolve = [&](const char* name, int version) -> void* {
    void* fn = nullptr;
    CUdriverProcAddressQueryResult status{};
    if (get_proc(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS) return nullptr;
    return fn;
  };
#define CHORD_LOAD_FN(name, type)                                                             \
  if (!(d.api.name = reinterpret_cast<std::add_pointer_t<type>>(resolve(#name, kRequestedApiVersion)))) \
    missing += " " #name;
  CHORD_DRIVER_FUNCTIONS(CHORD_LOAD_FN)
#undef CHORD_LOAD_FN
#define CHORD_LOAD_OPTIONAL_FN(name, type) \
  d.api.name = reinterpret_cast<std::add_pointer_t<type>>(resolve(#name, kOptionalApiVersion));
  CHORD_OPTIONAL_DRIVER_FUNCTIONS(CHORD_LOAD_OPTIONAL_FN)
#undef CHORD_LOAD_OPTIONAL_FN
  if (!missing.empty()) {
    d.state = DriverState::kInitFailed;
    d.message = "libcuda.so.1 lacks:" + missing;
    return d;
  }
  CUresult r = d.api.cuInit(0);
  if (r == CUDA_ERROR_STUB_LIBRARY) {
    d.state = DriverState::kStub;
    d.message = "libcuda.so.1 is the CUDA toolkit's stub library, not a driver";
    return d;
  }
  if (r == CUDA_ERROR_NO_DEVICE) {
    d.state = DriverState::kNoDevice;
    d.message = "the CUDA driver reports no device";
    return d;
  }
  if (r != CUDA_SUCCESS) {
    const char* name = "unknown";
    d.api.cuGetErrorName(r, &name);
    d.state = DriverState::kInitFailed;
    d.message = fmt::format("cuInit failed: {} ({})", name, static_cast<int>(r));
    return d;
  }
  d.api.cuDriverGetVersion(&d.version);
  d.api.cuDeviceGetCount(&d.device_count);
  if (d.device_count == 0) {
    d.state = DriverState::kNoDevice;
    d.message = "the CUDA driver reports no device";
    return d;
  }
  d.state = DriverState::kReady;
  return d;
}

}  // namespace

const Driver& driver() {
  static const Driver d = load_driver();
  return d;
}

const DriverApi& require_driver() {
  const Driver& d = driver();
  if (d.state == DriverState::kReady) return d.api;
  if (d.state == DriverState::kNoDevice) throw_error(CHORD_ERROR_NO_DEVICE, "no CUDA device: {}", d.message);
  throw_error(CHORD_ERROR_NO_DRIVER,
              "no CUDA driver: {}; chordrt runs in compile-only mode (kernels compile and cache, launches fail)",
              d.message);
}

void check_cuda(CUresult result, const char* what) {
  if (result == CUDA_SUCCESS) return;
  const char* name = "CUDA_ERROR_UNKNOWN";
  const char* text = "";
  const DriverApi& api = driver().api;
  if (api.cuGetErrorName) api.cuGetErrorName(result, &name);
  if (api.cuGetErrorString) api.cuGetErrorString(result, &text);
  throw_error(CHORD_ERROR_CUDA, "{}: {} ({})", what, name, text ? text : "");
}

}  // namespace chordrt
