#include "jit_cache/descriptor.hpp"

#include <fmt/format.h>
#include <xxhash.h>

#include "runtime/core/error.hpp"

namespace chordrt::jit {

Descriptor::Descriptor(const FamilySchema& s, Arch a, std::span<const int64_t> vals) : schema(&s), arch(a) {
  if (vals.size() != s.fields.size() || vals.size() > kMaxDescriptorFields) {
    throw_error(CHORD_ERROR_INTERNAL, "descriptor {}: {} values for {} fields", s.family, vals.size(), s.fields.size());
  }
  for (size_t i = 0; i < vals.size(); ++i) {
    const FieldSpec& f = s.fields[i];
    if (vals[i] < f.min || vals[i] > f.max) {
      throw_error(CHORD_ERROR_INVALID_ARGUMENT, "{}: {} must be in [{}, {}], got {}", s.family, f.name, f.min, f.max,
                  vals[i]);
    }
    values[i] = vals[i];
  }
}

int64_t Descriptor::get(std::string_view field) const {
  for (size_t i = 0; i < schema->fields.size(); ++i) {
    if (schema->fields[i].name == field) return values[i];
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
    append_field(out, d.schema->fields[i].name, std::to_string(d.values[i]));
  return out;
}

std::string to_string(const Descriptor& d) {
  std::string out = fmt::format("{}[{}]{{", d.schema->family, d.arch.name());
  for (size_t i = 0; i < d.schema->fields.size(); ++i) {
    fmt::format_to(std::back_inserter(out), "{}{}={}", i ? "," : "", d.schema->fields[i].name, d.values[i]);
  }
  out += '}';
  return out;
}

}  // namespace chordrt::jit
