// libFuzzer target over the whole C ABI in compile-only mode (no driver): random args structs, sizes,
// strings and config.json files. Besides the sanitizers it checks that every call returns a real status
// with a message when it fails, and that the size helpers never return a size below what they promise.
//
// Input: byte 0 picks the function, byte 1 holds flags (kFlag*), then the args struct's bytes (zero
// padded), then for ops with a host-side W4A16 weight that struct's bytes, then a tail of strings
// (prewarm: model, deployment, arch separated by NUL; a model "@" is replaced by a config.json holding
// the rest of the tail). tools/fuzz/make_corpus.py writes inputs in this format; CHORD_FUZZ_TRACE=1 prints
// what each call returned.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "chordrt/chordrt.h"
#include "runtime/ops/w4a16.hpp"

extern "C" const char* chord_fuzz_status_string(int status);  // c_caller.c

namespace {

enum Flag : uint8_t {
  kSizeModeMask = 3,   // 0: sizeof, 1: the MIN_SIZE, 2: struct_size as the bytes say, 3: sizeof + 8
  kNullArgs = 1 << 2,  // pass a null args (or output) pointer
  kNullWeight = 1 << 3,
  kForgeTag = 1 << 4,  // give the weight the tag w4a16_pack would (else the tag is as the bytes say)
};

struct Input {
  const uint8_t* data;
  size_t size;
  size_t pos = 0;
  // Fills `out` with the next n bytes (zeros past the end).
  void take(void* out, size_t n) {
    std::memset(out, 0, n);
    const size_t k = pos < size ? std::min(n, size - pos) : 0;
    if (k) std::memcpy(out, data + pos, k);
    pos += n;
  }
  std::string_view tail() const {
    return pos < size ? std::string_view(reinterpret_cast<const char*>(data + pos), size - pos) : "";
  }
};

std::string g_config_path;
bool g_trace = false;  // CHORD_FUZZ_TRACE=1: print each call's status and message (replaying an input)

void check_status(chord_status_t s, const char* fn) {
  if (static_cast<int>(s) < CHORD_SUCCESS || static_cast<int>(s) > CHORD_ERROR_INTERNAL) {
    std::fprintf(stderr, "%s returned %d, not a chord_status_t\n", fn, static_cast<int>(s));
    std::abort();
  }
  const char* message = chord_last_error();
  if (g_trace) std::fprintf(stderr, "%s: %s: %s\n", fn, chord_status_string(s), s == CHORD_SUCCESS ? "" : message);
  if (s != CHORD_SUCCESS && (!message || !*message)) {
    std::fprintf(stderr, "%s failed (%s) without a message\n", fn, chord_status_string(s));
    std::abort();
  }
  if (std::strlen(chord_status_string(s)) == 0) std::abort();
}

template <typename T>
T read_struct(Input& in, uint8_t flags, size_t min_size) {
  T args;
  in.take(&args, sizeof(T));
  switch (flags & kSizeModeMask) {
    case 0:
      args.struct_size = sizeof(T);
      break;
    case 1:
      args.struct_size = min_size;
      break;
    case 2:
      break;
    case 3:
      args.struct_size = sizeof(T) + 8;
      break;
  }
  return args;
}

// An args struct plus room past it, as a caller built against a newer header would pass (mode 3). A raw
// struct_size may claim more than the buffer: the library must reject it before reading past sizeof.
template <typename T>
struct Padded {
  T args;
  uint8_t slack[64] = {};
};

// Without a driver nothing can launch, so an op may succeed only when it has nothing to do (`empty`, on
// the fields the library reads): any other success is a silent no-op (issue "Hardening", point 8).
template <typename T>
void check_not_silent(chord_status_t s, const T& args, bool (*empty)(const T&), const char* fn) {
  if (s != CHORD_SUCCESS || !empty) return;
  T seen{};
  std::memcpy(static_cast<void*>(&seen), &args, std::min(args.struct_size, sizeof(T)));
  if (!empty(seen)) {
    std::fprintf(stderr, "%s returned CHORD_SUCCESS without a driver for non-empty work\n", fn);
    std::abort();
  }
}

// One op call from the input: its args struct, then (for ops whose args point at a host W4A16 weight)
// the weight struct.
template <typename T, typename Call>
void op_with_args(Input& in, uint8_t flags, size_t min_size, const char* fn, bool (*empty)(const T&), Call&& call) {
  Padded<T> p{read_struct<T>(in, flags, min_size)};
  [[maybe_unused]] chord_w4a16_weight_t weight;  // outlives the call that points at it
  if constexpr (requires { p.args.weight; }) {
    in.take(&weight, sizeof(weight));
    if ((flags & kSizeModeMask) != 2) weight.struct_size = sizeof(weight);
    if (flags & kForgeTag) weight.tag = chordrt::ops::w4a16_weight_tag(weight);
    p.args.weight = flags & kNullWeight ? nullptr : &weight;
  }
  const chord_status_t s = call(flags & kNullArgs ? nullptr : &p.args);
  check_status(s, fn);
  check_not_silent(s, p.args, empty, fn);
}

void prewarm(Input& in, uint8_t flags) {
  std::string_view tail = in.tail();
  auto next = [&tail] {
    const size_t nul = tail.find('\0');
    std::string s(tail.substr(0, nul));
    tail = nul == std::string_view::npos ? std::string_view() : tail.substr(nul + 1);
    return s;
  };
  std::string model = next(), deployment = next(), arch = next();
  if (model == "@") {
    // The rest is a config.json.
    FILE* f = std::fopen(g_config_path.c_str(), "wb");
    if (!f) std::abort();
    std::fwrite(tail.data(), 1, tail.size(), f);
    std::fclose(f);
    model = g_config_path;
  }
  chord_prewarm_summary_t summary{};
  summary.struct_size = (flags & kSizeModeMask) == 1 ? 1 : sizeof(summary);
  check_status(
      chord_prewarm_model(model.c_str(), deployment.c_str(), arch.c_str(), flags & kNullWeight ? nullptr : &summary),
      "chord_prewarm_model");
}

// Ops that always have work: their outputs are written even for zero tokens (moe_align), or their
// shapes have no empty case.
template <typename T>
bool nothing(const T&) {
  return false;
}

struct Scalars {
  int64_t a;
  int32_t b, c, d, e, f, g;
  int64_t h;
};

void scalar_functions(Input& in, int which) {
  Scalars s;
  in.take(&s, sizeof(s));
  switch (which) {
    case 0: {
      const int64_t cap = chord_moe_align_sorted_capacity(s.a, s.b, s.c, s.d);
      // When it answers, the answer holds every route (vLLM's layout needs at least that many slots).
      if (cap < -1 || (cap >= 0 && (s.a < 0 || static_cast<__int128>(cap) < static_cast<__int128>(s.a) * s.b))) {
        std::fprintf(stderr, "chord_moe_align_sorted_capacity(%lld, %d, %d, %d) = %lld\n", (long long)s.a, s.b, s.c,
                     s.d, (long long)cap);
        std::abort();
      }
      break;
    }
    case 1: {
      const size_t bytes = chord_warp_decode_moe_workspace_size(s.a, s.b, s.c);
      const __int128 need = static_cast<__int128>(s.a) * s.b * s.c * 2;
      if (s.a > 0 && s.b > 0 && s.c > 0 && bytes != SIZE_MAX && static_cast<__int128>(bytes) < need) std::abort();
      break;
    }
    case 2: {
      size_t packed = 1, scale = 1;
      const chord_status_t st = chord_w4a16_weight_sizes(s.b, s.c, s.d, s.e, &packed, &scale);
      check_status(st, "chord_w4a16_weight_sizes");
      if (st != CHORD_SUCCESS && (packed != 0 || scale != 0)) std::abort();
      check_status(chord_w4a16_weight_sizes(s.b, s.c, s.d, s.e, nullptr, nullptr), "chord_w4a16_weight_sizes");
      break;
    }
    case 3: {
      int32_t block_m = 0;
      check_status(chord_indexed_block_m(s.b, s.c, s.d, s.e, s.a, s.f, s.g & 1 ? nullptr : &block_m),
                   "chord_indexed_block_m");
      // The stream-K workspace: 0 outside its ranges, else room for one FP32 tile of 512 rows per SM.
      const size_t bytes = chord_indexed_gemm_workspace_size(s.b, s.c);
      const bool valid = s.b >= 8 && s.b <= 256 && s.b % 8 == 0 && s.c >= 1 && s.c <= 1024;
      if (valid != (bytes != 0) || (valid && bytes < static_cast<size_t>(s.c) * s.b * 512 * 4)) std::abort();
      break;
    }
    case 4:
      (void)chord_mla_cache_record_bytes(s.b, s.c);
      (void)chord_indexer_cache_page_bytes(s.b);
      break;
    case 5: {
      if (std::strlen(chord_fuzz_status_string(s.b)) == 0) std::abort();
      int major = 0, minor = 0, patch = 0;
      chord_get_version(&major, &minor, &patch);
      chord_get_version(nullptr, nullptr, nullptr);
      if (chord_abi_version() != CHORD_ABI_VERSION) std::abort();
      break;
    }
    case 6: {
      Padded<chord_runtime_info_t> info{};
      info.args.struct_size = static_cast<size_t>(s.h) % (sizeof(info) + 1);
      check_status(chord_get_runtime_info(s.g & 1 ? nullptr : &info.args), "chord_get_runtime_info");
      if (info.args.driver_available) std::abort();  // this target runs in compile-only mode only
      break;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Kernels are never compiled here: a valid prewarm would spend minutes in NVRTC per input. The explicit
  // missing library makes every compile fail at once (CHORD_ERROR_NVRTC_UNAVAILABLE), after all checks.
  setenv("CHORD_NVRTC_LIBRARY", "/nonexistent/libnvrtc.so", 1);
  setenv("CHORD_LOG_LEVEL", "off", 1);
  g_trace = std::getenv("CHORD_FUZZ_TRACE") && std::string_view(std::getenv("CHORD_FUZZ_TRACE")) == "1";
  char dir[] = "/tmp/chord-fuzz-abi-XXXXXX";
  if (!mkdtemp(dir)) std::abort();
  setenv("CHORD_CACHE_DIR", dir, 1);
  g_config_path = std::string(dir) + "/config.json";
  chord_runtime_info_t info{};
  info.struct_size = sizeof(info);
  if (chord_get_runtime_info(&info) != CHORD_SUCCESS || info.driver_available) {
    std::fprintf(stderr, "c_abi_fuzz runs in compile-only mode: this machine has a CUDA driver\n");
    std::abort();
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  Input in{data, size, 2};
  const uint8_t flags = data[1];
  const CUstream stream = reinterpret_cast<CUstream>(static_cast<uintptr_t>(data[1] >> 5));
  switch (const int op = data[0] % 22) {
    case 0:
      op_with_args<chord_moe_align_args_t>(in, flags, CHORD_MOE_ALIGN_ARGS_MIN_SIZE, "chord_moe_align",
                                           nothing<chord_moe_align_args_t>,
                                           [&](auto* a) { return chord_moe_align(a, stream); });
      break;
    case 1:
      op_with_args<chord_silu_and_mul_args_t>(
          in, flags, CHORD_SILU_AND_MUL_ARGS_MIN_SIZE, "chord_silu_and_mul",
          +[](const chord_silu_and_mul_args_t& a) { return a.rows == 0; },
          [&](auto* a) { return chord_silu_and_mul(a, stream); });
      break;
    case 2:
      op_with_args<chord_moe_combine_args_t>(
          in, flags, CHORD_MOE_COMBINE_ARGS_MIN_SIZE, "chord_moe_combine",
          +[](const chord_moe_combine_args_t& a) { return a.num_tokens == 0; },
          [&](auto* a) { return chord_moe_combine(a, stream); });
      break;
    case 3:
      op_with_args<chord_warp_decode_moe_args_t>(
          in, flags, CHORD_WARP_DECODE_MOE_ARGS_MIN_SIZE, "chord_warp_decode_moe",
          +[](const chord_warp_decode_moe_args_t& a) { return a.num_tokens == 0; },
          [&](auto* a) { return chord_warp_decode_moe(a, stream); });
      break;
    case 4: {
      chord_w4a16_weight_t out{};
      out.struct_size = sizeof(out);
      op_with_args<chord_w4a16_pack_args_t>(
          in, flags, CHORD_W4A16_PACK_ARGS_MIN_SIZE, "chord_w4a16_pack", nothing<chord_w4a16_pack_args_t>,
          [&](auto* a) { return chord_w4a16_pack(a, flags & kNullWeight ? nullptr : &out, stream); });
      break;
    }
    case 5:
      op_with_args<chord_grouped_contiguous_args_t>(
          in, flags, CHORD_GROUPED_CONTIGUOUS_ARGS_MIN_SIZE, "chord_grouped_contiguous",
          +[](const chord_grouped_contiguous_args_t& a) { return a.m == 0; },
          [&](auto* a) { return chord_grouped_contiguous(a, stream); });
      break;
    case 6:
      op_with_args<chord_grouped_masked_args_t>(in, flags, CHORD_GROUPED_MASKED_ARGS_MIN_SIZE, "chord_grouped_masked",
                                                nothing<chord_grouped_masked_args_t>,
                                                [&](auto* a) { return chord_grouped_masked(a, stream); });
      break;
    case 7:
      op_with_args<chord_indexed_args_t>(
          in, flags, CHORD_INDEXED_ARGS_MIN_SIZE, "chord_indexed_gemm",
          +[](const chord_indexed_args_t& a) { return a.num_tokens == 0; },
          [&](auto* a) { return chord_indexed_gemm(a, stream); });
      break;
    case 8:
      op_with_args<chord_mla_cache_write_args_t>(
          in, flags, CHORD_MLA_CACHE_WRITE_ARGS_MIN_SIZE, "chord_mla_cache_write",
          +[](const chord_mla_cache_write_args_t& a) { return a.num_tokens == 0; },
          [&](auto* a) { return chord_mla_cache_write(a, stream); });
      break;
    case 9: {
      size_t bytes = 0;
      op_with_args<chord_sparse_mla_decode_args_t>(
          in, flags, CHORD_SPARSE_MLA_DECODE_ARGS_MIN_SIZE, "chord_sparse_mla_decode_workspace_size",
          static_cast<bool (*)(const chord_sparse_mla_decode_args_t&)>(nullptr),
          [&](auto* a) { return chord_sparse_mla_decode_workspace_size(a, flags & kNullWeight ? nullptr : &bytes); });
      break;
    }
    case 10:
      op_with_args<chord_sparse_mla_decode_args_t>(
          in, flags, CHORD_SPARSE_MLA_DECODE_ARGS_MIN_SIZE, "chord_sparse_mla_decode",
          +[](const chord_sparse_mla_decode_args_t& a) { return a.num_tokens == 0; },
          [&](auto* a) { return chord_sparse_mla_decode(a, stream); });
      break;
    case 11:
      op_with_args<chord_indexer_cache_write_args_t>(
          in, flags, CHORD_INDEXER_CACHE_WRITE_ARGS_MIN_SIZE, "chord_indexer_cache_write",
          +[](const chord_indexer_cache_write_args_t& a) { return a.num_tokens == 0; },
          [&](auto* a) { return chord_indexer_cache_write(a, stream); });
      break;
    case 12:
      op_with_args<chord_dsa_indexer_args_t>(
          in, flags, CHORD_DSA_INDEXER_ARGS_MIN_SIZE, "chord_dsa_indexer_logits",
          +[](const chord_dsa_indexer_args_t& a) { return a.num_tokens == 0 || a.max_context == 0; },
          [&](auto* a) { return chord_dsa_indexer_logits(a, stream); });
      break;
    case 13:
      op_with_args<chord_dsa_topk_args_t>(
          in, flags, CHORD_DSA_TOPK_ARGS_MIN_SIZE, "chord_dsa_topk",
          +[](const chord_dsa_topk_args_t& a) { return a.num_tokens == 0; },
          [&](auto* a) { return chord_dsa_topk(a, stream); });
      break;
    case 14:
      prewarm(in, flags);
      break;
    default:
      scalar_functions(in, op - 15);
      break;
  }
  return 0;
}
