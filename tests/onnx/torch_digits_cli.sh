#!/usr/bin/env bash
# torch_digits_cli.sh - a PyTorch user's model and data through the CLI, as
# they are: a residual CNN (Conv2d, BatchNorm2d, a skip, F.log_softmax)
# exported with torch.onnx.export in training mode, sklearn's digits as
# NCHW float32 images and int64 labels in .npy files (gen_torch_digits.py
# makes them, and PyTorch's own training loop's results, into $tmp).
#   - `fit --loss nll_loss` matches PyTorch step for step over the first 3
#     steps (batches in order): the mean loss to 1e-5, the held-out loss
#     (BatchNorm in eval mode, on the moved statistics) to 1e-4; so do
#     cross_entropy with --label-smoothing, --ignore-index, --class-weight
#     and --reduction sum, huber_loss with --loss-beta on one-hot float
#     targets, and bce_with_logits with --pos-weight (--loss-check off);
#   - 5 shuffled epochs reach the held-out accuracy PyTorch's own loop
#     reaches in 5 epochs, within the spread of PyTorch's runs over seeds
#     (at least 2 points);
#   - `--loss sparse_categorical_crossentropy` on the LogSoftmax output is
#     refused naming the output node and nll_loss, and --loss-check off
#     trains it anyway;
#   - 3-channel NHWC data for an NCHW model is refused with the layout
#     named, and trains with --data-layout NHWC.
#   torch_digits_cli.sh RTRAIND RTRAIN SRC
rtraind=$1 rtrain=$2 src=$3
. "$src/tests/lib/e2e.sh"
py=/usr/bin/python3
EPOCHS=5 BATCH=32 LR=0.05 SEEDS=1,2,3 STEPS=3
g=$tmp/g
if ! $py "$src/tests/onnx/gen_torch_digits.py" "$g" $EPOCHS $BATCH $LR $SEEDS $STEPS \
    >"$tmp/gen.out" 2>&1; then
  echo "FAIL gen_torch_digits.py"; tail -20 "$tmp/gen.out"; exit 1
fi
start_daemon "$tmp/daemon.log" --log-level warn || exit 1
FIT=(fit --server "$addr" --model "$g/res.onnx" --data "$g/x.npy" --labels "$g/y.npy"
     --val "$g/xv.npy" --val-labels "$g/yv.npy" --optimizer sgd --lr "$LR"
     --batch-size "$BATCH" --no-progress)
# csv-log columns: epoch,accuracy,loss,val_accuracy,val_loss (last row)
col() { tail -n 1 "$1" | cut -d, -f"$2"; }
within() { # within A B RTOL: |A - B| <= RTOL |B|
  awk -v a="$1" -v b="$2" -v r="$3" \
    'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; exit !(a != "" && d <= r * m) }'
}

# --- step for step
# exact NAME "FIT ARGS": the first $STEPS steps in order against PyTorch's
exact() {
  local name=$1; shift
  expect_rc 0 "fit $name, $STEPS steps in order" -- "$rtrain" "${FIT[@]}" "$@" --epochs 1 \
    --steps-per-epoch $STEPS --no-shuffle --csv-log "$tmp/$name.csv"
  read -r _ _ pl pvl pva < <(grep "^exact $name " "$g/ref.txt")
  local l vl va
  l=$(col "$tmp/$name.csv" 3) vl=$(col "$tmp/$name.csv" 5) va=$(col "$tmp/$name.csv" 4)
  within "$l" "$pl" 1e-5 && ok "$name: loss $l = PyTorch's $pl (1e-5)" \
    || bad "$name: loss $l, PyTorch $pl"
  within "$vl" "$pvl" 1e-4 && ok "$name: held-out loss $vl = PyTorch's $pvl (1e-4)" \
    || bad "$name: held-out loss $vl, PyTorch $pvl"
  # (bce_with_logits' accuracy counts elements, PyTorch's reference argmaxes)
  [ "$name" = bcel ] && return
  awk -v a="$va" -v b="$pva" 'BEGIN { d = a - b; exit !(a != "" && d * d <= (1.5 / 360) ^ 2) }' \
    && ok "$name: held-out accuracy $va = PyTorch's $pva (one sample)" \
    || bad "$name: held-out accuracy $va, PyTorch $pva"
}
exact nll --loss nll_loss
# a sum's rate is the mean's over the batch (later flags win)
exact ce --loss cross_entropy --label-smoothing 0.1 --ignore-index 3 --reduction sum \
  --class-weight 1,0.5,2,1,1,1.5,1,0.8,1.2,1 \
  --lr "$(awk -v l=$LR -v b=$BATCH 'BEGIN { printf "%.9g", l / b }')"
