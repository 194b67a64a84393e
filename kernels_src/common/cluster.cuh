// Thread-block clusters (sm_90): rank, barrier and distributed shared memory reads, as PTX (no
// cooperative_groups header is available to NVRTC here).
#pragma once

#include "common/types.cuh"

namespace chord {

__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// All threads of all CTAs of the cluster; orders their shared-memory accesses around it.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  uint32_t a;
  asm("{\n\t.reg .u64 t;\n\tcvta.to.shared.u64 t, %1;\n\tcvt.u32.u64 %0, t;\n\t}" : "=r"(a) : "l"(p));
  return a;
}

// The shared::cluster address of `local`'s offset in the CTA of rank `rank` of this cluster.
__device__ __forceinline__ uint32_t remote_shared_address(const void* local, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(shared_address(local)), "r"(rank));
  return remote;
}

// The int32 at the same shared-memory offset as `local`, in the CTA of rank `rank` of this cluster.
__device__ __forceinline__ int32_t load_shared_remote(const int32_t* local, uint32_t rank) {
  int32_t v;
  asm volatile("ld.shared::cluster.s32 %0, [%1];" : "=r"(v) : "r"(remote_shared_address(local, rank)) : "memory");
  return v;
}

// Arrives on an mbarrier in another CTA of the cluster (its shared::cluster address), with the default
// CTA-scope release (as CUTLASS's cluster barriers): the arriving warp's reads have completed (wgmma
// waited on); .release.cluster would put a GPU-wide MEMBAR in every arrival.
__device__ __forceinline__ void mbarrier_arrive_remote(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(bar) : "memory");
}

// 16 bytes into another CTA's shared memory through the async proxy, completing 16 bytes of the
// transaction count of the mbarrier `bar` there (both shared::cluster addresses).
__device__ __forceinline__ void st_async_16(uint32_t dst, const uint4& v, uint32_t bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(dst),
               "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(bar)
               : "memory");
}

}  // namespace chord
