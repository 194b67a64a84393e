// The on-disk cache on its own: round trips, corruption and truncation, read-only layers, memory-only
// degradation, LRU pruning, the size cap and its incremental byte count, maintenance (list, prune,
// remove, clear) of what the hot path wrote, the per-key lock, parse_size.
#include "jit_cache/disk_cache.hpp"

#include <fcntl.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "chordrt/chordrt.hpp"
#include "jit_cache/cache_key.hpp"
#include "jit_cache/cache_layout.hpp"
#include "jit_cache/cache_maintenance.hpp"
#include "runtime/core/logging.hpp"
#include "tests/test_support.hpp"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using chordrt::jit::CacheEntry;
using chordrt::jit::CacheMaintenance;
using chordrt::jit::DiskCache;
using chordrt::test::check_invalid_argument;
using chordrt::test::entry_file;
using chordrt::test::flip_byte;
using chordrt::test::spit;
using chordrt::test::TempDir;
using chordrt::test::wait_for;
using Status = DiskCache::LoadStatus;

namespace {

// A synthetic entry; seeds of equal length give entries of equal size.
CacheEntry make_entry(const std::string& seed, size_t cubin_bytes = 512) {
  CacheEntry e;
  e.meta.key = chordrt::jit::hex_digest128(seed);
  e.cubin.resize(cubin_bytes);
  for (size_t i = 0; i < cubin_bytes; ++i) e.cubin[i] = static_cast<char>((i * 131 + seed.size() * 7 + seed[0]) & 0xff);
  e.cubin.replace(0, 4,
                  "\x7f"
                  "ELF");
  e.meta.descriptor = {{"family", "test.family"}, {"arch", "sm_90a"}, {"fields", {{"seed", seed}}}};
  e.meta.descriptor_text = "test.family[sm_90a]{seed=" + seed + "}";
  e.meta.lowered_name = "_Z11test_kernelv";
  e.meta.threads = 128;
  e.meta.dynamic_smem = 4096;
  e.meta.cluster = {2, 1, 1};
  e.meta.cubin_size = e.cubin.size();
  e.meta.cubin_checksum = chordrt::jit::hex_digest128(e.cubin);
  e.meta.compile_ms = 12.5;
  e.meta.nvrtc_version = "13.0";
  e.meta.created_unix = 1700000000;
  return e;
}

void set_mtime(const fs::path& p, int64_t unix_seconds) {
  timespec times[2];
  times[0].tv_sec = unix_seconds;
  times[0].tv_nsec = 0;
  times[1] = times[0];
  REQUIRE(::utimensat(AT_FDCWD, p.c_str(), times, 0) == 0);
}

int64_t mtime_of(const fs::path& p) {
  struct stat st {};
  REQUIRE(::stat(p.c_str(), &st) == 0);
  return st.st_mtim.tv_sec;
}

DiskCache::Options opts(const fs::path& primary, std::vector<fs::path> layers = {}, uint64_t max_bytes = 0) {
  DiskCache::Options o;
  o.primary = primary;
  o.read_only_layers = std::move(layers);
  o.max_bytes = max_bytes;
  return o;
}

const CacheMaintenance::EntryInfo* find_info(const std::vector<CacheMaintenance::EntryInfo>& infos,
                                             const fs::path& layer, const std::string& key) {
  for (const auto& i : infos) {
    if (i.layer == layer && i.key == key) return &i;
  }
  return nullptr;
}

// Maintenance of the directories a hot-path cache uses, as chord-jit does it.
CacheMaintenance maint(const DiskCache& cache) { return CacheMaintenance(cache.options()); }

uint64_t entry_bytes(const fs::path& root, const std::string& key) {
  return fs::file_size(entry_file(root, key, ".json")) + fs::file_size(entry_file(root, key, ".cubin"));
}

// Bytes under root/entries, walked here (not through the cache, so the walk is not counted).
uint64_t bytes_on_disk(const fs::path& root) {
  uint64_t n = 0;
  for (const auto& f : fs::recursive_directory_iterator(root / "entries")) {
    if (f.is_regular_file()) n += f.file_size();
  }
  return n;
}

}  // namespace

