// The experiment overrides of the heuristics (CHORD_*_CONFIG): "key=value,key=value" with integer values,
// applied to named fields of a config. One parser for every family.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

namespace chordrt::heuristics {

struct OverrideField {
  std::string_view key;
  int* target;
};

// Sets each item's field; returns "" or what is wrong with the first bad item ("expected key=value",
// "bad value in ...", "unknown key ... (the keys)"); earlier items stay applied.
std::string apply_int_overrides(std::string_view spec, std::initializer_list<OverrideField> fields);

}  // namespace chordrt::heuristics
