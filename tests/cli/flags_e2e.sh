#!/usr/bin/env bash
# flags_e2e.sh - `rtrain` and `rtraind` flags checked by what they change,
# against real daemons on loopback:
#   --steps-per-epoch   the epoch's steps (printed and counted)
#   --val-labels        the validation labels of .npy --val: val_accuracy is
#                       what eval of the saved weights on them gives
#   --no-normalize      IDX pixels 0..255: a bias-free linear model predicts
#                       255 times what it predicts on pixel / 255
#   --sync-batchnorm    one daemon is one replica: the same weights as without
#   --channels 1        gray images: a (6, 6, 1) model trains, RGB is refused
#   --resize            auto is area when both sides shrink (same weights),
#                       bilinear samples other pixels (other weights)
#   --stream-above      rtraind streams a dataset over it, not one under it
#   --reattach-s 0      a fit whose daemon dies (killed where the test chose:
#                       --pause-at-step) ends with exit 3 instead of waiting
#                       for the daemon to come back
#   usage: flags_e2e.sh RTRAIND RTRAIN SOURCE_DIR
set -uo pipefail
rtraind=$1 rtrain=$2 src=$3
py=/usr/bin/python3
data=$src/tests/cli/data
iris=$src/examples/iris
. "$src/tests/lib/e2e.sh"
start_daemon "$tmp/daemon.log" --log-level warn || exit 1
S=(--server "$addr")
SCE=(--loss sparse_categorical_crossentropy --no-progress)

# --- the data: iris as .npy (80 train, 25 val), a 60-image IDX pair, images
$py - "$iris/train_shuffled.csv" "$tmp" <<'PY' || { echo "writing the data failed"; exit 1; }
import struct, sys
import numpy as np
d = np.loadtxt(sys.argv[1], delimiter=",")
x, y, out = d[:, :4].astype(np.float32), d[:, 4].astype(np.int32), sys.argv[2]
for name, a in (("x", x[:80]), ("y", y[:80]), ("xv", x[80:]), ("yv", y[80:])):
    np.save("%s/%s.npy" % (out, name), a)
img = np.random.RandomState(0).randint(0, 256, size=(60, 4, 4)).astype(np.uint8)
with open(out + "/img-idx3-ubyte", "wb") as f:
    f.write(struct.pack(">IIII", 0x803, 60, 4, 4) + img.tobytes())
with open(out + "/lab-idx1-ubyte", "wb") as f:
    f.write(struct.pack(">II", 0x801, 60) + (img.reshape(60, -1).mean(1) > 127).astype(np.uint8).tobytes())
PY
$py "$src/tests/data/gen_images.py" "$tmp/imgs" 20 5 >/dev/null || { echo "gen_images.py failed"; exit 1; }

# --- --steps-per-epoch
expect_rc 0 "fit --steps-per-epoch 2" -- "$rtrain" fit "${S[@]}" --model "$iris/model.json" \
  --data "$iris/train_shuffled.csv" "${SCE[@]}" --epochs 3 --batch-size 10 --steps-per-epoch 2
has "$tmp/err" "105 samples, 2 steps/epoch" "2 steps per epoch, not ceil(105 / 10)"
has "$tmp/out" " - steps 6 - epochs 3 " "3 epochs of 2 steps"

# --- --val-labels
expect_rc 0 "fit --val x.npy --val-labels y.npy" -- "$rtrain" fit "${S[@]}" \
  --model "$iris/model.json" --data "$tmp/x.npy" --labels "$tmp/y.npy" --val "$tmp/xv.npy" \
  --val-labels "$tmp/yv.npy" "${SCE[@]}" --epochs 20 --lr 0.02 --seed 1 --save-weights "$tmp/v.bin"
has "$tmp/err" "val: 25 samples" "25 validation samples"
vacc=$(sed -n 's/^final:.* val_accuracy \([0-9.]*\).*/\1/p' "$tmp/out")
expect_rc 0 "eval on the validation set" -- "$rtrain" eval "${S[@]}" --model "$iris/model.json" \
  --weights "$tmp/v.bin" --data "$tmp/xv.npy" --labels "$tmp/yv.npy" \
  --loss sparse_categorical_crossentropy
eacc=$(sed -n 's/.*accuracy: \([0-9.]*\).*/\1/p' "$tmp/out")
[ -n "$vacc" ] && [ "$vacc" = "$eacc" ] && ok "val_accuracy $vacc = eval's $eacc" \
  || bad "val_accuracy '$vacc', eval '$eacc'"
expect_rc 2 "--val x.npy without --val-labels" -- "$rtrain" fit "${S[@]}" \
  --model "$iris/model.json" --data "$tmp/x.npy" --labels "$tmp/y.npy" --val "$tmp/xv.npy" "${SCE[@]}"
has "$tmp/err" "needs --val-labels" "the error names --val-labels"

# --- --no-normalize
expect_rc 0 "fit on IDX" -- "$rtrain" fit "${S[@]}" --model "$data/linear16.json" \
  --data "$tmp/img-idx3-ubyte" --labels "$tmp/lab-idx1-ubyte" --loss mse --epochs 1 \
  --save-weights "$tmp/lin.bin" --no-progress
P=(predict "${S[@]}" --model "$data/linear16.json" --weights "$tmp/lin.bin" --loss mse
   --data "$tmp/img-idx3-ubyte")
