#include "runtime/jit_runtime.hpp"

#include <cerrno>
#include <chrono>
#include <cstring>

#include "jit_cache/cache_key.hpp"
#include "runtime/core/append_line.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/logging.hpp"
#include "runtime/driver.hpp"
#include "runtime/env_config.hpp"
#include "runtime/kernel_registry.hpp"
#include "runtime/kernel_sources.hpp"
#include "runtime/nvrtc_compiler.hpp"

namespace chordrt {

namespace {
thread_local DryRun* t_dry_run = nullptr;
}  // namespace

DryRun::DryRun(DeviceFacts facts) : previous_(t_dry_run) {
  context_.facts = facts;
  placeholder_.dry_run = true;
  t_dry_run = this;
}

DryRun::~DryRun() { t_dry_run = previous_; }

JitOptions JitOptions::from_environment() {
  const EnvConfig& env = env_config();
  JitOptions o;
  o.cache.primary = env.cache_dir;
  o.cache.read_only_layers = env.cache_layers;
  o.cache.max_bytes = env.cache_max_bytes;
  o.cache.lock_timeout_s = env.cache_lock_timeout_s;
  o.strict = env.strict;
  o.record_misses = env.record_misses;
  return o;
}

std::vector<std::string> nvrtc_options(const Arch& arch, int nvrtc_major, int nvrtc_minor) {
  // -v for ptxas puts registers, spills and shared memory into the log, which the cache keeps.
  // -default-device: unannotated functions and lambdas in kernels are device code (JIT mode has no host).
  std::vector<std::string> o = {"--gpu-architecture=" + arch.name(), "-std=c++17", "-default-device",
                                "--ptxas-options=-v", "-DCHORD_JIT=1"};
  // -minimal (NVRTC 12.4+) leaves out the CUDA runtime's device-side declarations, which no kernel here
  // uses: the same SASS for all 89 kernels of the kimi-k2 ep8 plan, each compile ~2% shorter
  // (bench/NOTES.md, "Cold compile: -minimal").
  if (nvrtc_major > 12 || (nvrtc_major == 12 && nvrtc_minor >= 4)) o.emplace_back("-minimal");
  return o;
}

size_t JitRuntime::MemoKeyHash::operator()(const MemoKey& k) const noexcept {
  return static_cast<size_t>(jit::hash_value(k.descriptor) ^
                             (reinterpret_cast<uintptr_t>(k.context) * 0x9e3779b97f4a7c15ull));
}

JitRuntime::JitRuntime(JitOptions options) : options_(std::move(options)), disk_(options_.cache) {}

JitRuntime::~JitRuntime() {
  // Modules belong to contexts that may already be gone at process exit; the driver frees them.
}

JitRuntime& JitRuntime::global() {
  // Never destroyed: kernels may be launched from other static destructors.
  static JitRuntime* instance = new JitRuntime(JitOptions::from_environment());
  return *instance;
}

std::string JitRuntime::key_of(const jit::Descriptor& d) const { return key_of(d, family_of(d).program(d)); }

std::string JitRuntime::key_of(const jit::Descriptor& d, const KernelProgram& program) const {
  const Nvrtc& nvrtc = Nvrtc::get();
  jit::KeyInputs in;
  in.canonical_descriptor = jit::canonical_serialization(d);
  in.nvrtc_major = nvrtc.major();
  in.nvrtc_minor = nvrtc.minor();
  in.options = nvrtc_options(d.arch, nvrtc.major(), nvrtc.minor());
  in.source_fingerprint =
      jit::hex_digest128(embedded_sources_fingerprint() + "\n" + program.source() + "\n" + program.name_expression);
  in.abi_version = CHORD_ABI_VERSION;
  return jit::compute_cache_key(in);
}

void JitRuntime::record_miss(const jit::Descriptor& d, const char* reason) {
  if (options_.record_misses.empty()) return;
  const nlohmann::json line = {{"descriptor", descriptor_to_json(d)}, {"reason", reason}};
  if (!append_line(options_.record_misses, line.dump())) {
    const int err = errno;  // before logger(), whose first call may set it
    logger().warn("cannot record a JIT miss in {}: {}", options_.record_misses, std::strerror(err));
  }
}

namespace {

std::string launch_mismatch(const jit::CacheEntryMeta& m, const KernelProgram& program) {
  if (m.threads != program.threads || m.dynamic_smem != program.dynamic_smem || m.cluster != program.cluster) {
    return fmt::format(
        "launch metadata (threads {}, dynamic smem {}, cluster {}x{}x{}) differs from the program's "
        "({}, {}, {}x{}x{})",
        m.threads, m.dynamic_smem, m.cluster[0], m.cluster[1], m.cluster[2], program.threads, program.dynamic_smem,
        program.cluster[0], program.cluster[1], program.cluster[2]);
  }
  return "";
}

}  // namespace

std::string JitRuntime::entry_mismatch(const std::string& key, const jit::CacheEntryMeta& meta) const {
  jit::Descriptor d;
  KernelProgram program;
  try {
    d = descriptor_from_json(meta.descriptor);
    program = family_of(d).program(d);
  } catch (const std::exception& e) {
    return fmt::format("its descriptor is not one of this build's kernels ({})", e.what());
  }
  if (std::string why = launch_mismatch(meta, program); !why.empty()) return why;
  // The key covers NVRTC's version: without NVRTC the re-hash cannot be checked (and is not a fault).
  if (!Nvrtc::try_get()) return "";
  if (const std::string k = key_of(d, program); k != key) return fmt::format("its descriptor hashes to key {}", k);
  return "";
}

std::shared_ptr<const jit::CacheEntry> JitRuntime::image(const jit::Descriptor& d, bool runtime_miss,
                                                         EnsureResult* result) {
  const KernelProgram program = family_of(d).program(d);
  const std::string key = key_of(d, program);
  if (result) result->key = key;
  {
    std::lock_guard lock(images_mutex_);
    if (auto it = images_.find(key); it != images_.end()) {
      if (result) result->source = ImageSource::kMemory;
      return it->second;
    }
  }
  auto publish = [&](jit::CacheEntry&& entry, ImageSource source) {
    auto shared = std::make_shared<const jit::CacheEntry>(std::move(entry));
    std::lock_guard lock(images_mutex_);
    auto [it, inserted] = images_.emplace(key, shared);
    if (result) result->source = source;
    return it->second;
  };
  // An entry must describe this descriptor and launch as its program says (the checksum covers only the
  // cubin): anything else is treated as corrupt and rebuilt.
  auto matches = [&](const jit::CacheEntryMeta& m) {
    return m.descriptor == descriptor_to_json(d) && launch_mismatch(m, program).empty();
  };
  auto load = [&] {
    auto r = disk_.load(key);
    if (r.status == jit::DiskCache::LoadStatus::kHit && !matches(r.entry.meta)) {
      logger().warn("cache entry {} in {} does not match {} (descriptor or launch metadata edited); rebuilding", key,
                    r.layer.string(), jit::to_string(d));
      r.status = jit::DiskCache::LoadStatus::kCorrupt;
    }
    return r;
  };
  auto loaded = load();
  if (loaded.status == jit::DiskCache::LoadStatus::kHit) {
    ++disk_hits_;
    return publish(std::move(loaded.entry), ImageSource::kDisk);
  }
  if (runtime_miss) {
    record_miss(d, "compile");
    if (options_.strict) {
      throw_error(CHORD_ERROR_STRICT_MISS,
                  "kernel {} (key {}) is in no cache layer and CHORD_JIT_STRICT=1 forbids compiling at run time; "
                  "prewarm it with chord-jit",
                  jit::to_string(d), key);
    }
  }
  // One compile per key across processes: whoever holds the lock compiles, the others find its entry.
  auto lock = disk_.lock_key(key);
  loaded = load();
  if (loaded.status == jit::DiskCache::LoadStatus::kHit) {
    ++disk_hits_;
    return publish(std::move(loaded.entry), ImageSource::kDisk);
  }
  const std::string descriptor_text = jit::to_string(d);
  const Nvrtc& nvrtc = Nvrtc::get();
  std::vector<std::pair<std::string_view, std::string_view>> headers;
  for (const auto& s : embedded_sources()) headers.emplace_back(s.path, s.text);
  CompileOutput out = nvrtc.compile(program.source(), program.name_expression,
                                    nvrtc_options(d.arch, nvrtc.major(), nvrtc.minor()), headers, descriptor_text);
  ++compiled_;
  logger().info("compiled {} in {:.1f} ms", descriptor_text, out.compile_ms);
  jit::CacheEntry entry;
  entry.meta.key = key;
  entry.meta.descriptor = descriptor_to_json(d);
  entry.meta.descriptor_text = descriptor_text;
  entry.meta.lowered_name = out.lowered_name;
  entry.meta.threads = program.threads;
  entry.meta.dynamic_smem = program.dynamic_smem;
  entry.meta.cluster = program.cluster;
  entry.meta.cubin_size = out.cubin.size();
  entry.meta.cubin_checksum = jit::hex_digest128(out.cubin);
  entry.meta.compile_ms = out.compile_ms;
  entry.meta.nvrtc_version = fmt::format("{}.{}", nvrtc.major(), nvrtc.minor());
  entry.meta.created_unix =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  entry.meta.compile_log = std::move(out.log);
  entry.cubin = std::move(out.cubin);
  disk_.store(entry);
  if (result) result->compile_ms = entry.meta.compile_ms;
  return publish(std::move(entry), ImageSource::kCompiled);
}

EnsureResult JitRuntime::ensure_compiled(const jit::Descriptor& d) {
  EnsureResult result;
  image(d, /*runtime_miss=*/false, &result);
  return result;
}

const ContextState& JitRuntime::context_for(CUstream stream) {
  if (t_dry_run) return t_dry_run->context_;
  const DriverApi& api = require_driver();
  CUcontext ctx = nullptr;
  if (stream) {
    check_cuda(api.cuStreamGetCtx(stream, &ctx), "cuStreamGetCtx");
  } else {
    check_cuda(api.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
    if (!ctx) {
      // No context yet (a plain C caller): use device 0's primary context, as the runtime API would.
      CUdevice dev = 0;
      check_cuda(api.cuDeviceGet(&dev, 0), "cuDeviceGet");
      check_cuda(api.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
      check_cuda(api.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    }
  }
  {
    std::shared_lock lock(contexts_mutex_);
    for (const auto& c : contexts_) {
      if (c->context == ctx) return *c;
    }
  }
  auto state = std::make_unique<ContextState>();
  state->context = ctx;
  {
    ScopedContext scope(api, ctx);
    check_cuda(api.cuCtxGetDevice(&state->device), "cuCtxGetDevice");
  }
  int major = 0, minor = 0, sms = 0, smem = 0;
  check_cuda(api.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, state->device),
             "cuDeviceGetAttribute");
  check_cuda(api.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, state->device),
             "cuDeviceGetAttribute");
  check_cuda(api.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, state->device),
             "cuDeviceGetAttribute");
  check_cuda(api.cuDeviceGetAttribute(&smem, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, state->device),
             "cuDeviceGetAttribute");
  state->facts.arch = Arch::for_compute_capability(major, minor);
  state->facts.sm_count = sms;
  state->facts.max_smem_per_block_optin = smem;
  int memory_khz = 0, bus_bits = 0;
  check_cuda(api.cuDeviceGetAttribute(&memory_khz, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, state->device),
             "cuDeviceGetAttribute");
  check_cuda(api.cuDeviceGetAttribute(&bus_bits, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, state->device),
             "cuDeviceGetAttribute");
  if (memory_khz > 0 && bus_bits > 0) state->facts.dram_peak_tbps = memory_khz * 1e3 * 2 * (bus_bits / 8) / 1e12;
  std::unique_lock lock(contexts_mutex_);
  for (const auto& c : contexts_) {
    if (c->context == ctx) return *c;
  }
  contexts_.push_back(std::move(state));
  return *contexts_.back();
}

const LoadedKernel& JitRuntime::kernel(const jit::Descriptor& d, const ContextState& ctx, CUstream stream) {
  if (DryRun* dry = t_dry_run) {
    dry->descriptors_.push_back(d);
    return dry->placeholder_;
  }
  MemoKey key{ctx.context, d};
  {
    std::shared_lock lock(memo_mutex_);
    if (auto it = memo_.find(key); it != memo_.end()) return *it->second;
  }
  const DriverApi& api = require_driver();
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  check_cuda(api.cuStreamIsCapturing(stream, &capture), "cuStreamIsCapturing");
  if (capture != CU_STREAM_CAPTURE_STATUS_NONE) {
    record_miss(d, "capture");
    throw_error(CHORD_ERROR_CAPTURE_MISS,
                "kernel {} is not loaded and the stream is capturing a CUDA graph; run the operation once before "
                "capture (or prewarm) so it never compiles or loads inside a capture",
                jit::to_string(d));
  }
  auto img = image(d, /*runtime_miss=*/true, nullptr);
  auto loaded = std::make_unique<LoadedKernel>();
  {
    ScopedContext scope(api, ctx.context);
    check_cuda(api.cuModuleLoadData(&loaded->module, img->cubin.data()), "cuModuleLoadData");
    CUresult r = api.cuModuleGetFunction(&loaded->function, loaded->module, img->meta.lowered_name.c_str());
    if (r != CUDA_SUCCESS) {
      api.cuModuleUnload(loaded->module);
      check_cuda(r, "cuModuleGetFunction");
    }
    if (img->meta.dynamic_smem > 0) {
      check_cuda(api.cuFuncSetAttribute(loaded->function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                        static_cast<int>(img->meta.dynamic_smem)),
                 "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
    }
    int max_threads = 0;
    check_cuda(api.cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, loaded->function),
               "cuFuncGetAttribute");
    if (static_cast<uint32_t>(max_threads) < img->meta.threads) {
      api.cuModuleUnload(loaded->module);
      throw_error(CHORD_ERROR_INTERNAL, "kernel {} launches {} threads but the compiled module allows {}",
                  img->meta.descriptor_text, img->meta.threads, max_threads);
    }
  }
  if (api.cuFuncGetParamInfo) {
    uint8_t count = 0;
    size_t offset = 0, size = 0;
    while (count < LoadedKernel::kMaxParams &&
           api.cuFuncGetParamInfo(loaded->function, count, &offset, &size) == CUDA_SUCCESS) {
      loaded->param_sizes[count++] = static_cast<uint16_t>(size);
    }
    loaded->param_count = count;
  }
  loaded->name = img->meta.descriptor_text;
  loaded->key = img->meta.key;
  loaded->threads = img->meta.threads;
  loaded->dynamic_smem = img->meta.dynamic_smem;
  loaded->cluster = img->meta.cluster;
  std::unique_lock lock(memo_mutex_);
  auto [it, inserted] = memo_.emplace(std::move(key), std::move(loaded));
  if (inserted) {
    ++loaded_;
  } else {
    api.cuModuleUnload(loaded->module);  // another thread loaded it first
  }
  return *it->second;
}

JitStats JitRuntime::stats() const { return {compiled_.load(), disk_hits_.load(), loaded_.load()}; }

}  // namespace chordrt
