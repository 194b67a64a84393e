// Launch configurations of the glue kernels: pure functions, checked exhaustively over ranges.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "heuristics/glue.hpp"
#include "kernels_src/glue/params.cuh"

using chordrt::heuristics::ElementwiseConfig;
using chordrt::heuristics::rowwise_grid;
using chordrt::heuristics::select_moe_align;
using chordrt::heuristics::select_rowwise;

namespace {

bool is_power_of_two(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

std::vector<int64_t> row_sizes() {
  std::vector<int64_t> sizes;
  for (int64_t n = 1; n <= 4200; ++n) sizes.push_back(n);
  for (int64_t n :
       std::initializer_list<int64_t>{5120, 6144, 7168, 8192, 12288, 14336, 16384, 18432, 28672, 65536, 65537, 1 << 20,
                                      (1 << 20) + 2, (1 << 20) + 4, 2147483647, 2147483640}) {
    sizes.push_back(n);
  }
  return sizes;
}

}  // namespace

TEST_CASE("select_rowwise: widest dividing vector, narrowest covering CTA", "[heuristics]") {
  for (int64_t n : row_sizes()) {
    INFO("row " << n);
    const ElementwiseConfig c = select_rowwise(n);
    // vec: the largest of 8/4/2/1 that divides the row.
    int expected_vec = 1;
    for (int v : {8, 4, 2}) {
      if (n % v == 0) {
        expected_vec = v;
        break;
      }
    }
    REQUIRE(c.vec == expected_vec);
    // threads: a power of two in [32, 256], covering the row's vectors when it can, and no wider
    // than needed.
    REQUIRE(is_power_of_two(c.threads));
    REQUIRE(c.threads >= 32);
    REQUIRE(c.threads <= 256);
    const int64_t vecs = n / c.vec;
    REQUIRE((c.threads >= vecs || c.threads == 256));
    REQUIRE((c.threads == 32 || c.threads / 2 < vecs));
    // rows per CTA: short rows are stacked so that every CTA has 256 threads.
    REQUIRE(c.rows_per_cta * c.threads == 256);
  }
  CHECK(select_rowwise(256).rows_per_cta == 8);  // Kimi TP8's intermediate: 8 rows of 32 threads
  CHECK(select_rowwise(7168).rows_per_cta == 1);
  // Spot values.
  CHECK(select_rowwise(2048).vec == 8);
  CHECK(select_rowwise(2048).threads == 256);
  CHECK(select_rowwise(256).threads == 32);
  CHECK(select_rowwise(264).threads == 64);  // 33 vectors
  CHECK(select_rowwise(7).vec == 1);
  CHECK(select_rowwise(7).threads == 32);
  CHECK(select_rowwise(100).vec == 4);
  CHECK(select_rowwise(100).threads == 32);
  CHECK(select_rowwise(7168).vec == 8);
  CHECK(select_rowwise(7168).threads == 256);
  CHECK(select_rowwise(258).vec == 2);
  CHECK(select_rowwise(258).threads == 256);  // 129 vectors
}

TEST_CASE("rowwise_grid: x covers the row, y the groups of rows_per_cta rows capped at 65535", "[heuristics]") {
  for (int64_t n : row_sizes()) {
    const ElementwiseConfig c = select_rowwise(n);
    const int64_t rows = 10 * c.rows_per_cta;
    const auto g = rowwise_grid(rows, n, c);
    REQUIRE(rowwise_grid(rows - 1, n, c).y == (c.rows_per_cta > 1 ? 10u : 9u));  // a partial group gets a CTA
    REQUIRE(rowwise_grid(rows + 1, n, c).y == 11);
    const int64_t per_cta = int64_t{c.vec} * c.threads;
    INFO("row " << n << " x " << g.x);
    REQUIRE(g.x >= 1);
    REQUIRE(int64_t{g.x} * per_cta >= n);       // covers the row
    REQUIRE((int64_t{g.x} - 1) * per_cta < n);  // no CTA is idle
    REQUIRE(g.y == 10);
  }
  const ElementwiseConfig c = select_rowwise(7168);  // 8 x 256 = 2048 per CTA
  CHECK(rowwise_grid(1, 7168, c).x == 4);
  CHECK(rowwise_grid(1, 7168, c).y == 1);
  CHECK(rowwise_grid(0, 7168, c).y == 1);
  CHECK(rowwise_grid(65534, 7168, c).y == 65534);
  CHECK(rowwise_grid(65535, 7168, c).y == 65535);
  CHECK(rowwise_grid(65536, 7168, c).y == 65535);
  CHECK(rowwise_grid(int64_t{1} << 40, 7168, c).y == 65535);
  CHECK(rowwise_grid(3, 7, select_rowwise(7)).x == 1);
  CHECK(rowwise_grid(3, 2147483647, select_rowwise(2147483647)).x == (2147483647u + 255u) / 256u);
  const ElementwiseConfig short_rows = select_rowwise(256);  // 8 rows per CTA
  CHECK(rowwise_grid(65536, 256, short_rows).y == 8192);
  CHECK(rowwise_grid(8 * 65535 + 1, 256, short_rows).y == 65535);
}

TEST_CASE("select_moe_align: the most warps that fit, a cluster of 8 above 2048 routes", "[heuristics]") {
  using chordrt::heuristics::kMoeAlignClusterMinRoutes;
  using chordrt::heuristics::moe_align_configs;
  const chordrt::DeviceFacts h200;  // 227 KB opt-in
  auto smem = [](int threads, int e) { return 4 * ((threads / 32) * e + 4 * e + 1 + threads / 32); };
  for (int e = 1; e <= chord::kMoeAlignMaxExperts; ++e) {
    INFO("experts " << e);
    const int threads = select_moe_align(e, 1, h200).threads;
    REQUIRE(threads == 1024);  // up to 1024 experts all 32 warps fit on an H200
    REQUIRE(smem(threads, e) <= h200.max_smem_per_block_optin);
  }
  chordrt::DeviceFacts small = h200;
  small.max_smem_per_block_optin = 48 * 1024;  // a device without the opt-in carve-out
  for (int e : {100, 384, 1024}) {
    INFO("experts " << e);
    const int threads = select_moe_align(e, 1, small).threads;
    REQUIRE(threads % 32 == 0);
    REQUIRE(threads >= 32);
    REQUIRE(smem(threads, e) <= small.max_smem_per_block_optin);
    if (threads < 1024) REQUIRE(smem(threads + 32, e) > small.max_smem_per_block_optin);  // the most that fit
  }
  CHECK(select_moe_align(384, 1, small).threads < 1024);
  // Cluster size from the route count; the thread count does not depend on it.
  CHECK(select_moe_align(384, 0, h200).cluster == 1);
  CHECK(select_moe_align(384, kMoeAlignClusterMinRoutes, h200).cluster == 1);
  CHECK(select_moe_align(384, kMoeAlignClusterMinRoutes + 1, h200).cluster == 8);
  CHECK(select_moe_align(384, int64_t{1} << 30, h200).cluster == 8);
  CHECK(select_moe_align(384, int64_t{1} << 30, h200).threads == select_moe_align(384, 1, h200).threads);
  // moe_align_configs lists exactly what dispatch can pick, so that prewarm covers it.
  const auto configs = moe_align_configs(384, h200);
  REQUIRE(configs.size() == 2);
  for (int64_t routes : {int64_t{0}, int64_t{64}, int64_t{2048}, int64_t{2049}, int64_t{65536}}) {
    const auto c = select_moe_align(384, routes, h200);
    CHECK(std::any_of(configs.begin(), configs.end(),
                      [&](const auto& k) { return k.threads == c.threads && k.cluster == c.cluster; }));
  }
}
