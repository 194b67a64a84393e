#include "runtime/launch.hpp"

#include <atomic>
#include <cerrno>
#include <cstring>

#include "runtime/core/append_line.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/logging.hpp"
#include "runtime/driver.hpp"
#include "runtime/env_config.hpp"

namespace chordrt::detail {

void record_launch(const std::string& path, const LoadedKernel& kernel) {
  if (append_line(path, fmt::format("{} {}", kernel.key, kernel.name))) return;
  const int err = errno;  // before logger(), whose first call may set it
  // Once: a log that cannot be written would otherwise warn on every launch.
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true)) logger().warn("cannot append to CHORD_LAUNCH_LOG {}: {}", path, std::strerror(err));
}

void launch_packed(const ContextState& ctx, const LoadedKernel& kernel, const LaunchConfig& launch, void** args,
                   const uint16_t* arg_sizes, size_t arg_count) {
  if (kernel.dry_run) return;
  if (kernel.param_count != LoadedKernel::kParamsUnknown) {
    bool match = kernel.param_count == arg_count;
    for (size_t i = 0; match && i < arg_count; ++i) match = kernel.param_sizes[i] == arg_sizes[i];
    if (!match) {
      throw_error(CHORD_ERROR_INTERNAL, "launch of {}: {} arguments given, the kernel takes {} (sizes differ)",
                  kernel.name, arg_count, static_cast<int>(kernel.param_count));
    }
  }
  const DriverApi& api = driver().api;
  CUlaunchAttribute attr[2];
  CUlaunchConfig config{};
  config.gridDimX = launch.grid.x;
  config.gridDimY = launch.grid.y;
  config.gridDimZ = launch.grid.z;
  config.blockDimX = kernel.threads;
  config.blockDimY = 1;
  config.blockDimZ = 1;
  config.sharedMemBytes = kernel.dynamic_smem;
  config.hStream = launch.stream;
  if (kernel.cluster[0] * kernel.cluster[1] * kernel.cluster[2] > 1) {
    CUlaunchAttribute& a = attr[config.numAttrs++];
    a.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    a.value.clusterDim.x = kernel.cluster[0];
    a.value.clusterDim.y = kernel.cluster[1];
    a.value.clusterDim.z = kernel.cluster[2];
  }
  if (launch.order == LaunchOrder::kProgrammatic) {
    CUlaunchAttribute& a = attr[config.numAttrs++];
    a.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    a.value.programmaticStreamSerializationAllowed = 1;
  }
  config.attrs = attr;
  ScopedContext scope(api, ctx.context);
  check_cuda(api.cuLaunchKernelEx(&config, kernel.function, args, nullptr), "cuLaunchKernelEx");
  // Read once; unset (the normal case) costs this one check per launch.
  static const std::string& launch_log = env_config().launch_log;
  if (!launch_log.empty()) record_launch(launch_log, kernel);
}

}  // namespace chordrt::detail
