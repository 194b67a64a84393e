// NVRTC, loaded at run time. Compiles one kernel source (with our embedded headers handed over in
// memory) into a cubin for an exact arch and resolves the kernel's lowered symbol name.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace chordrt {

struct CompileOutput {
  std::string cubin;
  std::string lowered_name;
  std::string log;
  double compile_ms = 0;
};

class Nvrtc {
 public:
  // Loaded once. Throws Error(NVRTC_UNAVAILABLE) listing every place that was tried.
  static const Nvrtc& get();
  // Like get(), but returns nullptr (and the reason) instead of throwing.
  static const Nvrtc* try_get(std::string* why = nullptr);

  int major() const { return major_; }
  int minor() const { return minor_; }
  const std::string& library_path() const { return path_; }

  // Throws Error(COMPILE_FAILED) carrying the NVRTC log and `context` (the descriptor).
  CompileOutput compile(const std::string& source, const std::string& name_expression,
                        const std::vector<std::string>& options,
                        const std::vector<std::pair<std::string_view, std::string_view>>& headers,
                        const std::string& context) const;

  struct Api;

 private:
  Nvrtc() = default;
  const Api* api_ = nullptr;
  int major_ = 0, minor_ = 0;
  std::string path_;
};

}  // namespace chordrt
