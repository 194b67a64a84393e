#include "jit_cache/descriptor.hpp"

#include <fmt/format.h>
#include <xxhash.h>

#include "runtime/error.hpp"

namespace chordrt::jit {

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

Descriptor::Descriptor(const FamilySchema& s, Arch a, std::initializer_list<int64_t> vals) : schema(&s), arch(a) {
  if (vals.size() != s.fields.size() || vals.size() > kMaxDescriptorFields) {
    throw_error(CHORD_ERROR_INTERNAL, "descriptor {}: {} values for {} fields", s.family, vals.size(), s.fields.size());
  }
  size_t i = 0;
  for (int64_t v : vals) values[i++] = v;
}

int64_t Descriptor::get(std::string_view field) const {
  for (size_t i = 0; i < schema->fields.size(); ++i) {
    if (schema->fields[i] == field) return values[i];
  }
  throw_error(CHORD_ERROR_INTERNAL, "descriptor {} has no field \"{}\"", schema->family, field);
}

uint64_t hash_value(const Descriptor& d) noexcept {
  struct {
    const FamilySchema* schema;
    int32_t sm;
    int32_t suffix;
  } head{d.schema, d.arch.sm, d.arch.suffix};
  XXH64_hash_t h = XXH3_64bits(&head, sizeof(head));
  return XXH3_64bits_withSeed(d.values.data(), sizeof(int64_t) * (d.schema ? d.schema->fields.size() : 0), h);
}

namespace {
void append_field(std::string& out, std::string_view name, std::string_view value) {
  fmt::format_to(std::back_inserter(out), "{}:{}={}:{};", name.size(), name, value.size(), value);
}
}  // namespace

std::string canonical_serialization(const Descriptor& d) {
  std::string out;
  append_field(out, "family", d.schema->family);
  append_field(out, "arch", d.arch.name());
  for (size_t i = 0; i < d.schema->fields.size(); ++i)
    append_field(out, d.schema->fields[i], std::to_string(d.values[i]));
  return out;
}

std::string to_string(const Descriptor& d) {
  std::string out = fmt::format("{}[{}]{{", d.schema->family, d.arch.name());
  for (size_t i = 0; i < d.schema->fields.size(); ++i) {
    fmt::format_to(std::back_inserter(out), "{}{}={}", i ? "," : "", d.schema->fields[i], d.values[i]);
  }
  out += '}';
  return out;
}

}  // namespace chordrt::jit
