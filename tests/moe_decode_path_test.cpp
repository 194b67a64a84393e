// The decode-path choice (chord_moe_decode_path): which paths serve a shape, the model's ordering of the
// two paths, argument checks. CPU only.
#include "heuristics/moe_decode_path.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <string>

#include "chordrt/chordrt.h"
#include "chordrt/chordrt.hpp"
#include "runtime/ops/moe_decode_path.hpp"

namespace {

chord_moe_shape_t shape(int32_t format, int32_t hidden, int32_t intermediate, int32_t experts, int32_t global,
                        int32_t top_k) {
  chord_moe_shape_t s{};
  s.struct_size = sizeof s;
  s.format = format;
  s.hidden = hidden;
  s.intermediate = intermediate;
  s.num_experts = experts;
  s.num_global_experts = global;
  s.top_k = top_k;
  return s;
}

// The bench's INT4 shapes (bench/warp_decode_bench.py, bench/decode_crossover_bench.py).
const chord_moe_shape_t kInt4Shapes[] = {
    shape(CHORD_WEIGHT_INT4_GROUP32, 7168, 256, 384, 384, 8),  // Kimi K2 TP8
    shape(CHORD_WEIGHT_INT4_GROUP32, 7168, 2048, 48, 384, 8),  // Kimi K2 EP8
    shape(CHORD_WEIGHT_INT4_GROUP32, 2048, 768, 128, 128, 8),  // Qwen3-30B-A3B
    shape(CHORD_WEIGHT_INT4_GROUP32, 7168, 2048, 32, 256, 8),  // DeepSeek-V3 EP8
    shape(CHORD_WEIGHT_INT4_GROUP32, 4096, 384, 128, 128, 8),  // Qwen3-235B-A22B TP4
    shape(CHORD_WEIGHT_INT4_GROUP32, 2048, 1408, 64, 64, 6),   // DeepSeek-V2-Lite
};

chord_moe_decode_path_t path_of(const chord_moe_shape_t& s, int64_t tokens) {
  int32_t p = -1;
  REQUIRE(chord_moe_decode_path(&s, tokens, &p) == CHORD_SUCCESS);
  return static_cast<chord_moe_decode_path_t>(p);
}

}  // namespace

TEST_CASE("decode path: only the paths that serve the shape are chosen", "[moe_decode_path]") {
  // MXFP8: indexed decode has INT4 weights only.
  for (int64_t m = 1; m <= 128; ++m) {
    CHECK(path_of(shape(CHORD_WEIGHT_MXFP8, 7168, 256, 384, 384, 8), m) == CHORD_MOE_DECODE_WARP);
  }
  // Past warp decode's 128 tokens: indexed.
  CHECK(path_of(kInt4Shapes[0], 129) == CHORD_MOE_DECODE_INDEXED);
  CHECK(path_of(kInt4Shapes[1], 4096) == CHORD_MOE_DECODE_INDEXED);
  // A hidden size the MMA layout cannot take (down N = H = 2112 is no multiple of 128): warp decode.
  CHECK(path_of(shape(CHORD_WEIGHT_INT4_GROUP32, 2112, 256, 64, 64, 8), 64) == CHORD_MOE_DECODE_WARP);
  // A top-k past warp decode's 32: indexed.
  CHECK(path_of(shape(CHORD_WEIGHT_INT4_GROUP32, 2048, 256, 64, 64, 40), 1) == CHORD_MOE_DECODE_INDEXED);
  // Neither: MXFP8 past 128 tokens.
  int32_t p = -1;
  const chord_moe_shape_t mx = shape(CHORD_WEIGHT_MXFP8, 7168, 256, 384, 384, 8);
  CHECK(chord_moe_decode_path(&mx, 129, &p) == CHORD_ERROR_UNSUPPORTED);
  CHECK(std::string(chord_last_error()).find("neither decode path") != std::string::npos);
}

TEST_CASE("decode path: the model orders the paths sensibly", "[moe_decode_path]") {
  using chordrt::heuristics::WarpDecodeShape;
  for (const chord_moe_shape_t& s : kInt4Shapes) {
    INFO("hidden " << s.hidden << " intermediate " << s.intermediate << " experts " << s.num_experts);
    // One token: warp decode (two kernels, no align or combine) is modeled faster.
    CHECK(path_of(s, 1) == CHORD_MOE_DECODE_WARP);
    // Once indexed decode wins it keeps winning for larger batches.
    bool indexed = false;
    for (int64_t m = 1; m <= 128; ++m) {
      const bool now = path_of(s, m) == CHORD_MOE_DECODE_INDEXED;
      CHECK((now || !indexed));
      indexed = indexed || now;
    }
    // The modeled times grow with the batch.
    const WarpDecodeShape ws = chordrt::ops::heuristic_shape(s);
    const auto t8 = chordrt::heuristics::model_decode_path_times(ws, 8);
    const auto t64 = chordrt::heuristics::model_decode_path_times(ws, 64);
    CHECK(t64.warp_us > t8.warp_us);
    CHECK(t64.indexed_us > t8.indexed_us);
  }
  // The C++ API says what the C ABI says.
  CHECK(chordrt::moe_decode_path(kInt4Shapes[0], 128) == path_of(kInt4Shapes[0], 128));
}

