// Cache keys: stable (across calls, processes and cache locations) and sensitive to everything that
// determines the cubin; descriptor serialization and arch parsing.
#include "jit_cache/cache_key.hpp"

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "chordrt/chordrt.hpp"
#include "jit_cache/descriptor.hpp"
#include "runtime/jit_runtime.hpp"
#include "runtime/kernel_registry.hpp"
#include "runtime/kernel_sources.hpp"
#include "runtime/ops/glue.hpp"
#include "tests/test_support.hpp"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using chordrt::Arch;
using chordrt::JitOptions;
using chordrt::JitRuntime;
using chordrt::jit::Descriptor;
using chordrt::jit::FamilySchema;
using chordrt::jit::KeyInputs;
using chordrt::test::check_invalid_argument;
using chordrt::test::error_of;
using chordrt::test::kSingleCta;
using chordrt::test::options_for;
using chordrt::test::run_children_together;
using chordrt::test::slurp;
using chordrt::test::TempDir;
using chordrt::test::wait_for;

namespace {

bool is_hex_key(const std::string& k) {
  return k.size() == 32 &&
         std::all_of(k.begin(), k.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

std::vector<Descriptor> all_examples() {
  std::vector<Descriptor> out;
  for (Arch arch : {Arch{90, 'a'}, Arch{100, 'a'}}) {
    for (const chordrt::KernelFamily* f : chordrt::kernel_families()) {
      for (const Descriptor& d : f->examples(arch)) out.push_back(d);
    }
  }
  return out;
}

// One key per line, for every example descriptor.
std::string keys_text(const JitRuntime& rt) {
  std::string out;
  for (const Descriptor& d : all_examples()) out += rt.key_of(d) + "\n";
  return out;
}

KeyInputs inputs_for(const Descriptor& d) {
  KeyInputs in;
  in.canonical_descriptor = chordrt::jit::canonical_serialization(d);
  in.nvrtc_major = 13;
  in.nvrtc_minor = 0;
  in.options = chordrt::nvrtc_options(d.arch, in.nvrtc_major, in.nvrtc_minor);
  in.source_fingerprint = chordrt::jit::hex_digest128("sources");
  in.abi_version = CHORD_ABI_VERSION;
  return in;
}

constexpr chordrt::jit::FieldSpec kTestFields[] = {{"alpha", INT64_MIN, INT64_MAX}, {"b", INT64_MIN, INT64_MAX}};
constexpr FamilySchema kTestSchema{"test.family", kTestFields};
// Same field names, another family name.
constexpr FamilySchema kOtherFamilySchema{"test.other", kTestFields};
// Same family name, other field names.
constexpr chordrt::jit::FieldSpec kRenamedFields[] = {{"alpha", INT64_MIN, INT64_MAX}, {"c", INT64_MIN, INT64_MAX}};
constexpr FamilySchema kRenamedFieldSchema{"test.family", kRenamedFields};

}  // namespace

// Not a test by itself: the [.] tag hides it. The "in a freshly exec'd process" section below runs it in a
// newly exec'd copy of this binary (new address space layout, new statics) and compares the keys.
TEST_CASE("cache key child process helper", "[.][key]") {
  const char* out_path = std::getenv("CHORD_TEST_KEY_CHILD_OUT");
  const char* dir = std::getenv("CHORD_TEST_KEY_CHILD_DIR");
  if (!out_path || !dir) {
    // Selected by a filter such as "~[gpu]" (which also matches hidden tests), not by its parent.
    SUCCEED("a helper: only does something as the child of the key_of stability test");
    return;
  }
  JitRuntime rt(options_for(dir));
  std::ofstream(out_path) << keys_text(rt);
}

TEST_CASE("cache key is a stable 32-hex digest of its inputs", "[key]") {
  for (const Descriptor& d : all_examples()) {
    const KeyInputs in = inputs_for(d);
    const std::string k1 = chordrt::jit::compute_cache_key(in);
    const std::string k2 = chordrt::jit::compute_cache_key(inputs_for(d));
    CHECK(is_hex_key(k1));
    CHECK(k1 == k2);
  }
  CHECK(is_hex_key(chordrt::jit::hex_digest128("")));
  CHECK(chordrt::jit::hex_digest128("abc") == chordrt::jit::hex_digest128(std::string("abc")));
  CHECK(chordrt::jit::hex_digest128("abc") != chordrt::jit::hex_digest128("abd"));
  CHECK(is_hex_key(chordrt::embedded_sources_fingerprint()));
  CHECK(chordrt::embedded_sources_fingerprint() == chordrt::embedded_sources_fingerprint());
}

TEST_CASE("JitRuntime::key_of is stable across calls, runtimes and processes", "[key][runtime]") {
  TempDir dir("key-test");
  JitRuntime rt(options_for(dir.path() / "a"));
  const std::string parent = keys_text(rt);
  REQUIRE(!parent.empty());
  CHECK(keys_text(rt) == parent);

  SECTION("in a forked child with its own runtime") {
    const auto child = run_children_together(1, [&](int) {
      JitRuntime other(options_for(dir.path() / "child"));
      return keys_text(other);
    });
    REQUIRE(child.size() == 1);
    CHECK(child[0] == parent);
  }

  SECTION("in a freshly exec'd process") {
    const fs::path out = dir.path() / "child-keys.txt";
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setenv("CHORD_TEST_KEY_CHILD_OUT", out.c_str(), 1);
      ::setenv("CHORD_TEST_KEY_CHILD_DIR", (dir.path() / "exec").c_str(), 1);
      if (!std::freopen("/dev/null", "w", stdout)) ::_exit(4);
      ::execl("/proc/self/exe", "chordrt_tests", "cache key child process helper", static_cast<char*>(nullptr));
      ::_exit(5);
    }
    REQUIRE(pid >= 0);  // in the parent only (see run_children_together)
    const int status = wait_for(pid);
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 0);
    CHECK(slurp(out) == parent);
  }
}

