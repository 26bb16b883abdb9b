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


# -- return_state and initial_state built in Python ---------------------

def _seq2seq_in_python(name, fx):
    """The encoder-decoder of tests/fixtures/keras-multi/seq2seq_<name>
    built with the Functional API (return_state outputs, initial_state
    calls), its layers named as the fixture's; [outputs] in its order."""
    n_in, n_out = fx["inputs"][0][0], fx["inputs"][1][0]
    vocab = fx["index"][0]
    ei, di = L.Input((n_in,), name="encoder_in"), L.Input((n_out,), name="decoder_in")
    dims = {"lstm": 4, "gru": 5, "bilstm": 4}[name]

    def emb(nm):
        return L.Embedding(vocab, dims, name=nm)
    ee, de = emb("enc_embed")(ei), emb("dec_embed")(di)
    if name == "lstm":
        _, h, c = L.LSTM(6, return_state=True, name="encoder")(ee)
        seq, dh, _ = L.LSTM(6, return_sequences=True, return_state=True,
                            name="decoder")(de, initial_state=[h, c])
        words = L.Dense(vocab, activation="softmax", name="words")(seq)
        return rtrain.Model([ei, di], [words, dh])
    if name == "gru":
        _, h = L.GRU(4, return_state=True, reset_after=False, name="encoder")(ee)
        seq = L.GRU(4, return_sequences=True, reset_after=False, name="decoder")(
            de, initial_state=h)
        words = L.Dense(vocab, activation="softmax", name="words")(seq)
        return rtrain.Model([ei, di], [words, h])
    merged, fh, fc, bh, bc = L.Bidirectional(L.LSTM(3, return_state=True, name="lstm"),
                                             name="bi_encoder")(ee)
    sh = L.Concatenate(name="state_h")([fh, bh])
    sc = L.Concatenate(name="state_c")([fc, bc])
    seq, dh, _ = L.LSTM(6, return_sequences=True, return_state=True, name="decoder")(
        [de, sh, sc])  # Keras 2's folded form: the states after the input
    post = L.SimpleRNN(6, return_sequences=True, name="post")(seq, initial_state=[dh])
    words = L.Dense(vocab, activation="softmax", name="words")(post)
    return rtrain.Model([ei, di], [words, merged])


@pytest.mark.parametrize("name", ["lstm", "gru", "bilstm"])
def test_seq2seq_state_built_in_python(client, name):
    """An encoder-decoder built in Python writes the Keras JSON the fixture
    holds (states as the call's extra inbound tensors, outputs by tensor
    index) and trains as TensorFlow.js does from the same weights."""
    fx, text = _fixture("seq2seq_%s_state" % name)
    model = _seq2seq_in_python(name, fx)
    ref = json.loads(text)["config"]
    mine = json.loads(model.to_json())["config"]
    assert mine["output_layers"] == ref["output_layers"]
    want = {ly["name"]: ly["inbound_nodes"] for ly in ref["layers"]}
    assert {ly["name"]: ly["inbound_nodes"] for ly in mine["layers"]} == want
    for ly in mine["layers"]:
        if ly["class_name"] in ("LSTM", "GRU", "SimpleRNN"):
            cfg = next(r for r in ref["layers"] if r["name"] == ly["name"])["config"]
            assert ly["config"]["return_state"] == cfg["return_state"]
    # the weights tfjs started from: those the daemon draws with seed 1 for
    # the fixture's JSON (the daemon's own layer order)
    cc = json.loads(text)["compile_config"]
    outs = [nm for nm, _ in model._io()[1]]
    loss = [cc["loss"][o] for o in outs] if isinstance(cc["loss"], dict) else cc["loss"]
    lw = [cc["loss_weights"][o] for o in outs] if isinstance(cc["loss_weights"], dict) \
        else cc["loss_weights"]
    kw = dict(optimizer=rtrain.optimizers.SGD(fx["sgd"]["lr"]), loss=loss, loss_weights=lw,
              batch_size=fx["batch"], shuffle=False, seed=1, client=client)
    raw = client.compile(text, **{k: v for k, v in kw.items() if k != "client"})
    init = dict(zip([p[0] for p in raw.report["params"]], raw.get_weights()))
    model.set_weights([init[n] for n, _, _ in model.weight_specs()])
    model.compile(**kw)
    xs, ys = _data(fx)
    _check_sgd(model, fx, xs, ys)


