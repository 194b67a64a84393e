// Prewarm plans what dispatch uses: each family's real dispatch, run in a dry run (no driver, no launch)
// over the benchmarks' points of a preset deployment, asks only for descriptors that preset's plan holds.
// A family adds its own points here.
#include <algorithm>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "runtime/jit_runtime.hpp"
#include "runtime/model_plan.hpp"
#include "runtime/ops/dsa_indexer.hpp"
#include "runtime/ops/glue.hpp"
#include "runtime/ops/grouped.hpp"
#include "runtime/ops/indexed.hpp"
#include "runtime/ops/sparse_mla.hpp"
#include "runtime/ops/w4a16.hpp"
#include "runtime/ops/warp_decode.hpp"
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

// Dispatches an indexed GEMM on fake pointers: `routes` routes over a routing of block_m blocks with
// `capacity` sorted-id slots (planning only reads the shape).
void dispatch_indexed_gemm(const chord_w4a16_weight_t& weight, int32_t top_k, int64_t routes, int32_t block_m,
                           int64_t capacity) {
  chord_indexed_args_t a{};
  a.struct_size = sizeof(a);
  a.a = fake(8);
  a.top_k = top_k;
  a.num_tokens = routes / top_k;
  a.block_m = block_m;
  a.weight = &weight;
  a.sorted_token_ids = fake<const int32_t>(4);
  a.sorted_token_ids_capacity = capacity;
  a.expert_ids = fake<const int32_t>(5);
  a.expert_ids_capacity = (capacity + block_m - 1) / block_m;
  a.num_tokens_post_padded = fake<const int32_t>(6);
  a.out = fake(9);
  chordrt::ops::indexed_gemm(a, nullptr);
}

// Dispatches warp decode on fake pointers (planning only reads the shape).
void dispatch_warp_decode(int32_t format, int64_t tokens, int32_t hidden, int32_t intermediate, int32_t experts,
                          int32_t global_experts, int32_t top_k) {
  chord_warp_decode_moe_args_t a{};
  a.struct_size = sizeof a;
  a.format = format;
  a.num_tokens = tokens;
  a.hidden = hidden;
  a.intermediate = intermediate;
  a.num_experts = experts;
  a.top_k = top_k;
  a.x = fake(0);
  a.topk_ids = fake<const int32_t>(1);
  a.topk_weights = fake<const float>(2);
  a.w13 = fake(3);
  a.w13_scale = fake(4);
  a.w2 = fake(5);
  a.w2_scale = fake(6);
  a.workspace = fake(7);
  a.workspace_bytes = chordrt::ops::warp_decode_moe_workspace_size(tokens, top_k, intermediate);
  a.output = fake(8);
  if (experts != global_experts) {
    a.expert_map = fake<const int32_t>(9);
    a.num_global_experts = global_experts;
  }
  chordrt::ops::warp_decode_moe(a, nullptr);
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
          chord_moe_align_args_t a{sizeof(a),
                                   fake<const int32_t>(0),
                                   tokens,
                                   8,
                                   384,
                                   block,
                                   fake<int32_t>(1),
                                   cap,
                                   fake<int32_t>(2),
                                   cap,
                                   fake<int32_t>(3),
                                   ep ? fake<const int32_t>(4) : nullptr};
          chordrt::ops::moe_align(a, nullptr);
        }
        const chord_silu_and_mul_args_t s{sizeof(s), fake(5), fake(6), tokens * 8, inter};
        chordrt::ops::silu_and_mul(s, nullptr);
        const chord_moe_combine_args_t c{sizeof(c),
                                         fake(7),
                                         fake<const float>(8),
                                         fake(9),
                                         tokens,
                                         8,
                                         7168,
                                         ep ? fake<const int32_t>(10) : nullptr,
                                         ep ? fake<const int32_t>(11) : nullptr,
                                         384};
        chordrt::ops::moe_combine(c, nullptr);
      }
    });
    CHECK(asked == 7 * 6);
  }
}

