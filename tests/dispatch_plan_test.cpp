// Prewarm plans what dispatch uses: each family's real dispatch, run in a dry run (no driver, no launch)
// over the benchmarks' points of a preset deployment, asks only for descriptors that preset's plan holds.
// A family adds its own points here.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "runtime/jit_runtime.hpp"
#include "runtime/model_plan.hpp"
#include "runtime/ops/glue.hpp"
#include "tests/test_support.hpp"

using chordrt::test::kHopperFacts;

namespace {

// Runs `dispatch` in a dry run and checks every descriptor it asked for is in the plan of `model` at
// `deployment`; returns how many it asked for.
template <typename F>
size_t expect_planned(const std::string& model, const std::string& deployment, F&& dispatch) {
  const auto plan =
      chordrt::plan_descriptors(chordrt::resolve_model(model), chordrt::Deployment::parse(deployment), kHopperFacts);
  chordrt::DryRun dry(kHopperFacts);
  dispatch();
  for (const auto& d : dry.descriptors()) {
    INFO(model << " " << deployment << ": " << chordrt::jit::to_string(d));
    CHECK(std::find(plan.begin(), plan.end(), d) != plan.end());
  }
  return dry.descriptors().size();
}

// Distinct, aligned, never-dereferenced device addresses for the dry run.
template <typename T = void>
T* fake(uintptr_t i) {
  return reinterpret_cast<T*>(0x100000 * (i + 1));
}

}  // namespace

TEST_CASE("dry-run dispatch: the glue ops at the glue bench's points are planned", "[plan][dispatch]") {
  // bench/glue_bench.py: Kimi K2 (384 experts, top-8, hidden 7168), 1..16384 tokens, block sizes 16..128.
  for (const std::string dep : {"ep8", "tp8"}) {
    const bool ep = dep == "ep8";
    const int64_t inter = ep ? 2048 : 256;
    const size_t asked = expect_planned("kimi-k2", dep, [&] {
      for (int64_t tokens : {1, 8, 64, 256, 1024, 4096, 16384}) {
        for (int32_t block : {16, 32, 64, 128}) {
          const int64_t cap = chordrt::ops::moe_align_sorted_capacity(tokens, 8, 384, block);
          chord_moe_align_args_t a{sizeof(a),  fake<const int32_t>(0), tokens,    8, 384, block, fake<int32_t>(1),
                                   cap,        fake<int32_t>(2),       cap,       fake<int32_t>(3),
                                   ep ? fake<const int32_t>(4) : nullptr};
          chordrt::ops::moe_align(a, nullptr);
        }
        const chord_silu_and_mul_args_t s{sizeof(s), fake(5), fake(6), tokens * 8, inter};
        chordrt::ops::silu_and_mul(s, nullptr);
        const chord_moe_combine_args_t c{sizeof(c),       fake(7), fake<const float>(8), fake(9), tokens, 8, 7168,
                                         ep ? fake<const int32_t>(10) : nullptr, ep ? fake<const int32_t>(11) : nullptr,
                                         384};
        chordrt::ops::moe_combine(c, nullptr);
      }
    });
    CHECK(asked == 7 * 6);
  }
}
