#!/usr/bin/env bash
# chunked_formats_e2e.sh - `rtrain fit` on CSV, IDX, TFRecord and image
# folder data, and --val data, larger than one upload (a daemon with
# --max-upload-bytes 256 KiB), through cli_rows.c and rt_client_fit_rows.
# `rtrain info` shows the small daemon's upload limit; each set's eval
# there goes in chunks (rt_client_evaluate_rows) and prints the figures
# of the same eval as one upload on a plain daemon.
# Unshuffled, the chunked fit trains on the batches of the same fit as one
# upload on a plain daemon, in the same order, from the same initial
# weights (same seed): the weights files must be identical, byte for byte
# (a row left out, sent twice, out of order or decoded differently in a
# chunk changes them). With --val over the limit too, each epoch's val
# metrics (evaluated in chunks of at most 128 KiB, combined by rows)
# and training metrics (the chunks' epoch means, combined by rows) in
# --csv-log agree with the one-upload fit's within 1e-6 relative. Shuffled,
# the same seed gives the same weights and another seed others (which rows
# each chunk holds is client_e2e's check).
set -uo pipefail
rtraind=$1 rtrain=$2 src=$3
. "$src/tests/lib/e2e.sh"
. "$src/tests/cli/chunked_lib.sh"
/usr/bin/python3 - "$tmp" "$src/tests/data" <<'PY' || exit 1
import struct, sys
sys.path.insert(0, sys.argv[2])
import numpy as np
from gen_tfrecord import example, write
out = sys.argv[1]
rng = np.random.RandomState(3)
n, nv = 3000, 2000
x = rng.randn(n + nv, 16).astype(np.float32)
y = np.argmax(x @ rng.randn(16, 4), axis=1)
for name, lo, hi in (("d", 0, n), ("v", n, n + nv)):  # 450 and 300 KB
    with open("%s/%s.csv" % (out, name), "w") as f:
        for i in range(lo, hi):
            f.write(",".join("%.6f" % v for v in x[i]) + ",%d\n" % y[i])
im = (rng.rand(n, 12, 12) * 255).astype(np.uint8)  # 432 KB
with open(out + "/im-images-idx3-ubyte", "wb") as f:
    f.write(struct.pack(">BBBBIII", 0, 0, 8, 3, n, 12, 12) + im.tobytes())
with open(out + "/im-labels-idx1-ubyte", "wb") as f:
    f.write(struct.pack(">BBBBI", 0, 0, 8, 1, n) + (im[:, 0, 0] % 4).astype(np.uint8).tobytes())
recs = [example({"x": ("float", [float(v) for v in x[i]]), "label": ("int64", [int(y[i])])})
        for i in range(n)]  # 3 shards, 330 KB
for s in range(3):
    write("%s/num-%05d-of-00003.tfrecord" % (out, s), recs[s * 1000:(s + 1) * 1000])
PY
/usr/bin/python3 "$src/tests/data/gen_images.py" "$tmp/imgs" 150 5 32 >/dev/null || exit 1
dense 16 4 softmax >"$tmp/m.json"
dense 0 4 softmax "12, 12" >"$tmp/mi.json"
two_daemons 262144

COMMON=(--loss sparse_categorical_crossentropy --optimizer sgd --lr 0.05 --batch-size 32
        --epochs 2 --seed 7 --no-progress)
expect_rc 0 "the small daemon's limits" -- "$rtrain" info --server "$small"
has "$tmp/out" "upload 262144 B" "rtrain info shows its upload limit, 256 KiB"
# same_fit NAME FIT-ARGS...: evaluated in chunks by the small daemon as
# by the plain one in one upload; chunked there, and bit-identical to one
# upload on the plain one
same_fit() {
  local name=$1; shift
  expect_rc 0 "$name: one upload" -- "$rtrain" fit "$@" "${COMMON[@]}" --no-shuffle \
    --server "$addr" --save-weights "$tmp/one.bin"
  local E=(eval "$@" --loss sparse_categorical_crossentropy --batch-size 32 --weights "$tmp/one.bin")
  expect_rc 0 "$name: eval as one upload" -- "$rtrain" "${E[@]}" --server "$addr"
  cp "$tmp/out" "$tmp/eval_one"
  expect_rc 0 "$name: eval in chunks" -- "$rtrain" "${E[@]}" --server "$small"
  has "$tmp/err" "evaluated in chunks" "$name: eval says it goes in chunks"
  cmp -s "$tmp/out" "$tmp/eval_one" && ok "$name: eval agrees: $(cat "$tmp/out")" ||
    bad "$name: eval $(cat "$tmp/out") vs $(cat "$tmp/eval_one")"
  expect_rc 0 "$name: in chunks" -- "$rtrain" fit "$@" "${COMMON[@]}" --no-shuffle \
    --server "$small" --save-weights "$tmp/chunked.bin"
  has "$tmp/err" "sent in chunks of whole batches" "$name: the fit says it sends chunks"
  has "$tmp/err" "steps/epoch, a Fit stream per chunk" "$name: and trains each by a Fit stream"
  cmp -s "$tmp/chunked.bin" "$tmp/one.bin" && ok "$name: weights bit-identical" ||
    bad "$name: the weights differ"
}
same_fit CSV --model "$tmp/m.json" --data "$tmp/d.csv"
same_fit IDX --model "$tmp/mi.json" --data "$tmp/im-images-idx3-ubyte" \
  --labels "$tmp/im-labels-idx1-ubyte"
