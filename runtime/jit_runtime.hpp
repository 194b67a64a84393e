// The JIT runtime: descriptor -> (memo | disk cache | NVRTC compile) -> kernel loaded in a context.
// The memo hit path takes a shared lock, hashes the descriptor and returns; no strings, no getenv, no
// filesystem, no driver attribute calls.
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "jit_cache/descriptor.hpp"
#include "jit_cache/disk_cache.hpp"
#include "runtime/core/device_facts.hpp"
#include "runtime/kernel_registry.hpp"

namespace chordrt {

struct JitOptions {
  jit::DiskCache::Options cache;
  bool strict = false;        // run-time misses (not in any cache layer) are errors
  std::string record_misses;  // append run-time misses here as JSON lines
  static JitOptions from_environment();
};

struct LoadedKernel {
  static constexpr size_t kMaxParams = 16;
  static constexpr uint8_t kParamsUnknown = 0xff;  // the driver cannot report them (older than 12.4)

  CUfunction function = nullptr;
  CUmodule module = nullptr;
  uint32_t threads = 0;
  uint32_t dynamic_smem = 0;
  std::array<uint32_t, 3> cluster{1, 1, 1};
  // The kernel's parameter sizes as the module reports them, checked by the typed launch.
  uint8_t param_count = kParamsUnknown;
  std::array<uint16_t, kMaxParams> param_sizes{};
  bool dry_run = false;  // a DryRun placeholder: launch() launches nothing
  std::string name;      // the descriptor, for error messages
  std::string key;       // its cache key, for CHORD_LAUNCH_LOG
};

struct ContextState {
  CUcontext context = nullptr;
  CUdevice device = 0;
  DeviceFacts facts;
};

enum class ImageSource { kMemory, kDisk, kCompiled };

struct EnsureResult {
  std::string key;
  ImageSource source = ImageSource::kMemory;
  double compile_ms = 0;
};

struct JitStats {
  uint64_t compiled = 0, disk_hits = 0, loaded = 0;
};

class JitRuntime {
 public:
  explicit JitRuntime(JitOptions options);
  ~JitRuntime();
  JitRuntime(const JitRuntime&) = delete;
  JitRuntime& operator=(const JitRuntime&) = delete;

  // The process-wide runtime configured from the environment.
  static JitRuntime& global();

  // The cache key of a descriptor (needs NVRTC: the key covers its version).
  std::string key_of(const jit::Descriptor& d) const;
  // "" when a stored entry's metadata is what this build would write for `key`: its descriptor parses,
  // re-hashes to `key` and its launch metadata (threads, dynamic smem, cluster) is its program's; else
  // what differs. The checksum covers the cubin only, so load and `chord-jit verify` both apply this.
  std::string entry_mismatch(const std::string& key, const jit::CacheEntryMeta& meta) const;

  // Makes sure the cubin exists in memory and on disk, compiling it if needed. Needs no driver.
  EnsureResult ensure_compiled(const jit::Descriptor& d);

  // The context a launch on `stream` runs in (the stream's, else the current one, else device 0's
  // primary context, made current).
  const ContextState& context_for(CUstream stream);

  // Hot path: the loaded kernel for d in ctx. On a miss: typed error if the stream is capturing,
  // otherwise disk / compile (or a typed error in strict mode), then load.
  const LoadedKernel& kernel(const jit::Descriptor& d, const ContextState& ctx, CUstream stream);

  JitStats stats() const;
  jit::DiskCache& disk() { return disk_; }
  const JitOptions& options() const { return options_; }

 private:
  struct MemoKey {
    CUcontext context;
    jit::Descriptor descriptor;
    friend bool operator==(const MemoKey&, const MemoKey&) = default;
  };
  struct MemoKeyHash {
    size_t operator()(const MemoKey& k) const noexcept;
  };

  std::string key_of(const jit::Descriptor& d, const KernelProgram& program) const;
  // cubin + metadata for d: in-memory images, then disk layers, then NVRTC.
  std::shared_ptr<const jit::CacheEntry> image(const jit::Descriptor& d, bool runtime_miss, EnsureResult* result);
  void record_miss(const jit::Descriptor& d, const char* reason);

  JitOptions options_;
  jit::DiskCache disk_;

  mutable std::shared_mutex memo_mutex_;
  std::unordered_map<MemoKey, std::unique_ptr<LoadedKernel>, MemoKeyHash> memo_;

  std::mutex images_mutex_;
  std::unordered_map<std::string, std::shared_ptr<const jit::CacheEntry>> images_;

  mutable std::shared_mutex contexts_mutex_;
  std::vector<std::unique_ptr<ContextState>> contexts_;

  std::atomic<uint64_t> compiled_{0}, disk_hits_{0}, loaded_{0};
};

// A dry run on the calling thread while it lives: context_for() gives a context with `facts` and no
// driver, kernel() records each descriptor dispatch asks for and returns a placeholder that launch()
// skips. The planner's tests run the real dispatch this way to check that prewarm plans what dispatch uses.
class DryRun {
 public:
  explicit DryRun(DeviceFacts facts);
  ~DryRun();
  DryRun(const DryRun&) = delete;
  DryRun& operator=(const DryRun&) = delete;

  const std::vector<jit::Descriptor>& descriptors() const { return descriptors_; }

 private:
  friend class JitRuntime;
  ContextState context_;
  LoadedKernel placeholder_;
  std::vector<jit::Descriptor> descriptors_;
  DryRun* previous_;
};

// NVRTC options chordrt compiles with for `arch` under NVRTC nvrtc_major.nvrtc_minor (part of every key).
std::vector<std::string> nvrtc_options(const Arch& arch, int nvrtc_major, int nvrtc_minor);

}  // namespace chordrt
