#!/usr/bin/env bash
# Nsight Compute summary of the two warp-decode kernels for a few cases (on the lent H200, after
# tools/gpu_run.sh has built build-gpu): duration, DRAM throughput, occupancy, warp stall reasons.
# Usage: tools/profile_warp_decode.sh OUTDIR ["NAME,FORMAT,M" ...]
set -uo pipefail
out=${1:?usage: tools/profile_warp_decode.sh OUTDIR [cases...]}
shift
cd "$(dirname "$0")/.."
build=${CHORD_GPU_BUILD_DIR:-build-gpu}
cases=("$@")
[ ${#cases[@]} -eq 0 ] && cases=("Kimi K2 TP8,int4,1" "Kimi K2 TP8,int4,32")
for c in "${cases[@]}"; do
  tag=$(echo "$c" | tr ' ,' '__')
  env CHORDRT_LIBRARY="$PWD/$build/libchordrt.so" PYTHONPATH="$PWD/tools/python:$PWD/bench" \
    ncu --clock-control none -k "regex:gate_up_kernel|down_kernel" --launch-skip 6 --launch-count 4 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section MemoryWorkloadAnalysis \
    python3 bench/warp_decode_bench.py --profile "$c" >"$out/ncu_$tag.txt" 2>&1
  echo "== $c"
  grep -E "gate_up_kernel|down_kernel|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Waves Per SM|Stall|One or More|Theoretical Occ" "$out/ncu_$tag.txt" | head -40
done
# SASS of the gate/up and down kernels of the last case profiled (CHORD_SASS=1), for instruction counts.
if [ "${CHORD_SASS:-0}" = 1 ]; then
  for f in $(ls -t "${CHORD_CACHE_DIR:-$build/gpu-cache}"/entries/*/*.json | head -2); do
    fam=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['descriptor']['family'])" "$f")
    cuobjdump -sass "${f%.json}.cubin" >"$out/sass_$fam.txt" 2>&1
  done
fi
