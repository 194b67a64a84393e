#include "heuristics/config_override.hpp"

#include <charconv>

namespace chordrt::heuristics {

std::string apply_int_overrides(std::string_view spec, std::initializer_list<OverrideField> fields) {
  while (!spec.empty()) {
    const size_t comma = spec.find(',');
    const std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) return "expected field=value, got \"" + std::string(item) + "\"";
    const std::string_view key = item.substr(0, eq), digits = item.substr(eq + 1);
    int value = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (ec != std::errc() || end != digits.data() + digits.size()) return "bad value in \"" + std::string(item) + "\"";
    int* target = nullptr;
    std::string keys;
    for (const OverrideField& f : fields) {
      if (f.key == key) target = f.target;
      keys += (keys.empty() ? "" : ", ") + std::string(f.key);
    }
    if (!target) return "unknown key \"" + std::string(key) + "\" (" + keys + ")";
    *target = value;
  }
  return "";
}

}  // namespace chordrt::heuristics
