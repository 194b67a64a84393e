// The C ABI without a GPU: status strings, versions, argument validation (every failure is
// INVALID_ARGUMENT naming the argument), option struct checks, compile-only mode, runtime info and the
// thread-local last error. Invalid-argument cases use real (host) buffers, so nothing could be launched
// on them even on a GPU machine; fake device pointers are used only when no driver is ready.
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "chordrt/chordrt.h"
#include "chordrt/chordrt.hpp"
#include "runtime/driver.hpp"
#include "tests/test_support.hpp"

using Catch::Matchers::Contains;
using chordrt::test::TempDir;

namespace {

// Keeps the process-wide runtime (configured once from the environment) out of ~/.cache when this
// binary is run by hand without CHORD_CACHE_DIR (ctest sets it): a temp directory, removed at exit.
void default_cache_dir() {
  if (std::getenv("CHORD_CACHE_DIR")) return;
  static TempDir dir("capi-cache");
  ::setenv("CHORD_CACHE_DIR", dir.path().c_str(), 0);
}

bool driver_ready() { return chordrt::driver().state == chordrt::DriverState::kReady; }

std::string last_error() { return chord_last_error(); }

// Host buffers: valid, 16-byte-aligned addresses for the arguments a case does not target.
alignas(64) int32_t g_ids[1024];
alignas(64) int32_t g_sorted[4096];
alignas(64) int32_t g_experts[4096];
alignas(64) int32_t g_post[4];
alignas(64) int32_t g_map[1024];
alignas(64) uint16_t g_rows[8192];
alignas(64) float g_weights[1024];
alignas(64) uint16_t g_out[8192];

template <typename T>
T* offset_bytes(T* p, size_t bytes) {
  return reinterpret_cast<T*>(reinterpret_cast<char*>(p) + bytes);
}

// A valid moe_align call's arguments (on host buffers), to be broken one at a time.
struct AlignCall : chord_moe_align_args_t {
  AlignCall() : chord_moe_align_args_t{} {
    struct_size = sizeof(chord_moe_align_args_t);
    topk_ids = g_ids;
    num_tokens = 16;
    top_k = 8;
    num_experts = 64;
    block_size = 16;
    sorted_token_ids = g_sorted;
    sorted_token_ids_capacity = chord_moe_align_sorted_capacity(16, 8, 64, 16);
    expert_ids = g_experts;
    expert_ids_capacity = (chord_moe_align_sorted_capacity(16, 8, 64, 16) + 15) / 16;
    num_tokens_post_padded = g_post;
  }
  chord_status_t run() const { return chord_moe_align(this, nullptr); }
};

struct CombineCall : chord_moe_combine_args_t {
  CombineCall() : chord_moe_combine_args_t{} {
    struct_size = sizeof(chord_moe_combine_args_t);
    expert_rows = g_rows;
    topk_weights = g_weights;
    output = g_out;
    num_tokens = 4;
    top_k = 2;
    hidden = 512;
  }
  chord_status_t run() const { return chord_moe_combine(this, nullptr); }
};

struct SiluCall : chord_silu_and_mul_args_t {
  SiluCall(const void* in, void* out, int64_t r, int64_t inter) : chord_silu_and_mul_args_t{} {
    struct_size = sizeof(chord_silu_and_mul_args_t);
    input = in;
    output = out;
    rows = r;
    intermediate = inter;
  }
  chord_status_t run() const { return chord_silu_and_mul(this, nullptr); }
};

void expect_invalid(chord_status_t status, const std::string& needle) {
  CHECK(status == CHORD_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Contains(needle));
}

// A valid call (AlignCall or CombineCall) with one thing broken, and what the last error must say.
template <typename Call>
struct Broken {
  std::function<void(Call&)> breaks;
  std::string needle;
};

// Each case in turn, from a fresh valid call: INVALID_ARGUMENT, with its needle in the last error.
template <typename Call>
void expect_each_invalid(const std::vector<Broken<Call>>& cases) {
  for (const Broken<Call>& k : cases) {
    INFO("expecting \"" << k.needle << "\"");
    Call c;
    k.breaks(c);
    expect_invalid(c.run(), k.needle);
  }
}

// Each bad value of one integer argument in turn (the rest valid): INVALID_ARGUMENT naming the argument.
template <typename Call, typename T, typename Args>
void expect_each_value_invalid(T Args::*field, const std::string& name, std::initializer_list<int64_t> values) {
  for (int64_t v : values) {
    INFO(name << " = " << v);
    Call c;
    c.*field = static_cast<T>(v);
    expect_invalid(c.run(), name);
  }
}

// Each struct_size the library must refuse, on an otherwise valid call.
template <typename Call>
void expect_each_struct_size_invalid(std::initializer_list<size_t> sizes) {
  for (size_t size : sizes) {
    INFO("struct_size = " << size);
    Call c;
    c.struct_size = size;
    expect_invalid(c.run(), "struct_size");
  }
}

}  // namespace

