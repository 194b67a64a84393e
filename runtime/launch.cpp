#include "runtime/launch.hpp"

#include "runtime/driver.hpp"

namespace chordrt {

void launch(const ContextState& ctx, const LoadedKernel& kernel, LaunchGrid grid, CUstream stream, void** args,
            LaunchOrder order) {
  const DriverApi& api = driver().api;
  CUlaunchAttribute attr[2];
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
    CUlaunchAttribute& a = attr[config.numAttrs++];
    a.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    a.value.clusterDim.x = kernel.cluster[0];
    a.value.clusterDim.y = kernel.cluster[1];
    a.value.clusterDim.z = kernel.cluster[2];
  }
  if (order == LaunchOrder::kProgrammatic) {
    CUlaunchAttribute& a = attr[config.numAttrs++];
    a.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    a.value.programmaticStreamSerializationAllowed = 1;
  }
  config.attrs = attr;
  ScopedContext scope(api, ctx.context);
  check_cuda(api.cuLaunchKernelEx(&config, kernel.function, args, nullptr), "cuLaunchKernelEx");
}

}  // namespace chordrt
