#!/usr/bin/env bash
# bench/mpi/targets.sh BUILD [ROUNDS]: issue 28's targets in one run, under
# the bench lock (a second bench waits), across network namespaces
# (tests/mpi/netns.sh; root):
#   1. the all-reduce by size between 2 and 4 "hosts" (TCP over veth)
#      against bare MPI_Allreduce on the same link, and the link itself
#      (bench_mpi --part link,allreduce; cost_model.py reads the output);
#   2. the resume after a host loss: kill rank 3 of 4 in the middle of a
#      fit -> first step at N = 3 on the same state dir (test_mpi resume:
#      rank 0's stop and checkpoint, the relaunch, the restore), ROUNDS runs;
#   3. the W-C step at N = 2 across namespaces against N = 2 on one host
#      (shared memory, the same mpi_yield_when_idle), alternating, ROUNDS
#      rounds each.
# Prints every run's figures and the load average before and after, then
# the medians. ROUNDS defaults to 3.
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: bench/mpi/targets.sh BUILD [ROUNDS]" >&2; exit 2; }
b=$(cd "$1" && pwd) || exit 2
rounds=${2:-3}
src=$(cd "$(dirname "$0")/../.." && pwd)
lock=${RT_BENCH_LOCK:-/tmp/rtrain-bench.lock}
if [ -z "${RT_BENCH_LOCKED:-}" ]; then
  RT_BENCH_LOCKED=1 exec flock "$lock" "$0" "$@"
fi
mpirun=$(command -v mpirun) || { echo "no mpirun" >&2; exit 1; }
netns=$src/tests/mpi/netns.sh
bench=$b/bench/mpi/bench_mpi
tmp=$(mktemp -d /tmp/rt-targets-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
load() { echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"; }
med() { sort -g | awk '{v[NR]=$1} END {if (NR) print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2); else print "-"}'; }

echo "== 1. all-reduce across namespaces against MPI_Allreduce on the same link"
load
# shellcheck disable=SC2016 # expanded by the inner shell, in host 0
"$netns" 2 sh -c '"$0" --allow-run-as-root $RT_MPIRUN_ARGS --bind-to none -n 2 \
  -x OMP_NUM_THREADS=1 "$1" --part link,allreduce --reps 9' "$mpirun" "$bench" | tee "$tmp/ar2"
# shellcheck disable=SC2016
"$netns" 4 sh -c '"$0" --allow-run-as-root $RT_MPIRUN_ARGS --bind-to none -n 4 \
  -x OMP_NUM_THREADS=1 "$1" --part allreduce --reps 5' "$mpirun" "$bench" | tee "$tmp/ar4"
load
/usr/bin/python3 "$src/bench/mpi/cost_model.py" "$tmp/ar2" "$tmp/ar4" || true

echo "== 2. resume after a host loss (kill rank 3 of 4 -> first step at N = 3)"
for i in $(seq "$rounds"); do
  load
  "$netns" 4 "$b/tests/mpi/test_mpi" "$b/server/rpc/rtraind" "$mpirun" \
    "$src/tests/conv/data/digits.csv.gz" "$src/tests/onnx/fixtures/wa.onnx" resume \
    >"$tmp/resume$i" 2>&1
  grep -E "from the kill|FAIL|passed|failed" "$tmp/resume$i"
done
grep -h "from the kill" "$tmp"/resume* | sed 's/.*: \([0-9.]*\) s from.*/\1/' | med \
  | sed 's/^/resume median (s): /'

echo "== 3. W-C step at N = 2: across namespaces against one host"
for i in $(seq "$rounds"); do
  load
  OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none \
    OMPI_MCA_mpi_yield_when_idle=1 "$mpirun" --oversubscribe --allow-run-as-root \
    --bind-to none -n 2 -x OMP_NUM_THREADS=1 "$bench" --part wc >"$tmp/wc1-$i" 2>&1
  grep -m1 "ms/step" "$tmp/wc1-$i" | sed 's/^/one host:   /'
  # shellcheck disable=SC2016
  "$netns" 2 sh -c '"$0" --allow-run-as-root $RT_MPIRUN_ARGS --bind-to none -n 2 \
    -x OMP_NUM_THREADS=1 "$1" --part wc' "$mpirun" "$bench" >"$tmp/wcn-$i" 2>&1
  grep -m1 "ms/step" "$tmp/wcn-$i" | sed 's/^/namespaces: /'
done
load
for k in 1 n; do
  grep -h -m1 "ms/step" "$tmp"/wc$k-* | sed 's/.*: \([0-9.]*\) ms\/step.*/\1/' | med \
    | sed "s/^/W-C N=2 median ms\/step, $([ $k = 1 ] && echo 'one host:  ' || echo 'namespaces:'): /"
done
