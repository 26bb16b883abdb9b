#!/usr/bin/env bash
# Convolutions by direction (forward, backward-data, backward-weights) of
# W-B (batch 256), the 3x3x64 net (batch 128) and ResNet-18 CIFAR (batch 64)
# before and after, in one run: `bench_conv --convs` of a build of the old
# code, then of this one, rounds alternating; each run measures the float32
# limit itself (bench_limit.h: warm sgemm loop at the step's threads) and
# prints every variant's GFLOP/s and share of it. Then one table of medians
# over the rounds: the old build's default row against the new build's.
#   usage: [ONLY=W-B|3x3x64|ResNet] bench/conv/conv_dirs.sh BEFORE_BUILD AFTER_BUILD [ROUNDS] [REPS]
#   e.g.   bench/conv/conv_dirs.sh ../main/build-rel build-rel 3
# Both builds' "default" rows (the engine's own choice) are compared; set
# BEFORE_VARIANT=im2col+GEMM for a build from before the shape rule was on.
# Needs python3-torch for ResNet-18.
set -euo pipefail
before=${1:?before build dir} after=${2:?after build dir} rounds=${3:-3} reps=${4:-9}
for b in "$before" "$after"; do
  [ -x "$b/bench/conv/bench_conv" ] || { echo "no $b/bench/conv/bench_conv" >&2; exit 2; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for r in $(seq 1 "$rounds"); do
  for side in before after; do
    b=$before
    [ "$side" = after ] && b=$after
    echo "=== round $r, $side ($b)"
    uptime
    "$b/bench/conv/bench_conv" --convs --reps "$reps" ${ONLY:+--only "$ONLY"} | tee "$tmp/$side.$r"
  done
done
# rows: "<workload>, batch N, ...:" heads; "  <variant> <direction> X ms Y GFLOP/s  Z% of
# the f32 limit L ..."; the limit line "limit (...): f32 ..."
summ() { # file variant -> "workload|direction|gflops|pct|limit" lines
  awk -v v="$2" '
    /GFLOP\/step:$/ { w = $0; sub(/, batch.*/, "", w) }
    index($0, "  " v " ") == 1 {
      s = substr($0, length(v) + 4); n = split(s, f, " ")
      if (f[1] == "step") { d = "step"; i = 2 } else { d = f[1]; i = 2 }
      for (k = i; k <= n; k++) if (f[k] == "GFLOP/s") { g = f[k-1]; p = f[k+1]; l = f[k+6] }
      print w "|" d "|" g "|" p "|" l
    }' "$1"
}
for side in before after; do
  v=${BEFORE_VARIANT:-default}
  [ "$side" = after ] && v="default"
  for r in $(seq 1 "$rounds"); do summ "$tmp/$side.$r" "$v"; done >"$tmp/$side.rows"
done
echo
echo "medians over $rounds rounds: GFLOP/s and share of the f32 limit measured in the same run"
printf '%-28s %-17s %22s %22s\n' workload direction "before (${BEFORE_VARIANT:-default})" "after (default)"
awk -F'|' '
  FNR == 1 { side++ }
  { k = $1 "|" $2; if (!(k in seen)) { seen[k] = 1; order[++n] = k }
    c = ++cnt[side, k]; g[side, k, c] = $3; p[side, k, c] = $4 }
  function med(s, k,   m, i, j, t, a) {
    m = cnt[s, k]; if (!m) return "-"
    for (i = 1; i <= m; i++) a[i] = g[s, k, i] + 0
    for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return a[int((m + 1) / 2)]
  }
  function medp(s, k,   m, i, j, t, a) {
    m = cnt[s, k]; if (!m) return "-"
    for (i = 1; i <= m; i++) { a[i] = p[s, k, i]; sub(/%/, "", a[i]); a[i] += 0 }
    for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return a[int((m + 1) / 2)] "%"
  }
  END { for (i = 1; i <= n; i++) { split(order[i], kk, "|")
          printf "%-28s %-17s %14s %6s %14s %6s\n", kk[1], kk[2], med(1, order[i]),
                 medp(1, order[i]), med(2, order[i]), medp(2, order[i]) } }
' "$tmp/before.rows" "$tmp/after.rows"
