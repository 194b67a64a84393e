// prewarm: plan the descriptors, compile them in -j worker processes, show progress, summarize.
#include "runtime/prewarm.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/model_plan.hpp"
#include "tools/chord-jit/commands.hpp"

namespace chordrt::cli {

namespace {

using nlohmann::json;

json item_to_json(const PrewarmItem& i) {
  return {{"descriptor", i.descriptor},
          {"ok", i.ok},
          {"cached", i.cached},
          {"compile_ms", i.compile_ms},
          {"error", i.error}};
}

PrewarmItem item_from_json(const json& j) {
  PrewarmItem i;
  i.descriptor = j.at("descriptor").get<std::string>();
  i.ok = j.at("ok").get<bool>();
  i.cached = j.at("cached").get<bool>();
  i.compile_ms = j.at("compile_ms").get<double>();
  i.error = j.at("error").get<std::string>();
  return i;
}

void write_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n <= 0) _exit(3);
    off += static_cast<size_t>(n);
  }
}

class Progress {
 public:
  Progress(size_t total, bool enabled) : total_(total), enabled_(enabled) {}
  void update(const PrewarmItem& item) {
    ++done_;
    if (!enabled_) return;
    const char* what = !item.ok ? "FAILED" : item.cached ? "cached" : "compiled";
    fmt::print(stderr, "\r\033[K[{}/{}] {} {}", done_, total_, what, item.descriptor);
    if (done_ == total_) fmt::print(stderr, "\n");
    std::fflush(stderr);
  }

 private:
  size_t total_, done_ = 0;
  bool enabled_;
};

// Forks `jobs` workers before this process starts any thread; worker w compiles descriptors
// w, w+jobs, ... (one compile per key is guaranteed by the cache's per-key lock anyway) and reports each
// result as a JSON line on its pipe.
std::vector<PrewarmItem> compile_in_workers(const std::vector<jit::Descriptor>& descriptors, int jobs,
                                            Progress& progress) {
  std::vector<PrewarmItem> items(descriptors.size());
  struct Worker {
    pid_t pid;
    int fd;
    std::string buffer;
  };
  std::vector<Worker> workers;
  for (int w = 0; w < jobs; ++w) {
    int fds[2];
    if (::pipe(fds) != 0) throw_error(CHORD_ERROR_INTERNAL, "pipe failed");
    std::fflush(nullptr);
    pid_t pid = ::fork();
    if (pid < 0) throw_error(CHORD_ERROR_INTERNAL, "fork failed");
    if (pid == 0) {
      ::close(fds[0]);
      for (size_t i = static_cast<size_t>(w); i < descriptors.size(); i += static_cast<size_t>(jobs)) {
        json line = item_to_json(prewarm_one(JitRuntime::global(), descriptors[i]));
        line["index"] = i;
        write_all(fds[1], line.dump() + "\n");
      }
      ::close(fds[1]);
      std::fflush(nullptr);
      _exit(0);
    }
    ::close(fds[1]);
    workers.push_back({pid, fds[0], {}});
  }
  std::vector<bool> seen(descriptors.size(), false);
  size_t open = workers.size();
  while (open > 0) {
    std::vector<pollfd> pfds;
    for (const auto& w : workers) pfds.push_back({w.fd, POLLIN, 0});
    if (::poll(pfds.data(), pfds.size(), -1) < 0) continue;
    for (size_t k = 0; k < workers.size(); ++k) {
      if (workers[k].fd < 0 || !(pfds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[4096];
      ssize_t n = ::read(workers[k].fd, buf, sizeof(buf));
      if (n <= 0) {
        ::close(workers[k].fd);
        workers[k].fd = -1;
        --open;
        continue;
      }
      auto& b = workers[k].buffer;
      b.append(buf, static_cast<size_t>(n));
      for (size_t nl; (nl = b.find('\n')) != std::string::npos; b.erase(0, nl + 1)) {
        const json j = json::parse(b.substr(0, nl));
        const size_t i = j.at("index").get<size_t>();
        items[i] = item_from_json(j);
        seen[i] = true;
        progress.update(items[i]);
      }
    }
  }
  for (const auto& w : workers) {
    int status = 0;
    ::waitpid(w.pid, &status, 0);
  }
  // A worker that died (e.g. killed) leaves its remaining descriptors unreported: count them failed.
  for (size_t i = 0; i < descriptors.size(); ++i) {
    if (!seen[i]) {
      items[i].descriptor = jit::to_string(descriptors[i]);
      items[i].error = "worker process died before reporting";
      progress.update(items[i]);
    }
  }
  return items;
}

}  // namespace

int run_prewarm(const PrewarmRequest& req, bool as_json) {
  std::vector<jit::Descriptor> descriptors;
  if (!req.model.empty()) {
    const MoeModelShape model = resolve_model(req.model);
    descriptors =
        plan_descriptors(model, Deployment::parse(req.deployment), DeviceFacts::offline(Arch::parse(req.arch)));
  } else {
    descriptors = read_descriptor_lines(!req.descriptors_file.empty() ? req.descriptors_file : req.misses_file);
  }
  const auto start = std::chrono::steady_clock::now();
  int jobs = req.jobs > 0 ? req.jobs : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  jobs = std::min<int>(jobs, static_cast<int>(std::max<size_t>(descriptors.size(), 1)));
  Progress progress(descriptors.size(), ::isatty(STDERR_FILENO) == 1);
  std::vector<PrewarmItem> items;
  if (jobs <= 1) {
    for (const auto& d : descriptors) {
      items.push_back(prewarm_one(JitRuntime::global(), d));
      progress.update(items.back());
    }
  } else {
    items = compile_in_workers(descriptors, jobs, progress);
  }
  const PrewarmSummary s = summarize(items);
  const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  json failures = json::array();
  for (const auto& i : items) {
    if (!i.ok) failures.push_back({{"descriptor", i.descriptor}, {"error", i.error}});
  }
  if (as_json) {
    fmt::print("{}\n", json{{"compiled", s.compiled},
                            {"cached", s.cached},
                            {"failed", s.failed},
                            {"total", items.size()},
                            {"median_compile_ms", s.median_compile_ms},
                            {"max_compile_ms", s.max_compile_ms},
                            {"wall_ms", wall_ms},
                            {"jobs", jobs},
                            {"failures", failures}}
                           .dump(2));
  } else {
    for (const auto& f : failures) {
      fmt::print(stderr, "FAILED {}: {}\n", f["descriptor"].get<std::string>(), f["error"].get<std::string>());
    }
    fmt::print(
        "prewarm: {} kernels: {} compiled, {} already cached, {} failed in {:.2f} s with {} jobs "
        "(compile median {:.1f} ms, max {:.1f} ms)\n",
        items.size(), s.compiled, s.cached, s.failed, wall_ms / 1000.0, jobs, s.median_compile_ms, s.max_compile_ms);
  }
  return s.failed > 0 ? 1 : 0;
}

}  // namespace chordrt::cli