TEST_CASE("chord_status_string is distinct and non-empty for every status", "[capi]") {
  std::set<std::string> seen;
  for (int s = CHORD_SUCCESS; s <= CHORD_ERROR_INTERNAL; ++s) {
    const char* text = chord_status_string(static_cast<chord_status_t>(s));
    REQUIRE(text != nullptr);
    CHECK(std::string(text).size() > 0);
    CHECK(seen.insert(text).second);
  }
  CHECK(seen.size() == 12);
  CHECK_THAT(std::string(chord_status_string(CHORD_ERROR_NO_DRIVER)), Contains("CHORD_ERROR_NO_DRIVER"));
  CHECK_THAT(std::string(chord_status_string(CHORD_SUCCESS)), Contains("CHORD_SUCCESS"));
  const char* unknown = chord_status_string(static_cast<chord_status_t>(15));
  REQUIRE(unknown != nullptr);
  CHECK(std::string(unknown).size() > 0);
  CHECK(seen.count(unknown) == 0);
}

TEST_CASE("versions", "[capi]") {
  int major = -1, minor = -1, patch = -1;
  chord_get_version(&major, &minor, &patch);
  CHECK(major == CHORDRT_VERSION_MAJOR);
  CHECK(minor == CHORDRT_VERSION_MINOR);
  CHECK(patch == CHORDRT_VERSION_PATCH);
  CHECK(major >= 0);
  const auto v = chordrt::version();
  CHECK(v.major == major);
  CHECK(v.minor == minor);
  CHECK(v.patch == patch);
  chord_get_version(nullptr, nullptr, nullptr);  // null outputs are allowed
  int only_minor = -1;
  chord_get_version(nullptr, &only_minor, nullptr);
  CHECK(only_minor == minor);
  CHECK(chord_abi_version() == CHORD_ABI_VERSION);
  CHECK(chord_abi_version() == 2);
}

TEST_CASE("chord_moe_align_sorted_capacity", "[capi]") {
  // routes + min(routes, experts) * (block_size - 1)
  CHECK(chord_moe_align_sorted_capacity(4, 2, 8, 16) == 8 + 8 * 15);
  CHECK(chord_moe_align_sorted_capacity(1000, 8, 384, 16) == 8000 + 384 * 15);
  CHECK(chord_moe_align_sorted_capacity(1, 1, 384, 16) == 1 + 1 * 15);
  CHECK(chord_moe_align_sorted_capacity(2, 8, 384, 64) == 16 + 16 * 63);
  CHECK(chord_moe_align_sorted_capacity(0, 8, 384, 16) == 0);
  CHECK(chord_moe_align_sorted_capacity(100, 8, 256, 1) == 800);
  CHECK(chord_moe_align_sorted_capacity(1 << 20, 8, 1024, 128) == (int64_t{8} << 20) + 1024 * 127);
  CHECK(chordrt::moe_align_sorted_capacity(1000, 8, 384, 16) == chord_moe_align_sorted_capacity(1000, 8, 384, 16));
  // Out of range or past INT64_MAX: -1, never a wrapped (negative or small) size.
  CHECK(chord_moe_align_sorted_capacity(INT64_MAX, 64, 1024, 1024) == -1);
  CHECK(chord_moe_align_sorted_capacity(int64_t{1} << 62, 8, 384, 16) == -1);
  CHECK(chord_moe_align_sorted_capacity(-1, 8, 384, 16) == -1);
  CHECK(chord_moe_align_sorted_capacity(4, 0, 384, 16) == -1);
  CHECK(chord_moe_align_sorted_capacity(4, 8, 0, 16) == -1);
  CHECK(chord_moe_align_sorted_capacity(4, 8, 384, 0) == -1);
  CHECK(chord_moe_align_sorted_capacity(int64_t{1} << 59, 8, 384, 16) == (int64_t{1} << 62) + 384 * 15);
}

