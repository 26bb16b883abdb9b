#!/usr/bin/env bash
# chunked_more_e2e.sh - what else streams from the CLI in chunks when the
# data is larger than one upload (a daemon with --max-upload-bytes 256 KiB,
# through cli_rows.c): gzip'ed CSV, IDX and TFRecord; --sample-weights and
# --label-columns; eval and predict; --augment. Each is compared with the
# same run on a plain daemon, as one upload:
#   - unshuffled fits train on the same batches in the same order from the
#     same initial weights (same seed): the weights files must be
#     identical, byte for byte (a row left out, sent twice, out of order,
#     decoded differently or with another row's weight or label changes
#     them); a gzip'ed file must also end where its uncompressed copy does;
#   - shuffled, the chunks are a permutation of all rows drawn here: a
#     weight or a label that did not travel with its row shows when the
#     rows given weight 0 get other labels: with the weights aligned
#     nothing changes, bit for bit, and with weight 1 everywhere it does;
#   - eval prints the one-upload figures (metrics combined by rows); predict
#     writes the one-upload outputs in row order (within 1e-6);
#   - --augment draws per (seed, epoch, row id), a chunk's rows and epoch
#     being the whole set's (FitRequest.rows_before, whole_steps_per_epoch):
#     an augmented fit in chunks ends on the one-upload fit's weights, byte
#     for byte, the same seed repeats it, and the draws are made (the
#     weights differ from the run without augmentation).
set -uo pipefail
rtraind=$1 rtrain=$2 src=$3
. "$src/tests/lib/e2e.sh"
. "$src/tests/cli/chunked_lib.sh"
/usr/bin/python3 - "$tmp" "$src/tests/data" <<'PY' || exit 1
import gzip, shutil, struct, sys
sys.path.insert(0, sys.argv[2])
import numpy as np
from gen_tfrecord import example, write
out = sys.argv[1]
rng = np.random.RandomState(5)
n = 5000  # every set over 256 KiB as it is sent (f32 arrays: 64 B a row and up)
x = rng.randn(n, 16).astype(np.float32)
y = np.argmax(x @ rng.randn(16, 4), axis=1)
r = (x @ rng.randn(16, 3)).astype(np.float32)  # 3 regression targets
zero = rng.rand(n) < 0.3  # rows given weight 0
y2 = np.where(zero, (y + 1) % 4, y)  # ... and other labels there
r2 = np.where(zero[:, None], -r, r)
def csv(name, lab):
    with open("%s/%s" % (out, name), "w") as f:
        for i in range(n):
            f.write(",".join("%.6f" % v for v in x[i]) + "," +
                    ",".join("%.6f" % v if isinstance(v, np.floating) else "%d" % v
                             for v in np.atleast_1d(lab[i])) + "\n")
csv("d.csv", y)     # 750 KB, 16 features and a class
csv("d2.csv", y2)   # other classes where the weight is 0
csv("r.csv", r)     # 16 features, 3 targets: --label-columns 16:18
csv("r2.csv", r2)
np.save(out + "/w.npy", rng.uniform(0.2, 3.0, n).astype(np.float32))
np.save(out + "/w0.npy", np.where(zero, 0.0, rng.uniform(0.5, 2.0, n)).astype(np.float32))
np.save(out + "/w1.npy", np.ones(n, np.float32))
xb = rng.randn(n, 32).astype(np.float32)  # 640 KB
np.save(out + "/xb.npy", xb)
np.save(out + "/yb.npy", np.argmax(xb @ rng.randn(32, 4), axis=1).astype(np.int64))
im = (rng.rand(n, 12, 12) * 255).astype(np.uint8)  # 720 KB, incompressible
with open(out + "/im-images-idx3-ubyte", "wb") as f:
    f.write(struct.pack(">BBBBIII", 0, 0, 8, 3, n, 12, 12) + im.tobytes())
with open(out + "/im-labels-idx1-ubyte", "wb") as f:
    f.write(struct.pack(">BBBBI", 0, 0, 8, 1, n) + (im[:, 0, 0] % 4).astype(np.uint8).tobytes())
yb = np.load(out + "/yb.npy")
recs = [example({"x": ("float", [float(v) for v in xb[i]]), "label": ("int64", [int(yb[i])])})
        for i in range(n)]  # 32 random floats a record: over 256 KiB compressed
