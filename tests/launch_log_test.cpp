// The launch log (CHORD_LAUNCH_LOG) without a GPU: the line a launch appends, and that appends of many
// processes at once stay whole lines (tools/racecheck_plan.py attributes them to tests by byte offset).
#include <catch2/catch.hpp>
#include <cerrno>
#include <map>
#include <sstream>
#include <string>

#include "runtime/core/append_line.hpp"
#include "runtime/launch.hpp"
#include "tests/test_support.hpp"

using chordrt::LoadedKernel;
using chordrt::test::run_children_together;
using chordrt::test::slurp;
using chordrt::test::TempDir;

namespace {

LoadedKernel kernel_named(const std::string& key, const std::string& name) {
  LoadedKernel k;
  k.key = key;
  k.name = name;
  return k;
}

}  // namespace

TEST_CASE("a launch appends one line: its key and its descriptor", "[launch_log]") {
  TempDir t("launch-log");
  const std::string log = (t.path() / "launches.log").string();
  chordrt::detail::record_launch(log, kernel_named("0123abcd", "glue.silu_and_mul[sm_90a]{vec=8,threads=256}"));
  chordrt::detail::record_launch(log, kernel_named("4567ef01", "glue.moe_combine[sm_90a]{top_k=8}"));
  chordrt::detail::record_launch(log, kernel_named("0123abcd", "glue.silu_and_mul[sm_90a]{vec=8,threads=256}"));
  CHECK(slurp(log) ==
        "0123abcd glue.silu_and_mul[sm_90a]{vec=8,threads=256}\n"
        "4567ef01 glue.moe_combine[sm_90a]{top_k=8}\n"
        "0123abcd glue.silu_and_mul[sm_90a]{vec=8,threads=256}\n");
}

TEST_CASE("appends of processes writing one log at once stay whole lines", "[launch_log]") {
  TempDir t("launch-log");
  const std::string log = (t.path() / "launches.log").string();
  constexpr int kChildren = 6, kLines = 300;
  // Long lines make a torn write more likely to show if appends were not atomic.
  auto line_of = [](int child) { return "key" + std::to_string(child) + " " + std::string(200, 'a' + child); };
  const auto results = run_children_together(kChildren, [&](int child) {
    for (int i = 0; i < kLines; ++i) {
      if (!chordrt::append_line(log, line_of(child))) return std::string("append failed");
    }
    return std::string();
  });
  for (const std::string& r : results) CHECK(r.empty());
  std::map<std::string, int> counts;
  std::istringstream in(slurp(log));
  for (std::string line; std::getline(in, line);) ++counts[line];
  REQUIRE(counts.size() == kChildren);
  for (int child = 0; child < kChildren; ++child) CHECK(counts[line_of(child)] == kLines);
}

TEST_CASE("an unwritable log reports why", "[launch_log]") {
  TempDir t("launch-log");
  errno = 0;
  CHECK_FALSE(chordrt::append_line((t.path() / "missing-dir" / "launches.log").string(), "k d"));
  CHECK(errno == ENOENT);
}
