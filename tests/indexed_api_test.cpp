// The indexed family without a GPU: its heuristics (profile, expected blocks, block_m, configs), the host
// routing check, the C ABI's argument and weight checks, and its place in the model plans.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "chordrt/chordrt.h"
#include "heuristics/indexed.hpp"
#include "runtime/model_plan.hpp"
#include "runtime/ops/indexed.hpp"
#include "runtime/ops/indexed_routing.hpp"
#include "runtime/ops/w4a16.hpp"
#include "tests/test_support.hpp"

using Catch::Matchers::Contains;
using chordrt::heuristics::IndexedProfile;
using chordrt::heuristics::IndexedShape;
using chordrt::heuristics::W4a16Layout;
using chordrt::ops::IndexedDecodeFamily;
using chordrt::ops::IndexedPrefillFamily;
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
  CHECK(resolve_indexed_profile({W4a16Layout::kWgmmaK64, 4096, 7168, 48}, IndexedProfile::kAuto) ==
        IndexedProfile::kExpertParallel);
  CHECK(resolve_indexed_profile({W4a16Layout::kWgmmaK64, 7168, 2048, 48}, IndexedProfile::kAuto) ==
        IndexedProfile::kExpertParallel);
  CHECK(resolve_indexed_profile({W4a16Layout::kWgmmaK64, 512, 7168, 384}, IndexedProfile::kAuto) ==
        IndexedProfile::kTensorParallel);
  CHECK(resolve_indexed_profile({W4a16Layout::kWgmmaK64, 7168, 256, 384}, IndexedProfile::kAuto) ==
        IndexedProfile::kTensorParallel);
  CHECK(resolve_indexed_profile({W4a16Layout::kWgmmaK64, 512, 7168, 384}, IndexedProfile::kExpertParallel) ==
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
  const IndexedShape ep_up{W4a16Layout::kWgmmaK64, 4096, 7168, 48}, tp_up{W4a16Layout::kWgmmaK64, 512, 7168, 384};
  const IndexedShape dec_up{W4a16Layout::kMma, 4096, 7168, 48};
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
  // ~43 rows per expert (2048 tokens): 56, where the half ring's 512-row tiles hold it; off the multiples
  // of 16 only there (short K, TP8 down: the single ring's 48 at most).
  const IndexedShape tp_down{W4a16Layout::kWgmmaK64, 7168, 256, 384};
  CHECK(select_indexed_block_m(ep_up, 2048) == 56);
  CHECK(select_indexed_block_m(tp_up, 2048 * 8) == 56);
  CHECK(select_indexed_block_m(tp_down, 2048 * 8) == 48);
  for (int64_t rows = 1; rows <= 65536; rows *= 2) {
    const int bm = select_indexed_block_m(ep_up, rows);
    CHECK((bm % 16 == 0 || bm <= 64));
  }
}

