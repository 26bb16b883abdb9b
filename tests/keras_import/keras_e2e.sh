#!/usr/bin/env bash
# The Keras importer through a real rtraind and the rtrain CLI:
#   - a Keras 3 model with compile_config trains with no --loss/--optimizer
#     (categorical_crossentropy, one-hot (n, 3) .npy labels whose shape the
#     CLI reads), and eval takes its loss from the model too;
#   - predict on features-only data;
#   - --metrics (auc, precision, recall, mae, top-k, rmse) in fit and eval;
#   - (n, 2) regression labels with --loss mse, from .npy and from CSV
#     columns (--label-columns 2:3); predict on a features-only CSV;
#   - a two-input, two-output model (losses and loss_weights from its
#     compile_config) trains one epoch to tfjs' loss from a packed CSV;
#   - a model with several problems is refused with every one named
#     (INVALID_ARGUMENT, exit 4), and the daemon keeps serving.
#   usage: keras_e2e.sh RTRAIND RTRAIN SOURCE_DIR
set -uo pipefail
rtraind=$1 rtrain=$2 src=$3
py=/usr/bin/python3
. "$src/tests/lib/e2e.sh"
start_daemon "$tmp/daemon.log" --log-level warn || exit 1
S=(--server "$addr")

$py - "$tmp" <<'EOF'
import json, sys
import numpy as np
d = sys.argv[1]
rng = np.random.default_rng(0)
x = rng.normal(size=(120, 4)).astype(np.float32)
k = np.argmax(x[:, :3] + 0.5 * x[:, 3:4], axis=1)
np.save(f"{d}/x.npy", x)
np.save(f"{d}/onehot.npy", np.eye(3, dtype=np.float32)[k])
reg = np.stack([x[:, 0] + x[:, 1], x[:, 2] - x[:, 3]], 1).astype(np.float32)
np.save(f"{d}/reg.npy", reg)
# CSV: two label columns in the middle (columns 2:3), and features only
np.savetxt(f"{d}/reg.csv", np.concatenate([x[:, :2], reg, x[:, 2:]], 1), delimiter=",", fmt="%.9g")
np.savetxt(f"{d}/feat.csv", x, delimiter=",", fmt="%.9g")
def dense(name, units, act):
    return {"module": "keras.layers", "class_name": "Dense", "config": {
        "name": name, "trainable": True,
        "dtype": {"module": "keras", "class_name": "DTypePolicy", "config": {"name": "float32"}, "registered_name": None},
        "units": units, "activation": act, "use_bias": True,
        "kernel_initializer": {"module": "keras.initializers", "class_name": "GlorotUniform", "config": {"seed": None}, "registered_name": None},
        "bias_initializer": {"module": "keras.initializers", "class_name": "Zeros", "config": {}, "registered_name": None},
        "kernel_regularizer": None, "bias_regularizer": None, "kernel_constraint": None, "bias_constraint": None},
        "registered_name": None, "build_config": {"input_shape": [None, 4]}}
