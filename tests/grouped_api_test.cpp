// The grouped family without a GPU: its heuristics (pure functions), its descriptor and config checks,
// the shared-memory layout against a hand count, and the C ABI's argument and weight checks.
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>

#include "chordrt/chordrt.h"
#include "chordrt/chordrt.hpp"
#include "heuristics/grouped.hpp"
#include "runtime/jit_runtime.hpp"
#include "runtime/ops/grouped.hpp"
#include "runtime/ops/w4a16.hpp"
#include "tests/test_support.hpp"

using Catch::Matchers::Contains;
using chordrt::heuristics::GroupedConfig;
using chordrt::heuristics::GroupedMode;
using chordrt::heuristics::GroupedShape;
using chordrt::ops::GroupedGemmFamily;
using chordrt::ops::GroupedGemmKey;
using chordrt::test::kHopper;
using chordrt::test::kHopperFacts;

namespace {

alignas(64) unsigned char g_host[4096];

std::string last_error() { return chord_last_error(); }

// What f throws (checked to be INVALID_ARGUMENT), or "" when it does not throw.
template <class F>
std::string invalid_argument_of(F&& f) {
  try {
    f();
  } catch (const chordrt::Error& e) {
    CHECK(e.status() == CHORD_ERROR_INVALID_ARGUMENT);
    return e.what();
  }
  return "";
}

// A weight as w4a16_pack fills it (pack itself needs a driver), on host memory: nothing is launched.
chord_w4a16_weight_t host_weight(chord_w4a16_layout_t layout) {
  chord_w4a16_weight_t w{};
  w.struct_size = sizeof w;
  w.layout = layout;
  w.num_experts = 4;
  w.n = 256;
  w.k = 512;
  w.packed = w.scale = g_host;
  w.tag = chordrt::ops::w4a16_weight_tag(w);
  return w;
}

}  // namespace

TEST_CASE("grouped heuristics follow the seed's starting points", "[grouped]") {
  const GroupedShape gate_up{GroupedMode::kContiguous, 4096, 7168, 48};
  // 128 rows per expert on 48 experts: 48 row blocks x 16 tiles of 256 fill 132 SMs.
  auto c = chordrt::heuristics::select_grouped(gate_up, 48 * 128);
  CHECK(c.block_m == 128);
  CHECK(c.slices == 2);
  // One expert's 128 rows: 16 tiles of 256, 32 of 128: too few either way, so smaller row blocks.
  c = chordrt::heuristics::select_grouped({GroupedMode::kContiguous, 4096, 7168, 1}, 128);
  CHECK(c.block_m == 64);
  // Masked: block_m ~1.3x the expected tokens at long K, 1.25x at short K, multiples of 8, <= 128.
  const GroupedShape masked_up{GroupedMode::kMasked, 4096, 7168, 48};
  const GroupedShape masked_down{GroupedMode::kMasked, 7168, 2048, 48};
  CHECK(chordrt::heuristics::select_grouped(masked_up, 1).block_m == 8);
  CHECK(chordrt::heuristics::select_grouped(masked_up, 8).block_m == 16);     // 10.4 -> 16
  CHECK(chordrt::heuristics::select_grouped(masked_up, 64).block_m == 88);    // 83.2 -> 88
  CHECK(chordrt::heuristics::select_grouped(masked_down, 64).block_m == 80);  // 80 -> 80
  CHECK(chordrt::heuristics::select_grouped(masked_up, 200).block_m == 88);   // 260 -> three blocks of 87 -> 88
  CHECK(chordrt::heuristics::select_grouped(masked_up, 100).block_m <= 128);
  // Two slices per consumer while 256-row tiles still cover the SMs and the fragments fit (block_m <= 64).
  CHECK(chordrt::heuristics::select_grouped(masked_up, 8).slices == 2);
  CHECK(chordrt::heuristics::select_grouped(masked_up, 64).slices == 1);
  CHECK(chordrt::heuristics::select_grouped({GroupedMode::kMasked, 4096, 7168, 4}, 8).slices == 1);
}

