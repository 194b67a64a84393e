// Integer helpers shared by heuristics, dispatch and the cache.
#pragma once

#include <concepts>

namespace chordrt {

template <std::integral T>
constexpr T ceil_div(T a, T b) {
  return (a + b - 1) / b;
}

template <std::integral T>
constexpr T round_up(T a, T multiple) {
  return ceil_div(a, multiple) * multiple;
}

}  // namespace chordrt
