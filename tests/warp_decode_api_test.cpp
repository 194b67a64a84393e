// Warp decode without a GPU: its heuristics (pure functions) and the C ABI's argument validation.
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>

#include "chordrt/chordrt.h"
#include "heuristics/warp_decode.hpp"
#include "runtime/driver.hpp"
#include "runtime/kernel_registry.hpp"
#include "runtime/ops/warp_decode.hpp"
#include "tests/test_support.hpp"

using Catch::Matchers::Contains;
using chordrt::heuristics::WarpDecodeShape;
using chordrt::heuristics::WeightFormat;
using chordrt::test::kHopper;

namespace {

const WarpDecodeShape kKimiTp8{WeightFormat::kInt4Group32, 7168, 256, 384, 384, 8, false};
const WarpDecodeShape kKimiEp8{WeightFormat::kInt4Group32, 7168, 2048, 48, 384, 8, true};
const WarpDecodeShape kQwen{WeightFormat::kMxfp8, 2048, 768, 128, 128, 8, false};
const WarpDecodeShape kExtreme{WeightFormat::kInt4Group32, 4096, 1536, 1024, 2048, 32, true};
// Other public MoE shapes the bench measures: DeepSeek-V3 EP8, Qwen3-235B-A22B TP4, DeepSeek-V2-Lite (top-6).
const WarpDecodeShape kDeepSeekV3Ep8{WeightFormat::kInt4Group32, 7168, 2048, 32, 256, 8, true};
const WarpDecodeShape kQwen235Tp4{WeightFormat::kMxfp8, 4096, 384, 128, 128, 8, false};
const WarpDecodeShape kDeepSeekV2Lite{WeightFormat::kInt4Group32, 2048, 1408, 64, 64, 6, false};
// Qwen3-235B-A22B EP8, INT4: 16 of 128 experts behind a map; 8 local routes an expert at 128 tokens.
const WarpDecodeShape kQwen235Ep8{WeightFormat::kInt4Group32, 4096, 1536, 16, 128, 8, true};

alignas(64) unsigned char g_host[4096];

// Arguments that pass every check (host addresses: nothing is launched on them in these tests).
chord_warp_decode_moe_args_t valid_args() {
  chord_warp_decode_moe_args_t a{};
  a.struct_size = sizeof a;
  a.format = CHORD_WEIGHT_INT4_GROUP32;
  a.num_tokens = 4;
  a.hidden = 2048;
  a.intermediate = 768;
  a.num_experts = 128;
  a.top_k = 8;
  a.x = a.w13 = a.w13_scale = a.w2 = a.w2_scale = g_host;
  a.topk_ids = reinterpret_cast<const int32_t*>(g_host);
  a.topk_weights = reinterpret_cast<const float*>(g_host);
  a.workspace = a.output = g_host;
  a.workspace_bytes = chord_warp_decode_moe_workspace_size(4, 8, 768);
  return a;
}

void expect_error(const chord_warp_decode_moe_args_t& a, chord_status_t want,
                  std::initializer_list<const char*> words) {
  CHECK(chord_warp_decode_moe(&a, nullptr) == want);
  const std::string msg = chord_last_error();
  for (const char* w : words) CHECK_THAT(msg, Contains(w));
}

}  // namespace

TEST_CASE("warp decode token buckets and expected active experts", "[warp_decode]") {
  using chordrt::heuristics::expected_active_experts;
  using chordrt::heuristics::warp_decode_token_bucket;
  CHECK(warp_decode_token_bucket(1) == 8);
  CHECK(warp_decode_token_bucket(8) == 8);
  CHECK(warp_decode_token_bucket(9) == 16);
  CHECK(warp_decode_token_bucket(128) == 128);
  // One token picks top_k distinct experts: exactly top_k active (TP), top_k / EP on average (EP).
  CHECK(expected_active_experts(kKimiTp8, 1) == Approx(8.0));
  CHECK(expected_active_experts(kKimiEp8, 1) == Approx(1.0));
  // Saturates at the local expert count.
  CHECK(expected_active_experts(kKimiEp8, 100000) == Approx(48.0));
  CHECK(expected_active_experts(kKimiTp8, 0) == 0.0);
}

