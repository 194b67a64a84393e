#!/usr/bin/env bash
# DSA indexer logits config sweep on the lent H200 (after tools/gpu_run.sh has built build-gpu): the
# bench's logits points under each CHORD_DSA_CONFIG override (no baselines, no top-k), logs and JSON under
# OUTDIR. Usage: tools/sweep_dsa.sh OUTDIR HEADS TOKENS CONFIG...
#   e.g. tools/sweep_dsa.sh "$OUT" 64,128 64 "" tma=0 tma=0,stages=3
set -uo pipefail
usage="usage: tools/sweep_dsa.sh OUTDIR HEADS TOKENS CONFIG..."
out=${1:?$usage}
heads=${2:?$usage}
tokens=${3:?$usage}
shift 3
cd "$(dirname "$0")/.."
build=${CHORD_GPU_BUILD_DIR:-build-gpu}
for cfg in "$@"; do
  tag=$(echo "${cfg:-default}" | tr ',=/' '_-_')
  echo "== CHORD_DSA_CONFIG=\"$cfg\""
  CHORD_DSA_CONFIG="$cfg" CHORDRT_LIBRARY="$PWD/$build/libchordrt.so" PYTHONPATH="$PWD/tools/python" \
    timeout "${CHORD_STEP_LIMIT_S:-300}" python3 bench/dsa_bench.py --no-baseline --heads "$heads" --tokens "$tokens" \
    --topk-tokens "" --json "$out/sweep_dsa_$tag.json" 2>&1 | grep -v "^ceilings" | cut -c1-150
done
