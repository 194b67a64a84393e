// Descriptor lists for chord-jit prewarm (--descriptors / --from): parsing, de-duplication, bad lines.
#include "runtime/prewarm.hpp"

#include <catch2/catch.hpp>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/kernel_registry.hpp"
#include "tests/test_support.hpp"

using namespace chordrt;
using chordrt::test::check_invalid_argument;
using chordrt::test::TempDir;

namespace {
std::string align_line(int experts, int block, bool as_miss) {
  const std::string d = "{\"family\": \"glue.moe_align\", \"arch\": \"sm_90a\", \"fields\": {\"num_experts\": " +
                        std::to_string(experts) + ", \"block_size\": " + std::to_string(block) +
                        ", \"has_expert_map\": 0, \"threads\": 1024, \"cluster\": 1}}";
  return as_miss ? "{\"descriptor\": " + d + ", \"reason\": \"compile\"}" : d;
}
}  // namespace

TEST_CASE("descriptor lists keep each distinct descriptor once, in order of first appearance", "[prewarm]") {
  TempDir t("prewarm-test");
  // 102 400 distinct descriptors, each twice (the second time as a recorded miss, in reverse order), and
  // blank lines. A de-duplication that compared each line with every kept descriptor would do ~10^10
  // comparisons here; the hash set does ~2 * 10^5 lookups.
  constexpr int kExperts = 1024, kBlocks = 100;
  const auto path = t.path() / "descriptors.jsonl";
  {
    std::ofstream f(path);
    for (int e = 1; e <= kExperts; ++e) {
      for (int b = 1; b <= kBlocks; ++b) f << align_line(e, b, false) << "\n";
    }
    f << "\n  \t\n";
    for (int e = kExperts; e >= 1; --e) {
      for (int b = kBlocks; b >= 1; --b) f << align_line(e, b, true) << "\n";
    }
  }
  const std::vector<jit::Descriptor> got = read_descriptor_lines(path.string());
  REQUIRE(got.size() == size_t{kExperts} * kBlocks);
  for (size_t i : {size_t{0}, size_t{1}, size_t{kBlocks}, got.size() - 1}) {
    const nlohmann::json j = descriptor_to_json(got[i]);
    CHECK(j["fields"]["num_experts"] == 1 + static_cast<int>(i) / kBlocks);
    CHECK(j["fields"]["block_size"] == 1 + static_cast<int>(i) % kBlocks);
  }
}

TEST_CASE("bad descriptor lists are INVALID_ARGUMENT naming the file and line", "[prewarm]") {
  TempDir t("prewarm-test");
  auto rejected = [&](const std::string& text, std::initializer_list<std::string> needles) {
    INFO(text.substr(0, 80));
    const auto path = t.path() / "list.jsonl";
    std::ofstream(path) << text;
    check_invalid_argument([&] { (void)read_descriptor_lines(path.string()); }, needles);
  };
  rejected(align_line(8, 16, false) + "\nnot json\n", {"list.jsonl:2", "not JSON"});
  rejected(align_line(8, 16, false) + "\n" + align_line(8, 0, false) + "\n", {"list.jsonl:2", "block_size"});
  rejected("{\"family\": \"glue.nope\", \"arch\": \"sm_90a\", \"fields\": {}}\n", {"list.jsonl:1", "unknown family"});
  // Nesting that would overflow the stack of the error message's dump is refused while parsing.
  rejected(std::string(200000, '[') + std::string(200000, ']') + "\n", {"list.jsonl:1", "nested more than"});
  check_invalid_argument([&] { (void)read_descriptor_lines(t.path().string()); }, {"not a regular file"});
  check_invalid_argument([&] { (void)read_descriptor_lines((t.path() / "missing").string()); }, {"no such file"});
}
