#!/usr/bin/env bash
# End-to-end: the `rtrain` CLI uploads TFRecord files (plain, GZIP, ZLIB,
# shards by a glob) and a JPEG/PNG class-folder dataset as they are, a real
# rtraind decodes them; a small CNN trains on the images to val accuracy
# >= 0.95; two runs with one seed give bit-identical weights (Fit stream and
# RunSteps alike, with augmentation); re-uploads are deduplicated; bad
# records fail with the record and feature named, or are skipped and
# counted, and the daemon keeps serving.
#   usage: data_e2e.sh RTRAIND RTRAIN SOURCE_DIR GEN_DIR
set -uo pipefail
rtraind=$1 rtrain=$2 src=$3 gen=$4
here=$src/tests/data
py=/usr/bin/python3
. "$src/tests/lib/e2e.sh"
start_daemon "$tmp/daemon.log" --log-level info || exit 1
S=(--server "$addr")
$py "$here/gen_images.py" "$tmp/imgs" 100 30 || { echo "gen_images.py failed"; exit 1; }

# --- image folder: a CNN to val accuracy >= 0.95, twice, bit-identical
# shellcheck disable=SC2054 # the commas are inside option values (comma lists)
CNN=(fit "${S[@]}" --model "$here/cnn16.json" --data "$tmp/imgs/train" --val "$tmp/imgs/val"
     --loss sparse_categorical_crossentropy
     --image-size 16x16 --mean 0.5 --std 0.5 --augment flip,crop=2,brightness=0.1,contrast=0.2
     --epochs 12 --batch-size 32 --lr 0.01 --no-progress)
expect_rc 0 "image folder fit (Fit stream)" -- "$rtrain" "${CNN[@]}" --seed 3 --steps-per-call stream \
  --save-weights "$tmp/w1.bin"
acc=$(sed -n 's/^final:.* val_accuracy \([0-9.]*\).*/\1/p' "$tmp/out")
ge "$acc" 0.95 && ok "CNN val_accuracy $acc >= 0.95" || bad "CNN val_accuracy '$acc' < 0.95"
expect_rc 0 "image folder fit again (the default: pipelined RunSteps, auto K)" -- "$rtrain" \
  "${CNN[@]}" --seed 3 --save-weights "$tmp/w2.bin"
cmp -s "$tmp/w1.bin" "$tmp/w2.bin" && ok "same seed, RunSteps auto: bit-identical weights" \
  || bad "same seed: weights differ"
expect_rc 0 "image folder fit, RunSteps 7 per call" -- "$rtrain" "${CNN[@]}" --seed 3 \
  --steps-per-call 7 --save-weights "$tmp/w3.bin"
cmp -s "$tmp/w1.bin" "$tmp/w3.bin" && ok "RunSteps in 7-step calls: bit-identical to Fit" \
  || bad "RunSteps weights differ from Fit"
expect_rc 0 "another seed" -- "$rtrain" "${CNN[@]}" --seed 4 --save-weights "$tmp/w4.bin"
cmp -s "$tmp/w1.bin" "$tmp/w4.bin" && bad "another seed gives the same weights" \
  || ok "another seed: other weights"
n_img=$(grep -c "dataset d-.* 300 samples" "$tmp/daemon.log")
[ "$n_img" -eq 1 ] && ok "image folder parsed once, then deduplicated" \
  || bad "image folder parsed $n_img times"

# --- TFRecord: plain, GZIP, ZLIB and two shards are the same 100 records
D=(fit "${S[@]}" --model "$here/dense4.json" --features 'x:float[4],label:int64,id:image'
   --loss sparse_categorical_crossentropy
   --epochs 1 --batch-size 10 --seed 1 --no-progress)
expect_rc 4 "a spec that reads a bytes key as an image fails" -- "$rtrain" "${D[@]}" \
  --data "$gen/num.tfrecord" --image-size 4x4
has "$tmp/err" "record 0: feature 'id': not a JPEG or PNG image" "error names record 0 and 'id'"
D=(fit "${S[@]}" --model "$here/dense4.json" --features 'x:float[4],label:int64'
   --loss sparse_categorical_crossentropy
   --epochs 40 --batch-size 10 --seed 1 --lr 0.05 --no-progress)
for f in num.tfrecord num.tfrecord.gz num.tfrecord.zlib 'num-0000*-of-00002.tfrecord'; do
  expect_rc 0 "fit on $f" -- "$rtrain" "${D[@]}" --data "$gen/$f" --save-weights "$tmp/n.bin"
  acc=$(sed -n 's/^final:.* accuracy \([0-9.]*\) - steps.*/\1/p' "$tmp/out")
  ge "$acc" 0.9 && ok "$f: accuracy $acc >= 0.9" || bad "$f: accuracy '$acc'"