HOT=(--labels "$g/y1h.npy" --val-labels "$g/yv1h.npy")
exact huber --loss huber_loss --loss-beta 0.5 "${HOT[@]}"
exact bcel --loss bce_with_logits --pos-weight 2 --loss-check off "${HOT[@]}"

# --- accuracy after the same epochs, shuffled
expect_rc 0 "fit --loss nll_loss, $EPOCHS epochs" -- "$rtrain" "${FIT[@]}" --loss nll_loss \
  --epochs $EPOCHS --seed 1 --csv-log "$tmp/fit.csv"
acc=$(col "$tmp/fit.csv" 4)
read -r lo hi mean < <(awk '/^seed / { a[n++] = $3 } END {
  lo = hi = a[0]; s = 0; for (i = 0; i < n; i++) { s += a[i]; if (a[i] < lo) lo = a[i]; if (a[i] > hi) hi = a[i] }
  print lo, hi, s / n }' "$g/ref.txt")
echo "     rtrain held-out accuracy $acc; PyTorch's over seeds $SEEDS: $lo..$hi (mean $mean)"
awk -v a="$acc" -v lo="$lo" -v hi="$hi" -v m="$mean" 'BEGIN {
  tol = hi - lo; if (tol < 0.02) tol = 0.02; d = a - m; if (d < 0) d = -d
  exit !(a != "" && d <= tol) }' \
  && ok "accuracy $acc within the noise of PyTorch's ($lo..$hi)" \
  || bad "accuracy $acc outside PyTorch's $lo..$hi (mean $mean)"

# --- a loss that does not fit the output
expect_rc 4 "sparse_categorical_crossentropy on the log_softmax output" -- "$rtrain" \
  "${FIT[@]}" --loss sparse_categorical_crossentropy --epochs 1
has "$tmp/err" "INVALID_ARGUMENT" "INVALID_ARGUMENT"
has "$tmp/err" "node 'logp'" "the output node named"
has "$tmp/err" "LogSoftmax" "what it ends in named"
has "$tmp/err" "Use nll_loss" "the loss that fits named"
expect_rc 0 "--loss-check off trains it anyway" -- "$rtrain" "${FIT[@]}" \
  --loss sparse_categorical_crossentropy --loss-check off --epochs 1 --steps-per-epoch 2
expect_rc 4 "--from-logits is Keras' and --class-weight PyTorch's" -- "$rtrain" "${FIT[@]}" \
  --loss sparse_categorical_crossentropy --from-logits --class-weight 1,2 --epochs 1
has "$tmp/err" "class_weight" "the misplaced option named"

# --- layouts: NCHW as the model declares it, NHWC only when said
$py - "$g" <<'EOF'
import sys, numpy as np
r = np.random.default_rng(1)
x = r.random((40, 3, 8, 8), dtype=np.float32)
np.save(sys.argv[1] + "/rb_nchw.npy", x)
np.save(sys.argv[1] + "/rb_nhwc.npy", np.ascontiguousarray(x.transpose(0, 2, 3, 1)))
np.save(sys.argv[1] + "/rb_y.npy", r.integers(0, 10, 40).astype(np.int64))
EOF
RB=(fit --server "$addr" --model "$src/tests/onnx/fixtures/rb.onnx" --labels "$g/rb_y.npy"
    --loss cross_entropy --epochs 1 --batch-size 8 --no-progress)
expect_rc 0 "NCHW data (40, 3, 8, 8) for an NCHW model" -- "$rtrain" "${RB[@]}" \
  --data "$g/rb_nchw.npy"
expect_rc 4 "NHWC data (40, 8, 8, 3) refused" -- "$rtrain" "${RB[@]}" --data "$g/rb_nhwc.npy"
has "$tmp/err" "the data is NHWC and the model takes NCHW" "the layout named"
has "$tmp/err" "data_layout NHWC" "the way out named"
expect_rc 0 "NHWC data with --data-layout NHWC" -- "$rtrain" "${RB[@]}" \
  --data "$g/rb_nhwc.npy" --data-layout NHWC
expect_rc 4 "--data-layout NHWC with NCHW data refused" -- "$rtrain" "${RB[@]}" \
  --data "$g/rb_nchw.npy" --data-layout NHWC
has "$tmp/err" "the data is NCHW and the model takes NHWC" "the other way named"
expect_rc 0 "the daemon still serves" -- "$rtrain" info --server "$addr"
echo "$((checks - fails))/$checks checks passed"
[ "$fails" -eq 0 ]
