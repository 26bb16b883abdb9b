"""Shared layers in rtrain's Functional API (a layer called more than once:
each call is one of Keras' inbound nodes, every call uses the layer's one
set of weights), through rtrain's Python API and rtraind.

References the project did not write:
- TensorFlow.js: tests/keras_import/tfjs/multi_shared_{siamese,conv,
  embedding}.json (gen_tfjs_fixtures.js --multi) hold tfjs' predictions,
  loss and weights after 3 SGD and 3 Adam steps for the Keras JSON of
  tests/fixtures/keras-multi/shared_*.json, from the initial weights the
  daemon draws with seed 1. The same models are built here with layer
  calls, and must write the JSON Keras wrote (the same inbound nodes and
  node indices, keras/engine/functional.py get_network_config) and agree
  with tfjs at keras_tfjs' tolerances (1e-5 relative on predictions and
  losses, 1e-4 on weights relative to the larger of the element and the
  parameter's RMS).
- PyTorch: a Siamese tower as one torch.nn.Linear applied to both inputs
  (autograd sums the two calls' gradients into one weight), float64.
"""
import json
import os
import zipfile

import h5py
import numpy as np
import pytest
import torch

import rtrain
from rtrain import layers as L
from rtrain import models

from test_keras_multi import _check_sgd, _check_weights, _data, _fixture


# ---------------------------------------------------------------- the models

def siamese():
    left, right = L.Input((5,), name="left"), L.Input((5,), name="right")
    tower = L.Dense(6, activation="tanh", name="tower")
    a, b = tower(left), tower(right)
    d = L.Multiply(name="diff")([a, b])
    square = L.Dense(6, activation="relu", name="square")
    s = square(square(d))  # a Dense applied to its own output
    score = L.Dense(1, activation="sigmoid", name="score")(s)
    return rtrain.Model([left, right], [score, b], name="shared_siamese")


def shared_conv():
    a, b = L.Input((6, 6, 2), name="a"), L.Input((6, 6, 2), name="b")
    conv = L.Conv2D(3, 3, padding="same", activation="relu", name="conv")
    flat = L.Flatten(name="flat")
    fa, fb = flat(conv(a)), flat(conv(b))
    cls = L.Dense(3, activation="softmax", name="cls")(L.Concatenate(name="join")([fa, fb]))
    reg = L.Dense(2, name="reg")(fb)
    return rtrain.Model([a, b], [cls, reg], name="shared_conv")


def shared_embedding():
    enc, dec = L.Input((5,), name="encoder_in"), L.Input((4,), name="decoder_in")
    embed = L.Embedding(20, 6, name="embed", embeddings_initializer={
        "class_name": "RandomUniform", "config": {"minval": -1.0, "maxval": 1.0, "seed": None}})
    # the fixture's LSTMs have no recurrent_initializer: Keras' default,
    # Orthogonal, which is the builder's too
    e = L.LSTM(8, name="encoder")(embed(enc))
    d = L.LSTM(8, name="decoder")(embed(dec))
    out = L.Dense(20, activation="softmax", name="next_word")(
        L.Concatenate(name="join")([e, d]))
    return rtrain.Model([enc, dec], [out, d], name="shared_embedding")


BUILD = {"shared_siamese": siamese, "shared_conv": shared_conv,
         "shared_embedding": shared_embedding}


def _refs(node):
    return [r[:3] for r in node]


def _check_init(model, fx):
    """the initial weights are the ones the fixture was made from (the
    daemon draws them from the parameters' names, shapes and initializers)"""
    by = {w["name"]: w for w in fx["init"]}
    names = [p[0] for p in model.compiled.report["params"]]
    assert sorted(names) == sorted(by)
    for name, w in zip(names, model.get_weights()):
        w = w.astype(np.float64)
        q = float((w * w).sum())
        assert q == pytest.approx(by[name]["sumsq"], rel=1e-9, abs=1e-30), name
        assert abs(float(w.sum()) - by[name]["sum"]) <= 1e-9 * np.sqrt(q * w.size) + 1e-30, name


