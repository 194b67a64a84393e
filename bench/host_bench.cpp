// Host costs of the JIT runtime:
//  - cold NVRTC compile, one kernel at a time, of a deployment's plan (default kimi-k2 ep8) and every
//    family's example descriptors (fresh cache directory),
//  - a fixed reference program compiled the same way, whose time measures the machine (the 2-core
//    development machine's speed varied 2x between days): kernel time / reference time compares runs,
//  - disk-hit load (a fresh runtime on the same directory),
//  - with a GPU: host time per launch on a memo hit (chordrt op vs a raw cuLaunchKernelEx of the same
//    function, and the lookup alone: context + descriptor + memo).
// Usage: chord_host_bench [--json FILE] [--plan MODEL DEPLOYMENT]
#include <fmt/format.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "chordrt/chordrt.hpp"
#include "heuristics/glue.hpp"
#include "runtime/driver.hpp"
#include "runtime/jit_runtime.hpp"
#include "runtime/kernel_registry.hpp"
#include "runtime/launch.hpp"
#include "runtime/model_plan.hpp"
#include "runtime/nvrtc_compiler.hpp"
#include "runtime/ops/glue.hpp"

using namespace chordrt;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// Never edit: its compile time is the yardstick across runs. One templated kernel with an unrolled FMA
// loop, shared memory and a warp shuffle, sized to compile in ~100-200 ms like a small chordrt kernel.
constexpr const char* kReferenceSource = R"(
template <int N>
__global__ void reference_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
  __shared__ float tile[256];
  float acc[N];
#pragma unroll
  for (int i = 0; i < N; ++i) acc[i] = x[(threadIdx.x + i * 37) % n];
  tile[threadIdx.x % 256] = acc[0];
  __syncthreads();
#pragma unroll
  for (int k = 0; k < 64; ++k) {
#pragma unroll
    for (int i = 0; i < N; ++i) acc[i] = __fmaf_rn(acc[i], tile[(k * 7 + i) % 256], acc[(i + 1) % N]);
  }
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < N; ++i) s += acc[i];
  for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (threadIdx.x % 32 == 0) y[blockIdx.x * blockDim.x / 32 + threadIdx.x / 32] = s;
}
)";

double reference_compile_ms(const Arch& arch) {
  std::vector<double> ms;
  const Nvrtc& n = Nvrtc::get();
  const std::vector<std::string> options = nvrtc_options(arch, n.major(), n.minor());
  for (int i = 0; i < 5; ++i) {
    ms.push_back(n.compile(kReferenceSource, "reference_kernel<16>", options, {}, "reference").compile_ms);
  }
  return median(ms);
}

json bench_compile(const std::string& model, const std::string& deployment) {
  char tmpl[] = "/tmp/chord-bench-XXXXXX";
  const std::filesystem::path dir = ::mkdtemp(tmpl);
  JitOptions opts;
  opts.cache.primary = dir;
  const Arch arch{90, 'a'};
  std::vector<jit::Descriptor> all =
      plan_descriptors(resolve_model(model), Deployment::parse(deployment), DeviceFacts::offline(arch));
  const size_t planned = all.size();
  for (const KernelFamily* f : kernel_families()) {
    for (const auto& d : f->examples(arch)) {
      if (std::find(all.begin(), all.end(), d) == all.end()) all.push_back(d);
    }
  }
  json kernels = json::array();
  std::vector<double> cold, load, plan_cold;
  {
    JitRuntime rt(opts);
    for (const auto& d : all) {
      const auto r = rt.ensure_compiled(d);
      cold.push_back(r.compile_ms);
      if (kernels.size() < planned) plan_cold.push_back(r.compile_ms);
      kernels.push_back({{"descriptor", jit::to_string(d)},
                         {"family", d.schema->family},
                         {"in_plan", kernels.size() < planned},
                         {"cold_compile_ms", r.compile_ms}});
    }
  }
  {
    JitRuntime rt(opts);  // new process state, same directory: every kernel is a disk hit
    for (size_t i = 0; i < all.size(); ++i) {
      const auto t = Clock::now();
      const auto r = rt.ensure_compiled(all[i]);
      const double ms = ms_since(t);
      if (r.source != ImageSource::kDisk) throw std::runtime_error("expected a disk hit");
      load.push_back(ms);
      kernels[i]["disk_hit_ms"] = ms;
    }
  }
  std::filesystem::remove_all(dir);
  const double reference_ms = reference_compile_ms(arch);
  return {{"plan", model + " " + deployment},
          {"kernels", kernels},
          {"reference_compile_ms", reference_ms},
          {"cold_compile_ms_median", median(cold)},
          {"cold_compile_ms_max", *std::max_element(cold.begin(), cold.end())},
          {"plan_cold_compile_ms_median", median(plan_cold)},
          {"plan_cold_compile_ms_max", *std::max_element(plan_cold.begin(), plan_cold.end())},
          {"disk_hit_ms_median", median(load)}};
}

