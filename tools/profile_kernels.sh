#!/usr/bin/env bash
# Nsight Compute summary of one kernel family's benchmark cases (on the lent H200, after
# tools/gpu_run.sh has built build-gpu): duration, DRAM throughput, occupancy, issue activity, warp
# stall reasons per issued instruction, SM active cycles against elapsed (and their min / max over SMs);
# SASS of the last kernels profiled with CHORD_SASS=1.
# Usage: tools/profile_kernels.sh FAMILY OUTDIR [CASE ...]
#   FAMILY warp_decode: cases "NAME,FORMAT,M"            (default "Kimi K2 TP8,int4,1" "Kimi K2 TP8,int4,32")
#   FAMILY grouped:     cases "EPx,PROJECTION,MODE,ROWS" (default "EP8,gate_up,masked,16" "EP8,down,contiguous,128")
#   FAMILY indexed:     cases "EPx|TPx,PROJECTION,PHASE,TOKENS" (default "EP8,gate_up,prefill,4096" "EP8,gate_up,prefill,1024")
#   FAMILY sparse_mla:  cases "CASE,TOKENS"               (default "fp8/h8,1" "fp8/h8,256")
#   FAMILY dsa:         cases "logits,HEADS,TOKENS" (with the paged-read ceiling kernel on the same pages)
#                       or "topk,TOKENS"                  (default "logits,64,64" "logits,128,64")
# CHORD_NCU_SOURCE=1: also the per-instruction view (SourceCounters): the report is kept as
# ncu_<family>_<case>.ncu-rep and its SASS with stall samples per instruction written to
# ncu_<family>_<case>_source.csv, to tell the stalls of a kernel's roles (warp-specialized kernels) apart
# (tools/ncu_roles.py sums them per role).
# CHORD_PROFILE_PEER=1 (indexed): the bench also calls Humming on the same inputs, and its kernel
# (named `humming`) is profiled too, into ncu_indexed_<case>_humming.txt.
set -uo pipefail
family=${1:?usage: tools/profile_kernels.sh warp_decode|grouped|indexed|sparse_mla|dsa OUTDIR [cases...]}
out=${2:?usage: tools/profile_kernels.sh warp_decode|grouped|indexed|sparse_mla|dsa OUTDIR [cases...]}
shift 2
mkdir -p "$out"
cd "$(dirname "$0")/.."
build=${CHORD_GPU_BUILD_DIR:-build-gpu}
case "$family" in
  warp_decode) kernels="gate_up_kernel|down_kernel" skip=6 count=4 sass=2
    defaults=("Kimi K2 TP8,int4,1" "Kimi K2 TP8,int4,32") ;;
  grouped) kernels="grouped_gemm_kernel" skip=3 count=1 sass=1
    defaults=("EP8,gate_up,masked,16" "EP8,down,contiguous,128") ;;
  indexed) kernels="grouped_gemm_kernel|indexed_decode_kernel" skip=3 count=1 sass=1
    defaults=("EP8,gate_up,prefill,4096" "EP8,gate_up,prefill,1024") ;;
  sparse_mla) kernels="sparse_mla_decode_kernel|sparse_mla_decode_wgmma_kernel|sparse_mla_combine_kernel" skip=4 count=2 sass=1
    defaults=("fp8/h8,1" "fp8/h8,256") ;;
  dsa) kernels="indexer_logits_kernel|_paged_read_kernel|topk" skip=4 count=2 sass=1
    defaults=("logits,64,64" "logits,128,64") ;;
  *) echo "unknown family $family (warp_decode, grouped, indexed, sparse_mla, dsa)" >&2; exit 2 ;;
esac
cases=("$@")
[ ${#cases[@]} -eq 0 ] && cases=("${defaults[@]}")
stalls=""
for s in long_scoreboard short_scoreboard barrier wait math_pipe_throttle mio_throttle lg_throttle sleeping \
         dispatch_stall no_instruction branch_resolving membar selected not_selected misc drain imc_miss tex_throttle; do
  stalls+="${stalls:+,}smsp__average_warps_issue_stalled_${s}_per_issue_active.ratio"
done
# Per-SM activity: a min far under the max is SMs idle while others work (a static schedule's last wave).
stalls+=",sm__cycles_active.min,sm__cycles_active.max"
for c in "${cases[@]}"; do
  tag=$(echo "$c" | tr ' ,/' '___')
  # The bench arguments that run this one case.
  if [ "$family" = sparse_mla ]; then
    args=(--quick --no-baseline --no-gather --cases "${c%%,*}" --tokens "${c##*,}" --json "$out/ncu_sparse_mla_bench.json")
  else
    args=(--profile "$c")
  fi
  profiled=("$kernels")
  [ "$family" = indexed ] && [ "${CHORD_PROFILE_PEER:-0}" = 1 ] && profiled+=(humming)
  [ "$family" = indexed ] && [ "${CHORD_PROFILE_PEER:-0}" != 1 ] && args+=(--no-peers)
  for k in "${profiled[@]}"; do
    file="$out/ncu_${family}_$tag$([ "$k" = "$kernels" ] || echo "_$k").txt"
    source=()
    [ "${CHORD_NCU_SOURCE:-0}" = 1 ] && source=(--section SourceCounters --export "${file%.txt}.ncu-rep" --force-overwrite)
    env CHORDRT_LIBRARY="$PWD/$build/libchordrt.so" PYTHONPATH="$PWD/tools/python:$PWD/bench${PYTHONPATH:+:$PYTHONPATH}" \
      ncu --clock-control none -k "regex:$k" --launch-skip $skip --launch-count $count \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
      --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --metrics "$stalls" "${source[@]}" \
      python3 "bench/${family}_bench.py" "${args[@]}" >"$file" 2>&1
    if [ ${#source[@]} -gt 0 ]; then
      ncu --import "${file%.txt}.ncu-rep" --print-details all >>"$file" 2>&1
      ncu --import "${file%.txt}.ncu-rep" --page source --csv --print-source sass >"${file%.txt}_source.csv" 2>&1
    fi
    echo "== $family $c ($k)"
    grep -E "$k|Duration|Elapsed Cycles|SM Active Cycles|sm__cycles_active|DRAM Throughput|Memory Throughput|L2 Cache Throughput|Compute \(SM\)|Achieved Occupancy|Registers Per|Waves Per SM|Issued Warp|Eligible Warps|Warp Cycles Per Issued|stalled" \
      "$file" | head -50
  done
done
# SASS of the kernels of the last case profiled, for instruction counts.
if [ "${CHORD_SASS:-0}" = 1 ]; then
  for f in $(ls -t "${CHORD_CACHE_DIR:-$build/gpu-cache}"/entries/*/*.json | head -$sass); do
    fam=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['descriptor']['family'])" "$f")
    cuobjdump -sass "${f%.json}.cubin" >"$out/sass_$fam.txt" 2>&1
  done
fi