TEST_CASE("moe_align: null, misaligned and out-of-range arguments", "[capi]") {
  SECTION("null pointers") {
    expect_each_invalid<AlignCall>({
        {[](AlignCall& c) { c.topk_ids = nullptr; }, "topk_ids is null"},
        {[](AlignCall& c) { c.sorted_token_ids = nullptr; }, "sorted_token_ids is null"},
        {[](AlignCall& c) { c.expert_ids = nullptr; }, "expert_ids is null"},
        {[](AlignCall& c) { c.num_tokens_post_padded = nullptr; }, "num_tokens_post_padded is null"},
    });
  }
  SECTION("misaligned pointers") {
    expect_each_invalid<AlignCall>({
        {[](AlignCall& c) { c.topk_ids = offset_bytes(g_ids, 2); }, "topk_ids must be 4-byte aligned"},
        {[](AlignCall& c) { c.sorted_token_ids = offset_bytes(g_sorted, 1); },
         "sorted_token_ids must be 4-byte aligned"},
        {[](AlignCall& c) { c.expert_ids = reinterpret_cast<int32_t*>(0x1002); }, "expert_ids"},
        {[](AlignCall& c) { c.num_tokens_post_padded = offset_bytes(g_post, 3); }, "num_tokens_post_padded"},
        {[](AlignCall& c) { c.expert_map = offset_bytes(g_map, 2); }, "expert_map"},
    });
  }
  SECTION("top_k, num_experts, block_size, num_tokens") {
    expect_each_value_invalid<AlignCall>(&AlignCall::top_k, "top_k", {0, -1, 65});
    expect_each_value_invalid<AlignCall>(&AlignCall::num_experts, "num_experts", {0, -3, 1025});
    expect_each_value_invalid<AlignCall>(&AlignCall::block_size, "block_size", {0, -16, 1025});
    expect_each_value_invalid<AlignCall>(&AlignCall::num_tokens, "num_tokens",
                                         {-1, (int64_t{1} << 30) / AlignCall{}.top_k + 1});
  }
  SECTION("capacities") {
    AlignCall c;
    c.sorted_token_ids_capacity -= 1;
    expect_invalid(c.run(), "sorted_token_ids_capacity");
    CHECK_THAT(last_error(), Contains(std::to_string(c.sorted_token_ids_capacity + 1)));  // says what is needed
    c = AlignCall{};
    c.sorted_token_ids_capacity = int64_t{1} << 32;
    expect_invalid(c.run(), "sorted_token_ids_capacity");
    c = AlignCall{};
    c.expert_ids_capacity -= 1;
    expect_invalid(c.run(), "expert_ids_capacity");
  }
  SECTION("struct_size") {
    expect_each_struct_size_invalid<AlignCall>(
        {size_t{0}, size_t{1}, CHORD_MOE_ALIGN_ARGS_MIN_SIZE - 1, sizeof(chord_moe_align_args_t) + 1, size_t{1} << 20});
    expect_invalid(chord_moe_align(nullptr, nullptr), "chord_moe_align: args is null");
  }
}

