#!/usr/bin/env bash
# big_upload_e2e.sh - `rtrain fit` on .npy arrays larger than one upload
# (GetInfo's max_upload_bytes), through cli_rows.c and rt_client_fit_rows.
# A daemon run with --max-dataset-bytes 1 MiB takes at most 1 MiB in one
# upload (`rtrain info`), less than the 1.5 MB features, so fit sends
# them (and the sample weights with their rows) in chunks of whole
# batches of at most 512 KiB; the reference is the
# same fit on a plain daemon, one upload. Unshuffled, both train on the
# same batches in the same order from the same initial weights (same
# seed), so the weights files must be identical, byte for byte: a row left
# out, sent twice or out of order changes them. The epoch means are the
# chunks' merged: the printed loss and accuracy agree to their 4 digits.
set -uo pipefail
rtraind=$1 rtrain=$2 src=$3
. "$src/tests/lib/e2e.sh"
/usr/bin/python3 - "$tmp" <<'PY' || exit 1
import sys
import numpy as np
rng = np.random.RandomState(1)
x = rng.randn(6000, 64).astype(np.float32)  # 1,536,000 bytes
w = rng.randn(64, 4)
np.save(sys.argv[1] + "/x.npy", x)
np.save(sys.argv[1] + "/y.npy", np.argmax(x @ w, axis=1).astype(np.int64))
np.save(sys.argv[1] + "/sw.npy", np.ones(6000, np.float32))
PY
cat >"$tmp/m.json" <<'JS'
{"class_name": "Sequential", "config": {"name": "s", "layers": [
 {"class_name": "Dense", "config": {"name": "d1", "units": 16, "activation": "relu",
  "batch_input_shape": [null, 64]}},
 {"class_name": "Dense", "config": {"name": "d2", "units": 4, "activation": "softmax"}}]}}
JS
start_daemon "$tmp/small.log" --log-level warn --max-dataset-bytes 1048576 || exit 1
small=$addr small_pid=$dpid
start_daemon "$tmp/daemon.log" --log-level warn || { kill "$small_pid"; exit 1; }
trap 'kill "$small_pid" 2>/dev/null; wait "$small_pid" 2>/dev/null; cleanup' EXIT

FIT=(fit --model "$tmp/m.json" --data "$tmp/x.npy" --labels "$tmp/y.npy"
     --loss sparse_categorical_crossentropy --optimizer sgd --lr 0.05 --batch-size 32
     --epochs 2 --seed 7 --no-shuffle --no-progress)
expect_rc 0 "the small daemon's limits" -- "$rtrain" info --server "$small"
has "$tmp/out" "upload 1048576 B" "the premise: it takes at most 1 MiB in one upload"
# sample weights go with their rows, chunk by chunk
expect_rc 0 "fit with sample weights in chunks" -- "$rtrain" "${FIT[@]}" --server "$small" \
  --sample-weights "$tmp/sw.npy" --save-weights "$tmp/sw_chunked.bin"
expect_rc 0 "fit with sample weights in one upload" -- "$rtrain" "${FIT[@]}" --server "$addr" \
  --sample-weights "$tmp/sw.npy" --save-weights "$tmp/sw_one.bin"
cmp -s "$tmp/sw_chunked.bin" "$tmp/sw_one.bin" && ok "with sample weights: weights bit-identical" ||
  bad "with sample weights: the weights differ"
expect_rc 0 "fit in chunks" -- "$rtrain" "${FIT[@]}" --server "$small" --save-weights "$tmp/chunked.bin"
has "$tmp/err" "sent in chunks of whole batches" "the fit says it sends chunks"
grep "^final:" "$tmp/out" | sed 's/ - wall.*//' >"$tmp/final_chunked"
expect_rc 0 "fit in one upload" -- "$rtrain" "${FIT[@]}" --server "$addr" --save-weights "$tmp/one.bin"
grep -q "sent in chunks" "$tmp/err" && bad "the plain daemon's fit was chunked" || ok "one upload there"
grep "^final:" "$tmp/out" | sed 's/ - wall.*//' >"$tmp/final_one"
cmp -s "$tmp/chunked.bin" "$tmp/one.bin" && ok "weights bit-identical" || bad "the weights differ"
[ -s "$tmp/final_one" ] && cmp -s "$tmp/final_chunked" "$tmp/final_one" &&
  ok "epoch means agree: $(cat "$tmp/final_one")" ||
  bad "epoch means: $(cat "$tmp/final_chunked") vs $(cat "$tmp/final_one")"
echo "$((checks - fails))/$checks checks passed"
[ "$fails" -eq 0 ]