def test_state_call_errors():
    x = L.Input((5, 3))
    _, h, c = L.LSTM(4, return_state=True)(x)
    with pytest.raises(ValueError, match="takes 2 initial state tensors, got 1"):
        L.LSTM(4)(x, initial_state=[h])
    with pytest.raises(ValueError, match="initial state 0 has shape"):
        L.LSTM(2)(x, initial_state=[h, c])
    with pytest.raises(ValueError, match="not both"):
        L.GRU(4)([x, h], initial_state=h)
    out = L.GRU(4, return_state=True)(x)
    assert isinstance(out, list) and [t.shape for t in out] == [(None, 4), (None, 4)]
    assert out[1]._keras_history[2] == 1
    assert out[0].layer.output == out  # Keras: a list for several outputs
    # a state as an output is written by its tensor index
    m = rtrain.Model(x, [out[0], out[1]])
    assert json.loads(m.to_json())["config"]["output_layers"][1][2] == 1


def test_keras3_bidirectional_constraints(client):
    """A Keras 3 Bidirectional with backward_layer and an LSTM with MaxNorm
    kernel and recurrent constraints (tests/fixtures/keras-derived/
    bilstm_keras3_constraints.json, from a real Keras 3 file) load in
    Python and train as the daemon's importer reads the same JSON; the
    constraint holds as Keras' MaxNorm (keras/src/constraints/
    constraints.py: each column's norm over axis 0 at most max_value)."""
    path = os.path.join(ROOT, "tests", "fixtures", "keras-derived",
                        "bilstm_keras3_constraints.json")
    with open(path) as f:
        text = f.read()
    model = models.model_from_json(text)
    back = model.get_layer("bidirectional").backward_layer
    assert back.name == "backward_lstm" and back.flags["go_backwards"]
    cfg = {ly["name"]: ly["config"] for ly in json.loads(model.to_json())["config"]["layers"]}
    assert cfg["bidirectional"]["backward_layer"]["config"]["go_backwards"] is True
    assert cfg["lstm"]["kernel_constraint"]["class_name"] == "MaxNorm"
    assert cfg["lstm"]["recurrent_constraint"]["config"]["max_value"] == 0.3
    kw = dict(optimizer=rtrain.optimizers.SGD(0.1), loss="binary_crossentropy",
              batch_size=8, shuffle=False, seed=3)
    model.compile(client=client, **kw)
    raw = client.compile(text, **kw)
    names = [p[0] for p in model.compiled.report["params"]]
    assert names == [p[0] for p in raw.report["params"]]
    assert "bidirectional/backward_lstm/recurrent_kernel" in names
    w0 = raw.get_weights()
    model.set_weights(w0)
    x = (_mix(np.arange(16 * 6, dtype=np.uint64)) % 20).astype(np.float32).reshape(16, 6)
    y = (_mix(np.arange(16, dtype=np.uint64) ^ 77) >> 31).astype(np.float32).reshape(16, 1)
    np.testing.assert_allclose(model.predict(x), raw.predict(x), rtol=1e-6, atol=1e-7)
    model.fit(x, y, epochs=1, verbose=0)
    raw.fit(x, y, epochs=1, verbose=0)
    w1 = model.get_weights()
    for n, a, b, a0 in zip(names, w1, raw.get_weights(), w0):
        # the two programs may sum in other orders: 1e-4 of the weight's RMS
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * np.sqrt(np.mean(b * b)),
                                   err_msg=n)
        if n in ("lstm/kernel", "lstm/recurrent_kernel"):
            # bound before the step, held after it
            assert np.linalg.norm(a0, axis=0).max() > 0.3, n
            assert np.linalg.norm(a, axis=0).max() <= 0.3 * (1 + 1e-5), n


@pytest.mark.parametrize("positional", [False, True])
def test_keras3_initial_state_nodes(positional):
    """Keras 3 writes initial_state as the call's keyword (or second
    argument), each tensor by keras_history (keras/src/models/
    functional.py serialize_node); the loader reads the same graph as
    from Keras 2's folded form."""
    _, text = _fixture("seq2seq_lstm_state")
    doc = json.loads(text)

    def tensor(ref):
        return {"class_name": "__keras_tensor__",
                "config": {"shape": None, "dtype": "float32", "keras_history": ref[:3]}}
    for ly in doc["config"]["layers"]:
        nodes = []
        for nd in ly["inbound_nodes"]:
            x, states = tensor(nd[0]), [tensor(r) for r in nd[1:]]
            if not states:
                nodes.append({"args": [x], "kwargs": {}})
            elif positional:
                nodes.append({"args": [x, states], "kwargs": {}})
            else:
                nodes.append({"args": [x], "kwargs": {"initial_state": states}})
        ly["inbound_nodes"] = nodes
        ly["module"] = "keras.layers"
    k2 = json.loads(models.model_from_json(text).to_json())["config"]
    k3 = json.loads(models.model_from_json(doc).to_json())["config"]
    assert {ly["name"]: ly["inbound_nodes"] for ly in k3["layers"]} == \
        {ly["name"]: ly["inbound_nodes"] for ly in k2["layers"]}
    assert k3["output_layers"] == k2["output_layers"] == [["words", 0, 0], ["decoder", 0, 1]]


