"""Keras models with two inputs and two outputs through rtrain's Python API
and rtraind, held to TensorFlow.js: tests/keras_import/tfjs/multi_*.json
(gen_tfjs_fixtures.js --multi) hold tfjs' predictions, Keras' weighted
total loss (sum of loss_weight * loss over the outputs,
keras/src/trainers/compile_utils.py) and the weights after 3 SGD steps,
from the initial weights the daemon draws for the model with seed 1.

The data follow test_keras_tfjs.c's rules for several inputs and outputs.
"""
import json
import os

import numpy as np
import pytest

import rtrain
from rtrain import layers as L
from rtrain import models

ROOT = os.environ.get("RT_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))


def _mix(x):
    x = np.asarray(x, dtype=np.uint64) & 0xffffffff
    x ^= x >> 16
    x = (x * 0x7feb352d) & 0xffffffff
    x ^= x >> 15
    x = (x * 0x846ca68b) & 0xffffffff
    x ^= x >> 16
    return x


def _fixture(name):
    with open(os.path.join(ROOT, "tests", "keras_import", "tfjs", "multi_%s.json" % name)) as f:
        fx = json.load(f)
    with open(os.path.join(ROOT, fx["model"])) as f:
        return fx, f.read()


def _data(fx):
    n = fx["n"]
    xs = []
    index = fx.get("index") or [0] * len(fx["inputs"])  # an Embedding's: indices below it
    for k, shape in enumerate(fx["inputs"]):
        per = int(np.prod(shape))
        h = _mix(np.arange(n * per, dtype=np.uint64) ^ (0x5eed0001 + k))
        v = h % index[k] if index[k] else ((h >> 22).astype(np.int64) - 512) / 512.0
        xs.append(v.astype(np.float32).reshape([n] + shape))
    ys = []
    for k, hd in enumerate(fx["heads"]):
        dims, c = hd["dims"], hd["dims"][-1]
        per = int(np.prod(dims))
        if hd["labels"] == "sparse":
            h = _mix(np.arange(n * per // c, dtype=np.uint64) ^ (0x1abe1000 + k))
            ys.append((h % c).astype(np.int64).reshape([n] + dims[:-1]))
        elif hd["labels"] == "onehot":
            h = _mix(np.arange(n * per // c, dtype=np.uint64) ^ (0x1abe1000 + k))
            ys.append(np.eye(c, dtype=np.float32)[(h % c).astype(np.int64)]
                      .reshape([n] + dims))
        else:
            h = _mix(np.arange(n * per, dtype=np.uint64) ^ (0x1abe1000 + k))
            v = (h >> 31) if hd["labels"] == "binary" else (h >> 22) / 1024.0
            ys.append(v.astype(np.float32).reshape([n] + dims))
    return xs, ys


def _sampled(v):
    v = np.asarray(v, dtype=np.float32).reshape(-1)
    if v.size <= 64:
        return v
    s = v.size // 64
    return np.array([v[k * v.size // 64 + (k * 131) % s] for k in range(64)])


def _check_weights(model, fx_weights):
    by = {w["name"]: w for w in fx_weights}
    for (name, _, _), w in zip(model.compiled.report["params"], model.get_weights()):
        want = by[name]
        got, ref = _sampled(w), np.array(want["values"])
        # 1e-4 relative to the larger of the element and the parameter's RMS
        tol = 1e-4 * np.maximum(np.abs(ref), want["rms"])
        assert (np.abs(got - ref) <= tol).all(), (name, got, ref)


@pytest.mark.parametrize("name,as_dict", [("two_heads_dict", True), ("two_heads_list", False)])
def test_against_tfjs(client, name, as_dict):
    fx, text = _fixture(name)
    model = models.model_from_json(text)
    ins = [nm for nm, _ in model._io()[0]]
    outs = [nm for nm, _ in model._io()[1]]
    assert len(ins) == 2 and len(outs) == 2
    cc = json.loads(text)["compile_config"]
    # the losses and weights as a notebook gives them: a dict by output
    # name, or a list in output order (the saved file holds the other form)
    loss = cc["loss"] if isinstance(cc["loss"], dict) else dict(zip(outs, cc["loss"]))
    weights = cc["loss_weights"] if isinstance(cc["loss_weights"], dict) \
        else dict(zip(outs, cc["loss_weights"]))
    if not as_dict:
        loss, weights = [loss[o] for o in outs], [weights[o] for o in outs]
    model.compile(optimizer=rtrain.optimizers.SGD(fx["sgd"]["lr"]), loss=loss,
                  loss_weights=weights, batch_size=fx["batch"], shuffle=False, seed=1,
                  client=client)
    xs, ys = _data(fx)
    x = dict(zip(ins, xs)) if as_dict else xs
    y = dict(zip(outs, ys)) if as_dict else ys
    _check_sgd(model, fx, x, y)


def _check_sgd(model, fx, x, y):
    """predictions, evaluate loss, one epoch of 3 SGD steps and the
    weights after it, against the fixture"""
    pred = model.predict(x)
    assert isinstance(pred, list) and len(pred) == 2
    for k, p in enumerate(pred):
        assert p.shape == (fx["n"],) + tuple(fx["heads"][k]["dims"])
        want = np.array(fx["predict"]["values"][k], dtype=np.float32)
        np.testing.assert_allclose(p[:fx["predict"]["rows"]].reshape(-1), want, rtol=1e-5,
                                   atol=1e-7)
    # the total loss (with each output's own beside it where reported)
    ev = model.evaluate(x, y, return_dict=True)["loss"]
    assert ev == pytest.approx(fx["evaluate"]["loss"], rel=1e-5)
    h = model.fit(x, y, epochs=1, batch_size=fx["batch"], shuffle=False, verbose=0)
    # Keras' epoch loss: the mean of the 3 batches' (equal-sized) losses
    assert h.history["loss"][0] == pytest.approx(np.mean(fx["sgd"]["losses"]), rel=1e-5)
    _check_weights(model, fx["sgd"]["weights"])


def test_functional_api_and_errors(client):
    a = L.Input(shape=(3,), name="a")
    b = L.Input(shape=(2,), name="b")
    j = L.Concatenate(name="j")([L.Dense(4, activation="relu", name="da")(a),
                                 L.Dense(4, activation="relu", name="db")(b)])
    o1 = L.Dense(3, activation="softmax", name="o1")(j)
    o2 = L.Dense(1, name="o2")(j)
    m = rtrain.Model([a, b], [o1, o2])
    assert m.input_shape == [(None, 3), (None, 2)]
    assert m.output_shape == [(None, 3), (None, 1)]
    cfg = m.get_config()
    assert cfg["input_layers"] == [["a", 0, 0], ["b", 0, 0]]
    assert cfg["output_layers"] == [["o1", 0, 0], ["o2", 0, 0]]
    with pytest.raises(ValueError, match="not an output"):
        m.compile("sgd", loss={"o1": "sparse_categorical_crossentropy", "o3": "mse"},
                  client=client)
    with pytest.raises(ValueError, match="has no loss"):
        m.compile("sgd", loss={"o1": "sparse_categorical_crossentropy"}, client=client)
    # one flat list for two outputs: Keras 3 refuses it too (compile_utils.py
    # _build_metrics_set); a build without per-output metrics refuses any
    with pytest.raises(ValueError, match="metrics of a model with"):
        m.compile("sgd", loss=["sparse_categorical_crossentropy", "mse"],
                  metrics=["accuracy"], client=client)
    # the loss check runs per output: logits read from a softmax head
    with pytest.raises(rtrain.InvalidArgument, match="o1"):
        m.compile("sgd", loss=["categorical_crossentropy", "mse"], from_logits=True,
                  client=client)
    m.compile("sgd", loss=["sparse_categorical_crossentropy", "mse"], client=client)
    x = [np.zeros((5, 3), np.float32), np.zeros((5, 2), np.float32)]
    with pytest.raises(ValueError, match="class indices"):
        m.fit(x, [np.full(5, 3), np.zeros((5, 1))], verbose=0)
    with pytest.raises(ValueError, match="needs a list or dict"):
        m.predict(x[0])
    with pytest.raises(ValueError, match="no array for 'b'"):
        m.predict({"a": x[0]})
    h = m.fit(x, [np.zeros(5), np.zeros((5, 1))], epochs=2, verbose=0)
    assert len(h.history["loss"]) == 2 and np.isfinite(h.history["loss"]).all()
