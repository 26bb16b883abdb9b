"""The daemon's side of two Keras features, through the extension's raw API
(rtrain._rtrain: Client._compile, Program.evaluate/fit) and rtraind:

- each output's loss and metrics of a model with several outputs, under
  the names Keras' History gives them ("cls_loss", "reg_mae", and "val_"
  for validation), held to TensorFlow.js: tests/keras_import/tfjs/
  multi_two_heads_dict.json (gen_tfjs_fixtures.js --multi) holds tfjs'
  per-output losses and metrics at the initial weights the daemon draws
  with seed 1;
- Keras' Ftrl, from a model's saved compile_config and from the raw
  options, against a NumPy transcription of keras-team/keras
  keras/src/optimizers/ftrl.py (update_step).
"""
import json
import os

import numpy as np
import pytest

from test_keras_multi import _data, _fixture

FX = "two_heads_dict"


def _packed(fx):
    """the engine's packed layout: each input's values in turn per sample,
    each output's labels in turn (f32)"""
    xs, ys = _data(fx)
    n = fx["n"]
    x = np.concatenate([a.reshape(n, -1) for a in xs], 1).astype(np.float32)
    y = np.concatenate([a.reshape(n, -1).astype(np.float32) for a in ys], 1)
    return np.ascontiguousarray(x), np.ascontiguousarray(y)


def _with_metrics(text, fx):
    """the model's compile_config asking each output for the metrics tfjs
    computed for it (a dict by output name, as compile(metrics={...}))"""
    j = json.loads(text)
    j["compile_config"]["metrics"] = {
        h["name"]: sorted(fx["evaluate"]["head_metrics"][k]) for k, h in enumerate(fx["heads"])}
    return json.dumps(j)


def test_per_output_values_against_tfjs(client):
    fx, text = _fixture(FX)
    # no metrics in the request (its default is ["accuracy"], which would
    # apply to every output): the model's saved ones
    prog = client._compile(_with_metrics(text, fx), {
        "batch_size": fx["batch"], "shuffle": False, "seed": 1, "optimizer": "sgd",
        "learning_rate": fx["sgd"]["lr"], "metrics": []})
    x, y = _packed(fx)
    ds = client._upload(x, y, "multi")["id"]
    loss, acc, samples, vals = prog.evaluate(ds)
    assert samples == fx["n"] and np.isnan(acc)
    assert loss == pytest.approx(fx["evaluate"]["loss"], rel=1e-5)
    want = {}
    for k, h in enumerate(fx["heads"]):
        want[h["name"] + "_loss"] = fx["evaluate"]["head_losses"][k]
        for m, v in fx["evaluate"]["head_metrics"][k].items():
            want[h["name"] + "_" + m] = v
    assert set(vals) == set(want), (sorted(vals), sorted(want))
    for name, v in want.items():
        assert vals[name] == pytest.approx(v, rel=1e-5, abs=1e-6), name
    # the total: the outputs' losses weighted by loss_weights
    wts = [h["weight"] for h in fx["heads"]]
    assert loss == pytest.approx(sum(w * vals[h["name"] + "_loss"]
                                     for w, h in zip(wts, fx["heads"])), rel=1e-6)

    # fit: every epoch's History has each output's values, and val_ ones
    hist, timings = {}, []
    spe = fx["n"] // fx["batch"]
    assert prog.fit(ds, ds, 2, spe, 0, 0, hist, timings) == "done"
    for name in want:
        assert len(hist[name]) == 2 and len(hist["val_" + name]) == 2, name
    for e in range(2):
        assert hist["loss"][e] == pytest.approx(
            sum(w * hist[h["name"] + "_loss"][e] for w, h in zip(wts, fx["heads"])), rel=1e-6)
    # validation after the fit is evaluate on the trained weights
    loss2, _, _, vals2 = prog.evaluate(ds)
    assert hist["val_loss"][-1] == pytest.approx(loss2, rel=1e-6)
    for name in want:
        assert hist["val_" + name][-1] == pytest.approx(vals2[name], rel=1e-6, abs=1e-9)


