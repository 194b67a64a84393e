#!/usr/bin/env bash
# The one GPU run: Release build (with .deps/root headers when the system has none), the [gpu] Catch2
# tests, the GPU pytest cases, the benchmarks; full logs and JSON under OUTDIR, a short table last.
# Usage: tools/gpu_run.sh OUTDIR   (on the lent H200: tools/gpu_run.sh "$OUT", carrying .deps/root)
#   CHORD_GPU_SKIP="glue_bench pytest ..." skips the named steps, CHORD_STEP_LIMIT_S bounds each (400); CHORD_BENCH_ARGS is passed to the
#   warp-decode bench (e.g. "--quick"), CHORD_GROUPED_BENCH_ARGS to the grouped bench, CHORD_INDEXED_BENCH_ARGS
#   to the indexed bench, CHORD_CROSSOVER_BENCH_ARGS to the decode crossover bench (warp vs indexed decode,
#   bench/decode_crossover_bench.py, step decode_crossover_bench), CHORD_MLA_BENCH_ARGS to the sparse MLA bench,
#   CHORD_DSA_BENCH_ARGS to the DSA indexer bench, CHORD_PYTEST_ARGS replaces the pytest
#   selection (tests/python).
# CHORD_GPU_SANITIZE=1 adds the compute-sanitizer steps (memcheck and racecheck over the [gpu] Catch2
# suite and each GPU pytest file, each under CHORD_SANITIZE_LIMIT_S, default 900 s, CHORD_SANITIZE_JOBS
# at once, default 4; CHORD_SANITIZE_SHARDS=n splits each pytest file into n steps and the Catch2 suite
# into one per test case; CHORD_SANITIZE_TOOLS
# and CHORD_SANITIZE_TARGETS (catch2 and pytest files) narrow them; skip names
# sanitize_<tool>_<file stem>[_<shard>]). API errors are not reported: loading a kernel probes cuFuncGetParamInfo
# one index past its last parameter (the only way to count them), an expected CUDA_ERROR_INVALID_VALUE.
# CHORD_GPU_RACECHECK_PLAN=1 racechecks every kernel specialization once instead of the whole suite
# (tools/racecheck_plan.py): the [gpu] Catch2 cases (one process each) and the GPU pytest files run
# normally beside each other with CHORD_LAUNCH_LOG, recording which kernel keys each test launches
# (step launch_records, under CHORD_STEP_LIMIT_S); the plan picks the cheapest tests covering every key
# but the grouped GEMM's, warp decode's once per structure (CHORD_RACECHECK_COVER=key: every key; step
# racecheck_plan; CHORD_RACECHECK_RECORDS=DIR plans from DIR/*.tests.jsonl, an earlier run's records of the
# same kernels, instead of recording); then racecheck runs each chosen Catch2 case as its own
# process and the chosen pytest tests in groups of at most 4 balanced by duration, one pytest process each,
# CHORD_SANITIZE_JOBS (default 8) at once, each under CHORD_SANITIZE_LIMIT_S (steps
# sanitize_racecheck_plan_{catch2,pytest}_<i>). OUTDIR/racecheck_report.txt says which planned tests
# passed, failed or timed out and which kernels are still unchecked; the records, lists and plan.json
# are in OUTDIR/racecheck_plan/. A step that ran out of time reads TIMEOUT in the summary.
# The benchmarks run in strict mode (CHORD_JIT_STRICT=1) after every preset deployment
# (tools/preset_deployments.txt) and every bench-only deployment (bench/deployments.txt) was prewarmed: a kernel dispatch asks for that the plans lack is an error
# and is recorded in OUTDIR/strict_misses.jsonl; the strict_misses step fails unless that file is empty.
set -uo pipefail
out=${1:?usage: tools/gpu_run.sh OUTDIR}
mkdir -p "$out"
cd "$(dirname "$0")/.."
build=${CHORD_GPU_BUILD_DIR:-build-gpu}
export PYTHONUNBUFFERED=1
export CHORD_CACHE_DIR=${CHORD_CACHE_DIR:-$PWD/$build/gpu-cache}
status=0
step() {  # step NAME CMD...: runs CMD under a time limit, logs to OUTDIR/NAME.log, records pass/fail
  local name=$1; shift
  case " ${CHORD_GPU_SKIP:-} " in *" $name "*) return;; esac
  local t0=$SECONDS
  # A hung kernel would otherwise hold the lent GPU until the whole call's limit.
  local r=ok
  timeout "${CHORD_STEP_LIMIT_S:-400}" "$@" >"$out/$name.log" 2>&1
  case $? in 0) ;; 124) r=TIMEOUT status=1 ;; *) r=FAIL status=1 ;; esac
  printf '%-14s %-5s %4ss\n' "$name" "$r" "$((SECONDS - t0))" >>"$out/summary.txt"
  tail -n 3 "$out/$name.log" | sed "s/^/  [$name] /"
}
: >"$out/summary.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv >"$out/gpu.txt" 2>&1 || true
step configure cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
step build cmake --build "$build" -j "$(nproc)"
step gpu_tests "$build/tests/chordrt_tests" "[gpu]" --reporter compact --durations yes
step cpu_tests "$build/tests/chordrt_tests" "~[gpu]" --reporter compact
step pytest env CHORDRT_LIBRARY="$PWD/$build/libchordrt.so" CHORD_JIT="$PWD/$build/chord-jit" \
  PYTHONPATH="$PWD/tools/python${PYTHONPATH:+:$PYTHONPATH}" python3 -m pytest -q ${CHORD_PYTEST_ARGS:-tests/python --ignore=tests/python/test_two_gpus.py} -rs
