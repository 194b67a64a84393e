// The indexed family without a GPU: its heuristics (profile, expected blocks, block_m, configs), the host
// routing check, the C ABI's argument and weight checks, and its place in the model plans.
#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "chordrt/chordrt.h"
#include "heuristics/indexed.hpp"
#include "runtime/model_plan.hpp"
#include "runtime/ops/indexed.hpp"
#include "runtime/ops/indexed_routing.hpp"
#include "tests/test_support.hpp"

using Catch::Matchers::Contains;
using chordrt::heuristics::IndexedLayout;
using chordrt::heuristics::IndexedProfile;
using chordrt::heuristics::IndexedShape;
using chordrt::test::kHopper;
using chordrt::test::kHopperFacts;

namespace {

std::string last_error() { return chord_last_error(); }

// Mean blocks of moe_align over random uniform routings (the model's definition, sampled).
double sampled_blocks(int experts, int rows, int block_m, int trials) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> pick(0, experts - 1);
  double total = 0;
  for (int t = 0; t < trials; ++t) {
    std::vector<int> count(experts, 0);
    for (int r = 0; r < rows; ++r) ++count[pick(rng)];
    for (int c : count) total += (c + block_m - 1) / block_m;
  }
  return total / trials;
}

}  // namespace

TEST_CASE("indexed profile is deduced from the shape", "[indexed]") {
  using chordrt::heuristics::resolve_indexed_profile;
  CHECK(resolve_indexed_profile({IndexedLayout::kWgmma, 4096, 7168, 48}, IndexedProfile::kAuto) ==
        IndexedProfile::kExpertParallel);
  CHECK(resolve_indexed_profile({IndexedLayout::kWgmma, 7168, 2048, 48}, IndexedProfile::kAuto) ==
        IndexedProfile::kExpertParallel);
  CHECK(resolve_indexed_profile({IndexedLayout::kWgmma, 512, 7168, 384}, IndexedProfile::kAuto) ==
        IndexedProfile::kTensorParallel);
  CHECK(resolve_indexed_profile({IndexedLayout::kWgmma, 7168, 256, 384}, IndexedProfile::kAuto) ==
        IndexedProfile::kTensorParallel);
  CHECK(resolve_indexed_profile({IndexedLayout::kWgmma, 512, 7168, 384}, IndexedProfile::kExpertParallel) ==
        IndexedProfile::kExpertParallel);
}

TEST_CASE("expected indexed blocks match sampled routings", "[indexed]") {
  using chordrt::heuristics::expected_indexed_blocks;
  CHECK(expected_indexed_blocks(1, 100, 16) == 7.0);
  CHECK(expected_indexed_blocks(48, 0, 16) == 0.0);
  for (const auto& [experts, rows, bm] : {std::tuple{48, 160, 8}, {48, 400, 16}, {48, 2048, 64}, {384, 8192, 32}}) {
    INFO(experts << " experts, " << rows << " rows, block_m " << bm);
    const double model = expected_indexed_blocks(experts, rows, bm), sampled = sampled_blocks(experts, rows, bm, 400);
    CHECK(model == Approx(sampled).epsilon(0.01));
  }
}

TEST_CASE("indexed block_m follows tokens per expert", "[indexed]") {
  using chordrt::heuristics::select_indexed_block_m;
  const IndexedShape ep_up{IndexedLayout::kWgmma, 4096, 7168, 48}, tp_up{IndexedLayout::kWgmma, 512, 7168, 384};
  const IndexedShape dec_up{IndexedLayout::kMma, 4096, 7168, 48};
  // Decode: 8 / 16 / 24 only, larger as experts get more rows (3.3 and 8.3 rows per expert at 20 / 50 tokens).
  CHECK(select_indexed_block_m(dec_up, 160) == 8);
  CHECK(select_indexed_block_m(dec_up, 400) == 16);
  CHECK(select_indexed_block_m(dec_up, 48 * 40) == 24);
  for (int64_t rows = 1; rows <= 65536; rows *= 2) {
    const int ep = select_indexed_block_m(ep_up, rows), tp = select_indexed_block_m(tp_up, rows * 8);
    INFO(rows << " rows: EP " << ep << ", TP " << tp);
    CHECK(ep % 8 == 0);
    CHECK(ep <= 128);  // the largest two-slice tile
    CHECK(tp <= 128);
  }
  // Few rows per expert: small blocks; ~170 (EP8, 8192 tokens): two well-filled blocks, not 128 + 42.
  CHECK(select_indexed_block_m(ep_up, 48 * 4) <= 16);
  CHECK(select_indexed_block_m(ep_up, 48 * 21) == 32);
  CHECK(select_indexed_block_m(ep_up, 48 * 170) == 96);
  CHECK(select_indexed_block_m(ep_up, 48 * 340) >= 96);
}