TEST_CASE("key_of does not depend on the cache directory", "[key][runtime]") {
  TempDir dir("key-test");
  const Descriptor d = chordrt::ops::SiluAndMulFamily::descriptor(Arch{90, 'a'}, chordrt::ops::silu_and_mul_key(2048));
  JitRuntime a(options_for(dir.path() / "one"));
  JitRuntime b(options_for(dir.path() / "deeper" / "two"));
  JitOptions with_layers = options_for(dir.path() / "three");
  with_layers.cache.read_only_layers = {dir.path() / "layer"};
  with_layers.cache.max_bytes = 1 << 20;
  JitRuntime c(with_layers);
  CHECK(a.key_of(d) == b.key_of(d));
  CHECK(a.key_of(d) == c.key_of(d));

  SECTION("an entry compiled in one directory is found after the directory moves") {
    const auto first = a.ensure_compiled(d);
    REQUIRE(first.source == chordrt::ImageSource::kCompiled);
    fs::rename(dir.path() / "one", dir.path() / "moved");
    JitRuntime moved(options_for(dir.path() / "moved"));
    const auto again = moved.ensure_compiled(d);
    CHECK(again.key == first.key);
    CHECK(again.source == chordrt::ImageSource::kDisk);
    CHECK(moved.stats().compiled == 0);
  }
}

TEST_CASE("key_of distinguishes distinct descriptors", "[key][runtime]") {
  TempDir dir("key-test");
  JitRuntime rt(options_for(dir.path()));
  const Arch h{90, 'a'};
  std::vector<Descriptor> ds = {
      chordrt::ops::MoeAlignFamily::descriptor(h, {384, 16, 1, kSingleCta.threads, kSingleCta.cluster}),
      chordrt::ops::MoeAlignFamily::descriptor(h, {384, 32, 1, kSingleCta.threads, kSingleCta.cluster}),
      chordrt::ops::MoeAlignFamily::descriptor(h, {256, 16, 1, kSingleCta.threads, kSingleCta.cluster}),
      chordrt::ops::MoeAlignFamily::descriptor(h, {384, 16, 0, kSingleCta.threads, kSingleCta.cluster}),
      chordrt::ops::MoeAlignFamily::descriptor(h, {1024, 16, 0, kSingleCta.threads, kSingleCta.cluster}),
      chordrt::ops::MoeAlignFamily::descriptor(Arch{100, 'a'}, {384, 16, 1, kSingleCta.threads, kSingleCta.cluster}),
      chordrt::ops::MoeAlignFamily::descriptor(Arch{90, 0}, {384, 16, 1, kSingleCta.threads, kSingleCta.cluster}),
      chordrt::ops::SiluAndMulFamily::descriptor(h, chordrt::ops::silu_and_mul_key(2048)),
      chordrt::ops::SiluAndMulFamily::descriptor(h, chordrt::ops::silu_and_mul_key(7)),
      chordrt::ops::SiluAndMulFamily::descriptor(h, chordrt::ops::silu_and_mul_key(100)),
      chordrt::ops::MoeCombineFamily::descriptor(h, chordrt::ops::moe_combine_key(8, 7168, false)),
      chordrt::ops::MoeCombineFamily::descriptor(h, chordrt::ops::moe_combine_key(8, 7168, true)),
      chordrt::ops::MoeCombineFamily::descriptor(h, chordrt::ops::moe_combine_key(4, 7168, false)),
      chordrt::ops::MoeCombineFamily::descriptor(h, chordrt::ops::moe_combine_key(8, 100, false)),
  };
  std::set<std::string> keys;
  for (const auto& d : ds) keys.insert(rt.key_of(d));
  CHECK(keys.size() == ds.size());
}

