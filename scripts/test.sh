#!/usr/bin/env bash
# Install what the tests need, build the plain and the sanitizer
# configurations, and run the whole suite in both.
#   scripts/test.sh            both configurations
#   RT_TEST_CONFIGS=plain scripts/test.sh   only the plain one
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh --test

jobs=${RT_JOBS:-2}
configs=${RT_TEST_CONFIGS:-"plain asan"}
export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:print_suppressions=0"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

total_pass=0 total_fail=0 status=0
for cfg in $configs; do
  case $cfg in
    plain) dir=build;      flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo) ;;
    asan)  dir=build-asan; flags=(-DCMAKE_BUILD_TYPE=Debug -DRT_SANITIZE=ON -DRT_PYTHON=OFF) ;;
    *) echo "unknown configuration $cfg" >&2; exit 2 ;;
  esac
  echo "=== configuration: $cfg ($dir)"
  cmake -S . -B "$dir" "${flags[@]}" >/dev/null
  cmake --build "$dir" -j"$jobs"
  log=$(mktemp)
  set +e
  ctest --test-dir "$dir" --output-on-failure -j"$jobs" --timeout 600 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  set -e
  [ "$rc" -eq 0 ] || status=1
  line=$(grep -E '[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -1 || true)
  if [ -n "$line" ]; then
    n=$(sed -E 's/.*out of ([0-9]+).*/\1/' <<<"$line")
    f=$(sed -E 's/.*passed, ([0-9]+) tests? failed.*/\1/' <<<"$line")
    total_pass=$((total_pass + n - f)); total_fail=$((total_fail + f))
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

echo "rtrain: $total_pass passed, $total_fail failed"
exit $status