TEST_CASE("store then load round-trips an entry", "[cache]") {
  TempDir t("cache-test");
  DiskCache cache(opts(t.path() / "c"));
  REQUIRE_FALSE(cache.memory_only());
  const CacheEntry e = make_entry("round-trip");
  CHECK(cache.load(e.meta.key).status == Status::kMiss);
  REQUIRE(cache.store(e));
  CHECK(fs::is_regular_file(entry_file(t.path() / "c", e.meta.key, ".cubin")));
  CHECK(fs::is_regular_file(entry_file(t.path() / "c", e.meta.key, ".json")));

  const auto r = cache.load(e.meta.key);
  REQUIRE(r.status == Status::kHit);
  CHECK(r.problem.empty());
  CHECK(r.layer == t.path() / "c");
  CHECK(r.entry.cubin == e.cubin);
  CHECK(r.entry.meta.to_json() == e.meta.to_json());
  CHECK(r.entry.meta.cluster == e.meta.cluster);
  CHECK(r.entry.meta.lowered_name == "_Z11test_kernelv");

  // Another instance on the same directory (another process, later) sees it too.
  DiskCache again(opts(t.path() / "c"));
  CHECK(again.load(e.meta.key).status == Status::kHit);
  CHECK(again.load(make_entry("other-key").meta.key).status == Status::kMiss);

  // Storing the same key again replaces the entry.
  CacheEntry replaced = make_entry("round-trip", 100);
  REQUIRE(cache.store(replaced));
  CHECK(cache.load(e.meta.key).entry.cubin == replaced.cubin);

  // No temp or probe files are left behind.
  for (const auto& f : fs::recursive_directory_iterator(t.path() / "c")) {
    INFO(f.path());
    CHECK(f.path().filename().string().find(".tmp.") == std::string::npos);
    CHECK(f.path().filename().string().find(".probe") == std::string::npos);
  }
}

TEST_CASE("CacheEntryMeta JSON round trip and format check", "[cache]") {
  const CacheEntry e = make_entry("meta-json");
  const auto j = e.meta.to_json();
  CHECK(j.at("format") == 1);
  const auto back = chordrt::jit::CacheEntryMeta::from_json(j);
  CHECK(back.to_json() == j);
  auto future = j;
  future["format"] = 2;
  CHECK_THROWS(chordrt::jit::CacheEntryMeta::from_json(future));
  auto missing = j;
  missing.erase("cubin_checksum");
  CHECK_THROWS(chordrt::jit::CacheEntryMeta::from_json(missing));
  // Integers only, in range: nlohmann casts a float to the field's type (undefined past its range; the
  // cache_entry fuzzer found "dynamic_smem": 1e+300 under UBSan).
  for (const auto& [field, value] : {std::pair<const char*, nlohmann::json>{"threads", 1e300},
                                     {"dynamic_smem", 128.5},
                                     {"threads", -1},
                                     {"dynamic_smem", 4294967296LL},
                                     {"cubin_size", -5},
                                     {"created_unix", 1e19},
                                     {"format", 1e300},
                                     {"cluster", nlohmann::json::array({1, 1e300, 1})},
                                     {"cluster", nlohmann::json::array({1, 1})},
                                     {"threads", "128"}}) {
    auto bad = j;
    bad[field] = value;
    INFO(field << " = " << value.dump());
    CHECK_THROWS_WITH(chordrt::jit::CacheEntryMeta::from_json(bad), Catch::Matchers::Contains(field));
  }
}

TEST_CASE("corrupt and truncated entries are detected and removed", "[cache]") {
  TempDir t("cache-test");
  const fs::path root = t.path() / "c";
  DiskCache cache(opts(root));
  const CacheEntry e = make_entry("corruption");
  const std::string& key = e.meta.key;
  REQUIRE(cache.store(e));
  const fs::path cubin = entry_file(root, key, ".cubin");
  const fs::path json = entry_file(root, key, ".json");

  std::string expected_problem;
  SECTION("a flipped cubin byte") {
    flip_byte(cubin, 200);
    expected_problem = "checksum";
  }
  SECTION("a truncated cubin") {
    fs::resize_file(cubin, e.cubin.size() / 2);
    expected_problem = "bytes";
  }
  SECTION("an empty cubin") {
    fs::resize_file(cubin, 0);
    expected_problem = "bytes";
  }
  SECTION("a missing cubin") {
    fs::remove(cubin);
    expected_problem = "cubin missing";
  }
  SECTION("garbage metadata") {
    spit(json, "{\"format\": 1, \"key\": tru");
    expected_problem = "metadata";
  }
  SECTION("truncated metadata") {
    fs::resize_file(json, fs::file_size(json) / 2);
    expected_problem = "metadata";
  }
  SECTION("metadata of another key") {
    spit(json, make_entry("somebody-else").meta.to_json().dump());
    expected_problem = "key";
  }
  const auto r = cache.load(key);
  CHECK(r.status == Status::kCorrupt);
  CHECK_FALSE(r.problem.empty());
  CHECK_THAT(r.problem, Contains(expected_problem));
  CHECK(r.layer == root);
  // The bad entry is gone, so the caller's rebuild replaces it and the next load is a plain miss.
  CHECK_FALSE(fs::exists(json));
  CHECK_FALSE(fs::exists(cubin));
  CHECK(cache.load(key).status == Status::kMiss);
  REQUIRE(cache.store(e));
  const auto again = cache.load(key);
  CHECK(again.status == Status::kHit);
  CHECK(again.entry.cubin == e.cubin);
}

