"""Keras metrics besides accuracy through the Python client: compile
metrics=[...], fit's history and evaluate, checked against NumPy
computations of Keras' definitions from predict()'s outputs."""
import numpy as np

import rtrain
from rtrain import layers as L


def auc_roc(p, y):
    """Keras' AUC(): ROC over 200 thresholds, trapezoidal sum."""
    th = np.concatenate([[-1e-7], np.arange(1, 199) / 199.0, [1 + 1e-7]])
    pos, neg = (y != 0).sum(), (y == 0).sum()
    tp = np.array([((p > t) & (y != 0)).sum() for t in th]) / pos
    fp = np.array([((p > t) & (y == 0)).sum() for t in th]) / neg
    return float(np.sum((fp[:-1] - fp[1:]) * (tp[:-1] + tp[1:]) / 2))


def test_multilabel_metrics(client):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(96, 5)).astype(np.float32)
    y = (x[:, :3] + 0.3 * rng.normal(size=(96, 3)) > 0).astype(np.float32)
    m = rtrain.Sequential([L.Dense(8, activation="relu", input_shape=(5,)),
                           L.Dense(3, activation="sigmoid")])
    m.compile(optimizer=rtrain.optimizers.Adam(0.05), loss="binary_crossentropy",
              metrics=["auc", "precision", "recall", "mae", "rmse"])
    h = m.fit(x, y, epochs=3, batch_size=16, verbose=0)
    for k in ("auc", "precision", "recall", "mae", "rmse"):
        assert len(h.history[k]) == 3, k
    d = m.evaluate(x, y, return_dict=True)
    p = m.predict(x)
    pb = p > 0.5
    tp = (pb & (y != 0)).sum()
    assert abs(d["precision"] - tp / pb.sum()) < 1e-6
    assert abs(d["recall"] - tp / (y != 0).sum()) < 1e-6
    assert abs(d["mae"] - np.abs(p - y).mean()) < 1e-5
    assert abs(d["rmse"] - np.sqrt(((p - y) ** 2).mean())) < 1e-5
    assert abs(d["auc"] - auc_roc(p.ravel(), y.ravel())) < 1e-6
    assert d["auc"] > 0.8
    assert m.metrics_names == ["loss", "auc", "precision", "recall", "mae", "rmse"]


def test_saved_loss_and_tfjs_wrapper(client):
    """A Keras 3 JSON with compile_config compiles with no loss argument;
    a TF.js model.json wrapping the same model is accepted too."""
    import json
    model = {"class_name": "Sequential", "config": {"name": "s", "layers": [
        {"class_name": "InputLayer", "config": {"batch_shape": [None, 4], "name": "x"}},
        {"class_name": "Dense", "config": {"name": "d", "units": 3, "activation": "softmax"}}]},
        "compile_config": {"loss": {"module": "keras.losses", "class_name": "CategoricalCrossentropy",
                                    "config": {"from_logits": False}},
                           "optimizer": "adam", "metrics": ["accuracy"]}}
    rng = np.random.default_rng(0)
    x = rng.normal(size=(30, 4)).astype(np.float32)
    y = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 30)]
    m = client.compile(json.dumps(model), metrics=["accuracy"])
    assert m.evaluate(x, y)[0] > 0
    tfjs = {"format": "layers-model", "modelTopology": {"model_config": model},
            "weightsManifest": []}
    m2 = client.compile(json.dumps(tfjs), metrics=["accuracy"])
    assert abs(m2.evaluate(x, y)[0] - m.evaluate(x, y)[0]) < 1e-6
