// From a model (built-in preset or Hugging Face config.json) and a deployment (tpN / epN) to every
// kernel descriptor that deployment dispatches: what `chord-jit prewarm` compiles.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "jit_cache/descriptor.hpp"

namespace chordrt {

struct MoeModelShape {
  std::string name;
  int hidden = 0;
  int moe_intermediate = 0;
  int num_experts = 0;
  int top_k = 0;
  // Expert weight format warp decode reads: "int4" (compressed-tensors INT4 group 32), "mxfp8", or ""
  // (none it serves, e.g. DeepSeek's FP8 block-128 checkpoints): no warp-decode kernels are planned.
  std::string weight_format;
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
// quant_algo "mxfp8" -> "mxfp8"). Throws INVALID_ARGUMENT naming what is missing.
MoeModelShape resolve_model(std::string_view preset_or_path);

// Deduplicated, in a stable order: the MoE glue kernels, then (when the model has a warp-decode weight
// format and its shapes are supported) warp decode's gate/up and down for every batch of 1..128 tokens,
// and for INT4 models under expert parallelism the grouped packers and GEMMs (contiguous prefill
// buckets, masked decode buckets) of both projections.
std::vector<jit::Descriptor> plan_descriptors(const MoeModelShape& model, const Deployment& deployment, jit::Arch arch);

}  // namespace chordrt