TEST_CASE("every selected grouped config is a valid kernel", "[grouped]") {
  for (const GroupedMode mode : {GroupedMode::kContiguous, GroupedMode::kMasked}) {
    for (const auto& [n, k] :
         {std::pair<int64_t, int64_t>{4096, 7168}, {7168, 2048}, {512, 7168}, {7168, 256}, {128, 128}, {384, 640}}) {
      for (const int experts : {1, 3, 12, 24, 48, 384, 1024}) {
        for (const int64_t rows : {1, 7, 64, 128, 1000, 6144, 65536}) {
          const GroupedShape s{mode, n, k, experts};
          const GroupedConfig c = chordrt::heuristics::select_grouped(s, rows);
          INFO("mode " << static_cast<int>(mode) << " n " << n << " k " << k << " E " << experts << " rows " << rows);
          CHECK(chordrt::heuristics::grouped_config_error(s, c) == "");
          CHECK(c.stages >= 2);
          CHECK(chordrt::heuristics::grouped_dynamic_smem(s, c) <= 227 * 1024);
          const GroupedGemmKey key{static_cast<int>(mode),
                                   static_cast<int>(n),
                                   static_cast<int>(k),
                                   experts,
                                   c.block_m,
                                   c.slices,
                                   c.stages,
                                   c.consumers,
                                   c.ring};
          CHECK_NOTHROW(GroupedGemmFamily::family().program(GroupedGemmFamily::descriptor(kHopper, key)));
        }
      }
    }
  }
}

TEST_CASE("grouped config errors name the field", "[grouped]") {
  const GroupedShape s{GroupedMode::kMasked, 4096, 7168, 48};
  CHECK_THAT(chordrt::heuristics::grouped_config_error(s, {12, 1, 4}), Contains("block_m"));
  CHECK_THAT(chordrt::heuristics::grouped_config_error(s, {16, 3, 4}), Contains("slices"));
  CHECK_THAT(chordrt::heuristics::grouped_config_error(s, {256, 2, 4}), Contains("registers"));
  CHECK_THAT(chordrt::heuristics::grouped_config_error(s, {128, 1, 16}), Contains("shared memory"));
  CHECK_THAT(chordrt::heuristics::grouped_config_error({GroupedMode::kMasked, 4096, 7168 + 64, 48}, {16, 1, 4}),
             Contains("multiple of 128"));
  CHECK_THAT(chordrt::heuristics::grouped_config_error({GroupedMode::kContiguous, 4096 + 128, 7168, 48}, {128, 2, 4}),
             Contains("multiple of 256"));
  CHECK_THAT(chordrt::heuristics::grouped_config_error({GroupedMode::kContiguous, 4096, 7168, 2000}, {128, 2, 4}),
             Contains("experts"));
  CHECK_THAT(chordrt::heuristics::grouped_config_error(s, {16, 1, 4, 3}), Contains("consumers must be 2 or 4, got 3"));
  // Four consumers get 104 registers each: with 64-K blocks one slice up to block_m 64, never two slices;
  // masked (128-K blocks, twice the fragments) never fits.
  const GroupedShape sc{GroupedMode::kContiguous, 4096, 7168, 48};
  CHECK(chordrt::heuristics::grouped_config_error(sc, {64, 1, 4, 4}) == "");
  CHECK_THAT(chordrt::heuristics::grouped_config_error(sc, {72, 1, 4, 4}), Contains("at most 104 with 4 consumers"));
  CHECK_THAT(chordrt::heuristics::grouped_config_error(sc, {32, 2, 4, 4}), Contains("registers"));
  CHECK_THAT(chordrt::heuristics::grouped_config_error(s, {8, 1, 4, 4}), Contains("registers"));
  // The step ring holds one k16 step's fragments twice and the K block's words: two slices fit four
  // consumers up to block_m 40 with 64-K blocks (512-row tiles) on short K, where the next tile's first
  // K block is in flight too, and up to 48 on long K.
  const GroupedShape short_k{GroupedMode::kContiguous, 4096, 256, 48};
  CHECK(chordrt::heuristics::grouped_config_error(short_k, {32, 2, 4, 4, 1}) == "");
  CHECK(chordrt::heuristics::grouped_config_error(short_k, {40, 2, 4, 4, 1}) == "");
  CHECK_THAT(chordrt::heuristics::grouped_config_error(short_k, {48, 2, 4, 4, 1}), Contains("registers"));
  CHECK(chordrt::heuristics::grouped_config_error(sc, {48, 2, 4, 4, 1}) == "");
  CHECK_THAT(chordrt::heuristics::grouped_config_error(sc, {56, 2, 4, 4, 1}), Contains("registers"));
  // The single ring holds one K block of fragments, and its four consumers get 112 registers (the producer
  // keeps 32): two slices up to block_m 48, at any K.
  CHECK(chordrt::heuristics::grouped_config_error(sc, {48, 2, 4, 4, 2}) == "");
  CHECK(chordrt::heuristics::grouped_config_error(short_k, {48, 2, 4, 4, 2}) == "");
  CHECK_THAT(chordrt::heuristics::grouped_config_error(sc, {56, 2, 4, 4, 2}), Contains("at most 112"));
  CHECK(chord::grouped::producer_registers(4, 2) + 4 * chord::grouped::consumer_registers(4, 2) == 480);  // 96 x 5
  CHECK(chord::grouped::consumer_registers(4, 1) == 104);  // the measured rings keep theirs
  CHECK(chord::grouped::consumer_registers(2, 2) == 232);
  // The half ring holds half a K block of fragments: two slices up to block_m 64, on long K only (the short
  // tiles' look-ahead loop is the other rings').
  CHECK(chordrt::heuristics::grouped_config_error(sc, {64, 2, 4, 4, 3}) == "");
  CHECK_THAT(chordrt::heuristics::grouped_config_error(sc, {72, 2, 4, 4, 3}), Contains("at most 112"));
  CHECK_THAT(chordrt::heuristics::grouped_config_error(short_k, {32, 2, 4, 4, 3}),
             Contains("ring 3 (half) needs more than 8 K blocks"));
  CHECK(chord::grouped::consumer_registers(4, 3) == 112);
  CHECK_THAT(chordrt::heuristics::grouped_config_error(sc, {32, 2, 4, 4, 4}),
             Contains("ring must be 0 (block), 1 (step), 2 (single) or 3 (half), got 4"));
  // Their tile is 256 rows with one slice.
  CHECK_THAT(chordrt::heuristics::grouped_config_error({GroupedMode::kContiguous, 4096 + 128, 7168, 48}, {64, 1, 4, 4}),
             Contains("multiple of 256"));
}