TEST_CASE("dry-run dispatch: the grouped GEMMs at the grouped bench's points are planned",
          "[plan][dispatch][grouped]") {
  // bench/grouped_bench.py: Kimi K2 at EP8 (48 local experts), gate_up N 4096 K 7168 and down N 7168 K 2048;
  // contiguous 128 / 256 / 512 rows per expert, masked 8 / 16 / 32 / 64 tokens per expert (max_m 128).
  const int32_t experts = 48;
  const size_t asked = expect_planned("kimi-k2", "ep8", [&] {
    for (const auto& [n, k] : {std::pair<int32_t, int32_t>{4096, 7168}, {7168, 2048}}) {
      const chord_w4a16_weight_t contiguous = packed_weight(CHORD_W4A16_LAYOUT_WGMMA_K64, experts, n, k);
      for (int64_t per_expert : {128, 256, 512}) {
        const chord_grouped_contiguous_args_t a{
            sizeof(a), fake(0), experts * per_expert, &contiguous, fake<const int32_t>(1), fake(2), nullptr, 0};
        chordrt::ops::grouped_contiguous(a, nullptr);
      }
      const chord_w4a16_weight_t masked = packed_weight(CHORD_W4A16_LAYOUT_WGMMA_K128, experts, n, k);
      for (int32_t tokens : {8, 16, 32, 64}) {
        const chord_grouped_masked_args_t a{sizeof(a), fake(0), 128,     &masked, fake<const int32_t>(1),
                                            tokens,    fake(2), nullptr, 0};
        chordrt::ops::grouped_masked(a, nullptr);
      }
    }
  });
  CHECK(asked == 2 * (2 + 3 + 4));  // per projection: two packers, three contiguous and four masked GEMMs
}

TEST_CASE("dry-run dispatch: the indexed GEMMs at the indexed bench's points are planned",
          "[plan][dispatch][indexed]") {
  // bench/indexed_bench.py: Kimi K2 (384 experts, top-8). EP8 prefill: 48 local experts behind an expert
  // map, 1024..16384-token steps (about tokens routes here), WGMMA_K64; TP8 prefill: 384 experts sliced
  // (gate_up N 512 K 7168, down N 7168 K 256), 8 routes per token; EP8 decode: 160 / 400 routes, all on
  // the 48 local experts (384 global behind the map), MMA. Each point: block_m from chord_indexed_block_m, moe_align at
  // it (prefill), then gate_up on [T, K] with top_k 8 and down on [8T, K] with top_k 1.
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
      {"ep8", CHORD_W4A16_LAYOUT_MMA, 48, true, {4096, 7168}, {7168, 2048}, {20, 50}},
  };
  for (const Case& c : cases) {
    const bool decode = c.layout == CHORD_W4A16_LAYOUT_MMA;
    INFO(c.deployment << (decode ? " decode" : " prefill"));
    size_t gemms = 0;
    const size_t asked = expect_planned("kimi-k2", c.deployment, [&] {
      for (const auto& [n, k] : {c.gate_up, c.down}) {
        const chord_w4a16_weight_t w = packed_weight(c.layout, c.experts, n, k);
        for (int64_t tokens : c.tokens) {
          // Decode's routes all land here; prefill's tokens * 8 * E / 384.
          const int64_t routed = tokens * 8 * c.experts / (decode ? c.experts : 384);
          const int32_t block_m = chordrt::ops::indexed_block_m(c.layout, c.experts, n, k, routed, 0);
          const int64_t cap = chordrt::ops::moe_align_sorted_capacity(tokens, 8, 384, block_m);
          const chord_moe_align_args_t al{sizeof(al),
                                          fake<const int32_t>(3),
                                          tokens,
                                          8,
                                          384,
                                          block_m,
                                          fake<int32_t>(4),
                                          cap,
                                          fake<int32_t>(5),
                                          (cap + block_m - 1) / block_m,
                                          fake<int32_t>(6),
                                          c.expert_map ? fake<const int32_t>(7) : nullptr};
          chordrt::ops::moe_align(al, nullptr);
          const bool is_gate_up = n == c.gate_up.first && k == c.gate_up.second;
          dispatch_indexed_gemm(w, is_gate_up ? 8 : 1, tokens * 8, block_m, cap);
          ++gemms;
        }
      }
    });
    CHECK(gemms == 2 * c.tokens.size());
    CHECK(asked == 2 + 2 * gemms);  // the packers, the GEMMs, moe_align
  }
}

