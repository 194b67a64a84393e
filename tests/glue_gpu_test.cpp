// [gpu] tests of the MoE glue kernels against plain CPU references, on fresh random data with poisoned
// outputs; CUDA graph capture and replay; the typed error for a miss inside a capture.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>

#include "chordrt/chordrt.h"
#include "chordrt/chordrt.hpp"
#include "tests/gpu_support.hpp"

using chordrt::test::bf16_to_float;
using chordrt::test::DeviceBuffer;
using chordrt::test::float_to_bf16;

namespace {

struct AlignResult {
  std::vector<int32_t> sorted, experts;
  int32_t total = 0;
};

// The glue ops' C calls from positional arguments (the tests' shorthand).
chord_status_t align(const int32_t* ids, int64_t tokens, int32_t top_k, int32_t experts, int32_t block, int32_t* sorted,
                     int64_t sorted_cap, int32_t* expert_ids, int64_t blocks_cap, int32_t* total, const int32_t* map,
                     CUstream stream) {
  chord_moe_align_args_t a{sizeof(a), ids,        tokens,     top_k,      experts, block,
                           sorted,    sorted_cap, expert_ids, blocks_cap, total,   map};
  return chord_moe_align(&a, stream);
}

chord_status_t silu(const void* in, void* out, int64_t rows, int64_t inter, CUstream stream) {
  const chord_silu_and_mul_args_t a{sizeof(a), in, out, rows, inter};
  return chord_silu_and_mul(&a, stream);
}

chord_status_t combine(const void* rows, const float* w, void* out, int64_t tokens, int32_t top_k, int64_t hidden,
                       const int32_t* ids, const int32_t* map, int32_t experts, CUstream stream) {
  const chord_moe_combine_args_t a{sizeof(a), rows, w, out, tokens, top_k, hidden, ids, map, experts};
  return chord_moe_combine(&a, stream);
}

// vLLM's contract, written the obvious way.
AlignResult reference_align(const std::vector<int32_t>& ids, int experts, int block, const std::vector<int32_t>* map,
                            size_t sorted_cap, size_t blocks_cap) {
  const int32_t routes = static_cast<int32_t>(ids.size());
  AlignResult r;
  r.sorted.assign(sorted_cap, routes);
  r.experts.assign(blocks_cap, -1);
  int32_t pos = 0;
  for (int e = 0; e < experts; ++e) {
    int32_t start = pos;
    for (int32_t i = 0; i < routes; ++i) {
      if (ids[i] == e) r.sorted[pos++] = i;
    }
    pos = start + (pos - start + block - 1) / block * block;
    for (int32_t b = start / block; b < pos / block; ++b) r.experts[b] = map ? (*map)[e] : e;
  }
  r.total = pos;
  return r;
}

enum class Routing { kUniform, kOneHot, kEvenOnly, kWithInvalid };

std::vector<int32_t> make_routing(int64_t tokens, int top_k, int experts, Routing kind, std::mt19937& rng) {
  std::vector<int32_t> ids(tokens * top_k);
  std::vector<int32_t> perm(experts);
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t t = 0; t < tokens; ++t) {
    std::shuffle(perm.begin(), perm.end(), rng);  // distinct experts per token, as a router gives
    for (int j = 0; j < top_k; ++j) {
      int32_t e = perm[j % experts];
      if (kind == Routing::kOneHot) e = 3 % experts;
      if (kind == Routing::kEvenOnly) e = (e / 2) * 2;
      if (kind == Routing::kWithInvalid && (t * top_k + j) % 7 == 0) e = (t % 2) ? -1 : experts + 5;
      ids[t * top_k + j] = e;
    }
  }
  return ids;
}

