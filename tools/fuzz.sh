#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan+UBSan) into build-fuzz and runs each: first every file of its
# corpus (fuzz/corpus/<target>: the regression inputs and seeds, tools/fuzz/make_corpus.py), then a run of
# SECONDS with the fixed seed 1, then one of SECONDS with a random seed (printed, to replay a failure:
# build-fuzz/fuzz/chord_fuzz_<target> -seed=N fuzz/corpus/<target>). New interesting inputs go to
# build-fuzz/corpus-<target>, never into the tree. A crash leaves its input in build-fuzz/ and fails.
# Usage: tools/fuzz.sh [SECONDS per run, default 60] [target ...]   (targets: c_abi cache_entry)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(c_abi cache_entry)
build=build-fuzz
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang -DCHORD_FUZZ=ON \
  -DCHORD_BUILD_TESTS=OFF -DCHORD_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" --target $(printf 'chord_fuzz_%s ' "${targets[@]}")
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
for t in "${targets[@]}"; do
  bin="$build/fuzz/chord_fuzz_$t"
  corpus="fuzz/corpus/$t"
  scratch="$build/corpus-$t"
  mkdir -p "$scratch"
  log="$build/fuzz-$t.log"
  echo "== $t: the $(ls "$corpus" | wc -l) corpus files, each once and whole"
  "$bin" "$corpus"/* >"$log" 2>&1 || { tail -n 60 "$log"; echo "fuzz: $t fails on its corpus" >&2; exit 1; }
  random_seed=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
  for seed in 1 "$random_seed"; do
    echo "== $t: $seconds s, seed $seed"
    run_log="$build/fuzz-$t-seed$seed.log"  # one per run: its DONE line (executions, seconds) is kept
    if ! "$bin" -seed="$seed" -max_total_time="$seconds" -max_len=65536 -timeout=20 -rss_limit_mb=4096 \
        -artifact_prefix="$build/crash-$t-" -print_final_stats=1 "$scratch" "$corpus" >"$run_log" 2>&1; then
      tail -n 60 "$run_log"
      echo "fuzz: $t failed with seed $seed (its input is under $build/crash-$t-*)" >&2
      exit 1
    fi
    # libFuzzer separates "#N" and "DONE" with a tab.
    grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|#[0-9]+[[:space:]]+DONE)' "$run_log"
  done
done
