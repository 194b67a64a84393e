// The on-disk kernel cache: one entry per key (<key>.cubin + <key>.json metadata), published
// atomically, guarded by a per-key cross-process lock, verified by checksum on load, LRU-evicted
// under a size cap. A primary directory (read-write) is searched first, then read-only layers.
// Knows nothing about kernel families or NVRTC.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace chordrt::jit {

struct CacheEntryMeta {
  std::string key;
  nlohmann::json descriptor;  // {"family", "arch", "fields": {...}}
  std::string descriptor_text;
  std::string lowered_name;
  uint32_t threads = 0;
  uint32_t dynamic_smem = 0;
  std::array<uint32_t, 3> cluster{1, 1, 1};
  uint64_t cubin_size = 0;
  std::string cubin_checksum;  // hex XXH3-128 of the cubin
  double compile_ms = 0;
  std::string nvrtc_version;
  int64_t created_unix = 0;
  std::string compile_log;  // NVRTC's log: ptxas registers, spills, shared memory

  nlohmann::json to_json() const;
  static CacheEntryMeta from_json(const nlohmann::json& j);  // throws nlohmann::json::exception
};

struct CacheEntry {
  CacheEntryMeta meta;
  std::string cubin;
};

class DiskCache {
 public:
  struct Options {
    std::filesystem::path primary;
    std::vector<std::filesystem::path> read_only_layers;
    uint64_t max_bytes = 0;  // 0 = no cap
  };

  enum class LoadStatus { kHit, kMiss, kCorrupt };
  struct LoadResult {
    LoadStatus status = LoadStatus::kMiss;
    CacheEntry entry;
    std::filesystem::path layer;
    std::string problem;  // why an entry was rejected
  };

  // Per-key exclusive lock across processes and threads (flock). A no-op in memory-only mode.
  class KeyLock {
   public:
    KeyLock() = default;
    explicit KeyLock(int fd) : fd_(fd) {}
    KeyLock(KeyLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
    KeyLock& operator=(KeyLock&&) = delete;
    ~KeyLock();

   private:
    int fd_ = -1;
  };

  struct EntryInfo {
    std::filesystem::path layer;
    bool read_only_layer = false;
    std::string key;
    std::optional<CacheEntryMeta> meta;
    uint64_t bytes = 0;
    int64_t last_used_unix = 0;
    std::string problem;  // empty when the entry verifies
  };

  struct PruneResult {
    int removed = 0;
    uint64_t bytes_before = 0, bytes_after = 0;
  };

  explicit DiskCache(Options options);

  // Primary first, then the read-only layers. A corrupt primary entry is removed (and reported as
  // kCorrupt) so that the caller rebuilds and replaces it. A hit refreshes the entry's LRU time.
  LoadResult load(const std::string& key);
  // Publishes into the primary directory; returns false when the cache is (or just became)
  // memory-only. Enforces the size cap afterwards.
  bool store(const CacheEntry& entry);
  KeyLock lock_key(const std::string& key);

  bool memory_only() const { return memory_only_.load(); }
  const Options& options() const { return options_; }

  // Maintenance (chord-jit): every entry of every layer, verified.
  std::vector<EntryInfo> list() const;
  // Removes the primary's least-recently-used entries until it holds at most max_bytes.
  PruneResult prune(uint64_t max_bytes);
  // Removes one primary entry (both files).
  void remove(const std::string& key);
  // Removes every primary entry, lock and temp file; returns the number of entries removed.
  int clear();

 private:
  std::filesystem::path entry_path(const std::filesystem::path& root, const std::string& key,
                                   const char* extension) const;
  void degrade(const std::string& why);
  static std::optional<CacheEntry> read_entry(const std::filesystem::path& root, const std::string& key,
                                              std::string& problem, bool& present);

  Options options_;
  std::atomic<bool> memory_only_{false};
  std::atomic<bool> warned_{false};
};

// Parses sizes such as "512M", "2G", "1048576" (K/M/G/T are powers of 1024). Throws on bad input.
uint64_t parse_size(const std::string& text);

}  // namespace chordrt::jit
