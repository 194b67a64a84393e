// cp.async (global -> shared, asynchronous) and its group bookkeeping.
#pragma once

#include "common/types.cuh"

namespace chord {

__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// BYTES = 4, 8 or 16; 16-byte copies bypass L1 (streamed weights), smaller ones go through it.
template <int BYTES>
__device__ __forceinline__ void cp_async(void* smem, const void* gmem) {
  static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async copies 4, 8 or 16 bytes");
  if constexpr (BYTES == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_address(smem)), "l"(gmem) : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(smem_address(smem)), "l"(gmem), "n"(BYTES)
                 : "memory");
  }
}

// 16 bytes, L2 fetching the whole 256-byte block around `gmem` (the neighbouring pieces of a row that
// other copies read next then come from L2 instead of one DRAM request each).
__device__ __forceinline__ void cp_async_16_l2_256(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;" ::"r"(smem_address(smem)), "l"(gmem) : "memory");
}

// 16 bytes, or 16 zero bytes when !valid (nothing is read then: `gmem` need not be dereferenceable); L2
// fetches the whole 256-byte block around `gmem`: a row read along K in 16-byte pieces then finds its
// next pieces there.
__device__ __forceinline__ void cp_async_16_or_zero(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;" ::"r"(smem_address(smem)), "l"(gmem),
               "r"(valid ? 16 : 0)
               : "memory");
}

// One arrival on `bar` once every cp.async this thread issued so far has landed (counted in the
// barrier's expected arrivals: noinc).
__device__ __forceinline__ void cp_async_arrive(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_address(bar)) : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

// Waits until at most PENDING of this thread's committed groups are still in flight.
template <int PENDING>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(PENDING) : "memory");
}

__device__ __forceinline__ uint32_t dynamic_smem_size() {
  uint32_t r;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(r));
  return r;
}

}  // namespace chord
