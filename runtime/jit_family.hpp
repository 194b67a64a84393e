// The one shape every kernel family's host side takes (in the spirit of DeepGEMM's LaunchRuntime):
//   - a Key: a plain struct of the kernel's template values, described once by a table of fields that
//     carry their names and ranges, so a descriptor is built and read by field name and every
//     out-of-range value is reported as "<family>: <field> must be in [min, max], got <value>";
//   - program(key): the template instantiation NVRTC compiles, with threads, shared memory and cluster
//     taken from the family's kernels_src/<family>/params.cuh;
//   - examples(facts): representative keys for the tests and `chord-jit verify`;
//   - kernel(key, ctx, stream): the loaded kernel through the JIT runtime.
// A family is `struct XFamily : JitFamily<XFamily, XKey> { kName, kFields, program, examples }`.
#pragma once

#include <array>
#include <span>
#include <string_view>
#include <vector>

#include "jit_cache/descriptor.hpp"
#include "runtime/core/device_facts.hpp"
#include "runtime/jit_runtime.hpp"
#include "runtime/kernel_registry.hpp"

namespace chordrt {

template <class Key>
struct KeyField {
  std::string_view name;
  int Key::*member;
  int64_t min, max;
};

template <class Derived, class Key>
class JitFamily {
 public:
  static const jit::FamilySchema& schema() {
    static constexpr auto kSpecs = [] {
      std::array<jit::FieldSpec, Derived::kFields.size()> specs{};
      for (size_t i = 0; i < specs.size(); ++i) {
        specs[i] = {Derived::kFields[i].name, Derived::kFields[i].min, Derived::kFields[i].max};
      }
      return specs;
    }();
    static constexpr jit::FamilySchema kSchema{Derived::kName, kSpecs};
    return kSchema;
  }

  // Throws INVALID_ARGUMENT naming the first field outside its range.
  static jit::Descriptor descriptor(Arch arch, const Key& key) {
    std::array<int64_t, Derived::kFields.size()> values;
    for (size_t i = 0; i < values.size(); ++i) values[i] = key.*(Derived::kFields[i].member);
    return jit::Descriptor(schema(), arch, values);
  }

  static Key key(const jit::Descriptor& d) {
    Key k{};
    for (size_t i = 0; i < Derived::kFields.size(); ++i)
      k.*(Derived::kFields[i].member) = static_cast<int>(d.values[i]);
    return k;
  }

  // The key by value: GCC 13 flags a returned reference bound next to a temporary key (a false positive).
  static const LoadedKernel& kernel(Key key, const ContextState& ctx, CUstream stream) {
    return JitRuntime::global().kernel(descriptor(ctx.facts.arch, key), ctx, stream);
  }

  // The registry's view of the family.
  static const KernelFamily& family() {
    static const KernelFamily kFamily{schema(), &program_of, &examples_of};
    return kFamily;
  }

 private:
  static KernelProgram program_of(const jit::Descriptor& d) { return Derived::program(key(d)); }
  static std::vector<jit::Descriptor> examples_of(Arch arch) {
    std::vector<jit::Descriptor> out;
    for (const Key& k : Derived::examples(DeviceFacts::offline(arch))) out.push_back(descriptor(arch, k));
    return out;
  }
};

}  // namespace chordrt