void check_align(int64_t tokens, int top_k, int experts, int block, Routing kind, bool with_map, std::mt19937& rng) {
  INFO("tokens=" << tokens << " top_k=" << top_k << " experts=" << experts << " block=" << block
                 << " routing=" << static_cast<int>(kind) << " map=" << with_map);
  const auto ids = make_routing(tokens, top_k, experts, kind, rng);
  std::vector<int32_t> map(experts);
  for (auto& m : map) m = static_cast<int32_t>(rng() % 3) == 0 ? -1 : static_cast<int32_t>(rng() % experts);
  // Over-allocated, as vLLM does, and poisoned.
  const int64_t cap = chord_moe_align_sorted_capacity(tokens, top_k, experts, block) + 37;
  const int64_t blocks_cap = (cap + block - 1) / block + 5;
  DeviceBuffer<int32_t> d_ids(ids), d_map(map), d_sorted(cap), d_experts(blocks_cap), d_total(1);
  d_sorted.poison(0x7f);
  d_experts.poison(0x7f);
  d_total.poison(0x7f);
  REQUIRE(align(d_ids.get(), tokens, top_k, experts, block, d_sorted.get(), cap, d_experts.get(), blocks_cap,
                d_total.get(), with_map ? d_map.get() : nullptr, nullptr) == CHORD_SUCCESS);
  const auto want = reference_align(ids, experts, block, with_map ? &map : nullptr, cap, blocks_cap);
  CHECK(d_total.download()[0] == want.total);
  CHECK(d_sorted.download() == want.sorted);
  CHECK(d_experts.download() == want.experts);
}

}  // namespace

TEST_CASE("moe_align matches vLLM's contract", "[gpu][glue]") {
  CHORD_REQUIRE_GPU();
  std::mt19937 rng(1234);
  for (int64_t tokens : {1, 8, 64, 1000, 8192}) {
    for (int top_k : {1, 4, 8}) {
      for (int experts : {8, 384}) {
        check_align(tokens, top_k, experts, 16, Routing::kUniform, false, rng);
      }
    }
  }
}

// (Separate test cases so that a sanitizer run can take them side by side.)
TEST_CASE("moe_align on one-hot, skewed and invalid routings", "[gpu][glue]") {
  CHORD_REQUIRE_GPU();
  std::mt19937 rng(1235);
  for (Routing kind : {Routing::kOneHot, Routing::kEvenOnly, Routing::kWithInvalid}) {
    for (int block : {8, 64, 128}) {
      check_align(8192, 8, 384, block, kind, false, rng);
      check_align(5, 8, 384, block, kind, true, rng);
    }
  }
}

TEST_CASE("moe_align with expert maps, no tokens, and either side of the cluster switch", "[gpu][glue]") {
  CHORD_REQUIRE_GPU();
  std::mt19937 rng(1236);
  check_align(4096, 8, 384, 32, Routing::kUniform, true, rng);   // Kimi EP8-style map
  check_align(2048, 8, 1024, 64, Routing::kUniform, true, rng);  // the 512-thread configuration
  check_align(0, 8, 384, 16, Routing::kUniform, false, rng);     // no tokens: only the padding contract
  // Either side of the one-CTA / 8-CTA-cluster switch (2048 routes), and a cluster with few routes per warp.
  check_align(256, 8, 384, 16, Routing::kUniform, true, rng);
  check_align(2049, 1, 384, 16, Routing::kUniform, false, rng);
  check_align(2049, 1, 7, 16, Routing::kOneHot, false, rng);
}

TEST_CASE("silu_and_mul matches an FP32 reference", "[gpu][glue]") {
  CHORD_REQUIRE_GPU();
  std::mt19937 rng(42);
  for (int64_t rows : {1, 8, 333, 8192}) {
    for (int64_t inter : {256, 2048, 7, 100, 2050}) {
      INFO("rows=" << rows << " inter=" << inter);
      const auto in = chordrt::test::random_bf16(rows * 2 * inter, rng, 2.0f);
      DeviceBuffer<uint16_t> d_in(in), d_out(rows * inter);
      d_out.poison(0xff);  // BF16 NaN
      REQUIRE(silu(d_in.get(), d_out.get(), rows, inter, nullptr) == CHORD_SUCCESS);
      const auto out = d_out.download();
      int64_t off_by_one = 0, bad = 0;
      double err = 0, norm = 0;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t i = 0; i < inter; ++i) {
          const double g = bf16_to_float(in[r * 2 * inter + i]), u = bf16_to_float(in[r * 2 * inter + inter + i]);
          const double ref = g / (1.0 + std::exp(-g)) * u;
          const uint16_t got = out[r * inter + i];
          const int diff = std::abs(static_cast<int>(got) - static_cast<int>(float_to_bf16(static_cast<float>(ref))));
          // Finite, and within one BF16 ulp of the rounded reference (__expf against exp).
          bad += !std::isfinite(bf16_to_float(got)) || diff > 1;
          off_by_one += diff;
          err += (bf16_to_float(got) - ref) * (bf16_to_float(got) - ref);
          norm += ref * ref;
        }
      }
      CHECK(bad == 0);
      CHECK(std::sqrt(err / std::max(norm, 1e-30)) < 4e-3);
      CHECK(off_by_one <= rows * inter / 100 + 1);
    }
  }
}

