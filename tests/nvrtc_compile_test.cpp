// NVRTC end to end (no GPU needed): every registered family's example descriptors compile to sm_90a
// cubins; compile failures carry the log; descriptor JSON round trips and validation.
#include <catch2/catch.hpp>
#include <set>
#include <string>
#include <vector>

#include "chordrt/chordrt.hpp"
#include "jit_cache/disk_cache.hpp"
#include "runtime/jit_runtime.hpp"
#include "runtime/kernel_registry.hpp"
#include "runtime/kernel_sources.hpp"
#include "runtime/nvrtc_compiler.hpp"
#include "runtime/ops/glue.hpp"
#include "tests/test_support.hpp"

using Catch::Matchers::Contains;
using chordrt::Arch;
using chordrt::ImageSource;
using chordrt::JitRuntime;
using chordrt::KernelFamily;
using chordrt::jit::Descriptor;
using chordrt::test::check_invalid_argument;
using chordrt::test::error_of;
using chordrt::test::kHopper;
using chordrt::test::kSingleCta;
using chordrt::test::options_for;
using chordrt::test::TempDir;
using nlohmann::json;

namespace {

bool is_elf(const std::string& bytes) {
  return bytes.size() > 4 && bytes.compare(0, 4,
                                           "\x7f"
                                           "ELF") == 0;
}

}  // namespace

TEST_CASE("NVRTC is available with a supported version", "[nvrtc]") {
  const chordrt::Nvrtc& n = chordrt::Nvrtc::get();
  CHECK(n.major() >= 12);
  CHECK(n.minor() >= 0);
  CHECK_FALSE(n.library_path().empty());
  CHECK(chordrt::Nvrtc::try_get() == &n);
}

TEST_CASE("the registry lists every family", "[nvrtc]") {
  std::set<std::string> names;
  for (const KernelFamily* f : chordrt::kernel_families()) {
    names.insert(std::string(f->schema.family));
    CHECK(chordrt::find_family(f->schema.family) == f);
    CHECK_FALSE(f->examples(kHopper).empty());
    for (const Descriptor& d : f->examples(kHopper)) {
      CHECK(d.schema == &f->schema);
      CHECK(d.arch == kHopper);
      CHECK(&chordrt::family_of(d) == f);
    }
  }
  CHECK(names == std::set<std::string>{"glue.moe_align", "glue.silu_and_mul", "glue.moe_combine", "warp_decode.gate_up",
                                       "warp_decode.down", "w4a16.pack", "grouped.gemm", "indexed.prefill",
                                       "indexed.decode", "sparse_mla.cache_write", "sparse_mla.decode",
                                       "sparse_mla.combine", "dsa_indexer.cache_write", "dsa_indexer.logits",
                                       "dsa_indexer.topk"});
  CHECK(chordrt::find_family("glue.nope") == nullptr);
  CHECK_FALSE(chordrt::embedded_sources().empty());
}

TEST_CASE("every example descriptor compiles for sm_90a", "[nvrtc]") {
  TempDir t("nvrtc-test");
  JitRuntime rt(options_for(t.path()));
  size_t compiled = 0;
  for (const KernelFamily* f : chordrt::kernel_families()) {
    for (const Descriptor& d : f->examples(kHopper)) {
      INFO(chordrt::jit::to_string(d));
      const auto r = rt.ensure_compiled(d);
      CHECK(r.source == ImageSource::kCompiled);
      const auto loaded = rt.disk().load(r.key);
      REQUIRE(loaded.status == chordrt::jit::DiskCache::LoadStatus::kHit);
      const auto& e = loaded.entry;
      CHECK_FALSE(e.cubin.empty());
      CHECK(is_elf(e.cubin));
      CHECK_FALSE(e.meta.lowered_name.empty());
      CHECK(e.meta.lowered_name.rfind("_Z", 0) == 0);  // a mangled C++ symbol
      const auto program = f->program(d);
      CHECK(e.meta.threads == program.threads);
      CHECK(e.meta.dynamic_smem == program.dynamic_smem);
      CHECK(e.meta.cluster == program.cluster);
      CHECK(e.meta.descriptor == chordrt::descriptor_to_json(d));
      CHECK(e.meta.nvrtc_version ==
            std::to_string(chordrt::Nvrtc::get().major()) + "." + std::to_string(chordrt::Nvrtc::get().minor()));
      ++compiled;
    }
  }
  CHECK(compiled >= 6);
  CHECK(rt.stats().compiled == compiled);
}

TEST_CASE("NVRTC compiles in-memory headers directly", "[nvrtc]") {
  const chordrt::Nvrtc& n = chordrt::Nvrtc::get();
  const std::string header = "template <int N> __global__ void probe_kernel(int* p) { p[threadIdx.x] = N; }\n";
  const std::vector<std::pair<std::string_view, std::string_view>> headers = {{"probe/probe.cuh", header}};
  const auto out = n.compile("#include \"probe/probe.cuh\"\n", "probe_kernel<7>",
                             chordrt::nvrtc_options(kHopper, n.major(), n.minor()), headers, "probe");
  CHECK(is_elf(out.cubin));
  CHECK_THAT(out.lowered_name, Contains("probe_kernel"));
  CHECK(out.compile_ms > 0);
}

