// libFuzzer target over everything that reads a cache entry written by someone else (a shared or
// read-only layer): the metadata JSON, the cubin, the launch metadata checked against the program its
// descriptor names, the key the descriptor re-hashes to, the hot-path load and the maintenance listing.
//
// Input: the metadata text, a NUL byte, then the cubin bytes. The entry is stored under the key the
// metadata names when that is a well-formed key (so mutations of a real entry reach the checksum, launch
// and re-hash checks), else under a fixed key. tools/fuzz/make_corpus.py writes inputs in this format.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "jit_cache/cache_layout.hpp"
#include "jit_cache/cache_maintenance.hpp"
#include "jit_cache/disk_cache.hpp"
#include "runtime/jit_runtime.hpp"

namespace fs = std::filesystem;
using namespace chordrt;

namespace {

fs::path g_root;

bool is_key(std::string_view s) {
  if (s.size() != 32) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string key_named_by(const std::string& meta) {
  try {
    const jit::CacheEntryMeta m = jit::layout::parse_meta(meta);
    if (is_key(m.key)) return m.key;
  } catch (const std::exception&) {
  }
  return "00112233445566778899aabbccddeeff";
}

void write(const fs::path& p, std::string_view bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) std::abort();
}

// What chord-jit ls --json and verify do with an entry: everything printable must print.
void render(const jit::CacheEntryMeta& m) {
  (void)m.to_json().dump();
  (void)m.descriptor.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("CHORD_LOG_LEVEL", "off", 1);
  char dir[] = "/tmp/chord-fuzz-cache-XXXXXX";
  if (!mkdtemp(dir)) std::abort();
  g_root = dir;
  setenv("CHORD_CACHE_DIR", (g_root / "runtime").c_str(), 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string meta(input.substr(0, nul));
  const std::string_view cubin = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);
  const std::string key = key_named_by(meta);

  const fs::path root = g_root / "layer";
  fs::remove_all(root);
  write(jit::layout::entry_path(root, key, ".json"), meta);
  if (nul != std::string_view::npos) write(jit::layout::entry_path(root, key, ".cubin"), cubin);

  // Maintenance (ls / verify): every entry listed; a verified one is checked against this build.
  const jit::CacheMaintenance maintenance(jit::DiskCache::Options{root, {}, 0, 0});
  for (const auto& e : maintenance.list()) {
    if (e.meta) render(*e.meta);
    if (e.problem.empty() && e.meta) (void)JitRuntime::global().entry_mismatch(e.key, *e.meta);
  }
  // The hot path: a read-only layer is read and never changed; the primary removes what it rejects.
  jit::DiskCache layer(jit::DiskCache::Options{g_root / "primary", {root}, 0, 0});
  const auto from_layer = layer.load(key);
  if (from_layer.status == jit::DiskCache::LoadStatus::kHit) {
    render(from_layer.entry.meta);
    if (from_layer.entry.cubin != cubin) std::abort();  // a hit serves exactly the verified bytes
  }
  if (!fs::exists(jit::layout::entry_path(root, key, ".json"))) std::abort();
  jit::DiskCache primary(jit::DiskCache::Options{root, {}, 0, 0});
  const auto loaded = primary.load(key);
  if (loaded.status == jit::DiskCache::LoadStatus::kCorrupt &&
      fs::exists(jit::layout::entry_path(root, key, ".json"))) {
    std::abort();  // a corrupt primary entry is removed so that it is rebuilt
  }
  return 0;
}
