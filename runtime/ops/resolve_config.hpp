// The configuration a family launches with: the heuristic's choice, then the experiment override
// (CHORD_<FAMILY>_CONFIG, "key=value,..."), validated by the family's one check (the same one its
// program() applies), so an override never reaches the compiler unchecked and every error names the
// variable, the field and the value.
#pragma once

#include <string>
#include <string_view>

#include "runtime/core/error.hpp"

namespace chordrt::ops {

// apply(spec, config&) -> "" or what is wrong with the spec; check(config) -> "" or why the config cannot
// serve the shape.
template <class Config, class Apply, class Check>
Config resolve_config(std::string_view op, std::string_view variable, const std::string& spec, Config config,
                      Apply&& apply, Check&& check) {
  if (spec.empty()) return config;
  std::string error = apply(spec, config);
  if (error.empty()) error = check(config);
  if (!error.empty()) throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: {}=\"{}\": {}", op, variable, spec, error);
  return config;
}

}  // namespace chordrt::ops