done
expect_rc 0 "shards again" -- "$rtrain" "${D[@]}" --data "$gen/num-0000*-of-00002.tfrecord"
n_100=$(grep -c "dataset d-.* 100 samples" "$tmp/daemon.log")
[ "$n_100" -eq 4 ] && ok "4 uploads parsed once each (plain, gz, zlib, shards); re-run deduplicated" \
  || bad "$n_100 TFRecord parses, want 4"
has "$tmp/err" "100 samples, 0 bytes sent (already on the daemon)" "re-run sends nothing"
# shards are content-addressed one by one: a new set of held shards sends
# nothing, and a set with one new shard sends just that shard
mkdir -p "$tmp/sh"
cp "$gen/num-00000-of-00002.tfrecord" "$gen/num-00001-of-00002.tfrecord" "$tmp/sh/"
cp "$gen/num.tfrecord" "$tmp/sh/num-all.tfrecord"
expect_rc 0 "three held shards as a new dataset" -- "$rtrain" "${D[@]}" --data "$tmp/sh/*.tfrecord"
has "$tmp/err" "200 samples, 0 bytes sent" "held shards are not sent again"
cat "$gen/num-00001-of-00002.tfrecord" "$gen/num-00000-of-00002.tfrecord" >"$tmp/sh/num-swapped.tfrecord"
new=$(stat -c %s "$tmp/sh/num-swapped.tfrecord")
expect_rc 0 "one new shard among held ones" -- "$rtrain" "${D[@]}" --data "$tmp/sh/*.tfrecord"
has "$tmp/err" "300 samples, $new bytes sent" "only the new shard ($new bytes) is sent"

# --- MNIST/Fashion-MNIST IDX.gz as it ships: sent compressed, decoded on
# the daemon, a re-run sends nothing
$py - "$tmp" <<'PY' || bad "writing IDX files"
import gzip, random, struct, sys
d = sys.argv[1]
rng = random.Random(5)
ys = [rng.randrange(4) for _ in range(240)]
img = bytearray()
for y in ys:  # class k: rows 3k..3k+2 bright
    for r in range(28):
        img += bytes((200 if 3 * y <= r < 3 * y + 3 else rng.randrange(50)) for _ in range(28))
with gzip.open(d + "/train-images-idx3-ubyte.gz", "wb") as f:
    f.write(struct.pack(">BBBBIII", 0, 0, 8, 3, 240, 28, 28) + bytes(img))
with gzip.open(d + "/train-labels-idx1-ubyte.gz", "wb") as f:
    f.write(struct.pack(">BBBBI", 0, 0, 8, 1, 240) + bytes(ys))
PY
cat >"$tmp/mlp28.json" <<'JSON'
{"class_name": "Sequential", "config": {"name": "mlp28", "layers": [
 {"class_name": "InputLayer", "config": {"batch_input_shape": [null, 28, 28], "dtype": "float32", "name": "x"}},
 {"class_name": "Flatten", "config": {"name": "flat"}},
 {"class_name": "Dense", "config": {"name": "out", "units": 4, "activation": "softmax", "use_bias": true, "kernel_initializer": {"class_name": "GlorotUniform", "config": {"seed": null}}, "bias_initializer": {"class_name": "Zeros", "config": {}}}}
]}, "keras_version": "2.12.0", "backend": "tensorflow"}
JSON
X=(fit "${S[@]}" --model "$tmp/mlp28.json" --data "$tmp/train-images-idx3-ubyte.gz"
   --labels "$tmp/train-labels-idx1-ubyte.gz" --loss sparse_categorical_crossentropy
   --epochs 10 --batch-size 24 --seed 1 --lr 0.01 --no-progress)
expect_rc 0 "fit on IDX.gz" -- "$rtrain" "${X[@]}"
acc=$(sed -n 's/^final:.* accuracy \([0-9.]*\) - steps.*/\1/p' "$tmp/out")
ge "$acc" 0.9 && ok "IDX.gz: accuracy $acc >= 0.9" || bad "IDX.gz: accuracy '$acc'"
expect_rc 0 "fit on IDX.gz again" -- "$rtrain" "${X[@]}"
has "$tmp/err" "train: 240 samples (already on the daemon)" "IDX re-run sends nothing"
n_idx=$(grep -c "dataset d-.* 240 samples" "$tmp/daemon.log")
[ "$n_idx" -eq 1 ] && ok "IDX parsed once" || bad "IDX parsed $n_idx times"

# --- bad records: fail names record and feature; skip counts; daemon lives
expect_rc 4 "data CRC mismatch fails" -- "$rtrain" "${D[@]}" --data "$gen/bad_datacrc.tfrecord"
has "$tmp/err" "shard 0 record 3 at byte [0-9]*: data CRC mismatch" "CRC error names record 3"
expect_rc 0 "data CRC mismatch skipped" -- "$rtrain" "${D[@]}" --data "$gen/bad_datacrc.tfrecord" \
  --on-bad-record skip
