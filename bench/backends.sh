#!/usr/bin/env bash
# Training-step times of the reference workloads on each backend of a
# native build, engine only (no PyTorch peer), in one command:
#   W-A and W-C        bench/engine/bench_engine --backend NAME
#   W-B and ResNet-18  bench/onnx/bench_onnx --backend NAME (CIFAR 32x32,
#                      batch 64)
# then one table of medians. ref runs plain loops (docs/backends.md): fewer
# repetitions there, ResNet-18 one timed step after one warm-up (minutes).
#   usage: bench/backends.sh [BUILD_DIR]     (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
b=${1:-build}
for p in bench/engine/bench_engine bench/onnx/bench_onnx; do
  [ -x "$b/$p" ] || { echo "no $b/$p: build with -DRT_NATIVE=ON first" >&2; exit 2; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
backends=(cpu ref)
for be in "${backends[@]}"; do
  er=() or=()
  if [ "$be" = ref ]; then er=(--reps 3) or=(--reps 1 --warmup 1); fi
  echo "=== $be: bench_engine"
  "$b/bench/engine/bench_engine" --no-torch --backend "$be" "${er[@]}" | tee "$tmp/e-$be"
  echo "=== $be: bench_onnx"
  "$b/bench/onnx/bench_onnx" --no-torch --backend "$be" "${or[@]}" | tee "$tmp/o-$be"
done
# the value after a row's label: bench_engine's "NAME  VALUE UNIT", and
# bench_onnx's markdown rows "| NAME | ... |" (column col)
eng() { awk -v k="$2" 'index($0, k) == 1 { s = substr($0, length(k) + 1); split(s, f, " ");
        print f[1] " " f[2]; exit }' "$1"; }
tab() { awk -F'|' -v k="$2" -v c="$3" 'index($0, "| " k " |") == 1 { gsub(/ /, "", $c);
        print $c " ms"; exit }' "$1"; }
echo
hdr="| median per training step |" sep="| --- |"
for be in "${backends[@]}"; do hdr+=" $be |" sep+=" --- |"; done
printf '%s\n%s\n' "$hdr" "$sep"
row() {
  local line="| $1 |"
  shift
  for be in "${backends[@]}"; do line+=" $("$@" "$be") |"; done
  echo "$line"
}
wa() { eng "$tmp/e-$1" "W-A (120 steps per call)"; }
wc() { eng "$tmp/e-$1" "W-C (Adam)"; }
wb() { tab "$tmp/o-$1" "W-B from ONNX" 6; }
rn() { tab "$tmp/o-$1" "rtrain (ONNX import)" 3; }
row "W-A (batch 20, 120 steps per call)" wa
row "W-B (batch 256, from ONNX)" wb
row "W-C (batch 128, Adam)" wc
row "ResNet-18 CIFAR (batch 64, SGD momentum)" rn
