#!/usr/bin/env bash
# tfrecord_state.sh RTRAIND RTRAIN SRC - a gzip TFRecord dataset (JPEG
# shards of examples/inception/make_shards.py) uploaded to `rtraind
# --state-dir` comes back after a restart with its compression and feature
# spec; the same file with its spec altered is not restored (the store key
# no longer matches), is logged, and the daemon serves.
rtraind=$1 rtrain=$2 src=$3
. "$src/tests/lib/e2e.sh"
/usr/bin/python3 "$src/examples/inception/make_shards.py" "$tmp/sh" --count 16 --shards 2 \
  --size 28 >/dev/null || { echo "FAIL make_shards.py (dataset-fashion-mnist)"; exit 1; }
# shellcheck disable=SC2054 # the commas are inside option values (a feature list)
FIT=(fit --model "$src/bench/durable/stress_cnn.json" --data "$tmp/sh/train-*.tfrecord.gz"
     --features image/encoded:jpeg,image/class/label:int64 --label image/class/label
     --image-size 28x28 --channels 1 --loss sparse_categorical_crossentropy
     --batch-size 8 --epochs 1 --seed 1 --no-progress)
stop() { kill "$dpid"; wait "$dpid" 2>/dev/null; dpid=""; }
start_daemon "$tmp/d0.log" --state-dir "$tmp/st" --log-level info || exit 1
expect_rc 0 "fit from TFRecord shards on a durable daemon" -- "$rtrain" "${FIT[@]}" --server "$addr"
stop
n=$(find "$tmp/st/datasets" -name '*.data' | wc -l)
[ "$n" -eq 1 ] && ok "the TFRecord upload is kept in the state dir" ||
  bad "datasets/ holds $n .data files, not 1"
start_daemon "$tmp/d1.log" --state-dir "$tmp/st" --log-level info || exit 1
has "$tmp/d1.log" "restored 0 session(s), 0 program(s), 1 dataset(s)" "restart restores it"
stop
# the spec's feature key, altered in place (the shards are gzip: the key
# is only in the spec)
/usr/bin/python3 - "$tmp/st/datasets/"*.data <<'PY'
import sys
p = sys.argv[1]
b = open(p, "rb").read()
assert b.count(b"image/encoded") == 1, b.count(b"image/encoded")
open(p, "wb").write(b.replace(b"image/encoded", b"image/encodex"))
PY
start_daemon "$tmp/d2.log" --state-dir "$tmp/st" --log-level info || exit 1
has "$tmp/d2.log" "does not match its XXH3-128; not restored" "an altered spec is not restored"
has "$tmp/d2.log" "0 dataset(s)" "nothing restored from it"
expect_rc 0 "the daemon serves" -- "$rtrain" info --server "$addr"
echo "$((checks - fails))/$checks checks passed"
[ "$fails" -eq 0 ]
