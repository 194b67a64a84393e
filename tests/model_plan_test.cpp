// Models (presets and config.json files), deployments, and the descriptors a deployment dispatches.
#include "runtime/model_plan.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "chordrt/chordrt.hpp"
#include "runtime/kernel_registry.hpp"
#include "runtime/ops/dsa_indexer.hpp"
#include "runtime/ops/glue.hpp"
#include "runtime/ops/grouped.hpp"
#include "runtime/ops/sparse_mla.hpp"
#include "runtime/ops/warp_decode.hpp"
#include "tests/test_support.hpp"

namespace fs = std::filesystem;
using chordrt::Arch;
using chordrt::Deployment;
using chordrt::MoeModelShape;
using chordrt::jit::Descriptor;
using chordrt::test::check_invalid_argument;
using chordrt::test::kHopper;
using chordrt::test::kHopperFacts;
using chordrt::test::TempDir;

namespace {

std::string write_file(const TempDir& t, const std::string& name, const std::string& text) {
  const fs::path p = t.path() / name;
  std::ofstream(p) << text;
  return p.string();
}

std::vector<Descriptor> of_family(const std::vector<Descriptor>& ds, std::string_view family) {
  std::vector<Descriptor> out;
  for (const auto& d : ds) {
    if (d.schema->family == family) out.push_back(d);
  }
  return out;
}

void check_no_duplicates(const std::vector<Descriptor>& ds) {
  for (size_t i = 0; i < ds.size(); ++i) {
    for (size_t j = i + 1; j < ds.size(); ++j) {
      INFO(chordrt::jit::to_string(ds[i]));
      CHECK_FALSE(ds[i] == ds[j]);
    }
  }
}

}  // namespace

TEST_CASE("model presets", "[plan]") {
  const auto names = chordrt::model_preset_names();
  for (const MoeModelShape& want :
       {MoeModelShape{"kimi-k2", 7168, 2048, 384, 8, "int4", std::nullopt},
        MoeModelShape{"deepseek-v3", 7168, 2048, 256, 8, "", std::nullopt},
        MoeModelShape{"deepseek-v3.2", 7168, 2048, 256, 8, "", chordrt::SparseAttentionShape{128, 64, false, 64, 2048}},
        MoeModelShape{"mistral-large-4", 6144, 0, 128, 4, "", chordrt::SparseAttentionShape{64, 64, true, 32, 2048}}}) {
    INFO(want.name);
    CHECK(std::find(names.begin(), names.end(), want.name) != names.end());
    const MoeModelShape m = chordrt::resolve_model(want.name);
    CHECK(m.name == want.name);
    CHECK(m.hidden == want.hidden);
    CHECK(m.moe_intermediate == want.moe_intermediate);
    CHECK(m.num_experts == want.num_experts);
    CHECK(m.top_k == want.top_k);
    CHECK(m.weight_format == want.weight_format);
    REQUIRE(m.attention.has_value() == want.attention.has_value());
    if (m.attention) {
      CHECK(m.attention->num_heads == want.attention->num_heads);
      CHECK(m.attention->nope_layers == want.attention->nope_layers);
      CHECK(m.attention->index_heads == want.attention->index_heads);
    }
  }
}

