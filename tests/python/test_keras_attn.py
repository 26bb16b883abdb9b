"""MultiHeadAttention and Dot in Python's Keras API (import rtrain as
keras), on a real rtraind.

References the project did not compute:
  - the keras_attn fixtures (tests/keras_import/attn/: PyTorch float64, a
    transcription of keras/src/layers/attention/multi_head_attention.py
    checked against torch.nn.MultiheadAttention) and the Dot models'
    TensorFlow.js fixtures (tests/keras_import/tfjs/): every fixture model
    goes through keras.models.model_from_json, to_json (Python's own
    serialization) and the daemon, and must give the fixture's initial
    weights, predictions and weights after 3 SGD steps;
  - models built here with the Functional API, run against the same
    PyTorch transcription (gen_attn_fixtures.Net) with the weights the
    daemon drew: predictions and 3 SGD steps;
  - Keras' own equivalences: an attention_mask of ones is no mask, a
    lower-triangular attention_mask is use_causal_mask=True; Dot against
    NumPy's einsum of the weights.
The data follow test_keras_tfjs.c's header (mix, 12 samples, batches of 4).
"""
import json
import math
import os
import sys

import numpy as np
import pytest
import torch

import rtrain as keras
from rtrain import layers as L

ROOT = os.environ.get("RT_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "keras_import", "attn"))
import gen_attn_fixtures as ref  # noqa: E402  (the fixtures' PyTorch reference)

torch.set_default_dtype(torch.float64)

N, BATCH = 12, 4
MHA_MODELS = ["mha_self_k2", "mha_mask_zero_k2", "mha_causal_block_k2", "mha_cross_k3",
              "mha_window_k3", "mha_rank4_axis2_k3", "mha_rank4_both_k3"]
DOT_MODELS = ["dot_seq_k2", "dot_pair_normalize_k2", "dot_vec_k2"]


@pytest.fixture(scope="module")
def client(daemon):
    keras.connect(daemon.addr, timeout=30)
    return daemon


def xs(per_shape, mod=None):
    per = int(np.prod(per_shape))
    if mod:
        v = [ref.mix(i ^ 0x5eed0001) % mod for i in range(N * per)]
    else:
        v = [((ref.mix(i ^ 0x5eed0001) >> 22) - 512) / 512.0 for i in range(N * per)]
    return np.array(v, dtype=np.float32).reshape([N] + list(per_shape))


def ys(kind, out_shape, classes=None):
    if kind == "sparse":
        return np.array([ref.mix(j ^ 0x1abe1000) % classes for j in range(N)], dtype=np.int32)
    if kind == "onehot":
        c = out_shape[-1]
        y = np.zeros([N] + list(out_shape), np.float32)
        flat = y.reshape(-1, c)
        for j in range(flat.shape[0]):
            flat[j, ref.mix(j ^ 0x1abe1000) % c] = 1
        return y
    cnt = N * int(np.prod(out_shape))
    h = [ref.mix(j ^ 0x1abe1000) for j in range(cnt)]
    v = [a >> 31 for a in h] if kind == "binary" else [(a >> 22) / 1024.0 for a in h]
    return np.array(v, np.float32).reshape([N] + list(out_shape))


def close(got, want, rel, floor, what):
    got, want = np.asarray(got, np.float64).ravel(), np.asarray(want, np.float64).ravel()
    assert got.shape == want.shape, what
    bad = np.abs(got - want) > rel * np.maximum(np.abs(want), floor)
    assert not bad.any(), "%s: %d of %d differ, first %r vs %r" % (
        what, bad.sum(), bad.size, got[bad][0], want[bad][0])


def derive(doc):
    """test_keras_tfjs.c's derivation: dropout rates 0 (training compared)"""
    for lay in doc["config"]["layers"]:
        c = lay["config"]
        if lay["class_name"] == "MultiHeadAttention" and c.get("dropout"):
            c["dropout"] = 0.0
        if lay["class_name"] == "Dropout" and c.get("rate"):
            c["rate"] = 0.0
    return doc


def fixture(name):
    sub = "tfjs" if name.startswith("dot_") else "attn"
    with open(os.path.join(ROOT, "tests", "keras_import", sub, name + ".json")) as f:
        fx = json.load(f)
    with open(os.path.join(ROOT, fx["model"])) as f:
        doc = json.load(f)
    return fx, derive(doc) if fx.get("derived") else doc


def compile_sgd(model, loss, lr, momentum=0.0, nesterov=False):
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=lr, momentum=momentum,
                                                 nesterov=bool(nesterov)),
                  loss=loss, batch_size=BATCH, shuffle=False, seed=1)


