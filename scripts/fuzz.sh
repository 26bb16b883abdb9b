#!/usr/bin/env bash
# Build the libFuzzer harnesses of tests/fuzz with clang-14 (-DRT_FUZZ=ON:
# -fsanitize=fuzzer,address,undefined) and run each one in turn, under
# nice, starting from its seed corpus. Fails if any harness crashes, leaks,
# trips a sanitizer, times out on an input or runs out of memory; the
# reproducer is left as build-fuzz/artifacts/<harness>/crash-* (etc.).
#
#   scripts/fuzz.sh                   every harness for 30 s
#   RT_FUZZ_SECONDS=600 scripts/fuzz.sh rpc keras
#   RT_FUZZ_RUNS=1000000 scripts/fuzz.sh csv     a number of executions instead
#
# New inputs found are kept in build-fuzz/corpus/<harness> (the seeds in
# tests/fuzz/<harness> are only read), so later runs start from them.
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${RT_FUZZ_SECONDS:-30}
runs=${RT_FUZZ_RUNS:-}
dir=${RT_FUZZ_BUILD:-build-fuzz}
jobs=${RT_JOBS:-2}
# Every harness: tests/fuzz/fuzz_<name>.c.
all=()
for f in tests/fuzz/fuzz_*.c; do n=${f##*/fuzz_}; all+=("${n%.c}"); done
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=("${all[@]}")

cc=${RT_FUZZ_CC:-clang-14}
cxx=${RT_FUZZ_CXX:-clang++-14}
command -v "$cc" >/dev/null || { echo "fuzz: $cc not found (scripts/deps.sh --test)" >&2; exit 2; }

cmake -S . -B "$dir" -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRT_FUZZ=ON -DRT_PYTHON=OFF >/dev/null
targets=()
for h in "${harnesses[@]}"; do targets+=("fuzz_$h"); done
nice -n 19 cmake --build "$dir" -j"$jobs" --target "${targets[@]}"

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
status=0
summary=()
for h in "${harnesses[@]}"; do
  corpus="$dir/corpus/$h" art="$dir/artifacts/$h"
  mkdir -p "$corpus" "$art"
  limit=(-max_total_time="$secs")
  [ -z "$runs" ] || limit=(-runs="$runs")
  log="$dir/fuzz-$h.log"
  dict=()
  [ ! -f "tests/fuzz/$h.dict" ] || dict=(-dict="tests/fuzz/$h.dict")
  echo "=== fuzz $h (${runs:-$secs s}${runs:+ runs})"
  set +e
  # -rss_limit_mb/-malloc_limit_mb: a harness caps what its parser may
  # allocate well below this, so hitting it is a bug.
  nice -n 19 "$dir/tests/fuzz/fuzz_$h" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 "${dict[@]}" \
      -print_final_stats=1 -artifact_prefix="$art/" \
      "$corpus" "tests/fuzz/$h" >"$log" 2>&1
  rc=$?
  set -e
  execs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+)/\1/p' "$log" | tail -1)
  if [ $rc -ne 0 ]; then
    status=1
    echo "fuzz $h: FAILED (exit $rc), last lines of $log:"
    tail -40 "$log"
    summary+=("$h: FAILED after ${execs:-?} executions; see $log and $art/")
  else
    summary+=("$h: ${execs:-?} executions, no crash")
  fi
done
printf '%s\n' "${summary[@]}"
exit $status