TEST_CASE("cache key changes with every input", "[key]") {
  const Descriptor d =
      chordrt::ops::MoeAlignFamily::descriptor(Arch{90, 'a'}, {384, 16, 1, kSingleCta.threads, kSingleCta.cluster});
  const KeyInputs base = inputs_for(d);
  const std::string base_key = chordrt::jit::compute_cache_key(base);
  auto key_with = [&](const std::function<void(KeyInputs&)>& change) {
    KeyInputs in = base;
    change(in);
    return chordrt::jit::compute_cache_key(in);
  };

  SECTION("each descriptor field of every family") {
    for (const Descriptor& ex : all_examples()) {
      const std::string k = chordrt::jit::compute_cache_key(inputs_for(ex));
      for (size_t i = 0; i < ex.schema->fields.size(); ++i) {
        for (int64_t delta : {int64_t{1}, int64_t{-1}, int64_t{1} << 32}) {
          Descriptor changed = ex;
          changed.values[i] += delta;
          INFO(chordrt::jit::to_string(ex) << " field " << ex.schema->fields[i].name << " + " << delta);
          CHECK(chordrt::jit::compute_cache_key(inputs_for(changed)) != k);
        }
      }
    }
  }
  SECTION("the arch") {
    for (Arch other : {Arch{90, 0}, Arch{100, 'a'}, Arch{80, 0}, Arch{120, 'a'}}) {
      Descriptor changed = d;
      changed.arch = other;
      // Same options, so only the descriptor's arch differs.
      CHECK(key_with([&](KeyInputs& in) {
              in.canonical_descriptor = chordrt::jit::canonical_serialization(changed);
            }) != base_key);
    }
  }
  SECTION("the family name and the field names") {
    const Descriptor t(kTestSchema, Arch{90, 'a'}, {1, 2});
    const Descriptor other_family(kOtherFamilySchema, Arch{90, 'a'}, {1, 2});
    const Descriptor renamed_field(kRenamedFieldSchema, Arch{90, 'a'}, {1, 2});
    const std::string kt = chordrt::jit::compute_cache_key(inputs_for(t));
    CHECK(chordrt::jit::compute_cache_key(inputs_for(other_family)) != kt);
    CHECK(chordrt::jit::compute_cache_key(inputs_for(renamed_field)) != kt);
  }
  SECTION("the NVRTC version") {
    CHECK(key_with([](KeyInputs& in) { in.nvrtc_major = 12; }) != base_key);
    CHECK(key_with([](KeyInputs& in) { in.nvrtc_minor = 1; }) != base_key);
    // "1.30" vs "13.0": the version is serialized with a separator.
    KeyInputs a = base, b = base;
    a.nvrtc_major = 1;
    a.nvrtc_minor = 30;
    b.nvrtc_major = 13;
    b.nvrtc_minor = 0;
    CHECK(chordrt::jit::compute_cache_key(a) != chordrt::jit::compute_cache_key(b));
  }
  SECTION("each option: changed, removed, or one added") {
    REQUIRE(base.options.size() >= 2);
    for (size_t i = 0; i < base.options.size(); ++i) {
      INFO("option " << base.options[i]);
      CHECK(key_with([&](KeyInputs& in) { in.options[i] += "x"; }) != base_key);
      CHECK(key_with([&](KeyInputs& in) { in.options.erase(in.options.begin() + static_cast<ptrdiff_t>(i)); }) !=
            base_key);
    }
    CHECK(key_with([](KeyInputs& in) { in.options.push_back("-lineinfo"); }) != base_key);
    CHECK(key_with([](KeyInputs& in) { in.options.clear(); }) != base_key);
  }
  SECTION("the source fingerprint") {
    CHECK(key_with([](KeyInputs& in) { in.source_fingerprint = chordrt::jit::hex_digest128("sources2"); }) != base_key);
    CHECK(key_with([](KeyInputs& in) { in.source_fingerprint.clear(); }) != base_key);
  }
  SECTION("the ABI version") {
    CHECK(key_with([](KeyInputs& in) { in.abi_version = CHORD_ABI_VERSION + 1; }) != base_key);
  }
  SECTION("option order and duplicates do not matter") {
    std::mt19937 rng(1234);
    for (int i = 0; i < 10; ++i) {
      CHECK(key_with([&](KeyInputs& in) { std::shuffle(in.options.begin(), in.options.end(), rng); }) == base_key);
    }
    CHECK(key_with([](KeyInputs& in) { std::reverse(in.options.begin(), in.options.end()); }) == base_key);
    CHECK(key_with([](KeyInputs& in) { in.options.push_back(in.options.front()); }) == base_key);
  }
}

