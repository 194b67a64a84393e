#!/usr/bin/env bash
# Config sweeps on the lent H200 (after tools/gpu_run.sh has built build-gpu): one family's benchmark once
# per override of its CHORD_*_CONFIG ("" = the heuristics), logs and JSON under OUTDIR.
# Usage: tools/sweep_config.sh FAMILY OUTDIR SELECT CONFIG...
#   sparse_mla: SELECT = the bench's cases (fp8/h8,fp8/h64); CHORD_SWEEP_TOKENS=1,32 replaces their token
#               counts; --quick, no baseline. e.g. tools/sweep_config.sh sparse_mla "$OUT" fp8/h8 "" stages=3
#   dsa:        SELECT = HEADS:TOKENS of the logits points (64,128:64); no top-k, no baselines.
#               e.g. tools/sweep_config.sh dsa "$OUT" 64,128:64 "" tma=0 stages=3
#   indexed:    SELECT = prefill tokens (1024,2048) of the EP8 and TP8 prefill cases; --quick, no baseline,
#               Humming beside the "" (heuristics) run only; CHORD_SWEEP_BLOCK_M=32 fixes the routing's block_m.
#               e.g. tools/sweep_config.sh indexed "$OUT" 1024,2048 "" consumers=4,slices=2,ring=1
set -uo pipefail
usage="usage: tools/sweep_config.sh sparse_mla|dsa|indexed OUTDIR SELECT CONFIG..."
family=${1:?$usage}
out=${2:?$usage}
select=${3:?$usage}
shift 3
cd "$(dirname "$0")/.."
build=${CHORD_GPU_BUILD_DIR:-build-gpu}
case "$family" in
  sparse_mla) var=CHORD_MLA_CONFIG
    args=(--quick --no-baseline --cases "$select" ${CHORD_SWEEP_TOKENS:+--tokens "$CHORD_SWEEP_TOKENS"}) ;;
  dsa) var=CHORD_DSA_CONFIG
    args=(--no-baseline --heads "${select%%:*}" --tokens "${select##*:}" --topk-tokens "") ;;
  indexed) var=CHORD_INDEXED_CONFIG
    args=(--quick --no-baseline --cases EP8/prefill,TP8/prefill --tokens "$select"
          ${CHORD_SWEEP_BLOCK_M:+--block-m "$CHORD_SWEEP_BLOCK_M"}) ;;
  *) echo "$usage" >&2; exit 2 ;;
esac
for cfg in "$@"; do
  tag=$(echo "${cfg:-default}" | tr ',=/' '_-_')
  peers=()  # the indexed bench's Humming column: once, beside the heuristics' run
  [ "$family" = indexed ] && [ -n "$cfg" ] && peers=(--no-peers)
  echo "== $var=\"$cfg\""
  env "$var=$cfg" CHORDRT_LIBRARY="$PWD/$build/libchordrt.so" PYTHONPATH="$PWD/tools/python${PYTHONPATH:+:$PYTHONPATH}" \
    timeout "${CHORD_STEP_LIMIT_S:-300}" python3 "bench/${family}_bench.py" "${args[@]}" \
    "${peers[@]}" \
    --json "$out/sweep_${family}_$tag.json" 2>&1 | grep -v "^ceilings" | cut -c1-150
done
