"""SASS checks of the wgmma kernels, no GPU needed: an epilogue must not read accumulators while a wgmma
batch that writes them may still be in flight.

Why: in an experimental variant of the grouped GEMM, ptxas scheduled the epilogue's F2FP conversions of
the accumulators above the final WARPGROUP.DEPBAR.LE gsb0, 0x0 (empty-asm operand fences do not reach
ptxas); the H200 then gave silently wrong outputs (~1e-2 relative) for some tile shapes only. This test
disassembles every grouped GEMM a Kimi K2 EP8 deployment plans (plus small odd shapes) and walks each
kernel in address order: HGMMA batches (the instruction carrying `gsb0`) add to the pending count,
WARPGROUP.DEPBAR.LE gsb0, N lowers it to N, and an F2FP reading an accumulator register must see 0.
Needs chord-jit ($CHORD_JIT) and cuobjdump with nvdisasm ($CHORD_CUOBJDUMP, PATH, the CUDA toolkit, or
the nvidia-cuda-cuobjdump + nvidia-cuda-nvdisasm wheels tools/setup.sh installs); skipped without them.
"""
import glob
import importlib.util
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

CHORD_JIT = os.environ.get("CHORD_JIT")


def _cuobjdump():
    candidates = [os.environ.get("CHORD_CUOBJDUMP"), shutil.which("cuobjdump")]
    candidates += glob.glob("/usr/local/cuda*/bin/cuobjdump")
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        candidates += glob.glob(os.path.join(root, "*", "bin", "cuobjdump"))
    for c in candidates:
        # -sass runs nvdisasm, looked for beside cuobjdump or on PATH.
        if c and os.access(c, os.X_OK) and (os.access(os.path.join(os.path.dirname(c), "nvdisasm"), os.X_OK)
                                            or shutil.which("nvdisasm")):
            return c
    return None


CUOBJDUMP = _cuobjdump()
needs_tools = pytest.mark.skipif(
    not CHORD_JIT or CUOBJDUMP is None,
    reason="needs CHORD_JIT (the chord-jit binary) and cuobjdump + nvdisasm (pip install nvidia-cuda-cuobjdump "
    "nvidia-cuda-nvdisasm)",
)

INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Za-z0-9_.]+)\s*([^;]*);")
HGMMA_SHAPE = re.compile(r"HGMMA\.64x(\d+)x16")
REGISTER = re.compile(r"\bR(\d+)\b")


