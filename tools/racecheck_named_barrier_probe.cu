// Does compute-sanitizer racecheck model the ordering that bar.arrive and mbarriers give? The hand-offs
// below are the sparse MLA wgmma kernel's two protocols reduced to their core: warp group 0 waits until
// the buffer is free, writes it and signals "full"; warp group 1 waits for "full", reads it and signals
// "empty". Named-barrier mode (the P hand-off): bar.sync / bar.arrive. mbarrier mode (the converted-key
// hand-off): mbarrier.arrive (release) and mbarrier.try_wait.parity (acquire), 128 arrivals a phase.
// PTX orders each thread's accesses before its arrive against the threads that complete the barrier or
// observe the phase, so both results are exact; a racecheck hazard here is racecheck's, not the protocol's.
// Build and run: nvcc -arch=sm_90a -o probe tools/racecheck_named_barrier_probe.cu &&
//   compute-sanitizer --tool racecheck ./probe named && compute-sanitizer --tool racecheck ./probe mbarrier
#include <cstdint>
#include <cstdio>
#include <cstring>

constexpr int kFull = 2, kEmpty = 3, kRounds = 64;

__device__ void bar_sync(int id) { asm volatile("bar.sync %0, 256;" ::"r"(id) : "memory"); }
__device__ void bar_arrive(int id) { asm volatile("bar.arrive %0, 256;" ::"r"(id) : "memory"); }

__device__ uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
__device__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
__device__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n .reg .pred done;\n wait_%=:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra wait_%=;\n}" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

template <bool MBARRIER>
__global__ void handoff(int* out) {
  __shared__ int buf[128];
  __shared__ uint64_t full, empty;
  const int lt = threadIdx.x % 128;
  if (MBARRIER && threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 128;" ::"r"(smem_addr(&full)));
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 128;" ::"r"(smem_addr(&empty)));
    asm volatile("fence.mbarrier_init.release.cluster;");
  }
  __syncthreads();
  int sum = 0;
  for (int i = 0; i < kRounds; ++i) {
    if (threadIdx.x < 128) {
      if (i > 0) MBARRIER ? mbar_wait(&empty, (i - 1) & 1) : bar_sync(kEmpty);
      buf[127 - lt] = i * 128 + lt;
      MBARRIER ? mbar_arrive(&full) : bar_arrive(kFull);
    } else {
      MBARRIER ? mbar_wait(&full, i & 1) : bar_sync(kFull);
      sum += buf[lt];
      if (i + 1 < kRounds) MBARRIER ? mbar_arrive(&empty) : bar_arrive(kEmpty);
    }
  }
  if (threadIdx.x >= 128) out[lt] = sum;
}

int main(int argc, char** argv) {
  const bool mbarrier = argc > 1 && std::strcmp(argv[1], "mbarrier") == 0;
  int* out;
  cudaMalloc(&out, 128 * sizeof(int));
  if (mbarrier) {
    handoff<true><<<1, 256>>>(out);
  } else {
    handoff<false><<<1, 256>>>(out);
  }
  int host[128];
  cudaMemcpy(host, out, sizeof(host), cudaMemcpyDeviceToHost);
  int bad = 0;
  for (int t = 0; t < 128; ++t) {
    const int want = 128 * (kRounds * (kRounds - 1) / 2) + kRounds * (127 - t);
    bad += host[t] != want;
  }
  std::printf("%s handoff: %d of 128 sums wrong\n", mbarrier ? "mbarrier" : "named-barrier", bad);
  return bad != 0;
}