TEST_CASE("grouped config overrides for experiments", "[grouped]") {
  GroupedConfig c{128, 2, 6};
  CHECK(c.consumers == 2);
  CHECK(chordrt::heuristics::apply_grouped_override("block_m=64,slices=1,stages=3,consumers=4", c) == "");
  CHECK(c.block_m == 64);
  CHECK(c.slices == 1);
  CHECK(c.stages == 3);
  CHECK(c.consumers == 4);
  CHECK(c.ring == 0);
  CHECK(chordrt::heuristics::apply_grouped_override("ring=1", c) == "");
  CHECK(c.ring == 1);
  CHECK_THAT(chordrt::heuristics::apply_grouped_override("warps=4", c), Contains("unknown key"));
  CHECK_THAT(chordrt::heuristics::apply_grouped_override("block_m=x", c), Contains("bad value"));
  CHECK_THAT(chordrt::heuristics::apply_grouped_override("block_m", c), Contains("field=value"));
}

TEST_CASE("grouped shared memory matches a hand count of the kernel's layout", "[grouped]") {
  // block_m 128, 2 slices (256 weight rows), BLOCK_K 64, 4 stages, 48 experts. One stage: activations
  // 128 x 64 BF16 = 16384, packed weights 256 x 64 / 2 = 8192, scales 2 groups x 256 BF16 = 1024 ->
  // 25600 (a multiple of 1024). Epilogue: 2 consumers x 128 tokens x (128 + 8) BF16 = 69632. Barriers
  // 2 x 4 x 8 = 64; prefix table 49 x 4 = 196; alignment slack 1024.
  const int64_t contiguous = 4 * 25600 + 69632 + 64 + 196 + 1024;
  CHECK(chordrt::heuristics::grouped_dynamic_smem({GroupedMode::kContiguous, 4096, 7168, 48}, {128, 2, 4}) ==
        contiguous);
  // The gathering mode keeps its rows' tokens in registers: the same layout.
  CHECK(chordrt::heuristics::grouped_dynamic_smem({GroupedMode::kIndexed, 4096, 7168, 48}, {128, 2, 4}) == contiguous);
  // Masked, BLOCK_K 128, block_m 16, 1 slice (128 rows), 3 stages, 12 experts: a stage 16 x 128 x 2 = 4096
  // + 128 x 128 / 2 = 8192 + 4 x 128 x 2 = 1024 -> 13312; epilogue 2 x 16 x 72 x 2 = 4608.
  CHECK(chordrt::heuristics::grouped_dynamic_smem({GroupedMode::kMasked, 7168, 2048, 12}, {16, 1, 3}) ==
        3 * 13312 + 4608 + 48 + 13 * 4 + 1024);
  // What program() asks the launch for.
  CHECK(GroupedGemmFamily::program({0, 4096, 7168, 48, 128, 2, 4, 2, 0}).dynamic_smem == contiguous);
  CHECK(GroupedGemmFamily::program({0, 4096, 7168, 48, 128, 2, 4, 2, 0}).threads == 384);
  // Four consumers: four epilogue tiles, 640 threads. Contiguous block_m 64, 1 slice (256 rows), 3 stages,
  // 12 experts: a stage 64 x 128 = 8192 + 256 x 64 / 2 = 8192 + 2 x 256 x 2 = 1024 -> 17408; epilogue
  // 4 x 64 x (64 + 8) x 2 = 36864.
  const int64_t four = 3 * 17408 + 36864 + 48 + 13 * 4 + 1024;
  CHECK(chordrt::heuristics::grouped_dynamic_smem({GroupedMode::kContiguous, 7168, 2048, 12}, {64, 1, 3, 4}) == four);
  CHECK(GroupedGemmFamily::program({0, 7168, 2048, 12, 64, 1, 3, 4, 0}).dynamic_smem == four);
  CHECK(GroupedGemmFamily::program({0, 7168, 2048, 12, 64, 1, 3, 4, 0}).threads == 640);
}