TEST_CASE("decode path: bad arguments are rejected", "[moe_decode_path][capi]") {
  int32_t p = -1;
  const chord_moe_shape_t ok = kInt4Shapes[0];
  CHECK(chord_moe_decode_path(nullptr, 8, &p) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK(chord_moe_decode_path(&ok, 8, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK(chord_moe_decode_path(&ok, 0, &p) == CHORD_ERROR_INVALID_ARGUMENT);
  chord_moe_shape_t bad = ok;
  bad.top_k = 385;  // more than the global experts
  CHECK(chord_moe_decode_path(&bad, 8, &p) == CHORD_ERROR_INVALID_ARGUMENT);
  bad = ok;
  bad.num_global_experts = 8;  // fewer ids than local experts
  CHECK(chord_moe_decode_path(&bad, 8, &p) == CHORD_ERROR_INVALID_ARGUMENT);
  bad = ok;
  bad.format = 7;
  CHECK(chord_moe_decode_path(&bad, 8, &p) == CHORD_ERROR_INVALID_ARGUMENT);
  bad = ok;
  bad.struct_size = 8;  // older than the struct's first version
  CHECK(chord_moe_decode_path(&bad, 8, &p) == CHORD_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("decode path: the model picks the measured faster path, or one close to it", "[moe_decode_path]") {
  // bench/results/decode_crossover_bench-h200-20261203a.json (H200, graph replays): shape index into
  // kInt4Shapes, tokens, warp decode µs, indexed decode µs.
  struct Measured {
    int shape;
    int64_t tokens;
    double warp_us, indexed_us;
  };
  const Measured measured[] = {
      {0, 1, 18.1, 54.0},    {0, 2, 28.1, 57.9},    {0, 4, 39.6, 64.5},    {0, 8, 70.5, 85.2},
      {0, 16, 120.2, 124.8}, {0, 32, 197.3, 204.7}, {0, 64, 348.6, 296.5}, {0, 128, 613.2, 354.7},
      {1, 1, 22.0, 57.6},    {1, 2, 16.3, 39.8},    {1, 4, 61.3, 91.0},    {1, 8, 54.9, 105.2},
      {1, 16, 86.5, 110.5},  {1, 32, 184.6, 196.7}, {1, 64, 316.7, 337.1}, {1, 128, 413.5, 335.9},
      {2, 1, 19.3, 27.2},    {2, 2, 32.4, 31.4},    {2, 4, 55.1, 38.8},    {2, 8, 96.5, 59.9},
      {2, 16, 159.9, 84.5},  {2, 32, 210.3, 102.2}, {2, 64, 187.3, 113.9}, {2, 128, 254.9, 127.5},
      {3, 1, 23.1, 56.9},    {3, 2, 32.0, 71.0},    {3, 4, 51.6, 98.7},    {3, 8, 89.6, 102.4},
      {3, 16, 92.7, 119.0},  {3, 32, 164.6, 189.9}, {3, 64, 237.2, 213.9}, {3, 128, 317.9, 262.8},
      {4, 1, 16.5, 37.0},    {4, 2, 25.0, 40.0},    {4, 4, 40.1, 49.3},    {4, 8, 66.8, 64.5},
      {4, 16, 108.4, 99.5},  {4, 32, 142.4, 117.2}, {4, 64, 136.6, 130.1}, {4, 128, 280.7, 146.8},
      {5, 1, 25.0, 31.0},    {5, 2, 42.5, 36.0},    {5, 4, 70.9, 45.8},    {5, 8, 116.3, 66.9},
      {5, 16, 172.8, 91.4},  {5, 32, 200.5, 101.6}, {5, 64, 222.5, 123.0}, {5, 128, 302.0, 132.4},
  };
  int agree = 0;
  for (const Measured& m : measured) {
    INFO("shape " << m.shape << " tokens " << m.tokens);
    const bool indexed = path_of(kInt4Shapes[m.shape], m.tokens) == CHORD_MOE_DECODE_INDEXED;
    const double chosen = indexed ? m.indexed_us : m.warp_us, best = std::min(m.warp_us, m.indexed_us);
    CHECK(chosen <= 1.2 * best);  // a wrong pick costs at most 20%
    agree += chosen == best;
  }
  CHECK(agree >= 44);  // of 48 (the misses: at 32-64 tokens on the 7168-wide EP shapes, within 16%)
}
