#!/usr/bin/env bash
# onnx_cli.sh - the CLI with an ONNX model against a real rtraind: fit
# --model m.onnx --onnx out.onnx, export of saved weights giving the same
# file, predict (against PyTorch with the trained initializers), a graph
# output chosen by --onnx-output (against NumPy), and the errors
# (unsupported operators listed, --onnx with a JSON model); an Embedding
# on int64 data and LSTM/GRU models trained, exported and checked in
# PyTorch.
#   onnx_cli.sh RTRAIND RTRAIN SRC
rtraind=$1 rtrain=$2 src=$3
py=/usr/bin/python3
. "$src/tests/lib/e2e.sh"
fix=$src/tests/onnx/fixtures
iris=$src/tests/fixtures/iris.csv
start_daemon "$tmp/daemon.log" --log-level warn || exit 1
S=(--server "$addr")
FIT=(fit "${S[@]}" --data "$iris" --csv-header --loss sparse_categorical_crossentropy
     --epochs 2 --batch-size 10 --no-progress)

expect_rc 0 "fit --model wa.onnx --onnx" -- "$rtrain" "${FIT[@]}" --model "$fix/wa.onnx" \
  --save-weights "$tmp/w.bin" --onnx "$tmp/fit.onnx"
has "$tmp/err" "onnx: $tmp/fit.onnx" "fit wrote the trained ONNX model"
if cmp -s "$fix/wa.onnx" "$tmp/fit.onnx"; then bad "the trained model equals the initial one"
else ok "the trained model's initializers changed"; fi
expect_rc 0 "export --weights" -- "$rtrain" export "${S[@]}" --model "$fix/wa.onnx" \
  --weights "$tmp/w.bin" --onnx "$tmp/exp.onnx"
if cmp -s "$tmp/fit.onnx" "$tmp/exp.onnx"; then ok "export of the saved weights = fit --onnx"
else bad "export of the saved weights differs from fit --onnx"; fi
expect_rc 0 "predict with the ONNX model" -- "$rtrain" predict "${S[@]}" --model "$fix/wa.onnx" \
  --weights "$tmp/w.bin" --data "$iris" --csv-header --out "$tmp/p.csv"
rows=$(wc -l < "$tmp/p.csv")
[ "$rows" -eq 150 ] && ok "150 predictions" || bad "predictions: $rows rows"
# The predictions against PyTorch: the model wa.onnx was exported from
# (Linear(4,32) relu Linear(32,3) softmax) with the initializers of the
# trained file fit wrote, on the same rows.
if $py - "$tmp/fit.onnx" "$iris" "$tmp/p.csv" <<'EOF'
import sys
import numpy as np
import onnx
import onnx.numpy_helper
import torch
init = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(sys.argv[1]).graph.initializer}
fc = [torch.nn.Linear(4, 32), torch.nn.Linear(32, 3)]
for i, f in enumerate(fc):
    f.weight.data = torch.from_numpy(init["fc.%d.weight" % i].copy())
    f.bias.data = torch.from_numpy(init["fc.%d.bias" % i].copy())
x = torch.from_numpy(np.loadtxt(sys.argv[2], delimiter=",", skiprows=1)[:, :4].astype(np.float32))
with torch.no_grad():
    ref = torch.softmax(fc[1](torch.relu(fc[0](x))), dim=1).numpy()
got = np.loadtxt(sys.argv[3], delimiter=",", ndmin=2)
assert got.shape == ref.shape, (got.shape, ref.shape)
err = float(np.abs(got - ref).max())
print("max |predict - torch| = %.3g" % err)
assert err < 1e-5, err
assert ref.argmax(1).tolist() == got.argmax(1).tolist()
EOF
then ok "predictions = PyTorch's with the trained initializers"
else bad "predictions differ from PyTorch's"; fi
# a model trained from its own file: the exported model imports and trains again
expect_rc 0 "fit of the exported model" -- "$rtrain" "${FIT[@]}" --model "$tmp/exp.onnx"

# --onnx-output picks one of two graph outputs (relu 'a', sigmoid 'b' of
# the input; no weights): the predictions are NumPy's of that output. None
# named, both train, each with the loss, their labels packed per row: the
# outputs' own values give each output's loss 0 (Keras' a_loss, b_loss)
two=$src/tests/fuzz/onnx/ok_two_outputs.onnx
$py - "$iris" "$tmp/two.csv" <<'EOF'
import sys
import numpy as np
x = np.loadtxt(sys.argv[1], delimiter=",", skiprows=1)[:, :4].astype(np.float32)
y = np.concatenate([np.maximum(x, 0), 1 / (1 + np.exp(-x.astype(np.float64)))], 1)
np.savetxt(sys.argv[2], np.concatenate([x, y], 1), delimiter=",", fmt="%.9g")
EOF
expect_rc 0 "two outputs, none named: both train" -- "$rtrain" fit "${S[@]}" --model "$two" \
  --data "$tmp/two.csv" --label-columns 4:11 --loss mse --epochs 1 --batch-size 10 --no-progress