TEST_CASE("every selected indexed config is a valid kernel", "[indexed]") {
  for (const IndexedShape s : {IndexedShape{IndexedLayout::kWgmma, 4096, 7168, 48},
                               {IndexedLayout::kWgmma, 7168, 2048, 48},
                               {IndexedLayout::kWgmma, 512, 7168, 384},
                               {IndexedLayout::kWgmma, 7168, 256, 384},
                               {IndexedLayout::kWgmma, 384, 576, 5}}) {
    for (int64_t rows = 1; rows <= 131072; rows *= 4) {
      const int bm = chordrt::heuristics::select_indexed_block_m(s, rows);
      const auto c = chordrt::heuristics::select_indexed_prefill(s, bm, rows);
      INFO(s.n << "x" << s.k << " E=" << s.experts << " rows " << rows << " block_m " << bm);
      CHECK(chordrt::heuristics::grouped_config_error({chordrt::heuristics::GroupedMode::kIndexed, s.n, s.k, s.experts},
                                                      c) == "");
      CHECK_NOTHROW(
          chordrt::ops::kIndexedPrefillFamily.program(chordrt::ops::indexed_prefill_descriptor(kHopper, s, c)));
    }
  }
  for (int bm : {8, 16, 24, 32}) {
    const IndexedShape s{IndexedLayout::kMma, 4096, 7168, 48};
    const auto c = chordrt::heuristics::select_indexed_decode(s, bm);
    CHECK(chordrt::heuristics::indexed_decode_config_error(s, c) == "");
    CHECK_NOTHROW(chordrt::ops::kIndexedDecodeFamily.program(chordrt::ops::indexed_decode_descriptor(kHopper, s, c)));
  }
  CHECK_THAT(chordrt::heuristics::indexed_decode_config_error({IndexedLayout::kMma, 4096, 7168, 48}, {64, 2}),
             Contains("wgmma layout"));
}

TEST_CASE("the routing check reports the first bad entry", "[indexed]") {
  // Two experts, block_m 4, routes 0..5: expert 0 has routes 0, 2, 4; expert 1 has 1, 3, 5.
  std::vector<int32_t> sorted = {0, 2, 4, 6, 1, 3, 5, 6, 99, 99}, experts = {0, 1, 7};
  chordrt::ops::RoutingSnapshot r;
  r.num_post_padded = 8;
  r.sorted_ids = sorted;
  r.expert_ids = experts;
  r.sorted_capacity = 10;
  r.expert_capacity = 3;
  r.routes = 6;
  r.experts = 2;
  r.block_m = 4;
  CHECK(chordrt::ops::routing_error(r) == "");  // the tails past the count are never looked at
  auto with = [&](auto edit) {
    auto copy = r;
    std::vector<int32_t> s = sorted, e = experts;
    edit(copy, s, e);
    copy.sorted_ids = s;
    copy.expert_ids = e;
    return chordrt::ops::routing_error(copy);
  };
  CHECK_THAT(with([](auto& c, auto&, auto&) { c.num_post_padded = 6; }), Contains("multiple of block_m 4"));
  CHECK_THAT(with([](auto& c, auto&, auto&) { c.num_post_padded = 12; }), Contains("capacity 10"));
  CHECK_THAT(with([](auto& c, auto&, auto&) { c.expert_capacity = 1; }), Contains("needs 2 expert_ids"));
  CHECK_THAT(with([](auto&, auto&, auto& e) { e[1] = 2; }), Contains("expert_ids[1] = 2"));
  CHECK(with([](auto&, auto&, auto& e) { e[1] = -1; }) == "");  // another GPU's block
  CHECK_THAT(with([](auto&, auto& s, auto&) { s[5] = 2; }),
             Contains("sorted_token_ids[5] = 2: route 2 already appears at slot 1"));
  CHECK_THAT(with([](auto&, auto& s, auto&) { s[5] = -3; }), Contains("negative"));
  CHECK_THAT(with([](auto&, auto& s, auto&) { s[5] = 6; }), Contains("route 3 appears in no block"));
}

