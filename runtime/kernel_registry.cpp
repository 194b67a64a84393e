#include "runtime/kernel_registry.hpp"

#include "runtime/core/error.hpp"

namespace chordrt {

std::string KernelProgram::source() const { return fmt::format("#include \"{}\"\n", header); }

const KernelFamily& family_of(const jit::Descriptor& d) {
  for (const KernelFamily* f : kernel_families()) {
    if (&f->schema == d.schema) return *f;
  }
  throw_error(CHORD_ERROR_INTERNAL, "descriptor of an unregistered family");
}

const KernelFamily* find_family(std::string_view name) {
  for (const KernelFamily* f : kernel_families()) {
    if (f->schema.family == name) return f;
  }
  return nullptr;
}

nlohmann::json descriptor_to_json(const jit::Descriptor& d) {
  nlohmann::json fields = nlohmann::json::object();
  for (size_t i = 0; i < d.schema->fields.size(); ++i) fields[std::string(d.schema->fields[i].name)] = d.values[i];
  return {{"family", d.schema->family}, {"arch", d.arch.name()}, {"fields", fields}};
}

jit::Descriptor descriptor_from_json(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("family") || !j["family"].is_string() || !j.contains("arch") ||
      !j["arch"].is_string() || !j.contains("fields") || !j["fields"].is_object()) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT,
                "descriptor: expected {{\"family\": string, \"arch\": string, \"fields\": object}}, got {}", j.dump());
  }
  const std::string family = j["family"].get<std::string>();
  const KernelFamily* f = find_family(family);
  if (!f) {
    std::string known;
    for (const KernelFamily* k : kernel_families()) known += fmt::format(" {}", k->schema.family);
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "descriptor: unknown family \"{}\" (known:{})", family, known);
  }
  const Arch arch = Arch::parse(j["arch"].get<std::string>());
  const auto& fields = j["fields"];
  if (fields.size() != f->schema.fields.size()) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "descriptor {}: expected {} fields, got {}", family,
                f->schema.fields.size(), fields.size());
  }
  std::array<int64_t, jit::kMaxDescriptorFields> values{};
  for (size_t i = 0; i < f->schema.fields.size(); ++i) {
    const std::string name(f->schema.fields[i].name);
    if (!fields.contains(name) || !fields[name].is_number_integer()) {
      throw_error(CHORD_ERROR_INVALID_ARGUMENT, "descriptor {}: field \"{}\" missing or not an integer", family, name);
    }
    values[i] = fields[name].get<int64_t>();
  }
  // The descriptor checks each field's range, the family the combinations its kernel accepts.
  jit::Descriptor d(f->schema, arch, std::span<const int64_t>(values.data(), f->schema.fields.size()));
  f->program(d);
  return d;
}

}  // namespace chordrt
