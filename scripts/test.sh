#!/usr/bin/env bash
# Install what the tests need, build the configurations and run the suite:
#   plain  the whole suite (build/)
#   asan   the whole suite under AddressSanitizer + UBSan (build-asan/),
#          the Python tests included (the sanitizer runtimes are preloaded
#          into /usr/bin/python3, tests/python/CMakeLists.txt), less the
#          netns label: the MPI tests across network namespaces run the
#          cases that the mpi_ tests run under ASan on one host, over
#          OpenMPI's TCP transport instead (not rtrain's code); less the
#          source label (ops_format, ops_shellcheck, dash_vendored: they read
#          the tree and run none of the built code), the packages label
#          (cpack and pip over the same binaries the plain run packages) and
#          the bench label (the benchmarks' smoke runs: python_bench_torch_users is
#          minutes of PyTorch's loop under the preloaded runtimes); and less
#          the backend_ref label, the suite's
#          second run on the ref backend (half of this configuration's time:
#          ref is plain C99 loops that ASan slows most). ref's code still
#          runs under ASan in engine_backend_diff (7 models x 20 steps on
#          both backends) and fuzz_backend_diff's seed replay
#   tsan   the tests that run threads against each other under
#          ThreadSanitizer: ctest labels integration (a real rtraind, its cq
#          threads and executor, concurrent clients), unit and fuzz (the
#          seed replay), less the data, python and source labels, with
#          OMP_NUM_THREADS=1 (build-tsan/). Every process writes its reports
#          under build-tsan/tsan-logs/; any report fails the configuration,
#          whatever the test's exit code (a daemon killed by its test would
#          otherwise hide one). Only the programs those tests run are
#          built.
#   ref    the whole suite on a build with the portable reference backend
#          alone, -DRT_NATIVE=OFF (build-ref/): no oneDNN, no OpenMP in the
#          kernels, every test on ref (docs/backends.md); not in the default
#          list (ref's plain loops make it the slowest)
#   scripts/test.sh                          plain, asan and tsan
#   RT_TEST_CONFIGS=plain scripts/test.sh    only the plain one
# Each configuration fails on a skip that its list below does not name, and
# on a listed skip that did not happen. The time-boxed libFuzzer runs are
# scripts/fuzz.sh, not part of this (docs/testing.md). The last line is
#   rtrain: N passed, N skipped, N failed
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh --test

# Builds and ctest take one job per CPU (at least 2, at most 8). Each test's
# OpenMP team is held at 2 threads (unless OMP_NUM_THREADS is set), so a
# test sees the same CPU share on a machine of any width: 2 threads a CPU,
# as on the 2-CPU machine the timeouts were measured on.
ncpu=$(nproc)
jobs=${RT_JOBS:-$((ncpu < 2 ? 2 : ncpu > 8 ? 8 : ncpu))}
omp_threads=${OMP_NUM_THREADS:-2}
export OMP_NUM_THREADS=$omp_threads
configs=${RT_TEST_CONFIGS:-"plain asan tsan"}
export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:print_suppressions=0"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

# The skips each configuration expects, one "TEST: reason" a line; the
# reason is what the test prints when it skips. Read as ${!skips_var}.
# shellcheck disable=SC2034 # read through ${!skips_var}, below
skips_plain=""
# shellcheck disable=SC2034 # read through ${!skips_var}, below
skips_asan="data_stream_limit: prlimit --as under a sanitizer, whose shadow memory needs terabytes of address space"
# shellcheck disable=SC2034 # read through ${!skips_var}, below
skips_tsan=""
# shellcheck disable=SC2034 # read through ${!skips_var}, below
skips_ref="engine_backend_diff: one backend (ref) in this build
inception_preempt: InceptionV3 on the ref backend"