TEST_CASE("warp decode configs divide the work exactly", "[warp_decode]") {
  using namespace chordrt::heuristics;
  for (const WarpDecodeShape& s :
       {kKimiTp8, kKimiEp8, kQwen, kExtreme, kDeepSeekV3Ep8, kQwen235Tp4, kDeepSeekV2Lite, kQwen235Ep8}) {
    for (int64_t m = 1; m <= chord::warp_decode::kMaxTokens; ++m) {
      INFO("hidden " << s.hidden << " inter " << s.intermediate << " tokens " << m);
      const auto g = select_warp_decode_gate_up(s, m);
      const auto d = select_warp_decode_down(s, m);
      CHECK(g.max_tokens >= m);
      CHECK(d.max_tokens == g.max_tokens);
      REQUIRE(g.stage_groups > 0);
      REQUIRE(d.stage_groups > 0);
      CHECK((s.hidden / 32) % (g.k_split * g.stage_groups) == 0);
      CHECK((s.intermediate / 32) % (d.k_chunks * d.stage_groups) == 0);
      CHECK((g.stages >= 2 && g.stages <= 4 && d.stages >= 2 && d.stages <= 4));
      // Every config is a descriptor the family accepts, within the device's shared memory.
      const auto keys = chordrt::ops::warp_decode_keys_of(s, g, d);
      const auto gd = chordrt::ops::WarpDecodeGateUpFamily::descriptor(kHopper, keys.gate_up);
      const auto dd = chordrt::ops::WarpDecodeDownFamily::descriptor(kHopper, keys.down);
      CHECK(chordrt::family_of(gd).program(gd).dynamic_smem <= 227u * 1024);
      CHECK(chordrt::family_of(dd).program(dd).dynamic_smem <= 227u * 1024);
      CHECK_NOTHROW(chordrt::family_of(gd).program(gd));
      CHECK_NOTHROW(chordrt::family_of(dd).program(dd));
    }
  }
  // Kimi TP8 at one token: 8 warps over 224 groups (7 stages of 4), one K chunk per expert item (8 active
  // experts fill the 8 down warps).
  const auto g1 = select_warp_decode_gate_up(kKimiTp8, 1);
  CHECK(g1.k_split == 8);
  CHECK(g1.stage_groups == 4);
  CHECK(g1.n_tiles == 1);
  // One token: 8 experts x 32 CTAs of 8 warps is already under 16 warps per SM, so one row tile; at 32
  // tokens (~187 active experts) two row tiles per CTA still leave thousands of warps.
  CHECK(g1.row_tiles == 1);
  CHECK(select_warp_decode_gate_up(kKimiTp8, 32).row_tiles == 2);
  // Down: 7168 rows in 32-row CTAs are 224 CTAs x 8 warps (13.6 per SM): two row tiles once 4 or more
  // experts are active; one for EP8's single expert at one token and for Qwen's 2048 rows (64 CTAs).
  CHECK(select_warp_decode_down(kKimiTp8, 1).row_tiles == 2);
  CHECK(select_warp_decode_down(kKimiTp8, 32).row_tiles == 2);
  CHECK(select_warp_decode_down(kKimiEp8, 1).row_tiles == 1);
  CHECK(select_warp_decode_down(kQwen, 32).row_tiles == 1);
  const auto d1 = select_warp_decode_down(kKimiTp8, 1);
  CHECK(d1.k_chunks == 1);
  // Kimi EP8 at one token: ~1 local expert, so its 64 down groups split into 8 chunks, one per warp.
  CHECK(select_warp_decode_down(kKimiEp8, 1).k_chunks == 8);
  // Qwen3 at 64 tokens: 4 routes per active expert, one column tile; at 128 tokens, 8 per expert.
  CHECK(select_warp_decode_gate_up(kQwen, 64).n_tiles == 1);
  // Qwen3-235B EP8 at 128 tokens: just over 8 routes an active expert, so two column tiles, and then one row
  // tile (gate/up with 2 x 2 spilled 248 bytes in its main loop), though 16 x 96 neuron pairs would take two.
  const auto q128 = select_warp_decode_gate_up(kQwen235Ep8, 128);
  CHECK(q128.n_tiles == 2);
  CHECK(q128.row_tiles == 1);
  CHECK(select_warp_decode_gate_up(kQwen235Ep8, 64).row_tiles == 2);
  // A 16-warp one-tile gate/up (the M = 1 experiment's override) is bounded for two CTAs an SM, so its
  // grid holds all 256 items of Kimi TP8 at one token instead of 132.
  auto g16 = g1;
  g16.k_split = 16;
  g16.stage_groups = 2;
  CHECK(chord::warp_decode::resident_ctas_bound(16, 1, 1) == 2);
  CHECK(chord::warp_decode::resident_ctas_bound(8, 1, 1) == 3);
  CHECK(chord::warp_decode::resident_ctas_bound(8, 2, 1) == 2);
  CHECK(warp_decode_gate_up_ctas(kKimiTp8, g16, 1) == 256);
}

