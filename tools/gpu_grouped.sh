#!/usr/bin/env bash
# The grouped family's GPU run, each step under a time limit (a hung kernel costs minutes of a lent
# GPU otherwise): Release build, its GPU tests, its benchmark. Usage: tools/gpu_grouped.sh OUTDIR
set -uo pipefail
out=${1:?usage: tools/gpu_grouped.sh OUTDIR}
mkdir -p "$out"
cd "$(dirname "$0")/.."
build=${CHORD_GPU_BUILD_DIR:-build-gpu}
export CHORD_CACHE_DIR=${CHORD_CACHE_DIR:-$PWD/$build/gpu-cache} PYTHONUNBUFFERED=1
export CHORDRT_LIBRARY="$PWD/$build/libchordrt.so" CHORD_JIT="$PWD/$build/chord-jit" PYTHONPATH="$PWD/tools/python"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build "$build" -j "$(nproc)" | tail -1
timeout "${CHORD_TEST_LIMIT_S:-240}" python3 -m pytest -q -x tests/python/test_grouped_gpu.py -rs >"$out/grouped_pytest.log" 2>&1
echo "pytest rc $?"; tail -n 5 "$out/grouped_pytest.log"
timeout "${CHORD_BENCH_LIMIT_S:-200}" python3 bench/grouped_bench.py --json "$out/grouped_bench.json" ${CHORD_GROUPED_BENCH_ARGS:-} \
  >"$out/grouped_bench.log" 2>&1
echo "bench rc $?"; tail -n 60 "$out/grouped_bench.log"