same_fit TFRecord --model "$tmp/m.json" --data "$tmp/num-*-of-00003.tfrecord" \
  --features 'x:float[16],label:int64'
same_fit images --model "$src/tests/data/cnn16.json" --image-size 16x16 --data "$tmp/imgs/train"

# --val over the limit: the History of both fits, epoch by epoch
V=(fit --model "$tmp/m.json" --data "$tmp/d.csv" --val "$tmp/v.csv" "${COMMON[@]}" --no-shuffle)
expect_rc 0 "CSV and --val in chunks" -- "$rtrain" "${V[@]}" --server "$small" \
  --csv-log "$tmp/chunked.csv" --save-weights "$tmp/chunked.bin"
has "$tmp/err" "--val is .* evaluated in chunks" "the fit says it evaluates --val in chunks"
expect_rc 0 "CSV and --val in one upload each" -- "$rtrain" "${V[@]}" --server "$addr" \
  --csv-log "$tmp/one.csv" --save-weights "$tmp/one.bin"
cmp -s "$tmp/chunked.bin" "$tmp/one.bin" && ok "with --val: weights bit-identical" ||
  bad "with --val: the weights differ"
head -1 "$tmp/one.csv" | grep -q "val_loss" && [ "$(wc -l <"$tmp/one.csv")" -eq 3 ] &&
  ok "the one-upload log: $(head -1 "$tmp/one.csv")" || bad "no val columns or epochs in $tmp/one.csv"
if paste -d, "$tmp/chunked.csv" "$tmp/one.csv" | awk -F, '
     NR == 1 { k = NF / 2; for (i = 1; i <= k; i++) if ($i != $(i + k)) exit 1; next }
     { for (i = 1; i <= k; i++) { a = $i; b = $(i + k); d = a - b; if (d < 0) d = -d
         m = b < 0 ? -b : b; if (d > 1e-6 * m + 1e-12) { print "column " i ": " a " vs " b; exit 1 } }
       n++ }
     END { exit n != 2 }'; then
  ok "every epoch's metrics, val included, agree within 1e-6"
else
  bad "the epoch metrics differ:"; paste "$tmp/chunked.csv" "$tmp/one.csv"
fi

# shuffled: reproducible by seed, and not the unshuffled order
S=(fit --model "$tmp/m.json" --data "$tmp/d.csv" "${COMMON[@]}" --server "$small")
expect_rc 0 "shuffled in chunks" -- "$rtrain" "${S[@]}" --save-weights "$tmp/s1.bin"
has "$tmp/err" "shuffled over all rows each epoch" "the fit says it shuffles over all rows"
expect_rc 0 "shuffled again, same seed" -- "$rtrain" "${S[@]}" --save-weights "$tmp/s2.bin"
expect_rc 0 "shuffled, another seed" -- "$rtrain" "${S[@]}" --seed 8 --save-weights "$tmp/s3.bin"
cmp -s "$tmp/s1.bin" "$tmp/s2.bin" && ok "same seed: same weights" || bad "same seed: the weights differ"
cmp -s "$tmp/s1.bin" "$tmp/s3.bin" && bad "another seed: the same weights" || ok "another seed: other weights"
cmp -s "$tmp/s1.bin" "$tmp/chunked.bin" && bad "shuffled = unshuffled" || ok "shuffled differs from row order"
echo "$((checks - fails))/$checks checks passed"
[ "$fails" -eq 0 ]