TEST_CASE("silu_and_mul: null, misaligned and out-of-range arguments", "[capi]") {
  expect_invalid(SiluCall(nullptr, g_out, 4, 2048).run(), "input is null");
  expect_invalid(SiluCall(g_rows, nullptr, 4, 2048).run(), "output is null");
  // intermediate 2048 is read 8 BF16 (16 bytes) at a time.
  expect_invalid(SiluCall(reinterpret_cast<const void*>(0x1002), g_out, 4, 2048).run(),
                 "input must be 16-byte aligned");
  expect_invalid(SiluCall(offset_bytes(g_rows, 8), g_out, 4, 2048).run(), "16-byte aligned");
  expect_invalid(SiluCall(g_rows, offset_bytes(g_out, 4), 4, 2048).run(), "output must be 16-byte");
  // intermediate 100 = 4-wide vectors: 8-byte alignment.
  expect_invalid(SiluCall(offset_bytes(g_rows, 4), g_out, 4, 100).run(), "8-byte aligned");
  // Odd intermediate: scalar accesses, only BF16 alignment; an odd address is still wrong.
  expect_invalid(SiluCall(offset_bytes(g_rows, 1), g_out, 4, 7).run(), "2-byte aligned");
  expect_invalid(SiluCall(g_rows, g_out, -1, 2048).run(), "rows");
  expect_invalid(SiluCall(g_rows, g_out, 4, 0).run(), "intermediate");
  expect_invalid(SiluCall(g_rows, g_out, 4, int64_t{1} << 31).run(), "intermediate");
  SiluCall c(g_rows, g_out, 4, 2048);
  c.struct_size = sizeof(chord_silu_and_mul_args_t) - 1;  // every field is required
  expect_invalid(c.run(), "struct_size");
}

TEST_CASE("moe_combine: null, misaligned and out-of-range arguments", "[capi]") {
  SECTION("null pointers") {
    expect_each_invalid<CombineCall>({
        {[](CombineCall& c) { c.expert_rows = nullptr; }, "expert_rows is null"},
        {[](CombineCall& c) { c.topk_weights = nullptr; }, "topk_weights is null"},
        {[](CombineCall& c) { c.output = nullptr; }, "output is null"},
    });
  }
  SECTION("misaligned pointers") {
    expect_each_invalid<CombineCall>({
        {[](CombineCall& c) { c.expert_rows = reinterpret_cast<const void*>(0x1002); },
         "expert_rows must be 16-byte aligned"},
        {[](CombineCall& c) { c.topk_weights = offset_bytes(g_weights, 2); }, "topk_weights must be 4-byte aligned"},
        {[](CombineCall& c) { c.output = offset_bytes(g_out, 8); }, "output must be 16-byte aligned"},
    });
  }
  SECTION("top_k, hidden, num_tokens") {
    expect_each_value_invalid<CombineCall>(&CombineCall::top_k, "top_k", {0, -2, 65});
    expect_each_value_invalid<CombineCall>(&CombineCall::hidden, "hidden", {0});
    expect_each_value_invalid<CombineCall>(&CombineCall::num_tokens, "num_tokens", {-1});
  }
  SECTION("sizes whose bytes overflow 64 bits, found before any driver or device is needed") {
    expect_each_invalid<CombineCall>({
        {[](CombineCall& c) {
           c.num_tokens = INT32_MAX;
           c.hidden = INT32_MAX;
         },
         "larger than 2^63 bytes"},
    });
  }
  SECTION("the expert-parallel filter needs topk_ids and expert_map") {
    struct Filter {
      const int32_t* ids;
      const int32_t* map;
      int32_t experts;
      const char* needle;
    };
    const Filter cases[] = {
        {g_ids, nullptr, 64, "got topk_ids and null"},
        {nullptr, g_map, 64, "got null and expert_map"},
        {offset_bytes(g_ids, 2), g_map, 64, "topk_ids must be 4-byte aligned"},
        {g_ids, offset_bytes(g_map, 1), 64, "expert_map must be 4-byte aligned"},
        {g_ids, g_map, 0, "num_experts"},
    };
    for (const Filter& f : cases) {
      INFO("expecting \"" << f.needle << "\"");
      CombineCall c;
      c.topk_ids = f.ids;
      c.expert_map = f.map;
      c.num_experts = f.experts;
      expect_invalid(c.run(), f.needle);
    }
  }
  SECTION("struct_size") {
    expect_each_struct_size_invalid<CombineCall>(
        {size_t{0}, sizeof(size_t), CHORD_MOE_COMBINE_ARGS_MIN_SIZE - 1, sizeof(chord_moe_combine_args_t) + 1});
  }
}