def accumulator_hazards(sass: str):
    """(address-ordered instruction index, text) of every F2FP that reads an HGMMA accumulator register
    while a batch may be pending, per the walk described in the module docstring."""
    accumulators, pending, hazards = set(), 0, []
    lines = [m.groups() for m in INSTRUCTION.finditer(sass)]
    for i, (op, operands) in enumerate(lines):
        if op.startswith("HGMMA"):
            n = int(HGMMA_SHAPE.match(op).group(1))
            base = int(REGISTER.search(operands).group(1))
            accumulators.update(range(base, base + n // 2))
            if "gsb0" in operands:
                pending += 1
        elif op.startswith("WARPGROUP.DEPBAR"):
            pending = min(pending, int(operands.split(",")[-1].strip(), 16))
        elif op.startswith("F2FP") and pending > 0:
            sources = {int(r) for r in REGISTER.findall(operands.split(",", 1)[1])}
            if sources & accumulators:
                hazards.append((i, f"{op} {operands.strip()}"))
    return hazards


def test_the_walk_flags_a_hoisted_conversion():
    bad = """
        /*0100*/                   HGMMA.64x80x16.F32.BF16 R24, R80, gdesc[UR16], R24, gsb0 ;
        /*0110*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;
        /*0120*/                   HGMMA.64x80x16.F32.BF16 R24, R64, gdesc[UR12], R24, gsb0 ;
        /*0130*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;
        /*0140*/                   F2FP.BF16.F32.PACK_AB R19, R33, R32 ;
        /*0150*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0160*/                   F2FP.BF16.F32.PACK_AB R20, R35, R34 ;
        /*0170*/                   F2FP.BF16.F32.PACK_AB R21, R101, R100 ;
    """
    hazards = accumulator_hazards(bad)
    assert [h[1] for h in hazards] == ["F2FP.BF16.F32.PACK_AB R19, R33, R32"]


def _small_descriptors():
    # Odd shapes next to the Kimi ones: block_m 80 at K 512 is where ptxas serialized (C7514) before; K 256
    # (4 K blocks: the main loop dequantizes the next tile's first block before the epilogue) in the
    # contiguous mode.
    out = []
    for mode, n, k, e, bm, slices, stages in [(1, 256, 512, 3, 80, 1, 6), (1, 384, 640, 5, 8, 1, 8),
                                              (0, 256, 576, 2, 64, 2, 4), (1, 4096, 7168, 48, 48, 2, 6),
                                              (0, 512, 256, 4, 128, 2, 6)]:
        fields = {"mode": mode, "n": n, "k": k, "experts": e, "block_m": bm, "slices": slices, "stages": stages,
                  "consumers": 2, "ring": 0, "stream_k": 0}
        out.append(json.dumps({"family": "grouped.gemm", "arch": "sm_90a", "fields": fields}))
    # The step ring (a wait per k16 step) in the masked mode.
    fields = {"mode": 1, "n": 4096, "k": 7168, "experts": 48, "block_m": 16, "slices": 2, "stages": 3,
              "consumers": 4, "ring": 1, "stream_k": 0}
    out.append(json.dumps({"family": "grouped.gemm", "arch": "sm_90a", "fields": fields}))
    # Stream-K: contiguous (EP32 gate_up and down tiles) and masked (the override's kernel at 8 tokens: Qwen3-235B
    # EP8 gate_up, Kimi down).
    for mode, n, k, e, bm, stages in [(0, 4096, 7168, 12, 128, 4), (0, 7168, 2048, 12, 128, 4),
                                      (1, 3072, 4096, 16, 16, 8), (1, 7168, 2048, 12, 16, 8)]:
        fields = {"mode": mode, "n": n, "k": k, "experts": e, "block_m": bm, "slices": 2, "stages": stages,
                  "consumers": 2, "ring": 0, "stream_k": 1}
        out.append(json.dumps({"family": "grouped.gemm", "arch": "sm_90a", "fields": fields}))
    # The gathering mode at K 256, with four consumer warpgroups (short and long K), the step ring's four
    # consumers of two slices (short K: the next tile's first step loaded under the last wgmmas), and the
    # single ring's (long K, and short K where the next tile's first block is dequantized before the epilogue);
    # stream-K (long K) on the block and single rings; the half ring (long K) at 56 and 64, with stream-K at 64.
    for n, k, e, bm, slices, stages, consumers, ring, stream_k in [
            (7168, 256, 384, 96, 2, 7, 2, 0, 0), (4096, 7168, 48, 40, 1, 8, 4, 0, 0), (7168, 256, 384, 64, 1, 6, 4, 0, 0),
            (4096, 7168, 48, 32, 2, 6, 4, 1, 0), (7168, 256, 384, 24, 2, 6, 4, 1, 0), (7168, 2048, 48, 64, 2, 6, 2, 1, 0),
            (4096, 7168, 48, 48, 2, 4, 4, 2, 0), (7168, 256, 384, 32, 2, 4, 4, 2, 0), (4096, 7168, 48, 64, 2, 6, 2, 0, 1),
            (7168, 2048, 48, 32, 2, 6, 4, 2, 1), (4096, 7168, 48, 56, 2, 5, 4, 3, 0), (512, 7168, 384, 64, 2, 5, 4, 3, 1)]:
        fields = {"n": n, "k": k, "experts": e, "block_m": bm, "slices": slices, "stages": stages,
                  "consumers": consumers, "ring": ring, "stream_k": stream_k}
        out.append(json.dumps({"family": "indexed.prefill", "arch": "sm_90a", "fields": fields}))
    return out


@pytest.fixture(scope="module")
def grouped_cubins(tmp_path_factory):
    cache = tmp_path_factory.mktemp("sass-cache")
    listing = cache / "small.jsonl"
    listing.write_text("\n".join(_small_descriptors()) + "\n")
    for args in (["--model", "kimi-k2", "--deployment", "ep8"], ["--descriptors", str(listing)]):
        subprocess.run([CHORD_JIT, "--cache-dir", str(cache), "prewarm", *args, "--arch", "sm_90a"], check=True,
                       capture_output=True, timeout=600)
    cubins = []
    for meta in sorted(Path(cache).glob("entries/*/*.json")):
        entry = json.loads(meta.read_text())
        if entry["descriptor"]["family"] in ("grouped.gemm", "indexed.prefill"):  # the same kernel, two modes
            cubins.append((entry["descriptor_text"], entry["descriptor"], meta.with_suffix(".cubin")))
    assert len(cubins) >= 10, cubins
    return cubins


@needs_tools
def test_grouped_epilogues_wait_for_their_last_batch(grouped_cubins):
    for name, _, cubin in grouped_cubins:
        sass = subprocess.run([CUOBJDUMP, "-sass", str(cubin)], check=True, capture_output=True, text=True).stdout
        assert "HGMMA" in sass, f"{name}: no wgmma in the SASS (a slower path?)"
        hazards = accumulator_hazards(sass)
        assert not hazards, f"{name}: accumulators read before the final wgmma wait: {hazards[:3]}"


@needs_tools
def test_grouped_wgmma_batches_are_not_serialized(grouped_cubins):
    # Every batch the kernel commits is SLICES wgmmas per k16 step it issues (a K block's steps, half of them
    # on the half ring, one step on the step ring), and ptxas marks only its last with gsb0. When register pressure makes ptxas wait
    # after every wgmma (seen: four consumers of two slices on the single ring at block_m 48), each one
    # carries gsb0 and the batches shrink to one.
    for name, descriptor, cubin in grouped_cubins:
        fields = descriptor["fields"]
        block_k = 128 if fields.get("mode") == 1 else 64
        steps = {1: 1, 3: block_k // 32}.get(fields["ring"], block_k // 16)
        batch = fields["slices"] * steps
        sass = subprocess.run([CUOBJDUMP, "-sass", str(cubin)], check=True, capture_output=True, text=True).stdout
        runs, run = [], 0
        for line in sass.splitlines():
            if "HGMMA" in line:
                run += 1
                if "gsb0" in line:
                    runs.append(run)
                    run = 0
        assert runs and all(r == batch for r in runs), f"{name}: wgmma batches {runs[:12]}, expected {batch} each"