@pytest.mark.parametrize("name", sorted(BUILD))
def test_against_tfjs(client, name):
    fx, text = _fixture(name)
    ref = json.loads(text)
    model = BUILD[name]()
    # the JSON Keras wrote for the same model: layers in the same order,
    # each with the same inbound nodes (node indices included)
    cfg = model.get_config()
    assert [(ly["class_name"], ly["name"]) for ly in cfg["layers"]] == \
        [(ly["class_name"], ly["name"]) for ly in ref["config"]["layers"]]
    for got, want in zip(cfg["layers"], ref["config"]["layers"]):
        assert [_refs(n) for n in got["inbound_nodes"]] == \
            [_refs(n) for n in want["inbound_nodes"]], got["name"]
    assert cfg["input_layers"] == ref["config"]["input_layers"]
    assert cfg["output_layers"] == ref["config"]["output_layers"]
    # one set of weights per layer, however often it is called
    assert len(model.weight_specs()) == len(fx["init"])

    loss = ref["compile_config"]["loss"]
    xs, ys = _data(fx)
    model.compile(optimizer=rtrain.optimizers.SGD(fx["sgd"]["lr"]), loss=loss,
                  batch_size=fx["batch"], shuffle=False, seed=1, client=client)
    _check_init(model, fx)
    init = model.get_weights()
    _check_sgd(model, fx, xs, ys)

    # 3 Adam steps from the same initial weights
    ad = fx["adam"]
    model.compile(optimizer=rtrain.optimizers.Adam(ad["lr"], beta_1=ad["beta_1"],
                                                   beta_2=ad["beta_2"], epsilon=ad["epsilon"]),
                  loss=loss, batch_size=fx["batch"], shuffle=False, seed=1, client=client)
    model.set_weights(init)
    h = model.fit(xs, ys, epochs=1, batch_size=fx["batch"], shuffle=False, verbose=0)
    assert h.history["loss"][0] == pytest.approx(np.mean(ad["losses"]), rel=1e-5)
    _check_weights(model, ad["weights"])


# ---------------------------------------------------------------- PyTorch

def _tower_of(kind):
    """the tower, and its kernel's and bias' names: one Dense layer, or a
    Model of one (a nested model called twice)"""
    if kind == "layer":
        return L.Dense(3, activation="tanh", name="tower"), "tower"
    x = L.Input((4,), name="tower_in")
    inner = L.Dense(3, activation="tanh", name="tower_dense")
    return rtrain.Model(x, inner(x), name="tower"), "tower_dense"


