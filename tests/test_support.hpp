// Helpers shared by the CPU tests: a self-removing temp directory, JitOptions on a cache directory,
// catching a chordrt::Error, cache entry paths, whole-file reads and writes, and forked children.
// (The [gpu] tests have theirs in tests/gpu_support.hpp.)
#pragma once

#include <stdlib.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "chordrt/chordrt.hpp"
#include "heuristics/glue.hpp"
#include "jit_cache/descriptor.hpp"
#include "runtime/jit_runtime.hpp"

namespace chordrt::test {

inline constexpr Arch kHopper{90, 'a'};
inline const DeviceFacts kHopperFacts = DeviceFacts::offline(kHopper);
// The one-CTA moe_align configuration (what dispatch picks for up to 2048 routes on an H200).
inline constexpr heuristics::MoeAlignConfig kSingleCta{1024, 1};

// A fresh directory /tmp/chordrt-<prefix>-XXXXXX, removed with everything in it.
class TempDir {
 public:
  explicit TempDir(std::string_view prefix) {
    std::string tmpl = "/tmp/chordrt-" + std::string(prefix) + "-XXXXXX";
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed for " + tmpl);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    // A test may have left a directory unwritable (non-root runs).
    for (auto it = std::filesystem::recursive_directory_iterator(path_, ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      if (it->is_directory(ec)) ::chmod(it->path().c_str(), 0755);
    }
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Runtime options with `dir` as the primary cache directory (and defaults otherwise).
inline JitOptions options_for(const std::filesystem::path& dir) {
  JitOptions o;
  o.cache.primary = dir;
  return o;
}

// The chordrt::Error f() throws, or nullopt when it returns.
template <typename F>
std::optional<Error> error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  return std::nullopt;
}

// f() throws an INVALID_ARGUMENT chordrt::Error whose message contains every needle.
template <typename F>
void check_invalid_argument(F&& f, std::initializer_list<std::string> needles) {
  const auto e = error_of(std::forward<F>(f));
  REQUIRE(e.has_value());
  CHECK(e->status() == CHORD_ERROR_INVALID_ARGUMENT);
  for (const std::string& needle : needles) CHECK_THAT(std::string(e->what()), Catch::Matchers::Contains(needle));
}

// The file of a disk cache entry: <root>/entries/<first two key digits>/<key><ext>.
inline std::filesystem::path entry_file(const std::filesystem::path& root, const std::string& key, const char* ext) {
  return root / "entries" / key.substr(0, 2) / (key + ext);
}

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void spit(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << bytes;
  REQUIRE(out.good());
}

inline void flip_byte(const std::filesystem::path& p, size_t offset) {
  std::string bytes = slurp(p);
  REQUIRE(offset < bytes.size());
  bytes[offset] = static_cast<char>(bytes[offset] ^ 0x5a);
  spit(p, bytes);
}

inline bool write_all(int fd, const std::string& s) {
  const char* p = s.data();
  size_t left = s.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    left -= static_cast<size_t>(n);
  }
  return true;
}

inline std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// waitpid(pid), retried on EINTR: the child's wait status.
inline int wait_for(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

// Forks n children (before any thread exists in the calling test), holds them at a barrier (a pipe
// whose write end the parent closes once all are forked, so they all see EOF together), runs body(i) in
// each and returns what each produced, checking that each exited with status 0. A child that throws
// reports "error: <what>"; body must not use Catch's assertions.
inline std::vector<std::string> run_children_together(int n, const std::function<std::string(int)>& body) {
  int start[2];
  REQUIRE(::pipe(start) == 0);
  std::vector<pid_t> pids;
  std::vector<int> outputs;
  for (int i = 0; i < n; ++i) {
    int out[2];
    REQUIRE(::pipe(out) == 0);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(start[1]);
      ::close(out[0]);
      char c;
      while (::read(start[0], &c, 1) < 0 && errno == EINTR) {
      }
      std::string result;
      int code = 0;
      try {
        result = body(i);
      } catch (const std::exception& e) {
        result = std::string("error: ") + e.what();
        code = 3;
      }
      if (!write_all(out[1], result)) code = 4;
      ::_exit(code);
    }
    REQUIRE(pid >= 0);  // in the parent: a child must not report to Catch (its buffered output is shared)
    ::close(out[1]);
    pids.push_back(pid);
    outputs.push_back(out[0]);
  }
  ::close(start[0]);
  ::close(start[1]);  // go
  std::vector<std::string> results;
  for (int i = 0; i < n; ++i) {
    results.push_back(read_all(outputs[i]));
    ::close(outputs[i]);
    const int status = wait_for(pids[i]);
    INFO("child " << i << ": " << results.back());
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  return results;
}

}  // namespace chordrt::test
