#!/usr/bin/env bash
# The TF.js layers format in the CLI and librtrain (rt_client_tfjs_load and
# _save), held to TensorFlow.js (@tensorflow/tfjs, pure JS, through
# tests/interop/run.sh, which scripts/deps.sh --test installs; missing, the
# test fails):
#   - predict --model DIR/model.json with no --weights, on a folder tfjs
#     itself saved (tfjs/saved_titanic_webnn_tfjs: model.json, a shard, and
#     tfjs' predictions on 4 fixed rows): the shards are the weights, and
#     rtrain predicts what tfjs predicted;
#   - fit from that model.json trains from those weights and writes --tfjs
#     OUT; tfjs loads OUT and predicts what rtrain predicts from it;
#   - export --weights W.bin --tfjs OUT2 writes the same weights;
#   - a shard path that leaves the folder is refused, naming it.
#   usage: keras_tfjs_format.sh RTRAIND RTRAIN SOURCE_DIR
set -uo pipefail
rtraind=$1 rtrain=$2 src=$3
py=/usr/bin/python3
. "$src/tests/lib/e2e.sh"
start_daemon "$tmp/daemon.log" --log-level warn || exit 1
S=(--server "$addr")
saved=$src/tests/keras_import/tfjs/saved_titanic_webnn_tfjs

# the generator's fixed rows (gen_tfjs_fixtures.js savedModel) and 32 rows
# to train on
$py - "$tmp" <<'EOF2'
import json, sys
import numpy as np
d = sys.argv[1]
def mix(x):
    x = np.asarray(x, dtype=np.uint64) & 0xffffffff
    x ^= x >> 16; x = (x * 0x7feb352d) & 0xffffffff
    x ^= x >> 15; x = (x * 0x846ca68b) & 0xffffffff
    return x ^ (x >> 16)
h = mix(np.arange(4 * 6, dtype=np.uint64) ^ 0x5eed0001)
rows = (((h >> 22).astype(np.int64) - 512) / 512.0).astype(np.float32).reshape(4, 6)
np.savetxt(f"{d}/rows.csv", rows, delimiter=",", fmt="%.9g")
json.dump({"shape": [6], "x": [float(v) for v in rows.reshape(-1)]}, open(f"{d}/rows.json", "w"))
rng = np.random.default_rng(3)
x = rng.uniform(-1, 1, (32, 6)).astype(np.float32)
y = (x[:, 0] + x[:, 1] > 0).astype(np.float32)
np.savetxt(f"{d}/train.csv", np.concatenate([x, y[:, None]], 1), delimiter=",", fmt="%.9g")
EOF2
close() { # close A.npy|A.json B.json: the same values within 1e-5
  $py - "$1" "$2" <<'EOF2'
import json, sys
import numpy as np
a = np.load(sys.argv[1]).reshape(-1) if sys.argv[1].endswith(".npy") else \
    np.array(json.load(open(sys.argv[1]))).reshape(-1)
w = json.load(open(sys.argv[2]))
w = np.array(w["values"] if isinstance(w, dict) else w, dtype=np.float64).reshape(-1)
assert a.shape == w.shape, (a.shape, w.shape)
assert np.allclose(a, w, rtol=1e-5, atol=1e-6), (a, w)
EOF2
}

expect_rc 0 "predict --model tfjs-saved model.json (its shards' weights)" -- "$rtrain" predict \
  "${S[@]}" --model "$saved/model.json" --loss binary_crossentropy --data "$tmp/rows.csv" \
  --out "$tmp/p0.npy"
close "$tmp/p0.npy" "$saved/predictions.json" && ok "tfjs' own predictions of its saved weights" \
  || bad "predictions of the tfjs-saved folder"

expect_rc 0 "fit from the model.json, --tfjs OUT" -- "$rtrain" fit "${S[@]}" \
  --model "$saved/model.json" --data "$tmp/train.csv" --loss binary_crossentropy \
  --optimizer sgd --lr 0.5 --batch-size 8 --epochs 2 --seed 1 \
  --save-weights "$tmp/w.bin" --tfjs "$tmp/tj"
[ -f "$tmp/tj/model.json" ] && [ -f "$tmp/tj/group1-shard1of1.bin" ] \
  && ok "OUT holds model.json and its shard" || bad "OUT: $(ls "$tmp/tj" 2>&1)"
expect_rc 0 "predict --model OUT/model.json" -- "$rtrain" predict "${S[@]}" \
  --model "$tmp/tj/model.json" --loss binary_crossentropy --data "$tmp/rows.csv" \
  --out "$tmp/p1.npy"
if $py -c "import sys, numpy as np; a, b = np.load(sys.argv[1]), np.load(sys.argv[2]);
sys.exit(0 if np.abs(a - b).max() > 1e-3 else 1)" "$tmp/p0.npy" "$tmp/p1.npy"; then
  ok "training moved the predictions"; else bad "the fit changed nothing"; fi
if "$src/tests/interop/run.sh" --script tfjs_predict.js "$tmp/tj" "$tmp/rows.json" \
     >"$tmp/tfjs.json" 2>"$tmp/tfjs.err"; then
  close "$tmp/p1.npy" "$tmp/tfjs.json" && ok "tfjs loads OUT and predicts what rtrain predicts" \
    || bad "tfjs' predictions of OUT differ from rtrain's"
else
  bad "tfjs did not load OUT: $(tail -3 "$tmp/tfjs.err")"
fi

expect_rc 0 "export --weights W.bin --tfjs OUT2" -- "$rtrain" export "${S[@]}" \
  --model "$saved/model.json" --weights "$tmp/w.bin" --tfjs "$tmp/tj2"
cmp -s "$tmp/tj/group1-shard1of1.bin" "$tmp/tj2/group1-shard1of1.bin" \
  && ok "export writes the trained weights" || bad "export's shard differs from fit's"

mkdir -p "$tmp/evil"
$py - "$saved/model.json" "$tmp/evil/model.json" <<'EOF2'
import json, sys
d = json.load(open(sys.argv[1]))
d["weightsManifest"][0]["paths"] = ["../secret.bin"]
json.dump(d, open(sys.argv[2], "w"))
EOF2
expect_rc 4 "a shard path leaving the folder refused" -- "$rtrain" predict "${S[@]}" \
  --model "$tmp/evil/model.json" --loss binary_crossentropy --data "$tmp/rows.csv" \
  --out "$tmp/p2.npy"
has "$tmp/err" "leaves the model's folder" "names the shard path"

# a shard the manifest names, missing from the folder
mkdir -p "$tmp/noshard"
cp "$saved/model.json" "$tmp/noshard/model.json"
expect_rc 4 "a missing shard refused" -- "$rtrain" predict "${S[@]}" \
  --model "$tmp/noshard/model.json" --loss binary_crossentropy --data "$tmp/rows.csv" \
  --out "$tmp/p3.npy"
has "$tmp/err" "drop weightsManifest to start from fresh weights" "names the missing shard's way out"

echo "$((checks - fails))/$checks checks passed"
[ "$fails" -eq 0 ]