# keras/src/optimizers/ftrl.py, update_step (accumulators start at
# initial_accumulator_value, linears at 0), in float64
def _ftrl(o):
    p = o["learning_rate_power"]

    def step(lr, w, g, s):
        acc = s.setdefault("acc", np.full_like(w, o["initial_accumulator_value"]))
        lin = s.setdefault("lin", np.zeros_like(w))
        l2 = o["l2_regularization_strength"] + o["beta"] / (2.0 * lr)
        g2 = g + 2 * o["l2_shrinkage_regularization_strength"] * w
        new_acc = acc + g * g
        lin += g2 - (np.power(new_acc, -p) - np.power(acc, -p)) / lr * w
        quad = np.power(new_acc, -p) / lr + 2 * l2
        l1 = o["l1_regularization_strength"]
        w = (np.clip(lin, -l1, l1) - lin) / quad
        acc[:] = new_acc
        return w
    return step


DENSE = {"class_name": "Sequential", "config": {"name": "s", "layers": [
    {"class_name": "InputLayer", "config": {"batch_input_shape": [None, 5], "name": "in"}},
    {"class_name": "Dense", "config": {"name": "d", "units": 2, "activation": "linear",
                                       "use_bias": True}}]}}

FTRL_CASES = [
    # saved with the model (Keras 3 compile_config), Keras' defaults
    ("saved", {"learning_rate": 0.1, "learning_rate_power": -0.5,
               "initial_accumulator_value": 0.1, "l1_regularization_strength": 0.0,
               "l2_regularization_strength": 0.0, "l2_shrinkage_regularization_strength": 0.0,
               "beta": 0.0}),
    # saved, every term on (l1 large enough to zero some weights)
    ("saved", {"learning_rate": 0.2, "learning_rate_power": -0.7,
               "initial_accumulator_value": 0.3, "l1_regularization_strength": 0.02,
               "l2_regularization_strength": 0.05,
               "l2_shrinkage_regularization_strength": 0.03, "beta": 0.4}),
    # the raw options (what the Python Ftrl object sends), power 0: fixed rate
    ("options", {"learning_rate": 0.05, "learning_rate_power": 0.0,
                 "initial_accumulator_value": 0.0, "l1_regularization_strength": 0.001,
                 "l2_regularization_strength": 0.01,
                 "l2_shrinkage_regularization_strength": 0.0, "beta": 1.0}),
]


@pytest.mark.parametrize("how,o", FTRL_CASES, ids=["defaults", "all_terms", "options"])
def test_ftrl_update_rule(client, how, o):
    rng = np.random.RandomState(5)
    x = rng.uniform(-1, 1, (16, 5)).astype(np.float32)
    y = rng.uniform(-1, 1, (16, 2)).astype(np.float32)
    model = dict(DENSE)
    opts = {"batch_size": 16, "shuffle": False, "seed": 2, "loss": "mse",
            "label_dtype": "float32", "label_shape": (2,)}
    if how == "saved":
        cfg = {k: v for k, v in o.items()}
        model["compile_config"] = {"optimizer": {"module": "keras.optimizers",
                                                 "class_name": "Ftrl", "config": cfg,
                                                 "registered_name": None},
                                   "loss": "mean_squared_error"}
    else:
        opts.update(o, optimizer="ftrl")
    prog = client._compile(json.dumps(model), opts)
    _, names, _ = prog.get_weights()
    W, b = [np.asarray(w, dtype=np.float64) for _, w in names]
    W0 = W.copy()
    ref = _ftrl(o)
    sw, sb = {}, {}
    X, Y = x.astype(np.float64), y.astype(np.float64)
    lr = o["learning_rate"]
    for t in range(1, 5):
        r = X @ W + b - Y
        gW, gb = 2 * X.T @ r / r.size, 2 * r.sum(0) / r.size
        W, b = ref(lr, W, gW, sw), ref(lr, b, gb, sb)
    ds = client._upload(x, y, "ftrl")["id"]
    hist, timings = {}, []
    assert prog.fit(ds, None, 4, 1, 0, 0, hist, timings) == "done"
    _, got, _ = prog.get_weights()
    gotW, gotb = [np.asarray(w) for _, w in got]
    np.testing.assert_allclose(gotW, W, rtol=2e-4, atol=1e-6)
    np.testing.assert_allclose(gotb, b, rtol=2e-4, atol=1e-6)
    assert np.abs(W - W0).max() > 2e-3  # the steps moved the weights past the tolerance
    assert prog.report["program_id"]


