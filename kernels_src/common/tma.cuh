// The Hopper copy engine: mbarriers (transaction-counted), 1-D bulk copies and 2-D tensor copies from
// global to shared memory, and the fences that order them. PTX only (NVRTC has no headers here).
#pragma once

#include "common/async_copy.cuh"

namespace chord {

__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_address(bar)), "r"(arrivals) : "memory");
}

// Makes initialized barriers visible to the copy engine (the async proxy) before the first copy.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// Orders this thread's view of shared memory written by the generic proxy (st.shared, cp.async) before
// its later async-proxy reads of it (wgmma operands by descriptor).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_address(bar)) : "memory");
}

// One arrival that also announces `bytes` the copies completing on this barrier will deliver.
__device__ __forceinline__ void mbarrier_arrive_expect_bytes(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_address(bar)), "r"(bytes)
               : "memory");
}

// Spins until the barrier's phase with this parity has completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n\t.reg .pred done;\n"
      "WAIT_%=:\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n\t"
      "@!done bra WAIT_%=;\n}" ::"r"(smem_address(bar)),
      "r"(parity)
      : "memory");
}

// `bytes` (a multiple of 16) contiguous bytes, global -> shared, completing on `bar`.
__device__ __forceinline__ void bulk_copy(void* smem, const void* gmem, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_address(smem)),
               "l"(gmem), "r"(bytes), "r"(smem_address(bar))
               : "memory");
}

// The box of a 2-D tensor map at element coordinates (x innermost, y), completing on `bar`. Rows past
// the tensor's extent arrive as zeros.
__device__ __forceinline__ void tensor_copy_2d(void* smem, const void* tensor_map, int32_t x, int32_t y,
                                               uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
          smem_address(smem)),
      "l"(tensor_map), "r"(x), "r"(y), "r"(smem_address(bar))
      : "memory");
}

// The box of a 3-D tensor map at element coordinates (x innermost, y, z), completing on `bar`.
__device__ __forceinline__ void tensor_copy_3d(void* smem, const void* tensor_map, int32_t x, int32_t y, int32_t z,
                                               uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];" ::
          "r"(smem_address(smem)),
      "l"(tensor_map), "r"(x), "r"(y), "r"(z), "r"(smem_address(bar))
      : "memory");
}

// Asks L2 for `bytes` (a multiple of 16) at `p` (16-byte aligned), without waiting or using registers.
__device__ __forceinline__ void bulk_prefetch_l2(const void* p, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}

__device__ __forceinline__ void prefetch_tensor_map(const void* tensor_map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(tensor_map) : "memory");
}

}  // namespace chord
