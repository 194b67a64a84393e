// Helpers for [gpu] tests: device buffers through chordrt's own driver table, and a clean skip when
// there is no GPU (the tests then pass without checking anything, and say so).
#pragma once

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/driver.hpp"

namespace chordrt::test {

// Makes device 0's primary context current; false (after a WARN) when there is no usable GPU.
inline bool gpu_ready() {
  const Driver& d = driver();
  if (d.state != DriverState::kReady) {
    WARN("skipped: no CUDA device (" << d.message << ")");
    return false;
  }
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  check_cuda(d.api.cuDeviceGet(&dev, 0), "cuDeviceGet");
  check_cuda(d.api.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check_cuda(d.api.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  return true;
}

#define CHORD_REQUIRE_GPU() \
  if (!::chordrt::test::gpu_ready()) return

template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t count) : count_(count) {
    check_cuda(driver().api.cuMemAlloc(&ptr_, std::max<size_t>(count, 1) * sizeof(T)), "cuMemAlloc");
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() { driver().api.cuMemFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void upload(const std::vector<T>& host) {
    REQUIRE(host.size() == count_);
    if (count_) check_cuda(driver().api.cuMemcpyHtoD(ptr_, host.data(), count_ * sizeof(T)), "cuMemcpyHtoD");
  }
  std::vector<T> download() const {
    check_cuda(driver().api.cuCtxSynchronize(), "cuCtxSynchronize");
    std::vector<T> host(count_);
    if (count_) check_cuda(driver().api.cuMemcpyDtoH(host.data(), ptr_, count_ * sizeof(T)), "cuMemcpyDtoH");
    return host;
  }
  // Every byte set to `byte`, so unwritten outputs show.
  void poison(unsigned char byte) { check_cuda(driver().api.cuMemsetD8(ptr_, byte, count_ * sizeof(T)), "cuMemsetD8"); }
  T* get() const { return reinterpret_cast<T*>(ptr_); }
  size_t size() const { return count_; }

 private:
  CUdeviceptr ptr_ = 0;
  size_t count_;
};

inline float bf16_to_float(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t float_to_bf16(float f) {  // round to nearest even, as cvt.rn.bf16.f32
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline std::vector<uint16_t> random_bf16(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = float_to_bf16(dist(rng));
  return v;
}

}  // namespace chordrt::test
