// The CUDA driver, loaded at run time: dlopen("libcuda.so.1") + cuGetProcAddress. Without a driver (or
// with the toolkit's stub, CUDA_ERROR_STUB_LIBRARY) the library stays usable in compile-only mode.
#pragma once

#include <cuda.h>

#include <string>
#include <type_traits>

namespace chordrt {

struct DriverApi {
#define CHORD_DRIVER_FUNCTIONS(X)                                                                                    \
  X(cuInit, CUresult(unsigned))                                                                                      \
  X(cuDriverGetVersion, CUresult(int*))                                                                              \
  X(cuGetErrorName, CUresult(CUresult, const char**))                                                                \
  X(cuGetErrorString, CUresult(CUresult, const char**))                                                              \
  X(cuDeviceGetCount, CUresult(int*))                                                                                \
  X(cuDeviceGet, CUresult(CUdevice*, int))                                                                           \
  X(cuDeviceGetName, CUresult(char*, int, CUdevice))                                                                 \
  X(cuDeviceGetAttribute, CUresult(int*, CUdevice_attribute, CUdevice))                                              \
  X(cuDeviceTotalMem, CUresult(size_t*, CUdevice))                                                                   \
  X(cuDevicePrimaryCtxRetain, CUresult(CUcontext*, CUdevice))                                                        \
  X(cuCtxGetCurrent, CUresult(CUcontext*))                                                                           \
  X(cuCtxSetCurrent, CUresult(CUcontext))                                                                            \
  X(cuCtxPushCurrent, CUresult(CUcontext))                                                                           \
  X(cuCtxPopCurrent, CUresult(CUcontext*))                                                                           \
  X(cuCtxGetDevice, CUresult(CUdevice*))                                                                             \
  X(cuCtxSynchronize, CUresult())                                                                                    \
  X(cuStreamGetCtx, CUresult(CUstream, CUcontext*))                                                                  \
  X(cuStreamIsCapturing, CUresult(CUstream, CUstreamCaptureStatus*))                                                 \
  X(cuStreamCreate, CUresult(CUstream*, unsigned))                                                                   \
  X(cuStreamDestroy, CUresult(CUstream))                                                                             \
  X(cuStreamSynchronize, CUresult(CUstream))                                                                         \
  X(cuStreamBeginCapture, CUresult(CUstream, CUstreamCaptureMode))                                                   \
  X(cuStreamEndCapture, CUresult(CUstream, CUgraph*))                                                                \
  X(cuGraphInstantiateWithFlags, CUresult(CUgraphExec*, CUgraph, unsigned long long))                                \
  X(cuGraphLaunch, CUresult(CUgraphExec, CUstream))                                                                  \
  X(cuGraphExecDestroy, CUresult(CUgraphExec))                                                                       \
  X(cuGraphDestroy, CUresult(CUgraph))                                                                               \
  X(cuModuleLoadData, CUresult(CUmodule*, const void*))                                                              \
  X(cuModuleUnload, CUresult(CUmodule))                                                                              \
  X(cuModuleGetFunction, CUresult(CUfunction*, CUmodule, const char*))                                               \
  X(cuFuncSetAttribute, CUresult(CUfunction, CUfunction_attribute, int))                                             \
  X(cuFuncGetAttribute, CUresult(int*, CUfunction_attribute, CUfunction))                                            \
  X(cuLaunchKernelEx, CUresult(const CUlaunchConfig*, CUfunction, void**, void**))                                   \
  X(cuMemAlloc, CUresult(CUdeviceptr*, size_t))                                                                      \
  X(cuMemFree, CUresult(CUdeviceptr))                                                                                \
  X(cuMemcpyHtoD, CUresult(CUdeviceptr, const void*, size_t))                                                        \
  X(cuMemcpyDtoH, CUresult(void*, CUdeviceptr, size_t))                                                              \
  X(cuMemsetD8, CUresult(CUdeviceptr, unsigned char, size_t))                                                        \
  X(cuMemsetD32Async, CUresult(CUdeviceptr, unsigned int, size_t, CUstream))                                         \
  X(cuTensorMapEncodeTiled, CUresult(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,        \
                                     const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave, \
                                     CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill))
// Newer than the oldest driver chordrt runs on: null when the driver lacks them, and every use checks.
#define CHORD_OPTIONAL_DRIVER_FUNCTIONS(X) \
  X(cuFuncGetParamInfo, CUresult(CUfunction, size_t, size_t*, size_t*)) /* 12.4: launch argument checks */
#define CHORD_DECLARE_FN(name, type) std::add_pointer_t<type> name = nullptr;
  CHORD_DRIVER_FUNCTIONS(CHORD_DECLARE_FN)
  CHORD_OPTIONAL_DRIVER_FUNCTIONS(CHORD_DECLARE_FN)
#undef CHORD_DECLARE_FN
};

enum class DriverState { kReady, kNotFound, kStub, kNoDevice, kInitFailed };

struct Driver {
  DriverState state = DriverState::kNotFound;
  std::string message;  // why it is not ready
  int version = 0;
  int device_count = 0;
  DriverApi api;
};

// Loaded once, on first use; never throws.
const Driver& driver();

// The driver's function table; throws Error(NO_DRIVER / NO_DEVICE) naming why it is unavailable.
const DriverApi& require_driver();

// Throws Error(CUDA) "<what>: <CUDA error name>: <description>" when result != CUDA_SUCCESS.
void check_cuda(CUresult result, const char* what);

// Makes ctx current for the scope (pushes it only if it is not current already; pops on exit).
class ScopedContext {
 public:
  ScopedContext(const DriverApi& api, CUcontext ctx) : api_(api) {
    CUcontext current = nullptr;
    api_.cuCtxGetCurrent(&current);
    if (current != ctx) {
      check_cuda(api_.cuCtxPushCurrent(ctx), "cuCtxPushCurrent");
      pushed_ = true;
    }
  }
  ~ScopedContext() {
    if (pushed_) {
      CUcontext popped = nullptr;
      api_.cuCtxPopCurrent(&popped);
    }
  }
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;

 private:
  const DriverApi& api_;
  bool pushed_ = false;
};

}  // namespace chordrt
