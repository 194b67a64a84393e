#include "runtime/prewarm.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_set>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/core/json.hpp"
#include "runtime/kernel_registry.hpp"

namespace chordrt {

namespace {
// A descriptor line nests 3 levels ({"descriptor": {"fields": {...}}}).
constexpr int kMaxDescriptorLineDepth = 16;
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
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "descriptor file {}: {}", path,
                std::filesystem::exists(path, ec) ? "not a regular file" : "no such file");
  }
  std::ifstream in(path);
  if (!in) throw_error(CHORD_ERROR_INVALID_ARGUMENT, "cannot read descriptor file {}", path);
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
