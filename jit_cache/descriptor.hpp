// A kernel descriptor: which family, for which arch, with which integer parameters (shape, config).
// Families define a static FamilySchema (name + ordered fields with their ranges); jit_cache only sees
// the schema.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "runtime/core/arch.hpp"

namespace chordrt::jit {

inline constexpr int kMaxDescriptorFields = 16;

// One descriptor field: its name and the values the kernel template accepts.
struct FieldSpec {
  std::string_view name;
  int64_t min = 0, max = 0;
};

struct FamilySchema {
  std::string_view family;  // e.g. "glue.moe_align"
  std::span<const FieldSpec> fields;
};

struct Descriptor {
  const FamilySchema* schema = nullptr;
  Arch arch;
  std::array<int64_t, kMaxDescriptorFields> values{};

  Descriptor() = default;
  // Values in the schema's field order. Throws INVALID_ARGUMENT naming the field, its range and the
  // value when one is out of range (and INTERNAL when the count does not match).
  Descriptor(const FamilySchema& schema, Arch arch, std::span<const int64_t> values);
  Descriptor(const FamilySchema& schema, Arch arch, std::initializer_list<int64_t> values)
      : Descriptor(schema, arch, std::span<const int64_t>(values.begin(), values.size())) {}

  int64_t get(std::string_view field) const;  // throws if the schema has no such field

  friend bool operator==(const Descriptor& a, const Descriptor& b) {
    return a.schema == b.schema && a.arch == b.arch && a.values == b.values;
  }
};

// Fast in-process hash (memo key): schema identity, arch and values.
uint64_t hash_value(const Descriptor& d) noexcept;

// Canonical, length-prefixed serialization of family, arch and every (field name, value); the cache
// key is computed from it. Stable across processes, builds and install locations.
std::string canonical_serialization(const Descriptor& d);

// Human-readable form: "glue.moe_align[sm_90a]{num_experts=384,block_size=16,has_expert_map=1}".
std::string to_string(const Descriptor& d);

struct DescriptorHash {
  size_t operator()(const Descriptor& d) const noexcept { return static_cast<size_t>(hash_value(d)); }
};

}  // namespace chordrt::jit