TEST_CASE("warp decode grids fit the device", "[warp_decode]") {
  using namespace chordrt::heuristics;
  namespace wd = chord::warp_decode;
  const auto resident = [](int warps, int rt, int nt, int64_t smem) {
    const int64_t by_smem = (227 * 1024 + 1024) / (smem + 1024);
    return std::min<int64_t>(wd::resident_ctas_bound(warps, rt, nt), by_smem);
  };
  for (const WarpDecodeShape& s :
       {kKimiTp8, kKimiEp8, kQwen, kExtreme, kDeepSeekV3Ep8, kQwen235Tp4, kDeepSeekV2Lite, kQwen235Ep8}) {
    for (int64_t m = 1; m <= wd::kMaxTokens; ++m) {
      INFO("hidden " << s.hidden << " inter " << s.intermediate << " tokens " << m);
      const auto g = select_warp_decode_gate_up(s, m);
      const int64_t g_smem =
          wd::gate_up_dynamic_smem(static_cast<int>(s.format), g.k_split, g.stage_groups, g.row_tiles, g.stages) +
          wd::gate_up_static_smem(s.experts, g.max_tokens * s.top_k, g.k_split, g.row_tiles, g.n_tiles);
      // The persistent gate/up grid: every CTA resident at once, no more CTAs than work items.
      const int64_t ctas = warp_decode_gate_up_ctas(s, g, m);
      const int64_t items = std::min<int64_t>(m * s.top_k, s.experts) * (s.intermediate / (8 * g.row_tiles));
      CHECK(ctas >= 1);
      CHECK(ctas <= items);
      CHECK(ctas <= 132 * resident(g.k_split, g.row_tiles, g.n_tiles, g_smem));
      CHECK((ctas == items || ctas == 132 * resident(g.k_split, g.row_tiles, g.n_tiles, g_smem)));
      // Down: the CTA fits, and two CTAs per SM whenever the grid outnumbers the SMs (the token bucket's
      // accumulators shrink the choice to one row tile or 4 warps at 64-128 tokens), except INT4 with two
      // row tiles (one CTA per SM measured faster).
      const auto d = select_warp_decode_down(s, m);
      // Two row tiles or two column tiles, not both (params.cuh: both spill inside the main loop).
      CHECK(g.row_tiles * g.n_tiles <= wd::kMaxTilesPerWarp);
      CHECK(d.row_tiles * d.n_tiles <= wd::kMaxTilesPerWarp);
      const int64_t d_smem = wd::down_dynamic_smem(static_cast<int>(s.format), d.warps, d.max_tokens, d.stage_groups,
                                                   d.row_tiles, d.stages) +
                             wd::route_table_bytes(s.experts, d.max_tokens * s.top_k);
      CHECK(d_smem <= 227 * 1024);
      const bool int4_two_tiles = s.format == WeightFormat::kInt4Group32 && d.row_tiles == 2;
      if (s.hidden / (16 * d.row_tiles) > 132 && !int4_two_tiles) {
        CHECK(resident(d.warps, d.row_tiles, d.n_tiles, d_smem) >= 2);
      }
    }
  }
  // Kimi TP8: 32 tokens keep 8 warps and two row tiles (64 KB of accumulators and rings: two CTAs per SM);
  // 64 and 128 tokens' accumulators leave room for one such CTA: INT4 keeps it, MXFP8 takes one row tile
  // (two CTAs per SM; 4 warps at 128).
  CHECK(select_warp_decode_down(kKimiTp8, 32).row_tiles == 2);
  for (const int64_t m : {64, 128}) {
    CHECK(select_warp_decode_down(kKimiTp8, m).row_tiles == 2);
    CHECK(select_warp_decode_down(kKimiTp8, m).warps == 8);
    WarpDecodeShape mxfp8 = kKimiTp8;
    mxfp8.format = WeightFormat::kMxfp8;
    CHECK(select_warp_decode_down(mxfp8, m).row_tiles == 1);
  }
  // Gate/up at one token: 8 experts x 32 neuron blocks = 256 items, fewer than the resident CTAs.
  CHECK(warp_decode_gate_up_ctas(kKimiTp8, select_warp_decode_gate_up(kKimiTp8, 1), 1) == 256);
}

