// The directory layout that the hot path (disk_cache) and maintenance (cache_maintenance) share, so that
// neither re-implements the other's reading of it:
//   <root>/entries/<first 2 hex of key>/<key>.cubin   the image
//   <root>/entries/<first 2 hex of key>/<key>.json    its metadata; its presence publishes the entry and
//                                                     its mtime is the entry's last use (LRU)
//   <root>/locks/<key>.lock                           the per-key flock
// Internal to jit_cache.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "jit_cache/disk_cache.hpp"
#include "runtime/core/file_read.hpp"

namespace chordrt::jit {

struct PruneResult {
  int removed = 0;
  uint64_t bytes_before = 0, bytes_after = 0;
  int orphans_removed = 0;  // leftovers of interrupted stores (counted in bytes_before)
};

namespace layout {

std::filesystem::path entry_path(const std::filesystem::path& root, const std::string& key, const char* extension);

// Largest files an entry may have: anything bigger is rejected unread (a link to /dev/zero, a huge
// crafted file in a shared layer).
inline constexpr uint64_t kMaxMetaBytes = 1 << 20;
inline constexpr uint64_t kMaxCubinBytes = uint64_t{256} << 20;
// Metadata nests 3 levels deep; anything deeper than this is rejected while parsing, before a deep DOM
// (whose recursive walks could overflow the stack) exists.
inline constexpr int kMaxMetaDepth = 16;

// An entry's metadata from its text; throws on malformed or too deeply nested JSON.
CacheEntryMeta parse_meta(const std::string& text);
int64_t mtime_unix(const std::filesystem::path& path);

// Both files' sizes (0 for a missing file): two stats, no directory walk.
uint64_t entry_bytes(const std::filesystem::path& root, const std::string& key);

// Every key with a metadata file under root/entries, sorted. The only function that walks a cache
// directory; each call counts one walk (see directory_walks()).
std::vector<std::string> keys_in(const std::filesystem::path& root);

// Process-wide number of keys_in() walks so far. Lets tests prove that a store under the size cap does
// not walk the cache.
uint64_t directory_walks();

// Reads and verifies one entry (metadata parses and names this key, cubin size and checksum match).
// present: whether the metadata file exists; problem: why a present entry was rejected.
std::optional<CacheEntry> read_entry(const std::filesystem::path& root, const std::string& key, std::string& problem,
                                     bool& present);

// Removes both files of an entry; returns the bytes they held.
uint64_t remove_entry(const std::filesystem::path& root, const std::string& key);

// Leftovers of stores interrupted by a kill (temp files, a cubin whose metadata was never written) older
// than kOrphanGraceSeconds: younger ones may belong to a store in progress.
inline constexpr int64_t kOrphanGraceSeconds = 600;
struct Orphan {
  std::filesystem::path path;
  uint64_t bytes;
};
std::vector<Orphan> orphans_in(const std::filesystem::path& root);
// Removes the listed files; returns how many it removed.
int remove_orphans(const std::vector<Orphan>& orphans);

// Removes the orphans first (they count against the cap too), then walks root once and removes
// least-recently-used entries (key order breaks ties) until at most
// max_bytes remain.
PruneResult evict_lru(const std::filesystem::path& root, uint64_t max_bytes);

}  // namespace layout
}  // namespace chordrt::jit