TEST_CASE("hostile entry files are rejected, never read blindly", "[cache]") {
  // Files a shared or read-only layer could hold: each makes the entry corrupt (listed with the reason,
  // removed from the primary by load) instead of crashing, hanging or exhausting memory.
  TempDir t("cache-test");
  const fs::path root = t.path() / "c";
  DiskCache cache(opts(root));
  const CacheEntry e = make_entry("hostile");
  const std::string& key = e.meta.key;
  REQUIRE(cache.store(e));
  const fs::path cubin = entry_file(root, key, ".cubin");
  const fs::path json = entry_file(root, key, ".json");

  std::string expected_problem;
  // Descriptors nested 10^5 deep (within the size limit) and 10^6 deep (beyond it).
  const auto nested = [&](int depth) {
    nlohmann::json meta = e.meta.to_json();
    meta.erase("descriptor");
    std::string text = meta.dump();
    text.pop_back();
    return text + ",\"descriptor\":" + std::string(depth, '[') + std::string(depth, ']') + "}";
  };
  SECTION("a descriptor nested 100000 levels deep") {
    spit(json, nested(100000));
    expected_problem = "nested more than 16 levels";
  }
  SECTION("a descriptor nested a million levels deep") {
    spit(json, nested(1000000));
    expected_problem = "more than the 1048576";
  }
  SECTION("a FIFO in place of the metadata") {
    fs::remove(json);
    REQUIRE(::mkfifo(json.c_str(), 0644) == 0);
    expected_problem = "not a regular file";
  }
  SECTION("the cubin a link to /dev/zero") {
    fs::remove(cubin);
    fs::create_symlink("/dev/zero", cubin);
    expected_problem = "not a regular file";
  }
  SECTION("a directory in place of the cubin") {
    fs::remove(cubin);
    fs::create_directory(cubin);
    expected_problem = "not a regular file";
  }
  SECTION("metadata of more than 1 MiB") {
    spit(json, e.meta.to_json().dump() + std::string(2 << 20, ' '));
    expected_problem = "more than";
  }
  const auto infos = maint(cache).list();
  REQUIRE(infos.size() == 1);
  CHECK_THAT(infos[0].problem, Contains(expected_problem));
  const auto r = cache.load(key);
  CHECK(r.status == Status::kCorrupt);
  CHECK_THAT(r.problem, Contains(expected_problem));
  CHECK_FALSE(fs::exists(fs::symlink_status(json)));
  CHECK_FALSE(fs::exists(fs::symlink_status(cubin)));
  REQUIRE(cache.store(e));
  CHECK(cache.load(key).status == Status::kHit);
}

TEST_CASE("read-only layers are searched after the primary", "[cache]") {
  TempDir t("cache-test");
  const fs::path primary = t.path() / "primary";
  const fs::path layer = t.path() / "layer";
  const CacheEntry in_layer = make_entry("layer-entry");
  {
    DiskCache writer(opts(layer));
    REQUIRE(writer.store(in_layer));
  }
  const fs::path layer_json = entry_file(layer, in_layer.meta.key, ".json");
  set_mtime(layer_json, 1000000);

  DiskCache cache(opts(primary, {t.path() / "missing-layer", layer}));
  REQUIRE_FALSE(cache.memory_only());

  SECTION("a key only the layer has") {
    const auto r = cache.load(in_layer.meta.key);
    REQUIRE(r.status == Status::kHit);
    CHECK(r.layer == layer);
    CHECK(r.entry.cubin == in_layer.cubin);
    // Nothing was copied into the primary, and the layer was not touched (no LRU refresh).
    CHECK_FALSE(fs::exists(entry_file(primary, in_layer.meta.key, ".json")));
    CHECK(mtime_of(layer_json) == 1000000);
  }
  SECTION("the primary's copy wins") {
    CacheEntry newer = make_entry("layer-entry", 300);
    REQUIRE(cache.store(newer));
    const auto r = cache.load(in_layer.meta.key);
    REQUIRE(r.status == Status::kHit);
    CHECK(r.layer == primary);
    CHECK(r.entry.cubin == newer.cubin);
  }
  SECTION("a corrupt primary entry falls back to the layer's good copy") {
    REQUIRE(cache.store(in_layer));
    flip_byte(entry_file(primary, in_layer.meta.key, ".cubin"), 10);
    const auto r = cache.load(in_layer.meta.key);
    REQUIRE(r.status == Status::kHit);
    CHECK(r.layer == layer);
    CHECK(r.entry.cubin == in_layer.cubin);
    // The corrupt primary copy was removed.
    CHECK_FALSE(fs::exists(entry_file(primary, in_layer.meta.key, ".json")));
    CHECK_FALSE(fs::exists(entry_file(primary, in_layer.meta.key, ".cubin")));
  }
  SECTION("a corrupt layer entry is reported but never removed") {
    flip_byte(entry_file(layer, in_layer.meta.key, ".cubin"), 10);
    const auto r = cache.load(in_layer.meta.key);
    CHECK(r.status == Status::kCorrupt);
    CHECK(r.layer == layer);
    CHECK_THAT(r.problem, Contains("checksum"));
    CHECK(fs::exists(layer_json));
    CHECK(fs::exists(entry_file(layer, in_layer.meta.key, ".cubin")));
  }
  SECTION("a corrupt primary entry and no layer copy") {
    const CacheEntry only_primary = make_entry("only-primary");
    REQUIRE(cache.store(only_primary));
    fs::resize_file(entry_file(primary, only_primary.meta.key, ".cubin"), 3);
    const auto r = cache.load(only_primary.meta.key);
    CHECK(r.status == Status::kCorrupt);
    CHECK(r.layer == primary);
    CHECK(cache.load(only_primary.meta.key).status == Status::kMiss);
  }
}

