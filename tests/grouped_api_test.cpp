// The grouped family without a GPU: its heuristics (pure functions), the packed sizes, the C ABI's
// argument and weight checks, and its place in the model plans.
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>

#include "chordrt/chordrt.h"
#include "heuristics/grouped.hpp"
#include "runtime/driver.hpp"
#include "runtime/model_plan.hpp"
#include "runtime/ops/grouped.hpp"
#include "tests/test_support.hpp"

using Catch::Matchers::Contains;
using chordrt::heuristics::GroupedConfig;
using chordrt::heuristics::GroupedMode;
using chordrt::heuristics::GroupedShape;
using chordrt::test::kHopper;

namespace {

alignas(64) unsigned char g_host[4096];

std::string last_error() { return chord_last_error(); }

chord_grouped_pack_args_t valid_pack_args(int32_t mode) {
  chord_grouped_pack_args_t a{};
  a.struct_size = sizeof a;
  a.mode = mode;
  a.num_experts = 4;
  a.n = 256;
  a.k = 512;
  a.bits = 4;
  a.group_size = 32;
  a.symmetric = 1;
  a.scale_is_bf16 = 1;
  a.weight_packed = a.weight_scale = g_host;
  a.packed = a.scale = g_host;
  a.packed_bytes = 4 * 256 * 512 / 2;
  a.scale_bytes = 4 * 256 * 512 / 32 * 2;
  return a;
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
          CHECK_NOTHROW(chordrt::ops::kGroupedGemmFamily.program(chordrt::ops::grouped_gemm_descriptor(kHopper, s, c)));
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
}

TEST_CASE("grouped config overrides for experiments", "[grouped]") {
  GroupedConfig c{128, 2, 6};
  CHECK(chordrt::heuristics::apply_grouped_override("block_m=64,slices=1,stages=3", c) == "");
  CHECK(c.block_m == 64);
  CHECK(c.slices == 1);
  CHECK(c.stages == 3);
  CHECK_THAT(chordrt::heuristics::apply_grouped_override("warps=4", c), Contains("unknown key"));
  CHECK_THAT(chordrt::heuristics::apply_grouped_override("block_m=x", c), Contains("bad value"));
  CHECK_THAT(chordrt::heuristics::apply_grouped_override("block_m", c), Contains("field=value"));
}

TEST_CASE("chord_grouped_weight_sizes", "[grouped][capi]") {
  size_t packed = 1, scale = 1;
  REQUIRE(chord_grouped_weight_sizes(CHORD_GROUPED_CONTIGUOUS, 48, 4096, 7168, &packed, &scale) == CHORD_SUCCESS);
  CHECK(packed == size_t{48} * 4096 * 7168 / 2);
  CHECK(scale == size_t{48} * 4096 * 7168 / 32 * 2);
  CHECK(chord_grouped_weight_sizes(CHORD_GROUPED_MASKED, 48, 4096, 7168 + 64, &packed, &scale) ==
        CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("K a multiple of 128"));
  CHECK(packed == 0);
  CHECK(chord_grouped_weight_sizes(CHORD_GROUPED_CONTIGUOUS, 48, 4096 + 64, 7168, &packed, &scale) ==
        CHORD_ERROR_INVALID_ARGUMENT);
  CHECK(chord_grouped_weight_sizes(2, 48, 4096, 7168, &packed, &scale) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("mode"));
  CHECK(chord_grouped_weight_sizes(CHORD_GROUPED_MASKED, 0, 4096, 7168, &packed, &scale) ==
        CHORD_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("chord_grouped_pack argument checks", "[grouped][capi]") {
  chord_grouped_weight_t w{};
  CHECK(chord_grouped_pack(nullptr, &w, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  auto a = valid_pack_args(CHORD_GROUPED_MASKED);
  a.bits = 8;
  CHECK(chord_grouped_pack(&a, &w, nullptr) == CHORD_ERROR_UNSUPPORTED);
  CHECK_THAT(last_error(), Contains("bits 8"));
  a = valid_pack_args(CHORD_GROUPED_MASKED);
  a.group_size = 128;
  CHECK(chord_grouped_pack(&a, &w, nullptr) == CHORD_ERROR_UNSUPPORTED);
  a = valid_pack_args(CHORD_GROUPED_MASKED);
  a.symmetric = 0;
  CHECK(chord_grouped_pack(&a, &w, nullptr) == CHORD_ERROR_UNSUPPORTED);
  a = valid_pack_args(CHORD_GROUPED_MASKED);
  a.packed_bytes -= 16;
  CHECK(chord_grouped_pack(&a, &w, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("must hold"));
  a = valid_pack_args(CHORD_GROUPED_MASKED);
  a.packed = g_host + 8;
  CHECK(chord_grouped_pack(&a, &w, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("16-byte aligned"));
  a = valid_pack_args(CHORD_GROUPED_MASKED);
  a.struct_size = sizeof a + 8;
  CHECK(chord_grouped_pack(&a, &w, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  if (chordrt::driver().state != chordrt::DriverState::kReady) {
    a = valid_pack_args(CHORD_GROUPED_MASKED);
    const auto s = chord_grouped_pack(&a, &w, nullptr);
    CHECK((s == CHORD_ERROR_NO_DRIVER || s == CHORD_ERROR_NO_DEVICE));
  }
}

TEST_CASE("grouped GEMMs reject weights of the other mode or not from the packer", "[grouped][capi]") {
  // A weight as grouped_pack fills it (pack itself needs a driver), on host memory: nothing is launched.
  chord_grouped_weight_t w{};
  w.struct_size = sizeof w;
  w.mode = CHORD_GROUPED_CONTIGUOUS;
  w.num_experts = 4;
  w.n = 256;
  w.k = 512;
  w.packed = w.scale = g_host;
  int32_t* ids = reinterpret_cast<int32_t*>(g_host);
  // Untagged: refused before anything is launched.
  CHECK(chord_grouped_contiguous(g_host, 128, &w, ids, g_host, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("not filled by grouped_pack"));
  CHECK(chord_grouped_masked(g_host, 16, nullptr, ids, 4, g_host, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("weight is null"));
  w.tag = chordrt::ops::grouped_weight_tag(w);
  CHECK(chord_grouped_masked(g_host, 16, &w, ids, 4, g_host, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("packed for contiguous mode (BLOCK_K 64)"));
  w.n = 512;  // edited after packing
  CHECK(chord_grouped_contiguous(g_host, 128, &w, ids, g_host, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("not filled by grouped_pack"));
  w.n = 256;
  CHECK(chord_grouped_contiguous(g_host, -1, &w, ids, g_host, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK(chord_grouped_contiguous(g_host, 0, &w, ids, g_host, nullptr) == CHORD_SUCCESS);  // nothing to do
  CHECK(chord_grouped_contiguous(g_host, 128, &w, nullptr, g_host, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("m_indices is null"));
  w.struct_size = 8;
  CHECK(chord_grouped_masked(g_host, 16, &w, ids, 4, g_host, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("struct_size"));
}
