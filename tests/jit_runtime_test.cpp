// The JIT runtime without a GPU: memo / disk / compile tiers, rebuilding corrupt entries, many processes
// compiling the same kernels at once, read-only layers, memory-only mode, prewarm bookkeeping.
#include "runtime/jit_runtime.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "chordrt/chordrt.hpp"
#include "jit_cache/cache_maintenance.hpp"
#include "jit_cache/disk_cache.hpp"
#include "runtime/driver.hpp"
#include "runtime/kernel_registry.hpp"
#include "runtime/ops/glue.hpp"
#include "runtime/prewarm.hpp"
#include "tests/test_support.hpp"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using chordrt::EnsureResult;
using chordrt::ImageSource;
using chordrt::JitOptions;
using chordrt::JitRuntime;
using chordrt::jit::CacheMaintenance;
using chordrt::jit::Descriptor;
using chordrt::jit::DiskCache;
using chordrt::test::entry_file;
using chordrt::test::flip_byte;
using chordrt::test::kHopper;
using chordrt::test::kSingleCta;
using chordrt::test::options_for;
using chordrt::test::run_children_together;
using chordrt::test::TempDir;

namespace {

char source_letter(ImageSource s) {
  switch (s) {
    case ImageSource::kMemory:
      return 'M';
    case ImageSource::kDisk:
      return 'D';
    case ImageSource::kCompiled:
      return 'C';
  }
  return '?';
}

// Threads of this process (fork is only safe while there is one).
size_t thread_count() {
  size_t n = 0;
  std::error_code ec;
  for (auto it = fs::directory_iterator("/proc/self/task", ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    ++n;
  }
  return n;
}

void check_no_torn_entries(const fs::path& root, size_t expected_entries) {
  const auto infos = CacheMaintenance(DiskCache::Options{root, {}, 0}).list();
  CHECK(infos.size() == expected_entries);
  for (const auto& i : infos) {
    INFO(i.key);
    CHECK(i.problem.empty());
    CHECK(i.meta.has_value());
  }
  for (const auto& f : fs::recursive_directory_iterator(root / "entries")) {
    INFO(f.path());
    CHECK(f.path().filename().string().find(".tmp.") == std::string::npos);
  }
}

}  // namespace

TEST_CASE("ensure_compiled: compile once, then memory, then disk", "[runtime]") {
  TempDir t("runtime-test");
  const Descriptor d = chordrt::ops::SiluAndMulFamily::descriptor(kHopper, chordrt::ops::silu_and_mul_key(2048));
  std::string key;
  {
    JitRuntime rt(options_for(t.path()));
    const EnsureResult first = rt.ensure_compiled(d);
    CHECK(first.source == ImageSource::kCompiled);
    CHECK(first.compile_ms > 0);
    CHECK(first.key == rt.key_of(d));
    key = first.key;
    CHECK(rt.stats().compiled == 1);
    CHECK(rt.stats().disk_hits == 0);
    CHECK(rt.stats().loaded == 0);
    CHECK(fs::is_regular_file(entry_file(t.path(), key, ".cubin")));
    CHECK(fs::is_regular_file(entry_file(t.path(), key, ".json")));

    const EnsureResult second = rt.ensure_compiled(d);
    CHECK(second.source == ImageSource::kMemory);
    CHECK(second.key == key);
    CHECK(second.compile_ms == 0);
    CHECK(rt.stats().compiled == 1);

    // The entry's metadata describes the kernel.
    const auto loaded = rt.disk().load(key);
    REQUIRE(loaded.status == DiskCache::LoadStatus::kHit);
    CHECK(loaded.entry.meta.descriptor == chordrt::descriptor_to_json(d));
    CHECK(loaded.entry.meta.descriptor_text == chordrt::jit::to_string(d));
    CHECK(loaded.entry.meta.threads == static_cast<uint32_t>(d.get("threads")));
    CHECK_FALSE(loaded.entry.meta.lowered_name.empty());
    CHECK(loaded.entry.meta.compile_ms == first.compile_ms);
  }
  JitRuntime fresh(options_for(t.path()));
  const EnsureResult third = fresh.ensure_compiled(d);
  CHECK(third.source == ImageSource::kDisk);
  CHECK(third.key == key);
  CHECK(fresh.stats().compiled == 0);
  CHECK(fresh.stats().disk_hits == 1);
  CHECK(fresh.ensure_compiled(d).source == ImageSource::kMemory);
  CHECK(fresh.stats().disk_hits == 1);
}

TEST_CASE("a corrupt cubin on disk is rebuilt", "[runtime]") {
  TempDir t("runtime-test");
  const Descriptor d =
      chordrt::ops::MoeCombineFamily::descriptor(kHopper, chordrt::ops::moe_combine_key(8, 7168, false));
  std::string key;
  {
    JitRuntime rt(options_for(t.path()));
    key = rt.ensure_compiled(d).key;
  }
  SECTION("flipped byte") { flip_byte(entry_file(t.path(), key, ".cubin"), 64); }
  SECTION("truncated cubin") { fs::resize_file(entry_file(t.path(), key, ".cubin"), 16); }
  SECTION("garbage metadata") { std::ofstream(entry_file(t.path(), key, ".json"), std::ios::trunc) << "{]"; }

  JitRuntime rebuild(options_for(t.path()));
  const EnsureResult r = rebuild.ensure_compiled(d);
  CHECK(r.source == ImageSource::kCompiled);
  CHECK(r.key == key);
  CHECK(rebuild.stats().compiled == 1);
  check_no_torn_entries(t.path(), 1);
  JitRuntime after(options_for(t.path()));
  CHECK(after.ensure_compiled(d).source == ImageSource::kDisk);
  CHECK(after.disk().load(key).status == DiskCache::LoadStatus::kHit);
}

TEST_CASE("six processes compiling the same kernel at once compile it once", "[runtime][concurrency]") {
  TempDir t("runtime-test");
  const fs::path dir = t.path() / "shared";
  const Descriptor d =
      chordrt::ops::MoeAlignFamily::descriptor(kHopper, {256, 16, 0, kSingleCta.threads, kSingleCta.cluster});
  if (thread_count() != 1) WARN("forking with " << thread_count() << " threads");
  const auto results = run_children_together(6, [&](int) {
    JitRuntime rt(options_for(dir));
    return std::string(1, source_letter(rt.ensure_compiled(d).source));
  });
  REQUIRE(results.size() == 6);
  INFO("children: " << results[0] << results[1] << results[2] << results[3] << results[4] << results[5]);
  CHECK(std::count(results.begin(), results.end(), "C") == 1);
  CHECK(std::count(results.begin(), results.end(), "D") == 5);
  check_no_torn_entries(dir, 1);
  JitRuntime rt(options_for(dir));
  const auto infos = CacheMaintenance(rt.disk().options()).list();
  REQUIRE(infos.size() == 1);
  CHECK(infos[0].key == rt.key_of(d));
}

TEST_CASE("six processes compiling three kernels in different orders", "[runtime][concurrency]") {
  TempDir t("runtime-test");
  const fs::path dir = t.path() / "shared";
  const std::vector<Descriptor> ds = {
      chordrt::ops::MoeAlignFamily::descriptor(kHopper, {128, 32, 1, kSingleCta.threads, kSingleCta.cluster}),
      chordrt::ops::SiluAndMulFamily::descriptor(kHopper, chordrt::ops::silu_and_mul_key(1536)),
      chordrt::ops::MoeCombineFamily::descriptor(kHopper, chordrt::ops::moe_combine_key(6, 5120, true))};
  const int orders[6][3] = {{0, 1, 2}, {2, 1, 0}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {0, 2, 1}};
  const auto results = run_children_together(6, [&](int child) {
    JitRuntime rt(options_for(dir));
    std::string sources(3, '?');
    for (int i : orders[child]) sources[i] = source_letter(rt.ensure_compiled(ds[i]).source);
    return sources;
  });
  REQUIRE(results.size() == 6);
  for (size_t i = 0; i < ds.size(); ++i) {
    int compiled = 0, from_disk = 0;
    for (const auto& r : results) {
      REQUIRE(r.size() == 3);
      compiled += r[i] == 'C';
      from_disk += r[i] == 'D';
    }
    INFO(chordrt::jit::to_string(ds[i]) << ": " << results[0] << " " << results[1] << " " << results[2] << " "
                                        << results[3] << " " << results[4] << " " << results[5]);
    CHECK(compiled == 1);
    CHECK(from_disk == 5);
  }
  check_no_torn_entries(dir, 3);
  JitRuntime rt(options_for(dir));
  for (const auto& d : ds) CHECK(rt.ensure_compiled(d).source == ImageSource::kDisk);
}

TEST_CASE("threads of one runtime compiling the same kernel compile it once", "[runtime][concurrency]") {
  TempDir t("runtime-test");
  JitRuntime rt(options_for(t.path()));
  const Descriptor d = chordrt::ops::SiluAndMulFamily::descriptor(kHopper, chordrt::ops::silu_and_mul_key(100));
  std::vector<ImageSource> sources(4);
  std::vector<std::string> errors(4);
  {
    std::vector<std::thread> threads;
    for (int i = 0; i < 4; ++i) {
      threads.emplace_back([&, i] {
        try {
          sources[i] = rt.ensure_compiled(d).source;
        } catch (const std::exception& e) {
          errors[i] = e.what();
        }
      });
    }
    for (auto& th : threads) th.join();
  }
  for (const auto& e : errors) CHECK(e.empty());
  CHECK(std::count(sources.begin(), sources.end(), ImageSource::kCompiled) == 1);
  CHECK(rt.stats().compiled == 1);
  check_no_torn_entries(t.path(), 1);
}

TEST_CASE("read-only layers serve a runtime without copying into its primary", "[runtime]") {
  TempDir t("runtime-test");
  const Descriptor d = chordrt::ops::SiluAndMulFamily::descriptor(kHopper, chordrt::ops::silu_and_mul_key(7));
  {
    JitRuntime builder(options_for(t.path() / "shipped"));
    REQUIRE(builder.ensure_compiled(d).source == ImageSource::kCompiled);
  }
  JitOptions o = options_for(t.path() / "primary");
  o.cache.read_only_layers = {t.path() / "shipped"};
  JitRuntime rt(o);
  CHECK(rt.ensure_compiled(d).source == ImageSource::kDisk);
  CHECK(rt.stats().compiled == 0);
  CacheMaintenance primary_only(DiskCache::Options{t.path() / "primary", {}, 0});
  CHECK(primary_only.list().empty());
}

TEST_CASE("a memory-only runtime still compiles, but nothing persists", "[runtime]") {
  TempDir t("runtime-test");
  std::ofstream(t.path() / "file") << "x";
  const Descriptor d = chordrt::ops::SiluAndMulFamily::descriptor(kHopper, chordrt::ops::silu_and_mul_key(7));
  JitRuntime rt(options_for(t.path() / "file" / "cache"));
  CHECK(rt.disk().memory_only());
  CHECK(rt.ensure_compiled(d).source == ImageSource::kCompiled);
  CHECK(rt.ensure_compiled(d).source == ImageSource::kMemory);
  JitRuntime again(options_for(t.path() / "file" / "cache"));
  CHECK(again.ensure_compiled(d).source == ImageSource::kCompiled);
}

TEST_CASE("strict mode and miss recording only concern run-time misses", "[runtime]") {
  TempDir t("runtime-test");
  JitOptions o = options_for(t.path() / "c");
  o.strict = true;
  o.record_misses = (t.path() / "misses.jsonl").string();
  JitRuntime rt(o);
  const Descriptor d =
      chordrt::ops::MoeCombineFamily::descriptor(kHopper, chordrt::ops::moe_combine_key(2, 256, false));
  // Strict mode (CHORD_JIT_STRICT) turns a miss inside kernel() -- a launch -- into STRICT_MISS, and
  // record_misses logs such misses; kernel() needs a driver and a context, so neither can be observed on
  // a machine without a GPU. What is testable: ensure_compiled is the ahead-of-time path (prewarm), which
  // strict mode must not block, and which is not a run-time miss to record.
  CHECK(rt.ensure_compiled(d).source == ImageSource::kCompiled);
  CHECK(rt.ensure_compiled(d).source == ImageSource::kMemory);
  CHECK_FALSE(fs::exists(o.record_misses));

  if (chordrt::driver().state != chordrt::DriverState::kReady) {
    // Compile-only mode: a launch path fails with the driver's status before any lookup or compile.
    const Descriptor other =
        chordrt::ops::MoeCombineFamily::descriptor(kHopper, chordrt::ops::moe_combine_key(3, 256, false));
    try {
      rt.kernel(other, chordrt::ContextState{}, nullptr);
      FAIL("kernel() succeeded without a driver");
    } catch (const chordrt::Error& e) {
      CHECK((e.status() == CHORD_ERROR_NO_DRIVER || e.status() == CHORD_ERROR_NO_DEVICE));
    }
    CHECK(rt.stats().compiled == 1);
    CHECK(rt.stats().loaded == 0);
  }
}

TEST_CASE("prewarm_one reports what it did and never throws", "[runtime][prewarm]") {
  TempDir t("runtime-test");
  JitRuntime rt(options_for(t.path()));
  const Descriptor d = chordrt::ops::SiluAndMulFamily::descriptor(kHopper, chordrt::ops::silu_and_mul_key(4096));
  const auto first = chordrt::prewarm_one(rt, d);
  CHECK(first.ok);
  CHECK_FALSE(first.cached);
  CHECK(first.compile_ms > 0);
  CHECK(first.error.empty());
  CHECK(first.descriptor == chordrt::jit::to_string(d));
  const auto second = chordrt::prewarm_one(rt, d);
  CHECK(second.ok);
  CHECK(second.cached);
  CHECK(second.compile_ms == 0);

  JitRuntime other(options_for(t.path()));
  const auto from_disk = chordrt::prewarm_one(other, d);
  CHECK(from_disk.ok);
  CHECK(from_disk.cached);

  // A descriptor the family rejects (vec must be 1, 2, 4 or 8).
  Descriptor bad = d;
  bad.values[0] = 3;
  const auto failed = chordrt::prewarm_one(rt, bad);
  CHECK_FALSE(failed.ok);
  CHECK_THAT(failed.error, Contains("vec must be a power of two"));

  const std::vector<chordrt::PrewarmItem> items = {first, second, from_disk, failed};
  const auto s = chordrt::summarize(items);
  CHECK(s.compiled == 1);
  CHECK(s.cached == 2);
  CHECK(s.failed == 1);
  CHECK(s.median_compile_ms == Approx(first.compile_ms));
  CHECK(s.max_compile_ms == Approx(first.compile_ms));
}

TEST_CASE("summarize counts and the median / max of compile times", "[prewarm]") {
  auto compiled = [](double ms) {
    chordrt::PrewarmItem i;
    i.ok = true;
    i.compile_ms = ms;
    return i;
  };
  chordrt::PrewarmItem cached;
  cached.ok = true;
  cached.cached = true;
  cached.compile_ms = 1000;  // ignored: nothing was compiled
  chordrt::PrewarmItem failed;
  failed.error = "boom";
  failed.compile_ms = 2000;

  SECTION("nothing") {
    const auto s = chordrt::summarize({});
    CHECK(s.compiled == 0);
    CHECK(s.cached == 0);
    CHECK(s.failed == 0);
    CHECK(s.median_compile_ms == 0);
    CHECK(s.max_compile_ms == 0);
  }
  SECTION("odd count, unsorted") {
    const std::vector<chordrt::PrewarmItem> items = {compiled(50), cached, compiled(10), failed, compiled(30)};
    const auto s = chordrt::summarize(items);
    CHECK(s.compiled == 3);
    CHECK(s.cached == 1);
    CHECK(s.failed == 1);
    CHECK(s.median_compile_ms == Approx(30));
    CHECK(s.max_compile_ms == Approx(50));
  }
  SECTION("even count") {
    const std::vector<chordrt::PrewarmItem> items = {compiled(4), compiled(1), compiled(100), compiled(2)};
    const auto s = chordrt::summarize(items);
    CHECK(s.compiled == 4);
    CHECK(s.median_compile_ms == Approx(3));
    CHECK(s.max_compile_ms == Approx(100));
  }
  SECTION("only cached and failed") {
    const std::vector<chordrt::PrewarmItem> items = {cached, cached, failed};
    const auto s = chordrt::summarize(items);
    CHECK(s.compiled == 0);
    CHECK(s.cached == 2);
    CHECK(s.failed == 1);
    CHECK(s.median_compile_ms == 0);
    CHECK(s.max_compile_ms == 0);
  }
}
