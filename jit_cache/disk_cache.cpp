#include "jit_cache/disk_cache.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "jit_cache/cache_layout.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/json.hpp"
#include "runtime/core/logging.hpp"

namespace fs = std::filesystem;

namespace chordrt::jit {

namespace {

constexpr int kFormatVersion = 1;

// temp + fsync + rename, so readers only ever see complete files.
bool write_file_atomic(const fs::path& path, std::string_view bytes, std::string& error) {
  static std::atomic<uint64_t> counter{0};
  fs::path tmp = path;
  tmp += fmt::format(".tmp.{}.{}", ::getpid(), counter.fetch_add(1));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    error = fmt::format("cannot create {}: {}", tmp.string(), std::strerror(errno));
    return false;
  }
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error = fmt::format("cannot write {}: {}", tmp.string(), std::strerror(errno));
      ::close(fd);
      ::unlink(tmp.c_str());
      return false;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    error = fmt::format("cannot flush {}: {}", tmp.string(), std::strerror(errno));
    ::unlink(tmp.c_str());
    return false;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    error = fmt::format("cannot rename into {}: {}", path.string(), std::strerror(errno));
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

}  // namespace

nlohmann::json CacheEntryMeta::to_json() const {
  return {{"format", kFormatVersion},     {"key", key},
          {"descriptor", descriptor},     {"descriptor_text", descriptor_text},
          {"lowered_name", lowered_name}, {"threads", threads},
          {"dynamic_smem", dynamic_smem}, {"cluster", cluster},
          {"cubin_size", cubin_size},     {"cubin_checksum", cubin_checksum},
          {"compile_ms", compile_ms},     {"nvrtc_version", nvrtc_version},
          {"created_unix", created_unix}, {"compile_log", compile_log}};
}

CacheEntryMeta CacheEntryMeta::from_json(const nlohmann::json& j) {
  if (json_integer<int64_t>(j.at("format"), "format") != kFormatVersion) {
    throw std::runtime_error("unknown entry format");
  }
  CacheEntryMeta m;
  m.key = j.at("key").get<std::string>();
  m.descriptor = j.at("descriptor");
  m.descriptor_text = j.at("descriptor_text").get<std::string>();
  m.lowered_name = j.at("lowered_name").get<std::string>();
  m.threads = json_integer<uint32_t>(j.at("threads"), "threads");
  m.dynamic_smem = json_integer<uint32_t>(j.at("dynamic_smem"), "dynamic_smem");
  const nlohmann::json& cluster = j.at("cluster");
  if (!cluster.is_array() || cluster.size() != 3) throw std::runtime_error("cluster is not 3 integers");
  for (size_t i = 0; i < 3; ++i) m.cluster[i] = json_integer<uint32_t>(cluster[i], "cluster");
  m.cubin_size = json_integer<uint64_t>(j.at("cubin_size"), "cubin_size");
  m.cubin_checksum = j.at("cubin_checksum").get<std::string>();
  m.compile_ms = j.at("compile_ms").get<double>();
  m.nvrtc_version = j.at("nvrtc_version").get<std::string>();
  m.created_unix = json_integer<int64_t>(j.at("created_unix"), "created_unix");
  m.compile_log = j.value("compile_log", "");
  return m;
}

DiskCache::KeyLock::~KeyLock() {
  if (fd_ >= 0) {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
}

DiskCache::DiskCache(Options options) : options_(std::move(options)) {
  std::error_code ec;
  fs::create_directories(options_.primary / "entries", ec);
  if (!ec) fs::create_directories(options_.primary / "locks", ec);
  if (ec) {
    degrade(fmt::format("cannot create {}: {}", options_.primary.string(), ec.message()));
    return;
  }
  // Writability is tested by doing it: access() says yes to root on read-only mounts' neighbours.
  std::string error;
  fs::path probe = options_.primary / fmt::format(".probe.{}", ::getpid());
  if (!write_file_atomic(probe, "ok", error)) {
    degrade(error);
    return;
  }
  fs::remove(probe, ec);
}

void DiskCache::degrade(const std::string& why) {
  memory_only_ = true;
  if (!warned_.exchange(true)) {
    logger().warn("kernel cache {} is not writable ({}); compiled kernels are kept in memory only",
                  options_.primary.string(), why);
  }
}

DiskCache::LoadResult DiskCache::load(const std::string& key) {
  LoadResult result;
  std::vector<std::pair<fs::path, bool>> layers;
  layers.emplace_back(options_.primary, true);
  for (const auto& l : options_.read_only_layers) layers.emplace_back(l, false);
  for (const auto& [root, primary] : layers) {
    std::string problem;
    bool present = false;
    auto entry = layout::read_entry(root, key, problem, present);
    if (entry) {
      if (primary && !memory_only()) {
        // LRU time: the metadata file's mtime.
        ::utimensat(AT_FDCWD, layout::entry_path(root, key, ".json").c_str(), nullptr, 0);
      }
      result.status = LoadStatus::kHit;
      result.entry = std::move(*entry);
      result.layer = root;
      return result;
    }
    if (present) {
      logger().warn("kernel cache entry {} in {} is corrupt ({}); it will be rebuilt", key, root.string(), problem);
      if (primary && !memory_only()) {
        const uint64_t removed = layout::remove_entry(root, key);
        std::lock_guard lock(size_mutex_);
        if (primary_bytes_) *primary_bytes_ -= std::min(removed, *primary_bytes_);
      }
      result.status = LoadStatus::kCorrupt;
      result.problem = problem;
      result.layer = root;
      // keep looking: a read-only layer may still hold a good copy
    }
  }
  if (result.status == LoadStatus::kCorrupt) return result;
  result.status = LoadStatus::kMiss;
  return result;
}

bool DiskCache::store(const CacheEntry& entry) {
  if (memory_only()) return false;
  const std::string& key = entry.meta.key;
  const fs::path& root = options_.primary;
  const uint64_t replaced = options_.max_bytes > 0 ? layout::entry_bytes(root, key) : 0;
  const std::string meta = entry.meta.to_json().dump(1);
  std::error_code ec;
  fs::create_directories(root / "entries" / key.substr(0, 2), ec);
  std::string error;
  // cubin first: the metadata file's presence is what makes an entry visible.
  bool ok = !ec && write_file_atomic(layout::entry_path(root, key, ".cubin"), entry.cubin, error) &&
            write_file_atomic(layout::entry_path(root, key, ".json"), meta, error);
  if (!ok) {
    degrade(ec ? ec.message() : error);
    return false;
  }
  if (options_.max_bytes > 0) account_store(entry.cubin.size() + meta.size(), replaced);
  return true;
}

void DiskCache::account_store(uint64_t added, uint64_t replaced) {
  if (added > options_.max_bytes && !warned_cap_.exchange(true)) {
    logger().warn(
        "kernel cache {}: the size cap ({} bytes, CHORD_CACHE_MAX_SIZE) is smaller than one entry ({} bytes): every "
        "compiled kernel is evicted right after it is stored",
        options_.primary.string(), options_.max_bytes, added);
  }
  std::lock_guard lock(size_mutex_);
  if (primary_bytes_) {
    const uint64_t bytes = *primary_bytes_ + added;
    primary_bytes_ = bytes - std::min(replaced, bytes);
    if (*primary_bytes_ <= options_.max_bytes) return;
  }
  // The first store under the cap, or the count says the cap is exceeded: one walk both measures the
  // directory (with what other processes wrote) and evicts.
  primary_bytes_ = layout::evict_lru(options_.primary, options_.max_bytes).bytes_after;
}

std::optional<uint64_t> DiskCache::counted_bytes() const {
  std::lock_guard lock(size_mutex_);
  return primary_bytes_;
}

DiskCache::KeyLock DiskCache::lock_key(const std::string& key) {
  if (memory_only()) return KeyLock();
  fs::path path = options_.primary / "locks" / (key + ".lock");
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    degrade(fmt::format("cannot create lock {}: {}", path.string(), std::strerror(errno)));
    return KeyLock();
  }
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  bool said = false;
  for (auto pause = std::chrono::milliseconds(1);; pause = std::min(pause * 2, std::chrono::milliseconds(50))) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return KeyLock(fd);
    if (errno != EWOULDBLOCK && errno != EINTR) break;
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (waited >= options_.lock_timeout_s) {
      logger().warn(
          "kernel cache: gave up after {:.0f} s waiting for another process's compile of {} ({}); "
          "compiling here",
          waited, key, path.string());
      break;
    }
    if (!said && waited >= 1.0) {
      logger().info("kernel cache: waiting for another process compiling {} (lock {}, at most {:.0f} s)", key,
                    path.string(), options_.lock_timeout_s);
      said = true;
    }
    std::this_thread::sleep_for(pause);
  }
  ::close(fd);
  return KeyLock();
}