TEST_CASE("empty work accepts null data pointers, but still checks shapes", "[capi]") {
  // No rows: nothing is read or written, so null (empty-tensor) pointers are fine, with or without a GPU.
  CHECK(SiluCall(nullptr, nullptr, 0, 2048).run() == CHORD_SUCCESS);
  CombineCall combine;
  combine.expert_rows = nullptr;
  combine.topk_weights = nullptr;
  combine.output = nullptr;
  combine.num_tokens = 0;
  combine.top_k = 8;
  combine.hidden = 7168;
  CHECK(combine.run() == CHORD_SUCCESS);
  expect_invalid(SiluCall(nullptr, nullptr, 0, 0).run(), "intermediate");
  combine.top_k = 0;
  expect_invalid(combine.run(), "top_k");
  combine.top_k = 8;
  combine.hidden = 0;
  expect_invalid(combine.run(), "hidden");
  // moe_align always writes its outputs: only topk_ids may be null when there are no tokens.
  AlignCall c;
  c.num_tokens = 0;
  c.topk_ids = nullptr;
  c.sorted_token_ids = nullptr;
  expect_invalid(c.run(), "sorted_token_ids is null");
  c = AlignCall{};
  c.num_tokens = 0;
  c.topk_ids = nullptr;
  c.num_tokens_post_padded = nullptr;
  expect_invalid(c.run(), "num_tokens_post_padded is null");
  c = AlignCall{};
  c.num_tokens = 1;
  c.topk_ids = nullptr;
  expect_invalid(c.run(), "topk_ids is null");
}

