// The target architecture chordrt compiles for, e.g. sm_90a = {90, 'a'}.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace chordrt {

struct Arch {
  int32_t sm = 0;
  char suffix = 0;  // 'a' for arch-specific features (wgmma, setmaxnreg), 0 otherwise
  std::string name() const;
  // Parses "sm_90a", "sm_90", "90a". Throws chordrt::Error(INVALID_ARGUMENT) otherwise.
  static Arch parse(std::string_view text);
  // The arch chordrt compiles for on a device of this compute capability (9.0 -> sm_90a).
  static Arch for_compute_capability(int major, int minor);
  friend bool operator==(const Arch&, const Arch&) = default;
};

// The archs every kernel family targets (wgmma, TMA, clusters: Hopper). Planning for another arch is
// refused up front instead of failing every compile.
inline constexpr Arch kSupportedArches[] = {{90, 'a'}};
// Throws chordrt::Error(INVALID_ARGUMENT) naming the supported archs unless arch is one of them.
void require_supported(Arch arch);

}  // namespace chordrt