TEST_CASE("models from config.json files", "[plan]") {
  TempDir t("plan-test");
  SECTION("top-level fields") {
    const auto path = write_file(t, "config.json", R"({"model_type": "deepseek_v3", "hidden_size": 4096,
      "moe_intermediate_size": 1408, "n_routed_experts": 64, "num_experts_per_tok": 6, "vocab_size": 102400})");
    const auto m = chordrt::resolve_model(path);
    CHECK(m.name == path);
    CHECK(m.hidden == 4096);
    CHECK(m.moe_intermediate == 1408);
    CHECK(m.num_experts == 64);
    CHECK(m.top_k == 6);
  }
  SECTION("nested under text_config") {
    const auto path = write_file(t, "config.json", R"({"architectures": ["X"], "text_config": {"hidden_size": 2048,
      "moe_intermediate_size": 768, "n_routed_experts": 128, "num_experts_per_tok": 8}})");
    const auto m = chordrt::resolve_model(path);
    CHECK(m.hidden == 2048);
    CHECK(m.moe_intermediate == 768);
    CHECK(m.num_experts == 128);
    CHECK(m.top_k == 8);
  }
  SECTION("num_experts instead of n_routed_experts") {
    const auto path = write_file(t, "config.json", R"({"hidden_size": 2048, "moe_intermediate_size": 768,
      "num_experts": 60, "num_experts_per_tok": 4})");
    const auto m = chordrt::resolve_model(path);
    CHECK(m.num_experts == 60);
    CHECK(m.top_k == 4);
  }
  SECTION("the weight format from quantization_config") {
    const auto int4 = write_file(t, "int4.json", R"({"hidden_size": 7168, "moe_intermediate_size": 2048,
      "n_routed_experts": 384, "num_experts_per_tok": 8, "quantization_config": {"quant_method": "compressed-tensors",
      "config_groups": {"group_0": {"weights": {"num_bits": 4, "group_size": 32, "symmetric": true}}}}})");
    CHECK(chordrt::resolve_model(int4).weight_format == "int4");
    const auto int8 = write_file(t, "int8.json", R"({"hidden_size": 7168, "moe_intermediate_size": 2048,
      "n_routed_experts": 384, "num_experts_per_tok": 8, "quantization_config": {"quant_method": "compressed-tensors",
      "config_groups": {"group_0": {"weights": {"num_bits": 8, "group_size": 32, "symmetric": true}}}}})");
    CHECK(chordrt::resolve_model(int8).weight_format.empty());
    const auto mx = write_file(t, "mx.json", R"({"text_config": {"hidden_size": 2048, "moe_intermediate_size": 768,
      "num_experts": 128, "num_experts_per_tok": 8, "quantization_config": {"quant_method": "MXFP8"}}})");
    CHECK(chordrt::resolve_model(mx).weight_format == "mxfp8");
    const auto fp8 = write_file(t, "fp8.json", R"({"hidden_size": 7168, "moe_intermediate_size": 2048,
      "n_routed_experts": 256, "num_experts_per_tok": 8, "quantization_config": {"quant_method": "fp8",
      "weight_block_size": [128, 128]}})");
    CHECK(chordrt::resolve_model(fp8).weight_format.empty());
  }
  SECTION("top-level values win over text_config") {
    const auto path = write_file(t, "config.json", R"({"hidden_size": 1024, "moe_intermediate_size": 512,
      "num_experts": 32, "num_experts_per_tok": 2, "text_config": {"hidden_size": 9999}})");
    CHECK(chordrt::resolve_model(path).hidden == 1024);
  }
}