expect_rc 0 "predict on pixel / 255" -- "$rtrain" "${P[@]}" --out "$tmp/p1.csv"
expect_rc 0 "predict --no-normalize" -- "$rtrain" "${P[@]}" --out "$tmp/p255.csv" --no-normalize
if $py - "$tmp/p1.csv" "$tmp/p255.csv" <<'PY'
import sys
import numpy as np
a, b = (np.loadtxt(p, delimiter=",") for p in sys.argv[1:3])
assert a.shape == b.shape == (60,) and np.abs(a).max() > 0
assert np.allclose(b, 255 * a, rtol=1e-4, atol=1e-4), np.abs(b - 255 * a).max()
PY
then ok "--no-normalize: 255 x the predictions"; else bad "--no-normalize predictions"; fi

# --- --sync-batchnorm on one replica
BN=(fit "${S[@]}" --model "$data/bn4.json" --data "$iris/train_shuffled.csv" "${SCE[@]}"
    --epochs 3 --batch-size 16 --seed 5)
expect_rc 0 "BatchNorm model" -- "$rtrain" "${BN[@]}" --save-weights "$tmp/bn.bin"
expect_rc 0 "the same with --sync-batchnorm" -- "$rtrain" "${BN[@]}" --sync-batchnorm \
  --save-weights "$tmp/bn-sync.bin"
cmp -s "$tmp/bn.bin" "$tmp/bn-sync.bin" && ok "one replica: --sync-batchnorm gives the same weights" \
  || bad "--sync-batchnorm changed training on one replica"

# --- --channels, --resize (16x16 images to 6x6: both sides shrink)
IM=(fit "${S[@]}" --model "$data/gray6.json" --data "$tmp/imgs/train" --image-size 6x6
    "${SCE[@]}" --epochs 2 --seed 1)
expect_rc 0 "gray images, --resize area" -- "$rtrain" "${IM[@]}" --channels 1 --resize area \
  --save-weights "$tmp/area.bin"
expect_rc 0 "gray images, --resize auto" -- "$rtrain" "${IM[@]}" --channels 1 --resize auto \
  --save-weights "$tmp/auto.bin"
expect_rc 0 "gray images, --resize bilinear" -- "$rtrain" "${IM[@]}" --channels 1 \
  --resize bilinear --save-weights "$tmp/bilinear.bin"
cmp -s "$tmp/area.bin" "$tmp/auto.bin" && ok "--resize auto shrinks by area" \
  || bad "--resize auto and area differ"
cmp -s "$tmp/area.bin" "$tmp/bilinear.bin" && bad "--resize bilinear gives area's weights" \
  || ok "--resize bilinear: other pixels, other weights"
expect_rc 4 "RGB images for a gray model" -- "$rtrain" "${IM[@]}" --channels 3
has "$tmp/err" "(6, 6, 3) but program" "the error names the (6, 6, 3) samples"

# --- --stream-above: over it streamed, under it not
for above in 1K 1M; do
  kill "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null
  mkdir -p "$tmp/spool-$above"
  start_daemon "$tmp/daemon-$above.log" --log-level warn --stream-above "$above" \
    --spool-dir "$tmp/spool-$above" || exit 1
  expect_rc 0 "fit iris (2.5 KB decoded), --stream-above $above" -- "$rtrain" fit \
    --server "$addr" --model "$iris/model.json" --data "$iris/train_shuffled.csv" "${SCE[@]}"
  if [ "$above" = 1K ]; then
    has "$tmp/err" "105 samples, streamed from the daemon's disk" "over 1K: streamed"
  else
    grep -q "streamed" "$tmp/err" && bad "under 1M, yet streamed" || ok "under 1M: in memory"
  fi
done

# --- --reattach-s 0: the daemon stops itself at step 7 of 30 (SIGSTOP),
# then is killed; the fit must end (exit 3), not wait for it
kill "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null
start_daemon "$tmp/daemon-pause.log" --log-level warn --state-dir "$tmp/state" \
  --pause-at-step 7 || exit 1
"$rtrain" fit --server "$addr" --model "$iris/model.json" --data "$iris/train_shuffled.csv" \
  "${SCE[@]}" --epochs 6 --batch-size 21 --steps-per-call 1 --in-flight 1 --reattach-s 0 \
  >"$tmp/re.out" 2>"$tmp/re.err" &
cpid=$!
paused() { local st; { read -r _ _ st _ <"/proc/$1/stat"; } 2>/dev/null && [ "$st" = T ]; }
until paused "$dpid"; do
  kill -0 "$dpid" 2>/dev/null && kill -0 "$cpid" 2>/dev/null || break
  nap 0.01
done
[ "$(awk '{print $3}' "/proc/$dpid/stat" 2>/dev/null)" = T ] && ok "the daemon paused at step 7" \
  || bad "the daemon did not pause"
kill -KILL "$dpid" 2>/dev/null; wait "$dpid" 2>/dev/null; dpid=""
for ((n = 0; n < 6000; n++)); do kill -0 "$cpid" 2>/dev/null || break; nap 0.01; done
if kill -0 "$cpid" 2>/dev/null; then
  bad "--reattach-s 0: the fit still waits a minute after its daemon died"; kill "$cpid"
fi
wait "$cpid"; rc=$?
[ "$rc" -eq 3 ] && ok "--reattach-s 0: the fit ends with exit 3 when its daemon dies" \
  || { bad "--reattach-s 0: exit $rc"; tail -3 "$tmp/re.err"; }
grep -q "^daemon restarted\|reattach" "$tmp/re.err" && bad "--reattach-s 0 tried to reattach" \
  || ok "no reattach tried"

echo "$((checks - fails))/$checks checks passed"
[ "$fails" -eq 0 ]