@pytest.mark.parametrize("name", MHA_MODELS + DOT_MODELS)
def test_fixture_models_through_python(client, name):
    """Keras' JSON (Keras 2 and 3) -> model_from_json -> Python's to_json
    -> the daemon: the fixture's initial weights, predictions and 3 SGD
    steps (test_keras_tfjs.c's tolerances)."""
    fx, doc = fixture(name)
    m = keras.models.model_from_json(json.dumps(doc))
    js = m.to_json()
    assert keras.models.model_from_json(js).to_json() == js
    classes = fx.get("classes")
    sgd = fx["sgd"]
    compile_sgd(m, fx["loss"], sgd["lr"], sgd.get("momentum", 0), sgd.get("nesterov", 0))
    named = m.get_named_weights()
    # Keras' names, shapes and order, the same on both sides
    specs = m.weight_specs()
    assert [n for n, _, _ in specs] == [w["name"] for w in fx["init"]]
    assert [tuple(s) for _, s, _ in specs] == [named[n].shape for n, _, _ in specs]
    assert [n for n, _, _ in specs] == list(named)
    for w in fx["init"]:  # the daemon drew the same weights from this JSON
        v = named[w["name"]].astype(np.float64)
        close([v.sum(), (v * v).sum()], [w["sum"], w["sumsq"]], 1e-5, 1e-3, w["name"])
    x = xs(m.input_shape[1:], fx["x"].get("mod"))
    pred = m.predict(x[:fx["predict"]["rows"]], batch_size=BATCH, verbose=0)
    close(pred, fx["predict"]["values"], 1e-5, 1e-6, name + " predict")
    y = ys(fx["labels"], m.output_shape[1:], classes)
    m.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    after = m.get_named_weights()
    for w in fx["sgd"]["weights"]:
        close(ref.sampled(after[w["name"]]), w["values"], 1e-4, w["rms"],
              name + " SGD " + w["name"])


# ------------------------------------------------ the Functional API itself

def params_of(model):
    named = model.get_named_weights()
    tr = {n: t for n, _, t in model.weight_specs()}
    return [{"name": n, "v": np.asarray(v, np.float32).ravel(), "dims": list(v.shape),
             "trainable": tr[n]} for n, v in named.items()]


def torch_reference(model, loss, lr, x, y):
    """PyTorch (float64) from the daemon's initial weights: predictions on
    x[:4] and the weights after 3 SGD steps of 4 samples"""
    doc = json.loads(model.to_json())
    params = params_of(model)
    net = ref.Net(torch, doc, params)
    X = torch.tensor(x.astype(np.float64))
    Y = torch.tensor(y.astype(np.int64)) if y.dtype.kind == "i" else torch.tensor(y, dtype=torch.float64)
    with torch.no_grad():
        pred = net.forward(X[:4]).numpy()
    for s in range(3):
        xb, yb = X[s * BATCH:(s + 1) * BATCH], Y[s * BATCH:(s + 1) * BATCH]
        lo = ref.loss_of(torch, loss, net.forward(xb), yb)
        names = [n for n in net.order if net.w[n].requires_grad]
        grads = torch.autograd.grad(lo, [net.w[n] for n in names])
        with torch.no_grad():
            for n, g in zip(names, grads):
                net.w[n] -= lr * g
    return pred, {n: net.w[n].detach().numpy() for n in net.order}


def check_against_torch(model, loss, lr, x, y):
    js = model.to_json()
    again = keras.models.model_from_json(js)
    assert again.to_json() == js
    compile_sgd(model, loss, lr)
    pred_ref, after_ref = torch_reference(model, loss, lr, x, y)
    close(model.predict(x[:4], batch_size=BATCH, verbose=0), pred_ref, 1e-5, 1e-6, "predict")
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    after = model.get_named_weights()
    for n, want in after_ref.items():
        rms = math.sqrt(float(np.mean(want.astype(np.float64) ** 2)))
        close(after[n], want, 1e-4, rms, "SGD " + n)
    return js


def test_functional_causal_block(client):
    """self-attention called as mha(x, x, use_causal_mask=True), residual,
    LayerNormalization, feed-forward"""
    inp = keras.Input((6, 8), name="x")
    a = L.MultiHeadAttention(num_heads=2, key_dim=4, name="mha",
                             bias_initializer="random_normal")(inp, inp, use_causal_mask=True)
    r = L.Add(name="res")([inp, a])
    n = L.LayerNormalization(name="ln")(r)
    f = L.Dense(8, activation="relu", name="ff")(n)
    out = L.Dense(2, name="out")(L.Flatten(name="flat")(f))
    model = keras.Model(inp, out)
    x = xs((6, 8))
    js = check_against_torch(model, "mean_squared_error", 0.05, x, ys("float", (2,)))
    node = [l for l in json.loads(js)["config"]["layers"] if l["name"] == "mha"][0]
    # Keras 2's form: the query the entry, value and the flag keywords
    assert node["inbound_nodes"] == [[["x", 0, 0, {"value": ["x", 0, 0],
                                                   "use_causal_mask": True}]]]
    assert node["config"]["query_shape"] == [None, 6, 8]


