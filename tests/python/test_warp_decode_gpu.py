"""Warp-decode MoE on a GPU against a float64 reference (dequantize, matmul, SiLU*up, weighted sum).

Fresh random weights and routing per case, output poisoned (NaN) before every run and checked in full.
Shapes from the issue: Kimi K2 TP8 (E=384, H=7168, I=256), Kimi K2 EP8 (48 of 384 experts through an
expert map, I=2048), a Qwen3-30B-A3B-style shape (H=2048, I=768, E=128, top-8); both weight formats.
Skipped unless torch with a CUDA device is available.
"""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device visible to torch", allow_module_level=True)

import chordrt  # noqa: E402
from chordrt import moe_reference as mr  # noqa: E402

DEV = torch.device("cuda", torch.cuda.current_device())
# (name, hidden, intermediate, local experts, global experts, top_k, EP rank or None)
SHAPES = {
    "kimi_tp8": (7168, 256, 384, 384, 8, None),
    "kimi_ep8": (7168, 2048, 48, 384, 8, 3),
    "qwen3_30b": (2048, 768, 128, 128, 8, None),
    "deepseek_v3_ep8": (7168, 2048, 32, 256, 8, 5),
    "qwen3_235b_tp4": (4096, 384, 128, 128, 8, None),
    "deepseek_v2_lite": (2048, 1408, 64, 64, 6, None),
}
# Small shapes for configs forced through CHORD_WARP_DECODE_CONFIG (test_large_bucket_down_configs_...).
CONFIG_SHAPES = {
    "small": (1024, 512, 16, 16, 4, None),
    "small_ep": (1024, 512, 16, 64, 4, 2),
}
ALL_SHAPES = {**SHAPES, **CONFIG_SHAPES}
TOKENS = (1, 2, 4, 8, 16, 32, 64)
# BF16 output of an FP32-accumulated path: a few BF16 roundings (h and the output)
MAX_REL_ERR = 1e-2
MIN_COSINE = 0.9999


@pytest.fixture(scope="module", autouse=True)
def _driver(chord):
    info = chord.runtime_info()
    if not info["driver_available"] or info["device_count"] < 1:
        pytest.skip(f"torch sees a GPU but chordrt does not: {info}")


_weights = {}  # all six sets stay resident (~8 GB), so parametrization order does not matter


def weights(shape, fmt):
    key = (shape, fmt)
    if key not in _weights:
        h, i, e = ALL_SHAPES[shape][:3]
        _weights[key] = mr.random_moe_weights(torch, fmt, e, h, i, DEV, seed=sum(map(ord, shape + fmt)))
    return _weights[key]


def expert_map(shape):
    h, i, e, g, k, rank = ALL_SHAPES[shape]
    return None if rank is None else mr.contiguous_expert_map(torch, g, e, rank, DEV)


def run(shape, fmt, x, ids, rw, emap):
    w = weights(shape, fmt)
    out = torch.full((x.shape[0], w.hidden), float("nan"), dtype=torch.bfloat16, device=DEV)
    ws = torch.full((chordrt.warp_decode_moe_workspace_size(x.shape[0], ids.shape[1], w.intermediate),), 0xFF,
                    dtype=torch.uint8, device=DEV)
    chordrt.warp_decode_moe(x, ids, rw, w.w13, w.w13_scale, w.w2, w.w2_scale, expert_map=emap, workspace=ws,
                            output=out)
    torch.cuda.synchronize()
    return out


def check(shape, fmt, x, ids, rw, emap):
    w = weights(shape, fmt)
    out = run(shape, fmt, x, ids, rw, emap)
    assert not torch.isnan(out).any(), "unwritten or NaN outputs"
    ref = mr.reference_moe(torch, x, ids, rw, w, expert_map=emap)
    stats = mr.error_stats(torch, out, ref)
    assert stats["rel_err"] < MAX_REL_ERR and stats["cosine"] > MIN_COSINE, stats
    return out, ref, stats


def tokens_input(m, h, seed):
    g = torch.Generator(device="cpu")
    g.manual_seed(seed)
    return torch.randn((m, h), generator=g).to(torch.bfloat16).to(DEV)


@pytest.mark.parametrize("fmt", mr.FORMATS)
@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("m", TOKENS)
def test_uniform_routing(shape, fmt, m):
    h, i, e, g, k, rank = SHAPES[shape]
    seed = 1000 * m + len(shape)
    x = tokens_input(m, h, seed)
    ids, rw = mr.random_routing(torch, m, k, g, DEV, seed=seed)
    check(shape, fmt, x, ids, rw, expert_map(shape))


