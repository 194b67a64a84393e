#include "runtime/launch.hpp"

#include "runtime/driver.hpp"

namespace chordrt {

void launch(const ContextState& ctx, const LoadedKernel& kernel, LaunchGrid grid, CUstream stream, void** args) {
  const DriverApi& api = driver().api;
  CUlaunchAttribute attr[1];
  CUlaunchConfig config{};
  config.gridDimX = grid.x;
  config.gridDimY = grid.y;
  config.gridDimZ = grid.z;
  config.blockDimX = kernel.threads;
  config.blockDimY = 1;
  config.blockDimZ = 1;
  config.sharedMemBytes = kernel.dynamic_smem;
  config.hStream = stream;
  if (kernel.cluster[0] * kernel.cluster[1] * kernel.cluster[2] > 1) {
    attr[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attr[0].value.clusterDim.x = kernel.cluster[0];
    attr[0].value.clusterDim.y = kernel.cluster[1];
    attr[0].value.clusterDim.z = kernel.cluster[2];
    config.attrs = attr;
    config.numAttrs = 1;
  }
  ScopedContext scope(api, ctx.context);
  check_cuda(api.cuLaunchKernelEx(&config, kernel.function, args, nullptr), "cuLaunchKernelEx");
}

}  // namespace chordrt
