#!/usr/bin/env bash
# Install what the tests need, build the configurations and run the suite:
#   plain  the whole suite (build/)
#   asan   the whole suite under AddressSanitizer + UBSan (build-asan/)
#   tsan   the tests that run threads against each other under
#          ThreadSanitizer: ctest labels integration (a real rtraind, its cq
#          threads and executor, concurrent clients) and unit, less the data
#          label (too slow under TSan), with OMP_NUM_THREADS=1 (build-tsan/).
#          Every process writes its reports under build-tsan/tsan-logs/;
#          any report fails the configuration, whatever the test's exit code
#          (a daemon killed by its test would otherwise hide one).
#   scripts/test.sh                          all three
#   RT_TEST_CONFIGS=plain scripts/test.sh    only the plain one
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh --test

jobs=${RT_JOBS:-2}
configs=${RT_TEST_CONFIGS:-"plain asan tsan"}
export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:print_suppressions=0"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

total_pass=0 total_skip=0 total_fail=0 status=0
for cfg in $configs; do
  case $cfg in
    plain) dir=build;      flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo) ;;
    asan)  dir=build-asan; flags=(-DCMAKE_BUILD_TYPE=Debug -DRT_SANITIZE=ON -DRT_PYTHON=OFF) ;;
    tsan)  dir=build-tsan; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DRT_TSAN=ON -DRT_PYTHON=OFF) ;;
    *) echo "unknown configuration $cfg" >&2; exit 2 ;;
  esac
  echo "=== configuration: $cfg ($dir)"
  cmake -S . -B "$dir" "${flags[@]}" >/dev/null
  cmake --build "$dir" -j"$jobs"
  log=$(mktemp)
  select=()
  if [ "$cfg" = tsan ]; then
    # The data label (TFRecord/image decoding and training, e2e) is left
    # out: under TSan it runs past its 300 s limit on 2 cores.
    select=(-L 'integration|unit' -LE data)
    export OMP_NUM_THREADS=1 # libgomp's barriers are invisible to TSan
    # durable_e2e stops the daemon 8 times per run instead of 20: each stop
    # and restart takes seconds under TSan (20 took 218 s of its 300).
    export RT_DURABLE_KILLS=8
    rm -rf "$dir/tsan-logs" && mkdir -p "$dir/tsan-logs"
    # history_size=7 (the most): TSan keeps enough history to restore both
    # stacks of a report, so the gRPC suppressions can match the side that
    # is inside libgrpc instead of it showing "failed to restore the stack".
    export TSAN_OPTIONS="suppressions=$PWD/tests/tsan.supp:second_deadlock_stack=1:history_size=7:log_path=$PWD/$dir/tsan-logs/tsan"
  fi
  set +e
  ctest --test-dir "$dir" --output-on-failure -j"$jobs" --timeout 600 "${select[@]}" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  set -e
  unset TSAN_OPTIONS OMP_NUM_THREADS RT_DURABLE_KILLS
  [ "$rc" -eq 0 ] || status=1
  if [ "$cfg" = tsan ] && [ -n "$(ls -A "$dir/tsan-logs")" ]; then
    echo "=== ThreadSanitizer reports ($dir/tsan-logs):"
    cat "$dir"/tsan-logs/*
    status=1
  fi
  line=$(grep -E '[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -1 || true)
  if [ -n "$line" ]; then
    n=$(sed -E 's/.*out of ([0-9]+).*/\1/' <<<"$line")
    f=$(sed -E 's/.*passed, ([0-9]+) tests? failed.*/\1/' <<<"$line")
    # ctest counts a skipped test (exit 77, its reason in its output) as
    # not failed; say how many there were.
    k=$(grep -c -- '\*\*\*Skipped' "$log" || true)
    total_pass=$((total_pass + n - f - k)); total_skip=$((total_skip + k))
    total_fail=$((total_fail + f))
  else
    status=1
  fi
  rm -f "$log"
done

# Fuzzing: every libFuzzer harness of tests/fuzz for RT_FUZZ_SECONDS (30 s)
# from its seeds (scripts/fuzz.sh, clang-14). Part of the default run;
# with RT_TEST_CONFIGS set it runs only if RT_TEST_FUZZ=1.
fuzz_default=1
[ -z "${RT_TEST_CONFIGS:-}" ] || fuzz_default=0
if [ "${RT_TEST_FUZZ:-$fuzz_default}" = 1 ]; then
  echo "=== fuzz (scripts/fuzz.sh)"
  if scripts/fuzz.sh; then
    total_pass=$((total_pass + 1))
  else
    total_fail=$((total_fail + 1)); status=1
  fi
fi

echo "rtrain: $total_pass passed, $total_skip skipped, $total_fail failed"
exit $status
