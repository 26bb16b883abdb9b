#!/usr/bin/env bash
# End-to-end: TFRecord defaults a TensorFlow user expects (issue 31 item 4).
# Gzip shards of tf.train.Example as the TF models' ImageNet scripts write
# them (image/encoded JPEG, image/class/label, image/height, image/width;
# gen_tfrecord.py), 32x32 images, and a 24x24x3 CNN:
#   - no --image-size: images are decoded to the model's input (24x24), and
#     the CNN trains on them;
#   - no --label: the key ending in /label is the label;
#   - two keys that look like labels: an error naming both, nothing sent;
#   - --label and --image-size still decide when given.
#   usage: tfrecord_defaults.sh RTRAIND RTRAIN SOURCE_DIR GEN_DIR
set -uo pipefail
rtraind=$1 rtrain=$2 src=$3 gen=$4
here=$src/tests/data
. "$src/tests/lib/e2e.sh"
start_daemon "$tmp/daemon.log" --log-level info || exit 1
F=(fit --server "$addr" --model "$here/cnn24.json" --data "$gen/inc-0000*-of-00002.tfrecord.gz"
   --loss sparse_categorical_crossentropy --mean 0.5 --std 0.5
   --epochs 15 --batch-size 25 --lr 0.01 --seed 2 --no-progress)

expect_rc 0 "ImageNet-style shards, no --image-size, no --label" -- "$rtrain" "${F[@]}" \
  --features image/encoded:jpeg,image/class/label:int64
has "$tmp/err" "150 samples" "both shards read (150 records)"
has "$tmp/daemon.log" "150 samples" "the daemon built the dataset"
acc=$(sed -n 's/^final:.* accuracy \([0-9.]*\) - steps.*/\1/p' "$tmp/out")
ge "$acc" 0.9 && ok "CNN on the model-sized images: accuracy $acc >= 0.9" \
  || bad "accuracy '$acc' < 0.9"

expect_rc 2 "two label-like keys without --label" -- "$rtrain" "${F[@]}" \
  --features image/encoded:jpeg,image/class/label:int64,label:int64
has "$tmp/err" "ambiguous: 'image/class/label' and 'label'" "the error names both keys"
has "$tmp/err" "--label" "the error says how to choose"

expect_rc 0 "--label names a key the rule would not pick" -- "$rtrain" "${F[@]}" --epochs 1 \
  --features image/encoded:jpeg,class_id:int64 --label class_id
has "$tmp/err" "150 samples" "class_id is the label"

expect_rc 4 "--image-size still decides (16x16 for a 24x24 model)" -- "$rtrain" "${F[@]}" \
  --epochs 1 --features image/encoded:jpeg,image/class/label:int64 --image-size 16x16
has "$tmp/err" "samples of shape (16, 16, 3) but program .* expects (24, 24, 3)" \
  "the shape error shows the 16x16 images"

kill -TERM "$dpid"; wait "$dpid"; drc=$?; dpid=""
[ "$drc" -eq 0 ] && ok "daemon stopped cleanly" || bad "daemon: exit $drc"
echo "tfrecord_defaults: $((checks - fails))/$checks checks passed"
[ "$fails" -eq 0 ]