TEST_CASE("bad model configs are INVALID_ARGUMENT naming the problem", "[plan]") {
  TempDir t("plan-test");
  auto rejected = [](const std::string& model, std::initializer_list<std::string> needles) {
    INFO(model);
    check_invalid_argument([&] { (void)chordrt::resolve_model(model); }, needles);
  };
  const std::string full = R"("hidden_size": 2048, "moe_intermediate_size": 768, "num_experts_per_tok": 8)";
  rejected(write_file(t, "no-experts.json", "{" + full + "}"), {"n_routed_experts", "num_experts", "no-experts.json"});
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  rejected(write_file(t, "deep.json", "{" + full + R"(, "n_routed_experts": 64, "text_config": )" + deep + "}"),
           {"deep.json", "nested more than 64 levels"});
  // Not a regular file: refused at once, never waited on (a FIFO) or read without end.
  const std::string fifo = (t.path() / "config-fifo.json").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  rejected(fifo, {"config-fifo.json is not a regular file"});
  rejected(t.path().string(), {"is not a regular file"});
  rejected(write_file(t, "no-inter.json", R"({"hidden_size": 2048, "n_routed_experts": 64, "num_experts_per_tok": 8})"),
           {"moe_intermediate_size", "no-inter.json"});
  rejected(write_file(t, "no-hidden.json",
                      R"({"moe_intermediate_size": 768, "n_routed_experts": 64, "num_experts_per_tok": 8})"),
           {"hidden_size"});
  rejected(write_file(t, "no-topk.json", R"({"hidden_size": 2048, "moe_intermediate_size": 768, "num_experts": 64})"),
           {"num_experts_per_tok"});
  rejected(write_file(t, "string-hidden.json",
                      R"({"hidden_size": "2048", "moe_intermediate_size": 768, "num_experts": 64,
                          "num_experts_per_tok": 8})"),
           {"hidden_size"});
  rejected(write_file(t, "dense.json", R"({"hidden_size": 4096, "intermediate_size": 11008})"), {"MoE"});
  rejected(write_file(t, "broken.json", R"({"hidden_size": 2048,)"), {"not valid JSON", "broken.json"});
  rejected(write_file(t, "empty.json", ""), {"not valid JSON", "empty.json"});
  rejected(write_file(t, "implausible.json",
                      R"({"hidden_size": 2048, "moe_intermediate_size": 768, "num_experts": 4,
                          "num_experts_per_tok": 8})"),
           {"implausible"});
  rejected(write_file(t, "zero.json",
                      R"({"hidden_size": 0, "moe_intermediate_size": 768, "num_experts": 64,
                          "num_experts_per_tok": 8})"),
           {"implausible"});
  // Integers past int32 are refused, not truncated (4294967552 used to read as 256).
  rejected(write_file(t, "huge.json",
                      R"({"hidden_size": 4294967552, "moe_intermediate_size": 768, "num_experts": 64,
                          "num_experts_per_tok": 8})"),
           {"\"hidden_size\" must be in [0, 2147483647], got 4294967552", "huge.json"});
  rejected(write_file(t, "negative.json",
                      R"({"hidden_size": 2048, "moe_intermediate_size": -768, "num_experts": 64,
                          "num_experts_per_tok": 8})"),
           {"moe_intermediate_size", "got -768"});
  // A quantization field of the wrong type names the field (it was the JSON library's type_error).
  rejected(write_file(t, "quant-type.json",
                      "{" + full + R"(, "num_experts": 64, "quantization_config": {"quant_method": 5}})"),
           {"quantization_config.quant_method must be a string, got 5"});
  rejected(write_file(t, "bits-type.json", "{" + full + R"(, "num_experts": 64, "quantization_config":
               {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": "4"}}}}})"),
           {"weights.num_bits must be a number, got \"4\""});
  rejected(write_file(t, "index-heads.json", "{" + full + R"(, "num_experts": 64, "index_topk": 2048,
               "kv_lora_rank": 512, "num_attention_heads": 99999999999})"),
           {"num_attention_heads"});
  rejected((t.path() / "does-not-exist" / "config.json").string(), {"does-not-exist", "kimi-k2"});
  rejected("kimi-k3", {"kimi-k3", "preset"});
  rejected("", {"preset"});
}

TEST_CASE("planning for an arch the kernels do not target is refused up front", "[plan]") {
  const MoeModelShape kimi = chordrt::resolve_model("kimi-k2");
  for (const char* arch : {"sm_80", "sm_90", "sm_100a", "sm_120"}) {
    INFO(arch);
    check_invalid_argument(
        [&] {
          (void)chordrt::plan_descriptors(kimi, Deployment::parse("ep8"),
                                          chordrt::DeviceFacts::offline(chordrt::Arch::parse(arch)));
        },
        {std::string("arch ") + arch + " is not supported", "sm_90a"});
  }
  CHECK_FALSE(chordrt::plan_descriptors(kimi, Deployment::parse("ep8"), kHopperFacts).empty());
}