# check_run JUNIT EXPECTED: the counts of ctest's JUnit file as
# "passed skipped failed" on the last line, after a line for each skip
# (expected or not) and for each expected skip that did not happen.
check_run() {
  /usr/bin/python3 - "$1" "$2" <<'EOF'
import sys
import xml.etree.ElementTree as ET
cases = ET.parse(sys.argv[1]).getroot().iter("testcase")
expected = dict(l.split(": ", 1) for l in sys.argv[2].splitlines() if l.strip())
passed = skipped = failed = 0
slow = []
for c in cases:
    name, out = c.get("name"), c.findtext("system-out") or ""
    slow.append((float(c.get("time") or 0), name))
    if c.get("status") == "run":
        passed += 1
    elif c.find("skipped") is not None:
        why = (out.strip().splitlines() or ["(no reason printed)"])[-1]
        if name in expected and expected[name] in out:
            skipped += 1
            print("skipped (expected) %s: %s" % (name, why))
        elif name in expected:
            failed += 1
            print("FAILED: %s skipped, not for the listed reason (%s): %s"
                  % (name, expected[name], why))
        else:
            failed += 1
            print("FAILED: unexpected skip %s: %s" % (name, why))
        expected.pop(name, None)
    else:
        failed += 1
for name, why in expected.items():
    failed += 1
    print("FAILED: %s was expected to skip (%s) and did not" % (name, why))
print("slowest: " + ", ".join("%s %.0f s" % (n, t) for t, n in sorted(slow)[::-1][:6]))
print(passed, skipped, failed)
EOF
}

# cfg_flags CFG: its build folder in $dir and its CMake flags in $flags.
cfg_flags() {
  # Every configuration: debug info at -g1 (line tables: file:line in
  # sanitizer reports and backtraces, no variables), a quarter less compile
  # time than -g. plain and asan link with gold, in a third of ld.bfd's time
  # a binary (both binutils); tsan keeps ld.bfd: a gold-linked TSan rtraind
  # dies of SIGBUS in TSan's shadow of its .rodata when started under
  # RLIMIT_FSIZE (integration_hostile_leftovers' full disk), an ld.bfd one
  # does not. A developer's own build keeps CMake's defaults.
  common=(-DRT_WERROR=ON)
  gold=(-DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=gold -DCMAKE_SHARED_LINKER_FLAGS=-fuse-ld=gold
        -DCMAKE_MODULE_LINKER_FLAGS=-fuse-ld=gold)
  rel=("-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG")
  case $1 in
    plain) dir=build;      flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "${rel[@]}" "${gold[@]}") ;;
    # Debug (asserts on) at -O1, the optimisation ASan's own docs suggest:
    # at -O0 the kernels' loops make this the slowest configuration.
    asan)  dir=build-asan; flags=(-DCMAKE_BUILD_TYPE=Debug -DRT_SANITIZE=ON -DRT_PYTHON=ON
                                  "-DCMAKE_C_FLAGS_DEBUG=-g1 -O1" "-DCMAKE_CXX_FLAGS_DEBUG=-g1 -O1" "${gold[@]}") ;;
    tsan)  dir=build-tsan; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DRT_TSAN=ON -DRT_PYTHON=OFF "${rel[@]}") ;;
    ref)   dir=build-ref;  flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DRT_NATIVE=OFF "${rel[@]}" "${gold[@]}") ;;
    *) echo "unknown configuration $1" >&2; exit 2 ;;
  esac
  flags+=("${common[@]}")
  # A new build folder gets Ninja: a fifth less CPU than CMake's Makefiles
  # over the same compiles (its dependency scan and no recursive make: 181
  # against 144 CPU-s for the plain tree). A folder configured before keeps
  # its generator (CMake refuses to switch one).
  [ -f "$dir/CMakeCache.txt" ] || flags+=(-G Ninja)
}