@pytest.mark.parametrize("fmt", mr.FORMATS)
@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("m", (8, 64))
def test_skewed_routing(shape, fmt, m):
    """Zipf-like routing: a few experts take most tokens (more than 8 columns per expert at M=64)."""
    h, i, e, g, k, rank = SHAPES[shape]
    x = tokens_input(m, h, 7 + m)
    ids, rw = mr.random_routing(torch, m, k, g, DEV, seed=11 + m, skew=1.5)
    if rank is not None:  # make the hot experts local
        ids = torch.where(ids < e, ids + rank * e, ids)
    check(shape, fmt, x, ids, rw, expert_map(shape))


@pytest.mark.parametrize("fmt", mr.FORMATS)
@pytest.mark.parametrize("shape", ["kimi_tp8", "kimi_ep8"])
@pytest.mark.parametrize("m", (100, 128))
def test_largest_buckets(shape, fmt, m):
    """The 128-token bucket (the path's limit), full and partly filled."""
    h, i, e, g, k, rank = SHAPES[shape]
    x = tokens_input(m, h, 77 + m)
    ids, rw = mr.random_routing(torch, m, k, g, DEV, seed=77 + m)
    check(shape, fmt, x, ids, rw, expert_map(shape))


@pytest.mark.parametrize("fmt", mr.FORMATS)
def test_every_token_on_the_same_experts(fmt):
    """All 64 tokens pick experts 5..12: every weight row serves 64 routes (8 column tiles)."""
    shape = "qwen3_30b"
    h, i, e, g, k, _ = SHAPES[shape]
    x = tokens_input(64, h, 3)
    ids = (torch.arange(k, dtype=torch.int32) + 5).repeat(64, 1).to(DEV)
    rw = torch.rand((64, k), device=DEV) + 0.05
    check(shape, fmt, x, ids, rw, None)


def test_invalid_and_unmapped_ids_contribute_nothing():
    """ids -1, >= num_global and unmapped ones are skipped; tokens with no local route get zeros."""
    shape = "kimi_ep8"
    h, i, e, g, k, rank = SHAPES[shape]
    x = tokens_input(6, h, 5)
    ids, rw = mr.random_routing(torch, 6, k, g, DEV, seed=5)
    ids[0, 0], ids[1, 1], ids[2, 2] = -1, g + 3, rank * e + 1
    ids[5] = (rank + 1) * e  # token 5: not a single local expert
    out, ref, _ = check(shape, "int4", x, ids, rw, expert_map(shape))
    assert torch.count_nonzero(out[5]) == 0


def check_uniform(shape, fmt, m, seed):
    """One uniform-routing case of any shape (also run by test_large_bucket_down_configs_... in a child)."""
    h, i, e, g, k, rank = ALL_SHAPES[shape]
    x = tokens_input(m, h, seed)
    ids, rw = mr.random_routing(torch, m, k, g, DEV, seed=seed)
    return check(shape, fmt, x, ids, rw, expert_map(shape))[2]


CHILD_CHECK = """
import json, sys
sys.path.insert(0, {dir!r})
import test_warp_decode_gpu as t
print(json.dumps(t.check_uniform({shape!r}, {fmt!r}, 16, 5)))
"""


# The heuristic picks these down configs only for big token buckets (4 warps with one row tile when 128
# tokens' accumulators fill shared memory; K split in two over two row tiles on EP shapes), so the tests
# above reach them only at Kimi shapes, where one launch takes minutes under racecheck. Forced through
# CHORD_WARP_DECODE_CONFIG on a small shape (a fresh process: the environment is read once), they are cheap
# to check, and to racecheck.
@pytest.mark.parametrize("shape", list(CONFIG_SHAPES))
@pytest.mark.parametrize("fmt", mr.FORMATS)
@pytest.mark.parametrize("down", ["warps=4,k_chunks=1,row_tiles=1,n_tiles=1,stage_groups=4,stages=4",
                                  "warps=8,k_chunks=2,row_tiles=2,n_tiles=1,stage_groups=4,stages=2"])
def test_large_bucket_down_configs_on_a_small_shape(python_runner, tmp_path, shape, fmt, down):
    # The child appends to the launch log this process records with (racecheck plans), else to its own.
    log = os.environ.get("CHORD_LAUNCH_LOG") or str(tmp_path / "launches.log")
    start = os.path.getsize(log) if os.path.exists(log) else 0
    code = CHILD_CHECK.format(dir=os.path.dirname(os.path.abspath(__file__)), shape=shape, fmt=fmt)
    r = python_runner(code, timeout=900, CHORD_WARP_DECODE_CONFIG=",".join("down." + kv for kv in down.split(",")),
                      CHORD_LAUNCH_LOG=log)
    stats = r.result
    assert stats["rel_err"] < MAX_REL_ERR and stats["cosine"] > MIN_COSINE, stats
    with open(log) as f:
        f.seek(start)
        downs = [line for line in f.read().splitlines() if "warp_decode.down[" in line]
    assert downs and all(kv in downs[-1] for kv in down.split(",")), downs


