// From a model (built-in preset or Hugging Face config.json) and a deployment (tpN / epN) to every
// kernel descriptor that deployment dispatches: what `chord-jit prewarm` compiles.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "jit_cache/descriptor.hpp"
#include "runtime/core/device_facts.hpp"

namespace chordrt {

// The sparse attention of a DeepSeek-V3.2 / Mistral Large 4 style model: MLA (512 latent dims plus the
// RoPE dims) over an fp8_ds_mla cache, and the DSA indexer.
struct SparseAttentionShape {
  int num_heads = 0;         // attention heads of the model (split by TP)
  int rope_dims = 64;        // 64 (0 for a model without RoPE)
  bool nope_layers = false;  // some layers have 0 RoPE dims (Mistral Large 4: every 4th)
  int index_heads = 0;       // DSA indexer heads (replicated under TP); 0 = no indexer
  int index_topk = 2048;
};

struct MoeModelShape {
  std::string name;
  int hidden = 0;
  int moe_intermediate = 0;
  int num_experts = 0;
  int top_k = 0;
  // Expert weight format warp decode reads: "int4" (compressed-tensors INT4 group 32), "mxfp8", or ""
  // (none it serves, e.g. DeepSeek's FP8 block-128 checkpoints): no warp-decode kernels are planned.
  std::string weight_format;
  // Sparse MLA + DSA indexer, when the model has them.
  std::optional<SparseAttentionShape> attention;
};

struct Deployment {
  std::string name;
  int tensor_parallel = 1;
  int expert_parallel = 1;
  // Parses "tp8", "ep16", "tp1"; throws INVALID_ARGUMENT.
  static Deployment parse(std::string_view text);
};

std::vector<std::string> model_preset_names();
// A preset name, or a path to a config.json (fields hidden_size, moe_intermediate_size,
// n_routed_experts or num_experts, num_experts_per_tok; also inside "text_config"; the weight format
// from quantization_config: compressed-tensors 4-bit group-32 weights -> "int4", quant_method or
// quant_algo "mxfp8" -> "mxfp8"; sparse attention from index_topk, index_n_heads, num_attention_heads
// and qk_rope_head_dim when kv_lora_rank is 512). Throws INVALID_ARGUMENT naming what is missing.
// A preset with moe_intermediate 0 (Mistral Large 4, whose expert size chordrt does not assume) plans
// its attention only.
MoeModelShape resolve_model(std::string_view preset_or_path);

// Deduplicated, in a stable order: the MoE glue kernels, then (when the model has a warp-decode weight
// format and its shapes are supported) warp decode's gate/up and down for every batch of 1..128 tokens,
// and for INT4 models under expert parallelism the grouped packers and GEMMs (contiguous prefill
// buckets, masked decode buckets) of both projections; then, with sparse attention, the fp8_ds_mla
// writer and decode (+ combine) at num_heads / TP heads (and the NoPE variants), and the indexer's key
// writer, logits (decode and prefill shapes up to 16K tokens x 256K context, page 64) and top-k.
// `facts`: the device the plan is for (DeviceFacts::offline(arch) on a build box without one); the same
// facts dispatch sees on that device, so a strict-mode run finds every kernel.
std::vector<jit::Descriptor> plan_descriptors(const MoeModelShape& model, const Deployment& deployment,
                                              const DeviceFacts& facts);

// What each family's planner sees, and where it puts its descriptors (deduplicated, in order).
struct ModelPlanInput {
  const MoeModelShape& model;
  const Deployment& deployment;
  const DeviceFacts& facts;
};
class PlanBuilder {
 public:
  void add(const jit::Descriptor& d);
  std::vector<jit::Descriptor> take() { return std::move(descriptors_); }

 private:
  std::vector<jit::Descriptor> descriptors_;
};
// A family's contribution to a model's plan: for every shape the deployment dispatches, the
// descriptors the family's dispatch uses for it (runtime/families.cpp lists the planners).
using FamilyPlanner = void (*)(const ModelPlanInput& in, PlanBuilder& plan);
std::span<const FamilyPlanner> family_planners();

}  // namespace chordrt