TEST_CASE("warp decode rejects shapes its stages cannot cover", "[warp_decode]") {
  using namespace chordrt::heuristics;
  // MXFP8 moves a stage's scales of a row as one 4-byte piece: K/32 must be a multiple of 4.
  const WarpDecodeShape odd{WeightFormat::kMxfp8, 2048, 192, 16, 16, 2, false};
  CHECK(select_warp_decode_down(odd, 4).stage_groups == 0);
  CHECK(chord::warp_decode::min_stage_groups(chord::warp_decode::kMxfp8) == 4);
  CHECK(chord::warp_decode::min_stage_groups(chord::warp_decode::kInt4Group32) == 2);
  // INT4 serves K = 192 (6 groups, stages of 2).
  const WarpDecodeShape int4{WeightFormat::kInt4Group32, 2048, 192, 16, 16, 2, false};
  CHECK(select_warp_decode_down(int4, 4).stage_groups == 2);
  // Stage bytes as the kernel lays them out: 16 rows x (4 groups x 16 B + 16 B pad) + 16 x 8 B of scales.
  CHECK(chord::warp_decode::stage_bytes(chord::warp_decode::kInt4Group32, 4, 1).bytes == 16 * 80 + 128);
  CHECK(chord::warp_decode::stage_bytes(chord::warp_decode::kMxfp8, 4, 1).bytes == 16 * 160 + 64);
  // Two row tiles: 32 rows; the down kernel adds [warps][max_tokens][32] FP32 accumulators first.
  CHECK(chord::warp_decode::stage_bytes(chord::warp_decode::kInt4Group32, 4, 2).bytes == 32 * 80 + 256);
  CHECK(chord::warp_decode::down_dynamic_smem(chord::warp_decode::kInt4Group32, 8, 16, 4, 2, 3) ==
        8 * 16 * 32 * 4 + 8 * 3 * (32 * 80 + 256));
}

