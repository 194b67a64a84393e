// What a family's params.cuh may use, so that it compiles both under NVRTC (device code) and as plain
// C++ in the host library: fixed-width integers in namespace chord and CHORD_HD for constexpr functions
// both sides call. No device code here.
#pragma once

#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
#include "common/types.cuh"
#define CHORD_HD __host__ __device__
#else
#include <cstdint>
namespace chord {
using std::int16_t;
using std::int32_t;
using std::int64_t;
using std::int8_t;
using std::uint16_t;
using std::uint32_t;
using std::uint64_t;
using std::uint8_t;
// BF16 as its bit pattern (common/types.cuh on the device): the host passes pointers to it only.
struct bf16;
}  // namespace chord
#define CHORD_HD
#endif

namespace chord {
// CUtensorMap as a kernel sees it: 128 opaque bytes, passed by value as a __grid_constant__ parameter
// (runtime/tensor_map.hpp static_asserts CUtensorMap against it).
struct alignas(64) TensorMap {
  uint64_t opaque[16];
};
static_assert(sizeof(TensorMap) == 128 && alignof(TensorMap) == 64, "CUtensorMap's size and alignment");
}  // namespace chord
