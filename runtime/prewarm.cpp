#include "runtime/prewarm.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_set>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/core/file_read.hpp"
#include "runtime/core/json.hpp"
#include "runtime/kernel_registry.hpp"

namespace chordrt {

namespace {
// A descriptor line nests 3 levels ({"descriptor": {"fields": {...}}}); a file of recorded misses from a
// long run may hold millions of lines of ~250 bytes.
constexpr int kMaxDescriptorLineDepth = 16;
constexpr uint64_t kMaxDescriptorFileBytes = uint64_t{4} << 30;
}  // namespace

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

std::vector<jit::Descriptor> read_descriptor_lines(const std::string& path) {
  std::string text, problem;
  switch (read_regular_file(path, text, kMaxDescriptorFileBytes, problem)) {
    case ReadResult::kMissing:
      throw_error(CHORD_ERROR_INVALID_ARGUMENT, "descriptor file {}: no such file", path);
    case ReadResult::kRejected:
      throw_error(CHORD_ERROR_INVALID_ARGUMENT, "descriptor file {}: {}", path, problem);
    case ReadResult::kRead:
      break;
  }
  std::istringstream in(text);
  std::vector<jit::Descriptor> out;
  struct Hash {
    size_t operator()(const jit::Descriptor& d) const noexcept { return static_cast<size_t>(jit::hash_value(d)); }
  };
  std::unordered_set<jit::Descriptor, Hash> seen;
  std::string line;
  int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = parse_json_bounded(line, kMaxDescriptorLineDepth);
    } catch (const std::exception& e) {
      throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}:{}: not JSON ({})", path, number, e.what());
    }
    try {
      const jit::Descriptor d = descriptor_from_json(j.is_object() && j.contains("descriptor") ? j["descriptor"] : j);
      if (seen.insert(d).second) out.push_back(d);
    } catch (const Error& e) {
      throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}:{}: {}", path, number, e.what());
    }
  }
  return out;
}

}  // namespace chordrt
