#!/usr/bin/env bash
# A kernel experiment against main in one device call (after tools/gpu_run.sh has built build-gpu): the
# tree copied with PATCHES applied in order (comma-separated bench/experiments/*.patch, each on the ones
# before it: v12 is a patch on v11), its library built, the GPU tests of
# PYTEST (pytest arguments as shell words, the patched tree's tests) run on it, then BENCH (a bench script and its
# arguments, shell words too) run A B A B on the
# same inputs, main and patched alternating, each with its own kernel cache.
# Usage: tools/ab_patch.sh OUTDIR PATCHES "PYTEST" "BENCH"
#   e.g. tools/ab_patch.sh "$OUT" bench/experiments/sparse_mla_wgmma_v11_producer_dequant.patch \
#          "tests/python/test_sparse_mla_gpu.py" "bench/sparse_mla_bench.py --quick --no-baseline --cases fp8/h64,fp8/h128 --tokens 32,128"
# CHORD_AB_RACECHECK="PYTEST ARGS" also runs those tests on the patched library under compute-sanitizer
# racecheck (chordrt's kernels only, as tools/gpu_run.sh does) into OUTDIR/ab_racecheck.log.
# Writes OUTDIR/ab_{build,pytest}.log, OUTDIR/ab_{main,patched}_{1,2}.{json,log}; CHORD_AB_LIMIT_S bounds each step (300).
# CHORD_AB_PACK=1 packs OUTDIR into OUTDIR.tgz at the end (a device call brings back at most 8 files).
set -uo pipefail
out=${1:?usage: tools/ab_patch.sh OUTDIR PATCHES PYTEST BENCH}
IFS=, read -r -a patches <<<"${2:?usage: tools/ab_patch.sh OUTDIR PATCHES PYTEST BENCH}"
for i in "${!patches[@]}"; do patches[i]=$(realpath "${patches[i]}"); done  # before the cd below
pytest_args=${3-}
bench=${4-}
cd "$(dirname "$0")/.."
mkdir -p "$out"
build=${CHORD_GPU_BUILD_DIR:-build-gpu}
limit=${CHORD_AB_LIMIT_S:-300}
tree=${CHORD_AB_TREE:-/tmp/chordrt-ab}
rm -rf "$tree" && mkdir -p "$tree"
# The tracked and untracked sources, not the build trees or the carried dependencies (linked instead).
tar --exclude=./build --exclude=./build-gpu --exclude=./.git --exclude=./.deps --exclude=./.worktrees -cf - . | tar -xf - -C "$tree"
[ -d .deps ] && ln -sfn "$PWD/.deps" "$tree/.deps"
: >"$out/ab_build.log"
for patch_file in "${patches[@]}"; do
  if ! (cd "$tree" && patch -p1 --quiet) <"$patch_file" >>"$out/ab_build.log" 2>&1; then
    echo "ab_patch: $patch_file does not apply (after the ones before it)" | tee -a "$out/ab_build.log"
    exit 1
  fi
done
if ! (cd "$tree" && timeout "$limit" cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCHORD_BUILD_BENCH=OFF &&
  timeout "$limit" cmake --build build-gpu --target chordrt chord-jit) >>"$out/ab_build.log" 2>&1; then
  echo "ab_patch: the patched build failed (tail of $out/ab_build.log):"
  tail -n 20 "$out/ab_build.log"
  exit 1
fi
main_lib=$PWD/$build/libchordrt.so patched_lib=$tree/build-gpu/libchordrt.so
export PYTHONPATH="$PWD/tools/python:$PWD/bench${PYTHONPATH:+:$PYTHONPATH}"
patched() {  # patched CMD...: CMD in the patched tree (its tests, Python package and references) on the
             # patched library, its chord-jit and its own kernel cache
  (cd "$tree" && CHORDRT_LIBRARY=$patched_lib CHORD_JIT=$tree/build-gpu/chord-jit \
    CHORD_CACHE_DIR=/tmp/chordrt-ab-cache-patched PYTHONPATH="$tree/tools/python:$tree/bench" timeout "$limit" "$@")
}
status=0
if [ -n "$pytest_args" ]; then
  eval "pytest_words=($pytest_args)"  # shell words: a quoted -k expression stays one argument
  patched python3 -m pytest -q -rs "${pytest_words[@]}" >"$out/ab_pytest.log" 2>&1 || status=1
  echo "ab_patch pytest (patched): $(tail -n 1 "$out/ab_pytest.log")"
fi
if [ -n "${CHORD_AB_RACECHECK:-}" ]; then
  eval "racecheck_args=($CHORD_AB_RACECHECK)"  # shell words, so that a quoted -k expression stays one argument
  patched compute-sanitizer --tool racecheck --kernel-name kns=chord --report-api-errors no --error-exitcode 1 \
    python3 -m pytest -q -x "${racecheck_args[@]}" >"$out/ab_racecheck.log" 2>&1 || status=1
  echo "ab_patch racecheck (patched): $(grep -E "RACECHECK SUMMARY" "$out/ab_racecheck.log" | sort | uniq -c | tr '\n' ' ')"
fi
if [ -n "$bench" ]; then
  eval "bench_words=($bench)"  # shell words: a quoted shape name with spaces stays one argument
  for run in 1 2; do
    for side in main patched; do
      lib=$main_lib
      [ "$side" = patched ] && lib=$patched_lib
      CHORDRT_LIBRARY=$lib CHORD_CACHE_DIR=/tmp/chordrt-ab-cache-$side timeout "$limit" python3 "${bench_words[@]}" \
        --json "$out/ab_${side}_$run.json" >"$out/ab_${side}_$run.log" 2>&1 || status=1
      echo "== $side, run $run"
      grep -E " us " "$out/ab_${side}_$run.log" | cut -c1-110
    done
  done
fi
if [ -n "${CHORD_AB_PACK:-}" ]; then
  tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")" && rm -rf "$out"
fi
exit $status
