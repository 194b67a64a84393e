// Does compute-sanitizer racecheck model the ordering that bar.arrive gives? The hand-off below is the
// sparse MLA wgmma kernel's P hand-off reduced to its protocol: warp group 0 waits until the buffer is
// free (bar.sync kEmpty), writes it, bar.arrive kFull; warp group 1 bar.sync kFull, reads it, bar.arrive
// kEmpty. PTX orders each thread's accesses before its bar.arrive against the threads that complete the
// barrier, so the result is exact; a racecheck hazard here is racecheck's, not the protocol's.
// Build and run: nvcc -arch=sm_90a -o probe tools/racecheck_named_barrier_probe.cu &&
//   compute-sanitizer --tool racecheck ./probe
#include <cstdio>

constexpr int kFull = 2, kEmpty = 3, kRounds = 64;

__device__ void bar_sync(int id) { asm volatile("bar.sync %0, 256;" ::"r"(id) : "memory"); }
__device__ void bar_arrive(int id) { asm volatile("bar.arrive %0, 256;" ::"r"(id) : "memory"); }

__global__ void handoff(int* out) {
  __shared__ int buf[128];
  const int lt = threadIdx.x % 128;
  int sum = 0;
  for (int i = 0; i < kRounds; ++i) {
    if (threadIdx.x < 128) {
      if (i > 0) bar_sync(kEmpty);
      buf[127 - lt] = i * 128 + lt;
      bar_arrive(kFull);
    } else {
      bar_sync(kFull);
      sum += buf[lt];
      if (i + 1 < kRounds) bar_arrive(kEmpty);
    }
  }
  if (threadIdx.x >= 128) out[lt] = sum;
}

int main() {
  int* out;
  cudaMalloc(&out, 128 * sizeof(int));
  handoff<<<1, 256>>>(out);
  int host[128];
  cudaMemcpy(host, out, sizeof(host), cudaMemcpyDeviceToHost);
  int bad = 0;
  for (int t = 0; t < 128; ++t) {
    const int want = 128 * (kRounds * (kRounds - 1) / 2) + kRounds * (127 - t);
    bad += host[t] != want;
  }
  std::printf("handoff: %d of 128 sums wrong\n", bad);
  return bad != 0;
}
