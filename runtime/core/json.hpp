// JSON written by other programs (cache metadata, config.json, descriptor lines), parsed with a bound on
// nesting: a crafted document nested 10^5 deep would otherwise overflow the stack in nlohmann's recursive
// walks (dump, comparison) long after parsing succeeded.
#pragma once

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string_view>
#include <utility>

namespace chordrt {

// Throws (nlohmann::json::exception or std::runtime_error) on malformed or too deeply nested input.
template <typename Input>
nlohmann::json parse_json_bounded(Input&& input, int max_depth) {
  const auto limit = [max_depth](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    if (depth > max_depth) throw std::runtime_error(fmt::format("nested more than {} levels", max_depth));
    return true;
  };
  return nlohmann::json::parse(std::forward<Input>(input), limit);
}

// The integer v as a T; throws std::runtime_error naming `what` for a float, a non-number or a value out of
// T's range. (nlohmann's get<T>() casts floats to integers, undefined behaviour past the range.)
template <typename T>
T json_integer(const nlohmann::json& v, std::string_view what) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (std::in_range<T>(u)) return static_cast<T>(u);
  } else if (v.is_number_integer()) {
    const int64_t s = v.get<int64_t>();
    if (std::in_range<T>(s)) return static_cast<T>(s);
  } else {
    throw std::runtime_error(fmt::format("{} is not an integer", what));
  }
  throw std::runtime_error(fmt::format("{} is out of range", what));
}

}  // namespace chordrt
