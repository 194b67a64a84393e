// The DSA indexer without a GPU: cache page sizes, the launch heuristics (pure functions), the families'
// descriptor checks and the C ABI's argument validation.
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <tuple>

#include "chordrt/chordrt.h"
#include "heuristics/dsa_indexer.hpp"
#include "runtime/driver.hpp"
#include "runtime/kernel_registry.hpp"
#include "runtime/ops/dsa_indexer.hpp"
#include "tests/test_support.hpp"

using Catch::Matchers::Contains;
using chordrt::heuristics::DsaLogitsConfig;
using chordrt::test::kHopper;

namespace {

alignas(64) unsigned char g_host[4096];

template <typename T>
const T* host(size_t offset = 0) {
  return reinterpret_cast<const T*>(g_host + offset);
}

// Arguments that pass every check (host addresses: nothing is launched on them in these tests).
chord_dsa_indexer_args_t valid_logits_args() {
  chord_dsa_indexer_args_t a{};
  a.struct_size = sizeof a;
  a.num_heads = 64;
  a.num_tokens = 3;
  a.q = g_host;
  a.weights = host<float>();
  a.cache = g_host;
  a.page_size = 64;
  a.num_pages = 16;
  a.block_table = host<int32_t>();
  a.max_pages_per_seq = 4;
  a.context_lens = host<int32_t>();
  a.max_context = 256;
  a.logits = reinterpret_cast<float*>(g_host);
  return a;
}

chord_dsa_topk_args_t valid_topk_args() {
  chord_dsa_topk_args_t a{};
  a.struct_size = sizeof a;
  a.num_tokens = 3;
  a.topk = 2048;
  a.logits = host<float>();
  a.max_context = 4096;
  a.context_lens = host<int32_t>();
  a.indices = reinterpret_cast<int32_t*>(g_host);
  return a;
}

chord_indexer_cache_write_args_t valid_write_args() {
  chord_indexer_cache_write_args_t a{};
  a.struct_size = sizeof a;
  a.num_tokens = 5;
  a.k = g_host;
  a.slot_mapping = host<int64_t>();
  a.cache = g_host;
  a.page_size = 64;
  a.num_pages = 4;
  return a;
}

void expect_message(std::initializer_list<const char*> words) {
  const std::string msg = chord_last_error();
  for (const char* w : words) CHECK_THAT(msg, Contains(w));
}

template <typename Args, typename Call>
void expect_error(Call call, const Args& a, chord_status_t want, std::initializer_list<const char*> words) {
  CHECK(call(&a, nullptr) == want);
  expect_message(words);
}

bool driver_ready() { return chordrt::driver().state == chordrt::DriverState::kReady; }

}  // namespace

TEST_CASE("indexer cache pages are 132 bytes per token", "[dsa_indexer]") {
  CHECK(chord_indexer_cache_page_bytes(64) == 64u * 132);
  CHECK(chord_indexer_cache_page_bytes(1) == 132u);
  CHECK(chord_indexer_cache_page_bytes(1024) == 1024u * 132);
  CHECK(chord_indexer_cache_page_bytes(0) == 0u);
  CHECK(chord_indexer_cache_page_bytes(-64) == 0u);
  CHECK(chord_indexer_cache_page_bytes(1025) == 0u);
}