def test_ftrl_refusals(client):
    with pytest.raises(ValueError, match="learning_rate_power"):
        client._compile(json.dumps(DENSE), {"optimizer": "ftrl", "loss": "mse",
                                            "learning_rate_power": 0.5,
                                            "label_dtype": "float32", "label_shape": (2,)})


def _rtrf(path):
    """tensors of an RTRF file (tests/onnx/gen_onnx_fixtures.py's format)"""
    import struct
    out = {}
    with open(path, "rb") as f:
        b = f.read()
    magic, ver, n = struct.unpack_from("<III", b, 0)
    assert magic == 0x46525452 and ver == 1
    at = 12
    for _ in range(n):
        name = b[at:at + 64].split(b"\0")[0].decode()
        dt, nd, *dims = struct.unpack_from("<II4I", b, at + 64)
        at += 88
        cnt = int(np.prod(dims))
        typ = {1: "<f4", 2: "<i4", 3: "<f2", 4: "u1"}[dt]
        out[name] = np.frombuffer(b, typ, cnt, at).reshape(dims[:nd] if nd else [cnt])
        at += cnt * np.dtype(typ).itemsize
    return out


def test_onnx_two_outputs_through_the_daemon(client):
    """tests/onnx/fixtures/mio.onnx (gen_onnx_multi.py): two inputs packed,
    two outputs with a loss each from TrainConfig.outputs; one epoch of SGD
    is PyTorch's (the epoch loss: the mean of its 6 steps' losses), and the
    History carries each output's loss under its ONNX name"""
    from test_keras_multi import ROOT
    fix = os.path.join(ROOT, "tests", "onnx", "fixtures")
    ref = _rtrf(os.path.join(fix, "mio_ref.bin"))
    with open(os.path.join(fix, "mio.onnx"), "rb") as f:
        onnx = f.read()
    heads, hw = ref["heads"].reshape(-1, 2), ref["head_w"]
    outputs = [{"loss": "mse" if k else "sparse_categorical_crossentropy",
                "from_logits": bool(fl), "weight": float(w), "metrics": ["mae"] if k else []}
               for (k, fl), w in zip(heads, hw)]
    x, y = np.ascontiguousarray(ref["x"]), np.ascontiguousarray(ref["y"])
    n, steps = len(y), len(ref["sgd/loss"])
    prog = client._compile(onnx, {"optimizer": "sgd", "learning_rate": float(ref["lr"][0]),
                                  "momentum": 0.9, "batch_size": n // steps, "shuffle": False,
                                  "outputs": outputs})
    ds = client._upload(x, y, "mio")["id"]
    hist, timings = {}, []
    assert prog.fit(ds, None, 1, steps, 0, 0, hist, timings) == "done"
    assert hist["loss"][0] == pytest.approx(float(np.mean(ref["sgd/loss"])), rel=1e-5)
    assert set(hist) >= {"cls_loss", "reg_loss", "reg_mae"}
    assert hist["loss"][0] == pytest.approx(hist["cls_loss"][0] + hw[1] * hist["reg_loss"][0],
                                            rel=1e-6)
    # TrainConfig.outputs must give one entry per output
    with pytest.raises(ValueError, match="TrainConfig.outputs has 1 entries"):
        client._compile(onnx, {"outputs": outputs[:1]})