TEST_CASE("an unwritable primary degrades to memory-only", "[cache]") {
  TempDir t("cache-test");
  spit(t.path() / "file", "a regular file");
  const CacheEntry e = make_entry("memory-only");

  SECTION("primary under a regular file (mkdir fails with ENOTDIR)") {
    const fs::path primary = t.path() / "file" / "cache";
    DiskCache cache(opts(primary));
    CHECK(cache.memory_only());
    CHECK_FALSE(cache.store(e));
    CHECK(cache.load(e.meta.key).status == Status::kMiss);
    CHECK(maint(cache).list().empty());
    { auto lock = cache.lock_key(e.meta.key); }  // a no-op, does not throw
    CHECK(fs::is_regular_file(t.path() / "file"));
  }
  SECTION("memory-only still reads the read-only layers") {
    const fs::path layer = t.path() / "layer";
    {
      DiskCache writer(opts(layer));
      REQUIRE(writer.store(e));
    }
    DiskCache cache(opts(t.path() / "file" / "cache", {layer}));
    CHECK(cache.memory_only());
    const auto r = cache.load(e.meta.key);
    CHECK(r.status == Status::kHit);
    CHECK(r.layer == layer);
    CHECK_FALSE(cache.store(make_entry("memory-only2")));
  }
  SECTION("a primary that stops being writable degrades at store") {
    const fs::path primary = t.path() / "c";
    DiskCache cache(opts(primary));
    REQUIRE_FALSE(cache.memory_only());
    REQUIRE(cache.store(e));
    // Replace entries/ with a regular file: creating entries/<xx>/ now fails.
    fs::remove_all(primary / "entries");
    spit(primary / "entries", "not a directory");
    CHECK_FALSE(cache.store(make_entry("after-break")));
    CHECK(cache.memory_only());
    CHECK_FALSE(cache.store(e));
  }
  SECTION("a directory without write permission (only when not root)") {
    if (::geteuid() == 0) {
      SUCCEED("running as root: permission bits do not stop root, skipped");
      return;
    }
    const fs::path ro = t.path() / "ro";
    fs::create_directories(ro);
    REQUIRE(::chmod(ro.c_str(), 0555) == 0);
    DiskCache cache(opts(ro / "cache"));
    CHECK(cache.memory_only());
    CHECK_FALSE(cache.store(e));
    ::chmod(ro.c_str(), 0755);
  }
}

