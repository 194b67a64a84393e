// chord-jit subcommands. Each returns the process exit code: 0 ok, 1 failure (2, usage, is CLI11's).
#pragma once

#include <string>

namespace chordrt::cli {

struct PrewarmRequest {
  std::string model, deployment, descriptors_file, misses_file;
  std::string arch = "sm_90a";
  int jobs = 0;  // 0 = one per core
};

int run_info(bool json);
int run_prewarm(const PrewarmRequest& request, bool json);
int run_ls(bool json);
int run_stats(bool json);
int run_verify(bool repair, bool json);
int run_prune(const std::string& max_size, bool json);
int run_clear(bool json);

}  // namespace chordrt::cli
