// JSON written by other programs (cache metadata, config.json, descriptor lines), parsed with a bound on
// nesting: a crafted document nested 10^5 deep would otherwise overflow the stack in nlohmann's recursive
// walks (dump, comparison) long after parsing succeeded.
#pragma once

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <stdexcept>
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

}  // namespace chordrt