TEST_CASE("Deployment::parse", "[plan]") {
  auto tp1 = Deployment::parse("tp1");
  CHECK(tp1.name == "tp1");
  CHECK(tp1.tensor_parallel == 1);
  CHECK(tp1.expert_parallel == 1);
  auto tp8 = Deployment::parse("tp8");
  CHECK(tp8.tensor_parallel == 8);
  CHECK(tp8.expert_parallel == 1);
  auto ep16 = Deployment::parse("ep16");
  CHECK(ep16.name == "ep16");
  CHECK(ep16.tensor_parallel == 1);
  CHECK(ep16.expert_parallel == 16);
  CHECK(Deployment::parse("ep1024").expert_parallel == 1024);
  for (const char* bad : {"x8", "tp", "ep", "tp0", "ep-1", "", "t", "tp8x", "tp 8", "TP8", "tp+8", "pt8", "tp1025",
                          "ep99999999999", "tp08x", "8"}) {
    INFO("\"" << bad << "\"");
    check_invalid_argument([&] { (void)Deployment::parse(bad); }, {"deployment"});
  }
}

TEST_CASE("plan_descriptors for a tensor-parallel deployment", "[plan]") {
  const MoeModelShape kimi = chordrt::resolve_model("kimi-k2");
  const auto ds = chordrt::plan_descriptors(kimi, Deployment::parse("tp8"), kHopperFacts);
  check_no_duplicates(ds);
  for (const auto& d : ds) {
    CHECK(d.arch == kHopper);
    CHECK_NOTHROW(chordrt::family_of(d).program(d));  // every planned descriptor is compilable
  }
  const auto align = of_family(ds, "glue.moe_align");
  const auto silu = of_family(ds, "glue.silu_and_mul");
  const auto combine = of_family(ds, "glue.moe_combine");
  // 5 fixed block sizes plus the indexed family's extra picks (56, 96, 48), each x (one CTA, a cluster of 8).
  CHECK(align.size() == 16);
  REQUIRE(silu.size() == 1);
  REQUIRE(combine.size() == 1);
  // Kimi K2 is an INT4 checkpoint: warp decode's kernels for 1..128 tokens, exactly what dispatch picks.
  const auto gate_up = of_family(ds, "warp_decode.gate_up");
  const auto down = of_family(ds, "warp_decode.down");
  const size_t indexed = of_family(ds, "w4a16.pack").size() + of_family(ds, "indexed.prefill").size() +
                         of_family(ds, "indexed.decode").size();
  CHECK(indexed > 0);
  CHECK(ds.size() == align.size() + silu.size() + combine.size() + gate_up.size() + down.size() + indexed);
  const chordrt::heuristics::WarpDecodeShape wd{
      chordrt::heuristics::WeightFormat::kInt4Group32, 7168, 256, 384, 384, 8, false};
  for (int64_t tokens = 1; tokens <= 128; ++tokens) {
    INFO("tokens " << tokens);
    const auto keys = chordrt::ops::warp_decode_keys(wd, tokens, kHopperFacts);
    const auto g = chordrt::ops::WarpDecodeGateUpFamily::descriptor(kHopper, keys.gate_up);
    const auto d = chordrt::ops::WarpDecodeDownFamily::descriptor(kHopper, keys.down);
    CHECK(std::find(gate_up.begin(), gate_up.end(), g) != gate_up.end());
    CHECK(std::find(down.begin(), down.end(), d) != down.end());
  }
  for (const auto& d : gate_up) {
    CHECK(d.get("format") == 0);
    CHECK(d.get("intermediate") == 256);
    CHECK(d.get("experts") == 384);
    CHECK(d.get("has_map") == 0);
  }
  std::vector<int64_t> blocks, clusters;
  for (const auto& d : align) {
    CHECK(d.get("num_experts") == 384);
    CHECK(d.get("has_expert_map") == 0);
    CHECK(d.get("threads") == 1024);
    blocks.push_back(d.get("block_size"));
    clusters.push_back(d.get("cluster"));
  }
  CHECK(blocks == std::vector<int64_t>{8, 8, 16, 16, 32, 32, 64, 64, 128, 128, 56, 56, 96, 96, 48, 48});
  CHECK(clusters == std::vector<int64_t>{1, 8, 1, 8, 1, 8, 1, 8, 1, 8, 1, 8, 1, 8, 1, 8});
  // Under TP each GPU holds intermediate/TP columns: 2048/8 = 256.
  CHECK(silu[0] == chordrt::ops::SiluAndMulFamily::descriptor(kHopper, chordrt::ops::silu_and_mul_key(256)));
  CHECK(combine[0] ==
        chordrt::ops::MoeCombineFamily::descriptor(kHopper, chordrt::ops::moe_combine_key(8, 7168, false)));
  CHECK(combine[0].get("filtered") == 0);
  CHECK(combine[0].get("top_k") == 8);

  // Stable order: the same plan twice.
  CHECK(chordrt::plan_descriptors(kimi, Deployment::parse("tp8"), kHopperFacts) == ds);
}

