#!/usr/bin/python3
"""Writes cudnn_ref.json: PyTorch's values for Keras 2's CuDNNLSTM and
CuDNNGRU (tests/keras_import/test_keras_cudnn.c).

Run with Debian's interpreter (python3-torch):
    /usr/bin/python3 tests/keras_import/cudnn/gen_cudnn_fixtures.py

torch.nn.LSTM and torch.nn.GRU are cuDNN's formulation (two biases; the
GRU's reset gate applied to the recurrent product plus its bias), the
layers Keras 2's keras/layers/cudnn_recurrent.py runs. Each case holds a
model JSON as Keras 2.2 writes it, its weights in Keras' layout (kernel
(F, G*U) and recurrent_kernel (U, G*U) with gates LSTM i,f,c,o and GRU
z,r,h; bias (2*G*U): the input biases, then the recurrent ones, as
cudnn_recurrent.py slices it), an input, MSE labels, torch's output and
torch's gradient of the mean squared error for every weight. Keras' weights
map to torch's transposed, with GRU's gates reordered to torch's r,z,n.
go_backwards runs torch on the reversed sequence; Bidirectional is torch's
bidirectional=True (its backward outputs in input step order, as Keras'
Bidirectional gives them).
"""
import json
import os

import numpy as np
import torch

torch.manual_seed(3)
rng = np.random.default_rng(5)
B, T, F = 3, 4, 5


def layer_cfg(cls, name, units, seq, back, extra=None):
    c = {"name": name, "trainable": True, "return_sequences": seq,
         "return_state": False, "go_backwards": back, "stateful": False,
         "units": units,
         "kernel_initializer": {"class_name": "VarianceScaling", "config": {
             "scale": 1.0, "mode": "fan_avg", "distribution": "uniform", "seed": None}},
         "recurrent_initializer": {"class_name": "Orthogonal", "config": {"gain": 1.0, "seed": None}},
         "bias_initializer": {"class_name": "Zeros", "config": {}},
         "kernel_regularizer": None, "recurrent_regularizer": None, "bias_regularizer": None,
         "activity_regularizer": None, "kernel_constraint": None,
         "recurrent_constraint": None, "bias_constraint": None}
    if cls == "CuDNNLSTM":
        c["unit_forget_bias"] = True
    c.update(extra or {})
    return {"class_name": cls, "config": c}


def keras_weights(G, U):
    k = rng.uniform(-0.6, 0.6, (F, G * U)).astype(np.float32)
    r = rng.uniform(-0.6, 0.6, (U, G * U)).astype(np.float32)
    b = rng.uniform(-0.4, 0.4, (2 * G * U,)).astype(np.float32)
    return k, r, b


def to_torch(gru, U, k, r, b):
    """Keras layout -> torch's weight_ih, weight_hh, bias_ih, bias_hh"""
    G = 3 if gru else 4
    perm = np.arange(G * U)
    if gru:  # Keras z,r,h -> torch r,z,n
        perm = np.concatenate([np.arange(U, 2 * U), np.arange(0, U), np.arange(2 * U, 3 * U)])
    return (k.T[perm], r.T[perm], b[:G * U][perm], b[G * U:][perm]), perm


def run_case(name, cls, units, seq, back, bidi):
    gru = cls == "CuDNNGRU"
    G = 3 if gru else 4
    U = units
    lname = "rnn"
    inner = layer_cfg(cls, "cu_dnn" + ("gru" if gru else "lstm") + "_1", U, seq, back)
    if bidi:
        layer = {"class_name": "Bidirectional", "config": {
            "name": "bi", "trainable": True, "layer": inner, "merge_mode": "concat"}}
        lname = "bi"
    else:
        inner["config"]["name"] = lname
        layer = inner
    layer["config"]["batch_input_shape"] = [None, T, F]
    model = {"class_name": "Sequential", "config": {"name": "s", "layers": [layer]},
             "keras_version": "2.2.4", "backend": "tensorflow"}
    mod = (torch.nn.GRU if gru else torch.nn.LSTM)(F, U, batch_first=True,
                                                   bidirectional=bidi)
    dirs = [("", "forward_" + inner["config"]["name"]),
            ("_reverse", "backward_" + inner["config"]["name"])] if bidi else [("", None)]
    weights, perms = {}, {}
    with torch.no_grad():
        for sfx, half in dirs:
            k, r, b = keras_weights(G, U)
            (wi, wh, bi, bh), perm = to_torch(gru, U, k, r, b)
            getattr(mod, "weight_ih_l0" + sfx).copy_(torch.from_numpy(wi))
            getattr(mod, "weight_hh_l0" + sfx).copy_(torch.from_numpy(wh))
            getattr(mod, "bias_ih_l0" + sfx).copy_(torch.from_numpy(bi))
            getattr(mod, "bias_hh_l0" + sfx).copy_(torch.from_numpy(bh))
            pre = lname + "/" + (half + "/" if half else "")
            weights[pre + "kernel"] = k
            weights[pre + "recurrent_kernel"] = r
            weights[pre + "bias"] = b
            perms[pre] = (sfx, perm)
    x = rng.uniform(-1, 1, (B, T, F)).astype(np.float32)
    xt = torch.from_numpy(x[:, ::-1].copy() if back else x)
    out, _ = mod(xt)
    D = 2 if bidi else 1
    y = out if seq else (out[:, -1] if not bidi else
                         torch.cat([out[:, -1, :U], out[:, 0, U:]], dim=1))
    lab = rng.uniform(-1, 1, tuple(y.shape)).astype(np.float32)
    loss = ((y - torch.from_numpy(lab)) ** 2).mean()
    loss.backward()
    grads = {}
    for pre, (sfx, perm) in perms.items():
        inv = np.argsort(perm)
        gi = getattr(mod, "weight_ih_l0" + sfx).grad.numpy()
        gh = getattr(mod, "weight_hh_l0" + sfx).grad.numpy()
        gbi = getattr(mod, "bias_ih_l0" + sfx).grad.numpy()
        gbh = getattr(mod, "bias_hh_l0" + sfx).grad.numpy()
        grads[pre + "kernel"] = gi[inv].T
        grads[pre + "recurrent_kernel"] = gh[inv].T
        grads[pre + "bias"] = np.concatenate([gbi[inv], gbh[inv]])
    fl = lambda a: [float(v) for v in np.asarray(a, np.float32).ravel()]
    return {"name": name, "model": json.dumps(model), "batch": B,
            "out_dims": list(y.shape[1:]), "x": fl(x), "labels": fl(lab),
            "output": fl(y.detach().numpy()), "loss": float(loss),
            "weights": {k: fl(v) for k, v in weights.items()},
            "grads": {k: fl(v) for k, v in grads.items()}}


cases = [
    run_case("CuDNNLSTM sequences", "CuDNNLSTM", 3, True, False, False),
    run_case("CuDNNLSTM go_backwards last", "CuDNNLSTM", 3, False, True, False),
    run_case("CuDNNGRU sequences", "CuDNNGRU", 3, True, False, False),
    run_case("CuDNNGRU last", "CuDNNGRU", 2, False, False, False),
    run_case("Bidirectional CuDNNLSTM", "CuDNNLSTM", 2, True, False, True),
    run_case("Bidirectional CuDNNGRU last", "CuDNNGRU", 2, False, False, True),
]
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cudnn_ref.json")
with open(out, "w") as f:
    json.dump({"generator": "gen_cudnn_fixtures.py (torch %s)" % torch.__version__,
               "cases": cases}, f, separators=(",", ":"))
    f.write("\n")
print(out, os.path.getsize(out), "bytes")