has "$tmp/out" " - a_loss 0.0000 - " "output a's loss under its ONNX name"
has "$tmp/out" " - b_loss 0.0000 - " "output b's loss under its ONNX name"
expect_rc 0 "fit --onnx-output b" -- "$rtrain" "${FIT[@]}" --model "$two" --onnx-output b \
  --loss mse --epochs 1 --save-weights "$tmp/w2.bin"
for o in a b; do
  expect_rc 0 "predict --onnx-output $o" -- "$rtrain" predict "${S[@]}" --model "$two" \
    --onnx-output "$o" --weights "$tmp/w2.bin" --data "$iris" --csv-header --out "$tmp/p_$o.csv"
  if $py - "$o" "$iris" "$tmp/p_$o.csv" <<'EOF'
import sys
import numpy as np
x = np.loadtxt(sys.argv[2], delimiter=",", skiprows=1)[:, :4].astype(np.float32)
ref = np.maximum(x, 0) if sys.argv[1] == "a" else 1 / (1 + np.exp(-x.astype(np.float64)))
got = np.loadtxt(sys.argv[3], delimiter=",", ndmin=2)
assert got.shape == ref.shape and float(np.abs(got - ref).max()) < 1e-6
EOF
  then ok "--onnx-output $o: NumPy's values"; else bad "--onnx-output $o: values differ"; fi
done

expect_rc 4 "unsupported operators" -- "$rtrain" "${FIT[@]}" \
  --model "$src/tests/fuzz/onnx/bad_unsupported.onnx"
has "$tmp/err" "Celu (node 'act1'), Hardmax (node 'hm')" "every unsupported operator named"
expect_rc 4 "malformed bytes" -- "$rtrain" "${FIT[@]}" --model "$src/tests/fuzz/onnx/bad_garbage.onnx"
has "$tmp/err" "not a serialized ONNX ModelProto" "malformed bytes named"
expect_rc 2 "--onnx with a JSON model" -- "$rtrain" "${FIT[@]}" \
  --model "$src/tests/data/dense4.json" --onnx "$tmp/x.onnx"
# nn.Embedding on int64 indices (em) and a bidirectional LSTM into a
# two-layer GRU (rn), from the CLI: the trained model fit writes loads into
# the PyTorch module by the state_dict's names (the RNNs' weights written
# back through torch's gate-order slices), and its outputs are predict's
$py - "$tmp" <<'EOF'
import sys
import numpy as np
rng = np.random.RandomState(5)
np.save(sys.argv[1] + "/em_x.npy", rng.randint(0, 20, size=(40, 6)).astype(np.int64))
np.save(sys.argv[1] + "/rn_x.npy", rng.rand(40, 6, 5).astype(np.float32))
np.save(sys.argv[1] + "/y10.npy", rng.randint(0, 10, size=40).astype(np.int64))
EOF
for m in em rn; do
  expect_rc 0 "fit --model $m.onnx" -- "$rtrain" fit "${S[@]}" --model "$fix/$m.onnx" \
    --data "$tmp/${m}_x.npy" --labels "$tmp/y10.npy" --loss cross_entropy --epochs 3 \
    --batch-size 8 --optimizer sgd --lr 0.1 --no-progress --save-weights "$tmp/$m.bin" \
    --onnx "$tmp/${m}_fit.onnx"
  expect_rc 0 "predict with $m.onnx" -- "$rtrain" predict "${S[@]}" --model "$fix/$m.onnx" \
    --weights "$tmp/$m.bin" --data "$tmp/${m}_x.npy" --out "$tmp/${m}_p.npy"
  if $py - "$src/tests/onnx" "$m" "$tmp/${m}_fit.onnx" "$tmp/${m}_x.npy" "$tmp/${m}_p.npy" \
      "$fix/$m.onnx" <<'EOF'
import sys
import numpy as np
import onnx
import onnx.numpy_helper
import torch
sys.path.insert(0, sys.argv[1])
import gen_onnx_fixtures as gen
name = sys.argv[2]
m = gen.model(name)
sd = m.state_dict()
trained = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(sys.argv[3]).graph.initializer}
first = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(sys.argv[6]).graph.initializer}
moved = 0
for k in sd:
    assert k in trained, (k, sorted(trained))
    moved += not np.array_equal(trained[k], first[k])
    sd[k] = torch.from_numpy(trained[k].copy()).reshape(sd[k].shape)
assert moved == len(sd), "%d of %d tensors trained" % (moved, len(sd))
m.load_state_dict(sd)
m.eval()
x = torch.from_numpy(np.load(sys.argv[4]))
with torch.no_grad():
    ref = m(x).numpy()
got = np.load(sys.argv[5])
assert got.shape == ref.shape, (got.shape, ref.shape)
err = float(np.abs(got - ref).max())
print("%s: max |predict - torch| = %.3g" % (name, err))
assert err < 1e-4, err
EOF
  then ok "$m: the trained model in PyTorch predicts as rtrain"
  else bad "$m: the trained model in PyTorch differs from rtrain's predictions"; fi
done

expect_rc 0 "the daemon still serves" -- "$rtrain" info "${S[@]}"
echo "$((checks - fails))/$checks checks passed"
[ "$fails" -eq 0 ]
