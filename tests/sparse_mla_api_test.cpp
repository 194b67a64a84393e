// Sparse MLA decode without a GPU: the launch heuristics (pure functions) and the C ABI's
// argument validation (every check that runs before a context is needed).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>

#include "chordrt/chordrt.h"
#include "heuristics/sparse_mla.hpp"
#include "runtime/kernel_registry.hpp"
#include "runtime/ops/sparse_mla.hpp"
#include "tests/test_support.hpp"

using Catch::Matchers::Contains;
using chordrt::heuristics::SparseMlaConfig;
using chordrt::heuristics::SparseMlaShape;
using chordrt::test::kHopper;

namespace {

const chordrt::DeviceFacts kH200{};

SparseMlaShape shape(int heads, int64_t tokens, int topk = 2048, int f = chord::sparse_mla::kFp8DsMla, int rope = 64) {
  return {f, rope, heads, topk, tokens};
}

alignas(64) unsigned char g_host[4096];

chord_sparse_mla_decode_args_t valid_args() {
  chord_sparse_mla_decode_args_t a{};
  a.struct_size = sizeof a;
  a.format = CHORD_MLA_CACHE_FP8_DS_MLA;
  a.num_heads = 8;
  a.rope_dims = 64;
  a.topk = 2048;
  a.num_tokens = 4;
  a.q = a.cache = g_host;
  a.num_slots = 4096;
  a.indices = reinterpret_cast<const int32_t*>(g_host);
  a.softmax_scale = 0.0417f;
  a.out = g_host;
  a.lse = reinterpret_cast<float*>(g_host);
  return a;
}

void expect_error(const chord_sparse_mla_decode_args_t& a, std::initializer_list<const char*> words) {
  CHECK(chord_sparse_mla_decode(&a, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  const std::string msg = chord_last_error();
  for (const char* w : words) CHECK_THAT(msg, Contains(w));
}

}  // namespace

TEST_CASE("sparse MLA heuristics: head groups, warps and the split", "[sparse_mla]") {
  using chordrt::heuristics::select_sparse_mla;
  // Few heads: one CTA per (token, all heads), the top-k split so T * splits fills the SMs.
  const SparseMlaConfig one = select_sparse_mla(shape(8, 1), kH200);
  CHECK(one.head_group == 8);
  CHECK(one.warps == 4);
  CHECK(one.splits == 32);
  CHECK(one.blocks_per_split == 1);
  CHECK(select_sparse_mla(shape(8, 128), kH200).splits == 2);
  CHECK(select_sparse_mla(shape(8, 256), kH200).splits == 1);
  CHECK(select_sparse_mla(shape(8, 1000), kH200).splits == 1);
  CHECK(select_sparse_mla(shape(16, 1), kH200).head_group == 16);
  // Many heads: 64-head groups on the wgmma kernel (either cache format), 32-head groups on 8 warps
  // (head counts that are not a multiple of 64).
  const SparseMlaConfig wide = select_sparse_mla(shape(128, 128), kH200);
  CHECK(wide.head_group == 64);
  CHECK(wide.warps == 12);
  CHECK(wide.stages == 2);
  CHECK(wide.splits == 1);
  const SparseMlaConfig wide_bf16 = select_sparse_mla(shape(128, 128, 2048, chord::sparse_mla::kBf16), kH200);
  CHECK((wide_bf16.head_group == 64 && wide_bf16.warps == 12));
  // 128 heads pair a token's two 64-head CTAs where each holds several blocks, not at one block a split
  // (T = 1: 32 splits of one block); 64 heads have no pair.
  CHECK(wide.pair == 1);
  CHECK(wide_bf16.pair == 1);
  const SparseMlaConfig one_token = select_sparse_mla(shape(128, 1), kH200);
  CHECK((one_token.head_group == 64 && one_token.blocks_per_split == 1 && one_token.pair == 0));
  CHECK(select_sparse_mla(shape(128, 2), kH200).pair == 0);              // 32 splits of one block
  const SparseMlaConfig four = select_sparse_mla(shape(128, 4), kH200);  // the first paired T: 16 splits of 2
  CHECK((four.splits == 16 && four.blocks_per_split == 2 && four.pair == 1));
  CHECK(select_sparse_mla(shape(128, 32), kH200).pair == 1);
  CHECK(select_sparse_mla(shape(64, 128), kH200).pair == 0);
  CHECK(select_sparse_mla(shape(96, 128), kH200).head_group == 32);
  CHECK(select_sparse_mla(shape(24, 1), kH200).head_group == 8);
  // A 32-head grid that cannot cover the SMs even at one block per split: the 16-head kernel, for fp8
  // caches only while its own grid is one CTA per SM (T = 1, h = 64: 4 x 32 CTAs on 132 SMs).
  for (const auto& [heads, tokens, format] : {std::tuple{32, 1, chord::sparse_mla::kFp8DsMla},
                                              {32, 2, chord::sparse_mla::kFp8DsMla},
                                              {64, 1, chord::sparse_mla::kFp8DsMla},
                                              {64, 2, chord::sparse_mla::kBf16},
                                              {128, 1, chord::sparse_mla::kBf16}}) {
    const SparseMlaConfig small = select_sparse_mla(shape(heads, tokens, 2048, format), kH200);
    INFO("h=" << heads << " T=" << tokens << " format=" << format);
    CHECK((small.head_group == 16 && small.warps == 4));
  }
  // fp8 where 16-head CTAs would share SMs: the wgmma kernel dequantizes each record once per 64 heads.
  CHECK(select_sparse_mla(shape(128, 1), kH200).head_group == 64);  // 8 x 32 16-head CTAs > 132 SMs
  CHECK(select_sparse_mla(shape(64, 2), kH200).head_group == 64);
  CHECK(select_sparse_mla(shape(64, 3), kH200).head_group == 64);  // 3 x 2 x 32 CTAs cover 132 SMs
  CHECK(select_sparse_mla(shape(128, 2), kH200).head_group == 64);
  CHECK(select_sparse_mla(shape(64, 3, 2048, chord::sparse_mla::kBf16), kH200).head_group == 64);
  for (int heads : {8, 16, 32, 64, 128}) {
    for (int64_t tokens : {1, 3, 8, 32, 64, 128, 256, 1000}) {
      for (int topk : {64, 128, 2048, 4096}) {
        const SparseMlaShape s = shape(heads, tokens, topk);
        const SparseMlaConfig c = select_sparse_mla(s, kH200);
        INFO("h=" << heads << " T=" << tokens << " topk=" << topk);
        CHECK(chordrt::heuristics::sparse_mla_config_error(s, c, kH200).empty());
        const int blocks = topk / 64;
        CHECK(c.splits * c.blocks_per_split >= blocks);
        CHECK(c.pair == (heads == 128 && c.head_group == 64 && c.blocks_per_split >= 2 ? 1 : 0));
        CHECK((c.splits - 1) * c.blocks_per_split < blocks);  // no empty split
        CHECK((c.head_group == 64
                   ? chord::sparse_mla::wgmma_decode_smem(s.rope_dims).bytes
                   : chord::sparse_mla::decode_smem(s.format, s.rope_dims, c.head_group, c.warps, c.stages).bytes) <=
              kH200.max_smem_per_block_optin);
        CHECK(chordrt::heuristics::sparse_mla_workspace_bytes(s, c) ==
              (c.splits > 1 ? static_cast<size_t>(tokens) * heads * c.splits * 513 * 4 : 0));
      }
    }
  }
}

TEST_CASE("sparse MLA overrides are parsed and checked", "[sparse_mla]") {
  using chordrt::heuristics::apply_sparse_mla_override;
  using chordrt::heuristics::sparse_mla_config_error;
  SparseMlaConfig c = chordrt::heuristics::select_sparse_mla(shape(16, 4), kH200);
  CHECK(apply_sparse_mla_override("head_group=8,warps=4,stages=3", c).empty());
  CHECK(c.head_group == 8);
  CHECK(c.stages == 3);
  CHECK_THAT(apply_sparse_mla_override("tiles=2", c), Contains("unknown key \"tiles\""));
  CHECK_THAT(apply_sparse_mla_override("stages=x", c), Contains("bad value"));
  CHECK_THAT(apply_sparse_mla_override("stages", c), Contains("field=value"));
  SparseMlaConfig bad = c;
  bad.head_group = 32;
  CHECK_THAT(sparse_mla_config_error(shape(16, 4), bad, kH200), Contains("divide"));
  bad = c;
  bad.splits = 33;
  CHECK_THAT(sparse_mla_config_error(shape(16, 4), bad, kH200), Contains("splits"));
  bad = c;
  bad.head_group = 32;
  bad.warps = 8;
  bad.stages = 8;
  CHECK_THAT(sparse_mla_config_error(shape(64, 4), bad, kH200), Contains("shared memory"));
  // The wgmma kernel: 12 warps, 2 stages, either cache format.
  bad.head_group = 64;
  CHECK_THAT(sparse_mla_config_error(shape(64, 4), bad, kH200), Contains("12 warps and 2 stages"));
  bad.warps = 12;
  bad.stages = 2;
  CHECK(sparse_mla_config_error(shape(64, 4), bad, kH200).empty());
  CHECK(sparse_mla_config_error(shape(64, 4, 2048, chord::sparse_mla::kBf16), bad, kH200).empty());
  // The pair: 0 or 1, only for 128 heads on the wgmma kernel; forced either way by the override.
  bad.pair = 1;
  CHECK_THAT(sparse_mla_config_error(shape(64, 4), bad, kH200), Contains("pair=1 needs 128 heads"));
  CHECK(sparse_mla_config_error(shape(128, 4), bad, kH200).empty());
  bad.pair = 2;
  CHECK_THAT(sparse_mla_config_error(shape(128, 4), bad, kH200), Contains("pair must be 0 or 1"));
  SparseMlaConfig forced = chordrt::heuristics::select_sparse_mla(shape(128, 1), kH200);
  CHECK(apply_sparse_mla_override("pair=1", forced).empty());
  CHECK(forced.pair == 1);
  CHECK(sparse_mla_config_error(shape(128, 1), forced, kH200).empty());
  forced.head_group = 16;
  forced.warps = 4;
  CHECK_THAT(sparse_mla_config_error(shape(128, 1), forced, kH200), Contains("pair=1 needs 128 heads"));
}

TEST_CASE("a sparse MLA override re-derives the fields that follow from it", "[sparse_mla]") {
  using chordrt::heuristics::resolve_sparse_mla_override;
  using chordrt::heuristics::select_sparse_mla;
  using chordrt::heuristics::sparse_mla_config_error;
  // 128 heads at T = 64 pair by default; 32-head groups cannot, so the pair follows the override off.
  const SparseMlaShape s64 = shape(128, 64);
  SparseMlaConfig c = select_sparse_mla(s64, kH200);
  REQUIRE(c.pair == 1);
  CHECK(resolve_sparse_mla_override("head_group=32,warps=8,stages=2", s64, c).empty());
  CHECK(c.pair == 0);
  CHECK(sparse_mla_config_error(s64, c, kH200).empty());
  // More splits: blocks_per_split follows, and one block a split drops the pair.
  const SparseMlaShape s128 = shape(128, 128);
  c = select_sparse_mla(s128, kH200);
  CHECK(resolve_sparse_mla_override("splits=32", s128, c).empty());
  CHECK((c.splits == 32 && c.blocks_per_split == 1 && c.pair == 0));
  CHECK(resolve_sparse_mla_override("splits=4", s128, c).empty());
  CHECK((c.blocks_per_split == 8 && c.pair == 1));
  // A named pair stays as named, for the check to judge.
  CHECK(resolve_sparse_mla_override("splits=32,pair=1", s128, c).empty());
  CHECK((c.blocks_per_split == 1 && c.pair == 1));
  CHECK(resolve_sparse_mla_override("pair=0", s128, c).empty());
  CHECK(c.pair == 0);
  // A bad spec leaves the config as it was.
  const SparseMlaConfig before = c;
  CHECK_THAT(resolve_sparse_mla_override("splits=4,pair=x", s128, c), Contains("bad value"));
  CHECK((c.splits == before.splits && c.blocks_per_split == before.blocks_per_split && c.pair == before.pair));
}

TEST_CASE("sparse MLA decode keys are checked by the family", "[sparse_mla]") {
  using chordrt::ops::SparseMlaDecodeFamily;
  const chordrt::ops::SparseMlaLaunch l = chordrt::ops::sparse_mla_launch(shape(16, 1), kH200);
  const chordrt::KernelProgram p = SparseMlaDecodeFamily::program(l.decode);
  CHECK(p.threads == 128);
  CHECK_THAT(p.name_expression, Contains("sparse_mla_decode_kernel<0, 64, 16, 16, 4, 2>"));
  // By hand: 2 stages x 64 records of 656 B, q 16 x (1024 + 16), RoPE q 16 x (128 + 16), P 16 x 72 floats,
  // 2 x [4][16] floats of maxima and sums, 16 prescales, 2 x 4 mask words (to 8 bytes), 2 barriers.
  CHECK(p.dynamic_smem == 2 * 64 * 656 + 16 * 1040 + 16 * 144 + 16 * 72 * 4 + 2 * 4 * 16 * 4 + 16 * 4 + 32 + 16);
  CHECK(l.config.splits > 1);
  CHECK(SparseMlaDecodeFamily::descriptor(kHopper, l.decode).get("head_group") == 16);
  CHECK_THROWS_WITH(SparseMlaDecodeFamily::program({0, 64, 16, 24, 4, 2, 0}), Contains("head_group"));
  CHECK_THROWS_WITH(SparseMlaDecodeFamily::descriptor(kHopper, {0, 64, 16, 16, 4, 9, 0}),
                    Contains("stages must be in [2, 8], got 9"));
  CHECK_THROWS_WITH(SparseMlaDecodeFamily::program({0, 32, 16, 16, 4, 2, 0}), Contains("rope_dims"));
  // The pair is the wgmma kernel's cluster of two: its template argument and the launch's cluster shape.
  const chordrt::KernelProgram pair = SparseMlaDecodeFamily::program({0, 64, 128, 64, 12, 2, 1});
  CHECK_THAT(pair.name_expression, Contains("sparse_mla_decode_wgmma_kernel<0, 64, 128, true>"));
  CHECK(pair.cluster[0] == 2);
  const chordrt::KernelProgram lone = SparseMlaDecodeFamily::program({1, 64, 128, 64, 12, 2, 0});
  CHECK_THAT(lone.name_expression, Contains("sparse_mla_decode_wgmma_kernel<1, 64, 128, false>"));
  CHECK(lone.cluster[0] == 1);
  CHECK_THROWS_WITH(SparseMlaDecodeFamily::program({0, 64, 64, 64, 12, 2, 1}), Contains("pair=1 needs 128 heads"));
}

TEST_CASE("sparse MLA decode argument validation", "[sparse_mla]") {
  CHECK(chord_sparse_mla_decode(nullptr, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  auto a = valid_args();
  a.struct_size = 8;
  CHECK(chord_sparse_mla_decode(&a, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  a = valid_args();
  a.format = 2;
  expect_error(a, {"format", "got 2"});
  a = valid_args();
  a.rope_dims = 32;
  expect_error(a, {"rope_dims", "32"});
  a = valid_args();
  a.num_heads = 12;
  expect_error(a, {"num_heads", "12"});
  a.num_heads = 136;
  expect_error(a, {"num_heads", "136"});
  a = valid_args();
  a.topk = 100;
  expect_error(a, {"topk", "multiple of 64", "100"});
  a = valid_args();
  a.num_tokens = 70000;
  expect_error(a, {"num_tokens", "70000"});
  a = valid_args();
  a.softmax_scale = std::nanf("");
  expect_error(a, {"softmax_scale"});
  a = valid_args();
  a.q = g_host + 8;
  expect_error(a, {"q", "16-byte aligned"});
  a = valid_args();
  a.indices = nullptr;
  expect_error(a, {"indices", "null"});
  a = valid_args();
  a.num_slots = 0;
  expect_error(a, {"num_slots"});
  a = valid_args();
  a.attn_sink = reinterpret_cast<const float*>(g_host + 2);
  expect_error(a, {"attn_sink", "aligned"});
  // Zero tokens: nothing is read, null pointers are fine.
  a = valid_args();
  a.num_tokens = 0;
  a.q = a.cache = a.out = nullptr;
  a.indices = nullptr;
  CHECK(chord_sparse_mla_decode(&a, nullptr) == CHORD_SUCCESS);
  size_t bytes = 1;
  CHECK(chord_sparse_mla_decode_workspace_size(&a, &bytes) == CHORD_SUCCESS);
  CHECK(bytes == 0);
  CHECK(chord_sparse_mla_decode_workspace_size(&a, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
}
