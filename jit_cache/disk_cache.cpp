#include "jit_cache/disk_cache.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "jit_cache/cache_key.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/logging.hpp"

namespace fs = std::filesystem;

namespace chordrt::jit {

namespace {

constexpr int kFormatVersion = 1;

bool read_file(const fs::path& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  out = std::move(ss).str();
  return !in.bad();
}

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

int64_t mtime_unix(const fs::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return 0;
  return st.st_mtim.tv_sec;
}

bool is_entry_key(const std::string& stem) {
  return stem.size() == 32 &&
         std::all_of(stem.begin(), stem.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// Every key with a metadata file under root/entries.
std::vector<std::string> keys_in(const fs::path& root) {
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

}  // namespace

nlohmann::json CacheEntryMeta::to_json() const {
  return {{"format", kFormatVersion},     {"key", key},
          {"descriptor", descriptor},     {"descriptor_text", descriptor_text},
          {"lowered_name", lowered_name}, {"threads", threads},
          {"dynamic_smem", dynamic_smem}, {"cluster", cluster},
          {"cubin_size", cubin_size},     {"cubin_checksum", cubin_checksum},
          {"compile_ms", compile_ms},     {"nvrtc_version", nvrtc_version},
          {"created_unix", created_unix},
          {"compile_log", compile_log}};
}

CacheEntryMeta CacheEntryMeta::from_json(const nlohmann::json& j) {
  if (j.at("format").get<int>() != kFormatVersion) throw std::runtime_error("unknown entry format");
  CacheEntryMeta m;
  m.key = j.at("key").get<std::string>();
  m.descriptor = j.at("descriptor");
  m.descriptor_text = j.at("descriptor_text").get<std::string>();
  m.lowered_name = j.at("lowered_name").get<std::string>();
  m.threads = j.at("threads").get<uint32_t>();
  m.dynamic_smem = j.at("dynamic_smem").get<uint32_t>();
  m.cluster = j.at("cluster").get<std::array<uint32_t, 3>>();
  m.cubin_size = j.at("cubin_size").get<uint64_t>();
  m.cubin_checksum = j.at("cubin_checksum").get<std::string>();
  m.compile_ms = j.at("compile_ms").get<double>();
  m.nvrtc_version = j.at("nvrtc_version").get<std::string>();
  m.created_unix = j.at("created_unix").get<int64_t>();
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

fs::path DiskCache::entry_path(const fs::path& root, const std::string& key, const char* extension) const {
  return root / "entries" / key.substr(0, 2) / (key + extension);
}

std::optional<CacheEntry> DiskCache::read_entry(const fs::path& root, const std::string& key, std::string& problem,
                                                bool& present) {
  fs::path base = root / "entries" / key.substr(0, 2) / key;
  fs::path json_path = base;
  json_path += ".json";
  fs::path cubin_path = base;
  cubin_path += ".cubin";
  std::string text;
  present = read_file(json_path, text);
  if (!present) return std::nullopt;
  CacheEntry entry;
  try {
    entry.meta = CacheEntryMeta::from_json(nlohmann::json::parse(text));
  } catch (const std::exception& e) {
    problem = fmt::format("unreadable metadata ({})", e.what());
    return std::nullopt;
  }
  if (entry.meta.key != key) {
    problem = fmt::format("metadata names key {}", entry.meta.key);
    return std::nullopt;
  }
  if (!read_file(cubin_path, entry.cubin)) {
    problem = "cubin missing";
    return std::nullopt;
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

DiskCache::LoadResult DiskCache::load(const std::string& key) {
  LoadResult result;
  std::vector<std::pair<fs::path, bool>> layers;
  layers.emplace_back(options_.primary, true);
  for (const auto& l : options_.read_only_layers) layers.emplace_back(l, false);
  for (const auto& [root, primary] : layers) {
    std::string problem;
    bool present = false;
    auto entry = read_entry(root, key, problem, present);
    if (entry) {
      if (primary && !memory_only()) {
        // LRU time: the metadata file's mtime.
        ::utimensat(AT_FDCWD, entry_path(root, key, ".json").c_str(), nullptr, 0);
      }
      result.status = LoadStatus::kHit;
      result.entry = std::move(*entry);
      result.layer = root;
      return result;
    }
    if (present) {
      logger().warn("kernel cache entry {} in {} is corrupt ({}); it will be rebuilt", key, root.string(), problem);
      if (primary && !memory_only()) remove(key);
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
  std::error_code ec;
  fs::create_directories(options_.primary / "entries" / key.substr(0, 2), ec);
  std::string error;
  // cubin first: the metadata file's presence is what makes an entry visible.
  bool ok = !ec && write_file_atomic(entry_path(options_.primary, key, ".cubin"), entry.cubin, error) &&
            write_file_atomic(entry_path(options_.primary, key, ".json"), entry.meta.to_json().dump(1), error);
  if (!ok) {
    degrade(ec ? ec.message() : error);
    return false;
  }
  if (options_.max_bytes > 0) prune(options_.max_bytes);
  return true;
}

DiskCache::KeyLock DiskCache::lock_key(const std::string& key) {
  if (memory_only()) return KeyLock();
  fs::path path = options_.primary / "locks" / (key + ".lock");
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    degrade(fmt::format("cannot create lock {}: {}", path.string(), std::strerror(errno)));
    return KeyLock();
  }
  while (::flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR) {
      ::close(fd);
      return KeyLock();
    }
  }
  return KeyLock(fd);
}

std::vector<DiskCache::EntryInfo> DiskCache::list() const {
  std::vector<EntryInfo> out;
  std::vector<std::pair<fs::path, bool>> layers;
  layers.emplace_back(options_.primary, false);
  for (const auto& l : options_.read_only_layers) layers.emplace_back(l, true);
  for (const auto& [root, read_only] : layers) {
    for (const auto& key : keys_in(root)) {
      EntryInfo info;
      info.layer = root;
      info.read_only_layer = read_only;
      info.key = key;
      bool present = false;
      auto entry = read_entry(root, key, info.problem, present);
      std::error_code ec;
      fs::path json_path = entry_path(root, key, ".json");
      fs::path cubin_path = entry_path(root, key, ".cubin");
      info.bytes = fs::file_size(json_path, ec) + (fs::exists(cubin_path, ec) ? fs::file_size(cubin_path, ec) : 0);
      info.last_used_unix = mtime_unix(json_path);
      if (entry) {
        info.meta = std::move(entry->meta);
      } else {
        std::string text;
        if (read_file(json_path, text)) {
          try {
            info.meta = CacheEntryMeta::from_json(nlohmann::json::parse(text));
          } catch (const std::exception&) {
          }
        }
      }
      out.push_back(std::move(info));
    }
  }
  return out;
}

void DiskCache::remove(const std::string& key) {
  std::error_code ec;
  fs::remove(entry_path(options_.primary, key, ".json"), ec);
  fs::remove(entry_path(options_.primary, key, ".cubin"), ec);
}

DiskCache::PruneResult DiskCache::prune(uint64_t max_bytes) {
  PruneResult r;
  struct Item {
    std::string key;
    uint64_t bytes;
    int64_t used;
  };
  std::vector<Item> items;
  std::error_code ec;
  for (const auto& key : keys_in(options_.primary)) {
    fs::path j = entry_path(options_.primary, key, ".json");
    fs::path c = entry_path(options_.primary, key, ".cubin");
    uint64_t bytes = fs::file_size(j, ec);
    if (ec) bytes = 0;
    uint64_t cb = fs::file_size(c, ec);
    if (!ec) bytes += cb;
    items.push_back({key, bytes, mtime_unix(j)});
    r.bytes_before += bytes;
  }
  // Oldest first; key order breaks ties so pruning is deterministic.
  std::sort(items.begin(), items.end(),
            [](const Item& a, const Item& b) { return a.used != b.used ? a.used < b.used : a.key < b.key; });
  r.bytes_after = r.bytes_before;
  for (const auto& it : items) {
    if (r.bytes_after <= max_bytes) break;
    remove(it.key);
    r.bytes_after -= it.bytes;
    ++r.removed;
  }
  return r;
}

int DiskCache::clear() {
  auto keys = keys_in(options_.primary);
  std::error_code ec;
  fs::remove_all(options_.primary / "entries", ec);
  fs::remove_all(options_.primary / "locks", ec);
  fs::create_directories(options_.primary / "entries", ec);
  fs::create_directories(options_.primary / "locks", ec);
  return static_cast<int>(keys.size());
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