TEST_CASE("chord_warp_decode_moe argument checks", "[warp_decode][capi]") {
  CHECK(chord_warp_decode_moe_workspace_size(4, 8, 768) == 4u * 8 * 768 * 2);
  CHECK(chord_warp_decode_moe_workspace_size(0, 8, 768) == 0);
  CHECK(chord_warp_decode_moe_workspace_size(-4, 8, 768) == 0);
  CHECK(chord_warp_decode_moe_workspace_size(INT64_MAX, 32, 1 << 20) == SIZE_MAX);  // saturated, not wrapped
  CHECK(chord_warp_decode_moe(nullptr, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(std::string(chord_last_error()), Contains("args is null"));
  auto a = valid_args();
  a.struct_size = 8;
  expect_error(a, CHORD_ERROR_INVALID_ARGUMENT, {"struct_size"});
  a = valid_args();
  a.format = 7;
  expect_error(a, CHORD_ERROR_INVALID_ARGUMENT, {"weight format 7"});
  a = valid_args();
  a.num_tokens = 129;
  expect_error(a, CHORD_ERROR_INVALID_ARGUMENT, {"num_tokens", "128"});
  a = valid_args();
  a.hidden = 2000;
  expect_error(a, CHORD_ERROR_INVALID_ARGUMENT, {"multiples of the group size 32", "2000"});
  a = valid_args();
  a.format = CHORD_WEIGHT_MXFP8;
  a.intermediate = 96;
  expect_error(a, CHORD_ERROR_UNSUPPORTED, {"MXFP8", "multiples of 128", "96"});
  a = valid_args();
  a.top_k = 0;
  expect_error(a, CHORD_ERROR_INVALID_ARGUMENT, {"top_k"});
  a = valid_args();
  a.w2 = nullptr;
  expect_error(a, CHORD_ERROR_INVALID_ARGUMENT, {"w2 is null"});
  a = valid_args();
  a.x = g_host + 2;
  expect_error(a, CHORD_ERROR_INVALID_ARGUMENT, {"x must be 16-byte aligned"});
  a = valid_args();
  a.workspace_bytes -= 1;
  expect_error(a, CHORD_ERROR_INVALID_ARGUMENT, {"workspace", "49152"});
  a = valid_args();
  a.expert_map = reinterpret_cast<const int32_t*>(g_host);
  a.num_global_experts = 0;
  expect_error(a, CHORD_ERROR_INVALID_ARGUMENT, {"num_global_experts"});
  // No tokens: nothing is read or written, null data pointers are fine.
  a = chord_warp_decode_moe_args_t{};
  a.struct_size = sizeof a;
  a.hidden = 2048;
  a.intermediate = 768;
  a.num_experts = 128;
  a.top_k = 8;
  CHECK(chord_warp_decode_moe(&a, nullptr) == CHORD_SUCCESS);
}

TEST_CASE("chord_warp_decode_moe in compile-only mode", "[warp_decode][capi]") {
  if (chordrt::driver().state == chordrt::DriverState::kReady) {
    SUCCEED("a CUDA driver is ready: the GPU tests cover real launches");
    return;
  }
  const auto a = valid_args();
  const chord_status_t s = chord_warp_decode_moe(&a, nullptr);
  CHECK((s == CHORD_ERROR_NO_DRIVER || s == CHORD_ERROR_NO_DEVICE));
}

TEST_CASE("warp decode config overrides for experiments", "[warp_decode]") {
  using namespace chordrt::heuristics;
  auto g = select_warp_decode_gate_up(kKimiTp8, 8);
  auto d = select_warp_decode_down(kKimiTp8, 8);
  CHECK(apply_warp_decode_override("gate_up.stages=3,down.warps=8,down.k_chunks=2", g, d).empty());
  CHECK(g.stages == 3);
  CHECK(d.warps == 8);
  CHECK(d.k_chunks == 2);
  CHECK(apply_warp_decode_override("", g, d).empty());
  CHECK_THAT(apply_warp_decode_override("gate_up.warps=8", g, d), Contains("unknown key \"gate_up.warps\""));
  CHECK_THAT(apply_warp_decode_override("down.stages=x", g, d), Contains("bad value"));
  CHECK_THAT(apply_warp_decode_override("stages=3", g, d), Contains("kernel.field=value"));
  // The GPU test's forced two column tiles (test_two_column_tiles_on_a_small_shape): valid kernels of both
  // families on its small shapes at 16 tokens, INT4 and MXFP8, with and without an expert map.
  for (const WarpDecodeShape& small : {WarpDecodeShape{WeightFormat::kInt4Group32, 1024, 512, 16, 16, 4, false},
                                       WarpDecodeShape{WeightFormat::kMxfp8, 1024, 512, 16, 64, 4, true}}) {
    auto gs = select_warp_decode_gate_up(small, 16);
    auto ds = select_warp_decode_down(small, 16);
    REQUIRE(apply_warp_decode_override("gate_up.row_tiles=1,gate_up.n_tiles=2,down.row_tiles=1,down.n_tiles=2", gs, ds)
                .empty());
    const auto keys = chordrt::ops::warp_decode_keys_of(small, gs, ds);
    CHECK(keys.gate_up.n_tiles == 2);
    CHECK(chordrt::ops::WarpDecodeGateUpFamily::error(keys.gate_up) == "");
    CHECK(chordrt::ops::WarpDecodeDownFamily::error(keys.down) == "");
  }
}