TEST_CASE("the C++ API throws the same errors", "[capi]") {
  auto a = chordrt::args<chord_silu_and_mul_args_t>();
  a.output = g_out;
  a.rows = 1;
  a.intermediate = 2048;
  try {
    chordrt::silu_and_mul(a, nullptr);
    FAIL("no exception");
  } catch (const chordrt::Error& e) {
    CHECK(e.status() == CHORD_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(std::string(e.what()), Contains("silu_and_mul: input is null"));
  }
  AlignCall m;
  m.top_k = 0;
  CHECK_THROWS_WITH(chordrt::moe_align(m, nullptr), Contains("top_k"));
}

TEST_CASE("valid calls in compile-only mode fail with NO_DRIVER / NO_DEVICE", "[capi]") {
  if (driver_ready()) {
    SUCCEED("a CUDA driver is ready: the [gpu] tests cover real launches");
    return;
  }
  default_cache_dir();
  const bool no_device = chordrt::driver().state == chordrt::DriverState::kNoDevice;
  auto expect_no_driver = [&](chord_status_t s) {
    if (no_device) {
      CHECK(s == CHORD_ERROR_NO_DEVICE);
    } else {
      CHECK(s == CHORD_ERROR_NO_DRIVER);
      CHECK_THAT(last_error(), Contains("compile-only mode"));
    }
  };
  chord_runtime_info_t before{};
  before.struct_size = sizeof before;
  REQUIRE(chord_get_runtime_info(&before) == CHORD_SUCCESS);

  int32_t* const fake32 = reinterpret_cast<int32_t*>(0x10000);
  void* const fake = reinterpret_cast<void*>(0x20000);
  auto align_call = [&](int64_t tokens, int32_t top_k, int64_t cap) {
    AlignCall c;
    c.topk_ids = tokens ? fake32 : nullptr;
    c.num_tokens = tokens;
    c.top_k = top_k;
    c.sorted_token_ids = c.expert_ids = c.num_tokens_post_padded = fake32;
    c.sorted_token_ids_capacity = cap;
    c.expert_ids_capacity = (cap + 15) / 16;
    return c;
  };
  const int64_t cap = chord_moe_align_sorted_capacity(16, 8, 64, 16);
  expect_no_driver(align_call(16, 8, cap).run());
  AlignCall mapped = align_call(16, 8, cap);
  mapped.expert_map = fake32;
  expect_no_driver(mapped.run());
  // A caller built against the smallest struct (no expert_map field) is accepted.
  AlignCall v_min = align_call(16, 8, cap);
  v_min.struct_size = CHORD_MOE_ALIGN_ARGS_MIN_SIZE;
  v_min.expert_map = reinterpret_cast<const int32_t*>(0x1);  // past struct_size: never read
  expect_no_driver(v_min.run());
  // vLLM's capacity bound (larger when there are fewer routes than experts) is accepted too.
  const int64_t small_cap = chord_moe_align_sorted_capacity(4, 2, 64, 16);
  const int64_t vllm_cap = 4 * 2 + 64 * 15;
  REQUIRE(vllm_cap > small_cap);
  expect_no_driver(align_call(4, 2, vllm_cap).run());
  expect_no_driver(SiluCall(fake, fake, 4, 2048).run());
  expect_no_driver(SiluCall(reinterpret_cast<void*>(0x1002), reinterpret_cast<void*>(0x2002), 4, 7)
                       .run());  // scalar path: 2-byte alignment suffices
  CombineCall combine;
  combine.expert_rows = fake;
  combine.topk_weights = reinterpret_cast<float*>(fake32);
  combine.output = fake;
  combine.top_k = 8;
  combine.hidden = 7168;
  expect_no_driver(combine.run());
  CombineCall filtered = combine;
  filtered.topk_ids = filtered.expert_map = fake32;
  filtered.num_experts = 64;
  expect_no_driver(filtered.run());
  // Empty work needs no driver at all.
  CHECK(SiluCall(fake, fake, 0, 2048).run() == CHORD_SUCCESS);
  combine.num_tokens = 0;
  CHECK(combine.run() == CHORD_SUCCESS);
  // moe_align with no tokens still writes its outputs (so it launches), but topk_ids may be null.
  expect_no_driver(align_call(0, 8, chord_moe_align_sorted_capacity(0, 8, 64, 16)).run());

  // The C++ API: the same status as an exception.
  try {
    chordrt::silu_and_mul(SiluCall(fake, fake, 4, 2048), nullptr);
    FAIL("no exception");
  } catch (const chordrt::Error& e) {
    CHECK((e.status() == CHORD_ERROR_NO_DRIVER || e.status() == CHORD_ERROR_NO_DEVICE));
  }

  // Failing launches compile nothing.
  chord_runtime_info_t after{};
  after.struct_size = sizeof after;
  REQUIRE(chord_get_runtime_info(&after) == CHORD_SUCCESS);
  CHECK(after.kernels_compiled == before.kernels_compiled);
  CHECK(after.kernels_loaded == 0);
}

TEST_CASE("chord_get_runtime_info", "[capi]") {
  default_cache_dir();
  chord_runtime_info_t info{};
  info.struct_size = sizeof info;
  info.driver_available = -1;
  REQUIRE(chord_get_runtime_info(&info) == CHORD_SUCCESS);
  CHECK(info.driver_available == (driver_ready() ? 1 : 0));
  if (!driver_ready()) {
    CHECK(info.device_count == 0);
    CHECK(info.kernels_loaded == 0);
  } else {
    CHECK(info.device_count > 0);
    CHECK(info.driver_version > 0);
  }
  CHECK(info.nvrtc_major >= 12);
  REQUIRE(info.cache_dir != nullptr);
  CHECK(std::string(info.cache_dir).size() > 0);
  if (const char* env = std::getenv("CHORD_CACHE_DIR")) CHECK(std::string(info.cache_dir) == env);
  const auto cpp = chordrt::runtime_info();
  CHECK(std::string(cpp.cache_dir) == info.cache_dir);
  CHECK(cpp.nvrtc_major == info.nvrtc_major);
  CHECK(cpp.nvrtc_minor == info.nvrtc_minor);
  CHECK(cpp.driver_available == info.driver_available);

  // cache_dir stays valid and unchanged across calls, from any thread.
  const char* first_dir = info.cache_dir;
  const std::string first_text = first_dir;
  std::vector<std::thread> threads;
  std::vector<std::string> seen(4);
  std::vector<int> statuses(4, -1);
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      chord_runtime_info_t mine{};
      mine.struct_size = sizeof mine;
      for (int k = 0; k < 100; ++k) statuses[i] = chord_get_runtime_info(&mine);
      seen[i] = mine.cache_dir;
    });
  }
  for (auto& th : threads) th.join();
  for (int i = 0; i < 4; ++i) {
    CHECK(statuses[i] == CHORD_SUCCESS);
    CHECK(seen[i] == first_text);
  }
  CHECK(std::string(first_dir) == first_text);

  expect_invalid(chord_get_runtime_info(nullptr), "info is null");
  chord_runtime_info_t bad{};
  bad.struct_size = 0;
  expect_invalid(chord_get_runtime_info(&bad), "struct_size");
  bad.struct_size = sizeof bad + 8;
  expect_invalid(chord_get_runtime_info(&bad), "struct_size");
}

