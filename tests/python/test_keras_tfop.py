"""Keras 2's CuDNNLSTM/CuDNNGRU and tf.keras' recorded TensorFlow ops
(TensorFlowOpLayer, TFOpLambda with a constant first argument) through
Python's rtrain.models.model_from_json, held to the references the C
importer's tests use:

- tests/keras_import/cudnn/cudnn_ref.json (gen_cudnn_fixtures.py):
  torch.nn.LSTM / GRU's outputs, MSE loss and weight gradients;
- tests/keras_import/tfop/tfop_ref.json (gen_tfop_fixtures.py): NumPy
  transcriptions of the TensorFlow ops, and finite-difference gradients of
  a Dense layer before them.

Each model is read by model_from_json, written back by to_json (which the
daemon's importer reads, as the CLI's --model does), given the fixture's
weights by name, and must predict the reference output, evaluate its loss
and take one SGD step to w - lr * grad. What either reader refuses is
refused here too, naming it. An LSTM masked by tf.math.not_equal(x, 0)
(TFOpLambda) must predict and train as its Embedding(mask_zero=True) twin,
as test_keras3.c holds the C importer to.
"""
import json
import os

import numpy as np
import pytest

import rtrain
from rtrain import models

SRC = os.environ.get("RT_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
LR = 0.1


def cases(rel):
    with open(os.path.join(SRC, "tests", "keras_import", rel)) as f:
        return [(rel, c) for c in json.load(f)["cases"]]


ALL = cases("cudnn/cudnn_ref.json") + cases("tfop/tfop_ref.json")


def close(got, want, tol, what):
    got, want = np.asarray(got, np.float64).ravel(), np.asarray(want, np.float64).ravel()
    assert got.shape == want.shape, what
    err = np.abs(got - want) / np.maximum(1.0, np.abs(want))
    assert err.max() <= tol, "%s: max relative error %g at %d" % (what, err.max(), err.argmax())


@pytest.mark.parametrize("rel,case", ALL, ids=[c["name"] for _, c in ALL])
def test_fixture_through_python(client, rel, case):
    m = models.model_from_json(case["model"])
    js = m.to_json()
    assert models.model_from_json(js).to_json() == js
    B = case["batch"]
    m.compile(optimizer=rtrain.optimizers.SGD(learning_rate=LR), loss="mse",
              batch_size=B, shuffle=False, seed=7, label_shape=case["out_dims"],
              client=client)
    named = m.get_named_weights()
    # Python's weights are the daemon's: Keras' names and shapes (a CuDNN
    # layer's flat bias of 2 * gates * units)
    specs = m.weight_specs()
    assert [(n, tuple(s)) for n, s, _ in specs] == \
        [(n, named[n].shape) for n, _, _ in specs]
    assert sorted(n for n, _, t in specs if t) == sorted(case["weights"])
    if "cudnn" in rel:
        assert all(named[n].ndim == 1 for n in named if n.endswith("/bias"))
    w0 = {n: np.asarray(v, np.float32).reshape(named[n].shape)
          for n, v in case["weights"].items()}
    # Keras' weights: the recorded ops' constants are the daemon's only
    # (frozen), kept by set_weights
    m.set_weights(w0)
    assert [w.shape for w in m.get_weights()] == [named[n].shape for n in named if n in w0]
    in_shape = m.input_shape[1:]
    x = np.asarray(case["x"], np.float32).reshape((B,) + tuple(in_shape))
    y = np.asarray(case["labels"], np.float32).reshape([B] + case["out_dims"])
    close(m.predict(x, batch_size=B, verbose=0), case["output"], 1e-5, "predict")
    loss = m.evaluate(x, y, batch_size=B, verbose=0)
    close(loss if np.isscalar(loss) else loss[0], case["loss"], 1e-5, "loss")
    m.fit(x, y, batch_size=B, epochs=1, shuffle=False, verbose=0)
    after = m.get_named_weights()
    for n, g in case["grads"].items():
        want = w0[n].ravel().astype(np.float64) - LR * np.asarray(g, np.float64)
        close(after[n], want, 1e-5, "SGD " + n)


def first(rel, name):
    return json.loads(next(c["model"] for r, c in ALL if r == rel and c["name"] == name))


def test_refused_by_name():
    """What the C importer refuses by name, Python's reader refuses too."""
    doc = first("tfop/tfop_ref.json", "TFOpLambda constant first")
    doc["config"]["layers"][1]["config"]["function"] = "math.log"
    with pytest.raises(ValueError, match="TFOpLambda 'math.log'"):
        models.model_from_json(json.dumps(doc))
    doc = first("tfop/tfop_ref.json", "TensorFlowOpLayer reductions and shapes")
    for ly in doc["config"]["layers"]:
        if ly["class_name"] == "TensorFlowOpLayer" and ly["config"]["node_def"]["op"] == "Sum":
            ly["config"]["node_def"]["op"] = "Cumprod"
    with pytest.raises(ValueError, match="op 'Cumprod'"):
        models.model_from_json(json.dumps(doc))
    # Max, Min and Prod over the batch, as Mean and Sum
    doc = first("tfop/tfop_ref.json", "TensorFlowOpLayer Abs, Log, Max, Min, Prod")
    for op in ("Max", "Min", "Prod"):
        d = json.loads(json.dumps(doc))
        ly = next(ly for ly in d["config"]["layers"] if ly["name"] == "tf_op_layer_%s_1" % op)
        ly["config"]["constants"]["1"] = [0]
        with pytest.raises(ValueError, match="%s: reduction_indices" % op):
            models.model_from_json(json.dumps(d))
    doc = first("cudnn/cudnn_ref.json", "CuDNNGRU sequences")
    doc["config"]["layers"][0]["config"]["dropout"] = 0.2
    with pytest.raises(ValueError, match="CuDNNGRU has no setting 'dropout'"):
        models.model_from_json(json.dumps(doc))
    del doc["config"]["layers"][0]["config"]["dropout"]
    doc["config"]["layers"][0]["config"]["unit_forget_bias"] = True
    with pytest.raises(ValueError, match="CuDNNGRU has no setting 'unit_forget_bias'"):
        models.model_from_json(json.dumps(doc))


def test_refused_by_daemon(client):
    """What only the importer checks (an op's attrs) is refused at compile,
    naming it, and the daemon serves on."""
    doc = first("tfop/tfop_ref.json", "TensorFlowOpLayer reductions and shapes")
    for ly in doc["config"]["layers"]:
        if ly["name"] == "tf_op_layer_LeakyRelu_1":
            ly["config"]["node_def"]["attr"]["data_format"] = {"s": "NHWC"}
    m = models.model_from_json(json.dumps(doc))
    with pytest.raises(Exception, match="LeakyRelu attr 'data_format'"):
        m.compile(optimizer="sgd", loss="mse", batch_size=3, label_shape=(3, 4),
                  client=client)
    bad = next(ly for ly in doc["config"]["layers"] if ly["name"] == "tf_op_layer_Reshape_1")
    bad["config"]["constants"]["1"] = [-1, 3, 5]
    with pytest.raises(ValueError, match="15 values per sample"):
        models.model_from_json(json.dumps(doc))
    ok = models.model_from_json(first("tfop/tfop_ref.json", "TFOpLambda constant first"))
    ok.compile(optimizer="sgd", loss="mse", batch_size=3, label_shape=(2, 3), client=client)
    assert ok.predict(np.zeros((3, 2, 3), np.float32), batch_size=3, verbose=0).shape == (3, 2, 3)


def mask_model(mask_zero, tfop):
    """test_keras3.c's mask_model: Embedding -> LSTM, the LSTM's mask
    tf.math.not_equal(x, 0) as tf.keras 2.11 writes it (a TFOpLambda whose
    first argument is the node entry, y a keyword; the LSTM's mask a
    keyword of its node), or Embedding(mask_zero)'s own"""
    layers = [{"class_name": "InputLayer", "name": "x", "inbound_nodes": [],
               "config": {"batch_input_shape": [None, 5], "dtype": "float32", "name": "x"}},
              {"class_name": "Embedding", "name": "e", "inbound_nodes": [[["x", 0, 0, {}]]],
               "config": {"name": "e", "input_dim": 10, "output_dim": 3,
                          "mask_zero": mask_zero}}]
    if tfop:
        layers.append({"class_name": "TFOpLambda", "name": "tf.math.not_equal",
                       "config": {"name": "tf.math.not_equal", "trainable": True,
                                  "dtype": "float32", "function": "math.not_equal"},
                       "inbound_nodes": [["x", 0, 0, {"y": 0, "name": None}]]})
    layers.append({"class_name": "LSTM", "name": "l", "config": {"name": "l", "units": 2},
                   "inbound_nodes": [[["e", 0, 0, {"mask": ["tf.math.not_equal", 0, 0]}
                                       if tfop else {}]]]})
    return json.dumps({"class_name": "Functional", "keras_version": "2.11.0",
                       "backend": "tensorflow",
                       "config": {"name": "m", "layers": layers, "input_layers": [["x", 0, 0]],
                                  "output_layers": [["l", 0, 0]]}})


def test_not_equal_mask(client):
    """An LSTM masked by tf.math.not_equal(x, 0) reads as the C importer
    reads it: what Embedding(mask_zero=True) gives (Keras' RNN.call takes
    either mask), and unlike the unmasked model."""
    rec = models.model_from_json(mask_model(False, True))
    js = rec.to_json()
    assert models.model_from_json(js).to_json() == js
    assert '"mask": ["tf.math.not_equal", 0, 0]' in js
    implicit = models.model_from_json(mask_model(True, False))
    plain = models.model_from_json(mask_model(False, False))
    x = np.array([[1, 2, 0, 3, 0], [0, 0, 4, 5, 6], [7, 8, 9, 1, 2], [3, 0, 0, 0, 0]],
                 np.float32)
    y = np.linspace(-1, 1, 8, dtype=np.float32).reshape(4, 2)
    for m in (implicit, rec, plain):
        m.compile(optimizer=rtrain.optimizers.SGD(learning_rate=LR), loss="mse",
                  batch_size=4, shuffle=False, label_shape=(2,), client=client)
    w = implicit.get_weights()
    rec.set_weights(w)
    plain.set_weights(w)
    want = implicit.predict(x, batch_size=4, verbose=0)
    close(rec.predict(x, batch_size=4, verbose=0), want, 1e-6, "masked predict")
    assert np.abs(plain.predict(x, batch_size=4, verbose=0) - want).max() > 1e-3
    for m in (implicit, rec):
        m.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    for a, b in zip(rec.get_weights(), implicit.get_weights()):
        close(a, b, 1e-6, "masked SGD step")


def test_not_equal_mask_refused():
    """not_equal is read as a step mask only"""
    doc = json.loads(mask_model(False, True))
    doc["config"]["layers"][2]["inbound_nodes"] = [["e", 0, 0, {"y": 0, "name": None}]]
    with pytest.raises(ValueError, match="read as a step mask"):
        models.model_from_json(json.dumps(doc))
    doc = json.loads(mask_model(False, True))
    doc["config"]["layers"][3]["inbound_nodes"] = [[["e", 0, 0, {"mask": ["x", 0, 0]}]]]
    with pytest.raises(ValueError, match="LSTM mask: a tensor of tf.math.not_equal"):
        models.model_from_json(json.dumps(doc))
    # a layer that would drop it is refused rather than trained unmasked
    doc = json.loads(mask_model(False, True))
    doc["config"]["layers"][3] = {
        "class_name": "Bidirectional", "name": "b", "inbound_nodes": [[["e", 0, 0, {
            "mask": ["tf.math.not_equal", 0, 0]}]]],
        "config": {"name": "b", "layer": {"class_name": "LSTM",
                                          "config": {"name": "l", "units": 2}}}}
    doc["config"]["output_layers"] = [["b", 0, 0]]
    with pytest.raises(ValueError, match="mask tensor argument is read for SimpleRNN"):
        models.model_from_json(json.dumps(doc))
