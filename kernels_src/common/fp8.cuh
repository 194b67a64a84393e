// FP8 E4M3 quantization helpers (PTX only): IEEE division and the saturating two-value conversion.
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

}  // namespace chord
