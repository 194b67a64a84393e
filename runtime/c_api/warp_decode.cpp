// The C ABI of warp decode.
#include "chordrt/chordrt.hpp"  // TEMPORARY
#include "runtime/c_api/c_api.hpp"

using chordrt::c_api::guarded;
using chordrt::c_api::read_args;

extern "C" {

CHORD_API size_t chord_warp_decode_moe_workspace_size(int64_t num_tokens, int32_t top_k, int32_t intermediate) {
  return chordrt::warp_decode_moe_workspace_size(num_tokens, top_k, intermediate);
}

CHORD_API chord_status_t chord_warp_decode_moe(const chord_warp_decode_moe_args_t* args, CUstream stream) {
  return guarded([&] {
    if (!args) chordrt::throw_error(CHORD_ERROR_INVALID_ARGUMENT, "chord_warp_decode_moe: args is null");
    check_struct(args, sizeof(chord_warp_decode_moe_args_t), "chord_warp_decode_moe_args_t");
    if (args->format != CHORD_WEIGHT_INT4_GROUP32 && args->format != CHORD_WEIGHT_MXFP8) {
      chordrt::throw_error(CHORD_ERROR_INVALID_ARGUMENT, "warp_decode_moe: unknown weight format {}", args->format);
    }
    const chordrt::WarpDecodeMoeArgs a{.format = static_cast<chord_weight_format_t>(args->format),
                                       .num_tokens = args->num_tokens,
                                       .hidden = args->hidden,
                                       .intermediate = args->intermediate,
                                       .num_experts = args->num_experts,
                                       .top_k = args->top_k,
                                       .x = args->x,
                                       .topk_ids = args->topk_ids,
                                       .topk_weights = args->topk_weights,
                                       .w13 = args->w13,
                                       .w13_scale = args->w13_scale,
                                       .w2 = args->w2,
                                       .w2_scale = args->w2_scale,
                                       .expert_map = args->expert_map,
                                       .num_global_experts = args->num_global_experts,
                                       .workspace = args->workspace,
                                       .workspace_bytes = args->workspace_bytes,
                                       .output = args->output};
    chordrt::warp_decode_moe(a, stream);
  });
}

}  // extern "C"
