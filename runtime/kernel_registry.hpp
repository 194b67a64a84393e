// The kernel families chordrt can compile: for each, its descriptor schema and how a descriptor turns
// into the program NVRTC compiles (header, template instantiation, launch shape).
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "jit_cache/descriptor.hpp"

namespace chordrt {

struct KernelProgram {
  std::string header;           // embedded header that defines the kernel template
  std::string name_expression;  // e.g. "chord::moe_align_kernel<384, 16, true, 1024>"
  uint32_t threads = 0;
  uint32_t dynamic_smem = 0;
  std::array<uint32_t, 3> cluster{1, 1, 1};

  // The few-line translation unit handed to NVRTC.
  std::string source() const;
};

struct KernelFamily {
  const jit::FamilySchema& schema;
  KernelProgram (*program)(const jit::Descriptor&);
  // Representative descriptors, compiled by the tests and `chord-jit verify` smoke checks.
  std::vector<jit::Descriptor> (*examples)(Arch);
};

// Every family, in a stable order (runtime/families.cpp, the one place that lists them).
std::span<const KernelFamily* const> kernel_families();
const KernelFamily& family_of(const jit::Descriptor& d);
const KernelFamily* find_family(std::string_view name);

// {"family": ..., "arch": ..., "fields": {name: value, ...}}
nlohmann::json descriptor_to_json(const jit::Descriptor& d);
// Validates the family, the arch and that the fields are exactly the schema's; throws INVALID_ARGUMENT.
jit::Descriptor descriptor_from_json(const nlohmann::json& j);

}  // namespace chordrt