TEST_CASE("chord_prewarm_model argument checks", "[capi]") {
  default_cache_dir();
  chord_prewarm_summary_t s{};
  s.struct_size = sizeof s;
  expect_invalid(chord_prewarm_model(nullptr, "tp8", "sm_90a", &s), "model is null");
  expect_invalid(chord_prewarm_model("kimi-k2", nullptr, "sm_90a", &s), "deployment is null");
  expect_invalid(chord_prewarm_model("kimi-k2", "tp8", nullptr, &s), "arch is null");
  expect_invalid(chord_prewarm_model("no-such-model", "tp8", "sm_90a", &s), "no-such-model");
  expect_invalid(chord_prewarm_model("kimi-k2", "x8", "sm_90a", &s), "deployment");
  expect_invalid(chord_prewarm_model("kimi-k2", "tp8", "sm_9z", &s), "arch");
  expect_invalid(chord_prewarm_model("kimi-k2", "tp3", "sm_90a", &s), "divisible");
  chord_prewarm_summary_t bad{};
  bad.struct_size = 1;
  expect_invalid(chord_prewarm_model("kimi-k2", "tp8", "sm_90a", &bad), "struct_size");
}

TEST_CASE("chord_prewarm_model compiles a deployment's kernels into the cache", "[capi][nvrtc]") {
  default_cache_dir();
  chord_prewarm_summary_t s{};
  s.struct_size = sizeof s;
  REQUIRE(chord_prewarm_model("deepseek-v3", "ep8", "sm_90a", &s) == CHORD_SUCCESS);
  CHECK(s.failed == 0);
  // 5 moe_align block sizes x 2 configs + silu_and_mul + moe_combine; earlier runs may have cached some.
  CHECK(s.compiled + s.cached == 12);
  if (s.compiled > 0) {
    CHECK(s.median_compile_ms > 0);
    CHECK(s.max_compile_ms >= s.median_compile_ms);
  }
  chord_prewarm_summary_t again{};
  again.struct_size = sizeof again;
  REQUIRE(chord_prewarm_model("deepseek-v3", "ep8", "sm_90a", &again) == CHORD_SUCCESS);
  CHECK(again.compiled == 0);
  CHECK(again.cached == 12);
  CHECK(again.failed == 0);
  CHECK(again.median_compile_ms == 0);
  // A null summary is allowed.
  CHECK(chord_prewarm_model("deepseek-v3", "ep8", "sm_90a", nullptr) == CHORD_SUCCESS);
}

TEST_CASE("the last error is per thread", "[capi]") {
  REQUIRE(SiluCall(nullptr, g_out, 1, 2048).run() == CHORD_ERROR_INVALID_ARGUMENT);
  const std::string mine = last_error();
  REQUIRE_THAT(mine, Contains("input is null"));

  std::string fresh_thread_error = "unset", thread_error, thread_error_after;
  std::thread th([&] {
    fresh_thread_error = chord_last_error();
    CombineCall c;
    c.output = nullptr;
    c.run();
    thread_error = chord_last_error();
  });
  th.join();
  CHECK(fresh_thread_error.empty());
  CHECK_THAT(thread_error, Contains("output is null"));
  CHECK(last_error() == mine);  // the other thread's failure did not overwrite ours

  // The pointer stays valid until this thread's next call.
  const char* p = chord_last_error();
  CHECK(std::string(p) == mine);
}