TEST_CASE("dry-run dispatch: warp decode at the warp-decode bench's points is planned",
          "[plan][dispatch][warp_decode]") {
  // bench/warp_decode_bench.py: Kimi K2 TP8 and EP8 (rank 3's 48 experts behind a map), Qwen3-30B-A3B at
  // TP1, DeepSeek-V3 EP8, Qwen3-235B-A22B TP4, DeepSeek-V2-Lite (top-6), INT4 and MXFP8, 1..64 tokens; the
  // shapes without a preset are bench/models/ configs.
  const std::string models = std::string(CHORD_TEST_SOURCE_DIR) + "/bench/models/";
  struct Case {
    std::string int4_model, mxfp8_model, deployment;
    int32_t hidden, intermediate, experts, global_experts, top_k;
  };
  const Case cases[] = {
      {"kimi-k2", models + "kimi-k2-mxfp8.json", "tp8", 7168, 256, 384, 384, 8},
      {"kimi-k2", models + "kimi-k2-mxfp8.json", "ep8", 7168, 2048, 48, 384, 8},
      {models + "qwen3-30b-a3b-int4.json", models + "qwen3-30b-a3b-mxfp8.json", "tp1", 2048, 768, 128, 128, 8},
      {models + "deepseek-v3-int4.json", models + "deepseek-v3-mxfp8.json", "ep8", 7168, 2048, 32, 256, 8},
      {models + "qwen3-235b-a22b-int4.json", models + "qwen3-235b-a22b-mxfp8.json", "tp4", 4096, 384, 128, 128, 8},
      {models + "deepseek-v2-lite-int4.json", models + "deepseek-v2-lite-mxfp8.json", "tp1", 2048, 1408, 64, 64, 6},
  };
  for (const Case& c : cases) {
    for (const int32_t format : {CHORD_WEIGHT_INT4_GROUP32, CHORD_WEIGHT_MXFP8}) {
      const std::string& model = format == CHORD_WEIGHT_MXFP8 ? c.mxfp8_model : c.int4_model;
      INFO(model << " " << c.deployment);
      const size_t asked = expect_planned(model, c.deployment, [&] {
        for (int64_t tokens : {1, 2, 4, 8, 16, 32, 64}) {
          dispatch_warp_decode(format, tokens, c.hidden, c.intermediate, c.experts, c.global_experts, c.top_k);
        }
      });
      CHECK(asked >= 2);
    }
  }
}

