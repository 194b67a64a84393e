// chord-jit: prewarm, inspect, verify, prune and clear chordrt's kernel cache.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <cstdlib>

#include "chordrt/chordrt.hpp"
#include "runtime/model_plan.hpp"
#include "tools/chord-jit/commands.hpp"

int main(int argc, char** argv) {
  using namespace chordrt::cli;
  CLI::App app{"chord-jit: ahead-of-time compilation and cache management for chordrt kernels"};
  app.require_subcommand(1);
  std::string cache_dir;
  bool json = false;
  app.add_option("--cache-dir", cache_dir, "primary cache directory (default: $CHORD_CACHE_DIR or ~/.cache/chordrt)");
  app.add_flag("--json", json, "machine-readable output on stdout");
  app.set_version_flag("--version", fmt::format("chord-jit {}.{}.{}", CHORDRT_VERSION_MAJOR,
                                                CHORDRT_VERSION_MINOR, CHORDRT_VERSION_PATCH));

  auto* info = app.add_subcommand("info", "versions of chordrt, NVRTC and the driver; devices; cache layers");

  PrewarmRequest req;
  auto* prewarm = app.add_subcommand("prewarm", "compile every kernel a model deployment (or a list) dispatches");
  auto* model = prewarm->add_option(
      "--model", req.model,
      fmt::format("preset ({}) or a config.json path", fmt::join(chordrt::model_preset_names(), ", ")));
  auto* deployment = prewarm->add_option("--deployment", req.deployment, "tpN or epN, e.g. ep8");
  auto* descriptors = prewarm->add_option("--descriptors", req.descriptors_file, "JSON-lines file of descriptors");
  auto* misses = prewarm->add_option("--from", req.misses_file, "JSON-lines file written by CHORD_RECORD_MISSES");
  prewarm->add_option("--arch", req.arch,
                      "target architecture; the plan uses its device facts (sm_90a: an H100/H200 SXM, 132 SMs, "
                      "227 KB of shared memory per block)")
      ->capture_default_str();
  prewarm->add_option("-j,--jobs", req.jobs, "parallel compile processes (default: one per core)")
      ->check(CLI::Range(1, 1024));
  model->needs(deployment);
  deployment->needs(model);
  model->excludes(descriptors)->excludes(misses);
  descriptors->excludes(misses);

  auto* ls = app.add_subcommand("ls", "list cache entries of every layer");
  auto* stats = app.add_subcommand("stats", "entry counts and sizes per layer and family");
  bool repair = false;
  auto* verify = app.add_subcommand("verify", "check every entry's checksum");
  verify->add_flag("--repair", repair, "rebuild (or remove) corrupt entries of the primary directory");
  std::string max_size;
  auto* prune = app.add_subcommand("prune", "evict least-recently-used entries down to a size");
  prune->add_option("--max-size", max_size, "e.g. 512M, 2G")->required();
  auto* clear = app.add_subcommand("clear", "remove every entry of the primary directory");

  for (auto* sub : {info, prewarm, ls, stats, verify, prune, clear}) sub->add_flag("--json", json, "JSON output");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (prewarm->parsed() && req.model.empty() && req.descriptors_file.empty() && req.misses_file.empty()) {
    fmt::print(stderr, "chord-jit prewarm: give --model and --deployment, --descriptors FILE or --from FILE\n");
    return 2;
  }
  // The runtime reads its settings once, at first use: set the override before anything touches it.
  if (!cache_dir.empty()) ::setenv("CHORD_CACHE_DIR", cache_dir.c_str(), 1);
  try {
    if (info->parsed()) return run_info(json);
    if (prewarm->parsed()) return run_prewarm(req, json);
    if (ls->parsed()) return run_ls(json);
    if (stats->parsed()) return run_stats(json);
    if (verify->parsed()) return run_verify(repair, json);
    if (prune->parsed()) return run_prune(max_size, json);
    if (clear->parsed()) return run_clear(json);
  } catch (const chordrt::Error& e) {
    fmt::print(stderr, "chord-jit: {}\n", e.what());
    return e.status() == CHORD_ERROR_INVALID_ARGUMENT ? 2 : 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "chord-jit: {}\n", e.what());
    return 1;
  }
  return 2;
}