def test_functional_cross_attention(client):
    """mha(query, value, key=k): three widths, value_dim, no biases,
    output_shape, Keras' weight shapes"""
    inp = keras.Input((5, 6), name="x")
    q = L.Dense(6, name="q", bias_initializer="random_normal")(inp)
    v = L.Dense(7, name="v", bias_initializer="random_normal")(inp)
    k = L.Dense(5, name="k", bias_initializer="random_normal")(inp)
    mha = L.MultiHeadAttention(3, 3, value_dim=5, use_bias=False, output_shape=4, name="mha")
    a = mha(q, v, key=k)
    assert a.shape == (None, 5, 4)
    out = L.Dense(3, name="out")(L.Flatten(name="flat")(a))
    model = keras.Model(inp, out)
    assert [(n, tuple(s)) for n, s, _ in model.weight_specs() if n.startswith("mha/")] == [
        ("mha/query/kernel", (6, 3, 3)), ("mha/key/kernel", (5, 3, 3)),
        ("mha/value/kernel", (7, 3, 5)), ("mha/attention_output/kernel", (3, 5, 4))]
    check_against_torch(model, "mean_squared_error", 0.05, xs((5, 6)), ys("float", (3,)))


def test_functional_rank4_axes(client):
    """a (B, 3, 4, 6) query with attention_axes=(2,)"""
    inp = keras.Input((3, 4, 6), name="x")
    a = L.MultiHeadAttention(2, 3, value_dim=2, attention_axes=2, name="mha",
                             bias_initializer="random_normal")(inp, inp)
    sm = L.Dense(2, activation="softmax", name="out")(L.Flatten(name="flat")(a))
    model = keras.Model(inp, sm)
    check_against_torch(model, "sparse_categorical_crossentropy", 0.1, xs((3, 4, 6)),
                        ys("sparse", (2,), 2))


def mask_model(mask_input):
    inp = keras.Input((6, 8), name="x")
    ins = [inp]
    kw = {"use_causal_mask": True}
    if mask_input:
        m = keras.Input((6, 6), name="m")
        ins.append(m)
        kw = {"attention_mask": m}
    a = L.MultiHeadAttention(2, 4, name="mha", bias_initializer="random_normal")(inp, inp, **kw)
    out = L.Dense(2, name="out")(L.Flatten(name="flat")(a))
    return keras.Model(ins, out)


def test_attention_mask_is_keras_causal_mask(client):
    """Keras: use_causal_mask is the lower-triangular attention_mask, and
    a mask of ones masks nothing"""
    causal = mask_model(False)
    masked = mask_model(True)
    js = json.loads(masked.to_json())
    node = [l for l in js["config"]["layers"] if l["name"] == "mha"][0]
    assert node["inbound_nodes"] == [[["x", 0, 0, {"value": ["x", 0, 0],
                                                   "attention_mask": ["m", 0, 0]}]]]
    for m in (causal, masked):
        compile_sgd(m, "mean_squared_error", 0.05)
    masked.set_weights(causal.get_weights())
    x = xs((6, 8))
    tri = np.broadcast_to(np.tril(np.ones((6, 6), np.float32)), (N, 6, 6)).copy()
    want = causal.predict(x, batch_size=BATCH, verbose=0)
    got = masked.predict([x, tri], batch_size=BATCH, verbose=0)
    assert isinstance(got, np.ndarray) and got.shape == (N, 2)  # one output: an array
    close(got, want, 1e-6, 1e-6, "causal attention_mask")
    # ones: the PyTorch reference without a mask
    ones = np.ones((N, 6, 6), np.float32)
    plain = keras.Model(*_plain())
    compile_sgd(plain, "mean_squared_error", 0.05)
    plain.set_weights(causal.get_weights())
    close(masked.predict([x, ones], batch_size=BATCH, verbose=0),
          plain.predict(x, batch_size=BATCH, verbose=0), 1e-6, 1e-6, "mask of ones")
    pred_ref, _ = torch_reference(plain, "mean_squared_error", 0.05, x, ys("float", (2,)))
    close(masked.predict([x[:4], ones[:4]], batch_size=BATCH, verbose=0), pred_ref, 1e-5, 1e-6,
          "mask of ones against PyTorch")
    assert not np.allclose(want, plain.predict(x, batch_size=BATCH, verbose=0), atol=1e-3)


def _plain():
    inp = keras.Input((6, 8), name="x")
    a = L.MultiHeadAttention(2, 4, name="mha")(inp, inp)
    return inp, L.Dense(2, name="out")(L.Flatten(name="flat")(a))