TEST_CASE("chord_indexed_weight_sizes and block_m", "[indexed][capi]") {
  size_t packed = 1, scale = 1;
  REQUIRE(chord_indexed_weight_sizes(CHORD_INDEXED_MMA, 48, 4096, 7168, &packed, &scale) == CHORD_SUCCESS);
  CHECK(packed == size_t{48} * 4096 * 7168 / 2);
  CHECK(scale == size_t{48} * 4096 * 7168 / 32 * 2);
  CHECK(chord_indexed_weight_sizes(CHORD_INDEXED_WGMMA, 48, 4096 + 64, 7168, &packed, &scale) ==
        CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("multiple of 128"));
  CHECK(packed == 0);
  CHECK(chord_indexed_weight_sizes(2, 48, 4096, 7168, &packed, &scale) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("layout"));
  int32_t bm = 0;
  REQUIRE(chord_indexed_block_m(CHORD_INDEXED_MMA, 48, 4096, 7168, 160, CHORD_INDEXED_PROFILE_AUTO, &bm) ==
          CHORD_SUCCESS);
  CHECK(bm == 8);
  CHECK(chord_indexed_block_m(CHORD_INDEXED_MMA, 48, 4096, 7168, 160, 7, &bm) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("profile"));
  CHECK(chord_indexed_block_m(CHORD_INDEXED_MMA, 48, 4096, 7168, -1, 0, &bm) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK(chord_indexed_block_m(CHORD_INDEXED_MMA, 48, 4096, 7168, 1, 0, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("chord_indexed_gemm argument and weight checks", "[indexed][capi]") {
  CHECK(chord_indexed_gemm(nullptr, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  chord_indexed_args_t a{};
  CHECK(chord_indexed_gemm(&a, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("struct_size"));
  a.struct_size = sizeof a;
  CHECK(chord_indexed_gemm(&a, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("weight is null"));
  chord_indexed_weight_t w{};
  w.struct_size = sizeof w;
  w.layout = CHORD_INDEXED_MMA;
  w.num_experts = 4;
  w.n = 256;
  w.k = 512;
  a.weight = &w;
  CHECK(chord_indexed_gemm(&a, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("not filled by indexed_pack"));
  chord_indexed_pack_args_t p{};
  p.struct_size = sizeof p;
  p.layout = CHORD_INDEXED_MMA;
  p.num_experts = 4;
  p.n = 256;
  p.k = 512;
  p.bits = 8;
  p.group_size = 32;
  p.symmetric = 1;
  p.scale_is_bf16 = 1;
  CHECK(chord_indexed_pack(&p, &w, nullptr) == CHORD_ERROR_UNSUPPORTED);
  CHECK_THAT(last_error(), Contains("indexed family"));
  CHECK_THAT(last_error(), Contains("bits 8"));
  p.bits = 4;
  CHECK(chord_indexed_pack(&p, &w, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("weight_packed is null"));
}

TEST_CASE("int4 model plans include the indexed family, EP and TP", "[indexed][plan]") {
  const auto m = chordrt::resolve_model("kimi-k2");
  for (const char* dep : {"ep8", "tp8"}) {
    INFO(dep);
    const auto plan = chordrt::plan_descriptors(m, chordrt::Deployment::parse(dep), kHopperFacts);
    int packs = 0, prefill = 0, decode = 0;
    for (const auto& d : plan) {
      const std::string_view f = d.schema->family;
      packs += f == "indexed.pack";
      prefill += f == "indexed.prefill";
      decode += f == "indexed.decode";
    }
    CHECK(packs == 4);  // two layouts x two projections
    CHECK(prefill >= 4);
    CHECK(decode >= 2);
    // Dispatch's config for a typical step is in the plan: EP8 decode at 20 tokens (160 local rows).
    if (std::string_view(dep) == "ep8") {
      const IndexedShape s{IndexedLayout::kMma, 4096, 7168, 48};
      const auto want = chordrt::ops::indexed_decode_descriptor(
          kHopper, s,
          chordrt::heuristics::select_indexed_decode(s, chordrt::heuristics::select_indexed_block_m(s, 160)));
      CHECK(std::find(plan.begin(), plan.end(), want) != plan.end());
    }
  }
}
