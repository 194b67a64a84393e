#include "runtime/core/arch.hpp"

#include <fmt/format.h>

#include "runtime/core/error.hpp"

namespace chordrt {

std::string Arch::name() const { return suffix ? fmt::format("sm_{}{}", sm, suffix) : fmt::format("sm_{}", sm); }

Arch Arch::parse(std::string_view text) {
  std::string_view rest = text;
  if (rest.starts_with("sm_")) rest.remove_prefix(3);
  Arch arch;
  size_t digits = 0;
  // At most 4 digits are read (4 is already too many), so a long digit string cannot overflow sm.
  while (digits < rest.size() && digits < 4 && rest[digits] >= '0' && rest[digits] <= '9') {
    arch.sm = arch.sm * 10 + (rest[digits] - '0');
    ++digits;
  }
  rest.remove_prefix(digits);
  if (rest == "a") arch.suffix = 'a';
  if (digits < 2 || digits > 3 || !(rest.empty() || rest == "a") || arch.sm < 70) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "arch: expected a name like \"sm_90a\", got \"{}\"", text);
  }
  return arch;
}

Arch Arch::for_compute_capability(int major, int minor) {
  Arch arch{major * 10 + minor, 0};
  // Hopper and later expose their tensor-core instructions only through the arch-specific target.
  if (major >= 9) arch.suffix = 'a';
  return arch;
}

void require_supported(Arch arch) {
  std::string names;
  for (const Arch& a : kSupportedArches) {
    if (a == arch) return;
    names += (names.empty() ? "" : ", ") + a.name();
  }
  throw_error(CHORD_ERROR_INVALID_ARGUMENT, "arch {} is not supported: the kernels target {} (H100 / H200)",
              arch.name(), names);
}

}  // namespace chordrt
