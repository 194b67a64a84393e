// Kernel cache maintenance (chord-jit): list and verify every entry of every layer, prune, remove and
// clear the primary directory. Works on the directories a DiskCache uses (layout in cache_layout.hpp)
// and keeps no state, so it may run beside any number of DiskCache instances on the same directories:
// their byte counts only ever overestimate after a removal here, which makes their next store rescan.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "jit_cache/cache_layout.hpp"
#include "jit_cache/disk_cache.hpp"

namespace chordrt::jit {

class CacheMaintenance {
 public:
  struct EntryInfo {
    std::filesystem::path layer;
    bool read_only_layer = false;
    std::string key;
    std::optional<CacheEntryMeta> meta;  // present whenever the metadata parses, even if the entry is corrupt
    uint64_t bytes = 0;
    int64_t last_used_unix = 0;
    std::string problem;  // empty when the entry verifies
  };

  // The primary and read-only layers of `dirs`; its max_bytes is not used (prune takes its own).
  explicit CacheMaintenance(DiskCache::Options dirs) : dirs_(std::move(dirs)) {}

  // Every entry of the primary, then of each read-only layer, verified; changes nothing.
  std::vector<EntryInfo> list() const;
  // Removes the primary's orphans (layout::orphans_in), then its least-recently-used entries until it
  // holds at most max_bytes.
  PruneResult prune(uint64_t max_bytes);
  // The primary's orphans: what verify reports and --repair removes (remove_orphans of that same list;
  // returns how many it removed).
  std::vector<layout::Orphan> orphans() const;
  int remove_orphans(const std::vector<layout::Orphan>& orphans);
  // Removes one primary entry (both files).
  void remove(const std::string& key);
  // Removes every primary entry, lock and temp file; returns the number of entries removed.
  int clear();

 private:
  DiskCache::Options dirs_;
};

}  // namespace chordrt::jit