has "$tmp/err" "skipped 1 bad record" "skip policy counts the record"
expect_rc 4 "wrong feature type" -- "$rtrain" "${D[@]}" --data "$gen/bad_type.tfrecord"
has "$tmp/err" "record 3: feature 'x' is int64, the spec says float" "type error names record and feature"
expect_rc 4 "truncated file" -- "$rtrain" "${D[@]}" --data "$gen/bad_truncated.tfrecord"
has "$tmp/err" "record 3" "truncation names record 3"
# shellcheck disable=SC2054 # the commas are inside option values (comma lists)
I=(fit "${S[@]}" --model "$here/cnn16.json" --features image:image,label:int64 --image-size 16x16
   --loss sparse_categorical_crossentropy
   --epochs 1 --batch-size 8 --no-progress)
expect_rc 4 "decompression bomb" -- "$rtrain" "${I[@]}" --data "$gen/bad_bomb.tfrecord"
has "$tmp/err" "record 3: feature 'image': PNG declares 100000 x 100000" "bomb refused from its header"
expect_rc 4 "truncated JPEG" -- "$rtrain" "${I[@]}" --data "$gen/bad_jpeg_truncated.tfrecord"
has "$tmp/err" "record 3: feature 'image': JPEG" "truncated JPEG names record 3"
expect_rc 0 "truncated JPEG skipped" -- "$rtrain" "${I[@]}" --data "$gen/bad_jpeg_truncated.tfrecord" \
  --on-bad-record skip
expect_rc 4 "spec key missing" -- "$rtrain" "${D[@]}" --data "$gen/num.tfrecord" \
  --features 'x:float[4],y:int64' --label y
has "$tmp/err" "record 0: feature 'y' is missing" "missing key named"
expect_rc 2 "usage: --features needed" -- "$rtrain" fit "${S[@]}" --model "$here/dense4.json" \
  --data "$gen/num.tfrecord" --loss sparse_categorical_crossentropy
expect_rc 4 "image shape against the model" -- "$rtrain" "${I[@]}" --data "$tmp/imgs/train" \
  --image-size 8x8
expect_rc 0 "daemon still serving" -- "$rtrain" info "${S[@]}"
kill -0 "$dpid" 2>/dev/null && ok "daemon alive" || bad "daemon died"
# a clean stop; under ASan the daemon's leak check runs at exit
kill -TERM "$dpid"
wait "$dpid"
drc=$?
dpid=""
[ "$drc" -eq 0 ] && ok "daemon stopped cleanly" || bad "daemon exit status $drc"
grep -q "Sanitizer" "$tmp/daemon.log" && { bad "sanitizer report in the daemon log";
  grep -A 20 "Sanitizer" "$tmp/daemon.log" | head -40; } || ok "no sanitizer report"

# --- the shard cache is per principal: bob sends every byte of shards that
# alice's uploads left on the daemon, and learns nothing of them
for who in alice bob; do
  "$rtraind" --new-token $who >>"$tmp/tokens.txt" 2>"$tmp/$who.line"
  sed -n 's/.*: \([0-9a-f]\{64\}\)$/\1/p' "$tmp/$who.line" >"$tmp/$who.tok"
done
start_daemon "$tmp/daemon2.log" --tokens "$tmp/tokens.txt" --log-level info \
  && ok "daemon with tokens started" || bad "daemon with tokens did not start"
T=(fit --server "$addr" --model "$here/dense4.json" --features 'x:float[4],label:int64' --loss sparse_categorical_crossentropy
   --epochs 1 --batch-size 10 --seed 1 --no-progress --data "$gen/num-0000*-of-00002.tfrecord")
both=$(( $(stat -c %s "$gen/num-00000-of-00002.tfrecord") + $(stat -c %s "$gen/num-00001-of-00002.tfrecord") ))
expect_rc 0 "alice uploads two shards" -- "$rtrain" "${T[@]}" --token-file "$tmp/alice.tok"
has "$tmp/err" "100 samples, $both bytes sent" "alice sends both shards ($both bytes)"
expect_rc 0 "alice again" -- "$rtrain" "${T[@]}" --token-file "$tmp/alice.tok"
has "$tmp/err" "100 samples, 0 bytes sent" "alice's re-run sends nothing"
expect_rc 0 "bob, the same shards" -- "$rtrain" "${T[@]}" --token-file "$tmp/bob.tok"
has "$tmp/err" "100 samples, $both bytes sent" "bob sends every byte: alice's shards are not his"
kill -TERM "$dpid"; wait "$dpid"; drc=$?; dpid=""
[ "$drc" -eq 0 ] && ok "daemon with tokens stopped cleanly" || bad "daemon with tokens: exit $drc"
grep -q "Sanitizer" "$tmp/daemon2.log" && bad "sanitizer report in the second daemon's log" \
  || ok "no sanitizer report (second daemon)"

echo "data_e2e: $((checks - fails))/$checks checks passed"
[ "$fails" -eq 0 ]
