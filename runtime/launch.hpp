// Launch of a loaded kernel through cuLaunchKernelEx (cluster dims when the kernel has them).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "runtime/jit_runtime.hpp"

namespace chordrt {

struct LaunchGrid {
  uint32_t x = 1, y = 1, z = 1;
};

// Launches in ctx (pushed only if it is not current). No allocation, no sync.
void launch(const ContextState& ctx, const LoadedKernel& kernel, LaunchGrid grid, CUstream stream, void** args);

}  // namespace chordrt
