"""Humming as the optional peer column of the W4A16 GEMM benchmarks (indexed_bench.py, grouped_bench.py; run as
scripts from bench/, so importable by name): the import guard, the weight conversion, its heuristic config, the
call, and the measurement of one point into a result row.

Humming (PyPI humming-kernels, the wheel in shared/peers/README.md) is the W4A16 MoE library Chord is derived
from. The benchmarks import the installed package; nothing of it is copied here. Without it (or with --no-peers)
one line says so and the rows have no peer fields.
"""
import json
import time

import torch

from bench_common import graph_time_us

try:  # the optional peer: an installed humming-kernels package (the wheel: shared/peers/README.md)
    import humming
    from humming.forward import humming_forward
    from humming.schema import CompressedTensorsWeightSchema
    from humming.transform import prepare_fp16_e8m0_scale, prepare_layer_config, transform_humming_tensors
    from humming.tune import get_heuristics_config
    HUMMING_MISSING = None
except Exception as err:  # ImportError, or its native libraries / device probe failing at import
    humming = None
    HUMMING_MISSING = f"{type(err).__name__}: {err}"

HUMMING_LOCKS = 2048  # Stream-K locks as HummingLayer allocates them: zeroed once (a tile's last slice resets its lock)


def humming_weights(words, scale, n, k):
    """One weight set converted by Humming itself, the way HummingLayer.transform() does for a compressed-tensors
    layer with BF16 activations: the checkpoint's int32 weight_packed [E, N, K/8] (stored nibble = q + 8) and BF16
    weight_scale [E, N, K/32] -> (LayerConfig, the kernel's tensors: weight, weight_scale, ...)."""
    experts = words.shape[0]
    schema = CompressedTensorsWeightSchema(format="pack-quantized", type="int", num_bits=4, strategy="group",
                                           group_size=32, symmetric=True)
    # convert_symmetric_integer=True as transform() sets it for floating-point activations
    hschema, tensors = schema.convert_humming({"weight_packed": words, "weight_scale": scale}, shape_n_stacks=[n],
                                              shape_k_stacks=[k], param_dtype=torch.bfloat16, num_experts=experts,
                                              device=words.device, convert_symmetric_integer=True)
    config = prepare_layer_config(shape_n=n, shape_k=k, weight_schema=hschema, num_experts=experts,
                                  torch_dtype=torch.bfloat16, device=words.device, tensors=tensors)
    config, tensors = prepare_fp16_e8m0_scale(config, tensors)
    return config, transform_humming_tensors(config, tensors)


def humming_weight_sets(wsets, n, k, label):
    """Every weight set [(words, scale)] of a group converted by humming_weights, or None (no peer column for the
    group: humming not importable, or the conversion failed; the latter says so in one line)."""
    if humming is None:
        return None
    try:
        hweights = [humming_weights(w, s, n, k) for w, s in wsets]
        if len({c.to_str() for c, _ in hweights}) != 1:
            raise RuntimeError("the weight sets converted to different layer configs")
        return hweights
    except Exception as err:  # the group runs without the peer column
        print(f"humming: {label}: weight conversion failed ({type(err).__name__}: {err}); no peer column",
              flush=True)
        return None


def heuristic_tuning(config, shape_m, gemm_type):
    """Humming's own heuristic tuning config for shape_m rows of a gemm_type GEMM: a JSON copy of the dict
    get_heuristics_config lru-caches (what humming_forward makes of it)."""
    return json.loads(json.dumps(get_heuristics_config(config, shape_m=shape_m, gemm_type=gemm_type)))


def humming_call(config, tensors, a, out, compute, tuning, locks, **moe):
    """A thunk: humming_forward on one weight set (a humming_weights result), activations a into out; moe: the
    gemm type's routing arguments (sorted_ids / expert_ids / num_tokens_padded / top_k, or expert_layout)."""
    return lambda: humming_forward(config, a, tensors["weight"], weight_scale=tensors.get("weight_scale"),
                                   zero_point=tensors.get("zero_point"), weight_scale_2=tensors.get("weight_scale_2"),
                                   outputs=out, locks=locks, compute_config=compute, tuning_config=tuning, **moe)


def measure_peer(row, build, out, error_of, n_sets, replays, rounds):
    """Humming's time, error and config on one point into row; returns the text for the point's line.

    build() -> the peer (.call(i): the thunk of input set i, .block_m, .describe()); out: input set 0's output,
    filled with NaN before an untimed first call on set 0 (it compiles the peer's kernels with NVRTC); error_of()
    -> the error stats of that output against the bench's FP32 reference rows; then the bench's CUDA-graph
    replays over the n_sets input sets. Adds peer_us {"humming": µs}, vs_peer {"humming": chordrt_us / peer_us}
    (< 1: chordrt faster), peer_error and peer_config; if anything fails, peer_failed instead, and the run goes on
    (a device fault still ends it)."""
    try:
        peer = build()
        out.fill_(float("nan"))
        torch.cuda.synchronize()
        start = time.monotonic()
        peer.call(0)()  # compiles its kernel (NVRTC) outside any timing
        torch.cuda.synchronize()
        first_call_s = time.monotonic() - start
        error = error_of()
        us = graph_time_us([peer.call(i) for i in range(n_sets)], replays, rounds)
    except Exception as err:  # a peer's failure costs its column, not the run (a device fault still ends it)
        row["peer_failed"] = {"humming": f"{type(err).__name__}: {err}"}
        return f"  humming FAILED ({type(err).__name__}: {err})"
    row["peer_us"] = {"humming": us}
    row["vs_peer"] = {"humming": row["chordrt_us"] / us}
    row["peer_error"] = {"humming": error}
    row["peer_config"] = {"humming": {**peer.describe(), "first_call_s": first_call_s}}
    return (f"  humming bm {peer.block_m:>3} {us:8.1f} us chordrt/humming {row['vs_peer']['humming']:5.2f} "
            f"err {error['rel_err']:.2e}")


def announce_peer(no_peers):
    """The run's one line when there is no peer column."""
    if humming is None:
        print(f"humming not importable ({HUMMING_MISSING}): no peer column", flush=True)
    elif no_peers:
        print("--no-peers: no peer column", flush=True)


def peers_field(no_peers, timing):
    """The result file's "peers" field: Humming's version and how it was timed, or None without the column."""
    return {"humming": None if humming is None or no_peers else
            {"version": getattr(humming, "__version__", "unknown"), "timing": timing}}