TEST_CASE("prune removes the least recently used entries first", "[cache]") {
  TempDir t("cache-test");
  const fs::path root = t.path() / "c";
  DiskCache cache(opts(root));
  std::vector<CacheEntry> es;
  for (int i = 0; i < 5; ++i) {
    es.push_back(make_entry("lru-entry-" + std::to_string(i)));
    REQUIRE(cache.store(es.back()));
  }
  // Distinct last-use times, oldest first, in an order unrelated to key order.
  for (int i = 0; i < 5; ++i) set_mtime(entry_file(root, es[i].meta.key, ".json"), 1000000 + 1000 * i);
  uint64_t total = 0;
  std::vector<uint64_t> bytes;
  for (const auto& e : es) {
    bytes.push_back(entry_bytes(root, e.meta.key));
    total += bytes.back();
  }
  const auto infos = maint(cache).list();
  REQUIRE(infos.size() == 5);
  for (int i = 0; i < 5; ++i) {
    const auto* info = find_info(infos, root, es[i].meta.key);
    REQUIRE(info != nullptr);
    CHECK(info->last_used_unix == 1000000 + 1000 * i);
    CHECK(info->bytes == bytes[i]);
  }

  SECTION("down to the two newest") {
    const auto r = maint(cache).prune(bytes[3] + bytes[4]);
    CHECK(r.removed == 3);
    CHECK(r.bytes_before == total);
    CHECK(r.bytes_after == bytes[3] + bytes[4]);
    for (int i = 0; i < 3; ++i) CHECK(cache.load(es[i].meta.key).status == Status::kMiss);
    for (int i = 3; i < 5; ++i) CHECK(cache.load(es[i].meta.key).status == Status::kHit);
  }
  SECTION("a load refreshes an entry's LRU time") {
    REQUIRE(cache.load(es[0].meta.key).status == Status::kHit);
    CHECK(mtime_of(entry_file(root, es[0].meta.key, ".json")) > 1000000 + 1000 * 4);
    const auto r = maint(cache).prune(bytes[0] + bytes[4]);
    CHECK(r.removed == 3);
    CHECK(cache.load(es[0].meta.key).status == Status::kHit);
    CHECK(cache.load(es[4].meta.key).status == Status::kHit);
    for (int i = 1; i < 4; ++i) CHECK(cache.load(es[i].meta.key).status == Status::kMiss);
  }
  SECTION("a cap above the total removes nothing, zero removes everything") {
    auto r = maint(cache).prune(total);
    CHECK(r.removed == 0);
    CHECK(r.bytes_after == total);
    CHECK(maint(cache).list().size() == 5);
    r = maint(cache).prune(0);
    CHECK(r.removed == 5);
    CHECK(r.bytes_after == 0);
    CHECK(maint(cache).list().empty());
  }
  SECTION("one byte under the total removes only the oldest") {
    const auto r = maint(cache).prune(total - 1);
    CHECK(r.removed == 1);
    CHECK(cache.load(es[0].meta.key).status == Status::kMiss);
    CHECK(maint(cache).list().size() == 4);
  }
}

TEST_CASE("max_bytes is enforced at store", "[cache]") {
  TempDir t("cache-test");
  const fs::path root = t.path() / "c";
  std::vector<CacheEntry> es;
  for (int i = 0; i < 3; ++i) es.push_back(make_entry("cap-entry-" + std::to_string(i)));
  // Measure one entry's size on disk (all three are the same size).
  uint64_t one = 0;
  {
    DiskCache probe(opts(t.path() / "probe"));
    for (const auto& e : es) REQUIRE(probe.store(e));
    one = entry_bytes(t.path() / "probe", es[0].meta.key);
    REQUIRE(entry_bytes(t.path() / "probe", es[1].meta.key) == one);
    REQUIRE(entry_bytes(t.path() / "probe", es[2].meta.key) == one);
  }
  const uint64_t cap = 2 * one + one / 2;
  DiskCache cache(opts(root, {}, cap));
  REQUIRE(cache.store(es[0]));
  set_mtime(entry_file(root, es[0].meta.key, ".json"), 1000000);
  REQUIRE(cache.store(es[1]));
  set_mtime(entry_file(root, es[1].meta.key, ".json"), 2000000);
  CHECK(maint(cache).list().size() == 2);
  REQUIRE(cache.store(es[2]));
  const auto infos = maint(cache).list();
  CHECK(infos.size() == 2);
  uint64_t sum = 0;
  for (const auto& i : infos) sum += i.bytes;
  CHECK(sum <= cap);
  CHECK(cache.load(es[0].meta.key).status == Status::kMiss);
  CHECK(cache.load(es[1].meta.key).status == Status::kHit);
  CHECK(cache.load(es[2].meta.key).status == Status::kHit);
}

TEST_CASE("a size cap below one entry is reported once", "[cache]") {
  TempDir t("cache-test");
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(16);
  chordrt::logger().sinks().push_back(sink);
  DiskCache cache(opts(t.path() / "c", {}, 100));  // entries are ~1.5 KB
  for (int i = 0; i < 3; ++i) REQUIRE(cache.store(make_entry("tiny-cap-" + std::to_string(i))));
  chordrt::logger().sinks().pop_back();
  int warnings = 0;
  for (const std::string& line : sink->last_formatted()) {
    warnings += line.find("size cap (100 bytes, CHORD_CACHE_MAX_SIZE) is smaller than one entry") != std::string::npos;
  }
  CHECK(warnings == 1);
  CHECK(maint(cache).list().empty());  // what the warning says: each store was evicted
}

