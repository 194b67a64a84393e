#include "jit_cache/cache_layout.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <stdexcept>

#include "jit_cache/cache_key.hpp"
#include "runtime/core/json.hpp"

namespace fs = std::filesystem;

namespace chordrt::jit::layout {

namespace {

std::atomic<uint64_t> g_walks{0};

bool is_entry_key(const std::string& stem) {
  return stem.size() == 32 &&
         std::all_of(stem.begin(), stem.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

uint64_t size_or_zero(const fs::path& p) {
  std::error_code ec;
  const uint64_t n = fs::file_size(p, ec);
  return ec ? 0 : n;
}

}  // namespace

fs::path entry_path(const fs::path& root, const std::string& key, const char* extension) {
  return root / "entries" / key.substr(0, 2) / (key + extension);
}

CacheEntryMeta parse_meta(const std::string& text) {
  return CacheEntryMeta::from_json(parse_json_bounded(text, kMaxMetaDepth));
}

int64_t mtime_unix(const fs::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return 0;
  return st.st_mtim.tv_sec;
}

uint64_t entry_bytes(const fs::path& root, const std::string& key) {
  return size_or_zero(entry_path(root, key, ".json")) + size_or_zero(entry_path(root, key, ".cubin"));
}

std::vector<std::string> keys_in(const fs::path& root) {
  g_walks.fetch_add(1, std::memory_order_relaxed);
  std::vector<std::string> keys;
  std::error_code ec;
  fs::path entries = root / "entries";
  if (!fs::is_directory(entries, ec)) return keys;
  for (auto it = fs::recursive_directory_iterator(entries, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    const fs::path& p = it->path();
    if (p.extension() == ".json" && is_entry_key(p.stem().string())) keys.push_back(p.stem().string());
  }
  std::sort(keys.begin(), keys.end());
  return keys;
}

uint64_t directory_walks() { return g_walks.load(std::memory_order_relaxed); }

std::optional<CacheEntry> read_entry(const fs::path& root, const std::string& key, std::string& problem,
                                     bool& present) {
  std::string text;
  const ReadResult meta = read_regular_file(entry_path(root, key, ".json"), text, kMaxMetaBytes, problem);
  present = meta != ReadResult::kMissing;
  if (meta != ReadResult::kRead) return std::nullopt;
  CacheEntry entry;
  try {
    entry.meta = parse_meta(text);
  } catch (const std::exception& e) {
    problem = fmt::format("unreadable metadata ({})", e.what());
    return std::nullopt;
  }
  if (entry.meta.key != key) {
    problem = fmt::format("metadata names key {}", entry.meta.key);
    return std::nullopt;
  }
  switch (read_regular_file(entry_path(root, key, ".cubin"), entry.cubin, kMaxCubinBytes, problem)) {
    case ReadResult::kMissing:
      problem = "cubin missing";
      return std::nullopt;
    case ReadResult::kRejected:
      return std::nullopt;
    case ReadResult::kRead:
      break;
  }
  if (entry.cubin.size() != entry.meta.cubin_size) {
    problem = fmt::format("cubin is {} bytes, metadata says {}", entry.cubin.size(), entry.meta.cubin_size);
    return std::nullopt;
  }
  if (hex_digest128(entry.cubin) != entry.meta.cubin_checksum) {
    problem = "cubin checksum mismatch";
    return std::nullopt;
  }
  return entry;
}

uint64_t remove_entry(const fs::path& root, const std::string& key) {
  const uint64_t bytes = entry_bytes(root, key);
  std::error_code ec;
  fs::remove(entry_path(root, key, ".json"), ec);
  fs::remove(entry_path(root, key, ".cubin"), ec);
  return bytes;
}

std::vector<Orphan> orphans_in(const fs::path& root) {
  std::vector<Orphan> out;
  std::error_code ec;
  const int64_t cutoff = static_cast<int64_t>(::time(nullptr)) - kOrphanGraceSeconds;
  for (auto it = fs::recursive_directory_iterator(root / "entries", ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code fec;
    if (!it->is_regular_file(fec)) continue;
    const fs::path& p = it->path();
    const std::string name = p.filename().string();
    const bool temp = name.find(".tmp.") != std::string::npos;
    const bool lone_cubin = p.extension() == ".cubin" && is_entry_key(p.stem().string()) &&
                            !fs::exists(fs::path(p).replace_extension(".json"), fec);
    if ((temp || lone_cubin) && mtime_unix(p) < cutoff) out.push_back({p, size_or_zero(p)});
  }
  return out;
}

int remove_orphans(const std::vector<Orphan>& orphans) {
  int removed = 0;
  for (const Orphan& o : orphans) {
    std::error_code ec;
    if (fs::remove(o.path, ec)) ++removed;
  }
  return removed;
}

PruneResult evict_lru(const fs::path& root, uint64_t max_bytes) {
  PruneResult r;
  const std::vector<Orphan> orphans = orphans_in(root);
  r.orphans_removed = remove_orphans(orphans);
  for (const Orphan& o : orphans) r.bytes_before += o.bytes;
  struct Item {
    std::string key;
    uint64_t bytes;
    int64_t used;
  };
  std::vector<Item> items;
  for (const auto& key : keys_in(root)) {
    const uint64_t bytes = entry_bytes(root, key);
    items.push_back({key, bytes, mtime_unix(entry_path(root, key, ".json"))});
    r.bytes_before += bytes;
  }
  std::sort(items.begin(), items.end(),
            [](const Item& a, const Item& b) { return a.used != b.used ? a.used < b.used : a.key < b.key; });
  r.bytes_after = r.bytes_before;
  for (const auto& it : items) {
    if (r.bytes_after <= max_bytes) break;
    remove_entry(root, it.key);
    r.bytes_after -= it.bytes;
    ++r.removed;
  }
  return r;
}

}  // namespace chordrt::jit::layout
