// The C ABI: status strings, version, runtime info, prewarm.
#include <cstring>
#include <string>
#include <vector>

#include "runtime/c_api/c_api.hpp"
#include "runtime/driver.hpp"
#include "runtime/jit_runtime.hpp"
#include "runtime/model_plan.hpp"
#include "runtime/nvrtc_compiler.hpp"
#include "runtime/prewarm.hpp"

using chordrt::c_api::check_out;
using chordrt::c_api::guarded;
using chordrt::c_api::write_out;

extern "C" {

CHORD_API const char* chord_status_string(chord_status_t status) {
  // A C caller may pass any int: read the value's bytes, since loading an out-of-range enum is undefined
  // in C++.
  static_assert(sizeof(chord_status_t) == sizeof(int));
  int value = 0;
  std::memcpy(&value, &status, sizeof(value));
  switch (value) {
    case CHORD_SUCCESS:
      return "CHORD_SUCCESS: no error";
    case CHORD_ERROR_INVALID_ARGUMENT:
      return "CHORD_ERROR_INVALID_ARGUMENT: an argument is invalid";
    case CHORD_ERROR_UNSUPPORTED:
      return "CHORD_ERROR_UNSUPPORTED: the request is valid but not supported";
    case CHORD_ERROR_NO_DRIVER:
      return "CHORD_ERROR_NO_DRIVER: no CUDA driver (compile-only mode)";
    case CHORD_ERROR_NO_DEVICE:
      return "CHORD_ERROR_NO_DEVICE: no CUDA device";
    case CHORD_ERROR_NVRTC_UNAVAILABLE:
      return "CHORD_ERROR_NVRTC_UNAVAILABLE: libnvrtc could not be loaded";
    case CHORD_ERROR_COMPILE_FAILED:
      return "CHORD_ERROR_COMPILE_FAILED: NVRTC could not compile a kernel";
    case CHORD_ERROR_CAPTURE_MISS:
      return "CHORD_ERROR_CAPTURE_MISS: kernel not loaded during graph capture";
    case CHORD_ERROR_STRICT_MISS:
      return "CHORD_ERROR_STRICT_MISS: kernel not prewarmed (CHORD_JIT_STRICT=1)";
    case CHORD_ERROR_CUDA:
      return "CHORD_ERROR_CUDA: a CUDA driver call failed";
    case CHORD_ERROR_CACHE:
      return "CHORD_ERROR_CACHE: the kernel cache failed";
    case CHORD_ERROR_INTERNAL:
      return "CHORD_ERROR_INTERNAL: internal error";
  }
  return "unknown chord_status_t value";
}

CHORD_API const char* chord_last_error(void) { return chordrt::last_error(); }

CHORD_API void chord_get_version(int* major, int* minor, int* patch) {
  if (major) *major = CHORDRT_VERSION_MAJOR;
  if (minor) *minor = CHORDRT_VERSION_MINOR;
  if (patch) *patch = CHORDRT_VERSION_PATCH;
}

CHORD_API int chord_abi_version(void) { return CHORD_ABI_VERSION; }

CHORD_API chord_status_t chord_get_runtime_info(chord_runtime_info_t* info) {
  return guarded([&] {
    if (!info) chordrt::throw_error(CHORD_ERROR_INVALID_ARGUMENT, "chord_get_runtime_info: info is null");
    chord_runtime_info_t r{};
    r.struct_size = sizeof(r);
    const chordrt::Driver& d = chordrt::driver();
    r.driver_available = d.state == chordrt::DriverState::kReady;
    r.driver_version = d.version;
    r.device_count = d.device_count;
    if (const chordrt::Nvrtc* n = chordrt::Nvrtc::try_get()) {
      r.nvrtc_major = n->major();
      r.nvrtc_minor = n->minor();
    }
    chordrt::JitRuntime& rt = chordrt::JitRuntime::global();
    r.cache_memory_only = rt.disk().memory_only();
    // Initialized once: the primary directory is fixed for the life of the process, and assigning it on
    // every call would be a data race between threads calling this concurrently.
    static const std::string cache_dir = rt.disk().options().primary.string();
    r.cache_dir = cache_dir.c_str();
    const chordrt::JitStats s = rt.stats();
    r.kernels_compiled = s.compiled;
    r.disk_hits = s.disk_hits;
    r.kernels_loaded = s.loaded;
    write_out(info, r, CHORD_RUNTIME_INFO_MIN_SIZE, "chord_get_runtime_info");
  });
}

CHORD_API chord_status_t chord_prewarm_model(const char* model, const char* deployment, const char* arch,
                                             chord_prewarm_summary_t* summary) {
  return guarded([&] {
    if (!model || !deployment || !arch) {
      chordrt::throw_error(CHORD_ERROR_INVALID_ARGUMENT, "chord_prewarm_model: {} is null",
                           !model        ? "model"
                           : !deployment ? "deployment"
                                         : "arch");
    }
    if (summary) check_out(summary, CHORD_PREWARM_SUMMARY_MIN_SIZE, "chord_prewarm_model");
    const auto descriptors =
        chordrt::plan_descriptors(chordrt::resolve_model(model), chordrt::Deployment::parse(deployment),
                                  chordrt::DeviceFacts::offline(chordrt::Arch::parse(arch)));
    std::vector<chordrt::PrewarmItem> items;
    for (const auto& d : descriptors) items.push_back(chordrt::prewarm_one(chordrt::JitRuntime::global(), d));
    const chordrt::PrewarmSummary s = chordrt::summarize(items);
    if (summary) {
      chord_prewarm_summary_t out{};
      out.struct_size = sizeof(out);
      out.compiled = s.compiled;
      out.cached = s.cached;
      out.failed = s.failed;
      out.median_compile_ms = s.median_compile_ms;
      out.max_compile_ms = s.max_compile_ms;
      write_out(summary, out, CHORD_PREWARM_SUMMARY_MIN_SIZE, "chord_prewarm_model");
    }
    if (s.failed > 0) {
      chordrt::throw_error(CHORD_ERROR_COMPILE_FAILED, "chord_prewarm_model: {} of {} kernels failed to compile",
                           s.failed, s.failed + s.compiled + s.cached);
    }
  });
}

}  // extern "C"