TEST_CASE("grouped descriptors name the field, its range and the value", "[grouped]") {
  using Catch::Matchers::Equals;
  CHECK_THAT(invalid_argument_of([] {
               GroupedGemmFamily::descriptor(kHopper, {0, 4096, 7168, 48, 264, 1, 4, 2, 0});
             }),
             Equals("grouped.gemm: block_m must be in [8, 256], got 264"));
  CHECK_THAT(invalid_argument_of([] {
               GroupedGemmFamily::descriptor(kHopper, {2, 4096, 7168, 48, 64, 1, 4, 2, 0});
             }),
             Equals("grouped.gemm: mode must be in [0, 1], got 2"));
  CHECK_THAT(invalid_argument_of([] {
               GroupedGemmFamily::descriptor(kHopper, {0, 4096, 7168, 2000, 64, 1, 4, 2, 0});
             }),
             Equals("grouped.gemm: experts must be in [1, 1024], got 2000"));
  // In range but not a kernel: program() says which field.
  CHECK_THAT(invalid_argument_of([] {
               GroupedGemmFamily::program({0, 4096, 7168, 48, 12, 1, 4, 2, 0});
             }),
             Equals("grouped.gemm: block_m must be a multiple of 8 in [8, 256], got 12"));
  CHECK_THAT(invalid_argument_of([] {
               GroupedGemmFamily::program({1, 4096, 7168 + 64, 48, 16, 1, 4, 2, 0});
             }),
             Contains("k must be a positive multiple of 128"));
  // A descriptor reads back by field name.
  const auto d = GroupedGemmFamily::descriptor(kHopper, {1, 4096, 7168, 48, 16, 2, 5, 2, 0});
  CHECK(d.get("mode") == 1);
  CHECK(d.get("stages") == 5);
  CHECK(GroupedGemmFamily::key(d).block_m == 16);
}

