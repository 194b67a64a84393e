// info, ls, stats, verify, prune, clear.
#include "tools/chord-jit/commands.hpp"

#include <fmt/format.h>

#include <map>
#include <nlohmann/json.hpp>

#include "chordrt/chordrt.hpp"
#include "jit_cache/cache_maintenance.hpp"
#include "runtime/driver.hpp"
#include "runtime/jit_runtime.hpp"
#include "runtime/kernel_registry.hpp"
#include "runtime/nvrtc_compiler.hpp"

namespace chordrt::cli {

namespace {

using nlohmann::json;

std::string human_bytes(uint64_t b) {
  if (b >= (1ull << 30)) return fmt::format("{:.1f} GiB", b / double(1ull << 30));
  if (b >= (1ull << 20)) return fmt::format("{:.1f} MiB", b / double(1ull << 20));
  if (b >= (1ull << 10)) return fmt::format("{:.1f} KiB", b / double(1ull << 10));
  return fmt::format("{} B", b);
}

std::string family_of_entry(const jit::CacheMaintenance::EntryInfo& e) {
  if (e.meta && e.meta->descriptor.contains("family") && e.meta->descriptor["family"].is_string()) {
    return e.meta->descriptor["family"].get<std::string>();
  }
  return "?";
}

// Invalid UTF-8 from a crafted entry becomes U+FFFD rather than an exception.
void print_json(const json& j) { fmt::print("{}\n", j.dump(2, ' ', false, json::error_handler_t::replace)); }

// Text from cache files as it may be printed to a terminal: control bytes (escape sequences) as \xNN.
std::string printable(const std::string& text) {
  std::string out;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f || c == '\\') {
      out += fmt::format("\\x{:02x}", u);
    } else {
      out += c;
    }
  }
  return out;
}

// Maintenance of the directories the runtime uses (from the environment and --cache-dir).
jit::CacheMaintenance maintenance() { return jit::CacheMaintenance(JitRuntime::global().disk().options()); }

}  // namespace

int run_info(bool as_json) {
  json j;
  const Version v = version();
  j["chordrt_version"] = fmt::format("{}.{}.{}", v.major, v.minor, v.patch);
  j["abi_version"] = CHORD_ABI_VERSION;
  std::string why;
  const Nvrtc* nvrtc = Nvrtc::try_get(&why);
  j["nvrtc"] = nvrtc ? json{{"available", true},
                            {"version", fmt::format("{}.{}", nvrtc->major(), nvrtc->minor())},
                            {"library", nvrtc->library_path()}}
                     : json{{"available", false}, {"version", ""}, {"library", ""}, {"message", why}};
  const Driver& d = driver();
  j["driver"] = {{"available", d.state == DriverState::kReady}, {"version", d.version}, {"message", d.message}};
  j["devices"] = json::array();
  if (d.state == DriverState::kReady) {
    for (int i = 0; i < d.device_count; ++i) {
      CUdevice dev = 0;
      char name[256] = {};
      int major = 0, minor = 0, sms = 0;
      size_t mem = 0;
      check_cuda(d.api.cuDeviceGet(&dev, i), "cuDeviceGet");
      d.api.cuDeviceGetName(name, sizeof(name), dev);
      d.api.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
      d.api.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
      d.api.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
      d.api.cuDeviceTotalMem(&mem, dev);
      j["devices"].push_back({{"index", i},
                              {"name", name},
                              {"compute_capability", fmt::format("{}.{}", major, minor)},
                              {"arch", Arch::for_compute_capability(major, minor).name()},
                              {"sm_count", sms},
                              {"memory_bytes", mem}});
    }
  }
  JitRuntime& rt = JitRuntime::global();
  const auto& opts = rt.disk().options();
  json layers = json::array();
  for (const auto& l : opts.read_only_layers) layers.push_back(l.string());
  j["cache"] = {{"dir", opts.primary.string()},
                {"memory_only", rt.disk().memory_only()},
                {"layers", layers},
                {"max_bytes", opts.max_bytes}};
  if (as_json) {
    print_json(j);
    return 0;
  }
  fmt::print("chordrt  {} (ABI {})\n", j["chordrt_version"].get<std::string>(), CHORD_ABI_VERSION);
  fmt::print("nvrtc    {}\n", nvrtc ? fmt::format("{}.{} ({})", nvrtc->major(), nvrtc->minor(), nvrtc->library_path())
                                    : "unavailable: " + why);
  fmt::print("driver   {}\n",
             d.state == DriverState::kReady ? fmt::format("{}", d.version) : "none (compile-only mode): " + d.message);
  for (const auto& dev : j["devices"]) {
    fmt::print("device   {}: {} (sm {}, {} SMs, {})\n", dev["index"].get<int>(), dev["name"].get<std::string>(),
               dev["compute_capability"].get<std::string>(), dev["sm_count"].get<int>(),
               human_bytes(dev["memory_bytes"].get<uint64_t>()));
  }
  fmt::print("cache    {}{}\n", opts.primary.string(), rt.disk().memory_only() ? " (not writable: memory only)" : "");
  for (const auto& l : opts.read_only_layers) fmt::print("layer    {} (read-only)\n", l.string());
  if (opts.max_bytes) fmt::print("cap      {}\n", human_bytes(opts.max_bytes));
  return 0;
}