# select_cfg CFG: after cfg_flags and the configure, the ctest arguments
# of CFG's selection in $select, its tests' environment in $env_run and the
# build's targets in $targets (none: the whole tree).
select_cfg() {
  local cfg=$1
  select=() env_run=() targets=()
  if [ "$cfg" = asan ]; then
    select=(-LE 'netns|backend_ref|source|packages|bench')
    # durable_e2e stops the daemon 8 times in each of its four ways, not 20
    # (92 s of this configuration's wall time at 20): the same code paths
    # under ASan; the plain configuration keeps 20
    env_run=(RT_DURABLE_KILLS="${RT_DURABLE_KILLS:-8}")
  fi
  if [ "$cfg" = tsan ]; then
    # The data label (TFRecord/image decoding and training, e2e) is left
    # out: single-threaded decoding under TSan for minutes. The python
    # label too: the extension is not built with TSan.
    # durable_e2e is left out for time: its 80 daemon restarts take about
    # six minutes under TSan. (It once hung here: a SIGTERM's handler ran on
    # a thread parked in a futex, where TSan defers it for good; rtraind now
    # reads its signals from a signalfd on the main loop, see server/main.c,
    # and the test passes under TSan.) It runs in the plain and ASan
    # configurations.
    select=(-L 'integration|unit|fuzz' -LE 'data|python|source' -E '^durable_e2e$')
    # Only what the selected tests run is built (in a Ninja folder): the
    # files under the build folder that their command lines name (rtraind,
    # rtrain, the test programs), ninja's own targets; about half the tree,
    # the engine's, layers' and conv tests' programs not. ctest leaves a
    # program that is not built yet out of its listing's command, so the
    # commands come from the CTestTestfile.cmake files.
    if grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$dir/CMakeCache.txt"; then
      mapfile -t targets < <(ctest --test-dir "$dir" --show-only=json-v1 "${select[@]}" |
        /usr/bin/python3 -c '
import json, os, re, sys
top = sys.argv[1]
names = {t["name"] for t in json.load(sys.stdin)["tests"]}
outs = set()
for root, _, files in os.walk(top):
    if "CTestTestfile.cmake" in files:
        for m in re.finditer(r"^add_test\(\[=\[(.*?)\]=\] (.*)\)$",
                             open(os.path.join(root, "CTestTestfile.cmake")).read(), re.M):
            if m.group(1) in names:
                outs.update(os.path.relpath(a, top)
                            for a in re.findall(re.escape(top) + r"/[^ \"\\;$]+", m.group(2)))
print("\n".join(sorted(outs)))' "$PWD/$dir")
      [ "${#targets[@]}" -gt 0 ] || { echo "=== tsan: no test programs found" >&2; exit 1; }
      # a path that no rule builds (a folder a test writes in) is left out
      built=()
      for t in "${targets[@]}"; do
        ! ninja -C "$dir" -t query "$t" >/dev/null 2>&1 || built+=("$t")
      done
      targets=(--target "${built[@]}")
    fi
  fi
}

# build_cfg CFG: configure and build CFG's folder (what its tests run).
build_cfg() {
  cfg_flags "$1"
  cmake -S . -B "$dir" "${flags[@]}" >/dev/null
  select_cfg "$1"
  cmake --build "$dir" -j"$jobs" "${targets[@]}"
}

# raise_tree PID NICE: PID and the processes it started at niceness NICE
# (parents first: what they start next inherits it); fails if PID's may
# not be raised (a descendant that ended meanwhile is no failure)
raise_tree() {
  renice -n "$2" -p "$1" >/dev/null 2>&1 || return 1
  local p
  for p in $(ps -o pid= --ppid "$1"); do raise_tree "$p" "$2" || :; done
}
# tree PID: PID and its descendants' pids
tree() {
  echo "$1"
  local p
  for p in $(ps -o pid= --ppid "$1"); do tree "$p"; done
}
# stop_tree PID: SIGTERM to PID and its descendants at once
stop_tree() {
  # shellcheck disable=SC2046 # one pid a word
  kill -TERM $(tree "$1") 2>/dev/null || :
}

# The next configuration builds while this one's tests run, at nice 19:
# the tests keep the CPUs they use (their limits are the quiet machine's
# times 3), the build takes what they leave idle (tests waiting on a
# daemon's restart, MPI's launches, a checkpoint's fsync: about an eighth
# of the plain run's CPU time). Its log is printed if it fails; the
# configuration's own build step then builds what is left (nothing, or
# the failure again, in the foreground).
read -ra cfg_list <<<"$configs"
total_pass=0 total_skip=0 total_fail=0 status=0 times=() bg_pid=""
for i in "${!cfg_list[@]}"; do
  cfg=${cfg_list[$i]}
  skips_var=skips_$cfg
  t0=$SECONDS
  if [ -n "$bg_pid" ]; then
    # The tests are done: what is left of this build is now the critical
    # path, so it goes back to the script's own priority (beside a busy
    # machine's other work a nice-19 build barely runs). Where raising a
    # priority is not allowed (not root), the build is stopped instead
    # (make and ninja remove a target they did not finish) and the
    # foreground build step below does the rest.
    if raise_tree "$bg_pid" "$(nice)"; then
      wait "$bg_pid" || { echo "=== $cfg: the background build failed:"; cat "$bg_log"; }
    else
      stop_tree "$bg_pid"
      wait "$bg_pid" 2>/dev/null || :
    fi
    bg_pid=""
  fi
  echo "=== configuration: $cfg ($(cfg_flags "$cfg"; echo "$dir"))"
  build_cfg "$cfg"
  t1=$SECONDS
  next=${cfg_list[$((i + 1))]:-}
  if [ -n "$next" ]; then
    bg_log=$PWD/$(cfg_flags "$next"; echo "$dir")/background-build.log
    mkdir -p "${bg_log%/*}"
    # (renice of the subshell itself: its children inherit it; the
    # script and the tests share one process group, so not -g)
    (renice -n 19 -p "$BASHPID" >/dev/null && build_cfg "$next") </dev/null >"$bg_log" 2>&1 &
    bg_pid=$!
  fi
  if [ "$cfg" = tsan ]; then
    export OMP_NUM_THREADS=1 # libgomp's barriers are invisible to TSan
    rm -rf "$dir/tsan-logs" && mkdir -p "$dir/tsan-logs"
    # history_size=7 (the most): TSan keeps enough history to restore both
    # stacks of a report, so the gRPC suppressions can match the side that
    # is inside libgrpc instead of it showing "failed to restore the stack".
    export TSAN_OPTIONS="suppressions=$PWD/tests/tsan.supp:second_deadlock_stack=1:history_size=7:log_path=$PWD/$dir/tsan-logs/tsan"
  fi
  # Each test's TIMEOUT is about 3x its plain time, times the sanitizer's
  # slowdown (RT_TEST_TIMEOUT_SCALE, tests/CMakeLists.txt).
  junit=$PWD/$dir/ctest-junit.xml
  rm -f "$junit"
  set +e
  env "${env_run[@]}" ctest --test-dir "$dir" --output-on-failure -j"$jobs" --output-junit "$junit" "${select[@]}"
  rc=$?
  set -e
  unset TSAN_OPTIONS
  export OMP_NUM_THREADS=$omp_threads
  t2=$SECONDS
  [ "$rc" -eq 0 ] || status=1
  if [ "$cfg" = tsan ] && [ -n "$(ls -A "$dir/tsan-logs")" ]; then
    echo "=== ThreadSanitizer reports ($dir/tsan-logs):"
    cat "$dir"/tsan-logs/*
    status=1 total_fail=$((total_fail + 1))
  fi
  if [ -f "$junit" ] && res=$(check_run "$junit" "${!skips_var}"); then
    echo "=== $cfg:"
    sed '$d' <<<"$res"
    read -r p k f <<<"$(tail -1 <<<"$res")"
    total_pass=$((total_pass + p)) total_skip=$((total_skip + k))
    total_fail=$((total_fail + f))
    [ "$f" -eq 0 ] || status=1
    [ $((p + k + f)) -gt 0 ] || { echo "=== $cfg: ctest ran no test" >&2; status=1; }
  else
    echo "=== $cfg: no test results from ctest" >&2
    status=1 total_fail=$((total_fail + 1))
  fi
  times+=("$cfg: build $((t1 - t0)) s, tests $((t2 - t1)) s")
done

printf '=== %s\n' "${times[@]}" "all: $SECONDS s, packages included"
echo "rtrain: $total_pass passed, $total_skip skipped, $total_fail failed"
exit $status
