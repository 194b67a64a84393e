// The on-disk kernel cache, hot path: what JitRuntime does per miss (load, lock, store). One entry per
// key (<key>.cubin + <key>.json metadata, see cache_layout.hpp), published atomically, guarded by a per-key
// cross-process lock, verified by checksum on load, LRU-evicted under a size cap. A primary directory
// (read-write) is searched first, then read-only layers. Listing, verifying, pruning and clearing are
// maintenance (cache_maintenance.hpp, used by chord-jit). Knows nothing about kernel families or NVRTC.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <mutex>
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
    // How long lock_key waits for another process's compile of the same key before compiling anyway
    // (a stopped or hung process must not block every other one forever).
    double lock_timeout_s = 120;
  };

  enum class LoadStatus { kHit, kMiss, kCorrupt };
  struct LoadResult {
    LoadStatus status = LoadStatus::kMiss;
    CacheEntry entry;
    std::filesystem::path layer;
    std::string problem;  // why an entry was rejected
  };

  // Per-key exclusive lock across processes and threads (flock). A no-op in memory-only mode. Waits at most
  // lock_timeout_s (logging once when it starts waiting), then returns an unheld lock: the caller compiles
  // itself, and the atomic stores keep the entry whole whoever writes last.
  class KeyLock {
   public:
    KeyLock() = default;
    explicit KeyLock(int fd) : fd_(fd) {}
    KeyLock(KeyLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
    KeyLock& operator=(KeyLock&&) = delete;
    ~KeyLock();
    bool held() const { return fd_ >= 0; }

   private:
    int fd_ = -1;
  };

  explicit DiskCache(Options options);

  // Primary first, then the read-only layers. A corrupt primary entry is removed (and reported as
  // kCorrupt) so that the caller rebuilds and replaces it. A hit refreshes the entry's LRU time.
  LoadResult load(const std::string& key);
  // Publishes into the primary directory; returns false when the cache is (or just became)
  // memory-only. Under a size cap, evicts least-recently-used entries when the primary's byte count
  // exceeds it.
  bool store(const CacheEntry& entry);
  KeyLock lock_key(const std::string& key);

  bool memory_only() const { return memory_only_.load(); }
  const Options& options() const { return options_; }

  // The primary's size as this instance counts it; nullopt until the first store under a cap.
  std::optional<uint64_t> counted_bytes() const;

 private:
  void degrade(const std::string& why);
  // Adds a store's bytes (less those of the entry it replaced) to the count, evicting when over the cap.
  void account_store(uint64_t added, uint64_t replaced);

  Options options_;
  std::atomic<bool> memory_only_{false};
  std::atomic<bool> warned_{false};
  std::atomic<bool> warned_cap_{false};

  // The primary's bytes, counted incrementally so that a store under the cap walks nothing: one walk
  // initializes it (first store under a cap); this instance's stores add, its removals subtract. Other
  // processes' stores are not seen, so the directory may exceed the cap by what they wrote since this
  // instance last walked; every eviction walks the directory and resets the count to the real size.
  mutable std::mutex size_mutex_;
  std::optional<uint64_t> primary_bytes_;
};

// Parses sizes such as "512M", "2G", "1048576" (K/M/G/T are powers of 1024). Throws on bad input.
uint64_t parse_size(const std::string& text);

}  // namespace chordrt::jit