TEST_CASE("every selected indexed config is a valid kernel", "[indexed]") {
  for (const IndexedShape s : {IndexedShape{W4a16Layout::kWgmmaK64, 4096, 7168, 48},
                               {W4a16Layout::kWgmmaK64, 7168, 2048, 48},
                               {W4a16Layout::kWgmmaK64, 512, 7168, 384},
                               {W4a16Layout::kWgmmaK64, 7168, 256, 384},
                               {W4a16Layout::kWgmmaK64, 384, 576, 5}}) {
    for (int64_t rows = 1; rows <= 131072; rows *= 4) {
      const int bm = chordrt::heuristics::select_indexed_block_m(s, rows);
      const auto c = chordrt::heuristics::select_indexed_prefill(s, bm, rows);
      INFO(s.n << "x" << s.k << " E=" << s.experts << " rows " << rows << " block_m " << bm);
      CHECK(chordrt::heuristics::grouped_config_error({chordrt::heuristics::GroupedMode::kIndexed, s.n, s.k, s.experts},
                                                      c) == "");
      const auto key = chordrt::ops::indexed_prefill_key(s, bm, rows, kHopperFacts);
      CHECK(key.block_m == c.block_m);
      CHECK(key.slices == c.slices);
      CHECK(key.stages == c.stages);
      CHECK(key.consumers == c.consumers);
      CHECK(key.ring == c.ring);
      CHECK_NOTHROW(IndexedPrefillFamily::family().program(IndexedPrefillFamily::descriptor(kHopper, key)));
    }
  }
  // Short-K tiles (TP8 down, K 256) with small token tiles get four consumer warpgroups: of two slices
  // (512-row tiles) through the k16 step ring up to block_m 40 and the single ring at 48, of one slice
  // (256-row tiles) at 64; from block_m 72 their fragments no longer fit the consumers' registers, and two
  // consumers of two slices take over.
  namespace g = chord::grouped;
  // The tiles select_indexed_prefill picks: (consumers, slices, ring).
  auto tiles = [](const IndexedShape& s, int block_m, int64_t rows) {
    const auto c = chordrt::heuristics::select_indexed_prefill(s, block_m, rows);
    return std::tuple{c.consumers, c.slices, c.ring};
  };
  const IndexedShape tp_down{W4a16Layout::kWgmmaK64, 7168, 256, 384};
  CHECK(tiles(tp_down, 32, 8192) == std::tuple{4, 2, g::kRingStep});
  CHECK(tiles(tp_down, 48, 16384) == std::tuple{4, 2, g::kRingSingle});
  CHECK(tiles(tp_down, 64, 16384) == std::tuple{4, 1, g::kRingBlock});
  // Too few blocks for one 512-row tile per SM (14 tiles per block): four consumers of one slice.
  CHECK(tiles(tp_down, 32, 8) == std::tuple{4, 1, g::kRingBlock});
  CHECK(tiles(tp_down, 96, 32768) == std::tuple{2, 2, g::kRingBlock});
  // Long K (EP8 gate_up): four consumers of two slices on the half ring up to block_m 64, two consumers of
  // two slices above.
  const IndexedShape ep_up{W4a16Layout::kWgmmaK64, 4096, 7168, 48};
  CHECK(tiles(ep_up, 32, 1024) == std::tuple{4, 2, g::kRingHalf});
  CHECK(tiles(ep_up, 48, 1024) == std::tuple{4, 2, g::kRingHalf});
  CHECK(tiles(ep_up, 56, 2048) == std::tuple{4, 2, g::kRingHalf});
  CHECK(tiles(ep_up, 64, 2048) == std::tuple{4, 2, g::kRingHalf});
  CHECK(tiles(ep_up, 80, 4096) == std::tuple{2, 2, g::kRingBlock});
  // CHORD_INDEXED_CONFIG: the prefill kernel's fields but block_m, checked by the one config check.
  const auto ring_key = chordrt::ops::indexed_prefill_key(ep_up, 32, 1024, kHopperFacts, "consumers=4,ring=1");
  CHECK(ring_key.consumers == 4);
  CHECK(ring_key.slices == 2);
  CHECK(ring_key.ring == 1);
  CHECK(ring_key.block_m == 32);
  CHECK_THROWS_WITH(chordrt::ops::indexed_prefill_key(ep_up, 32, 1024, kHopperFacts, "block_m=64"),
                    Contains("block_m is the routing's"));
  CHECK_THROWS_WITH(chordrt::ops::indexed_prefill_key(ep_up, 32, 1024, kHopperFacts, "ring=0"), Contains("registers"));
  for (int bm : {8, 16, 24, 32}) {
    const IndexedShape s{W4a16Layout::kMma, 4096, 7168, 48};
    const auto c = chordrt::heuristics::select_indexed_decode(s, bm);
    CHECK(chordrt::heuristics::indexed_decode_config_error(s, c) == "");
    const auto key = chordrt::ops::indexed_decode_key(s, bm);
    CHECK(key.depth == c.depth);
    CHECK_NOTHROW(IndexedDecodeFamily::family().program(IndexedDecodeFamily::descriptor(kHopper, key)));
  }
  CHECK_THAT(chordrt::heuristics::indexed_decode_config_error({W4a16Layout::kMma, 4096, 7168, 48}, {64, 2}),
             Contains("pack with layout WGMMA_K64 for larger blocks"));
  // Descriptors name the field out of range; program() the field that is no kernel.
  try {
    IndexedDecodeFamily::descriptor(kHopper, {4096, 7168, 48, 40, 2});
    FAIL("no error");
  } catch (const chordrt::Error& e) {
    CHECK(std::string(e.what()) == "indexed.decode: block_m must be in [8, 32], got 40");
  }
  try {
    IndexedDecodeFamily::program({4096, 7168, 48, 12, 2});
    FAIL("no error");
  } catch (const chordrt::Error& e) {
    CHECK_THAT(std::string(e.what()), Contains("indexed.decode: block_m must be a multiple of 8 in [8, 32]"));
  }
  try {
    IndexedPrefillFamily::program({4096 + 64, 7168, 48, 64, 1, 4, 2, 0, 0});
    FAIL("no error");
  } catch (const chordrt::Error& e) {
    CHECK_THAT(std::string(e.what()), Contains("indexed.prefill: n must be a positive multiple of 128"));
  }
  // The prefill is the grouped kernel in its gathering mode, BLOCK_K 64, in the contiguous mode's layout
  // (the gathering producers keep their rows' tokens in registers).
  const auto p = IndexedPrefillFamily::program({4096, 7168, 48, 64, 2, 4, 2, 0, 0});
  CHECK(p.name_expression == "chord::grouped::grouped_gemm_kernel<2, 4096, 7168, 48, 64, 2, 64, 4, 2, 0, 0>");
  CHECK(p.dynamic_smem == chordrt::ops::GroupedGemmFamily::program({0, 4096, 7168, 48, 64, 2, 4, 2, 0}).dynamic_smem);
  const auto four = IndexedPrefillFamily::program({4096, 7168, 48, 32, 1, 8, 4, 0, 0});
  CHECK(four.name_expression == "chord::grouped::grouped_gemm_kernel<2, 4096, 7168, 48, 32, 1, 64, 8, 4, 0, 0>");
  CHECK(four.threads == 640);
  // The step ring: four consumers of two slices (512-row tiles) fit at block_m 32, as a K-block ring never does.
  const auto ring = IndexedPrefillFamily::program({4096, 7168, 48, 32, 2, 6, 4, 1, 0});
  CHECK(ring.name_expression == "chord::grouped::grouped_gemm_kernel<2, 4096, 7168, 48, 32, 2, 64, 6, 4, 1, 0>");
  CHECK_THROWS_WITH(IndexedPrefillFamily::program({4096, 7168, 48, 32, 2, 6, 4, 0, 0}), Contains("registers"));
}