TEST_CASE("dsa logits heuristics: waves, ring depth", "[dsa_indexer]") {
  using namespace chordrt::heuristics;
  namespace di = chord::dsa_indexer;
  const chordrt::DeviceFacts h200{};
  // The decode step the targets are about: 64 queries of 64K keys, 4 CTAs per SM -> 4096 CTAs of 1024
  // (>= 4 waves), a ring of 5 tiles (+ 8 KB of q) in a quarter of the SM's shared memory.
  const auto big = select_dsa_logits({64, 64, 64, 65536}, h200);
  CHECK(big.keys_per_cta == 1024);
  CHECK(big.stages == 5);
  CHECK(big.tma == 1);
  CHECK(dsa_logits_chunks(65536, big) == 64);
  // One query: the smallest range (the grid is what it is); 128 heads: 16 KB of q leaves room for 4 stages.
  CHECK(select_dsa_logits({64, 64, 1, 65536}, h200).keys_per_cta == di::kMinKeysPerCta);
  CHECK(select_dsa_logits({128, 64, 64, 65536}, h200).stages == 4);
  // Page size 1 keeps its per-key page list small.
  CHECK(select_dsa_logits({64, 1, 1024, 65536}, h200).keys_per_cta <= 2048);
  CHECK(dsa_logits_chunks(0, big) == 0);
  CHECK(dsa_logits_chunks(1025, big) == 2);
  for (const int heads : {8, 24, 32, 64, 72, 128}) {
    for (const int page : {1, 2, 3, 16, 64, 100, 1024}) {
      for (const auto& [tokens, context] : {std::tuple{1, 4}, {8, 65536}, {64, 65536}, {128, 131072}}) {
        const auto c = select_dsa_logits({heads, page, tokens, context}, h200);
        INFO(heads << " heads, page " << page << ", " << tokens << " x " << context);
        CHECK(dsa_logits_config_error(heads, page, c, h200).empty());
        // The resident CTAs per SM the launch bounds promise also fit in shared memory (+1 KB each).
        CHECK(di::kLogitsCtasPerSm * (dsa_logits_dynamic_smem(heads, page, c) + 1024) <=
              h200.max_smem_per_block_optin + 1024);
        CHECK(c.stages >= di::kMinStages);
        CHECK(c.tma == (di::logits_uses_tma(page) ? 1 : 0));
      }
    }
  }
}

TEST_CASE("dsa logits tiles arrive by tensor copy where a page's layout allows it", "[dsa_indexer]") {
  namespace di = chord::dsa_indexer;
  for (const int page : {4, 8, 16, 32, 64, 128, 192, 1024}) CHECK(di::logits_uses_tma(page));
  // Unaligned page starts (132 * page bytes apart) and tiles that straddle pages of uneven length.
  for (const int page : {1, 2, 3, 6, 24, 48, 100, 1000}) CHECK_FALSE(di::logits_uses_tma(page));
}

TEST_CASE("dsa config checks name what is wrong", "[dsa_indexer]") {
  using namespace chordrt::heuristics;
  const DsaLogitsConfig ok{4, 1024, 1};
  CHECK(dsa_logits_config_error(64, 64, ok).empty());
  CHECK(dsa_logits_config_error(128, 64, ok).empty());
  CHECK_THAT(dsa_logits_config_error(12, 64, ok), Contains("multiple of 8"));
  CHECK_THAT(dsa_logits_config_error(136, 64, ok), Contains("multiple of 8"));
  CHECK_THAT(dsa_logits_config_error(64, 0, ok), Contains("page_size"));
  CHECK_THAT(dsa_logits_config_error(64, 64, {1, 1024, 1}), Contains("stages"));
  CHECK_THAT(dsa_logits_config_error(64, 64, {9, 1024, 1}), Contains("stages"));
  CHECK_THAT(dsa_logits_config_error(64, 64, {4, 1000, 1}), Contains("keys_per_cta"));
  CHECK_THAT(dsa_logits_config_error(64, 64, {4, 128, 1}), Contains("keys_per_cta"));
  CHECK(dsa_logits_config_error(64, 64, {4, 1024, 0}).empty());  // cp.async serves every page size
  CHECK(dsa_logits_config_error(64, 100, {4, 1024, 0}).empty());
  CHECK_THAT(dsa_logits_config_error(64, 100, {4, 1024, 1}), Contains("tma=1 needs a page size"));
  CHECK_THAT(dsa_logits_config_error(64, 64, {4, 1024, 2}), Contains("tma must be 0 or 1"));
  chordrt::DeviceFacts small;  // a device with 64 KB per block
  small.max_smem_per_block_optin = 64 * 1024;
  CHECK_THAT(dsa_logits_config_error(64, 64, {8, 8192, 1}, small), Contains("shared memory"));
  CHECK(dsa_logits_config_error(64, 64, select_dsa_logits({64, 64, 64, 65536}, small), small).empty());
  CHECK(dsa_topk_config_error(select_dsa_topk(2048)).empty());
  CHECK_THAT(dsa_topk_config_error({1024, 100}), Contains("candidates"));
  CHECK_THAT(dsa_topk_config_error({48, 8192}), Contains("threads"));
}