TEST_CASE("plan_descriptors divides the intermediate size by TP", "[plan]") {
  // 1032 = 8 * 129: vec 8 at TP1, 258 (vec 2) at TP4, 129 (vec 1) at TP8.
  const MoeModelShape m{"custom", 1024, 1032, 64, 4, "", std::nullopt};
  auto silu_of = [&](const char* dep) {
    const auto s = of_family(chordrt::plan_descriptors(m, Deployment::parse(dep), kHopperFacts), "glue.silu_and_mul");
    REQUIRE(s.size() == 1);
    return s[0];
  };
  CHECK(silu_of("tp1").get("vec") == 8);
  CHECK(silu_of("tp1").get("threads") == 256);
  CHECK(silu_of("tp4").get("vec") == 2);
  CHECK(silu_of("tp4").get("threads") == 256);
  CHECK(silu_of("tp8").get("vec") == 1);
  CHECK(silu_of("tp8").get("threads") == 256);
  CHECK(silu_of("tp8") == chordrt::ops::SiluAndMulFamily::descriptor(kHopper, chordrt::ops::silu_and_mul_key(129)));
  // EP leaves each expert whole.
  CHECK(silu_of("ep8") == chordrt::ops::SiluAndMulFamily::descriptor(kHopper, chordrt::ops::silu_and_mul_key(1032)));
}

TEST_CASE("plan_descriptors for an expert-parallel deployment", "[plan]") {
  const MoeModelShape ds_v3 = chordrt::resolve_model("deepseek-v3");
  const auto ds = chordrt::plan_descriptors(ds_v3, Deployment::parse("ep16"), kHopperFacts);
  check_no_duplicates(ds);
  CHECK(ds.size() == 12);  // FP8 block-128 weights: no warp-decode kernels
  // Kimi K2 at EP8: 48 local experts behind an expert map over 384 ids.
  const auto kimi_ep8 =
      chordrt::plan_descriptors(chordrt::resolve_model("kimi-k2"), Deployment::parse("ep8"), kHopperFacts);
  const auto wd_down = of_family(kimi_ep8, "warp_decode.down");
  REQUIRE_FALSE(wd_down.empty());
  for (const auto& d : wd_down) {
    CHECK(d.get("experts") == 48);
    CHECK(d.get("has_map") == 1);
    CHECK(d.get("intermediate") == 2048);
  }
  const auto align = of_family(ds, "glue.moe_align");
  REQUIRE(align.size() == 10);
  for (const auto& d : align) {
    CHECK(d.get("has_expert_map") == 1);
    CHECK(d.get("num_experts") == 256);  // global expert ids, mapped to local ones
  }
  const auto combine = of_family(ds, "glue.moe_combine");
  REQUIRE(combine.size() == 1);
  CHECK(combine[0].get("filtered") == 1);
  CHECK(combine[0] ==
        chordrt::ops::MoeCombineFamily::descriptor(kHopper, chordrt::ops::moe_combine_key(8, 7168, true)));
  const auto silu = of_family(ds, "glue.silu_and_mul");
  REQUIRE(silu.size() == 1);
  CHECK(silu[0] == chordrt::ops::SiluAndMulFamily::descriptor(kHopper, chordrt::ops::silu_and_mul_key(2048)));

  // ep1 is not expert-parallel.
  for (const auto& d : chordrt::plan_descriptors(ds_v3, Deployment::parse("ep1"), kHopperFacts)) {
    if (d.schema->family == "glue.moe_align") CHECK(d.get("has_expert_map") == 0);
    if (d.schema->family == "glue.moe_combine") CHECK(d.get("filtered") == 0);
  }
}