for s in range(3):
    write("%s/num-%05d-of-00003.tfrecord" % (out, s), recs[s * n // 3:(s + 1) * n // 3])
for name in ["d.csv", "im-images-idx3-ubyte", "im-labels-idx1-ubyte"] + \
        ["num-%05d-of-00003.tfrecord" % s for s in range(3)]:
    with open("%s/%s" % (out, name), "rb") as f, gzip.open("%s/%s.gz" % (out, name), "wb") as g:
        shutil.copyfileobj(f, g)
PY
/usr/bin/python3 "$src/tests/data/gen_images.py" "$tmp/imgs" 150 5 32 >/dev/null || exit 1
gz_size() { local b=0; for f in "$@"; do b=$((b + $(stat -c %s "$f"))); done; echo "$b"; }
dense 16 4 softmax >"$tmp/m.json"
dense 16 3 linear >"$tmp/mr.json"
dense 32 4 softmax >"$tmp/mb.json"
dense 0 4 softmax "12, 12" >"$tmp/mi.json"
two_daemons 262144

# the premise: each compressed set is over the limit as it is sent (a
# compressed CSV is sent inflated: the daemon reads no compressed CSV)
for set in "d.csv" "im-images-idx3-ubyte.gz im-labels-idx1-ubyte.gz" \
  "num-00000-of-00003.tfrecord.gz num-00001-of-00003.tfrecord.gz num-00002-of-00003.tfrecord.gz"; do
  # shellcheck disable=SC2086 # the names split
  b=$(cd "$tmp" && gz_size $set)
  [ "$b" -gt 262144 ] && ok "${set%% *}: $b bytes sent, over 262144" ||
    bad "${set%% *}: only $b bytes sent"
done

SCE=(--loss sparse_categorical_crossentropy)
COMMON=(--optimizer sgd --lr 0.05 --batch-size 32 --epochs 2 --seed 7 --no-progress)
# same_fit NAME: ARGS in chunks on the small daemon, REF as one upload on
# the plain one; unshuffled, the weights must be identical
same_fit() {
  local name=$1
  expect_rc 0 "$name: one upload" -- "$rtrain" fit "${REF[@]}" "${COMMON[@]}" --no-shuffle \
    --server "$addr" --save-weights "$tmp/one.bin"
  grep -q "sent in chunks" "$tmp/err" && bad "$name: the plain daemon's fit was chunked" || true
  expect_rc 0 "$name: in chunks" -- "$rtrain" fit "${ARGS[@]}" "${COMMON[@]}" --no-shuffle \
    --server "$small" --save-weights "$tmp/chunked.bin"
  has "$tmp/err" "sent in chunks of whole batches" "$name: the fit says it sends chunks"
  cmp -s "$tmp/chunked.bin" "$tmp/one.bin" && ok "$name: weights bit-identical" ||
    bad "$name: the weights differ"
}

# --- gzip'ed inputs, against their uncompressed copies as one upload
ARGS=(--model "$tmp/m.json" --data "$tmp/d.csv.gz" "${SCE[@]}")
REF=(--model "$tmp/m.json" --data "$tmp/d.csv" "${SCE[@]}")
same_fit "CSV.gz"
REF=(--model "$tmp/m.json" --data "$tmp/d.csv.gz" "${SCE[@]}") # read and inflated here, whole
same_fit "CSV.gz, the one upload inflated here"
ARGS=(--model "$tmp/mi.json" --data "$tmp/im-images-idx3-ubyte.gz"
      --labels "$tmp/im-labels-idx1-ubyte.gz" "${SCE[@]}")
REF=(--model "$tmp/mi.json" --data "$tmp/im-images-idx3-ubyte" --labels "$tmp/im-labels-idx1-ubyte"
     "${SCE[@]}")
same_fit "IDX.gz"
REF=("${ARGS[@]}") # inflated by the daemon
same_fit "IDX.gz, the one upload inflated by the daemon"
TF=(--features 'x:float[32],label:int64' "${SCE[@]}")
ARGS=(--model "$tmp/mb.json" --data "$tmp/num-*-of-00003.tfrecord.gz" "${TF[@]}")
REF=(--model "$tmp/mb.json" --data "$tmp/num-*-of-00003.tfrecord" "${TF[@]}")
same_fit "TFRecord.gz"
REF=("${ARGS[@]}")
same_fit "TFRecord.gz, the one upload inflated by the daemon"

# --- sample weights and label columns
ARGS=(--model "$tmp/m.json" --data "$tmp/d.csv" --sample-weights "$tmp/w.npy" "${SCE[@]}")
REF=("${ARGS[@]}")
same_fit "CSV with --sample-weights"
ARGS=(--model "$tmp/mb.json" --data "$tmp/xb.npy" --labels "$tmp/yb.npy"
      --sample-weights "$tmp/w.npy" "${SCE[@]}")
REF=("${ARGS[@]}")
same_fit ".npy with --sample-weights"
ARGS=(--model "$tmp/mr.json" --data "$tmp/r.csv" --label-columns 16:18 --loss mse)
REF=("${ARGS[@]}")
same_fit "CSV with --label-columns"
ARGS=(--model "$tmp/mr.json" --data "$tmp/r.csv" --label-columns 16:18 --loss mse
      --sample-weights "$tmp/w.npy")
REF=("${ARGS[@]}")
same_fit "CSV with --label-columns and --sample-weights"

# shuffled in chunks: rows with weight 0 and other labels change nothing
aligned() { # aligned NAME DATA DATA2 ARGS...: DATA2 = DATA with other labels where w0 is 0
  local name=$1 d=$2 d2=$3; shift 3
  local S=(fit "$@" "${COMMON[@]}" --epochs 3 --server "$small")
  expect_rc 0 "$name: shuffled in chunks, weight 0 rows" -- "$rtrain" "${S[@]}" --data "$d" \
    --sample-weights "$tmp/w0.npy" --save-weights "$tmp/a.bin"
  has "$tmp/err" "shuffled over all rows each epoch" "$name: the fit shuffles over all rows"
  expect_rc 0 "$name: the same with other labels there" -- "$rtrain" "${S[@]}" --data "$d2" \
    --sample-weights "$tmp/w0.npy" --save-weights "$tmp/b.bin"
  cmp -s "$tmp/a.bin" "$tmp/b.bin" && ok "$name: weights and labels travel with their rows" ||
    bad "$name: a weight-0 row's label changed the weights (weights not aligned)"
  expect_rc 0 "$name: control, weight 1" -- "$rtrain" "${S[@]}" --data "$d" \
    --sample-weights "$tmp/w1.npy" --save-weights "$tmp/a.bin"
  expect_rc 0 "$name: control, weight 1, other labels" -- "$rtrain" "${S[@]}" --data "$d2" \
    --sample-weights "$tmp/w1.npy" --save-weights "$tmp/b.bin"
  cmp -s "$tmp/a.bin" "$tmp/b.bin" && bad "$name: the control: other labels changed nothing" ||
    ok "$name: the control: with weight 1 the other labels change the weights"
}
aligned "CSV" "$tmp/d.csv" "$tmp/d2.csv" --model "$tmp/m.json" "${SCE[@]}"
aligned "--label-columns" "$tmp/r.csv" "$tmp/r2.csv" --model "$tmp/mr.json" \
  --label-columns 16:18 --loss mse

# --- eval and predict over the limit
expect_rc 0 "weights to evaluate" -- "$rtrain" fit --model "$tmp/m.json" --data "$tmp/d.csv" \
  "${SCE[@]}" "${COMMON[@]}" --server "$addr" --save-weights "$tmp/m.bin"
expect_rc 0 "regression weights" -- "$rtrain" fit --model "$tmp/mr.json" --data "$tmp/r.csv" \
  --label-columns 16:18 --loss mse "${COMMON[@]}" --server "$addr" --save-weights "$tmp/mr.bin"
# same_eval NAME ARGS...: eval's line and predict's outputs, one upload and in chunks
same_eval() {
  local name=$1; shift
  expect_rc 0 "$name: eval, one upload" -- "$rtrain" eval "$@" --server "$addr"
  cp "$tmp/out" "$tmp/eval_one"
  expect_rc 0 "$name: eval in chunks" -- "$rtrain" eval "$@" --server "$small"
  has "$tmp/err" "evaluated in chunks, the metrics combined by rows" "$name: eval goes in chunks"
  cmp -s "$tmp/out" "$tmp/eval_one" && ok "$name: eval agrees: $(cat "$tmp/out")" ||
    bad "$name: eval $(cat "$tmp/out") vs $(cat "$tmp/eval_one")"
  expect_rc 0 "$name: predict, one upload" -- "$rtrain" predict "$@" --out "$tmp/p1.npy" \
    --server "$addr"
  expect_rc 0 "$name: predict in chunks" -- "$rtrain" predict "$@" --out "$tmp/p2.npy" \
    --server "$small"
  has "$tmp/err" "predicted in chunks, the outputs in row order" "$name: predict goes in chunks"
  if /usr/bin/python3 -c '
import sys, numpy as np
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
assert a.shape == b.shape and a.shape[0] == 5000, (a.shape, b.shape)
assert np.allclose(a, b, rtol=1e-6, atol=1e-7), np.abs(a - b).max()
assert not np.allclose(a[:-1], a[1:])  # rows differ: their order shows' "$tmp/p1.npy" "$tmp/p2.npy"
  then ok "$name: the same outputs, row by row"; else bad "$name: the outputs differ"; fi
}
same_eval "CSV" --model "$tmp/m.json" --data "$tmp/d.csv" --weights "$tmp/m.bin" "${SCE[@]}"
same_eval "CSV.gz" --model "$tmp/m.json" --data "$tmp/d.csv.gz" --weights "$tmp/m.bin" "${SCE[@]}"
expect_rc 0 "weights to evaluate on TFRecord" -- "$rtrain" fit --model "$tmp/mb.json" \
  --data "$tmp/xb.npy" --labels "$tmp/yb.npy" "${SCE[@]}" "${COMMON[@]}" --server "$addr" \
  --save-weights "$tmp/mb.bin"
same_eval "TFRecord.gz" --model "$tmp/mb.json" --data "$tmp/num-*-of-00003.tfrecord.gz" \
  --weights "$tmp/mb.bin" "${TF[@]}"
same_eval "--label-columns" --model "$tmp/mr.json" --data "$tmp/r.csv" --label-columns 16:18 \
  --loss mse --metrics mae --weights "$tmp/mr.bin"
# features only: every column of the CSV is an input
cut -d, -f1-16 "$tmp/d.csv" >"$tmp/f.csv" # 320 KB as f32 arrays
expect_rc 0 "features-only CSV: predict, one upload" -- "$rtrain" predict --model "$tmp/m.json" \
  --data "$tmp/f.csv" --weights "$tmp/m.bin" --out "$tmp/p1.npy" --server "$addr"
expect_rc 0 "features-only CSV: predict in chunks" -- "$rtrain" predict --model "$tmp/m.json" \
  --data "$tmp/f.csv" --weights "$tmp/m.bin" --out "$tmp/p2.npy" --server "$small"
has "$tmp/err" "predicted in chunks" "features-only CSV: predict goes in chunks"
/usr/bin/python3 -c 'import sys, numpy as np; a, b = np.load(sys.argv[1]), np.load(sys.argv[2]);
assert a.shape == (5000, 4) and np.allclose(a, b, rtol=1e-6, atol=1e-7)' "$tmp/p1.npy" "$tmp/p2.npy" &&
  ok "features-only CSV: the same outputs" || bad "features-only CSV: the outputs differ"

# --- augmentation in chunks: the one upload's draws, reproducible by seed
AUG=(fit --model "$src/tests/data/cnn16.json" --image-size 16x16 --data "$tmp/imgs/train" "${SCE[@]}"
     "${COMMON[@]}")
AUGS=flip,crop=2,brightness=0.2,contrast=0.3
# unshuffled: the one upload's batches (shuffled chunks are permuted here)
expect_rc 0 "augmented, one upload" -- "$rtrain" "${AUG[@]}" --augment "$AUGS" --server "$addr" \
  --no-shuffle --save-weights "$tmp/g0.bin"
expect_rc 0 "augmented in chunks, unshuffled" -- "$rtrain" "${AUG[@]}" --augment "$AUGS" \
  --server "$small" --no-shuffle --save-weights "$tmp/g4.bin"
expect_rc 0 "augmented in chunks" -- "$rtrain" "${AUG[@]}" --augment "$AUGS" --server "$small" \
  --save-weights "$tmp/g1.bin"
has "$tmp/err" "sent in chunks of whole batches" "the image folder goes in chunks"
expect_rc 0 "augmented in chunks, again" -- "$rtrain" "${AUG[@]}" --augment "$AUGS" \
  --server "$small" --save-weights "$tmp/g2.bin"
expect_rc 0 "not augmented, in chunks" -- "$rtrain" "${AUG[@]}" --server "$small" \
  --save-weights "$tmp/g3.bin"
cmp -s "$tmp/g0.bin" "$tmp/g4.bin" && ok "augmented: chunks draw the one upload's images" ||
  bad "augmented: the chunked fit's weights differ from the one upload's"
cmp -s "$tmp/g1.bin" "$tmp/g2.bin" && ok "augmented: the same seed, the same weights" ||
  bad "augmented: the same seed gave other weights"
cmp -s "$tmp/g1.bin" "$tmp/g3.bin" && bad "augmented = not augmented: no draws were made" ||
  ok "augmented: the draws change the weights"
echo "$((checks - fails))/$checks checks passed"
[ "$fails" -eq 0 ]
