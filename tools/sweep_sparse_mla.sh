#!/usr/bin/env bash
# Sparse MLA decode config sweep on the lent H200 (after tools/gpu_run.sh has built build-gpu): the bench's
# cases under each CHORD_MLA_CONFIG override, logs and JSON under OUTDIR.
# Usage: tools/sweep_sparse_mla.sh OUTDIR CASES CONFIG...   e.g. tools/sweep_sparse_mla.sh "$OUT" fp8/h8 "" stages=1
#   CHORD_MLA_SWEEP_TOKENS=1,32 replaces each case's token counts.
set -uo pipefail
out=${1:?usage: tools/sweep_sparse_mla.sh OUTDIR CASES CONFIG...}
cases=${2:?usage: tools/sweep_sparse_mla.sh OUTDIR CASES CONFIG...}
shift 2
cd "$(dirname "$0")/.."
build=${CHORD_GPU_BUILD_DIR:-build-gpu}
for cfg in "$@"; do
  tag=$(echo "${cfg:-default}" | tr ',=/' '_-_')
  echo "== CHORD_MLA_CONFIG=\"$cfg\""
  CHORD_MLA_CONFIG="$cfg" CHORDRT_LIBRARY="$PWD/$build/libchordrt.so" PYTHONPATH="$PWD/tools/python" \
    timeout "${CHORD_STEP_LIMIT_S:-300}" python3 bench/sparse_mla_bench.py --quick --no-baseline --cases "$cases" \
    ${CHORD_MLA_SWEEP_TOKENS:+--tokens "$CHORD_MLA_SWEEP_TOKENS"} --json "$out/sweep_$tag.json" 2>&1 | grep -v "^ceilings" | cut -c1-110
done
