"""Keras 3's .keras zip through rtrain.models.load_model and model.save.

The layout, as keras/src/saving/saving_lib.py (keras-team/keras) writes
it: a zip of metadata.json, config.json (serialize_keras_object of the
model, with build_config and compile_config) and model.weights.h5, where
a layer's variables are the datasets "0", "1", ... of
layers/<snake case of its class, numbered in model.layers order>/vars
(Layer.save_own_variables: trainable variables, then the others), a
recurrent layer's in its cell (layers/lstm/cell/vars).

* tests/fixtures/keras3-zip/diabetes_detection.keras was written by Keras
  3.5.0 (see its README): its predictions are checked against a NumPy
  forward pass over the variables read here with h5py, by Keras' layer
  formulas (Dense, BatchNormalization at inference, Dropout as identity).
* a file this test writes with h5py and json following that layout (two
  inputs, an LSTM, BatchNormalization, two outputs, a compile_config with
  per-output losses, loss_weights and a scheduled SGD) loads with its
  weights and compile settings; a NumPy forward pass (Keras' LSTM gate
  order i, f, c, o: keras/src/layers/rnn/lstm.py) checks the predictions.
* model.save("m.keras") writes that layout (read back here with zipfile and
  h5py), and a reload keeps everything compile set (also for Keras 2's h5).
"""
import io
import json
import os
import zipfile

import h5py
import numpy as np
import pytest

import rtrain
from rtrain import layers as L
from rtrain import models, saving