TEST_CASE("CHORD_DSA_CONFIG sets the named fields and names what it cannot parse", "[dsa_indexer]") {
  using namespace chordrt::heuristics;
  DsaLogitsConfig c{5, 1024, 1};
  CHECK(apply_dsa_logits_override("stages=3,tma=0", c).empty());
  CHECK((c.stages == 3 && c.keys_per_cta == 1024 && c.tma == 0));
  CHECK(apply_dsa_logits_override("keys_per_cta=4096", c).empty());
  CHECK(c.keys_per_cta == 4096);
  CHECK_THAT(apply_dsa_logits_override("stages=two", c), Contains("stages"));
  CHECK_THAT(apply_dsa_logits_override("warps=4", c), Contains("warps"));
}

TEST_CASE("dsa indexer families build programs from their keys", "[dsa_indexer]") {
  using namespace chordrt;
  using ops::DsaIndexerLogitsFamily;
  using ops::DsaIndexerTopkFamily;
  const ops::DsaIndexerLogitsKey k = ops::dsa_indexer_logits_key({64, 64, 64, 65536}, {});
  const KernelProgram p = DsaIndexerLogitsFamily::program(k);
  CHECK(p.header == "dsa_indexer/logits.cuh");
  CHECK(p.threads == 128);
  CHECK_THAT(p.name_expression, Contains("indexer_logits_kernel<64, 64, 5, 1024, true>"));
  // By hand: 64 heads x 128 B of q, 5 stages x (64 keys x (128 B + a 4-byte scale) + two mbarriers),
  // 1024 / 64 + 1 block-table entries, 1024 bytes to align the base to the swizzle atom.
  CHECK(p.dynamic_smem == 64 * 128 + 5 * (64 * 132 + 16) + 17 * 4 + 1024);
  const auto t = DsaIndexerTopkFamily::program(ops::dsa_indexer_topk_key(2048, {}));
  CHECK(t.threads == 1024);
  CHECK(t.dynamic_smem == 2048u * 4 + 8192u * 8);  // the 11-bit histogram, 8192 (key, position) candidates
  // A JSON descriptor outside the template's range is refused by the family.
  nlohmann::json j = descriptor_to_json(DsaIndexerLogitsFamily::descriptor(kHopper, k));
  j["fields"]["heads"] = 12;
  chordrt::test::check_invalid_argument([&] { descriptor_from_json(j); }, {"dsa_indexer.logits", "multiple of 8"});
  j = descriptor_to_json(ops::DsaIndexerCacheWriteFamily::descriptor(kHopper, ops::dsa_indexer_cache_write_key({})));
  j["fields"]["warps"] = 0;
  chordrt::test::check_invalid_argument([&] { descriptor_from_json(j); },
                                        {"dsa_indexer.cache_write", "warps must be in [1, 32], got 0"});
  // Every example covers what the tests and prewarm must compile: 32 and 64 heads, pages 64 and 1.
  bool h32p64 = false, h64p64 = false, h32p1 = false, h64p1 = false;
  for (const auto& e : DsaIndexerLogitsFamily::examples({})) {
    h32p64 |= e.heads == 32 && e.page_size == 64;
    h64p64 |= e.heads == 64 && e.page_size == 64;
    h32p1 |= e.heads == 32 && e.page_size == 1;
    h64p1 |= e.heads == 64 && e.page_size == 1;
  }
  CHECK((h32p64 && h64p64 && h32p1 && h64p1));
}

