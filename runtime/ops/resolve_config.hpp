// The configuration a family launches with: the heuristic's choice, then the experiment override
// (CHORD_<FAMILY>_CONFIG, "key=value,..."), validated by the family's one check (the same one its
// program() applies), so an override never reaches the compiler unchecked and every error names the
// variable, the field and the value.
#pragma once

#include <string>
#include <string_view>

#include "runtime/core/error.hpp"

namespace chordrt::ops {

[[noreturn]] inline void throw_override_error(std::string_view op, std::string_view variable, const std::string& spec,
                                              const std::string& error) {
  throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: {}=\"{}\": {}", op, variable, spec, error);
}

// apply(spec, config&) -> "" or what is wrong with the spec; check(config) -> "" or why the config cannot
// serve the shape.
template <class Config, class Apply, class Check>
Config resolve_config(std::string_view op, std::string_view variable, const std::string& spec, Config config,
                      Apply&& apply, Check&& check) {
  if (spec.empty()) return config;
  std::string error = apply(spec, config);
  if (error.empty()) error = check(config);
  if (!error.empty()) throw_override_error(op, variable, spec, error);
  return config;
}

// The override's syntax and keys alone, on a scratch config: no device needed, so an op checks it before
// it asks for a context and a compile-only caller sees a garbage override, not the missing driver.
template <class Config, class Apply>
void check_override_syntax(std::string_view op, std::string_view variable, const std::string& spec, Apply&& apply) {
  if (spec.empty()) return;
  Config scratch{};
  if (const std::string error = apply(spec, scratch); !error.empty()) throw_override_error(op, variable, spec, error);
}

}  // namespace chordrt::ops
