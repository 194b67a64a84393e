// The W4A16 weights without a GPU: sizes, the packer family's programs and checks, the packed weight,
// and one K64 weight serving both the grouped contiguous GEMM and the indexed prefill.
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>

#include "chordrt/chordrt.h"
#include "runtime/driver.hpp"
#include "runtime/jit_runtime.hpp"
#include "runtime/ops/w4a16.hpp"
#include "tests/test_support.hpp"

using Catch::Matchers::Contains;
using chordrt::ops::W4a16PackFamily;
using chordrt::test::kHopper;
using chordrt::test::kHopperFacts;

namespace {

alignas(64) unsigned char g_host[4096];

std::string last_error() { return chord_last_error(); }

chord_w4a16_pack_args_t valid_pack_args(chord_w4a16_layout_t layout) {
  chord_w4a16_pack_args_t a{};
  a.struct_size = sizeof a;
  a.layout = layout;
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

TEST_CASE("chord_w4a16_weight_sizes", "[w4a16][capi]") {
  size_t packed = 1, scale = 1;
  for (const chord_w4a16_layout_t layout :
       {CHORD_W4A16_LAYOUT_WGMMA_K64, CHORD_W4A16_LAYOUT_WGMMA_K128, CHORD_W4A16_LAYOUT_MMA}) {
    REQUIRE(chord_w4a16_weight_sizes(layout, 48, 4096, 7168, &packed, &scale) == CHORD_SUCCESS);
    CHECK(packed == size_t{48} * 4096 * 7168 / 2);
    CHECK(scale == size_t{48} * 4096 * 7168 / 32 * 2);
  }
  CHECK(chord_w4a16_weight_sizes(CHORD_W4A16_LAYOUT_WGMMA_K128, 48, 4096, 7168 + 64, &packed, &scale) ==
        CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("k must be a positive multiple of 128 for layout WGMMA_K128"));
  CHECK(packed == 0);
  CHECK(scale == 0);
  // K64 and MMA take K in steps of 64.
  CHECK(chord_w4a16_weight_sizes(CHORD_W4A16_LAYOUT_WGMMA_K64, 48, 4096, 7168 + 64, &packed, &scale) == CHORD_SUCCESS);
  CHECK(chord_w4a16_weight_sizes(CHORD_W4A16_LAYOUT_MMA, 48, 4096, 7168 + 64, &packed, &scale) == CHORD_SUCCESS);
  CHECK(chord_w4a16_weight_sizes(CHORD_W4A16_LAYOUT_MMA, 48, 4096 + 64, 7168, &packed, &scale) ==
        CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("n must be a positive multiple of 128"));
  CHECK(chord_w4a16_weight_sizes(3, 48, 4096, 7168, &packed, &scale) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("layout must be in [0, 2] (WGMMA_K64, WGMMA_K128, MMA), got 3"));
  CHECK(chord_w4a16_weight_sizes(CHORD_W4A16_LAYOUT_MMA, 0, 4096, 7168, &packed, &scale) ==
        CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("num_experts must be in [1, 1024], got 0"));
}

TEST_CASE("the packer family: one per layout, fields named", "[w4a16]") {
  CHECK(W4a16PackFamily::program({0, 4096, 7168}).name_expression == "chord::grouped::pack_kernel<4096, 7168, 64>");
  CHECK(W4a16PackFamily::program({1, 7168, 2048}).name_expression == "chord::grouped::pack_kernel<7168, 2048, 128>");
  CHECK(W4a16PackFamily::program({2, 7168, 2048}).name_expression == "chord::indexed::pack_mma_kernel<7168, 2048>");
  CHECK(W4a16PackFamily::program({2, 7168, 2048}).header == "indexed/pack.cuh");
  CHECK(W4a16PackFamily::program({0, 4096, 7168}).threads == 256);
  try {
    W4a16PackFamily::descriptor(kHopper, {3, 4096, 7168});
    FAIL("no error");
  } catch (const chordrt::Error& e) {
    CHECK(std::string(e.what()) == "w4a16.pack: layout must be in [0, 2], got 3");
  }
  try {
    W4a16PackFamily::program({1, 4096, 7168 + 64});
    FAIL("no error");
  } catch (const chordrt::Error& e) {
    CHECK_THAT(std::string(e.what()),
               Contains("w4a16.pack: k must be a positive multiple of 128 for layout WGMMA_K128"));
  }
}

TEST_CASE("chord_w4a16_pack argument checks", "[w4a16][capi]") {
  chord_w4a16_weight_t w{};
  w.struct_size = sizeof w;
  CHECK(chord_w4a16_pack(nullptr, &w, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("chord_w4a16_pack: args is null"));
  auto a = valid_pack_args(CHORD_W4A16_LAYOUT_WGMMA_K128);
  CHECK(chord_w4a16_pack(&a, nullptr, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("weight is null"));
  a.bits = 8;
  CHECK(chord_w4a16_pack(&a, &w, nullptr) == CHORD_ERROR_UNSUPPORTED);
  CHECK_THAT(last_error(), Contains("bits 8"));
  a = valid_pack_args(CHORD_W4A16_LAYOUT_WGMMA_K128);
  a.group_size = 128;
  CHECK(chord_w4a16_pack(&a, &w, nullptr) == CHORD_ERROR_UNSUPPORTED);
  a = valid_pack_args(CHORD_W4A16_LAYOUT_WGMMA_K128);
  a.symmetric = 0;
  CHECK(chord_w4a16_pack(&a, &w, nullptr) == CHORD_ERROR_UNSUPPORTED);
  a = valid_pack_args(CHORD_W4A16_LAYOUT_WGMMA_K128);
  a.packed_bytes -= 16;
  CHECK(chord_w4a16_pack(&a, &w, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("packed_bytes must be >= 262144"));
  a = valid_pack_args(CHORD_W4A16_LAYOUT_MMA);
  a.scale_bytes -= 16;
  CHECK(chord_w4a16_pack(&a, &w, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("scale_bytes must be >= 32768"));
  a = valid_pack_args(CHORD_W4A16_LAYOUT_WGMMA_K128);
  a.packed = g_host + 8;
  CHECK(chord_w4a16_pack(&a, &w, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("packed must be 16-byte aligned"));
  a = valid_pack_args(CHORD_W4A16_LAYOUT_WGMMA_K128);
  a.k = 576;
  CHECK(chord_w4a16_pack(&a, &w, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("k must be a positive multiple of 128"));
  a = valid_pack_args(CHORD_W4A16_LAYOUT_WGMMA_K128);
  a.weight_packed = nullptr;
  CHECK(chord_w4a16_pack(&a, &w, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("weight_packed is null"));
  a = valid_pack_args(CHORD_W4A16_LAYOUT_WGMMA_K128);
  a.struct_size = sizeof a + 8;
  CHECK(chord_w4a16_pack(&a, &w, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("struct_size must be in"));
  a = valid_pack_args(CHORD_W4A16_LAYOUT_WGMMA_K128);
  w.struct_size = 0;  // the output struct is checked before anything runs
  CHECK(chord_w4a16_pack(&a, &w, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("weight.struct_size must be in"));
  w.struct_size = sizeof w;
  if (chordrt::driver().state != chordrt::DriverState::kReady) {
    const auto s = chord_w4a16_pack(&a, &w, nullptr);
    CHECK((s == CHORD_ERROR_NO_DRIVER || s == CHORD_ERROR_NO_DEVICE));
  }
}

TEST_CASE("one K64 weight serves the grouped contiguous GEMM and the indexed prefill", "[w4a16][grouped][indexed]") {
  chordrt::DryRun dry(kHopperFacts);
  auto a = valid_pack_args(CHORD_W4A16_LAYOUT_WGMMA_K64);
  chord_w4a16_weight_t w{};
  w.struct_size = sizeof w;
  REQUIRE(chord_w4a16_pack(&a, &w, nullptr) == CHORD_SUCCESS);
  CHECK(w.layout == CHORD_W4A16_LAYOUT_WGMMA_K64);
  CHECK(w.num_experts == 4);
  CHECK(w.packed == g_host);
  CHECK(w.tag == chordrt::ops::w4a16_weight_tag(w));
  int32_t* ids = reinterpret_cast<int32_t*>(g_host);
  const chord_grouped_contiguous_args_t c{sizeof c, g_host, 512, &w, ids, g_host, nullptr, 0};
  REQUIRE(chord_grouped_contiguous(&c, nullptr) == CHORD_SUCCESS);
  chord_indexed_args_t x{};
  x.struct_size = CHORD_INDEXED_ARGS_MIN_SIZE;  // a caller without the optional validate field
  x.a = g_host;
  x.num_tokens = 64;
  x.top_k = 8;
  x.block_m = 32;
  x.weight = &w;
  x.sorted_token_ids = ids;
  x.sorted_token_ids_capacity = 1024;
  x.expert_ids = ids;
  x.expert_ids_capacity = 32;
  x.num_tokens_post_padded = ids;
  x.out = g_host;
  REQUIRE(chord_indexed_gemm(&x, nullptr) == CHORD_SUCCESS);
  // The masked GEMM needs the other WGMMA layout.
  const chord_grouped_masked_args_t m{sizeof m, g_host, 128, &w, ids, 16, g_host, nullptr, 0};
  CHECK(chord_grouped_masked(&m, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  REQUIRE(dry.descriptors().size() == 3);
  CHECK(dry.descriptors()[0] == W4a16PackFamily::descriptor(kHopper, {0, 256, 512}));
  CHECK(dry.descriptors()[1].schema->family == "grouped.gemm");
  CHECK(dry.descriptors()[1].get("mode") == 0);
  CHECK(dry.descriptors()[2].schema->family == "indexed.prefill");
  CHECK(dry.descriptors()[2].get("block_m") == 32);
}