TEST_CASE("chord_dsa_indexer_logits argument checks", "[dsa_indexer][capi]") {
  CHECK(chord_dsa_indexer_logits(nullptr, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  expect_message({"args is null"});
  auto a = valid_logits_args();
  a.struct_size = 8;
  expect_error(chord_dsa_indexer_logits, a, CHORD_ERROR_INVALID_ARGUMENT, {"chord_dsa_indexer_logits", "struct_size"});
  a = valid_logits_args();
  a.num_heads = 12;
  expect_error(chord_dsa_indexer_logits, a, CHORD_ERROR_INVALID_ARGUMENT, {"num_heads", "multiple of 8", "12"});
  a.num_heads = 136;
  expect_error(chord_dsa_indexer_logits, a, CHORD_ERROR_INVALID_ARGUMENT, {"num_heads", "136"});
  a = valid_logits_args();
  a.num_tokens = -1;
  expect_error(chord_dsa_indexer_logits, a, CHORD_ERROR_INVALID_ARGUMENT, {"num_tokens", "-1"});
  a = valid_logits_args();
  a.page_size = 0;
  expect_error(chord_dsa_indexer_logits, a, CHORD_ERROR_INVALID_ARGUMENT, {"page_size", "[1, 1024]", "0"});
  a = valid_logits_args();
  a.num_pages = -3;
  expect_error(chord_dsa_indexer_logits, a, CHORD_ERROR_INVALID_ARGUMENT, {"num_pages", "-3"});
  a = valid_logits_args();
  a.max_context = 258;
  expect_error(chord_dsa_indexer_logits, a, CHORD_ERROR_INVALID_ARGUMENT, {"max_context", "multiple of 4", "258"});
  a = valid_logits_args();
  a.max_pages_per_seq = -1;
  expect_error(chord_dsa_indexer_logits, a, CHORD_ERROR_INVALID_ARGUMENT, {"max_pages_per_seq"});
  a = valid_logits_args();
  a.q = nullptr;
  expect_error(chord_dsa_indexer_logits, a, CHORD_ERROR_INVALID_ARGUMENT, {"q is null"});
  a = valid_logits_args();
  a.q = g_host + 8;
  expect_error(chord_dsa_indexer_logits, a, CHORD_ERROR_INVALID_ARGUMENT, {"q must be 16-byte aligned"});
  a = valid_logits_args();
  a.cache = g_host + 4;
  expect_error(chord_dsa_indexer_logits, a, CHORD_ERROR_INVALID_ARGUMENT, {"cache must be 16-byte aligned"});
  a = valid_logits_args();
  a.logits = reinterpret_cast<float*>(g_host + 4);
  expect_error(chord_dsa_indexer_logits, a, CHORD_ERROR_INVALID_ARGUMENT, {"logits must be 16-byte aligned"});
  a = valid_logits_args();
  a.block_table = nullptr;
  expect_error(chord_dsa_indexer_logits, a, CHORD_ERROR_INVALID_ARGUMENT, {"block_table is null"});
  a = valid_logits_args();
  a.context_lens = nullptr;
  expect_error(chord_dsa_indexer_logits, a, CHORD_ERROR_INVALID_ARGUMENT, {"context_lens is null"});
  a = valid_logits_args();
  a.weights = host<float>(2);
  expect_error(chord_dsa_indexer_logits, a, CHORD_ERROR_INVALID_ARGUMENT, {"weights must be 4-byte aligned"});
  // Nothing to write: null pointers are fine.
  a = chord_dsa_indexer_args_t{};
  a.struct_size = sizeof a;
  a.num_heads = 32;
  a.page_size = 64;
  a.max_context = 1024;
  CHECK(chord_dsa_indexer_logits(&a, nullptr) == CHORD_SUCCESS);
  a.num_tokens = 4;
  a.max_context = 0;
  CHECK(chord_dsa_indexer_logits(&a, nullptr) == CHORD_SUCCESS);
}

TEST_CASE("chord_dsa_topk argument checks", "[dsa_indexer][capi]") {
  CHECK(chord_dsa_topk(nullptr, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  expect_message({"args is null"});
  auto a = valid_topk_args();
  a.struct_size = sizeof a + 8;
  expect_error(chord_dsa_topk, a, CHORD_ERROR_INVALID_ARGUMENT, {"chord_dsa_topk", "struct_size"});
  a = valid_topk_args();
  a.topk = 0;
  expect_error(chord_dsa_topk, a, CHORD_ERROR_INVALID_ARGUMENT, {"topk", "[1, 4096]", "0"});
  a.topk = 4097;
  expect_error(chord_dsa_topk, a, CHORD_ERROR_INVALID_ARGUMENT, {"topk", "4097"});
  a = valid_topk_args();
  a.max_context = 4094;
  expect_error(chord_dsa_topk, a, CHORD_ERROR_INVALID_ARGUMENT, {"max_context", "multiple of 4", "4094"});
  a = valid_topk_args();
  a.block_table = host<int32_t>();
  a.max_pages_per_seq = 64;
  a.page_size = 0;
  expect_error(chord_dsa_topk, a, CHORD_ERROR_INVALID_ARGUMENT, {"page_size", "0"});
  a.page_size = 64;
  a.max_pages_per_seq = 0;
  expect_error(chord_dsa_topk, a, CHORD_ERROR_INVALID_ARGUMENT, {"max_pages_per_seq", "0"});
  a = valid_topk_args();
  a.logits = host<float>(8);
  expect_error(chord_dsa_topk, a, CHORD_ERROR_INVALID_ARGUMENT, {"logits must be 16-byte aligned"});
  a = valid_topk_args();
  a.indices = nullptr;
  expect_error(chord_dsa_topk, a, CHORD_ERROR_INVALID_ARGUMENT, {"indices is null"});
  a = valid_topk_args();
  a.context_lens = nullptr;
  expect_error(chord_dsa_topk, a, CHORD_ERROR_INVALID_ARGUMENT, {"context_lens is null"});
  a = chord_dsa_topk_args_t{};
  a.struct_size = sizeof a;
  a.topk = 2048;
  CHECK(chord_dsa_topk(&a, nullptr) == CHORD_SUCCESS);  // no rows
}

TEST_CASE("chord_indexer_cache_write argument checks", "[dsa_indexer][capi]") {
  CHECK(chord_indexer_cache_write(nullptr, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  expect_message({"args is null"});
  auto a = valid_write_args();
  a.struct_size = 0;
  expect_error(chord_indexer_cache_write, a, CHORD_ERROR_INVALID_ARGUMENT,
               {"chord_indexer_cache_write", "struct_size"});
  a = valid_write_args();
  a.page_size = 2000;
  expect_error(chord_indexer_cache_write, a, CHORD_ERROR_INVALID_ARGUMENT, {"page_size", "2000"});
  a = valid_write_args();
  a.num_pages = -1;
  expect_error(chord_indexer_cache_write, a, CHORD_ERROR_INVALID_ARGUMENT, {"num_pages", "-1"});
  a = valid_write_args();
  a.k = g_host + 8;
  expect_error(chord_indexer_cache_write, a, CHORD_ERROR_INVALID_ARGUMENT, {"k must be 16-byte aligned"});
  a = valid_write_args();
  a.slot_mapping = host<int64_t>(4);
  expect_error(chord_indexer_cache_write, a, CHORD_ERROR_INVALID_ARGUMENT, {"slot_mapping must be 8-byte aligned"});
  a = valid_write_args();
  a.cache = nullptr;
  expect_error(chord_indexer_cache_write, a, CHORD_ERROR_INVALID_ARGUMENT, {"cache is null"});
  a = chord_indexer_cache_write_args_t{};
  a.struct_size = sizeof a;
  a.page_size = 64;
  CHECK(chord_indexer_cache_write(&a, nullptr) == CHORD_SUCCESS);  // no tokens
}

TEST_CASE("dsa calls in compile-only mode", "[dsa_indexer][capi]") {
  if (driver_ready()) {
    SUCCEED("a CUDA driver is ready: the GPU tests cover real launches");
    return;
  }
  const auto l = valid_logits_args();
  const chord_status_t sl = chord_dsa_indexer_logits(&l, nullptr);
  CHECK((sl == CHORD_ERROR_NO_DRIVER || sl == CHORD_ERROR_NO_DEVICE));
  const auto t = valid_topk_args();
  const chord_status_t st = chord_dsa_topk(&t, nullptr);
  CHECK((st == CHORD_ERROR_NO_DRIVER || st == CHORD_ERROR_NO_DEVICE));
  const auto w = valid_write_args();
  const chord_status_t sw = chord_indexer_cache_write(&w, nullptr);
  CHECK((sw == CHORD_ERROR_NO_DRIVER || sw == CHORD_ERROR_NO_DEVICE));
}
