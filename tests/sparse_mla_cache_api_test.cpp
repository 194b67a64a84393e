// The MLA cache writer without a GPU: record sizes, the C ABI's argument checks (each names the
// argument), the no-op of zero tokens, the compile-only-mode status of a valid call, and the family's
// descriptors (the NVRTC test compiles its examples).
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>

#include "chordrt/chordrt.h"
#include "chordrt/chordrt.hpp"
#include "runtime/driver.hpp"
#include "runtime/kernel_registry.hpp"
#include "runtime/ops/sparse_mla.hpp"
#include "tests/test_support.hpp"

using Catch::Matchers::Contains;
using chordrt::test::kHopper;

namespace {

std::string last_error() { return chord_last_error(); }

// Aligned fake device addresses: validation must reject or accept them without dereferencing.
const void* const kKv = reinterpret_cast<const void*>(0x10000);
const int64_t* const kSlots = reinterpret_cast<const int64_t*>(0x20000);
void* const kCache = reinterpret_cast<void*>(0x30000);

chord_mla_cache_write_args_t valid_args() {
  chord_mla_cache_write_args_t a{};
  a.struct_size = sizeof a;
  a.format = CHORD_MLA_CACHE_FP8_DS_MLA;
  a.rope_dims = 64;
  a.num_tokens = 3;
  a.kv = kKv;
  a.slot_mapping = kSlots;
  a.cache = kCache;
  a.num_slots = 128;
  return a;
}

// The call fails with INVALID_ARGUMENT and a message containing every needle.
void check_rejected(const chord_mla_cache_write_args_t& a, std::initializer_list<const char*> needles) {
  CHECK(chord_mla_cache_write(&a, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  const std::string msg = last_error();
  INFO(msg);
  CHECK_THAT(msg, Contains("mla_cache_write"));
  for (const char* n : needles) CHECK_THAT(msg, Contains(n));
}

}  // namespace

TEST_CASE("MLA cache record sizes", "[sparse_mla]") {
  CHECK(chord_mla_cache_record_bytes(CHORD_MLA_CACHE_FP8_DS_MLA, 64) == 656);
  CHECK(chord_mla_cache_record_bytes(CHORD_MLA_CACHE_FP8_DS_MLA, 0) == 528);
  CHECK(chord_mla_cache_record_bytes(CHORD_MLA_CACHE_BF16, 64) == 1152);
  CHECK(chord_mla_cache_record_bytes(CHORD_MLA_CACHE_BF16, 0) == 1024);
  CHECK(chordrt::mla_cache_record_bytes(CHORD_MLA_CACHE_FP8_DS_MLA, 64) == 656);
  for (const auto& [format, rope] : {std::pair{2, 64}, {-1, 0}, {0, 32}, {1, 128}, {0, -64}}) {
    INFO("format " << format << " rope_dims " << rope);
    CHECK(chord_mla_cache_record_bytes(format, rope) == 0);
  }
  // Every record keeps the next one 16-byte aligned (vector stores; the decode's 16-byte gathers).
  for (const int format : {0, 1}) {
    for (const int rope : {0, 64}) CHECK(chord_mla_cache_record_bytes(format, rope) % 16 == 0);
  }
}

TEST_CASE("chord_mla_cache_write argument checks", "[sparse_mla][capi]") {
  CHECK(chord_mla_cache_write(nullptr, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("args is null"));

  auto a = valid_args();
  a.struct_size = 0;
  CHECK(chord_mla_cache_write(&a, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("chord_mla_cache_write: struct_size"));
  CHECK_THAT(last_error(), Contains("struct_size"));
  a.struct_size = sizeof a + 8;
  CHECK(chord_mla_cache_write(&a, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("struct_size"));

  a = valid_args();
  a.format = 2;
  check_rejected(a, {"format", "got 2"});
  a = valid_args();
  a.rope_dims = 32;
  check_rejected(a, {"rope_dims", "got 32"});
  a.format = CHORD_MLA_CACHE_BF16;
  check_rejected(a, {"rope_dims"});
  a = valid_args();
  a.num_tokens = -1;
  check_rejected(a, {"num_tokens", "got -1"});
  a = valid_args();
  a.num_slots = 0;
  check_rejected(a, {"num_slots", "got 0"});
  a.num_slots = INT64_MAX / 100;  // num_slots * 656 bytes would overflow
  check_rejected(a, {"num_slots"});

  a = valid_args();
  a.kv = nullptr;
  check_rejected(a, {"kv is null"});
  a = valid_args();
  a.slot_mapping = nullptr;
  check_rejected(a, {"slot_mapping is null"});
  a = valid_args();
  a.cache = nullptr;
  check_rejected(a, {"cache is null"});
  a = valid_args();
  a.kv = static_cast<const char*>(kKv) + 8;
  check_rejected(a, {"kv", "16-byte aligned"});
  a = valid_args();
  a.cache = static_cast<char*>(kCache) + 4;
  check_rejected(a, {"cache", "16-byte aligned"});
  a = valid_args();
  a.slot_mapping = reinterpret_cast<const int64_t*>(reinterpret_cast<uintptr_t>(kSlots) + 4);
  check_rejected(a, {"slot_mapping", "8-byte aligned"});
}

TEST_CASE("chord_mla_cache_write of zero tokens is a no-op", "[sparse_mla][capi]") {
  // No launch, no driver needed, null buffers allowed (empty tensors have no storage)...
  chord_mla_cache_write_args_t a{};
  a.struct_size = sizeof a;
  a.format = CHORD_MLA_CACHE_BF16;
  a.num_slots = 1;
  CHECK(chord_mla_cache_write(&a, nullptr) == CHORD_SUCCESS);
  // ...but the format is still checked.
  a.format = 5;
  CHECK(chord_mla_cache_write(&a, nullptr) == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains("format"));
}

TEST_CASE("chord_mla_cache_write in compile-only mode", "[sparse_mla][capi]") {
  if (chordrt::driver().state == chordrt::DriverState::kReady) {
    SUCCEED("a CUDA driver is ready: the GPU tests cover real launches");
    return;
  }
  const auto a = valid_args();
  const chord_status_t s = chord_mla_cache_write(&a, nullptr);
  CHECK((s == CHORD_ERROR_NO_DRIVER || s == CHORD_ERROR_NO_DEVICE));
}

TEST_CASE("the MLA cache writer family's keys", "[sparse_mla]") {
  using chordrt::ops::SparseMlaCacheWriteFamily;
  CHECK(chordrt::find_family("sparse_mla.cache_write") == &SparseMlaCacheWriteFamily::family());
  const auto examples = SparseMlaCacheWriteFamily::examples({});
  CHECK(examples.size() == 4);  // both formats, RoPE 64 and NoPE
  for (const auto& k : examples) {
    const chordrt::KernelProgram p = SparseMlaCacheWriteFamily::program(k);
    CHECK(p.header == "sparse_mla/cache_write.cuh");
    CHECK(p.threads == 128);  // 4 rows per CTA, a warp each
  }
  const auto k = chordrt::ops::sparse_mla_cache_write_key(CHORD_MLA_CACHE_BF16, 0);
  CHECK(SparseMlaCacheWriteFamily::program(k).name_expression == "chord::sparse_mla::cache_write_kernel<1, 0, 4>");
  chordrt::test::check_invalid_argument(
      [&] {
        SparseMlaCacheWriteFamily::program({0, 32, 4});
      },
      {"sparse_mla.cache_write", "rope_dims", "32"});
  chordrt::test::check_invalid_argument(
      [&] {
        (void)SparseMlaCacheWriteFamily::descriptor(kHopper, {2, 64, 4});
      },
      {"sparse_mla.cache_write", "format must be in [0, 1], got 2"});
}