TEST_CASE("options naming absolute paths are rejected", "[key]") {
  for (const std::string bad : {"--include-path=/usr/local/cuda/include", "-I/opt/cuda/include", "-Iinclude",
                                "/abs/path/header.h", "--pre-include=/tmp/x.h"}) {
    INFO(bad);
    auto e = error_of([&] { chordrt::jit::check_options_are_portable({"-std=c++17", bad}); });
    REQUIRE(e.has_value());
    CHECK_THAT(std::string(e->what()), Contains(bad) && Contains("path"));
    KeyInputs in =
        inputs_for(chordrt::ops::SiluAndMulFamily::descriptor(Arch{90, 'a'}, chordrt::ops::silu_and_mul_key(2048)));
    in.options.push_back(bad);
    CHECK_THROWS_AS(chordrt::jit::compute_cache_key(in), chordrt::Error);
  }
  // The options chordrt really uses are portable.
  for (Arch arch : {Arch{90, 'a'}, Arch{100, 'a'}, Arch{80, 0}}) {
    CHECK_NOTHROW(chordrt::jit::check_options_are_portable(chordrt::nvrtc_options(arch, 13, 0)));
  }
  CHECK_NOTHROW(chordrt::jit::check_options_are_portable({"-DNAME=1", "--gpu-architecture=sm_90a", "-lineinfo"}));
}

TEST_CASE("-minimal only where NVRTC has it (12.4 on)", "[key]") {
  auto has_minimal = [](int major, int minor) {
    const auto o = chordrt::nvrtc_options(Arch{90, 'a'}, major, minor);
    return std::find(o.begin(), o.end(), "-minimal") != o.end();
  };
  CHECK_FALSE(has_minimal(12, 3));
  CHECK(has_minimal(12, 4));
  CHECK(has_minimal(12, 9));
  CHECK(has_minimal(13, 0));
  CHECK(chordrt::nvrtc_options(Arch{90, 'a'}, 12, 3).size() + 1 == chordrt::nvrtc_options(Arch{90, 'a'}, 13, 0).size());
}

TEST_CASE("canonical serialization and to_string formats", "[key]") {
  const Descriptor d(kTestSchema, Arch{90, 'a'}, {7, -12});
  CHECK(chordrt::jit::canonical_serialization(d) == "6:family=11:test.family;4:arch=6:sm_90a;5:alpha=1:7;1:b=3:-12;");
  CHECK(chordrt::jit::to_string(d) == "test.family[sm_90a]{alpha=7,b=-12}");

  const Descriptor plain(kTestSchema, Arch{80, 0}, {1234567890123, 0});
  CHECK(chordrt::jit::canonical_serialization(plain) ==
        "6:family=11:test.family;4:arch=5:sm_80;5:alpha=13:1234567890123;1:b=1:0;");
  CHECK(chordrt::jit::to_string(plain) == "test.family[sm_80]{alpha=1234567890123,b=0}");

  const Descriptor align =
      chordrt::ops::MoeAlignFamily::descriptor(Arch{90, 'a'}, {384, 16, 1, kSingleCta.threads, kSingleCta.cluster});
  CHECK(chordrt::jit::to_string(align) ==
        "glue.moe_align[sm_90a]{num_experts=384,block_size=16,has_expert_map=1,threads=1024,cluster=1}");
  CHECK(chordrt::jit::canonical_serialization(align) ==
        "6:family=14:glue.moe_align;4:arch=6:sm_90a;11:num_experts=3:384;10:block_size=2:16;"
        "14:has_expert_map=1:1;7:threads=4:1024;7:cluster=1:1;");
}