int run_ls(bool as_json) {
  const auto entries = maintenance().list();
  json list = json::array();
  for (const auto& e : entries) {
    list.push_back({{"key", e.key},
                    {"descriptor", e.meta ? e.meta->descriptor_text : ""},
                    // the {"family", "arch", "fields"} form that prewarm --descriptors reads
                    {"descriptor_json", e.meta ? e.meta->descriptor : json()},
                    {"family", family_of_entry(e)},
                    {"layer", e.layer.string()},
                    {"bytes", e.bytes},
                    {"last_used_unix", e.last_used_unix},
                    {"valid", e.problem.empty()},
                    {"problem", e.problem},
                    {"compile_ms", e.meta ? e.meta->compile_ms : 0.0}});
  }
  if (as_json) {
    print_json({{"entries", list}});
    return 0;
  }
  for (const auto& e : entries) {
    fmt::print("{}  {:>9}  {}{}\n", e.key, human_bytes(e.bytes), e.meta ? printable(e.meta->descriptor_text) : "?",
               e.problem.empty() ? "" : "  [corrupt: " + printable(e.problem) + "]");
  }
  fmt::print("{} entries\n", entries.size());
  return 0;
}

int run_stats(bool as_json) {
  JitRuntime& rt = JitRuntime::global();
  const auto entries = maintenance().list();
  std::map<std::string, int> families;
  struct Layer {
    int entries = 0;
    uint64_t bytes = 0;
    bool read_only = false;
  };
  std::map<std::string, Layer> layers;
  layers[rt.disk().options().primary.string()] = {};
  for (const auto& l : rt.disk().options().read_only_layers) layers[l.string()].read_only = true;
  uint64_t bytes = 0;
  int invalid = 0;
  for (const auto& e : entries) {
    ++families[family_of_entry(e)];
    auto& l = layers[e.layer.string()];
    ++l.entries;
    l.bytes += e.bytes;
    l.read_only = e.read_only_layer;
    bytes += e.bytes;
    invalid += !e.problem.empty();
  }
  if (as_json) {
    json lj = json::array();
    for (const auto& [dir, l] : layers) {
      lj.push_back({{"dir", dir}, {"entries", l.entries}, {"bytes", l.bytes}, {"read_only", l.read_only}});
    }
    print_json(
        {{"entries", entries.size()}, {"bytes", bytes}, {"invalid", invalid}, {"families", families}, {"layers", lj}});
    return 0;
  }
  fmt::print("{} entries, {}, {} invalid\n", entries.size(), human_bytes(bytes), invalid);
  for (const auto& [dir, l] : layers) {
    fmt::print("  {}{}: {} entries, {}\n", dir, l.read_only ? " (read-only)" : "", l.entries, human_bytes(l.bytes));
  }
  for (const auto& [f, n] : families) fmt::print("  {}: {}\n", f, n);
  return 0;
}

