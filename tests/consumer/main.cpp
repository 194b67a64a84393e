// A consumer of the installed chordrt package: C++ API and C ABI, compile-only friendly.
// Exits non-zero on any unexpected result.
#include <chordrt/chordrt.h>
#include <chordrt/chordrt.hpp>
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace {

int failures = 0;

void fail(const std::string& what) {
  std::fprintf(stderr, "consumer: FAIL: %s\n", what.c_str());
  ++failures;
}

std::string status_name(chord_status_t s) { return chord_status_string(s); }

}  // namespace

int main() {
  // ---- versions --------------------------------------------------------------------------------
  const chordrt::Version v = chordrt::version();
  int major = -1, minor = -1, patch = -1;
  chord_get_version(&major, &minor, &patch);
  std::printf("chordrt %d.%d.%d (ABI %d)\n", v.major, v.minor, v.patch, chord_abi_version());
  if (v.major != major || v.minor != minor || v.patch != patch) fail("C and C++ versions differ");
  const std::string text = std::to_string(v.major) + "." + std::to_string(v.minor) + "." + std::to_string(v.patch);
  if (text != CHORD_CONSUMER_PACKAGE_VERSION) {
    fail("library version " + text + " != package version " CHORD_CONSUMER_PACKAGE_VERSION);
  }
  if (chord_abi_version() != CHORD_ABI_VERSION) fail("ABI version differs from the installed header's");
  Dl_info dl{};
  if (dladdr(reinterpret_cast<void*>(&chord_abi_version), &dl) && dl.dli_fname) {
    std::printf("library: %s\n", dl.dli_fname);
  }

  // ---- runtime info ----------------------------------------------------------------------------
  chord_runtime_info_t info{};
  try {
    info = chordrt::runtime_info();
  } catch (const chordrt::Error& e) {
    fail(std::string("runtime_info threw: ") + e.what());
  }
  std::printf("driver: %s (version %d, %d devices); nvrtc %d.%d; cache %s%s\n",
              info.driver_available ? "available" : "none (compile-only mode)", info.driver_version,
              info.device_count, info.nvrtc_major, info.nvrtc_minor, info.cache_dir,
              info.cache_memory_only ? " (memory only)" : "");
  chord_runtime_info_t cinfo{};
  cinfo.struct_size = sizeof(cinfo);
  if (chord_get_runtime_info(&cinfo) != CHORD_SUCCESS) fail(std::string("chord_get_runtime_info: ") + chord_last_error());
  if ((cinfo.driver_available != 0) != info.driver_available || cinfo.device_count != info.device_count) {
    fail("C and C++ runtime info differ");
  }

  // ---- prewarm (compile only: works without a GPU) --------------------------------------------
  try {
    const chord_prewarm_summary_t s = chordrt::prewarm_model("kimi-k2", "tp8", "sm_90a");
    std::printf("prewarm kimi-k2 tp8 sm_90a: %d compiled, %d cached, %d failed (median %.1f ms, max %.1f ms)\n",
                s.compiled, s.cached, s.failed, s.median_compile_ms, s.max_compile_ms);
    if (s.compiled <= 0) fail("prewarm compiled nothing into a fresh cache");
    if (s.failed != 0) fail("prewarm had failures");
    if (s.median_compile_ms <= 0 || s.max_compile_ms < s.median_compile_ms) fail("implausible compile times");
  } catch (const chordrt::Error& e) {
    fail("prewarm_model threw " + status_name(e.status()) + ": " + e.what());
  }
  const chord_runtime_info_t after = chordrt::runtime_info();
  if (after.kernels_compiled == 0) fail("runtime_info does not count the compiles");

  // ---- errors through both APIs ---------------------------------------------------------------
  try {
    chordrt::prewarm_model("no-such-model", "tp8");
    fail("prewarm_model(no-such-model) did not throw");
  } catch (const chordrt::Error& e) {
    if (e.status() != CHORD_ERROR_INVALID_ARGUMENT || !std::strstr(e.what(), "no-such-model")) {
      fail("prewarm_model(no-such-model): " + status_name(e.status()) + ": " + e.what());
    }
  }
  auto align = chordrt::args<chord_moe_align_args_t>();
  align.num_tokens = 4;
  align.top_k = 2;
  align.num_experts = 8;
  align.block_size = 16;
  chord_status_t st = chord_moe_align(&align, nullptr);
  if (st != CHORD_ERROR_INVALID_ARGUMENT || !std::strstr(chord_last_error(), "topk_ids")) {
    fail("chord_moe_align(NULL...): " + status_name(st) + ": " + chord_last_error());
  }
  chord_moe_align_args_t bad_size = align;
  bad_size.struct_size = sizeof(bad_size) + 8;
  st = chord_moe_align(&bad_size, nullptr);
  if (st != CHORD_ERROR_INVALID_ARGUMENT || !std::strstr(chord_last_error(), "struct_size")) {
    fail("chord_moe_align(bad struct_size): " + status_name(st) + ": " + chord_last_error());
  }

  // ---- a complete call: with fake pointers only when nothing can be launched -------------------
  if (!info.driver_available) {
    auto fake = [](uintptr_t a) { return reinterpret_cast<int32_t*>(a); };
    const int64_t cap = chord_moe_align_sorted_capacity(4, 2, 8, 16);
    const int64_t blocks = (cap + 15) / 16;
    align.topk_ids = fake(0x10000);
    align.sorted_token_ids = fake(0x20000);
    align.sorted_token_ids_capacity = cap;
    align.expert_ids = fake(0x30000);
    align.expert_ids_capacity = blocks;
    align.num_tokens_post_padded = fake(0x40000);
    st = chord_moe_align(&align, nullptr);
    std::printf("chord_moe_align without a driver: %s (%s)\n", chord_status_string(st), chord_last_error());
    if (st != CHORD_ERROR_NO_DRIVER && st != CHORD_ERROR_NO_DEVICE) fail("expected NO_DRIVER or NO_DEVICE");
    if (!*chord_last_error()) fail("no message with " + status_name(st));
  } else {
    std::printf("a driver is present: the fake-pointer call is skipped\n");
  }

  if (failures) {
    std::fprintf(stderr, "consumer: %d failure(s)\n", failures);
    return 1;
  }
  std::printf("consumer: OK\n");
  return 0;
}