def model(out_units, act, loss):
    return {"module": "keras", "class_name": "Sequential", "config": {"name": "s", "trainable": True, "layers": [
        {"module": "keras.layers", "class_name": "InputLayer", "config": {"batch_shape": [None, 4], "dtype": "float32", "sparse": False, "name": "x"}, "registered_name": None},
        dense("h", 16, "relu"), dense("o", out_units, act)], "build_input_shape": [None, 4]},
        "registered_name": None,
        "compile_config": {"optimizer": {"module": "keras.optimizers", "class_name": "Adam", "config": {"name": "adam", "learning_rate": 0.05, "beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-07}, "registered_name": None},
                           "loss": loss, "metrics": ["accuracy"], "loss_weights": None}}
json.dump(model(3, "softmax", "categorical_crossentropy"), open(f"{d}/cls.json", "w"))
json.dump(model(2, "linear", None), open(f"{d}/reg.json", "w"))
bad = model(3, "softmax", "categorical_crossentropy")
L = bad["config"]["layers"]
L.insert(2, {"class_name": "Lambda", "config": {"name": "lam", "function": "x"}})
L[1]["config"]["activation"] = "bogus"
L[3]["config"]["wobble"] = 1
json.dump(bad, open(f"{d}/bad.json", "w"))
EOF

# --- compile_config supplies loss, optimizer and metrics; one-hot labels
expect_rc 0 "fit from compile_config" -- "$rtrain" fit "${S[@]}" --model "$tmp/cls.json" \
  --data "$tmp/x.npy" --labels "$tmp/onehot.npy" --epochs 30 --batch-size 20 --seed 1 \
  --save-weights "$tmp/w.bin"
acc=$(sed -n 's/^final:.* accuracy \([0-9.]*\).*/\1/p' "$tmp/out" | head -n 1)
ge "$acc" 0.85 && ok "one-hot accuracy $acc >= 0.85" || { bad "accuracy '$acc'"; cat "$tmp/out" "$tmp/err" | tail -5; }
expect_rc 0 "eval takes the model's loss" -- "$rtrain" eval "${S[@]}" --model "$tmp/cls.json" \
  --weights "$tmp/w.bin" --data "$tmp/x.npy" --labels "$tmp/onehot.npy"
has "$tmp/out" "accuracy" "eval reports accuracy"
expect_rc 0 "predict on features only" -- "$rtrain" predict "${S[@]}" --model "$tmp/cls.json" \
  --weights "$tmp/w.bin" --data "$tmp/x.npy" --out "$tmp/p.npy"
if $py - "$tmp/p.npy" <<'EOF'
import sys, numpy as np
p = np.load(sys.argv[1])
assert p.shape == (120, 3), p.shape
assert np.allclose(p.sum(1), 1, atol=1e-4)
EOF
then ok "predictions (120, 3) softmax rows"; else bad "predictions"; fi

# --- Keras metrics over the epoch, selected with --metrics
expect_rc 0 "fit --metrics" -- "$rtrain" fit "${S[@]}" --model "$tmp/cls.json" \
  --data "$tmp/x.npy" --labels "$tmp/onehot.npy" --epochs 5 --batch-size 20 --seed 1 \
  --metrics auc,precision,recall,mae,top_k_categorical_accuracy
for m in auc precision recall mae top_k_categorical_accuracy; do
  has "$tmp/out" " - $m [0-9]" "fit reports $m"
done
expect_rc 0 "eval --metrics" -- "$rtrain" eval "${S[@]}" --model "$tmp/cls.json" \
  --weights "$tmp/w.bin" --data "$tmp/x.npy" --labels "$tmp/onehot.npy" --metrics auc,rmse
auc=$(sed -n 's/.* - auc: \([0-9.]*\).*/\1/p' "$tmp/out")
ge "$auc" 0.9 && ok "eval auc $auc >= 0.9 (the trained model)" || bad "eval auc '$auc'"
has "$tmp/out" " - rmse: " "eval reports rmse"
expect_rc 4 "an unknown metric is refused" -- "$rtrain" eval "${S[@]}" --model "$tmp/cls.json" \
  --weights "$tmp/w.bin" --data "$tmp/x.npy" --labels "$tmp/onehot.npy" --metrics f1_bogus
has "$tmp/err" "f1_bogus" "names the metric"

# --- (n, 2) regression labels
expect_rc 0 "fit (n, 2) regression" -- "$rtrain" fit "${S[@]}" --model "$tmp/reg.json" \
  --data "$tmp/x.npy" --labels "$tmp/reg.npy" --loss mse --epochs 40 --batch-size 20 --seed 1
loss=$(sed -n 's/^final:.* loss \([0-9.]*\).*/\1/p' "$tmp/out" | head -n 1)
awk -v l="$loss" 'BEGIN { exit !(l != "" && l < 0.2) }' && ok "regression loss $loss < 0.2" \
  || { bad "regression loss '$loss'"; tail -5 "$tmp/out" "$tmp/err"; }

# --- (n, 2) labels from CSV columns 2:3, and predict on a features-only CSV
expect_rc 0 "fit --label-columns 2:3" -- "$rtrain" fit "${S[@]}" --model "$tmp/reg.json" \
  --data "$tmp/reg.csv" --label-columns 2:3 --loss mse --epochs 40 --batch-size 20 --seed 1 \
  --save-weights "$tmp/wr.bin"
loss2=$(sed -n 's/^final:.* loss \([0-9.]*\).*/\1/p' "$tmp/out" | head -n 1)
[ -n "$loss2" ] && [ "$loss2" = "$loss" ] && ok "CSV label columns train as the .npy labels ($loss2)" \
  || bad "CSV label columns loss '$loss2' vs .npy '$loss'"
expect_rc 0 "predict on a features-only CSV" -- "$rtrain" predict "${S[@]}" --model "$tmp/reg.json" \
  --weights "$tmp/wr.bin" --data "$tmp/feat.csv" --out "$tmp/pr.npy"
if $py - "$tmp/pr.npy" "$tmp/reg.npy" <<'EOF'
import sys, numpy as np
p, y = np.load(sys.argv[1]), np.load(sys.argv[2])
assert p.shape == (120, 2), p.shape
assert ((p - y) ** 2).mean() < 0.2
EOF
then ok "predictions (120, 2) fit the targets"; else bad "features-only predictions"; fi

# --- every problem in one error; the daemon keeps serving
expect_rc 4 "bad model refused" -- "$rtrain" fit "${S[@]}" --model "$tmp/bad.json" \
  --data "$tmp/x.npy" --labels "$tmp/onehot.npy" --epochs 1
has "$tmp/err" "3 problems" "one error, 3 problems"
has "$tmp/err" "unsupported activation 'bogus' (layer 'h')" "names the activation and layer"
has "$tmp/err" "Lambda layer 'lam' holds Python code" "names the Lambda"
has "$tmp/err" "unsupported setting 'wobble' (layer 'o')" "names the unknown field"
expect_rc 0 "daemon still serves" -- "$rtrain" fit "${S[@]}" --model "$tmp/cls.json" \
  --data "$tmp/x.npy" --labels "$tmp/onehot.npy" --epochs 1

# --- a null sequence length: bound from the .npy features, or by --input-shape
$py - "$tmp" <<'EOF'
import json, sys
import numpy as np
d = sys.argv[1]
rng = np.random.default_rng(1)
x = rng.normal(size=(60, 6, 3)).astype(np.float32)
np.save(f"{d}/seq.npy", x)
np.save(f"{d}/seqy.npy", x.sum(axis=(1, 2)).astype(np.float32)[:, None] * 0.1)
json.dump({"class_name": "Sequential", "config": {"name": "s", "layers": [
    {"class_name": "InputLayer", "config": {"batch_input_shape": [None, None, 3], "name": "seq"}},
    {"class_name": "SimpleRNN", "config": {"name": "r", "units": 4}},
    {"class_name": "Dense", "config": {"name": "d", "units": 1}}]}}, open(f"{d}/vl.json", "w"))
EOF
expect_rc 0 "variable length bound from the .npy" -- "$rtrain" fit "${S[@]}" --model "$tmp/vl.json" \
  --data "$tmp/seq.npy" --labels "$tmp/seqy.npy" --loss mse --epochs 2 --batch-size 20
expect_rc 0 "variable length bound by --input-shape" -- "$rtrain" fit "${S[@]}" --model "$tmp/vl.json" \
  --data "$tmp/seq.npy" --labels "$tmp/seqy.npy" --loss mse --epochs 1 --batch-size 20 --input-shape 6x3
expect_rc 4 "contradicting --input-shape refused" -- "$rtrain" fit "${S[@]}" --model "$tmp/vl.json" \
  --data "$tmp/seq.npy" --labels "$tmp/seqy.npy" --loss mse --epochs 1 --input-shape 6x4
has "$tmp/err" "input 'seq' has dim 2 = 3" "the mismatch names the input"

# --- the same model on CSV rows (6 steps x 3 features, then the label):
# the null length is the row's feature count over the fixed 3; predict on
# features-only rows binds from every column; 17 features do not divide
$py - "$tmp" <<'EOF2'
import sys
import numpy as np
d = sys.argv[1]
x, y = np.load(f"{d}/seq.npy"), np.load(f"{d}/seqy.npy")
np.savetxt(f"{d}/seq.csv", np.hstack([x.reshape(60, 18), y]), delimiter=",", fmt="%.6f")
np.savetxt(f"{d}/seqf.csv", x.reshape(60, 18), delimiter=",", fmt="%.6f")
np.savetxt(f"{d}/seq17.csv", np.hstack([x.reshape(60, 18)[:, :17], y]), delimiter=",",
           fmt="%.6f")
EOF2
expect_rc 0 "variable length bound from the CSV row" -- "$rtrain" fit "${S[@]}" --model "$tmp/vl.json" \
  --data "$tmp/seq.csv" --loss mse --epochs 2 --batch-size 20 --save-weights "$tmp/wvl.bin"
has "$tmp/out" "final:" "trains"
expect_rc 0 "predict binds from a features-only CSV" -- "$rtrain" predict "${S[@]}" \
  --model "$tmp/vl.json" --weights "$tmp/wvl.bin" --data "$tmp/seqf.csv" --loss mse \
  --out "$tmp/pvl.npy"
if $py - "$tmp/pvl.npy" <<'EOF2'
import sys, numpy as np
p = np.load(sys.argv[1])
assert p.shape == (60, 1) and np.isfinite(p).all(), p.shape
EOF2
then ok "predictions (60, 1)"; else bad "features-only predictions of the bound model"; fi
expect_rc 4 "17 features per row refused" -- "$rtrain" fit "${S[@]}" --model "$tmp/vl.json" \
  --data "$tmp/seq17.csv" --loss mse --epochs 1
has "$tmp/err" "input 'seq': the data's 17 values per sample are not a multiple" "names the input"

# --- two inputs, two outputs (tests/fixtures/keras-multi): the CSV holds the
# inputs' values in turn, then the outputs' labels (--label-columns); the
# losses and loss_weights come from the model's compile_config. One epoch
# of 3 SGD steps against TensorFlow.js (tfjs/multi_two_heads_dict.json)
$py - "$tmp" "$src" <<'EOF2'
import json, sys
import numpy as np
d, src = sys.argv[1:]
fx = json.load(open(f"{src}/tests/keras_import/tfjs/multi_two_heads_dict.json"))
def mix(x):
    x = np.asarray(x, dtype=np.uint64) & 0xffffffff
    x ^= x >> 16; x = (x * 0x7feb352d) & 0xffffffff
    x ^= x >> 15; x = (x * 0x846ca68b) & 0xffffffff
    return x ^ (x >> 16)
n, cols = fx["n"], []
for k, shape in enumerate(fx["inputs"]):
    per = int(np.prod(shape))
    h = mix(np.arange(n * per, dtype=np.uint64) ^ (0x5eed0001 + k))
    cols.append((((h >> 22).astype(np.int64) - 512) / 512.0).reshape(n, per))
h = mix(np.arange(n, dtype=np.uint64) ^ 0x1abe1000)
cols.append((h % 3).reshape(n, 1).astype(np.float64))   # cls: class indices
h = mix(np.arange(n * 2, dtype=np.uint64) ^ 0x1abe1001)
cols.append(((h >> 22) / 1024.0).reshape(n, 2))         # reg
np.savetxt(f"{d}/multi.csv", np.concatenate(cols, 1), delimiter=",", fmt="%.9g")
np.savetxt(f"{d}/multi_bad.csv", np.concatenate(cols[:2] + [cols[2] + 3] + cols[3:], 1),
           delimiter=",", fmt="%.9g")
open(f"{d}/multi_want", "w").write("%.9g" % np.mean(fx["sgd"]["losses"]))
EOF2
expect_rc 0 "two inputs, two outputs: fit from the saved losses and weights" -- "$rtrain" fit \
  "${S[@]}" --model "$src/tests/fixtures/keras-multi/two_heads_dict.json" \
  --data "$tmp/multi.csv" --label-columns 12:14 --optimizer sgd --lr 0.05 --batch-size 4 \
  --seed 1 --no-shuffle --epochs 1 --save-weights "$tmp/wmulti.bin" \
  --csv-log "$tmp/multi_log.csv"
if $py - "$tmp/out" "$tmp/multi_want" <<'EOF2'
import re, sys
got = float(re.search(r"final: loss ([0-9.e+-]+)", open(sys.argv[1]).read()).group(1))
want = float(open(sys.argv[2]).read())
assert abs(got - want) <= 1e-4 * want, (got, want)
EOF2
then ok "epoch loss as tfjs' (sum of loss_weight * loss)"; else bad "multi-output epoch loss"; fi
# each output's loss and metric under Keras' History names: the final line
# and CSVLogger's sorted columns; the total is sum(loss_weight * loss). The
# CLI's default accuracy goes to the classifying output only (the model
# saved no metrics: Keras would report none; a regression output has no
# accuracy to report)
if $py - "$tmp/out" "$tmp/multi_log.csv" <<'EOF2'
import csv, re, sys
line = open(sys.argv[1]).read()
v = {k: float(x) for k, x in re.findall(r" ([a-z_]+) ([0-9.e+-]+)", line.split("final:")[1])}
assert {"cls_loss", "reg_loss", "cls_accuracy"} <= set(v), line
assert "reg_accuracy" not in v, line
assert abs(v["loss"] - (v["cls_loss"] + 0.5 * v["reg_loss"])) <= 1e-3, v
rows = list(csv.reader(open(sys.argv[2])))
assert rows[0] == ["epoch", "cls_accuracy", "cls_loss", "loss", "reg_loss"], rows[0]
r = dict(zip(rows[0], map(float, rows[1])))
assert abs(r["loss"] - (r["cls_loss"] + 0.5 * r["reg_loss"])) <= 1e-6 * r["loss"], r
EOF2
then ok "each output's loss, the classifier's accuracy, in the final line and --csv-log"; else
  bad "per-output values"; sed 's/^/     /' "$tmp/out" "$tmp/multi_log.csv" | tail -5; fi
# --metrics accuracy asks for it: every output, as compile(metrics=["accuracy"])
expect_rc 0 "--metrics accuracy: for every output" -- "$rtrain" fit "${S[@]}" \
  --model "$src/tests/fixtures/keras-multi/two_heads_dict.json" --data "$tmp/multi.csv" \
  --label-columns 12:14 --optimizer sgd --lr 0.05 --batch-size 4 --seed 1 --no-shuffle \
  --epochs 1 --metrics accuracy --csv-log "$tmp/multi_log2.csv"
if $py - "$tmp/multi_log2.csv" <<'EOF2'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
assert rows[0] == ["epoch", "cls_accuracy", "cls_loss", "loss", "reg_accuracy",
                   "reg_loss"], rows[0]
EOF2
then ok "asked-for accuracy on both outputs"; else
  bad "--metrics accuracy"; sed 's/^/     /' "$tmp/multi_log2.csv" | head -3; fi
expect_rc 0 "predict writes both outputs' columns" -- "$rtrain" predict "${S[@]}" \
  --model "$src/tests/fixtures/keras-multi/two_heads_dict.json" --weights "$tmp/wmulti.bin" \
  --data "$tmp/multi.csv" --label-columns 12:14 --out "$tmp/pmulti.npy"
if $py - "$tmp/pmulti.npy" <<'EOF2'
import sys, numpy as np
p = np.load(sys.argv[1])
assert p.shape == (12, 5) and np.allclose(p[:, :3].sum(1), 1, atol=1e-5), p.shape
EOF2
then ok "predictions (12, 3 + 2)"; else bad "multi-output predictions"; fi
expect_rc 4 "a class index out of range in the first output refused" -- "$rtrain" fit "${S[@]}" \
  --model "$src/tests/fixtures/keras-multi/two_heads_dict.json" --data "$tmp/multi_bad.csv" \
  --label-columns 12:14 --epochs 1
has "$tmp/err" "output 1: label" "names the output"

# shared layers: the Siamese model's tower (called on both inputs) is one
# entry of the HDF5 weights file, as Keras writes it, and loads back
$py - "$tmp" <<'EOF2'
import sys, numpy as np
r = np.random.RandomState(3)
x = r.uniform(-1, 1, (16, 10))
y = np.concatenate([(r.rand(16, 1) > 0.5), r.uniform(-1, 1, (16, 6))], 1)
np.savetxt(sys.argv[1] + "/siam.csv", np.concatenate([x, y], 1), delimiter=",", fmt="%.9g")
EOF2
expect_rc 0 "shared layers: fit, weights saved as HDF5" -- "$rtrain" fit "${S[@]}" \
  --model "$src/tests/fixtures/keras-multi/shared_siamese.json" --data "$tmp/siam.csv" \
  --label-columns 10:16 --optimizer sgd --lr 0.05 --batch-size 4 --epochs 2 \
  --save-weights "$tmp/siam.h5"
if $py - "$tmp/siam.h5" <<'EOF2'
import sys, h5py
f = h5py.File(sys.argv[1], "r")
names = [n.decode() if isinstance(n, bytes) else n for n in f.attrs["layer_names"]]
assert names == ["tower", "square", "score"], names
w = [n.decode() if isinstance(n, bytes) else n for n in f["tower"].attrs["weight_names"]]
assert w == ["tower/kernel:0", "tower/bias:0"], w
assert f["tower"]["tower/kernel:0"].shape == (5, 6)
EOF2
then ok "one HDF5 entry per shared layer"; else bad "shared layer's HDF5 entries"; fi
expect_rc 0 "shared layers: the HDF5 weights load for predict" -- "$rtrain" predict "${S[@]}" \
  --model "$src/tests/fixtures/keras-multi/shared_siamese.json" --weights "$tmp/siam.h5" \
  --data "$tmp/siam.csv" --label-columns 10:16 --out "$tmp/psiam.npy"

echo "$((checks - fails))/$checks checks passed"
[ "$fails" -eq 0 ]