ROOT = os.environ.get("RT_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
REAL = os.path.join(ROOT, "tests", "fixtures", "keras3-zip", "diabetes_detection.keras")


def _vars(path_or_bytes):
    """{group path: [arrays "0", "1", ...]} of a .keras file's weights."""
    with zipfile.ZipFile(path_or_bytes) as zf:
        data = zf.read("model.weights.h5")
    out = {}
    with h5py.File(io.BytesIO(data), "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Group) and name.endswith("/vars") or name == "vars":
                out[name[:-len("/vars")] if name != "vars" else ""] = [
                    np.asarray(obj[str(i)]) for i in range(len(obj))]
        f.visititems(visit)
    return out


def _relu(v):
    return np.maximum(v, 0)


def _sigmoid(v):
    return 1 / (1 + np.exp(-v))


def _bn(h, g, b, mean, var, eps=1e-3):
    return (h - mean) / np.sqrt(var + eps) * g + b


def test_real_keras3_file(client):
    v = _vars(REAL)
    x = np.random.RandomState(0).uniform(-2, 2, (16, 4)).astype(np.float32)
    h = x.astype(np.float64)
    h = _bn(_relu(h @ v["layers/dense"][0] + v["layers/dense"][1]),
            *v["layers/batch_normalization"])
    h = _bn(_relu(h @ v["layers/dense_1"][0] + v["layers/dense_1"][1]),
            *v["layers/batch_normalization_1"])
    want = _sigmoid(h @ v["layers/dense_2"][0] + v["layers/dense_2"][1])
    m = models.load_model(REAL, compile=False)
    assert m.compiled is None
    assert [layer.name for layer in m.layers] == [
        "dense_6", "batch_normalization_4", "dropout_4", "dense_7",
        "batch_normalization_5", "dropout_5", "dense_8"]
    m.compile("adam", "binary_crossentropy", client=client)
    np.testing.assert_allclose(m.predict(x), want, rtol=1e-5, atol=1e-6)
    # compile=True: the file's compile_config (Adam over CosineDecay, the
    # loss and the metrics accuracy, Precision, Recall)
    m2 = models.load_model(REAL, client=client)
    opt = m2.optimizer
    assert isinstance(opt, rtrain.optimizers.Adam)
    assert isinstance(opt.schedule, rtrain.optimizers.CosineDecay)
    assert (opt.schedule.decay_steps, opt.schedule.alpha) == (1000, 0.01)
    assert m2.metrics_names == ["loss", "accuracy", "precision", "recall"]
    np.testing.assert_allclose(m2.predict(x), want, rtol=1e-5, atol=1e-6)


# ------------------------------------------------- an independent writer

def _tensor(src, shape):
    return {"class_name": "__keras_tensor__",
            "config": {"shape": [None] + shape, "dtype": "float32",
                       "keras_history": [src, 0, 0]}}


def _policy():
    return {"module": "keras", "class_name": "DTypePolicy", "config": {"name": "float32"},
            "registered_name": None}


def _init(cls, **cfg):
    return {"module": "keras.initializers", "class_name": cls, "config": cfg,
            "registered_name": None}


def _layer(cls, name, cfg, inbound, in_shape):
    c = {"name": name, "trainable": True, "dtype": _policy()}
    c.update(cfg)
    return {"module": "keras.layers", "class_name": cls, "config": c, "registered_name": None,
            "build_config": {"input_shape": in_shape}, "name": name,
            "inbound_nodes": [{"args": inbound, "kwargs": {}}]}


def _input(name, shape):
    return {"module": "keras.layers", "class_name": "InputLayer",
            "config": {"batch_shape": [None] + shape, "dtype": "float32", "sparse": False,
                       "name": name},
            "registered_name": None, "name": name, "inbound_nodes": []}


def _dense_cfg(units, act):
    return {"units": units, "activation": act, "use_bias": True,
            "kernel_initializer": _init("GlorotUniform", seed=None),
            "bias_initializer": _init("Zeros"), "kernel_regularizer": None,
            "bias_regularizer": None, "kernel_constraint": None, "bias_constraint": None}


def _write_keras3(path, w):
    """A two-input, two-output Functional model in Keras 3's .keras layout."""
    layers = [
        _input("in_a", [4]),
        _input("in_b", [3, 6]),
        _layer("Dense", "feat", _dense_cfg(6, "relu"), [_tensor("in_a", [4])], [None, 4]),
        _layer("LSTM", "seq", {
            "return_sequences": False, "return_state": False, "go_backwards": False,
            "stateful": False, "unroll": False, "zero_output_for_mask": False, "units": 5,
            "activation": "tanh", "recurrent_activation": "sigmoid", "use_bias": True,
            "kernel_initializer": _init("GlorotUniform", seed=None),
            "recurrent_initializer": _init("Orthogonal", gain=1.0, seed=None),
            "bias_initializer": _init("Zeros"), "unit_forget_bias": True,
            "kernel_regularizer": None, "recurrent_regularizer": None,
            "bias_regularizer": None, "activity_regularizer": None,
            "kernel_constraint": None, "recurrent_constraint": None,
            "bias_constraint": None, "dropout": 0.0, "recurrent_dropout": 0.0,
            "seed": None}, [_tensor("in_b", [3, 6])], [None, 3, 6]),
        _layer("Concatenate", "join", {"axis": -1},
               [[_tensor("feat", [6]), _tensor("seq", [5])]], [[None, 6], [None, 5]]),
        _layer("BatchNormalization", "norm", {
            "axis": -1, "momentum": 0.99, "epsilon": 0.001, "center": True, "scale": True,
            "beta_initializer": _init("Zeros"), "gamma_initializer": _init("Ones"),
            "moving_mean_initializer": _init("Zeros"),
            "moving_variance_initializer": _init("Ones"), "beta_regularizer": None,
            "gamma_regularizer": None, "beta_constraint": None, "gamma_constraint": None,
            "synchronized": False}, [_tensor("join", [11])], [None, 11]),
        _layer("Dense", "out1", _dense_cfg(3, "softmax"), [_tensor("norm", [11])], [None, 11]),
        _layer("Dense", "out2", _dense_cfg(1, "linear"), [_tensor("norm", [11])], [None, 11]),
    ]
    doc = {"module": "keras.src.models.functional", "class_name": "Functional",
           "config": {"name": "two_heads", "trainable": True, "layers": layers,
                      "input_layers": [["in_a", 0, 0], ["in_b", 0, 0]],
                      "output_layers": [["out1", 0, 0], ["out2", 0, 0]]},
           "registered_name": "Functional",
           "build_config": {"input_shape": None},
           "compile_config": {
               "optimizer": {"module": "keras.optimizers", "class_name": "SGD", "config": {
                   "name": "SGD", "learning_rate": {
                       "module": "keras.optimizers.schedules",
                       "class_name": "ExponentialDecay",
                       "config": {"initial_learning_rate": 0.1, "decay_steps": 10,
                                  "decay_rate": 0.5, "staircase": False,
                                  "name": "ExponentialDecay"},
                       "registered_name": None},
                   "weight_decay": None, "clipnorm": None, "global_clipnorm": None,
                   "clipvalue": None, "use_ema": False, "ema_momentum": 0.99,
                   "ema_overwrite_frequency": None, "loss_scale_factor": None,
                   "gradient_accumulation_steps": None, "momentum": 0.9,
                   "nesterov": False}, "registered_name": None},
               "loss": {"out1": {"module": "keras.losses",
                                 "class_name": "SparseCategoricalCrossentropy",
                                 "config": {"name": "sparse_categorical_crossentropy",
                                            "reduction": "sum_over_batch_size",
                                            "from_logits": False, "ignore_class": None},
                                 "registered_name": None},
                        "out2": "mean_squared_error"},
               "loss_weights": {"out1": 1.0, "out2": 0.25}, "metrics": None,
               "weighted_metrics": None, "run_eagerly": False, "steps_per_execution": 1,
               "jit_compile": False}}
    # model.layers order (inputs, then by depth): the h5 names
    groups = {"layers/dense": w["feat"], "layers/lstm/cell": w["seq"],
              "layers/batch_normalization": w["norm"], "layers/dense_1": w["out1"],
              "layers/dense_2": w["out2"]}
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        for empty in ("layers/input_layer", "layers/input_layer_1", "layers/concatenate",
                      "layers/lstm"):
            f.create_group(empty + "/vars")
        for g, arrays in groups.items():
            vg = f.create_group(g + "/vars")
            for i, a in enumerate(arrays):
                vg.create_dataset(str(i), data=a)
        opt = f.create_group("optimizer/vars")  # Keras' optimizer state: ignored
        opt.create_dataset("0", data=np.int64(7))
        f.create_group("vars")
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("metadata.json", json.dumps({"keras_version": "3.5.0",
                                                 "date_saved": "2026-01-01@00:00:00"}))
        zf.writestr("config.json", json.dumps(doc))
        zf.writestr("model.weights.h5", buf.getvalue())


def _lstm(x, k, r, b):
    u = r.shape[0]
    h = np.zeros((x.shape[0], u))
    c = np.zeros((x.shape[0], u))
    for t in range(x.shape[1]):
        z = x[:, t] @ k + h @ r + b
        i, f, g, o = (z[:, j * u:(j + 1) * u] for j in range(4))
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
    return h


def test_keras3_layout_written_independently(client, tmp_path):
    rng = np.random.RandomState(1)

    def r(*s):
        return rng.uniform(-0.5, 0.5, s).astype(np.float32)
    w = {"feat": [r(4, 6), r(6)], "seq": [r(6, 20), r(5, 20), r(20)],
         "norm": [1 + r(11), r(11), r(11), 1 + np.abs(r(11))],
         "out1": [r(11, 3), r(3)], "out2": [r(11, 1), r(1)]}
    p = str(tmp_path / "two.keras")
    _write_keras3(p, w)
    m = models.load_model(p, client=client)
    got = m.get_named_weights()
    names = {"feat": ["kernel", "bias"], "seq": ["kernel", "recurrent_kernel", "bias"],
             "norm": ["gamma", "beta", "moving_mean", "moving_variance"],
             "out1": ["kernel", "bias"], "out2": ["kernel", "bias"]}
    for layer, ws in names.items():
        for n, a in zip(ws, w[layer]):
            assert np.array_equal(got["%s/%s" % (layer, n)], a), (layer, n)
    opt = m.optimizer
    assert isinstance(opt, rtrain.optimizers.SGD) and opt.momentum == 0.9
    assert isinstance(opt.schedule, rtrain.optimizers.ExponentialDecay)
    xa, xb = r(9, 4), r(9, 3, 6)
    h = np.concatenate([_relu(xa @ w["feat"][0] + w["feat"][1]), _lstm(xb, *w["seq"])], 1)
    h = _bn(h, *w["norm"])
    z = h @ w["out1"][0] + w["out1"][1]
    p1 = np.exp(z - z.max(1, keepdims=True))
    p1 /= p1.sum(1, keepdims=True)
    p2 = h @ w["out2"][0] + w["out2"][1]
    o1, o2 = m.predict({"in_a": xa, "in_b": xb})
    np.testing.assert_allclose(o1, p1, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(o2, p2, rtol=1e-5, atol=1e-6)
    # the compile_config's losses and loss_weights: Keras' total loss
    y1, y2 = rng.randint(0, 3, 9), r(9, 1)
    want = -np.mean(np.log(p1[np.arange(9), y1])) + 0.25 * np.mean((p2 - y2) ** 2)
    assert m.evaluate([xa, xb], [y1, y2], return_dict=True)["loss"] == \
        pytest.approx(want, rel=1e-5)


def test_refuses_what_it_cannot_read(tmp_path):
    p = str(tmp_path / "npz.keras")
    with zipfile.ZipFile(p, "w") as zf:
        zf.writestr("config.json", "{}")
        zf.writestr("model.weights.npz", b"")
    with pytest.raises(ValueError, match="no model.weights.h5"):
        models.load_model(p, compile=False)


# ------------------------------------------------------ save and reload

def _two_heads(client, **kw):
    a = L.Input(shape=(3,), name="a")
    b = L.Input(shape=(2,), name="b")
    j = L.Concatenate(name="j")([L.Dense(4, activation="relu", name="da")(a),
                                 L.Dense(4, activation="tanh", name="db")(b)])
    o1 = L.Dense(3, name="o1")(j)  # logits
    o2 = L.Dense(1, name="o2")(j)
    m = rtrain.Model([a, b], [o1, o2], name="heads")
    m.compile(client=client, **kw)
    return m


def test_save_reload_keeps_compile(client, tmp_path):
    S = rtrain.optimizers.schedules
    opt = rtrain.optimizers.Adam(learning_rate=S.PiecewiseConstantDecay([3], [0.05, 0.01]),
                                 beta_1=0.8, clipnorm=2.0)
    m = _two_heads(client, optimizer=opt,
                   loss={"o1": rtrain.losses.SparseCategoricalCrossentropy(from_logits=True),
                         "o2": "mse"},
                   loss_weights=[0.7, 0.3], batch_size=4, shuffle=False)
    rng = np.random.RandomState(2)
    x = [rng.randn(10, 3).astype(np.float32), rng.randn(10, 2).astype(np.float32)]
    y = [rng.randint(0, 3, 10), rng.randn(10, 1).astype(np.float32)]
    m.fit(x, y, epochs=1, batch_size=4, shuffle=False, verbose=0)
    k3, k2 = str(tmp_path / "m.keras"), str(tmp_path / "m.h5")
    m.save(k3)
    m.save(k2)
    # what the zip holds, read without rtrain
    with zipfile.ZipFile(k3) as zf:
        assert sorted(zf.namelist()) == ["config.json", "metadata.json", "model.weights.h5"]
        doc = json.loads(zf.read("config.json"))
        meta = json.loads(zf.read("metadata.json"))
    assert meta["keras_version"].startswith("3.")
    assert doc["class_name"] == "Functional" and doc["module"] == "keras"
    cc = doc["compile_config"]
    assert cc["loss"]["o1"]["class_name"] == "SparseCategoricalCrossentropy"
    assert cc["loss"]["o1"]["config"]["from_logits"] is True
    assert cc["loss_weights"] == {"o1": 0.7, "o2": 0.3}
    assert cc["optimizer"]["class_name"] == "Adam"
    assert cc["optimizer"]["config"]["learning_rate"]["class_name"] == "PiecewiseConstantDecay"
    j = {ld["name"]: ld for ld in doc["config"]["layers"]}
    assert j["j"]["inbound_nodes"][0]["args"][0][1]["config"]["keras_history"] == ["db", 0, 0]
    v = _vars(k3)
    named = m.get_named_weights()
    # model.layers order: a, b (inputs), da, db, j, o1, o2: Dense paths in turn
    for path, layer in (("layers/dense", "da"), ("layers/dense_1", "db"),
                        ("layers/dense_2", "o1"), ("layers/dense_3", "o2")):
        assert np.array_equal(v[path][0], named[layer + "/kernel"])
        assert np.array_equal(v[path][1], named[layer + "/bias"])
    assert v["layers/input_layer"] == [] and v["layers/concatenate"] == []
    want = saving.compile_settings(m)
    for p in (k3, k2):
        back = models.load_model(p, client=client)
        got = saving.compile_settings(back)
        assert got["loss"] == want["loss"] and got["loss_weights"] == want["loss_weights"]
        assert got["metrics"] == want["metrics"]
        assert rtrain.optimizers.serialize(got["optimizer"]) == \
            rtrain.optimizers.serialize(want["optimizer"])
        for a, b in zip(back.predict(x), m.predict(x)):
            np.testing.assert_array_equal(a, b)
        assert back.evaluate(x, y) == pytest.approx(m.evaluate(x, y), rel=1e-6)


def test_single_output_from_logits_and_metrics_survive(client, tmp_path, iris):
    xtr, ytr, xte, yte = iris
    m = rtrain.Sequential([L.Dense(8, activation="relu", input_shape=(4,)), L.Dense(3)])
    m.compile("sgd", "sparse_categorical_crossentropy", metrics=["accuracy"],
              from_logits=True, client=client)
    m.fit(xtr, ytr, epochs=2, verbose=0)
    p = str(tmp_path / "s.keras")
    m.save(p)
    back = models.load_model(p, client=client)
    assert back.metrics_names == m.metrics_names == ["loss", "accuracy"]
    assert back.evaluate(xte, yte) == pytest.approx(m.evaluate(xte, yte), rel=1e-6)


def test_multi_output_metrics_survive(client, tmp_path):
    metrics = {"o1": ["accuracy"], "o2": ["mae", "mse"]}
    loss = {"o1": rtrain.losses.SparseCategoricalCrossentropy(from_logits=True), "o2": "mse"}
    if not rtrain._PER_OUTPUT:
        # no per-output metrics in this build: refused, never saved as if
        with pytest.raises(ValueError, match="metrics of a model with"):
            _two_heads(client, optimizer="sgd", loss=loss, metrics=metrics)
        return
    m = _two_heads(client, optimizer="sgd", loss=loss, metrics=metrics,
                   loss_weights={"o1": 2.0, "o2": 1.0})
    rng = np.random.RandomState(3)
    x = [rng.randn(10, 3).astype(np.float32), rng.randn(10, 2).astype(np.float32)]
    y = [rng.randint(0, 3, 10), rng.randn(10, 1).astype(np.float32)]
    m.fit(x, y, epochs=1, verbose=0)
    want = m.evaluate(x, y, return_dict=True)
    assert sorted(want) == ["loss", "o1_accuracy", "o1_loss", "o2_loss", "o2_mae", "o2_mse"]
    for p in (str(tmp_path / "m.keras"), str(tmp_path / "m.h5")):
        m.save(p)
        back = models.load_model(p, client=client)
        assert saving.compile_settings(back)["metrics"] == {"o1": ["accuracy"],
                                                            "o2": ["mae", "mse"]}
        assert back.metrics_names == m.metrics_names
        assert back.evaluate(x, y, return_dict=True) == pytest.approx(want, rel=1e-6)
