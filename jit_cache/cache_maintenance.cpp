#include "jit_cache/cache_maintenance.hpp"

namespace fs = std::filesystem;

namespace chordrt::jit {

std::vector<CacheMaintenance::EntryInfo> CacheMaintenance::list() const {
  std::vector<EntryInfo> out;
  std::vector<std::pair<fs::path, bool>> layers;
  layers.emplace_back(dirs_.primary, false);
  for (const auto& l : dirs_.read_only_layers) layers.emplace_back(l, true);
  for (const auto& [root, read_only] : layers) {
    for (const auto& key : layout::keys_in(root)) {
      EntryInfo info;
      info.layer = root;
      info.read_only_layer = read_only;
      info.key = key;
      bool present = false;
      auto entry = layout::read_entry(root, key, info.problem, present);
      const fs::path json_path = layout::entry_path(root, key, ".json");
      info.bytes = layout::entry_bytes(root, key);
      info.last_used_unix = layout::mtime_unix(json_path);
      if (entry) {
        info.meta = std::move(entry->meta);
      } else {
        std::string text, ignored;
        if (read_regular_file(json_path, text, layout::kMaxMetaBytes, ignored) == ReadResult::kRead) {
          try {
            info.meta = layout::parse_meta(text);
          } catch (const std::exception&) {
          }
        }
      }
      out.push_back(std::move(info));
    }
  }
  return out;
}

PruneResult CacheMaintenance::prune(uint64_t max_bytes) { return layout::evict_lru(dirs_.primary, max_bytes); }

void CacheMaintenance::remove(const std::string& key) { layout::remove_entry(dirs_.primary, key); }

std::vector<layout::Orphan> CacheMaintenance::orphans() const { return layout::orphans_in(dirs_.primary); }

int CacheMaintenance::remove_orphans(const std::vector<layout::Orphan>& orphans) {
  return layout::remove_orphans(orphans);
}

int CacheMaintenance::clear() {
  const auto keys = layout::keys_in(dirs_.primary);
  std::error_code ec;
  fs::remove_all(dirs_.primary / "entries", ec);
  fs::remove_all(dirs_.primary / "locks", ec);
  fs::create_directories(dirs_.primary / "entries", ec);
  fs::create_directories(dirs_.primary / "locks", ec);
  return static_cast<int>(keys.size());
}

}  // namespace chordrt::jit
