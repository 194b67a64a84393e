// Flags one CTA raises for another on the same GPU (stream-K's partial tiles): a release store after the
// data it guards, an acquire load before reading that data.
#pragma once

#include "common/types.cuh"

namespace chord {

__device__ __forceinline__ void flag_release(int32_t* flag, int32_t value) {
  asm volatile("st.release.gpu.global.s32 [%0], %1;" ::"l"(flag), "r"(value) : "memory");
}

__device__ __forceinline__ int32_t flag_acquire(const int32_t* flag) {
  int32_t value;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(value) : "l"(flag) : "memory");
  return value;
}

}  // namespace chord