def test_dot_functional(client):
    """Dot(axes=1) and Dot(axes=-1, normalize=True) against NumPy's einsum
    of the daemon's weights"""
    inp = keras.Input((6, 4), name="x")
    a = L.Dense(3, name="a")(inp)
    b = L.Dense(5, name="b")(inp)
    d1 = L.Dot(axes=1, name="d1")([a, b])                       # (3, 5)
    d2 = L.dot([a, a], axes=-1, normalize=True, name="d2")       # (6, 6)
    assert d1.shape == (None, 3, 5) and d2.shape == (None, 6, 6)
    out = L.Concatenate(name="cat")([L.Flatten(name="f1")(d1), L.Flatten(name="f2")(d2)])
    model = keras.Model(inp, out)
    js = model.to_json()
    assert keras.models.model_from_json(js).to_json() == js
    compile_sgd(model, "mean_squared_error", 0.05)
    w = model.get_named_weights()
    x = xs((6, 4)).astype(np.float64)
    A = x @ w["a/kernel"] + w["a/bias"]
    B = x @ w["b/kernel"] + w["b/bias"]
    An = A / np.sqrt(np.maximum((A * A).sum(-1, keepdims=True), 1e-12))
    want = np.concatenate([np.einsum("bij,bik->bjk", A, B).reshape(N, -1),
                           np.einsum("bik,bjk->bij", An, An).reshape(N, -1)], 1)
    close(model.predict(x.astype(np.float32), batch_size=BATCH, verbose=0), want, 1e-5, 1e-2,
          "Dot")  # float32 sums of terms near 1: 1e-7 absolute


# ------------------------------------------------------- config and weights

def test_config_round_trip():
    mha = L.MultiHeadAttention(4, 8, value_dim=6, dropout=0.1, output_shape=(3, 2),
                               attention_axes=(1,), kernel_initializer="orthogonal",
                               kernel_regularizer="l2", name="att")
    cfg = mha.get_config()
    assert cfg["class_name"] == "MultiHeadAttention"
    c = cfg["config"]
    assert (c["num_heads"], c["key_dim"], c["value_dim"], c["dropout"], c["output_shape"],
            c["attention_axes"], c["name"]) == (4, 8, 6, 0.1, [3, 2], [1], "att")
    again = L.MultiHeadAttention.from_config(cfg)
    assert again.get_config() == cfg
    assert L.MultiHeadAttention.from_config(c).get_config() == cfg
    d = L.Dot(axes=[1, 2], normalize=True, name="d")
    assert L.Dot.from_config(d.get_config()).get_config() == d.get_config()
    assert d.get_config()["config"]["axes"] == [1, 2]
    # Keras' defaults: value_dim is key_dim, output the query's dim
    m2 = L.MultiHeadAttention(2, 3)
    assert m2.get_config()["config"]["value_dim"] == 3


def test_weights_set_before_compile_and_errors():
    inp = keras.Input((5, 8))
    mha = L.MultiHeadAttention(2, 4, name="mha")
    out = mha(inp, inp)
    model = keras.Model(inp, out)
    specs = model.weight_specs()
    assert [n for n, _, _ in specs] == [
        "mha/query/kernel", "mha/query/bias", "mha/key/kernel", "mha/key/bias",
        "mha/value/kernel", "mha/value/bias", "mha/attention_output/kernel",
        "mha/attention_output/bias"]
    assert model.count_params() == 3 * (8 * 8 + 8) + 8 * 8 + 8
    ws = [np.zeros(s, np.float32) for _, s, _ in specs]
    model.set_weights(ws)
    bad = list(ws)
    bad[0] = np.zeros((8, 8), np.float32)  # the engine's 2-D layout, not Keras'
    with pytest.raises(ValueError, match="mha/query/kernel"):
        model.set_weights(bad)
    x = keras.Input((5, 8))
    with pytest.raises(TypeError, match="mha\\(query, value\\)"):
        L.MultiHeadAttention(2, 4)(x)
    with pytest.raises(ValueError, match="return_attention_scores"):
        L.MultiHeadAttention(2, 4)(x, x, return_attention_scores=True)
    with pytest.raises(ValueError, match="value and key"):
        L.MultiHeadAttention(2, 4)(x, x, key=keras.Input((6, 8)))
    with pytest.raises(ValueError, match="attention_mask must be"):
        L.MultiHeadAttention(2, 4)(x, x, attention_mask=keras.Input((5, 4)))
    with pytest.raises(ValueError, match="Sequential|Functional"):
        keras.Sequential([keras.Input((5, 8)), L.MultiHeadAttention(2, 4)]).to_json()
    with pytest.raises(ValueError, match="Dimension incompatibility"):
        L.Dot(axes=1)([keras.Input((4, 3)), keras.Input((5, 3))])
    with pytest.raises(ValueError, match="num_heads"):
        L.MultiHeadAttention(0, 4)