TEST_CASE("stream-K ranges cover every tile's K blocks once, and a cut tile is finished by its last CTA",
          "[indexed][stream_k]") {
  namespace g = chord::grouped;
  // Work below, near and far above the grid; K blocks per tile from 9 (the shortest long K) to 112.
  for (const int64_t grid : {1, 7, 132}) {
    for (const int64_t k_blocks : {9, 32, 112}) {
      for (const int64_t tiles : {1, 5, 131, 392, 400, 3001}) {
        const int64_t work = tiles * k_blocks;
        INFO("grid " << grid << " K blocks " << k_blocks << " tiles " << tiles);
        std::vector<int> seen(static_cast<size_t>(work), 0);
        for (int64_t cta = 0; cta < grid; ++cta) {
          const int64_t begin = g::stream_begin(cta, work, grid), end = g::stream_begin(cta + 1, work, grid);
          REQUIRE(begin <= end);
          for (int64_t pos = begin; pos < end; ++pos) {
            ++seen[static_cast<size_t>(pos)];
            REQUIRE(g::stream_cta_of(pos, work, grid) == cta);
          }
        }
        CHECK(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
        // A cut tile: the CTA holding its last K block starts its range inside it (that segment is walked last,
        // the range being walked backwards), and every other CTA sharing it has a lower index and ends its
        // range inside it (its first segment walked: the one partial it writes).
        for (int64_t t = 0; t < tiles; ++t) {
          const int64_t first = g::stream_cta_of(t * k_blocks, work, grid);
          const int64_t owner = g::stream_cta_of((t + 1) * k_blocks - 1, work, grid);
          REQUIRE(first <= owner);
          if (first == owner) continue;
          CHECK(g::stream_begin(owner, work, grid) > t * k_blocks);
          for (int64_t cta = first; cta < owner; ++cta) {
            const int64_t end = g::stream_begin(cta + 1, work, grid);
            if (end == g::stream_begin(cta, work, grid)) continue;  // an empty range writes nothing
            CHECK(end < (t + 1) * k_blocks);
            CHECK(end > t * k_blocks);
          }
        }
        // Balance: ranges differ by at most one K block.
        const int64_t lo = work / grid;
        for (int64_t cta = 0; cta < grid; ++cta) {
          const int64_t n = g::stream_begin(cta + 1, work, grid) - g::stream_begin(cta, work, grid);
          CHECK((n == lo || n == lo + 1));
        }
      }
    }
  }
  // Whole tiles before the stream-K wave: whole waves but the last full one, so the wave holds between one
  // and two tiles a CTA (fewer tiles than CTAs: all of them); none when the last wave is at least 7/8 full.
  for (const int64_t grid : {1, 7, 132}) {
    for (int64_t tiles = 1; tiles <= 5 * grid + 3; ++tiles) {
      const int64_t whole = g::stream_whole_tiles(tiles, grid);
      INFO("grid " << grid << " tiles " << tiles);
      CHECK((whole == tiles || whole % grid == 0));
      CHECK(whole <= tiles);
      if (tiles % grid == 0 || (tiles % grid) * 8 >= grid * 7) {
        CHECK(whole == tiles);
      } else if (tiles < grid) {
        CHECK(whole == 0);
      } else {
        CHECK(tiles - whole > grid);
        CHECK(tiles - whole < 2 * grid);
      }
    }
  }
  CHECK(g::stream_whole_tiles(400, 132) == 264);  // EP8 gate_up 1024 tokens at 50 row blocks: 136 in the wave
  CHECK(g::stream_whole_tiles(392, 132) == 392);  // 49 row blocks: the last wave 128 of 132, run whole
  CHECK(g::stream_whole_tiles(100, 132) == 0);    // fewer tiles than CTAs: every tile split
  // The workspace: flags for kMaxConsumers warpgroups a CTA, 256-aligned, then one FP32 tile a CTA.
  CHECK(g::stream_flags_bytes(132) == 2304);
  CHECK(g::stream_workspace_bytes(132, 32, 512) == 2304 + 132LL * 32 * 512 * 4);
  CHECK(chord_indexed_gemm_workspace_size(32, 132) == static_cast<size_t>(g::stream_workspace_bytes(132, 32, 512)));
  CHECK(chord_indexed_gemm_workspace_size(12, 132) == 0);
  CHECK(chord_indexed_gemm_workspace_size(32, 0) == 0);
  CHECK(chord_indexed_gemm_workspace_size(264, 132) == 0);
}

TEST_CASE("stream-K is allowed on long K when the call brings a workspace, and only there", "[indexed][stream_k]") {
  const IndexedShape ep_up{W4a16Layout::kWgmmaK64, 4096, 7168, 48};
  const IndexedShape tp_down{W4a16Layout::kWgmmaK64, 7168, 256, 384};
  // The heuristics take it with a workspace on the half ring (long K, block_m <= 64; measured faster there,
  // slower with two consumers: bench/NOTES.md); an override turns it on or off wherever it is valid.
  CHECK(chordrt::ops::indexed_prefill_key(ep_up, 32, 1024, kHopperFacts).stream_k == 0);
  const auto chosen = chordrt::ops::indexed_prefill_key(ep_up, 32, 1024, kHopperFacts, {}, true);
  CHECK(chosen.stream_k == 1);
  CHECK(chosen.ring == chord::grouped::kRingHalf);
  CHECK_NOTHROW(IndexedPrefillFamily::family().program(IndexedPrefillFamily::descriptor(kHopper, chosen)));
  CHECK(chordrt::ops::indexed_prefill_key(ep_up, 48, 1024, kHopperFacts, {}, true).stream_k == 1);
  const auto half = chordrt::ops::indexed_prefill_key(ep_up, 64, 2048, kHopperFacts, {}, true);
  CHECK(half.ring == chord::grouped::kRingHalf);
  CHECK(half.stream_k == 1);
  CHECK(chordrt::ops::indexed_prefill_key(ep_up, 80, 4096, kHopperFacts, {}, true).stream_k == 0);
  // TP8 gate_up at 1024 / 2048 tokens: ~386 / ~392 expected blocks of one 512-row tile each, a last wave of
  // 122 / 128 tiles: whole tiles, so no stream-K (7% slower at 1024 in the bench); EP8 keeps it.
  const IndexedShape tp_up{W4a16Layout::kWgmmaK64, 512, 7168, 384};
  CHECK(chordrt::ops::indexed_prefill_key(tp_up, 56, 2048 * 8, kHopperFacts, {}, true).stream_k == 0);
  CHECK(chordrt::ops::indexed_prefill_key(tp_up, 32, 1024 * 8, kHopperFacts, {}, true).stream_k == 0);
  CHECK(chordrt::ops::indexed_prefill_key(ep_up, 56, 2048, kHopperFacts, {}, true).stream_k == 1);
  CHECK(chordrt::ops::indexed_prefill_key(tp_down, 32, 8192, kHopperFacts, {}, true).stream_k == 0);
  const auto with = chordrt::ops::indexed_prefill_key(ep_up, 32, 1024, kHopperFacts, "stream_k=1", true);
  CHECK(with.stream_k == 1);
  CHECK_NOTHROW(IndexedPrefillFamily::family().program(IndexedPrefillFamily::descriptor(kHopper, with)));
  // Short K keeps its look-ahead loop and whole tiles.
  CHECK_THROWS_WITH(chordrt::ops::indexed_prefill_key(tp_down, 32, 8192, kHopperFacts, "stream_k=1", true),
                    Contains("stream_k 1 needs more than 8 K blocks"));
  CHECK_THROWS_WITH(chordrt::ops::indexed_prefill_key(ep_up, 32, 1024, kHopperFacts, "stream_k=1"),
                    Contains("stream_k 1 needs the call's workspace"));
  CHECK(chordrt::ops::indexed_prefill_key(ep_up, 32, 1024, kHopperFacts, "stream_k=0", true).stream_k == 0);
  // The list of live blocks costs shared memory: the configuration's ring depth accounts for it.
  const chordrt::heuristics::GroupedShape g{chordrt::heuristics::GroupedMode::kIndexed, 4096, 7168, 48};
  chordrt::heuristics::GroupedConfig c{32, 2, 4, 4, 2, 1};
  const int64_t list_cost = chordrt::heuristics::grouped_dynamic_smem(g, c) -
                            chordrt::heuristics::grouped_dynamic_smem(g, {32, 2, 4, 4, 2, 0});
  CHECK(list_cost >= chord::grouped::kMaxStreamBlocks * 2 + 128);  // + alignment to 16 bytes
  CHECK(list_cost < chord::grouped::kMaxStreamBlocks * 2 + 128 + 16);
  // Contiguous stream-K takes every row block: no list.
  const chordrt::heuristics::GroupedShape contiguous{chordrt::heuristics::GroupedMode::kContiguous, 4096, 7168, 48};
  CHECK(chordrt::heuristics::grouped_config_error(contiguous, c) == "");
  CHECK(chordrt::heuristics::grouped_dynamic_smem(contiguous, c) ==
        chordrt::heuristics::grouped_dynamic_smem(contiguous, {32, 2, 4, 4, 2, 0}));
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

TEST_CASE("chord_indexed_block_m", "[indexed][capi]") {
  int32_t bm = 0;
  REQUIRE(chord_indexed_block_m(CHORD_W4A16_LAYOUT_MMA, 48, 4096, 7168, 160, CHORD_INDEXED_PROFILE_AUTO, &bm) ==
          CHORD_SUCCESS);
  CHECK(bm == 8);
  REQUIRE(chord_indexed_block_m(CHORD_W4A16_LAYOUT_WGMMA_K64, 48, 4096, 7168, 48 * 170, CHORD_INDEXED_PROFILE_AUTO,
                                &bm) == CHORD_SUCCESS);
  CHECK(bm == 96);
  CHECK(chord_indexed_block_m(CHORD_W4A16_LAYOUT_WGMMA_K128, 48, 4096, 7168, 160, 0, &bm) ==
        CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("layout must be WGMMA_K64 (0) or MMA (2)"));
  CHECK(bm == 0);
  CHECK(chord_indexed_block_m(CHORD_W4A16_LAYOUT_MMA, 48, 4096 + 64, 7168, 160, 0, &bm) ==
        CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("n must be a positive multiple of 128"));
  CHECK(chord_indexed_block_m(CHORD_W4A16_LAYOUT_MMA, 48, 4096, 7168, 160, 7, &bm) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("profile must be in [0, 2], got 7"));
  CHECK(chord_indexed_block_m(CHORD_W4A16_LAYOUT_MMA, 48, 4096, 7168, -1, 0, &bm) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("routed_rows must be in"));
  CHECK(chord_indexed_block_m(CHORD_W4A16_LAYOUT_MMA, 48, 4096, 7168, 1, 0, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("chord_indexed_gemm argument and weight checks", "[indexed][capi]") {
  alignas(64) static unsigned char host[4096];
  CHECK(chord_indexed_gemm(nullptr, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  chord_indexed_args_t a{};
  CHECK(chord_indexed_gemm(&a, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("struct_size"));
  a.struct_size = CHORD_INDEXED_ARGS_MIN_SIZE - 4;
  CHECK(chord_indexed_gemm(&a, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("struct_size must be in"));
  a.struct_size = sizeof a;
  CHECK(chord_indexed_gemm(&a, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("weight is null"));
  chord_w4a16_weight_t w{};
  w.struct_size = sizeof w;
  w.layout = CHORD_W4A16_LAYOUT_MMA;
  w.num_experts = 4;
  w.n = 256;
  w.k = 512;
  w.packed = w.scale = host;
  a.weight = &w;
  CHECK(chord_indexed_gemm(&a, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("not filled by w4a16_pack"));
  w.layout = CHORD_W4A16_LAYOUT_WGMMA_K128;
  w.tag = chordrt::ops::w4a16_weight_tag(w);
  CHECK(chord_indexed_gemm(&a, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(),
             Contains("indexed_gemm: weight has layout WGMMA_K128; the indexed GEMM needs a weight packed "
                      "with layout WGMMA_K64 (prefill) or MMA (decode)"));
  w.layout = CHORD_W4A16_LAYOUT_MMA;
  w.tag = chordrt::ops::w4a16_weight_tag(w);
  a.top_k = 8;
  a.num_tokens = 4;
  a.block_m = 64;
  CHECK(chord_indexed_gemm(&a, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("block_m must be a multiple of 8 in [8, 32] for layout MMA"));
  w.layout = CHORD_W4A16_LAYOUT_WGMMA_K64;
  w.tag = chordrt::ops::w4a16_weight_tag(w);
  a.block_m = 260;
  CHECK(chord_indexed_gemm(&a, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("block_m must be a multiple of 8 in [8, 256] for layout WGMMA_K64, got 260"));
  a.block_m = 64;
  a.top_k = 65;
  CHECK(chord_indexed_gemm(&a, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("top_k must be in [1, 64], got 65"));
  a.top_k = 8;
  a.validate = 2;
  CHECK(chord_indexed_gemm(&a, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("validate must be in [0, 1], got 2"));
  a.validate = 0;
  // The stream-K workspace: a size that cannot be, an address that is not 16-byte aligned (both before any
  // device is asked for anything).
  a.workspace_bytes = -1;
  CHECK(chord_indexed_gemm(&a, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("workspace_bytes must be in [0, "));
  a.workspace_bytes = 1 << 20;
  a.workspace = host + 8;
  CHECK(chord_indexed_gemm(&a, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("workspace") && Contains("aligned"));
  a.workspace = nullptr;
  a.workspace_bytes = 0;
  // 32 routes need one block of 64: smaller buffers are refused (they used to make the call a no-op).
  CHECK(chord_indexed_gemm(&a, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(),
             Contains("sorted_token_ids_capacity must hold every route in whole blocks") && Contains("= 64), got 0"));
  a.sorted_token_ids_capacity = 63;
  CHECK(chord_indexed_gemm(&a, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("sorted_token_ids_capacity") && Contains("got 63"));
  a.sorted_token_ids_capacity = 64;
  CHECK(chord_indexed_gemm(&a, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("expert_ids_capacity must hold at least ceil(num_tokens * top_k / block_m) = 1 "
                                    "blocks, got 0"));
  a.expert_ids_capacity = 1;
  CHECK(chord_indexed_gemm(&a, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("a is null"));
  a.num_tokens = 0;
  CHECK(chord_indexed_gemm(&a, nullptr) == CHORD_SUCCESS);  // no routes: nothing is read or written
}

TEST_CASE("int4 model plans include the indexed family, EP and TP", "[indexed][plan]") {
  const auto m = chordrt::resolve_model("kimi-k2");
  for (const char* dep : {"ep8", "tp8"}) {
    INFO(dep);
    const auto plan = chordrt::plan_descriptors(m, chordrt::Deployment::parse(dep), kHopperFacts);
    int packs = 0, prefill = 0, decode = 0;
    for (const auto& d : plan) {
      const std::string_view f = d.schema->family;
      packs += f == "w4a16.pack" && d.get("layout") != CHORD_W4A16_LAYOUT_WGMMA_K128;
      prefill += f == "indexed.prefill";
      decode += f == "indexed.decode";
    }
    CHECK(packs == 4);  // two layouts x two projections
    CHECK(prefill >= 4);
    CHECK(decode >= 2);
    // Dispatch's config for a typical step is in the plan: EP8 decode at 20 tokens (160 local rows).
    if (std::string_view(dep) == "ep8") {
      const IndexedShape s{W4a16Layout::kMma, 4096, 7168, 48};
      const auto want = IndexedDecodeFamily::descriptor(
          kHopper, chordrt::ops::indexed_decode_key(s, chordrt::heuristics::select_indexed_block_m(s, 160)));
      CHECK(std::find(plan.begin(), plan.end(), want) != plan.end());
    }
  }
}