TEST_CASE("list reports every layer's entries, verified", "[cache]") {
  TempDir t("cache-test");
  const fs::path root = t.path() / "c";
  const fs::path layer = t.path() / "layer";
  const CacheEntry good = make_entry("list-good");
  const CacheEntry bad = make_entry("list-bad!");
  const CacheEntry layered = make_entry("list-layer");
  {
    DiskCache writer(opts(layer));
    REQUIRE(writer.store(layered));
  }
  DiskCache cache(opts(root, {layer}));
  REQUIRE(cache.store(good));
  REQUIRE(cache.store(bad));
  flip_byte(entry_file(root, bad.meta.key, ".cubin"), 7);
  set_mtime(entry_file(root, good.meta.key, ".json"), 1234567);
  // Files that are not entries are ignored.
  spit(root / "entries" / "zz-not-a-key.json", "{}");
  spit(entry_file(root, good.meta.key, ".json.tmp.1.2"), "partial");

  const auto infos = maint(cache).list();
  CHECK(infos.size() == 3);
  const auto* g = find_info(infos, root, good.meta.key);
  REQUIRE(g != nullptr);
  CHECK(g->problem.empty());
  CHECK_FALSE(g->read_only_layer);
  REQUIRE(g->meta.has_value());
  CHECK(g->meta->descriptor_text == good.meta.descriptor_text);
  CHECK(g->bytes == entry_bytes(root, good.meta.key));
  CHECK(g->last_used_unix == 1234567);

  const auto* b = find_info(infos, root, bad.meta.key);
  REQUIRE(b != nullptr);
  CHECK_THAT(b->problem, Contains("checksum"));
  CHECK(b->meta.has_value());  // the metadata itself is readable

  const auto* l = find_info(infos, layer, layered.meta.key);
  REQUIRE(l != nullptr);
  CHECK(l->read_only_layer);
  CHECK(l->problem.empty());
  // list() only looks: the corrupt entry is still there.
  CHECK(fs::exists(entry_file(root, bad.meta.key, ".cubin")));
}

TEST_CASE("clear removes every primary entry and lock", "[cache]") {
  TempDir t("cache-test");
  const fs::path root = t.path() / "c";
  const fs::path layer = t.path() / "layer";
  {
    DiskCache writer(opts(layer));
    REQUIRE(writer.store(make_entry("clear-layer")));
  }
  DiskCache cache(opts(root, {layer}));
  std::vector<CacheEntry> es;
  for (int i = 0; i < 3; ++i) {
    es.push_back(make_entry("clear-" + std::to_string(i)));
    REQUIRE(cache.store(es.back()));
    auto lock = cache.lock_key(es.back().meta.key);
  }
  CHECK_FALSE(fs::is_empty(root / "locks"));
  CHECK(maint(cache).clear() == 3);
  CHECK(fs::is_directory(root / "entries"));
  CHECK(fs::is_empty(root / "entries"));
  CHECK(fs::is_empty(root / "locks"));
  for (const auto& e : es) CHECK(cache.load(e.meta.key).status == Status::kMiss);
  // The layer is untouched.
  const auto infos = maint(cache).list();
  REQUIRE(infos.size() == 1);
  CHECK(infos[0].layer == layer);
  CHECK(maint(cache).clear() == 0);
  // Still usable afterwards.
  REQUIRE(cache.store(es[0]));
  CHECK(cache.load(es[0].meta.key).status == Status::kHit);
}