TEST_CASE("moe_combine matches an FP32 reference, with and without the EP filter", "[gpu][glue]") {
  CHORD_REQUIRE_GPU();
  std::mt19937 rng(7);
  struct Case {
    int64_t tokens;
    int top_k;
    int64_t hidden;
  };
  std::vector<Case> cases;
  for (int64_t tokens : {1, 8, 1000}) {
    for (int top_k : {1, 4, 8}) {
      for (int64_t hidden : {7168, 2048, 100}) cases.push_back({tokens, top_k, hidden});
    }
  }
  cases.push_back({8192, 8, 7168});  // a prefill step of Kimi (the CPU reference is the slow part)
  for (const auto& [tokens, top_k, hidden] : cases) {
    for (bool filtered : {false, true}) {
      INFO("tokens=" << tokens << " top_k=" << top_k << " hidden=" << hidden << " filtered=" << filtered);
      const int experts = 64;
      auto rows = chordrt::test::random_bf16(tokens * top_k * hidden, rng);
      std::vector<float> w(tokens * top_k);
      std::uniform_real_distribution<float> u(0.0f, 1.0f);
      for (auto& x : w) x = u(rng);
      std::vector<int32_t> ids(tokens * top_k), map(experts);
      for (auto& e : ids) e = static_cast<int32_t>(rng() % experts);
      for (auto& m : map) m = (rng() % 2) ? static_cast<int32_t>(rng() % 8) : -1;
      auto local = [&](int64_t route) { return !filtered || map[ids[route]] >= 0; };
      // Rows of non-local routes were never written by the GEMM: NaN must not leak into the sum.
      for (int64_t route = 0; route < tokens * top_k; ++route) {
        if (!local(route)) std::fill_n(rows.begin() + route * hidden, hidden, uint16_t{0x7fc0});
      }
      DeviceBuffer<uint16_t> d_rows(rows), d_out(tokens * hidden);
      DeviceBuffer<float> d_w(w);
      DeviceBuffer<int32_t> d_ids(ids), d_map(map);
      d_out.poison(0xff);
      REQUIRE(combine(d_rows.get(), d_w.get(), d_out.get(), tokens, top_k, hidden, filtered ? d_ids.get() : nullptr,
                      filtered ? d_map.get() : nullptr, filtered ? experts : 0, nullptr) == CHORD_SUCCESS);
      const auto out = d_out.download();
      double err = 0, norm = 0;
      int64_t bad = 0;
      for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t h = 0; h < hidden; ++h) {
          float acc = 0.0f;  // same FP32 order as the kernel
          for (int j = 0; j < top_k; ++j) {
            const int64_t route = t * top_k + j;
            if (local(route)) acc = std::fma(w[route], bf16_to_float(rows[route * hidden + h]), acc);
          }
          const float got = bf16_to_float(out[t * hidden + h]);
          bad += !std::isfinite(got) ||
                 std::abs(static_cast<int>(out[t * hidden + h]) - static_cast<int>(float_to_bf16(acc))) > 1;
          err += double(got - acc) * (got - acc);
          norm += double(acc) * acc;
        }
      }
      CHECK(bad == 0);  // finite and within one BF16 ulp of the same-order FP32 sum
      CHECK(std::sqrt(err / std::max(norm, 1e-30)) < 4e-3);
    }
  }
}

