// Tensor maps (TMA descriptors) of global tensors, encoded through the driver and kept per thread: the
// same buffers recur every step, and encoding costs host time on every call otherwise.
#pragma once

#include <cuda.h>

#include <array>
#include <cstdint>

#include "kernels_src/common/host_device.cuh"

namespace chordrt {

// The launch copies the 128 bytes into the kernel's parameter space (the host copy may be more aligned).
static_assert(sizeof(CUtensorMap) == sizeof(chord::TensorMap) && alignof(CUtensorMap) >= alignof(chord::TensorMap),
              "a kernel's TensorMap parameter is a CUtensorMap");

// A tiled map in the 128-byte swizzle (the layout wgmma's K-major descriptors read): `rank` dimensions,
// innermost first; strides[i] is the byte stride of dimension i + 1.
struct TiledTensorMapSpec {
  CUtensorMapDataType type = CU_TENSOR_MAP_DATA_TYPE_UINT8;
  uint32_t rank = 0;  // 2 or 3
  const void* address = nullptr;
  std::array<uint64_t, 3> dims{};
  std::array<uint64_t, 2> strides{};
  std::array<uint32_t, 3> box{};
  bool operator==(const TiledTensorMapSpec&) const = default;
};

// The encoded map of `spec`, from this thread's cache of the last 16 (throws on a driver error).
const CUtensorMap& tiled_tensor_map(const TiledTensorMapSpec& spec, const char* what);

}  // namespace chordrt
