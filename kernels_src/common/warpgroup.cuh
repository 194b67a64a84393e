// Warpgroup-level pieces of SM90 kernels: named barriers, register reallocation, wgmma batches and the
// shared-memory matrix descriptor (the wgmma instructions themselves are in wgmma_rs.cuh).
#pragma once

#include "common/async_copy.cuh"
#include "common/wgmma_rs.cuh"

namespace chord {

// A named barrier over `threads` threads (a multiple of 32), leaving barrier 0 to __syncthreads.
__device__ __forceinline__ void named_barrier(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Arrives on a named barrier without waiting: the producer half of a hand-off whose consumers bar.sync
// (`threads` counts both sides); orders this thread's earlier shared-memory writes before their reads.
__device__ __forceinline__ void named_barrier_arrive(uint32_t id, uint32_t threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// setmaxnreg moves registers inside the CTA's launch allocation (at one CTA per SM: 64K / threads a
// thread, rounded down to 8): an increase that the other warpgroups' decreases do not cover waits forever
// (SASS: USETMAXREG.TRY_ALLOC.CTAPOOL in a retry loop). `registers_per_warpgroup` sums the count each
// warpgroup sets.
constexpr bool setmaxnreg_fits_launch(int threads, int registers_per_warpgroup) {
  return registers_per_warpgroup * 128 <= 65536 / threads / 8 * 8 * threads;
}

template <uint32_t REGISTERS>
__device__ __forceinline__ void set_max_registers_increase() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(REGISTERS));
}

template <uint32_t REGISTERS>
__device__ __forceinline__ void set_max_registers_decrease() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(REGISTERS));
}

// wgmma bookkeeping: fence register operands, close a batch, wait until at most PENDING batches remain.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int PENDING>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(PENDING) : "memory");
}

// Keeps the compiler from moving accumulator reads/writes across wgmma fences and waits.
__device__ __forceinline__ void fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }
__device__ __forceinline__ void fence_operand(uint32_t& r) { asm volatile("" : "+r"(r)::"memory"); }

// Shared-memory matrix descriptor of a K-major operand in the 128-byte swizzle the tensor copies
// produce: rows of 128 bytes (64 BF16 along K), 8-row atoms 1024 bytes apart (1024-aligned base).
__device__ __forceinline__ uint64_t smem_desc_k_major_sw128(const void* smem) {
  const uint64_t addr = smem_address(smem);
  return ((addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

// The same 128-byte swizzled rows read as an MN-major operand (16-bit values): a row is one K index
// holding 64 consecutive MN values, 8-row atoms 1024 bytes apart along K, and the next 64 MN values
// mn_block_bytes further on (the descriptor's leading offset).
__device__ __forceinline__ uint64_t smem_desc_mn_major_sw128(const void* smem, uint32_t mn_block_bytes) {
  const uint64_t addr = smem_address(smem);
  return ((addr & 0x3FFFF) >> 4) | (uint64_t(mn_block_bytes >> 4) << 16) | (uint64_t(1024 >> 4) << 32) |
         (uint64_t(1) << 62);
}

}  // namespace chord
