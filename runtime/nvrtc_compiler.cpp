#include "runtime/nvrtc_compiler.hpp"

#include <dlfcn.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>

#include "runtime/core/error.hpp"

namespace chordrt {

namespace {
using nvrtcResult = int;
using nvrtcProgram = struct _nvrtcProgram*;
}  // namespace

struct Nvrtc::Api {
  const char* (*GetErrorString)(nvrtcResult);
  nvrtcResult (*Version)(int*, int*);
  nvrtcResult (*CreateProgram)(nvrtcProgram*, const char*, const char*, int, const char* const*, const char* const*);
  nvrtcResult (*DestroyProgram)(nvrtcProgram*);
  nvrtcResult (*AddNameExpression)(nvrtcProgram, const char*);
  nvrtcResult (*CompileProgram)(nvrtcProgram, int, const char* const*);
  nvrtcResult (*GetProgramLogSize)(nvrtcProgram, size_t*);
  nvrtcResult (*GetProgramLog)(nvrtcProgram, char*);
  nvrtcResult (*GetCUBINSize)(nvrtcProgram, size_t*);
  nvrtcResult (*GetCUBIN)(nvrtcProgram, char*);
  nvrtcResult (*GetLoweredName)(nvrtcProgram, const char*, const char**);
};

namespace {

std::vector<std::string> candidate_libraries(std::vector<std::string>& dirs) {
  std::vector<std::string> names;
  // The normal library search first (LD_LIBRARY_PATH, ldconfig), newest ABI first.
  for (const char* soname : {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}) names.emplace_back(soname);
  for (const char* var : {"CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"}) {
    if (const char* v = std::getenv(var); v && *v) dirs.push_back(std::string(v) + "/lib64");
  }
  dirs.emplace_back("/usr/local/cuda/lib64");
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/usr/local", ec)) {
    if (e.path().filename().string().starts_with("cuda-")) dirs.push_back((e.path() / "lib64").string());
  }
  dirs.emplace_back("/usr/lib/x86_64-linux-gnu");
  for (const auto& dir : dirs) {
    for (const char* soname : {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}) names.push_back(dir + "/" + soname);
  }
  return names;
}

struct Loaded {
  Nvrtc::Api api{};
  int major = 0, minor = 0;
  std::string path;
  std::string error;
};

Loaded load() {
  Loaded out;
  std::vector<std::string> dirs;
  std::string tried;
  void* lib = nullptr;
  // An explicit library is the one to use: never a silent fall-back to another NVRTC.
  if (const char* path = std::getenv("CHORD_NVRTC_LIBRARY"); path && *path) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) {
      out.error = fmt::format("CHORD_NVRTC_LIBRARY={}: {}", path,
                              std::filesystem::exists(path, ec) ? "not a regular file" : "no such file");
      return out;
    }
    lib = ::dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* e = ::dlerror();
      out.error = fmt::format("CHORD_NVRTC_LIBRARY={}: {}", path, e ? e : "not loadable");
      return out;
    }
    out.path = path;
  }
  for (const auto& name : lib ? std::vector<std::string>{} : candidate_libraries(dirs)) {
    if (name.find('/') != std::string::npos && !std::filesystem::exists(name)) continue;
    lib = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib) {
      out.path = name;
      break;
    }
    const char* e = ::dlerror();
    tried += fmt::format("\n  {}: {}", name, e ? e : "not loadable");
  }
  if (!lib) {
    out.error = fmt::format(
        "libnvrtc could not be loaded (install the CUDA toolkit's NVRTC, put it on LD_LIBRARY_PATH, or set "
        "CHORD_NVRTC_LIBRARY to its path); tried:{}",
        tried);
    return out;
  }
  // NVRTC dlopens libnvrtc-builtins by soname at its first compile; when libnvrtc came from an explicit
  // directory, preload the builtins from that directory so the soname lookup finds them loaded.
  auto slash = out.path.rfind('/');
  if (slash != std::string::npos) {
    std::error_code ec;
    std::string dir = out.path.substr(0, slash);
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      std::string f = e.path().filename().string();
      if (f.starts_with("libnvrtc-builtins.so.") && f.find("alt") == std::string::npos) {
        ::dlopen(e.path().c_str(), RTLD_NOW | RTLD_GLOBAL);
      }
    }
  }
  std::string missing;
  auto sym = [&](const char* name) {
    void* p = ::dlsym(lib, name);
    if (!p) missing += std::string(" ") + name;
    return p;
  };
  Nvrtc::Api& a = out.api;
  a.GetErrorString = reinterpret_cast<decltype(a.GetErrorString)>(sym("nvrtcGetErrorString"));
  a.Version = reinterpret_cast<decltype(a.Version)>(sym("nvrtcVersion"));
  a.CreateProgram = reinterpret_cast<decltype(a.CreateProgram)>(sym("nvrtcCreateProgram"));
  a.DestroyProgram = reinterpret_cast<decltype(a.DestroyProgram)>(sym("nvrtcDestroyProgram"));
  a.AddNameExpression = reinterpret_cast<decltype(a.AddNameExpression)>(sym("nvrtcAddNameExpression"));
  a.CompileProgram = reinterpret_cast<decltype(a.CompileProgram)>(sym("nvrtcCompileProgram"));
  a.GetProgramLogSize = reinterpret_cast<decltype(a.GetProgramLogSize)>(sym("nvrtcGetProgramLogSize"));
  a.GetProgramLog = reinterpret_cast<decltype(a.GetProgramLog)>(sym("nvrtcGetProgramLog"));
  a.GetCUBINSize = reinterpret_cast<decltype(a.GetCUBINSize)>(sym("nvrtcGetCUBINSize"));
  a.GetCUBIN = reinterpret_cast<decltype(a.GetCUBIN)>(sym("nvrtcGetCUBIN"));
  a.GetLoweredName = reinterpret_cast<decltype(a.GetLoweredName)>(sym("nvrtcGetLoweredName"));
  if (!missing.empty()) {
    out.error = fmt::format("{} lacks:{}", out.path, missing);
    return out;
  }
  a.Version(&out.major, &out.minor);
  return out;
}

}  // namespace

