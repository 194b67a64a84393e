// Fixed-width integers and BF16 for kernels compiled by NVRTC without any toolkit header.
#pragma once

namespace chord {

using int8_t = signed char;
using uint8_t = unsigned char;
using int16_t = short;
using uint16_t = unsigned short;
using int32_t = int;
using uint32_t = unsigned int;
using int64_t = long long;
using uint64_t = unsigned long long;

// BF16 as its bit pattern; conversions go through PTX so no cuda_bf16.h is needed.
struct alignas(2) bf16 {
  uint16_t bits;
};

__device__ __forceinline__ float to_float(bf16 v) { return __uint_as_float(static_cast<uint32_t>(v.bits) << 16); }

// +inf (NVRTC has no math.h INFINITY).
__device__ __forceinline__ float inf_f32() { return __int_as_float(0x7f800000); }

// Two FP32 values as one BF16 pair, lo in the low half (cvt puts its first source in the high half).
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// The same as an F16 pair.
__device__ __forceinline__ uint32_t pack_f16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// A BF16 pair as an F16 pair: exact for magnitudes in F16's normal range (8 significant bits fit in 11),
// saturated to +-65504 beyond it.
__device__ __forceinline__ uint32_t bf16x2_to_f16x2_satfinite(uint32_t w) {
  uint32_t r;
  asm("cvt.rn.satfinite.f16x2.f32 %0, %1, %2;"
      : "=r"(r)
      : "f"(__uint_as_float(w & 0xffff0000u)), "f"(__uint_as_float(w << 16)));
  return r;
}

__device__ __forceinline__ bf16 to_bf16(float f) {
  bf16 r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.bits) : "f"(f));
  return r;
}

// N consecutive BF16 values moved as one aligned vector access (N = 1, 2, 4 or 8: 2..16 bytes).
template <int N>
struct alignas(2 * N) Bf16Vec {
  bf16 v[N];
};

template <int N>
__device__ __forceinline__ Bf16Vec<N> load_vec(const bf16* p) {
  return *reinterpret_cast<const Bf16Vec<N>*>(p);
}

template <int N>
__device__ __forceinline__ void store_vec(bf16* p, const Bf16Vec<N>& v) {
  *reinterpret_cast<Bf16Vec<N>*>(p) = v;
}

}  // namespace chord