def test_from_json_draws_as_compile(client):
    """model_from_json keeps the file's layer order, the order the daemon's
    importer places them (server/import/import_keras.c place_from), so its
    compile draws the same initial weights as compiling the text: here the
    file lists dense_a before dense_b, while the walk from the output
    (Concatenate([b, a])) meets dense_b first."""
    def dense(name, units, src):
        return {"class_name": "Dense", "name": name,
                "config": {"name": name, "units": units, "activation": "tanh"},
                "inbound_nodes": [[[src, 0, 0, {}]]]}
    cat = {"class_name": "Concatenate", "name": "cat", "config": {"name": "cat", "axis": -1},
           "inbound_nodes": [[["dense_b", 0, 0, {}], ["dense_a", 0, 0, {}]]]}
    doc = {"class_name": "Functional", "config": {
        "name": "m", "layers": [
            {"class_name": "InputLayer", "name": "x", "inbound_nodes": [],
             "config": {"name": "x", "batch_input_shape": [None, 4]}},
            dense("dense_a", 3, "x"), dense("dense_b", 5, "x"), cat, dense("out", 1, "cat")],
        "input_layers": [["x", 0, 0]], "output_layers": [["out", 0, 0]]}}
    text = json.dumps(doc)
    model = models.model_from_json(text)
    assert [ly.name for ly in model.layers][1:3] == ["dense_a", "dense_b"]
    kw = dict(optimizer=rtrain.optimizers.SGD(0.1), loss="mse", seed=11)
    model.compile(client=client, **kw)
    raw = client.compile(text, **kw)
    assert [p[0] for p in model.compiled.report["params"]] == \
        [p[0] for p in raw.report["params"]]
    for a, b in zip(model.get_weights(), raw.get_weights()):
        np.testing.assert_array_equal(a, b)
    # and its to_json lists them so again
    assert [ly["name"] for ly in json.loads(model.to_json())["config"]["layers"]] == \
        ["x", "dense_a", "dense_b", "cat", "out"]


def test_embedding_constraint(client):
    """Embedding(embeddings_constraint=MaxNorm(0.1)) reaches the daemon
    (to_json keeps it) and binds: each column's norm over axis 0 (Keras'
    MaxNorm default, keras/src/constraints/constraints.py) is above the
    bound in the initial draw and at most the bound after a step."""
    model = rtrain.Sequential([
        L.Embedding(20, 5, input_length=6,
                    embeddings_constraint={"class_name": "MaxNorm",
                                           "config": {"max_value": 0.1, "axis": 0}}),
        L.Flatten(), L.Dense(1)])
    cfg = json.loads(model.to_json())["config"]["layers"]
    emb = [ly for ly in cfg if ly["class_name"] == "Embedding"][0]["config"]
    assert emb["embeddings_constraint"]["config"]["max_value"] == 0.1
    model.compile(client=client, optimizer=rtrain.optimizers.SGD(0.5), loss="mse",
                  batch_size=8, shuffle=False, seed=2)
    w0 = model.get_weights()[0]
    assert np.linalg.norm(w0, axis=0).max() > 0.1
    x = (_mix(np.arange(8 * 6, dtype=np.uint64)) % 20).astype(np.float32).reshape(8, 6)
    y = np.linspace(-1, 1, 8, dtype=np.float32).reshape(8, 1)
    model.fit(x, y, epochs=1, verbose=0)
    w1 = model.get_weights()[0]
    assert not np.array_equal(w0, w1)
    assert np.linalg.norm(w1, axis=0).max() <= 0.1 * (1 + 1e-6)
    with pytest.raises(ValueError, match="embeddings_constraint"):
        L.Embedding(20, 5, embeddings_constraint="no_such_constraint")