TEST_CASE("the key lock excludes other processes", "[cache]") {
  TempDir t("cache-test");
  const fs::path root = t.path() / "c";
  DiskCache cache(opts(root));
  const std::string key = make_entry("locked").meta.key;
  const fs::path lock_path = root / "locks" / (key + ".lock");
  // A child tries a non-blocking flock on the same lock file: 0 = got it, 1 = would block.
  auto child_try_lock = [&]() {
    pid_t pid = ::fork();
    if (pid == 0) {
      int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
      if (fd < 0) ::_exit(2);
      int rc = ::flock(fd, LOCK_EX | LOCK_NB);
      ::_exit(rc == 0 ? 0 : (errno == EWOULDBLOCK ? 1 : 3));
    }
    const int status = wait_for(pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  {
    auto lock = cache.lock_key(key);
    REQUIRE(fs::exists(lock_path));
    CHECK(child_try_lock() == 1);
    auto moved = std::move(lock);  // moving keeps the lock held
    CHECK(child_try_lock() == 1);
  }
  CHECK(child_try_lock() == 0);
}

TEST_CASE("the key lock gives up on a holder that never lets go", "[cache]") {
  // A stopped (SIGSTOP) or hung compiling process holds the lock: the wait is bounded, then the caller
  // compiles itself instead of blocking forever.
  TempDir t("cache-test");
  const fs::path root = t.path() / "c";
  DiskCache::Options o = opts(root);
  o.lock_timeout_s = 0.3;
  DiskCache cache(o);
  const std::string key = make_entry("stuck").meta.key;
  {
    auto first = cache.lock_key(key);  // creates the lock file
    REQUIRE(first.held());
  }
  const int holder = ::open((root / "locks" / (key + ".lock")).c_str(), O_RDWR | O_CLOEXEC);
  REQUIRE(holder >= 0);
  REQUIRE(::flock(holder, LOCK_EX | LOCK_NB) == 0);  // another open file description: a conflicting holder
  const auto start = std::chrono::steady_clock::now();
  auto lock = cache.lock_key(key);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK_FALSE(lock.held());
  CHECK(waited >= 0.3);
  CHECK(waited < 5.0);
  ::close(holder);
  CHECK(cache.lock_key(key).held());  // free again: taken at once
}

TEST_CASE("leftovers of interrupted stores are found and removed after a grace period", "[cache]") {
  TempDir t("cache-test");
  const fs::path root = t.path() / "c";
  DiskCache cache(opts(root));
  const CacheEntry kept = make_entry("kept-entry");
  const CacheEntry lone = make_entry("lone-cubin");
  REQUIRE(cache.store(kept));
  REQUIRE(cache.store(lone));
  fs::remove(entry_file(root, lone.meta.key, ".json"));  // killed between the cubin and the metadata
  const fs::path old_tmp = entry_file(root, kept.meta.key, ".json.tmp.4242.1");
  const fs::path young_tmp = entry_file(root, kept.meta.key, ".cubin.tmp.4243.1");
  spit(old_tmp, "partial");
  spit(young_tmp, "in progress");  // another process's store, still being written
  const int64_t old = ::time(nullptr) - chordrt::jit::layout::kOrphanGraceSeconds - 60;
  set_mtime(old_tmp, old);
  set_mtime(entry_file(root, lone.meta.key, ".cubin"), old);
  const auto orphans = maint(cache).orphans();
  REQUIRE(orphans.size() == 2);
  const auto r = maint(cache).prune(1ull << 40);
  CHECK(r.orphans_removed == 2);
  CHECK(r.removed == 0);
  CHECK_FALSE(fs::exists(old_tmp));
  CHECK_FALSE(fs::exists(entry_file(root, lone.meta.key, ".cubin")));
  CHECK(fs::exists(young_tmp));
  CHECK(cache.load(kept.meta.key).status == Status::kHit);
  CHECK(maint(cache).orphans().empty());
}

TEST_CASE("parse_size", "[cache]") {
  using chordrt::jit::parse_size;
  CHECK(parse_size("100") == 100);
  CHECK(parse_size("0") == 0);
  CHECK(parse_size("4K") == 4096);
  CHECK(parse_size("512M") == 512ull << 20);
  CHECK(parse_size("512m") == 512ull << 20);
  CHECK(parse_size("2G") == 2ull << 30);
  CHECK(parse_size("1Gi") == 1ull << 30);
  CHECK(parse_size("2GB") == 2ull << 30);
  CHECK(parse_size("3MiB") == 3ull << 20);
  CHECK(parse_size("1T") == 1ull << 40);
  CHECK(parse_size("1048576") == 1048576);
  for (const char* bad : {"", "abc", "M", "12X", "1.5G", "-1", "-5M", "G2", "1 G", "1KK", "1i", "2iB",
                          "99999999999999999999999", "16777216T", "18446744073709551615K"}) {
    INFO("\"" << bad << "\"");
    check_invalid_argument([&] { (void)parse_size(bad); }, {"size"});
  }
}

TEST_CASE("a store under the size cap walks no directory: the primary's bytes are counted", "[cache]") {
  using chordrt::jit::layout::directory_walks;
  TempDir t("cache-test");
  const fs::path root = t.path() / "c";
  std::vector<CacheEntry> es;
  for (int i = 0; i < 8; ++i) es.push_back(make_entry("walk-entry-" + std::to_string(i)));
  uint64_t one = 0;
  {
    DiskCache probe(opts(t.path() / "probe"));
    REQUIRE(probe.store(es[0]));
    one = entry_bytes(t.path() / "probe", es[0].meta.key);
  }
  // Written before this instance opens the directory (another process).
  {
    DiskCache other(opts(root));
    REQUIRE(other.store(es[0]));
    REQUIRE(other.store(es[1]));
  }
  const uint64_t cap = 5 * one + one / 2;
  DiskCache cache(opts(root, {}, cap));
  CHECK_FALSE(cache.counted_bytes().has_value());

  // The first store under the cap walks once, and counts what was already there.
  uint64_t walks = directory_walks();
  REQUIRE(cache.store(es[2]));
  CHECK(directory_walks() == walks + 1);
  CHECK(cache.counted_bytes() == 3 * one);
  CHECK(cache.counted_bytes() == bytes_on_disk(root));

  // Stores under the cap (new keys, and a replacement of another size) and the removal of a corrupt
  // entry by load only adjust the count.
  walks = directory_walks();
  REQUIRE(cache.store(es[3]));
  REQUIRE(cache.store(es[4]));
  CHECK(cache.counted_bytes() == 5 * one);
  const CacheEntry smaller = make_entry("walk-entry-4", 100);
  REQUIRE(cache.store(smaller));
  CHECK(cache.counted_bytes() < 5 * one);
  CHECK(cache.counted_bytes() == bytes_on_disk(root));
  flip_byte(entry_file(root, es[3].meta.key, ".cubin"), 20);
  CHECK(cache.load(es[3].meta.key).status == Status::kCorrupt);
  CHECK(cache.counted_bytes() == bytes_on_disk(root));
  REQUIRE(cache.store(es[3]));
  CHECK(cache.counted_bytes() == bytes_on_disk(root));
  CHECK(directory_walks() == walks);

  // Another process stores behind this instance's back: its count does not see that...
  {
    DiskCache other(opts(root));
    REQUIRE(other.store(es[5]));
  }
  CHECK(bytes_on_disk(root) > *cache.counted_bytes());
  // ...until a store takes the count over the cap: that one walks, evicts the least recently used and
  // resets the count to what is on disk.
  for (int i = 0; i < 6; ++i) set_mtime(entry_file(root, es[i].meta.key, ".json"), 1000000 + 1000 * i);
  REQUIRE(cache.store(es[6]));
  CHECK(directory_walks() == walks + 1);
  CHECK(cache.counted_bytes() == bytes_on_disk(root));
  CHECK(*cache.counted_bytes() <= cap);
  CHECK(cache.load(es[0].meta.key).status == Status::kMiss);
  CHECK(cache.load(es[1].meta.key).status == Status::kMiss);
  for (int i : {2, 3, 5, 6}) CHECK(cache.load(es[i].meta.key).status == Status::kHit);

  // Without a cap nothing is counted and a store never walks.
  DiskCache uncapped(opts(t.path() / "uncapped"));
  walks = directory_walks();
  for (const auto& e : es) REQUIRE(uncapped.store(e));
  CHECK(directory_walks() == walks);
  CHECK_FALSE(uncapped.counted_bytes().has_value());
}

TEST_CASE("maintenance works on what the hot path wrote", "[cache]") {
  TempDir t("cache-test");
  const fs::path root = t.path() / "c";
  const fs::path layer = t.path() / "layer";
  const CacheEntry layered = make_entry("maint-layer");
  {
    DiskCache writer(opts(layer));
    REQUIRE(writer.store(layered));
  }
  std::vector<CacheEntry> es;
  for (int i = 0; i < 3; ++i) es.push_back(make_entry("maint-" + std::to_string(i)));
  uint64_t one = 0;
  {
    DiskCache probe(opts(t.path() / "probe"));
    REQUIRE(probe.store(es[0]));
    one = entry_bytes(t.path() / "probe", es[0].meta.key);
  }
  DiskCache cache(opts(root, {layer}, 3 * one + one / 2));
  for (const auto& e : es) REQUIRE(cache.store(e));
  CacheMaintenance m(cache.options());

  // list: every stored entry with the metadata the hot path wrote, then the layer's.
  const auto infos = m.list();
  REQUIRE(infos.size() == 4);
  for (const auto& e : es) {
    const auto* info = find_info(infos, root, e.meta.key);
    REQUIRE(info != nullptr);
    CHECK(info->problem.empty());
    CHECK_FALSE(info->read_only_layer);
    REQUIRE(info->meta.has_value());
    CHECK(info->meta->to_json() == e.meta.to_json());
    CHECK(info->bytes == one);
  }
  CHECK(infos.back().layer == layer);
  CHECK(infos.back().read_only_layer);

  // remove: the hot path misses that key and still hits the others.
  m.remove(es[1].meta.key);
  CHECK(cache.load(es[1].meta.key).status == Status::kMiss);
  CHECK(cache.load(es[0].meta.key).status == Status::kHit);
  CHECK(m.list().size() == 3);

  // prune, then clear, behind the hot path's back: its count now overestimates, so its next store
  // over the count's cap rescans, evicts nothing it should keep, and counts what is really there.
  const auto r = m.prune(one);
  CHECK(r.removed == 1);
  CHECK(r.bytes_after == one);
  CHECK(m.clear() == 1);
  CHECK(cache.load(layered.meta.key).layer == layer);  // clear leaves the layers alone
  REQUIRE(cache.store(es[1]));
  REQUIRE(cache.store(es[2]));
  CHECK(cache.counted_bytes() == bytes_on_disk(root));
  CHECK(cache.counted_bytes() == 2 * one);
  CHECK(cache.load(es[1].meta.key).status == Status::kHit);
  CHECK(cache.load(es[2].meta.key).status == Status::kHit);
}