int run_verify(bool repair, bool as_json) {
  JitRuntime& rt = JitRuntime::global();
  jit::CacheMaintenance cache = maintenance();
  int ok = 0, corrupt = 0, repaired = 0;
  json problems = json::array();
  auto entries = cache.list();
  for (auto& e : entries) {
    if (e.problem.empty() && e.meta) e.problem = rt.entry_mismatch(e.key, *e.meta);
    if (e.problem.empty()) {
      ++ok;
      continue;
    }
    ++corrupt;
    json p = {{"key", e.key}, {"layer", e.layer.string()}, {"problem", e.problem}};
    if (repair && !e.read_only_layer) {
      // Rebuild from the recorded descriptor when it is readable and still compiles to the same key;
      // otherwise the entry is removed (it will be rebuilt on first use).
      cache.remove(e.key);
      std::string action = "removed";
      try {
        if (e.meta) {
          const jit::Descriptor d = descriptor_from_json(e.meta->descriptor);
          if (rt.key_of(d) == e.key) {
            rt.ensure_compiled(d);
            action = "rebuilt";
          }
        }
      } catch (const std::exception& ex) {
        action = fmt::format("removed (rebuild failed: {})", ex.what());
      }
      p["repair"] = action;
      ++repaired;
    }
    problems.push_back(p);
  }
  // Leftovers of interrupted stores (never entries, but they take space): reported, removed by --repair.
  const auto orphans = cache.orphans();
  for (const auto& o : orphans) {
    json p = {{"key", o.path.filename().string()},
              {"layer", rt.disk().options().primary.string()},
              {"problem", fmt::format("orphaned file of an interrupted store ({} bytes)", o.bytes)}};
    if (repair) p["repair"] = "removed";
    problems.push_back(p);
  }
  corrupt += static_cast<int>(orphans.size());
  if (repair) repaired += cache.remove_orphans(orphans);  // exactly the files reported, no second walk
  if (as_json) {
    print_json({{"ok", ok}, {"corrupt", corrupt}, {"repaired", repaired}, {"problems", problems}});
  } else {
    for (const auto& p : problems) {
      fmt::print("{}  {}: {}{}\n", p["key"].get<std::string>(), p["layer"].get<std::string>(),
                 printable(p["problem"].get<std::string>()),
                 p.contains("repair") ? " -> " + p["repair"].get<std::string>() : "");
    }
    fmt::print("{} ok, {} corrupt, {} repaired\n", ok, corrupt, repaired);
  }
  return corrupt > repaired ? 1 : 0;
}

int run_prune(const std::string& max_size, bool as_json) {
  const uint64_t cap = jit::parse_size(max_size);
  const auto r = maintenance().prune(cap);
  if (as_json) {
    print_json({{"removed", r.removed},
                {"orphans_removed", r.orphans_removed},
                {"bytes_before", r.bytes_before},
                {"bytes_after", r.bytes_after}});
  } else {
    fmt::print("removed {} entries and {} orphaned files: {} -> {}\n", r.removed, r.orphans_removed,
               human_bytes(r.bytes_before), human_bytes(r.bytes_after));
  }
  return 0;
}

int run_clear(bool as_json) {
  const int removed = maintenance().clear();
  if (as_json) {
    print_json({{"removed", removed}});
  } else {
    fmt::print("removed {} entries from {}\n", removed, JitRuntime::global().disk().options().primary.string());
  }
  return 0;
}

}  // namespace chordrt::cli
