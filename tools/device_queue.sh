#!/usr/bin/env bash
# One device call's work list, in priority order: the Release build (build-gpu, library and chord-jit,
# skipped when it exists), then each step of QUEUE while the call's time allows it. A QUEUE line is
# "SECONDS NAME COMMAND...": the step's own limit, a name, and a shell command run from the repository
# root with STEP_OUT (its own folder under OUTDIR) and the usual CHORDRT_LIBRARY / CHORD_JIT /
# CHORD_CACHE_DIR / PYTHONPATH set (peer wheels carried in .whl/ are installed and on it); blank lines and
# lines starting with # are skipped. A step starts only if its limit fits in what is left of
# CHORD_QUEUE_BUDGET_S (default 560), so a refused or short call still brings back the steps that ran.
# Each step's output is OUTDIR/NAME.log; OUTDIR/summary.txt says ok / FAIL / TIMEOUT / SKIPPED per step;
# CHORD_QUEUE_SKIP="NAME ..." skips steps by name (a second call that resumes the list). At the end OUTDIR
# is packed into OUTDIR.tgz (a device call brings back at most 8 files).
# Usage: tools/device_queue.sh OUTDIR QUEUE   (e.g. tools/device_queue.sh "$OUT/q" bench/experiments/next_call.queue)
set -uo pipefail
out=${1:?usage: tools/device_queue.sh OUTDIR QUEUE}
queue=$(realpath "${2:?usage: tools/device_queue.sh OUTDIR QUEUE}")
cd "$(dirname "$0")/.."
mkdir -p "$out"
out=$(realpath "$out")
budget=${CHORD_QUEUE_BUDGET_S:-560}
build=${CHORD_GPU_BUILD_DIR:-build-gpu}
case "$build" in /*) ;; *) build=$PWD/$build ;; esac
start=$SECONDS
: >"$out/summary.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv >"$out/gpu.txt" 2>&1 || true
if [ ! -f "$build/libchordrt.so" ]; then
  if ! (cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCHORD_BUILD_BENCH=OFF &&
    cmake --build "$build" --target chordrt chord-jit) >"$out/build.log" 2>&1; then
    echo "build FAIL" | tee -a "$out/summary.txt"
    tail -n 20 "$out/build.log"
  fi
fi
printf '%-24s %-7s %5ss\n' build done "$((SECONDS - start))" >>"$out/summary.txt"
export CHORDRT_LIBRARY=$build/libchordrt.so CHORD_JIT=$build/chord-jit
export CHORD_CACHE_DIR=${CHORD_CACHE_DIR:-$build/gpu-cache}
export PYTHONPATH="$PWD/tools/python:$PWD/bench${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# Peer wheels carried in .whl/ (../shared/peers/README.md): installed once, importable by every step.
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --upgrade --no-index --no-deps --no-compile --target /tmp/chord-peers .whl/*.whl >"$out/peers.log" 2>&1 &&
    export PYTHONPATH="$PYTHONPATH:/tmp/chord-peers"
fi
while read -r limit name command <&3; do
  case "$limit" in '' | '#'*) continue ;; esac
  case " ${CHORD_QUEUE_SKIP:-} " in *" $name "*) continue ;; esac
  left=$((budget - (SECONDS - start)))
  if [ "$limit" -gt "$left" ]; then
    printf '%-24s %-7s (needs %ss, %ss left)\n' "$name" SKIPPED "$limit" "$left" >>"$out/summary.txt"
    continue
  fi
  export STEP_OUT="$out/$name"
  mkdir -p "$STEP_OUT"
  t0=$SECONDS
  timeout "$limit" bash -c "$command" </dev/null >"$out/$name.log" 2>&1
  case $? in 0) r=ok ;; 124) r=TIMEOUT ;; *) r=FAIL ;; esac
  printf '%-24s %-7s %5ss\n' "$name" "$r" "$((SECONDS - t0))" >>"$out/summary.txt"
  rmdir "$STEP_OUT" 2>/dev/null || true
done 3<"$queue"
find "$out" -name '*.ncu-rep' -delete
cat "$out/summary.txt"
tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")" && rm -rf "$out"