@pytest.mark.parametrize("kind", ["layer", "model"])
def test_siamese_tower_against_torch(client, kind):
    """A Siamese tower: one weight, two calls, the gradients summed"""
    rng = np.random.default_rng(7)
    n, lr = 8, 0.1
    xa = rng.uniform(-1, 1, (n, 4)).astype(np.float32)
    xb = rng.uniform(-1, 1, (n, 4)).astype(np.float32)
    y = rng.integers(0, 2, (n, 1)).astype(np.float32)
    a, b = L.Input((4,), name="a"), L.Input((4,), name="b")
    tower, tw = _tower_of(kind)
    head = L.Dense(1, activation="sigmoid", name="head")
    out = head(L.Subtract(name="sub")([tower(a), tower(b)]))
    m = rtrain.Model([a, b], out)
    cfg = m.get_config()
    sub = next(ly for ly in cfg["layers"] if ly["name"] == "sub")
    # Keras 2 numbers a nested model's calls from 1 (its own graph is node 0)
    first = 1 if kind == "model" else 0
    assert _refs(sub["inbound_nodes"][0]) == [["tower", first, 0], ["tower", first + 1, 0]]
    m.compile(rtrain.optimizers.SGD(lr), "binary_crossentropy", batch_size=n, shuffle=False,
              seed=3, client=client)
    names = [p[0] for p in m.compiled.report["params"]]
    w0 = dict(zip(names, m.get_weights()))
    assert sorted(w0) == sorted(["head/bias", "head/kernel", tw + "/bias", tw + "/kernel"])
    w0["tower/kernel"], w0["tower/bias"] = w0[tw + "/kernel"], w0[tw + "/bias"]

    lin_t, lin_h = torch.nn.Linear(4, 3).double(), torch.nn.Linear(3, 1).double()
    with torch.no_grad():
        lin_t.weight.copy_(torch.tensor(w0["tower/kernel"].T))
        lin_t.bias.copy_(torch.tensor(w0["tower/bias"]))
        lin_h.weight.copy_(torch.tensor(w0["head/kernel"].T))
        lin_h.bias.copy_(torch.tensor(w0["head/bias"]))
    opt = torch.optim.SGD(list(lin_t.parameters()) + list(lin_h.parameters()), lr=lr)
    ta, tb, ty = (torch.tensor(v, dtype=torch.float64) for v in (xa, xb, y))

    def fwd():
        return torch.sigmoid(lin_h(torch.tanh(lin_t(ta)) - torch.tanh(lin_t(tb))))
    with torch.no_grad():
        np.testing.assert_allclose(m.predict([xa, xb]), fwd().numpy(), rtol=1e-5, atol=1e-7)
    for _ in range(3):
        opt.zero_grad()
        p = fwd().clamp(1e-7, 1 - 1e-7)  # Keras clips the probabilities
        torch.nn.functional.binary_cross_entropy(p, ty).backward()
        opt.step()
    m.fit([xa, xb], y, epochs=3, batch_size=n, shuffle=False, verbose=0)
    got = dict(zip(names, m.get_weights()))
    got["tower/kernel"], got["tower/bias"] = got[tw + "/kernel"], got[tw + "/bias"]
    np.testing.assert_allclose(got["tower/kernel"], lin_t.weight.detach().numpy().T,
                               rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got["tower/bias"], lin_t.bias.detach().numpy(),
                               rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got["head/kernel"], lin_h.weight.detach().numpy().T,
                               rtol=1e-4, atol=1e-6)
    with torch.no_grad():
        np.testing.assert_allclose(m.predict([xa, xb]), fwd().numpy(), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------ Keras' node API

def test_node_accessors():
    x1, x2 = L.Input((5,), name="x1"), L.Input((5,), name="x2")
    d = L.Dense(3, name="d")
    with pytest.raises(AttributeError, match="has no inbound nodes"):
        d.output
    with pytest.raises(AttributeError, match="is not connected"):
        d.input
    with pytest.raises(RuntimeError, match="never been called"):
        d.get_output_at(0)
    y1, y2 = d(x1), d(x2)
    assert (y1.node_index, y2.node_index) == (0, 1)
    assert y2._keras_history == (d, 1, 0)
    # tf.keras 2 and Keras 3: input and output are the first call's
    assert d.output is y1 and d.input is x1
    assert d.get_output_at(1) is y2 and d.get_input_at(1) is x2
    assert d.get_output_shape_at(1) == (None, 3) and d.get_input_shape_at(0) == (None, 5)
    assert d.output_shape == (None, 3)
    with pytest.raises(ValueError, match="Asked to get output at node 2, but the layer has "
                                         "only 2 inbound nodes"):
        d.get_output_at(2)
    with pytest.raises(ValueError, match="Asked to get input at node -1"):
        d.get_input_at(-1)
    # a merge layer's input is the list it was called on
    j = L.Concatenate(name="j")
    z = j([y1, y2])
    assert j.input == [y1, y2] and j.output is z
    # calls with other output shapes: "output shape" is ill-defined (Keras)
    c = L.Conv2D(2, 3, name="c")
    c(L.Input((6, 6, 1))), c(L.Input((8, 8, 1)))
    assert c.get_output_shape_at(0) == (None, 4, 4, 2)
    assert c.get_output_shape_at(1) == (None, 6, 6, 2)
    with pytest.raises(AttributeError, match="has multiple inbound nodes, with different "
                                             "output shapes"):
        c.output_shape
    assert x1.layer.output is x1 and x1.layer.get_input_at(0) is x1


def test_refusals(client):
    # a later call must fit the weights the first call built
    d = L.Dense(3, name="d")
    d(L.Input((5,)))
    with pytest.raises(ValueError, match=r'layer "d" is incompatible.*\(None, 5\).*'
                                         r'kernel \(5, 3\).*\(None, 4\) needs kernel \(4, 3\)'):
        d(L.Input((4,)))
    assert len(d._inbound_nodes) == 1  # the refused call left no node
    with pytest.raises(TypeError, match="InputLayer is not called"):
        L.Input((2,)).layer(L.Input((2,)))
    # a trainable BatchNormalization called twice: Keras updates its moving
    # statistics once per call; the daemon refuses it by name
    a, b = L.Input((4,), name="a"), L.Input((4,), name="b")
    bn = L.BatchNormalization(name="bn")
    out = L.Dense(1, name="o")(L.Add(name="s")([bn(a), bn(b)]))
    m = rtrain.Model([a, b], out)
    with pytest.raises(rtrain.InvalidArgument, match="bn"):
        m.compile("sgd", "mse", client=client)
    # ... frozen, it is one layer read twice
    bn.trainable = False
    m.compile("sgd", "mse", client=client)
    assert len(m.get_weights()) == 6
    # a JSON that reads a call the layer does not have
    j = json.loads(siamese().to_json())
    for ly in j["config"]["layers"]:
        if ly["name"] == "score":
            ly["inbound_nodes"] = [[["square", 2, 0, {}]]]
    with pytest.raises(ValueError, match=r"score.*square\[2\]"):
        models.model_from_json(j)
    j["config"]["output_layers"][1] = ["tower", 5, 0]
    for ly in j["config"]["layers"]:
        if ly["name"] == "score":
            ly["inbound_nodes"] = [[["square", 1, 0, {}]]]
    with pytest.raises(ValueError, match=r"output_layers names tower\[5\]"):
        models.model_from_json(j)


def test_depth_shared_order():
    """A layer shared at two depths (A(B(A(x)))): its calls are made in
    order when the JSON is read back, and the layer lists at its deepest
    call, as Keras' get_network_config orders model.layers."""
    x = L.Input((4,), name="x")
    A, B = L.Dense(4, name="A", activation="tanh"), L.Dense(4, name="B")
    y = A(B(A(x)))
    m = rtrain.Model(x, y)
    cfg = m.get_config()
    assert [ly["name"] for ly in cfg["layers"]] == ["x", "A", "B"]
    assert cfg["layers"][1]["inbound_nodes"] == [[["x", 0, 0, {}]], [["B", 0, 0, {}]]]
    assert cfg["output_layers"] == [["A", 1, 0]]
    back = models.model_from_json(m.to_json())
    assert back.get_config() == cfg


# ------------------------------------------------------ weights and saving

def _tower_model():
    left, right = L.Input((5,), name="left"), L.Input((5,), name="right")
    tower = L.Dense(4, activation="tanh", name="tower")
    out = L.Dense(1, activation="sigmoid", name="score")(
        L.Multiply(name="prod")([tower(left), tower(right)]))
    return rtrain.Model([left, right], out)


def test_weights_and_saving(client, tmp_path):
    rng = np.random.default_rng(1)
    x = [rng.uniform(-1, 1, (16, 5)).astype(np.float32) for _ in range(2)]
    y = rng.integers(0, 2, (16, 1)).astype(np.float32)
    m = _tower_model()
    # Keras' model.weights: one copy of the shared layer's
    assert [w[0] for w in m.weight_specs()] == ["tower/kernel", "tower/bias",
                                                 "score/kernel", "score/bias"]
    init = [rng.normal(0, 0.5, tuple(s)).astype(np.float32) for _, s, _ in m.weight_specs()]
    m.set_weights(init)  # before compile: kept and sent by compile
    m.compile("sgd", "binary_crossentropy", client=client)
    for got, want in zip(m.get_weights(), init):
        np.testing.assert_array_equal(got, want)
    m.fit(x, y, epochs=2, batch_size=8, verbose=0)
    pred = m.predict(x)
    w = m.get_weights()
    assert len(w) == 4

    # Keras 2's HDF5 model file: one group per layer, the tower's once
    m.save(tmp_path / "m.h5")
    with h5py.File(tmp_path / "m.h5", "r") as f:
        g = f["model_weights"]
        assert [n.decode() for n in g.attrs["layer_names"]] == ["left", "right", "tower",
                                                                 "prod", "score"]
        assert [n.decode() for n in g["tower"].attrs["weight_names"]] == \
            ["tower/kernel:0", "tower/bias:0"]
        cfg = json.loads(f.attrs["model_config"])
        tw = next(ly for ly in cfg["config"]["layers"] if ly["name"] == "tower")
        assert tw["inbound_nodes"] == [[["left", 0, 0, {}]], [["right", 0, 0, {}]]]
        pr = next(ly for ly in cfg["config"]["layers"] if ly["name"] == "prod")
        assert pr["inbound_nodes"] == [[["tower", 0, 0, {}], ["tower", 1, 0, {}]]]
    back = models.load_model(tmp_path / "m.h5", client=client)
    np.testing.assert_allclose(back.predict(x), pred, rtol=1e-6, atol=1e-7)

    # Keras 3's .keras zip: keras_history by node index, one vars group
    m.save(tmp_path / "m.keras")
    with zipfile.ZipFile(tmp_path / "m.keras") as zf:
        cfg = json.loads(zf.read("config.json"))
        zf.extract("model.weights.h5", tmp_path)
    pr = next(ly for ly in cfg["config"]["layers"] if ly["name"] == "prod")
    hist = [t["config"]["keras_history"] for t in pr["inbound_nodes"][0]["args"][0]]
    assert hist == [["tower", 0, 0], ["tower", 1, 0]]
    tw = next(ly for ly in cfg["config"]["layers"] if ly["name"] == "tower")
    assert [n["args"][0]["config"]["keras_history"] for n in tw["inbound_nodes"]] == \
        [["left", 0, 0], ["right", 0, 0]]
    with h5py.File(tmp_path / "model.weights.h5", "r") as f:
        assert sorted(f["layers"]) == ["dense", "dense_1", "input_layer", "input_layer_1",
                                       "multiply"]
        np.testing.assert_array_equal(f["layers/dense/vars/0"][()], w[0])
        assert len(f["layers/dense/vars"]) == 2
    back = models.load_model(tmp_path / "m.keras", client=client)
    np.testing.assert_allclose(back.predict(x), pred, rtol=1e-6, atol=1e-7)
    assert back.get_config() == m.get_config()

    # weight files alone, both layouts, into a fresh model
    m.save_weights(tmp_path / "w.h5")
    m.save_weights(tmp_path / "w.weights.h5")
    for f in ("w.h5", "w.weights.h5"):
        fresh = _tower_model()
        fresh.compile("sgd", "binary_crossentropy", client=client)
        fresh.load_weights(tmp_path / f)
        np.testing.assert_allclose(fresh.predict(x), pred, rtol=1e-6, atol=1e-7)


def test_nested_model_saving(client, tmp_path):
    """A nested model called twice keeps one copy of its weights in every
    file: Keras 2's HDF5 (one group for the nested model) and Keras 3's
    .keras (<model>/layers/<layer>/vars)"""
    rng = np.random.default_rng(2)
    x = [rng.uniform(-1, 1, (10, 4)).astype(np.float32) for _ in range(2)]
    y = rng.uniform(0, 1, (10, 3)).astype(np.float32)

    def build():
        tower, _ = _tower_of("model")
        a, b = L.Input((4,), name="a"), L.Input((4,), name="b")
        return rtrain.Model([a, b], L.Add(name="sum")([tower(a), tower(b)]))
    m = build()
    assert [w[0] for w in m.weight_specs()] == ["tower_dense/kernel", "tower_dense/bias"]
    assert m.get_layer("tower").get_output_at(1).shape == (None, 3)
    m.compile("sgd", "mse", client=client)
    m.fit(x, y, epochs=2, batch_size=5, verbose=0)
    pred = m.predict(x)
    m.save(tmp_path / "n.h5")
    with h5py.File(tmp_path / "n.h5", "r") as f:
        g = f["model_weights"]
        assert [v.decode() for v in g["tower"].attrs["weight_names"]] == \
            ["tower_dense/kernel:0", "tower_dense/bias:0"]
    m.save(tmp_path / "n.keras")
    with zipfile.ZipFile(tmp_path / "n.keras") as zf:
        cfg = json.loads(zf.read("config.json"))
        zf.extract("model.weights.h5", tmp_path)
    tw = next(ly for ly in cfg["config"]["layers"] if ly["name"] == "tower")
    assert tw["class_name"] == "Functional"
    sm = next(ly for ly in cfg["config"]["layers"] if ly["name"] == "sum")
    # Keras 3: keras_history counts the calls in this model from 0
    assert [t["config"]["keras_history"] for t in sm["inbound_nodes"][0]["args"][0]] == \
        [["tower", 0, 0], ["tower", 1, 0]]
    with h5py.File(tmp_path / "model.weights.h5", "r") as f:
        assert len(f["layers/functional/layers/dense/vars"]) == 2
    for name in ("n.h5", "n.keras"):
        back = models.load_model(tmp_path / name, client=client)
        np.testing.assert_allclose(back.predict(x), pred, rtol=1e-6, atol=1e-7)
    # refused: a model with two outputs as a layer, a wrong input shape
    i = L.Input((4,))
    two = rtrain.Model(i, [L.Dense(2, name="p")(i), L.Dense(2, name="q")(i)])
    with pytest.raises(ValueError, match="has 2 outputs"):
        two(L.Input((4,)))
    with pytest.raises(ValueError, match=r'Input 0 of model "tower" is incompatible.*'
                                         r'\(None, 4\).*\(None, 5\)'):
        _tower_of("model")[0](L.Input((5,)))


def test_keras3_layout_against_keras():
    """The Keras 3 config rtrain writes (.keras) for a shared Embedding
    and a shared Bidirectional LSTM, against the one Keras 3 wrote for
    the same graph (tests/fixtures/keras-corpus-3/text_similarity_keras3
    .json, a public project's model.to_json()): the same layers in the
    same order (model.layers' depth order), each inbound node reading the
    same keras_history. Its three Lambda layers (Python code, which
    rtrain does not read) are merging layers of the same two inputs here;
    sizes are smaller (they do not enter the layout)."""
    from rtrain import saving
    with open(os.path.join(os.environ.get("RT_SOURCE_DIR", "../.."), "tests", "fixtures",
                           "keras-corpus-3", "text_similarity_keras3.json")) as f:
        ref = json.load(f)
    i1, i2 = L.Input((20,), name="input_1"), L.Input((20,), name="input_2")
    emb = L.Embedding(50, 4, name="embedding")
    bi = L.Bidirectional(L.LSTM(3, return_sequences=True), name="bidirectional")
    s1, s2 = bi(emb(i1)), bi(emb(i2))
    joined = []
    for k, s in enumerate((s1, s2)):
        bn = L.BatchNormalization(name="batch_normalization" + ("_1" if k else ""))(s)
        sfx = "_1" if k else ""
        joined.append(L.Concatenate(name="concatenate" + sfx)([
            L.GlobalAveragePooling1D(name="global_average_pooling1d" + sfx)(bn),
            L.GlobalMaxPooling1D(name="global_max_pooling1d" + sfx)(bn)]))
    lam = [cls(name=nm)(joined) for cls, nm in ((L.Subtract, "lambda"),
                                                 (L.Multiply, "lambda_1"),
                                                 (L.Maximum, "lambda_2"))]
    h = L.Concatenate(name="concatenate_2")(joined + lam)
    for k, units in enumerate((128, 64)):
        sfx = "_%d" % k if k else ""
        h = L.Dense(units, activation="relu", name="dense" + sfx)(h)
        h = L.BatchNormalization(name="batch_normalization_%d" % (k + 2))(h)
        h = L.Dropout(0.5, name="dropout" + sfx)(h)
    out = L.Dense(1, activation="sigmoid", name="dense_2")(h)
    # outputs as a list, as the project gave them (Keras 3 keeps the
    # structure: its output_layers is a list of one)
    m = rtrain.Model([i1, i2], [out])
    mine = saving._keras3_config(m, saving._keras_order(m))

    def layout(doc):
        rows = []
        for ly in doc["config"]["layers"]:
            nodes = []
            for nd in ly["inbound_nodes"]:
                args = nd["args"][0] if isinstance(nd["args"][0], list) else nd["args"]
                nodes.append([t["config"]["keras_history"] for t in args])
            rows.append((ly["name"], nodes))
        return rows
    assert layout(mine) == layout(ref)
    assert mine["config"]["input_layers"] == ref["config"]["input_layers"]
    assert mine["config"]["output_layers"] == ref["config"]["output_layers"]
    # and it reads back as the same model, its layers in the file's order
    # (model_from_json keeps it, as the daemon's importer places them)
    back, want = models.model_from_json(mine).get_config(), m.get_config()
    assert [ly["name"] for ly in back["layers"]] == \
        [ly["name"] for ly in mine["config"]["layers"]]
    by_name = {ly["name"]: ly for ly in want["layers"]}
    assert [by_name[ly["name"]] for ly in back["layers"]] == back["layers"]
    assert {k: v for k, v in back.items() if k != "layers"} == \
        {k: v for k, v in want.items() if k != "layers"}


def test_nested_sequential_and_frozen_tower(client):
    """A Sequential called on two inputs, and a frozen nested tower
    (tower.trainable = False): one set of weights, and a frozen tower's
    stay as they were through fit while the head trains"""
    rng = np.random.default_rng(4)
    xa, xb = (rng.uniform(-1, 1, (6, 4)).astype(np.float32) for _ in range(2))
    seq = rtrain.Sequential([L.Dense(3, activation="tanh", input_shape=(4,), name="s_dense")],
                            name="seq_tower")
    a, b = L.Input((4,), name="a"), L.Input((4,), name="b")
    m = rtrain.Model([a, b], L.Concatenate(name="j")([seq(a), seq(b)]))
    j = next(ly for ly in m.get_config()["layers"] if ly["name"] == "j")
    assert _refs(j["inbound_nodes"][0]) == [["seq_tower", 1, 0], ["seq_tower", 2, 0]]
    m.compile("sgd", "mse", client=client)
    k, bias = m.get_weights()
    want = np.concatenate([np.tanh(xa @ k + bias), np.tanh(xb @ k + bias)], 1)
    np.testing.assert_allclose(m.predict([xa, xb]), want, rtol=1e-5, atol=1e-6)

    tower, _ = _tower_of("model")
    tower.trainable = False
    a, b = L.Input((4,), name="a"), L.Input((4,), name="b")
    m = rtrain.Model([a, b], L.Dense(1, name="head")(L.Multiply(name="p")([tower(a), tower(b)])))
    assert [w[2] for w in m.weight_specs()] == [False, False, True, True]
    m.compile(rtrain.optimizers.SGD(0.5), "mse", client=client)
    names = [p[0] for p in m.compiled.report["params"]]
    before = dict(zip(names, m.get_weights()))
    m.fit([xa, xb], np.ones((6, 1), np.float32), epochs=3, batch_size=3, verbose=0)
    after = dict(zip(names, m.get_weights()))
    np.testing.assert_array_equal(after["tower_dense/kernel"], before["tower_dense/kernel"])
    assert not np.allclose(after["head/kernel"], before["head/kernel"])