TEST_CASE("dry-run dispatch: sparse MLA at the sparse MLA bench's points is planned", "[plan][dispatch][sparse_mla]") {
  // bench/sparse_mla_bench.py, topk 2048: fp8_ds_mla at h 8 / 16 (Mistral Large 4 TP8 / TP4) for 1..256
  // tokens, h 64 / 128 (Mistral Large 4 and DeepSeek-V3.2 with DP attention) for 1 / 32 / 128, a NoPE
  // and a BF16-cache point at h 16; the cache written by mla_cache_write first.
  struct Case {
    const char* model;
    const char* deployment;
    int32_t format, rope, heads;
    std::vector<int64_t> tokens;
  };
  const Case cases[] = {
      {"mistral-large-4", "tp8", CHORD_MLA_CACHE_FP8_DS_MLA, 64, 8, {1, 8, 32, 128, 256}},
      {"mistral-large-4", "tp4", CHORD_MLA_CACHE_FP8_DS_MLA, 64, 16, {1, 8, 32, 128, 256}},
      {"mistral-large-4", "ep8", CHORD_MLA_CACHE_FP8_DS_MLA, 64, 64, {1, 32, 128}},
      {"deepseek-v3.2", "ep8", CHORD_MLA_CACHE_FP8_DS_MLA, 64, 128, {1, 32, 128}},
      {"mistral-large-4", "tp4", CHORD_MLA_CACHE_FP8_DS_MLA, 0, 16, {128}},
      {"mistral-large-4", "tp4", CHORD_MLA_CACHE_BF16, 64, 16, {128}},
  };
  for (const Case& c : cases) {
    INFO(c.model << " " << c.deployment << " format " << c.format << " rope " << c.rope << " h " << c.heads);
    const size_t asked = expect_planned(c.model, c.deployment, [&] {
      chord_mla_cache_write_args_t w{sizeof(w), c.format, c.rope, 4096, fake(0), fake<const int64_t>(1), fake(2), 4096};
      chordrt::ops::mla_cache_write(w, nullptr);
      for (int64_t tokens : c.tokens) {
        chord_sparse_mla_decode_args_t a{};
        a.struct_size = sizeof a;
        a.format = c.format;
        a.num_heads = c.heads;
        a.rope_dims = c.rope;
        a.topk = 2048;
        a.num_tokens = tokens;
        a.q = fake(3);
        a.cache = fake(2);
        a.num_slots = 1 << 20;
        a.indices = fake<const int32_t>(4);
        a.softmax_scale = 0.0417f;
        a.out = fake(5);
        a.lse = fake<float>(6);
        a.workspace = fake(7);
        a.workspace_bytes = chordrt::ops::sparse_mla_decode_workspace_size(a);
        chordrt::ops::sparse_mla_decode(a, nullptr);
      }
    });
    CHECK(asked >= 2);
  }
}

TEST_CASE("dry-run dispatch: the DSA indexer at the DSA bench's points is planned", "[plan][dispatch][dsa_indexer]") {
  // bench/dsa_bench.py: 64 (DeepSeek-V3.2) and 32 (Mistral Large 4) indexer heads, page 64, 1..128 queries
  // of 65536 positions each; top-2048 over 1..128 rows with a block table.
  for (const auto& [model, heads] : {std::pair{"deepseek-v3.2", 64}, {"mistral-large-4", 32}}) {
    INFO(model);
    const size_t asked = expect_planned(model, "tp8", [&] {
      chord_indexer_cache_write_args_t w{sizeof(w), 64, fake(0), fake<const int64_t>(1), fake(2), 64, 1024};
      chordrt::ops::indexer_cache_write(w, nullptr);
      for (int64_t tokens : {1, 8, 64, 128}) {
        chord_dsa_indexer_args_t a{sizeof(a),
                                   heads,
                                   tokens,
                                   fake(3),
                                   fake<const float>(4),
                                   fake(2),
                                   64,
                                   tokens * 1024,
                                   fake<const int32_t>(5),
                                   1024,
                                   fake<const int32_t>(6),
                                   65536,
                                   fake<float>(7)};
        chordrt::ops::dsa_indexer_logits(a, nullptr);
        chord_dsa_topk_args_t t{sizeof(t),
                                tokens,
                                2048,
                                fake<const float>(7),
                                65536,
                                fake<const int32_t>(6),
                                fake<const int32_t>(5),
                                1024,
                                64,
                                fake<int32_t>(8)};
        chordrt::ops::dsa_topk(t, nullptr);
      }
    });
    CHECK(asked >= 3);
  }
}