TEST_CASE("plan_descriptors adds the grouped GEMMs under expert parallelism", "[plan][grouped]") {
  using chordrt::heuristics::GroupedMode;
  const MoeModelShape kimi = chordrt::resolve_model("kimi-k2");
  for (const int ep : {8, 16, 32}) {
    const auto ds = chordrt::plan_descriptors(kimi, Deployment::parse("ep" + std::to_string(ep)), kHopperFacts);
    check_no_duplicates(ds);
    const int experts = 384 / ep;
    // A packer per (layout, projection): gate_up N 4096 K 7168 and down N 7168 K 2048, in the grouped
    // layouts (WGMMA_K64, also the indexed prefill's, and WGMMA_K128) and the indexed decode's (MMA).
    const auto packs = of_family(ds, "w4a16.pack");
    CHECK(packs.size() == 6);
    const auto gemms = of_family(ds, "grouped.gemm");
    REQUIRE_FALSE(gemms.empty());
    for (const auto& d : gemms) {
      CHECK(d.get("experts") == experts);
      CHECK(((d.get("n") == 4096 && d.get("k") == 7168) || (d.get("n") == 7168 && d.get("k") == 2048)));
      CHECK_NOTHROW(chordrt::family_of(d).program(d));
    }
    // Exactly what dispatch picks for a prefill step and a decode batch.
    for (const auto& [mode, n, k, rows] :
         {std::tuple{GroupedMode::kContiguous, int64_t{4096}, int64_t{7168}, int64_t{128} * experts},
          std::tuple{GroupedMode::kMasked, int64_t{7168}, int64_t{2048}, int64_t{16}}}) {
      const chordrt::heuristics::GroupedShape s{mode, n, k, experts};
      const auto d =
          chordrt::ops::GroupedGemmFamily::descriptor(kHopper, chordrt::ops::grouped_gemm_key(s, rows, kHopperFacts));
      CHECK(std::find(gemms.begin(), gemms.end(), d) != gemms.end());
    }
  }
  // Tensor parallelism uses other families; a model without INT4 weights gets none.
  CHECK(of_family(chordrt::plan_descriptors(kimi, Deployment::parse("tp8"), kHopperFacts), "grouped.gemm").empty());
  CHECK(of_family(
            chordrt::plan_descriptors(chordrt::resolve_model("deepseek-v3"), Deployment::parse("ep8"), kHopperFacts),
            "grouped.gemm")
            .empty());
}

TEST_CASE("plan_descriptors rejects indivisible deployments", "[plan]") {
  const MoeModelShape kimi = chordrt::resolve_model("kimi-k2");
  auto rejected = [&](const char* dep, const char* needle) {
    INFO(dep);
    check_invalid_argument([&] { (void)chordrt::plan_descriptors(kimi, Deployment::parse(dep), kHopperFacts); },
                           {needle, dep});
  };
  rejected("tp3", "TP 3");
  rejected("tp6", "TP 6");
  rejected("ep5", "EP 5");
  rejected("ep7", "EP 7");
  rejected("ep1000", "EP 1000");
  // Divisible ones plan fine: 2048 / 1024 and 384 / 384.
  CHECK_NOTHROW(chordrt::plan_descriptors(kimi, Deployment::parse("tp1024"), kHopperFacts));
  CHECK_NOTHROW(chordrt::plan_descriptors(kimi, Deployment::parse("ep384"), kHopperFacts));
}

