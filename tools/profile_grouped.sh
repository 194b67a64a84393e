#!/usr/bin/env bash
# Nsight Compute summary of the grouped GEMM for a few cases (on the lent H200, after a Release build in
# build-gpu): duration, DRAM throughput, issue activity, warp stall reasons; SASS of the last kernel
# profiled with CHORD_SASS=1.
# Usage: tools/profile_grouped.sh OUTDIR ["EP8,gate_up,masked,16" ...]
set -uo pipefail
out=${1:?usage: tools/profile_grouped.sh OUTDIR [cases...]}
shift
cd "$(dirname "$0")/.."
build=${CHORD_GPU_BUILD_DIR:-build-gpu}
cases=("$@")
[ ${#cases[@]} -eq 0 ] && cases=("EP8,gate_up,masked,16" "EP8,down,contiguous,128")
for c in "${cases[@]}"; do
  tag=$(echo "$c" | tr ' ,' '__')
  env CHORDRT_LIBRARY="$PWD/$build/libchordrt.so" PYTHONPATH="$PWD/tools/python:$PWD/bench" \
    ncu --clock-control none -k "regex:grouped_gemm_kernel" --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section SchedulerStats --section MemoryWorkloadAnalysis \
    --metrics smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio,smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio,smsp__average_warps_issue_stalled_branch_resolving_per_issue_active.ratio,smsp__average_warps_issue_stalled_membar_per_issue_active.ratio,smsp__average_warps_issue_stalled_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_misc_per_issue_active.ratio,smsp__average_warps_issue_stalled_drain_per_issue_active.ratio,smsp__average_warps_issue_stalled_imc_miss_per_issue_active.ratio,smsp__average_warps_issue_stalled_tex_throttle_per_issue_active.ratio \
    python3 bench/grouped_bench.py --profile "$c" >"$out/ncu_$tag.txt" 2>&1
  echo "== $c"
  grep -E "Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Registers Per|Issued Warp|No Eligible|Active Warps Per|Eligible Warps|Stall|Warp Cycles Per Issued|stalled" "$out/ncu_$tag.txt" | head -40
done
if [ "${CHORD_SASS:-0}" = 1 ]; then
  f=$(ls -t "${CHORD_CACHE_DIR:-$build/gpu-cache}"/entries/*/*.json | head -1)
  cuobjdump -sass "${f%.json}.cubin" >"$out/sass_grouped.txt" 2>&1
fi