# Two column tiles (16 routes an expert a pass) take one row tile (params.cuh's kMaxTilesPerWarp): the
# heuristics pick them where an active expert expects more than 8 routes (Qwen3-235B EP8 at 128 tokens), which no
# test above reaches; forced on the small shapes for both kernels, the launch log shows the forced fields.
@pytest.mark.parametrize("shape", list(CONFIG_SHAPES))
@pytest.mark.parametrize("fmt", mr.FORMATS)
def test_two_column_tiles_on_a_small_shape(python_runner, tmp_path, shape, fmt):
    log = os.environ.get("CHORD_LAUNCH_LOG") or str(tmp_path / "launches.log")
    start = os.path.getsize(log) if os.path.exists(log) else 0
    code = CHILD_CHECK.format(dir=os.path.dirname(os.path.abspath(__file__)), shape=shape, fmt=fmt)
    spec = "gate_up.row_tiles=1,gate_up.n_tiles=2,down.row_tiles=1,down.n_tiles=2"
    stats = python_runner(code, timeout=900, CHORD_WARP_DECODE_CONFIG=spec, CHORD_LAUNCH_LOG=log).result
    assert stats["rel_err"] < MAX_REL_ERR and stats["cosine"] > MIN_COSINE, stats
    with open(log) as f:
        f.seek(start)
        lines = f.read().splitlines()
    for kernel in ("warp_decode.gate_up[", "warp_decode.down["):
        launched = [line for line in lines if kernel in line]
        assert launched and "row_tiles=1,n_tiles=2" in launched[-1], (kernel, launched)


def test_duplicate_expert_within_a_token():
    shape = "qwen3_30b"
    h, i, e, g, k, _ = SHAPES[shape]
    x = tokens_input(3, h, 9)
    ids, rw = mr.random_routing(torch, 3, k, g, DEV, seed=9)
    ids[1, 3] = ids[1, 0]
    check(shape, "int4", x, ids, rw, None)


def test_deterministic_across_runs():
    shape = "kimi_tp8"
    h, i, e, g, k, _ = SHAPES[shape]
    x = tokens_input(32, h, 1)
    ids, rw = mr.random_routing(torch, 32, k, g, DEV, seed=1)
    a = run(shape, "int4", x, ids, rw, None)
    b = run(shape, "int4", x, ids, rw, None)
    assert torch.equal(a, b)


def test_fp32_accumulation_beats_bf16_dequant():
    """Over the Kimi TP8 shapes the fused FP32 path is closer to the float64 reference than BF16
    dequant-then-matmul (the numbers are also in the benchmark's JSON)."""
    shape = "kimi_tp8"
    h, i, e, g, k, _ = SHAPES[shape]
    ours, alt = [], []
    for m in (8, 32, 64):
        x = tokens_input(m, h, 40 + m)
        ids, rw = mr.random_routing(torch, m, k, g, DEV, seed=40 + m)
        out, ref, stats = check(shape, "int4", x, ids, rw, None)
        ours.append(stats["rel_err"])
        alt.append(mr.error_stats(torch, mr.bf16_dequant_moe(torch, x, ids, rw, weights(shape, "int4")), ref)["rel_err"])
    assert sum(ours) < sum(alt), (ours, alt)


def test_bad_arguments_are_rejected():
    shape = "qwen3_30b"
    w = weights(shape, "int4")
    x = tokens_input(4, w.hidden, 2)
    ids, rw = mr.random_routing(torch, 4, 8, w.experts, DEV, seed=2)
    with pytest.raises(chordrt.ChordError, match="workspace"):
        small = torch.empty(16, dtype=torch.uint8, device=DEV)
        chordrt.warp_decode_moe(x, ids, rw, w.w13, w.w13_scale, w.w2, w.w2_scale, workspace=small)
    with pytest.raises(chordrt.ChordError, match="w2"):
        chordrt.warp_decode_moe(x, ids, rw, w.w13, w.w13_scale, w.w13, w.w2_scale)
    with pytest.raises(chordrt.ChordError, match="num_tokens"):
        big = tokens_input(129, w.hidden, 2)
        bids, brw = mr.random_routing(torch, 129, 8, w.experts, DEV, seed=2)
        chordrt.warp_decode_moe(big, bids, brw, w.w13, w.w13_scale, w.w2, w.w2_scale)
