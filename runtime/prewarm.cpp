#include "runtime/prewarm.hpp"

#include <algorithm>
#include <vector>

namespace chordrt {

PrewarmItem prewarm_one(JitRuntime& runtime, const jit::Descriptor& d) {
  PrewarmItem item;
  try {
    item.descriptor = jit::to_string(d);
    EnsureResult r = runtime.ensure_compiled(d);
    item.ok = true;
    item.cached = r.source != ImageSource::kCompiled;
    item.compile_ms = r.compile_ms;
  } catch (const std::exception& e) {
    item.error = e.what();
  }
  return item;
}

PrewarmSummary summarize(std::span<const PrewarmItem> items) {
  PrewarmSummary s;
  std::vector<double> ms;
  for (const auto& i : items) {
    if (!i.ok) {
      ++s.failed;
    } else if (i.cached) {
      ++s.cached;
    } else {
      ++s.compiled;
      ms.push_back(i.compile_ms);
    }
  }
  if (!ms.empty()) {
    std::sort(ms.begin(), ms.end());
    const size_t n = ms.size();
    s.median_compile_ms = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
    s.max_compile_ms = ms.back();
  }
  return s;
}

}  // namespace chordrt