const Nvrtc* Nvrtc::try_get(std::string* why) {
  static const Loaded loaded = load();
  static const std::unique_ptr<Nvrtc> instance = [] {
    if (!loaded.error.empty()) return std::unique_ptr<Nvrtc>();
    std::unique_ptr<Nvrtc> n(new Nvrtc());
    n->api_ = &loaded.api;
    n->major_ = loaded.major;
    n->minor_ = loaded.minor;
    n->path_ = loaded.path;
    return n;
  }();
  if (!instance && why) *why = loaded.error;
  return instance.get();
}

const Nvrtc& Nvrtc::get() {
  std::string why;
  const Nvrtc* n = try_get(&why);
  if (!n) throw Error(CHORD_ERROR_NVRTC_UNAVAILABLE, why);
  return *n;
}

CompileOutput Nvrtc::compile(const std::string& source, const std::string& name_expression,
                             const std::vector<std::string>& options,
                             const std::vector<std::pair<std::string_view, std::string_view>>& headers,
                             const std::string& context) const {
  const Api& a = *api_;
  auto start = std::chrono::steady_clock::now();
  std::vector<std::string> header_text, header_names;
  header_text.reserve(headers.size());
  header_names.reserve(headers.size());
  for (const auto& [name, text] : headers) {
    header_names.emplace_back(name);
    header_text.emplace_back(text);
  }
  std::vector<const char*> hp, hn, op;
  for (size_t i = 0; i < headers.size(); ++i) {
    hp.push_back(header_text[i].c_str());
    hn.push_back(header_names[i].c_str());
  }
  for (const auto& o : options) op.push_back(o.c_str());

  nvrtcProgram prog = nullptr;
  auto fail = [&](nvrtcResult r, const char* step) {
    throw_error(CHORD_ERROR_COMPILE_FAILED, "NVRTC {} failed for {}: {}", step, context, a.GetErrorString(r));
  };
  if (nvrtcResult r =
          a.CreateProgram(&prog, source.c_str(), "chord_kernel.cu", static_cast<int>(hp.size()), hp.data(), hn.data());
      r != 0) {
    fail(r, "nvrtcCreateProgram");
  }
  struct Destroy {
    const Api& a;
    nvrtcProgram& p;
    ~Destroy() { a.DestroyProgram(&p); }
  } destroy{a, prog};

  if (nvrtcResult r = a.AddNameExpression(prog, name_expression.c_str()); r != 0) fail(r, "nvrtcAddNameExpression");
  nvrtcResult compiled = a.CompileProgram(prog, static_cast<int>(op.size()), op.data());
  CompileOutput out;
  size_t log_size = 0;
  a.GetProgramLogSize(prog, &log_size);
  if (log_size > 1) {
    out.log.resize(log_size);
    a.GetProgramLog(prog, out.log.data());
    while (!out.log.empty() && out.log.back() == '\0') out.log.pop_back();
  }
  if (compiled != 0) {
    throw_error(CHORD_ERROR_COMPILE_FAILED, "NVRTC could not compile {} ({}): {}\n{}", context, name_expression,
                a.GetErrorString(compiled), out.log);
  }
  size_t cubin_size = 0;
  if (nvrtcResult r = a.GetCUBINSize(prog, &cubin_size); r != 0 || cubin_size == 0) {
    throw_error(CHORD_ERROR_COMPILE_FAILED,
                "NVRTC produced no cubin for {} (is the arch a real sm_XX target, not compute_XX?)", context);
  }
  out.cubin.resize(cubin_size);
  if (nvrtcResult r = a.GetCUBIN(prog, out.cubin.data()); r != 0) fail(r, "nvrtcGetCUBIN");
  const char* lowered = nullptr;
  if (nvrtcResult r = a.GetLoweredName(prog, name_expression.c_str(), &lowered); r != 0 || !lowered) {
    fail(r, "nvrtcGetLoweredName");
  }
  out.lowered_name = lowered;
  out.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace chordrt
