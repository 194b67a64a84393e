// FP8 E4M3 helpers (PTX only): IEEE division and the saturating two-value conversion (quantizing), and
// the exact E4M3 -> F16 conversion (reading).
#pragma once

#include "common/types.cuh"

namespace chord {

// a / b correctly rounded (div.rn), so a host or torch reference reproduces quantized bytes exactly.
__device__ __forceinline__ float div_rn(float a, float b) {
  float r;
  asm("div.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

// Two FP32 values to two E4M3 bytes (round to nearest even, saturated to +-448), lo at the lower address
// (cvt puts its first source in the upper byte).
__device__ __forceinline__ uint32_t e4m3x2_satfinite(float lo, float hi) {
  uint16_t r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}

// Four E4M3 bytes -> two F16 pairs (exact: F16 holds every E4M3 value): lo from bytes 0-1, hi from 2-3.
__device__ __forceinline__ void e4m3x4_to_f16x2(uint32_t x, uint32_t& lo, uint32_t& hi) {
  asm("{\n\t.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.rn.f16x2.e4m3x2 %0, l;\n\tcvt.rn.f16x2.e4m3x2 %1, h;\n}"
      : "=r"(lo), "=r"(hi)
      : "r"(x));
}

// An F16 pair (x2 F16) times an FP32 scale as an F16 pair: one rounding of each exact product (relative
// error <= 2^-11); products past F16's range saturate to +-65504.
__device__ __forceinline__ uint32_t f16x2_scaled(uint32_t x2, float scale) {
  uint32_t r;
  asm("{\n\t.reg .b16 l, h;\n\t.reg .f32 fl, fh;\n\tmov.b32 {l, h}, %1;\n\tcvt.f32.f16 fl, l;\n\tcvt.f32.f16 fh, h;\n\t"
      "mul.f32 fl, fl, %2;\n\tmul.f32 fh, fh, %2;\n\tcvt.rn.satfinite.f16x2.f32 %0, fh, fl;\n}"
      : "=r"(r)
      : "r"(x2), "f"(scale));
  return r;
}

}  // namespace chord
