// Launch of a loaded kernel through cuLaunchKernelEx (cluster dims when the kernel has them), with typed
// arguments: launch(ctx, kernel, {grid, stream}, args...) packs them and checks their count and sizes
// against the module's parameters where the driver reports them.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "runtime/jit_runtime.hpp"

namespace chordrt {

struct LaunchGrid {
  uint32_t x = 1, y = 1, z = 1;
};

enum class LaunchOrder {
  kStream,        // after the previous work in the stream has completed
  kProgrammatic,  // may start once the previous kernel triggers griddepcontrol.launch_dependents (or
                  // exits); the kernel must griddepcontrol.wait before reading that kernel's results
};

struct LaunchConfig {
  LaunchGrid grid;
  CUstream stream = nullptr;
  LaunchOrder order = LaunchOrder::kStream;
};

namespace detail {
// Throws INTERNAL when the argument sizes do not match the kernel's parameters; launches in ctx (pushed
// only if it is not current). No allocation, no sync (a CHORD_LAUNCH_LOG line aside). A dry-run placeholder
// launches nothing.
void launch_packed(const ContextState& ctx, const LoadedKernel& kernel, const LaunchConfig& config, void** args,
                   const uint16_t* arg_sizes, size_t arg_count);
// Appends "<key> <descriptor>" to the launch log at `path` (CHORD_LAUNCH_LOG); warns once if it cannot.
void record_launch(const std::string& path, const LoadedKernel& kernel);
}  // namespace detail

template <class... Args>
void launch(const ContextState& ctx, const LoadedKernel& kernel, const LaunchConfig& config, const Args&... args) {
  static_assert(sizeof...(Args) > 0 && (std::is_trivially_copyable_v<Args> && ...),
                "kernel arguments are passed by value: trivially copyable types only");
  void* packed[] = {const_cast<void*>(static_cast<const void*>(&args))...};
  static constexpr uint16_t kSizes[] = {static_cast<uint16_t>(sizeof(Args))...};
  detail::launch_packed(ctx, kernel, config, packed, kSizes, sizeof...(Args));
}

}  // namespace chordrt