TEST_CASE("CHORD_GROUPED_CONFIG goes through the one check", "[grouped]") {
  const GroupedShape s{GroupedMode::kMasked, 4096, 7168, 48};
  const GroupedGemmKey heuristic = chordrt::ops::grouped_gemm_key(s, 16, kHopperFacts);
  const auto want = chordrt::heuristics::select_grouped(s, 16, kHopperFacts);
  CHECK(heuristic.block_m == want.block_m);
  CHECK(heuristic.slices == want.slices);
  CHECK(heuristic.stages == want.stages);
  const GroupedGemmKey k = chordrt::ops::grouped_gemm_key(s, 16, kHopperFacts, "block_m=64,slices=1,stages=3");
  CHECK(k.block_m == 64);
  CHECK(k.slices == 1);
  CHECK(k.stages == 3);
  CHECK(k.mode == 1);
  CHECK(k.experts == 48);
  const auto threw = [&](std::string_view spec) -> std::string {
    try {
      chordrt::ops::grouped_gemm_key(s, 16, kHopperFacts, spec, "grouped_masked");
    } catch (const chordrt::Error& e) {
      return e.what();
    }
    return "";
  };
  CHECK_THAT(threw("block_m=12"), Contains("grouped_masked: CHORD_GROUPED_CONFIG=\"block_m=12\": block_m must be a "
                                           "multiple of 8 in [8, 256], got 12"));
  CHECK_THAT(threw("stages=16"), Contains("shared memory"));
  CHECK_THAT(threw("warps=4"), Contains("unknown key"));
}

