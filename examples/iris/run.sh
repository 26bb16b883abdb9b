#!/usr/bin/env bash
# The iris example: start a local rtraind, train W-A twice with `rtrain fit`,
# print the results, stop the daemon.
#   1. the story's setup: unshuffled 70/30 split, logcosh on integer labels,
#      Adam lr 0.1, batch 20, 20 epochs (val accuracy is 0 by construction:
#      the last 30% of iris is all one class the model barely saw);
#   2. a stratified shuffled split with sparse categorical cross-entropy,
#      which should reach val accuracy >= 0.93.
# Binaries come from ./build (override: RTRAIN_BUILD=/path/to/build).
# Extra arguments go to both `rtrain fit` runs (e.g. --timings).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${RTRAIN_BUILD:-$root/build}
find_bin() {
  local p
  p=$(find "$build" -type f -name "$1" -perm -u+x 2>/dev/null | head -n 1)
  if [ -z "$p" ]; then
    echo "run.sh: no $1 under $build (build first, or set RTRAIN_BUILD)" >&2
    exit 1
  fi
  echo "$p"
}
rtraind=$(find_bin rtraind)
rtrain=$(find_bin rtrain)

log=$(mktemp)
"$rtraind" --listen 127.0.0.1:0 >"$log" 2>&1 &
pid=$!
cleanup() {
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  rm -f "$log"
}
trap cleanup EXIT
addr=""
for _ in $(seq 1 100); do
  addr=$(sed -n 's/^rtraind listening on \([^ ]*\).*/\1/p' "$log" | head -n 1)
  [ -n "$addr" ] && break
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "run.sh: rtraind exited:" >&2
    cat "$log" >&2
    exit 1
  fi
  sleep 0.1
done
if [ -z "$addr" ]; then
  echo "run.sh: rtraind did not report its address within 10 s:" >&2
  cat "$log" >&2
  exit 1
fi
echo "rtraind $pid listening on $addr"

echo
echo "== 1. the story's setup: unshuffled split, logcosh, Adam lr 0.1, batch 20, 20 epochs"
"$rtrain" fit --server "$addr" --model "$here/model.json" \
  --data "$here/train.csv" --val "$here/val.csv" \
  --loss logcosh --optimizer adam --lr 0.1 --batch-size 20 --epochs 20 --seed 1 "$@"

echo
echo "== 2. shuffled stratified split, sparse categorical cross-entropy, Adam lr 0.02, 60 epochs"
out=$("$rtrain" fit --server "$addr" --model "$here/model.json" \
  --data "$here/train_shuffled.csv" --val "$here/val_shuffled.csv" \
  --loss sparse_categorical_crossentropy --optimizer adam --lr 0.02 \
  --batch-size 20 --epochs 60 --seed 1 --steps-per-call 60 "$@" | tee /dev/stderr)
acc=$(sed -n 's/^final:.* val_accuracy \([0-9.]*\).*/\1/p' <<<"$out")
echo
if [ -n "$acc" ] && awk -v a="$acc" 'BEGIN { exit !(a >= 0.93) }'; then
  echo "shuffled split: val_accuracy $acc (>= 0.93)"
else
  echo "shuffled split: val_accuracy ${acc:-?} is below 0.93" >&2
  exit 1
fi