TEST_CASE("plan_descriptors for sparse attention (Mistral Large 4 at TP8 / TP4, DeepSeek-V3.2)", "[plan][sparse_mla]") {
  using chordrt::heuristics::SparseMlaShape;
  const chordrt::DeviceFacts h200{};
  for (const auto& [model, deployment, heads, nope] :
       {std::tuple{"mistral-large-4", "tp8", 8, true}, std::tuple{"mistral-large-4", "tp4", 16, true},
        std::tuple{"deepseek-v3.2", "tp8", 16, false}, std::tuple{"deepseek-v3.2", "ep8", 128, false}}) {
    INFO(model << " " << deployment);
    const MoeModelShape m = chordrt::resolve_model(model);
    const auto ds = chordrt::plan_descriptors(m, Deployment::parse(deployment), kHopperFacts);
    check_no_duplicates(ds);
    for (const auto& d : ds) CHECK_NOTHROW(chordrt::family_of(d).program(d));
    // The writer and decode for RoPE layers, and for NoPE layers where the model has them.
    // Both cache formats.
    CHECK(of_family(ds, "sparse_mla.cache_write").size() == (nope ? 4u : 2u));
    // From 32 heads, T = 1 runs 16-head groups (a grid of 32-head CTAs would leave SMs idle), except
    // fp8 at 128 heads, where 16-head CTAs would share SMs: the wgmma kernel serves every T there, as
    // lone CTAs at T = 1 (one block a split) and as cluster pairs from T = 2.
    const size_t per_format_pair = heads < 32 ? 2u : 4u;
    CHECK(of_family(ds, "sparse_mla.decode").size() == (nope ? 2u : 1u) * per_format_pair);
    CHECK(of_family(ds, "sparse_mla.combine").size() == 1u);
    // Exactly what dispatch picks, for decode batches and prefill chunks.
    for (int64_t tokens : {1, 8, 128, 1000}) {
      for (const int format : {chord::sparse_mla::kFp8DsMla, chord::sparse_mla::kBf16}) {
        const SparseMlaShape s{format, 64, heads, 2048, tokens};
        const auto l = chordrt::ops::sparse_mla_launch(s, h200);
        CHECK(std::find(ds.begin(), ds.end(), chordrt::ops::SparseMlaDecodeFamily::descriptor(kHopper, l.decode)) !=
              ds.end());
        CHECK(std::find(ds.begin(), ds.end(), chordrt::ops::SparseMlaCombineFamily::descriptor(kHopper, l.combine)) !=
              ds.end());
      }
    }
    const int index_heads = m.attention->index_heads;
    for (int64_t tokens : {1, 64, 4096}) {
      for (int32_t context : {2048, 65536, 200000}) {
        const auto want = chordrt::ops::DsaIndexerLogitsFamily::descriptor(
            kHopper, chordrt::ops::dsa_indexer_logits_key({index_heads, 64, tokens, context}, h200));
        CHECK(std::find(ds.begin(), ds.end(), want) != ds.end());
      }
    }
    CHECK(of_family(ds, "dsa_indexer.cache_write").size() == 1u);
    CHECK(of_family(ds, "dsa_indexer.topk").size() == 1u);
    // Mistral Large 4's expert size is not assumed: no MoE kernels.
    if (std::string(model) == "mistral-large-4") CHECK(of_family(ds, "glue.moe_align").empty());
  }
  // 64 heads over TP16 leave 4 per GPU: not a whole MMA tile.
  CHECK_THROWS_WITH(
      chordrt::plan_descriptors(chordrt::resolve_model("mistral-large-4"), Deployment::parse("tp16"), kHopperFacts),
      Catch::Matchers::Contains("num_heads must be a multiple of 8"));
}