TEST_CASE("a CUDA graph captured around warmed glue kernels replays on new inputs", "[gpu][glue][graph]") {
  CHORD_REQUIRE_GPU();
  const auto& api = chordrt::driver().api;
  std::mt19937 rng(99);
  const int64_t tokens = 64, inter = 2048, hidden = 512;
  const int top_k = 8, experts = 384, block = 16;
  const int64_t cap = chord_moe_align_sorted_capacity(tokens, top_k, experts, block);
  const int64_t blocks_cap = (cap + block - 1) / block;
  DeviceBuffer<int32_t> d_ids(tokens * top_k), d_sorted(cap), d_experts(blocks_cap), d_total(1);
  DeviceBuffer<uint16_t> d_act(tokens * top_k * 2 * inter), d_mid(tokens * top_k * inter);
  DeviceBuffer<uint16_t> d_rows(tokens * top_k * hidden), d_out(tokens * hidden);
  DeviceBuffer<float> d_w(tokens * top_k);
  CUstream stream = nullptr;
  chordrt::check_cuda(api.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  auto run_all = [&] {
    REQUIRE(align(d_ids.get(), tokens, top_k, experts, block, d_sorted.get(), cap, d_experts.get(), blocks_cap,
                  d_total.get(), nullptr, stream) == CHORD_SUCCESS);
    REQUIRE(silu(d_act.get(), d_mid.get(), tokens * top_k, inter, stream) == CHORD_SUCCESS);
    REQUIRE(combine(d_rows.get(), d_w.get(), d_out.get(), tokens, top_k, hidden, nullptr, nullptr, 0, stream) ==
            CHORD_SUCCESS);
  };
  auto fresh_inputs = [&] {
    d_ids.upload(make_routing(tokens, top_k, experts, Routing::kUniform, rng));
    d_act.upload(chordrt::test::random_bf16(d_act.size(), rng));
    d_rows.upload(chordrt::test::random_bf16(d_rows.size(), rng));
    std::vector<float> w(tokens * top_k);
    for (auto& x : w) x = static_cast<float>(rng() % 1000) / 1000.0f;
    d_w.upload(w);
  };
  fresh_inputs();
  run_all();  // warm: compiles/loads outside the capture
  chordrt::check_cuda(api.cuStreamSynchronize(stream), "sync");
  const auto warm_sorted = d_sorted.download();

  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  chordrt::check_cuda(api.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "begin capture");
  run_all();
  chordrt::check_cuda(api.cuStreamEndCapture(stream, &graph), "end capture");
  chordrt::check_cuda(api.cuGraphInstantiateWithFlags(&exec, graph, 0), "instantiate");

  fresh_inputs();
  d_sorted.poison(0x7f);
  d_mid.poison(0xff);
  d_out.poison(0xff);
  chordrt::check_cuda(api.cuGraphLaunch(exec, stream), "graph launch");
  chordrt::check_cuda(api.cuStreamSynchronize(stream), "sync");
  const auto replay_sorted = d_sorted.download();
  const auto replay_mid = d_mid.download();
  const auto replay_out = d_out.download();
  // Same work run eagerly on the same inputs must give the same bits.
  run_all();
  chordrt::check_cuda(api.cuStreamSynchronize(stream), "sync");
  CHECK(replay_sorted == d_sorted.download());
  CHECK(replay_sorted != warm_sorted);  // the replay really read the new routing
  CHECK(replay_mid == d_mid.download());
  CHECK(replay_out == d_out.download());
  api.cuGraphExecDestroy(exec);
  api.cuGraphDestroy(graph);
  api.cuStreamDestroy(stream);
}

TEST_CASE("a kernel miss inside a capture is a typed error naming the descriptor", "[gpu][glue][graph]") {
  CHORD_REQUIRE_GPU();
  const auto& api = chordrt::driver().api;
  CUstream stream = nullptr;
  chordrt::check_cuda(api.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  // An expert count and block size no other test uses, so this descriptor is not loaded yet.
  const int experts = 77, block = 24, tokens = 3, top_k = 2;
  const int64_t cap = chord_moe_align_sorted_capacity(tokens, top_k, experts, block);
  DeviceBuffer<int32_t> d_ids(std::vector<int32_t>{1, 2, 3, 4, 5, 6}), d_sorted(cap), d_experts(cap), d_total(1);
  chordrt::check_cuda(api.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "begin capture");
  const chord_status_t s = align(d_ids.get(), tokens, top_k, experts, block, d_sorted.get(), cap, d_experts.get(), cap,
                                 d_total.get(), nullptr, stream);
  const std::string message = chord_last_error();
  CUgraph graph = nullptr;
  chordrt::check_cuda(api.cuStreamEndCapture(stream, &graph), "end capture");
  CHECK(s == CHORD_ERROR_CAPTURE_MISS);
  CHECK(message.find("glue.moe_align") != std::string::npos);
  CHECK(message.find("num_experts=77") != std::string::npos);
  if (graph) api.cuGraphDestroy(graph);
  // Outside the capture the same call compiles/loads and succeeds.
  CHECK(align(d_ids.get(), tokens, top_k, experts, block, d_sorted.get(), cap, d_experts.get(), cap, d_total.get(),
              nullptr, stream) == CHORD_SUCCESS);
  chordrt::check_cuda(api.cuStreamSynchronize(stream), "sync");
  api.cuStreamDestroy(stream);
}
