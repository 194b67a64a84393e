// Launch of a loaded kernel through cuLaunchKernelEx (cluster dims when the kernel has them).
#pragma once

#include <cuda.h>

#include <cstdint>

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

// Launches in ctx (pushed only if it is not current). No allocation, no sync.
void launch(const ContextState& ctx, const LoadedKernel& kernel, LaunchGrid grid, CUstream stream, void** args,
            LaunchOrder order = LaunchOrder::kStream);

}  // namespace chordrt