TEST_CASE("dry-run dispatch: the decode crossover bench's points are planned",
          "[plan][dispatch][indexed][warp_decode]") {
  // bench/decode_crossover_bench.py: warp_decode_bench's six shapes, INT4, 1..128 tokens, two paths on the same
  // routing: warp decode, and the composed indexed decode (MMA layout): the packers, moe_align over the global
  // experts (the map under EP) at each projection's block_m for the routes expected here (one align when both
  // agree), gate_up on [T, H] with top_k, silu_and_mul on the T * top_k rows, down on [T * top_k, I] with top_k 1,
  // moe_combine (with the expert-parallel filter under EP).
  const std::string models = std::string(CHORD_TEST_SOURCE_DIR) + "/bench/models/";
  struct Case {
    std::string model, deployment;
    int32_t hidden, intermediate, experts, global_experts, top_k;
  };
  const Case cases[] = {
      {"kimi-k2", "tp8", 7168, 256, 384, 384, 8},
      {"kimi-k2", "ep8", 7168, 2048, 48, 384, 8},
      {models + "qwen3-30b-a3b-int4.json", "tp1", 2048, 768, 128, 128, 8},
      {models + "deepseek-v3-int4.json", "ep8", 7168, 2048, 32, 256, 8},
      {models + "qwen3-235b-a22b-int4.json", "tp4", 4096, 384, 128, 128, 8},
      {models + "deepseek-v2-lite-int4.json", "tp1", 2048, 1408, 64, 64, 6},
  };
  for (const Case& c : cases) {
    INFO(c.model << " " << c.deployment);
    const bool ep = c.experts != c.global_experts;
    const int32_t h = c.hidden, i = c.intermediate, k = c.top_k;
    const size_t asked = expect_planned(c.model, c.deployment, [&] {
      const chord_w4a16_weight_t gate_up = packed_weight(CHORD_W4A16_LAYOUT_MMA, c.experts, 2 * i, h);
      const chord_w4a16_weight_t down = packed_weight(CHORD_W4A16_LAYOUT_MMA, c.experts, h, i);
      for (int64_t tokens : {1, 2, 4, 8, 16, 32, 64, 128}) {
        dispatch_warp_decode(CHORD_WEIGHT_INT4_GROUP32, tokens, h, i, c.experts, c.global_experts, k);

        const int64_t routed = std::max<int64_t>(1, tokens * k * c.experts / c.global_experts);
        const int32_t bm_gate_up =
            chordrt::ops::indexed_block_m(CHORD_W4A16_LAYOUT_MMA, c.experts, 2 * i, h, routed, 0);
        const int32_t bm_down = chordrt::ops::indexed_block_m(CHORD_W4A16_LAYOUT_MMA, c.experts, h, i, routed, 0);
        for (int32_t block_m : {bm_gate_up, bm_down}) {
          const int64_t cap = chordrt::ops::moe_align_sorted_capacity(tokens, k, c.global_experts, block_m);
          const chord_moe_align_args_t al{sizeof(al),
                                          fake<const int32_t>(1),
                                          tokens,
                                          k,
                                          c.global_experts,
                                          block_m,
                                          fake<int32_t>(10),
                                          cap,
                                          fake<int32_t>(11),
                                          (cap + block_m - 1) / block_m,
                                          fake<int32_t>(12),
                                          ep ? fake<const int32_t>(9) : nullptr};
          chordrt::ops::moe_align(al, nullptr);  // twice at one block size when both agree: the same descriptor
        }
        for (const bool is_gate_up : {true, false}) {
          const int32_t block_m = is_gate_up ? bm_gate_up : bm_down;
          const int64_t cap = chordrt::ops::moe_align_sorted_capacity(tokens, k, c.global_experts, block_m);
          dispatch_indexed_gemm(is_gate_up ? gate_up : down, is_gate_up ? k : 1, tokens * k, block_m, cap);
        }
        const chord_silu_and_mul_args_t s{sizeof(s), fake(14), fake(15), tokens * k, i};
        chordrt::ops::silu_and_mul(s, nullptr);
        const chord_moe_combine_args_t cb{sizeof(cb),
                                          fake(16),
                                          fake<const float>(2),
                                          fake(17),
                                          tokens,
                                          k,
                                          h,
                                          ep ? fake<const int32_t>(1) : nullptr,
                                          ep ? fake<const int32_t>(9) : nullptr,
                                          c.global_experts};
        chordrt::ops::moe_combine(cb, nullptr);
      }
    });
    CHECK(asked >= 8);
  }
}