TEST_CASE("grouped GEMMs check their args and reject weights of another layout or not from the packer",
          "[grouped][capi]") {
  int32_t* ids = reinterpret_cast<int32_t*>(g_host);
  chord_w4a16_weight_t w = host_weight(CHORD_W4A16_LAYOUT_WGMMA_K64);
  chord_grouped_contiguous_args_t c{sizeof c, g_host, 128, &w, ids, g_host, nullptr, 0};
  chord_grouped_masked_args_t m{sizeof m, g_host, 16, &w, ids, 4, g_host, nullptr, 0};
  CHECK(chord_grouped_contiguous(nullptr, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("chord_grouped_contiguous: args is null"));
  c.struct_size = CHORD_GROUPED_CONTIGUOUS_ARGS_MIN_SIZE - 8;
  CHECK(chord_grouped_contiguous(&c, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("struct_size must be in"));
  c.struct_size = sizeof c;
  // A K64 weight is not the masked GEMM's.
  CHECK(chord_grouped_masked(&m, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("grouped_masked: weight has layout WGMMA_K64; the masked GEMM needs a weight "
                                    "packed with layout WGMMA_K128"));
  for (const chord_w4a16_layout_t other : {CHORD_W4A16_LAYOUT_WGMMA_K128, CHORD_W4A16_LAYOUT_MMA}) {
    chord_w4a16_weight_t o = host_weight(other);
    c.weight = &o;
    CHECK(chord_grouped_contiguous(&c, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(last_error(), Contains("the contiguous GEMM needs a weight packed with layout WGMMA_K64"));
  }
  c.weight = &w;
  w.n = 512;  // edited after packing
  CHECK(chord_grouped_contiguous(&c, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("not filled by w4a16_pack"));
  w.n = 256;
  m.weight = nullptr;
  CHECK(chord_grouped_masked(&m, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("weight is null"));
  c.m = -1;
  CHECK(chord_grouped_contiguous(&c, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("m must be in [0, 2147483647], got -1"));
  c.m = 0;
  CHECK(chord_grouped_contiguous(&c, nullptr) == CHORD_SUCCESS);  // nothing to do
  c.m = 128;
  c.m_indices = nullptr;
  CHECK(chord_grouped_contiguous(&c, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("m_indices is null"));
  w.struct_size = 8;
  c.m_indices = ids;
  CHECK(chord_grouped_contiguous(&c, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("weight.struct_size"));
  chord_w4a16_weight_t k128 = host_weight(CHORD_W4A16_LAYOUT_WGMMA_K128);
  m.weight = &k128;
  m.expected_m = 0;
  CHECK(chord_grouped_masked(&m, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("expected_m must be in [1,"));
  m.expected_m = 4;
  m.max_m = 0;
  CHECK(chord_grouped_masked(&m, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("max_m must be in [1,"));
}

TEST_CASE("grouped dispatch in a dry run asks for the planned kernel and encodes no tensor map", "[grouped]") {
  chord_w4a16_weight_t w = host_weight(CHORD_W4A16_LAYOUT_WGMMA_K64);
  int32_t* ids = reinterpret_cast<int32_t*>(g_host);
  chordrt::DryRun dry(kHopperFacts);
  const chord_grouped_contiguous_args_t c{sizeof c, g_host, 4 * 128, &w, ids, g_host, nullptr, 0};
  REQUIRE(chord_grouped_contiguous(&c, nullptr) == CHORD_SUCCESS);
  chord_w4a16_weight_t k128 = host_weight(CHORD_W4A16_LAYOUT_WGMMA_K128);
  const chord_grouped_masked_args_t m{sizeof m, g_host, 128, &k128, ids, 16, g_host, nullptr, 0};
  REQUIRE(chord_grouped_masked(&m, nullptr) == CHORD_SUCCESS);
  REQUIRE(dry.descriptors().size() == 2);
  const GroupedShape sc{GroupedMode::kContiguous, 256, 512, 4}, sm{GroupedMode::kMasked, 256, 512, 4};
  CHECK(dry.descriptors()[0] ==
        GroupedGemmFamily::descriptor(kHopper, chordrt::ops::grouped_gemm_key(sc, 4 * 128, kHopperFacts)));
  CHECK(dry.descriptors()[1] ==
        GroupedGemmFamily::descriptor(kHopper, chordrt::ops::grouped_gemm_key(sm, 16, kHopperFacts)));
}

TEST_CASE("contiguous stream-K: asked for by override, over the call's workspace", "[grouped][stream_k]") {
  const GroupedShape up{GroupedMode::kContiguous, 4096, 7168, 12};
  // EP32 at 128 rows an expert: 192 tiles of 128 x 256 on 132 SMs, a partial second wave: stream-K when the
  // call brings a workspace. At 256 rows (384 tiles, the last wave 120 of 132) and without a workspace: whole tiles.
  CHECK(chordrt::ops::grouped_gemm_key(up, 12 * 128, kHopperFacts, {}, "grouped", true).stream_k == 1);
  CHECK(chordrt::ops::grouped_gemm_key(up, 12 * 256, kHopperFacts, {}, "grouped", true).stream_k == 0);
  CHECK(chordrt::ops::grouped_gemm_key(up, 12 * 128, kHopperFacts).stream_k == 0);
  // Down at 128 rows: 336 tiles, 2.55 waves, a tail under 1/6 of the kernel: whole tiles.
  CHECK(chordrt::ops::grouped_gemm_key({GroupedMode::kContiguous, 7168, 2048, 12}, 12 * 128, kHopperFacts, {},
                                       "grouped", true)
            .stream_k == 0);
  // Short K keeps whole tiles; so do fewer tiles than SMs (the grid is the tile count).
  CHECK(chordrt::ops::grouped_gemm_key({GroupedMode::kContiguous, 4096, 512, 12}, 12 * 128, kHopperFacts, {}, "grouped",
                                       true)
            .stream_k == 0);
  CHECK(chordrt::ops::grouped_gemm_key({GroupedMode::kContiguous, 256, 7168, 4}, 4 * 128, kHopperFacts, {}, "grouped",
                                       true)
            .stream_k == 0);
  const GroupedGemmKey k = chordrt::ops::grouped_gemm_key(up, 12 * 128, kHopperFacts, "stream_k=1", "grouped", true);
  CHECK(k.stream_k == 1);
  CHECK(k.block_m == 128);
  CHECK_NOTHROW(GroupedGemmFamily::family().program(GroupedGemmFamily::descriptor(kHopper, k)));
  // Contiguous stream-K keeps no list of live blocks: the same shared memory as whole tiles.
  CHECK(GroupedGemmFamily::program(k).dynamic_smem ==
        chordrt::heuristics::grouped_dynamic_smem(up, {k.block_m, k.slices, k.stages, k.consumers, k.ring, 0}));
  CHECK_THAT(
      invalid_argument_of([&] { chordrt::ops::grouped_gemm_key(up, 12 * 128, kHopperFacts, "stream_k=1", "op"); }),
      Contains("op: CHORD_GROUPED_CONFIG=\"stream_k=1\": stream_k 1 needs the call's workspace"));
  CHECK_THAT(invalid_argument_of([&] {
               chordrt::ops::grouped_gemm_key(up, 12 * 128, kHopperFacts,
                                              "stream_k=1,block_m=64,consumers=4,slices=2,ring=3,stages=4", "op", true);
             }),
             Contains("block_m 64 and 512 weight rows a tile: the workspace holds tiles of at most 128 x 256"));
  CHECK_THAT(invalid_argument_of([&] {
               chordrt::ops::grouped_gemm_key({GroupedMode::kContiguous, 4096, 512, 12}, 12 * 128, kHopperFacts,
                                              "stream_k=1", "op", true);
             }),
             Contains("more than 8 K blocks"));
  // Masked, by override only (the heuristics keep whole tiles): long K (more than 8 K blocks of 128).
  const GroupedShape masked_up{GroupedMode::kMasked, 3072, 4096, 16};
  CHECK(chordrt::ops::grouped_gemm_key(masked_up, 8, kHopperFacts, {}, "grouped_masked", true).stream_k == 0);
  const GroupedGemmKey mk = chordrt::ops::grouped_gemm_key(masked_up, 8, kHopperFacts, "stream_k=1", "op", true);
  CHECK(mk.stream_k == 1);
  CHECK_NOTHROW(GroupedGemmFamily::family().program(GroupedGemmFamily::descriptor(kHopper, mk)));
  CHECK_THAT(invalid_argument_of([&] {
               chordrt::ops::grouped_gemm_key({GroupedMode::kMasked, 4096, 1024, 12}, 8, kHopperFacts, "stream_k=1",
                                              "op", true);
             }),
             Contains("stream_k 1 needs more than 8 K blocks (k > 1024), got k 1024"));
  // The workspace: the flags of every CTA, then a 128 x 256 FP32 tile of partials per CTA.
  CHECK(chord_grouped_workspace_size(132) ==
        static_cast<size_t>(chord::grouped::stream_flags_bytes(132) + 132LL * 128 * 256 * 4));
  CHECK(chord_grouped_workspace_size(0) == 0);
  CHECK(chordrt::grouped_workspace_size(1025) == 0);  // the C++ mirror
}

// A grouped call's optional workspace (args: a valid call whose workspace fields are still unset): a short,
// misaligned or negative one is INVALID_ARGUMENT naming it; a struct that ends at `out` (an older caller's) has
// none; with or without one, the heuristics' kernel is the same (the shape takes no stream-K).
template <class Args, class Call>
void check_grouped_workspace(Args args, size_t min_size, Call call, const std::string& op) {
  chordrt::DryRun dry(kHopperFacts);
  const int64_t need = static_cast<int64_t>(chord_grouped_workspace_size(kHopperFacts.sm_count));
  args.workspace = g_host + 16;
  args.workspace_bytes = need - 1;
  CHECK(call(&args) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains(op + ": workspace_bytes must be at least chord_grouped_workspace_size(132 SMs)"));
  args.workspace = g_host + 8;
  args.workspace_bytes = need;
  CHECK(call(&args) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("workspace"));
  args.workspace_bytes = -1;
  CHECK(call(&args) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("workspace_bytes must be in [0,"));
  args.struct_size = min_size;
  REQUIRE(call(&args) == CHORD_SUCCESS);
  args.struct_size = sizeof args;
  args.workspace = g_host + 16;
  args.workspace_bytes = need;
  REQUIRE(call(&args) == CHORD_SUCCESS);
  REQUIRE(dry.descriptors().size() == 2);
  CHECK(dry.descriptors()[0] == dry.descriptors()[1]);
}

TEST_CASE("a grouped call's workspace is checked, and does not change the heuristics' kernel", "[grouped][capi]") {
  int32_t* routing = reinterpret_cast<int32_t*>(g_host);
  chord_w4a16_weight_t k64 = host_weight(CHORD_W4A16_LAYOUT_WGMMA_K64);
  check_grouped_workspace(
      chord_grouped_contiguous_args_t{sizeof(chord_grouped_contiguous_args_t), g_host, 4 * 128, &k64, routing, g_host,
                                      nullptr, 0},
      CHORD_GROUPED_CONTIGUOUS_ARGS_MIN_SIZE, [](const auto* a) { return chord_grouped_contiguous(a, nullptr); },
      "grouped_contiguous");
  chord_w4a16_weight_t k128 = host_weight(CHORD_W4A16_LAYOUT_WGMMA_K128);
  check_grouped_workspace(
      chord_grouped_masked_args_t{sizeof(chord_grouped_masked_args_t), g_host, 128, &k128, routing, 16, g_host, nullptr,
                                  0},
      CHORD_GROUPED_MASKED_ARGS_MIN_SIZE, [](const auto* a) { return chord_grouped_masked(a, nullptr); },
      "grouped_masked");
}
