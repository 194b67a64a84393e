// The C++ API's runtime-level entry points (the operations live in runtime/ops/).
#include <vector>

#include "chordrt/chordrt.hpp"
#include "runtime/driver.hpp"
#include "runtime/jit_runtime.hpp"
#include "runtime/model_plan.hpp"
#include "runtime/nvrtc_compiler.hpp"
#include "runtime/prewarm.hpp"

namespace chordrt {

Version version() noexcept { return {CHORDRT_VERSION_MAJOR, CHORDRT_VERSION_MINOR, CHORDRT_VERSION_PATCH}; }

RuntimeInfo runtime_info() {
  RuntimeInfo info;
  const Driver& d = driver();
  info.driver_available = d.state == DriverState::kReady;
  info.driver_version = d.version;
  info.device_count = d.device_count;
  if (const Nvrtc* n = Nvrtc::try_get()) {
    info.nvrtc_major = n->major();
    info.nvrtc_minor = n->minor();
  }
  JitRuntime& rt = JitRuntime::global();
  info.cache_memory_only = rt.disk().memory_only();
  info.cache_dir = rt.disk().options().primary.string();
  const JitStats s = rt.stats();
  info.kernels_compiled = s.compiled;
  info.disk_hits = s.disk_hits;
  info.kernels_loaded = s.loaded;
  return info;
}

PrewarmSummary prewarm_model(std::string_view model, std::string_view deployment, std::string_view arch) {
  const MoeModelShape shape = resolve_model(model);
  const Deployment dep = Deployment::parse(deployment);
  const auto descriptors = plan_descriptors(shape, dep, jit::Arch::parse(arch));
  std::vector<PrewarmItem> items;
  for (const auto& d : descriptors) items.push_back(prewarm_one(JitRuntime::global(), d));
  return summarize(items);
}

}  // namespace chordrt