# With two GPUs: EP2 over NCCL, one process on two devices, two processes sharing a cache.
if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ]; then
  step two_gpu env CHORDRT_LIBRARY="$PWD/$build/libchordrt.so" PYTHONPATH="$PWD/tools/python${PYTHONPATH:+:$PYTHONPATH}" NCCL_NVLS_ENABLE=0 \
    TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 python3 -m pytest -q -s -rs tests/python/test_two_gpus.py
fi
plan_dir=$out/racecheck_plan  # CHORD_GPU_RACECHECK_PLAN: launch logs, records, plan.json, test lists
sanitize() {  # sanitize TOOL TARGET [SHARD]: catch2, a pytest file, or shard i of its collected tests;
              # plan_catch2 I / plan_pytest I: case I / group I of the racecheck plan
  local tool=$1 target=$2 shard=${3:-} name cmd
  if [ "$target" = catch2 ] || [ "$target" = plan_catch2 ]; then
    local list=$out/tests_catch2.txt spec="[gpu]"
    name="sanitize_${tool}_catch2${shard:+_$shard}"
    if [ "$target" = plan_catch2 ]; then
      list=$plan_dir/catch2.txt
      name="sanitize_${tool}_plan_catch2_$shard"
    fi
    # A shard of the Catch2 suite is one test case (commas and brackets escaped for Catch2's filter).
    [ -n "$shard" ] && spec=$(sed -n "$((shard + 1))p" "$list" | sed 's/\([],[]\)/\\\1/g')
    cmd=("$build/tests/chordrt_tests" "$spec" --reporter compact)
  else
    local tests=("$target") flags=(-q -x)
    if [ "$target" = plan_pytest ]; then
      name="sanitize_${tool}_plan_pytest_$shard"
      # One nodeid per line (never word-split). Every planned test runs (no -x); -v prints each nodeid as
      # its test starts, so that racecheck_plan.py report can tell which test a racecheck report follows.
      mapfile -t tests <"$plan_dir/pytest_$shard.txt"
      flags=(-v -p no:cacheprovider --rootdir=.)
    else
      name="sanitize_${tool}_$(basename "$target" .py)${shard:+_$shard}"
      [ -n "$shard" ] && mapfile -t tests < <(awk -v n="$shards" -v i="$shard" 'NR % n == i' "$out/tests_$(basename "$target" .py).txt")
    fi
    [ ${#tests[@]} -gt 0 ] || return 0  # an empty shard (or nothing collected): no step
    cmd=(env CHORDRT_LIBRARY="$PWD/$build/libchordrt.so" PYTHONPATH="$PWD/tools/python${PYTHONPATH:+:$PYTHONPATH}" python3 -m pytest
      "${flags[@]}" "${tests[@]}")
  fi
  # racecheck does not see the happens-before that an mbarrier's complete_tx gives a raw cp.async.bulk
  # (only tensor TMA), so it reports every LDS of a bulk-copied stage of the grouped GEMM as racing
  # with the copy, in both directions (a known false positive, also seen by flash-attention's sm100
  # backward). That kernel stays under memcheck; switching its copies to tensor TMA brings it back here.
  # racecheck instruments only chordrt's kernels (namespace chord): the tests' torch references and
  # cuBLAS GEMMs under racecheck took most of each test's time, and their shared memory is not ours.
  local filter=()
  [ "$tool" = racecheck ] && filter=(--kernel-name kns=chord --kernel-name-exclude kns=grouped_gemm_kernel)
  CHORD_STEP_LIMIT_S=${CHORD_SANITIZE_LIMIT_S:-900} step "$name" \
    compute-sanitizer --tool "$tool" "${filter[@]}" --report-api-errors no --error-exitcode 1 "${cmd[@]}"
}
throttle() { while [ "$(jobs -rp | wc -l)" -ge "$1" ]; do wait -n; done; }  # until fewer than $1 jobs run
if [ "${CHORD_GPU_SANITIZE:-0}" = 1 ]; then
  # CHORD_SANITIZE_SHARDS=n splits each pytest file's collected tests into n steps (..._<i>), and the
  # Catch2 suite into one step per test case, run at once.
  shards=${CHORD_SANITIZE_SHARDS:-1}
  "$build/tests/chordrt_tests" --list-test-names-only "[gpu]" | grep -v '^$' >"$out/tests_catch2.txt"
  for f in tests/python/test_*_gpu.py; do
    env CHORDRT_LIBRARY="$PWD/$build/libchordrt.so" PYTHONPATH="$PWD/tools/python${PYTHONPATH:+:$PYTHONPATH}" \
      python3 -m pytest --collect-only -q "$f" 2>/dev/null | grep '::' >"$out/tests_$(basename "$f" .py).txt"
  done
  for tool in ${CHORD_SANITIZE_TOOLS:-memcheck racecheck}; do
    for target in ${CHORD_SANITIZE_TARGETS:-catch2 tests/python/test_*_gpu.py}; do
      n=1
      if [ "$shards" != 1 ]; then
        n=$shards
        [ "$target" = catch2 ] && n=$(wc -l <"$out/tests_catch2.txt")
      fi
      for ((i = 0; i < n; i++)); do
        throttle "${CHORD_SANITIZE_JOBS:-4}"  # CHORD_SANITIZE_JOBS of them at once (default 4) on the one GPU
        if [ "$n" = 1 ]; then sanitize "$tool" "$target" & else sanitize "$tool" "$target" "$i" & fi
      done
    done
  done
  wait
  grep -qE '^sanitize_.* (FAIL|TIMEOUT) ' "$out/summary.txt" && status=1
fi
if [ "${CHORD_GPU_RACECHECK_PLAN:-0}" = 1 ]; then
  rm -rf "$plan_dir" && mkdir -p "$plan_dir"  # launch logs are appended to: start from none
  # The recorder stops what still runs 30 s before the step's limit, keeping the finished tests' records.
  if [ -n "${CHORD_RACECHECK_RECORDS:-}" ]; then  # a same-commit run's records: no record step
    cp "$CHORD_RACECHECK_RECORDS"/*.tests.jsonl "$plan_dir"/
  else
    step launch_records env CHORDRT_LIBRARY="$PWD/$build/libchordrt.so" PYTHONPATH="$PWD/tools/python${PYTHONPATH:+:$PYTHONPATH}" \
      python3 tools/racecheck_plan.py record --catch2 "$build/tests/chordrt_tests" --out "$plan_dir" \
      --deadline-s "$((${CHORD_STEP_LIMIT_S:-400} - 30))" tests/python/test_*_gpu.py
  fi
  step racecheck_plan python3 tools/racecheck_plan.py plan --jobs "${CHORD_SANITIZE_JOBS:-8}" --out "$plan_dir" \
    --cover "${CHORD_RACECHECK_COVER:-structure}" \
    "$plan_dir"/*.tests.jsonl
  if [ -f "$plan_dir/plan.json" ]; then
    # The long pytest groups first; the Catch2 cases fill the slots they free.
    for ((g = 0; ; g++)); do
      [ -f "$plan_dir/pytest_$g.txt" ] || break
      throttle "${CHORD_SANITIZE_JOBS:-8}"
      sanitize racecheck plan_pytest "$g" &
    done
    mapfile -t plan_cases <"$plan_dir/catch2.txt"
    for ((i = 0; i < ${#plan_cases[@]}; i++)); do
      throttle "${CHORD_SANITIZE_JOBS:-8}"
      sanitize racecheck plan_catch2 "$i" &
    done
    wait
    grep -qE '^sanitize_racecheck_plan_.* (FAIL|TIMEOUT) ' "$out/summary.txt" && status=1
    python3 tools/racecheck_plan.py report --plan "$plan_dir/plan.json" --logs "$out" >"$out/racecheck_report.txt" 2>&1
  fi
fi
# (a bash -c script: `timeout` runs programs, not shell functions)
step prewarm_all bash -c 'cat tools/preset_deployments.txt bench/deployments.txt | grep -v "^#" | while read -r model dep; do
  [ -n "$model" ] || continue
  "$0/chord-jit" prewarm --model "$model" --deployment "$dep" --arch sm_90a || exit 1
done' "$build"
: >"$out/strict_misses.jsonl"
export CHORD_JIT_STRICT=1 CHORD_RECORD_MISSES="$out/strict_misses.jsonl"
step host_bench "$build/bench/chord_host_bench" --json "$out/host_bench.json"
if [ -f bench/glue_bench.py ]; then
  step glue_bench env CHORDRT_LIBRARY="$PWD/$build/libchordrt.so" PYTHONPATH="$PWD/tools/python${PYTHONPATH:+:$PYTHONPATH}" \
    python3 bench/glue_bench.py --json "$out/glue_bench.json"
fi
step warp_decode_bench env CHORDRT_LIBRARY="$PWD/$build/libchordrt.so" PYTHONPATH="$PWD/tools/python${PYTHONPATH:+:$PYTHONPATH}" \
  python3 bench/warp_decode_bench.py --json "$out/warp_decode_bench.json" ${CHORD_BENCH_ARGS:-}
step grouped_bench env CHORDRT_LIBRARY="$PWD/$build/libchordrt.so" PYTHONPATH="$PWD/tools/python${PYTHONPATH:+:$PYTHONPATH}" \
  python3 bench/grouped_bench.py --json "$out/grouped_bench.json" ${CHORD_GROUPED_BENCH_ARGS:-}
step indexed_bench env CHORDRT_LIBRARY="$PWD/$build/libchordrt.so" PYTHONPATH="$PWD/tools/python${PYTHONPATH:+:$PYTHONPATH}" \
  python3 bench/indexed_bench.py --json "$out/indexed_bench.json" ${CHORD_INDEXED_BENCH_ARGS:-}
step decode_crossover_bench env CHORDRT_LIBRARY="$PWD/$build/libchordrt.so" PYTHONPATH="$PWD/tools/python${PYTHONPATH:+:$PYTHONPATH}" \
  python3 bench/decode_crossover_bench.py --json "$out/decode_crossover_bench.json" ${CHORD_CROSSOVER_BENCH_ARGS:-}
step sparse_mla_bench env CHORDRT_LIBRARY="$PWD/$build/libchordrt.so" PYTHONPATH="$PWD/tools/python${PYTHONPATH:+:$PYTHONPATH}" \
  python3 bench/sparse_mla_bench.py --json "$out/sparse_mla_bench.json" ${CHORD_MLA_BENCH_ARGS:-}
step dsa_bench env CHORDRT_LIBRARY="$PWD/$build/libchordrt.so" PYTHONPATH="$PWD/tools/python${PYTHONPATH:+:$PYTHONPATH}" \
  python3 bench/dsa_bench.py --json "$out/dsa_bench.json" ${CHORD_DSA_BENCH_ARGS:-}
unset CHORD_JIT_STRICT CHORD_RECORD_MISSES
step strict_misses bash -c "wc -l <'$out/strict_misses.jsonl'; head -n 20 '$out/strict_misses.jsonl'; ! test -s '$out/strict_misses.jsonl'"
echo
echo "== GPU: $(sed -n 2p "$out/gpu.txt")"
cat "$out/summary.txt"
[ -f "$out/racecheck_report.txt" ] && head -n 100 "$out/racecheck_report.txt"
[ -f "$out/host_bench.log" ] && cat "$out/host_bench.log"
[ -f "$out/glue_bench.log" ] && tail -n 40 "$out/glue_bench.log"
[ -f "$out/warp_decode_bench.log" ] && tail -n 50 "$out/warp_decode_bench.log"
[ -f "$out/grouped_bench.log" ] && tail -n 60 "$out/grouped_bench.log"
[ -f "$out/indexed_bench.log" ] && tail -n 30 "$out/indexed_bench.log"
[ -f "$out/decode_crossover_bench.log" ] && tail -n 14 "$out/decode_crossover_bench.log"
[ -f "$out/sparse_mla_bench.log" ] && tail -n 25 "$out/sparse_mla_bench.log"
[ -f "$out/dsa_bench.log" ] && tail -n 20 "$out/dsa_bench.log"
exit $status