uint64_t parse_size(const std::string& text) {
  size_t pos = 0;
  unsigned long long value = 0;
  try {
    // stoull skips leading blanks and accepts a sign ("-1" would wrap to 2^64-1): digits only.
    if (text.empty() || text[0] < '0' || text[0] > '9') throw std::invalid_argument("not a number");
    value = std::stoull(text, &pos);
  } catch (const std::exception&) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "size: expected a number like 512M or 2G, got \"{}\"", text);
  }
  std::string unit = text.substr(pos);
  if (!unit.empty() && (unit.back() == 'B' || unit.back() == 'b')) unit.pop_back();
  if (unit.size() > 1 && (unit.back() == 'i')) unit.pop_back();
  uint64_t mult = 1;
  if (unit.empty())
    mult = 1;
  else if (unit == "K" || unit == "k")
    mult = 1ull << 10;
  else if (unit == "M" || unit == "m")
    mult = 1ull << 20;
  else if (unit == "G" || unit == "g")
    mult = 1ull << 30;
  else if (unit == "T" || unit == "t")
    mult = 1ull << 40;
  else
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "size: unknown unit \"{}\" in \"{}\" (use K, M, G, T)", unit, text);
  if (value > UINT64_MAX / mult) {
    throw_error(CHORD_ERROR_INVALID_ARGUMENT, "size: \"{}\" does not fit in 64 bits", text);
  }
  return static_cast<uint64_t>(value) * mult;
}

}  // namespace chordrt::jit