TEST_CASE("Arch::parse accepts sm_XX[a] and XX[a] only", "[key]") {
  struct Case {
    const char* text;
    int sm;
    char suffix;
  };
  for (const Case& c :
       {Case{"sm_90a", 90, 'a'}, Case{"sm_90", 90, 0}, Case{"90a", 90, 'a'}, Case{"90", 90, 0},
        Case{"sm_100a", 100, 'a'}, Case{"sm_120", 120, 0}, Case{"sm_70", 70, 0}, Case{"sm_80", 80, 0}}) {
    INFO(c.text);
    const Arch a = Arch::parse(c.text);
    CHECK(a.sm == c.sm);
    CHECK(a.suffix == c.suffix);
    CHECK(Arch::parse(a.name()) == a);
  }
  CHECK(Arch::parse("90a").name() == "sm_90a");
  CHECK(Arch::parse("sm_90").name() == "sm_90");

  for (const char* bad :
       {"", "sm_", "sm_9", "garbage", "sm_90b", "sm_90aa", "sm_1000", "compute_90a", "sm_60", "sm_90a ", " sm_90a",
        "SM_90A", "sm90a", "sm_-90", "a90", "sm_99999999999999999999", "4294967386"}) {
    INFO("\"" << bad << "\"");
    check_invalid_argument([&] { Arch::parse(bad); }, {"arch"});
  }
}

TEST_CASE("Arch::for_compute_capability picks the arch-specific target from Hopper on", "[key]") {
  CHECK(Arch::for_compute_capability(9, 0) == Arch{90, 'a'});
  CHECK(Arch::for_compute_capability(10, 0) == Arch{100, 'a'});
  CHECK(Arch::for_compute_capability(8, 0) == Arch{80, 0});
  CHECK(Arch::for_compute_capability(8, 9) == Arch{89, 0});
}

TEST_CASE("Descriptor construction, get and hashing", "[key]") {
  const Descriptor d(kTestSchema, Arch{90, 'a'}, {7, -12});
  CHECK(d.get("alpha") == 7);
  CHECK(d.get("b") == -12);
  auto e = error_of([&] { (void)d.get("gamma"); });
  REQUIRE(e.has_value());
  CHECK_THAT(std::string(e->what()), Contains("gamma") && Contains("test.family"));

  CHECK_THROWS_AS(Descriptor(kTestSchema, Arch{90, 'a'}, {1}), chordrt::Error);
  CHECK_THROWS_AS(Descriptor(kTestSchema, Arch{90, 'a'}, {1, 2, 3}), chordrt::Error);

  const Descriptor same(kTestSchema, Arch{90, 'a'}, {7, -12});
  const Descriptor other_value(kTestSchema, Arch{90, 'a'}, {7, -13});
  const Descriptor other_arch(kTestSchema, Arch{90, 0}, {7, -12});
  const Descriptor other_schema(kOtherFamilySchema, Arch{90, 'a'}, {7, -12});
  CHECK(d == same);
  CHECK_FALSE(d == other_value);
  CHECK_FALSE(d == other_arch);
  CHECK_FALSE(d == other_schema);
  CHECK(chordrt::jit::hash_value(d) == chordrt::jit::hash_value(same));
  CHECK(chordrt::jit::hash_value(d) != chordrt::jit::hash_value(other_value));
  CHECK(chordrt::jit::hash_value(d) != chordrt::jit::hash_value(other_arch));
  CHECK(chordrt::jit::DescriptorHash{}(d) == chordrt::jit::DescriptorHash{}(same));

  const Descriptor silu =
      chordrt::ops::SiluAndMulFamily::descriptor(Arch{90, 'a'}, chordrt::ops::silu_and_mul_key(2048));
  CHECK(silu.get("vec") == 8);
  CHECK(silu.get("threads") == 256);
}
