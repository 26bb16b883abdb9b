#!/usr/bin/env bash
# W-A step times of two builds, interleaved: bench_engine (engine only, no
# PyTorch peer) from build A, then from build B, ROUNDS times, so both see
# the same machine; one line per run, then each build's median of its
# runs' W-A rows (120 steps per call, 1 step per call) and B/A.
# Both builds should be Release (-DCMAKE_BUILD_TYPE=Release); A may be an
# older commit's build (its bench_engine prints the same rows).
#   usage: bench/engine/compare.sh BUILD_A BUILD_B [ROUNDS]   (ROUNDS: 7)
# Asserts nothing; numbers only mean something on a quiet machine.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 BUILD_A BUILD_B [ROUNDS]" >&2; exit 2; }
a=$1 b=$2 rounds=${3:-7}
for d in "$a" "$b"; do
  [ -x "$d/bench/engine/bench_engine" ] || { echo "no $d/bench/engine/bench_engine" >&2; exit 2; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# the number after a row's label ("W-A (120 steps per call)   1.038 us")
row() { awk -v k="$2" 'index($0, k) == 1 { s = substr($0, length(k) + 1); split(s, f, " ");
        print f[1]; exit }' "$1"; }
for r in $(seq 1 "$rounds"); do
  for side in A B; do
    d=$a
    [ "$side" = A ] || d=$b
    "$d/bench/engine/bench_engine" --no-torch >"$tmp/out" 2>&1 ||
      { cat "$tmp/out" >&2; exit 1; }
    w120=$(row "$tmp/out" "W-A (120 steps per call)")
    w1=$(row "$tmp/out" "W-A (1 step per call)")
    echo "$side $w120 $w1" >>"$tmp/all"
    printf 'round %d %s: W-A %s us (120 steps/call), %s us (1 step/call)\n' "$r" "$side" \
      "$w120" "$w1"
  done
done
/usr/bin/python3 - "$tmp/all" "$a" "$b" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = {s: [statistics.median(float(r[k]) for r in rows if r[0] == s) for k in (1, 2)]
       for s in "AB"}
print("medians over %d rounds, A = %s, B = %s" % (len(rows) // 2, sys.argv[2], sys.argv[3]))
for k, name in enumerate(("120 steps per call", "1 step per call")):
    print("W-A (%s): A %.3f us, B %.3f us, B/A %.3f"
          % (name, med["A"][k], med["B"][k], med["B"][k] / med["A"][k]))
EOF
