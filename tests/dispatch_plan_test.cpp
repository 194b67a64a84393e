// Prewarm plans what dispatch uses: each family's real dispatch, run in a dry run (no driver, no launch)
// over the benchmarks' points of a preset deployment, asks only for descriptors that preset's plan holds.
// A family adds its own points here.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "runtime/jit_runtime.hpp"
#include "runtime/model_plan.hpp"
#include "runtime/ops/glue.hpp"
#include "runtime/ops/grouped.hpp"
#include "runtime/ops/indexed.hpp"
#include "runtime/ops/w4a16.hpp"
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

// A W4A16 weight packed (in the dry run) for `layout` on fake buffers.
chord_w4a16_weight_t packed_weight(chord_w4a16_layout_t layout, int32_t experts, int32_t n, int32_t k) {
  chord_w4a16_pack_args_t p{};
  p.struct_size = sizeof p;
  p.layout = layout;
  p.num_experts = experts;
  p.n = n;
  p.k = k;
  p.bits = 4;
  p.group_size = 32;
  p.symmetric = 1;
  p.scale_is_bf16 = 1;
  p.weight_packed = fake(20);
  p.weight_scale = fake(21);
  p.packed = fake(22);
  p.scale = fake(23);
  chordrt::ops::w4a16_weight_sizes(layout, experts, n, k, &p.packed_bytes, &p.scale_bytes);
  return chordrt::ops::w4a16_pack(p, nullptr);
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

TEST_CASE("dry-run dispatch: the grouped GEMMs at the grouped bench's points are planned", "[plan][dispatch][grouped]") {
  // bench/grouped_bench.py: Kimi K2 at EP8 (48 local experts), gate_up N 4096 K 7168 and down N 7168 K 2048;
  // contiguous 128 / 256 / 512 rows per expert, masked 8 / 16 / 32 / 64 tokens per expert (max_m 128).
  const int32_t experts = 48;
  const size_t asked = expect_planned("kimi-k2", "ep8", [&] {
    for (const auto& [n, k] : {std::pair<int32_t, int32_t>{4096, 7168}, {7168, 2048}}) {
      const chord_w4a16_weight_t contiguous = packed_weight(CHORD_W4A16_LAYOUT_WGMMA_K64, experts, n, k);
      for (int64_t per_expert : {128, 256, 512}) {
        const chord_grouped_contiguous_args_t a{sizeof(a), fake(0), experts * per_expert, &contiguous,
                                                fake<const int32_t>(1), fake(2)};
        chordrt::ops::grouped_contiguous(a, nullptr);
      }
      const chord_w4a16_weight_t masked = packed_weight(CHORD_W4A16_LAYOUT_WGMMA_K128, experts, n, k);
      for (int32_t tokens : {8, 16, 32, 64}) {
        const chord_grouped_masked_args_t a{sizeof(a), fake(0), 128, &masked, fake<const int32_t>(1), tokens, fake(2)};
        chordrt::ops::grouped_masked(a, nullptr);
      }
    }
  });
  CHECK(asked == 2 * (2 + 3 + 4));  // per projection: two packers, three contiguous and four masked GEMMs
}

TEST_CASE("dry-run dispatch: the indexed GEMMs at the indexed bench's points are planned", "[plan][dispatch][indexed]") {
  // bench/indexed_bench.py: Kimi K2 (384 experts, top-8). EP8 prefill: 48 local experts behind an expert
  // map, 1024..16384-token steps (about tokens routes here), WGMMA_K64; TP8 prefill: 384 experts sliced
  // (gate_up N 512 K 7168, down N 7168 K 256), 8 routes per token; EP8 decode: 160 / 400 routes over the
  // 48 experts, MMA. Each point: block_m from chord_indexed_block_m, moe_align at it (prefill), then
  // gate_up on [T, K] with top_k 8 and down on [8T, K] with top_k 1.
  struct Case {
    const char* deployment;
    chord_w4a16_layout_t layout;
    int32_t experts;
    bool expert_map;
    std::pair<int32_t, int32_t> gate_up, down;
    std::vector<int64_t> tokens;
  };
  const Case cases[] = {
      {"ep8", CHORD_W4A16_LAYOUT_WGMMA_K64, 48, true, {4096, 7168}, {7168, 2048}, {1024, 2048, 4096, 8192, 16384}},
      {"tp8", CHORD_W4A16_LAYOUT_WGMMA_K64, 384, false, {512, 7168}, {7168, 256}, {1024, 2048, 4096, 8192, 16384}},
      {"ep8", CHORD_W4A16_LAYOUT_MMA, 48, false, {4096, 7168}, {7168, 2048}, {20, 50}},
  };
  for (const Case& c : cases) {
    const bool decode = c.layout == CHORD_W4A16_LAYOUT_MMA;
    INFO(c.deployment << (decode ? " decode" : " prefill"));
    size_t gemms = 0;
    const size_t asked = expect_planned("kimi-k2", c.deployment, [&] {
      for (const auto& [n, k] : {c.gate_up, c.down}) {
        const chord_w4a16_weight_t w = packed_weight(c.layout, c.experts, n, k);
        for (int64_t tokens : c.tokens) {
          // Decode's routes all land here (48 global experts, no map); prefill's tokens * 8 * E / 384.
          const int64_t routed = tokens * 8 * c.experts / (decode ? c.experts : 384);
          const int32_t block_m = chordrt::ops::indexed_block_m(c.layout, c.experts, n, k, routed, 0);
          const int32_t global_experts = decode ? c.experts : 384;
          const int64_t cap = chordrt::ops::moe_align_sorted_capacity(tokens, 8, global_experts, block_m);
          // The decode bench aligns over its 48 experts without a map, a shape no deployment plans:
          // only its GEMMs are checked.
          if (!decode) {
            const chord_moe_align_args_t al{sizeof(al), fake<const int32_t>(3), tokens, 8, global_experts, block_m,
                                            fake<int32_t>(4), cap, fake<int32_t>(5), (cap + block_m - 1) / block_m,
                                            fake<int32_t>(6), c.expert_map ? fake<const int32_t>(7) : nullptr};
            chordrt::ops::moe_align(al, nullptr);
          }
          const bool is_gate_up = n == c.gate_up.first && k == c.gate_up.second;
          chord_indexed_args_t a{};
          a.struct_size = sizeof(a);
          a.a = fake(8);
          a.top_k = is_gate_up ? 8 : 1;
          a.num_tokens = tokens * 8 / a.top_k;
          a.block_m = block_m;
          a.weight = &w;
          a.sorted_token_ids = fake<const int32_t>(4);
          a.sorted_token_ids_capacity = cap;
          a.expert_ids = fake<const int32_t>(5);
          a.expert_ids_capacity = (cap + block_m - 1) / block_m;
          a.num_tokens_post_padded = fake<const int32_t>(6);
          a.out = fake(9);
          chordrt::ops::indexed_gemm(a, nullptr);
          ++gemms;
        }
      }
    });
    CHECK(gemms == 2 * c.tokens.size());
    CHECK(asked == 2 + gemms + (decode ? 0 : gemms));  // the packers, the GEMMs, moe_align (prefill)
  }
}