// Host time per call, in batches (synchronizing between batches so the launch queue never fills).
template <typename F>
double host_us_per_call(F&& call, int batches, int per_batch) {
  const auto& api = driver().api;
  std::vector<double> per;
  for (int b = 0; b < batches; ++b) {
    const auto t = Clock::now();
    for (int i = 0; i < per_batch; ++i) call();
    per.push_back(ms_since(t) * 1000.0 / per_batch);
    check_cuda(api.cuCtxSynchronize(), "sync");
  }
  return median(per);
}

json bench_launch() {
  const Driver& d = driver();
  if (d.state != DriverState::kReady) return {{"skipped", d.message}};
  const auto& api = d.api;
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  check_cuda(api.cuDeviceGet(&dev, 0), "cuDeviceGet");
  check_cuda(api.cuDevicePrimaryCtxRetain(&ctx, dev), "retain");
  check_cuda(api.cuCtxSetCurrent(ctx), "set current");
  CUstream stream = nullptr;
  check_cuda(api.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "stream");
  const int64_t rows = 1, inter = 256;  // a tiny launch: host cost dominates
  CUdeviceptr in = 0, out = 0;
  check_cuda(api.cuMemAlloc(&in, rows * 2 * inter * 2), "alloc");
  check_cuda(api.cuMemAlloc(&out, rows * inter * 2), "alloc");
  chord_silu_and_mul_args_t args{sizeof(args), reinterpret_cast<void*>(in), reinterpret_cast<void*>(out), rows, inter};
  ops::silu_and_mul(args, stream);  // warm: compile/load once
  check_cuda(api.cuStreamSynchronize(stream), "sync");

  JitRuntime& rt = JitRuntime::global();
  const ContextState& cs = rt.context_for(stream);
  const auto config = heuristics::select_rowwise(inter);
  const LoadedKernel& k = ops::SiluAndMulFamily::kernel(ops::silu_and_mul_key(inter), cs, stream);
  const auto grid = heuristics::rowwise_grid(rows, inter, config);
  const void* kargs[] = {&args.input, &args.output, &args.rows, &args.intermediate};

  constexpr int kBatches = 50, kPerBatch = 200;
  const double op_us = host_us_per_call([&] { ops::silu_and_mul(args, stream); }, kBatches, kPerBatch);
  const double raw_us = host_us_per_call(
      [&] {
        CUlaunchConfig c{};
        c.gridDimX = grid.x;
        c.gridDimY = grid.y;
        c.gridDimZ = 1;
        c.blockDimX = k.threads;
        c.blockDimY = c.blockDimZ = 1;
        c.hStream = stream;
        check_cuda(api.cuLaunchKernelEx(&c, k.function, const_cast<void**>(kargs), nullptr), "launch");
      },
      kBatches, kPerBatch);
  volatile uintptr_t sink = 0;
  const double lookup_us = host_us_per_call(
      [&] {
        const ContextState& c = rt.context_for(stream);
        sink = sink + reinterpret_cast<uintptr_t>(
                          ops::SiluAndMulFamily::kernel(ops::silu_and_mul_key(inter), c, stream).function);
      },
      kBatches, kPerBatch * 10);
  api.cuMemFree(in);
  api.cuMemFree(out);
  api.cuStreamDestroy(stream);
  return {{"op", "silu_and_mul rows=1 inter=256"},
          {"chordrt_op_host_us", op_us},
          {"raw_cuLaunchKernelEx_host_us", raw_us},
          {"chordrt_overhead_us", op_us - raw_us},
          {"lookup_only_us", lookup_us}};
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path, model = "kimi-k2", deployment = "ep8";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else if (a == "--plan" && i + 2 < argc) {
      model = argv[++i];
      deployment = argv[++i];
    } else {
      fmt::print(stderr, "usage: chord_host_bench [--json FILE] [--plan MODEL DEPLOYMENT]\n");
      return 2;
    }
  }
  json result = {{"compile", bench_compile(model, deployment)}, {"launch", bench_launch()}};
  const auto& c = result["compile"];
  fmt::print(
      "cold NVRTC compile: plan {} median {:.1f} ms, max {:.1f} ms; all {} kernels median {:.1f} ms, max {:.1f} ms; "
      "reference program {:.1f} ms; disk hit median {:.2f} ms\n",
      c["plan"].get<std::string>(), c["plan_cold_compile_ms_median"].get<double>(),
      c["plan_cold_compile_ms_max"].get<double>(), c["kernels"].size(), c["cold_compile_ms_median"].get<double>(),
      c["cold_compile_ms_max"].get<double>(), c["reference_compile_ms"].get<double>(),
      c["disk_hit_ms_median"].get<double>());
  const auto& l = result["launch"];
  if (l.contains("skipped")) {
    fmt::print("launch overhead: skipped ({})\n", l["skipped"].get<std::string>());
  } else {
    fmt::print(
        "launch host time: chordrt op {:.2f} us, raw cuLaunchKernelEx {:.2f} us, overhead {:.2f} us, "
        "lookup alone {:.3f} us\n",
        l["chordrt_op_host_us"].get<double>(), l["raw_cuLaunchKernelEx_host_us"].get<double>(),
        l["chordrt_overhead_us"].get<double>(), l["lookup_only_us"].get<double>());
  }
  if (!json_path.empty()) std::ofstream(json_path) << result.dump(2) << "\n";
  return 0;
}
