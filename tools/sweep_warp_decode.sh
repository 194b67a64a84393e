#!/usr/bin/env bash
# Heuristic experiments for warp decode on the lent H200 (after tools/gpu_run.sh has built build-gpu):
# the benchmark once per CHORD_WARP_DECODE_CONFIG variant, on a few shapes and token counts.
# Usage: tools/sweep_warp_decode.sh OUTDIR "SHAPE" FORMATS TOKENS "variant" ...   ("" = the heuristics)
set -uo pipefail
out=${1:?usage: tools/sweep_warp_decode.sh OUTDIR SHAPE FORMATS TOKENS VARIANT...}
shape=$2 formats=$3 tokens=$4
shift 4
mkdir -p "$out"
cd "$(dirname "$0")/.."
build=${CHORD_GPU_BUILD_DIR:-build-gpu}
for v in "$@"; do
  echo "== variant ${v:-heuristics}"
  tag=$(echo "${shape}_${formats}_${v:-heuristics}" | tr -c 'A-Za-z0-9_\n' '_')
  env CHORD_WARP_DECODE_CONFIG="$v" CHORDRT_LIBRARY="$PWD/$build/libchordrt.so" PYTHONPATH="$PWD/tools/python:$PWD/bench${PYTHONPATH:+:$PYTHONPATH}" \
    python3 bench/warp_decode_bench.py --json "$out/sweep_$tag.json" --shapes "$shape" --formats "$formats" \
    --tokens "$tokens" 2>&1 | grep -E "us " | cut -c1-60
done
