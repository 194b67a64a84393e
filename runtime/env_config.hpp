// Settings from the environment, read once per process (never on the hot path).
//   CHORD_CACHE_DIR       primary cache directory (default $XDG_CACHE_HOME/chordrt or ~/.cache/chordrt)
//   CHORD_CACHE_PATH      extra read-only cache layers, ':'-separated, searched after the primary
//   CHORD_CACHE_MAX_SIZE  size cap of the primary directory (e.g. 2G); least recently used go first
//   CHORD_CACHE_LOCK_TIMEOUT  seconds to wait for another process compiling the same kernel (default
//                         120), then compile anyway
//   CHORD_JIT_STRICT=1    a kernel found in no cache layer at run time is an error, not a compile
//   CHORD_RECORD_MISSES   file to which every run-time miss is appended as a JSON line
//   CHORD_LAUNCH_LOG      file to which every kernel launch appends "<key> <descriptor>" (tests only:
//                         tools/racecheck_plan.py learns from it which test launches which kernel)
//   CHORD_LOG_LEVEL       trace, debug, info, warn (default), error, off (read by runtime/logging.cpp)
//   CHORD_WARP_DECODE_CONFIG  experiments: overrides of the warp-decode heuristics, e.g.
//                         "gate_up.stages=4,down.warps=8" (keys in heuristics/warp_decode.hpp)
//   CHORD_GROUPED_CONFIG  experiments: overrides of the grouped GEMM heuristics, e.g.
//                         "block_m=64,slices=1,stages=6" (heuristics/grouped.hpp)
//   CHORD_MLA_CONFIG      experiments: overrides of the sparse MLA decode heuristics, e.g.
//                         "head_group=16,warps=8,stages=3,splits=4" (heuristics/sparse_mla.hpp)
//   CHORD_DSA_CONFIG      experiments: overrides of the DSA indexer logits heuristics, e.g.
//                         "stages=6,keys_per_cta=2048,tma=0" (heuristics/dsa_indexer.hpp)
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace chordrt {

struct EnvConfig {
  std::filesystem::path cache_dir;
  std::vector<std::filesystem::path> cache_layers;
  uint64_t cache_max_bytes = 0;
  double cache_lock_timeout_s = 120;
  bool strict = false;
  std::string record_misses;
  std::string launch_log;
  std::string warp_decode_override;
  std::string grouped_override;
  std::string indexed_override;
  std::string mla_override;
  std::string dsa_override;

  static EnvConfig from_environment();
};

const EnvConfig& env_config();

}  // namespace chordrt