TEST_CASE("a broken source fails with COMPILE_FAILED, the NVRTC log and the context", "[nvrtc]") {
  const chordrt::Nvrtc& n = chordrt::Nvrtc::get();
  const std::string source = "__global__ void broken_kernel(int* p) { p[0] = undeclared_identifier_xyz; }\n";
  auto e = error_of([&] {
    (void)n.compile(source, "broken_kernel", chordrt::nvrtc_options(kHopper, n.major(), n.minor()), {},
                    "context-descriptor-42");
  });
  REQUIRE(e.has_value());
  CHECK(e->status() == CHORD_ERROR_COMPILE_FAILED);
  const std::string what = e->what();
  CHECK_THAT(what, Contains("context-descriptor-42"));
  CHECK_THAT(what, Contains("undeclared_identifier_xyz"));  // from the log
  CHECK_THAT(what, Contains("error"));

  SECTION("a missing header is a compile failure too") {
    auto h = error_of([&] {
      (void)n.compile("#include \"nope/missing.cuh\"\n", "k", chordrt::nvrtc_options(kHopper, n.major(), n.minor()), {},
                      "ctx-missing");
    });
    REQUIRE(h.has_value());
    CHECK(h->status() == CHORD_ERROR_COMPILE_FAILED);
    CHECK_THAT(std::string(h->what()), Contains("missing.cuh") && Contains("ctx-missing"));
  }
}

TEST_CASE("descriptor JSON round trips for every example", "[nvrtc]") {
  for (Arch arch : {kHopper, Arch{100, 'a'}, Arch{80, 0}}) {
    for (const KernelFamily* f : chordrt::kernel_families()) {
      for (const Descriptor& d : f->examples(arch)) {
        INFO(chordrt::jit::to_string(d));
        const json j = chordrt::descriptor_to_json(d);
        CHECK(j.at("family").get<std::string>() == f->schema.family);
        CHECK(j.at("arch").get<std::string>() == arch.name());
        CHECK(j.at("fields").size() == f->schema.fields.size());
        const Descriptor back = chordrt::descriptor_from_json(j);
        CHECK(back == d);
        // Through text too, as the cache metadata and miss records store it.
        CHECK(chordrt::descriptor_from_json(json::parse(j.dump())) == d);
      }
    }
  }
}

TEST_CASE("descriptor_from_json rejects malformed descriptors", "[nvrtc]") {
  const Descriptor d =
      chordrt::ops::MoeAlignFamily::descriptor(kHopper, {384, 16, 1, kSingleCta.threads, kSingleCta.cluster});
  const json good = chordrt::descriptor_to_json(d);
  REQUIRE(chordrt::descriptor_from_json(good) == d);

  auto rejected = [](const json& j, const std::string& needle) {
    INFO(j.dump() << " / expecting \"" << needle << "\"");
    check_invalid_argument([&] { (void)chordrt::descriptor_from_json(j); }, {needle});
  };

  json j = good;
  j["family"] = "glue.unknown";
  rejected(j, "unknown family");

  j = good;
  j["fields"].erase("block_size");
  rejected(j, "fields");

  j = good;
  j["fields"]["bogus"] = 1;
  rejected(j, "fields");

  j = good;  // right count, wrong name
  j["fields"].erase("threads");
  j["fields"]["thread"] = 1024;
  rejected(j, "threads");

  for (const json& bad_value : {json("16"), json(16.5), json(true), json(nullptr), json::array({16})}) {
    j = good;
    j["fields"]["block_size"] = bad_value;
    rejected(j, "block_size");
  }

  for (const auto& [field, value] : std::vector<std::pair<std::string, int64_t>>{{"num_experts", 0},
                                                                                 {"num_experts", 1025},
                                                                                 {"block_size", 0},
                                                                                 {"block_size", 1025},
                                                                                 {"has_expert_map", 2},
                                                                                 {"threads", 100},
                                                                                 {"threads", 2048},
                                                                                 {"threads", -1}}) {
    j = good;
    j["fields"][field] = value;
    // The error names the field and the value it got.
    rejected(j, field + " must be");
    rejected(j, "got " + std::to_string(value));
  }

  j = good;
  j["arch"] = "sm_9x";
  rejected(j, "arch");

  j = good;
  j.erase("fields");
  rejected(j, "expected");
  rejected(json::array(), "expected");
  rejected(json("glue.moe_align"), "expected");
  j = good;
  j["family"] = 7;
  rejected(j, "expected");
  j = good;
  j["fields"] = json::array({384, 16, 1, 1024});
  rejected(j, "expected");

  // Range checks of the other families.
  json silu = chordrt::descriptor_to_json(
      chordrt::ops::SiluAndMulFamily::descriptor(kHopper, chordrt::ops::silu_and_mul_key(2048)));
  silu["fields"]["vec"] = 3;
  rejected(silu, "vec must be a power of two");
  silu = chordrt::descriptor_to_json(
      chordrt::ops::SiluAndMulFamily::descriptor(kHopper, chordrt::ops::silu_and_mul_key(2048)));
  silu["fields"]["threads"] = 48;
  rejected(silu, "threads=48");
  json combine = chordrt::descriptor_to_json(
      chordrt::ops::MoeCombineFamily::descriptor(kHopper, chordrt::ops::moe_combine_key(8, 7168, false)));
  combine["fields"]["top_k"] = 65;
  rejected(combine, "top_k must be in [1, 64], got 65");
  combine = chordrt::descriptor_to_json(
      chordrt::ops::MoeCombineFamily::descriptor(kHopper, chordrt::ops::moe_combine_key(8, 7168, false)));
  combine["fields"]["filtered"] = -1;
  rejected(combine, "filtered must be in [0, 1], got -1");
  combine = chordrt::descriptor_to_json(
      chordrt::ops::MoeCombineFamily::descriptor(kHopper, chordrt::ops::moe_combine_key(8, 7168, false)));
  combine["fields"]["threads"] = 2048;
  rejected(combine, "threads must be in [32, 1024], got 2048");
}
