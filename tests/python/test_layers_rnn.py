"""rtrain.layers' Embedding, SimpleRNN, LSTM, GRU and Bidirectional: the
JSON Keras 2 writes for them (get_config, from keras/layers/core/
embedding.py and keras/layers/rnn/*.py), summary shapes and parameter
counts worked by hand from Keras' weight shapes, and small models trained on
a real rtraind whose predictions match a NumPy forward pass of the same
weights (Keras' gate order and layouts)."""
import json

import numpy as np
import pytest

import rtrain
from rtrain import layers as L

GLOROT = {"class_name": "GlorotUniform", "config": {"seed": None}}
ORTHO = {"class_name": "Orthogonal", "config": {"gain": 1.0, "seed": None}}
ZEROS = {"class_name": "Zeros", "config": {}}
RNN_BASE = {"return_sequences": False, "return_state": False,
            "go_backwards": False, "stateful": False, "unroll": False,
            "time_major": False}
NULLS = {k: None for k in (
    "kernel_regularizer", "recurrent_regularizer", "bias_regularizer",
    "activity_regularizer", "kernel_constraint", "recurrent_constraint",
    "bias_constraint")}


def layer_cfgs(m):
    return [l["config"] for l in json.loads(m.to_json())["config"]["layers"]]


# ------------------------------------------------------------- Keras JSON

def test_embedding_config_is_keras2():
    m = rtrain.Sequential([L.Embedding(100, 16, input_length=10)])
    inp, cfg = layer_cfgs(m)
    assert inp["batch_input_shape"] == [None, 10]
    assert cfg == {
        "name": "embedding", "trainable": True, "dtype": "float32",
        "batch_input_shape": [None, 10], "input_dim": 100, "output_dim": 16,
        "embeddings_initializer": {"class_name": "RandomUniform", "config": {
            "minval": -0.05, "maxval": 0.05, "seed": None}},
        "embeddings_regularizer": None, "activity_regularizer": None,
        "embeddings_constraint": None, "mask_zero": False,
        "input_length": 10}


def test_recurrent_configs_are_keras2():
    m = rtrain.Sequential([
        L.SimpleRNN(4, return_sequences=True, input_shape=(5, 3)),
        L.LSTM(6, return_sequences=True, go_backwards=True),
        L.GRU(2, reset_after=False, recurrent_activation="hard_sigmoid"),
    ])
    _, s, l, g = layer_cfgs(m)
    common = dict(RNN_BASE, trainable=True, dtype="float32", use_bias=True,
                  kernel_initializer=GLOROT, recurrent_initializer=ORTHO,
                  bias_initializer=ZEROS, dropout=0.0, recurrent_dropout=0.0,
                  activation="tanh", **NULLS)
    assert s == dict(common, name="simple_rnn", units=4,
                     batch_input_shape=[None, 5, 3], return_sequences=True)
    assert l == dict(common, name="lstm", units=6, return_sequences=True,
                     go_backwards=True, recurrent_activation="sigmoid",
                     unit_forget_bias=True, implementation=2)
    assert g == dict(common, name="gru", units=2,
                     recurrent_activation="hard_sigmoid", implementation=2,
                     reset_after=False)


def test_bidirectional_config_and_round_trip():
    m = rtrain.Sequential([
        L.Embedding(30, 4, input_length=7),
        L.Bidirectional(L.GRU(3), merge_mode="sum"),
    ])
    cfg = layer_cfgs(m)[2]
    assert cfg["name"] == "bidirectional"
    assert cfg["merge_mode"] == "sum"
    assert cfg["layer"]["class_name"] == "GRU"
    assert cfg["layer"]["config"]["name"] == "gru"
    assert cfg["layer"]["config"]["reset_after"] is True
    assert set(cfg) == {"name", "trainable", "dtype", "layer", "merge_mode"}
    # model_from_json rebuilds the same model.
    j = m.to_json()
    assert json.loads(rtrain.models.model_from_json(j).to_json()) == \
        json.loads(j)


def test_bad_recurrent_settings_are_refused():
    with pytest.raises(ValueError, match="units"):
        L.LSTM(0)
    with pytest.raises(ValueError, match="recurrent_activation"):
        L.GRU(3, recurrent_activation="softmax")
    with pytest.raises(ValueError, match="return_state has several outputs"):
        rtrain.Sequential([L.LSTM(3, return_state=True, input_shape=(4, 2))])
    with pytest.raises(ValueError, match="return_state has several outputs"):
        rtrain.Sequential([L.Bidirectional(L.GRU(3, return_state=True), input_shape=(4, 2))])
    with pytest.raises(ValueError, match="go the other way"):
        L.Bidirectional(L.LSTM(3), backward_layer=L.LSTM(3))
    with pytest.raises(ValueError, match="kernel_constraint"):
        L.LSTM(3, kernel_constraint="clip")
    with pytest.raises(ValueError, match="merge_mode"):
        L.Bidirectional(L.LSTM(3), merge_mode="max")
    with pytest.raises(TypeError):
        L.Bidirectional(L.Dense(3))
    with pytest.raises(ValueError, match="timesteps"):
        rtrain.Sequential([L.LSTM(3, input_shape=(4,))]).output_shape
    with pytest.raises(ValueError, match="input_length"):
        rtrain.Sequential([L.Embedding(5, 2, input_length=3,
                                       input_shape=(4,))]).output_shape


# ---------------------------------------------------- summary and counts

def test_summary_shapes_and_counts(capsys):
    m = rtrain.Sequential([
        L.Embedding(100, 16, input_length=10),          # 100*16 = 1600
        L.SimpleRNN(8, return_sequences=True),          # 8*(16+8)+8 = 200
        L.Bidirectional(L.LSTM(8, return_sequences=True)),  # 2*4*(8*(8+8)+8)
        L.GRU(5),                                        # 3*(5*(16+5)+2*5)
        L.Dense(2),                                      # 5*2+2 = 12
    ])
    m.summary()
    out = capsys.readouterr().out
    for row in [
            "embedding (Embedding)        (None, 10, 16)            1600",
            "simple_rnn (SimpleRNN)       (None, 10, 8)             200",
            "(None, 10, 16)            1088",
            "gru (GRU)                    (None, 5)                 345",
            "dense (Dense)                (None, 2)                 12"]:
        assert row in out, row
    assert "Total params: 3,245" in out
    assert m.count_params() == 3245
    # GRU without reset_after has one bias row: 3*(5*(16+5)+5).
    g = rtrain.Sequential([L.GRU(5, reset_after=False,
                                 input_shape=(10, 16))])
    assert g.count_params() == 330
    # Bidirectional(concat) doubles the units; sum/mul/ave keep them.
    b = rtrain.Sequential([L.Bidirectional(L.SimpleRNN(3),
                                           merge_mode="ave",
                                           input_shape=(4, 2))])
    assert b.output_shape == (None, 3)
    assert b.count_params() == 2 * (3 * (2 + 3) + 3)


# ------------------------------------------------ NumPy reference forward

def sig(z):
    return 1.0 / (1.0 + np.exp(-z))


def rnn_np(kind, x, w, go_backwards=False, seq=False):
    """Keras' recurrences (gate orders i f c o for LSTM, z r h for GRU
    with reset_after), float64."""
    k, r, b = (a.astype(np.float64) for a in w)
    n, t, _ = x.shape
    u = r.shape[0]
    h, c = np.zeros((n, u)), np.zeros((n, u))
    outs = []
    steps = range(t - 1, -1, -1) if go_backwards else range(t)
    for s in steps:
        xt = x[:, s, :].astype(np.float64)
        if kind == "simple":
            h = np.tanh(xt @ k + h @ r + b)
        elif kind == "lstm":
            z = xt @ k + h @ r + b
            i, f, g, o = np.split(z, 4, axis=1)
            c = sig(f) * c + sig(i) * np.tanh(g)
            h = sig(o) * np.tanh(c)
        else:  # GRU, reset_after: bias (2, 3u)
            mx = xt @ k + b[0]
            mh = h @ r + b[1]
            xz, xr, xh = np.split(mx, 3, axis=1)
            hz, hr, hh = np.split(mh, 3, axis=1)
            zg, rg = sig(xz + hz), sig(xr + hr)
            h = zg * h + (1 - zg) * np.tanh(xh + rg * hh)
        outs.append(h)
    return np.stack(outs, axis=1) if seq else h


def data(n=48, t=6, vocab=12, seed=0):
    rng = np.random.RandomState(seed)
    x = rng.randint(0, vocab, (n, t)).astype(np.float32)
    y = (x[:, 0] > vocab / 2).astype(np.int64)
    return x, y


def init_weights(m, seed=1):
    rng = np.random.RandomState(seed)
    ws = [rng.uniform(-0.4, 0.4, shape).astype(np.float32)
          for _, shape, _ in m.weight_specs()]
    m.set_weights(ws)
    return ws


def fit_and_check(m, forward, x, y):
    ws = init_weights(m)
    m.compile(optimizer=rtrain.optimizers.Adam(0.02),
              loss="sparse_categorical_crossentropy", batch_size=16)
    np.testing.assert_allclose(m.predict(x), forward(ws, x), rtol=2e-4,
                               atol=2e-5)
    h = m.fit(x, y, batch_size=16, epochs=8, verbose=0)
    assert h.status == "done" and len(h["loss"]) == 8
    assert h["loss"][-1] < h["loss"][0]
    # After training the weights still drive the same computation.
    np.testing.assert_allclose(m.predict(x), forward(m.get_weights(), x),
                               rtol=2e-4, atol=2e-5)


def softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    return np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)


def embed(e, x):
    return e.astype(np.float64)[x.astype(np.int64)]


@pytest.mark.parametrize("kind", ["simple", "lstm", "gru"])
def test_recurrent_model_trains_and_matches_numpy(client, kind):
    x, y = data()
    cls = {"simple": L.SimpleRNN, "lstm": L.LSTM, "gru": L.GRU}[kind]
    m = rtrain.Sequential([
        L.Embedding(12, 4, input_length=6),
        cls(5),
        L.Dense(2, activation="softmax"),
    ])

    def forward(ws, xx):
        h = rnn_np(kind, embed(ws[0], xx), ws[1:4])
        return softmax(h @ ws[4] + ws[5])

    fit_and_check(m, forward, x, y)


def test_bidirectional_model_trains_and_matches_numpy(client):
    x, y = data(seed=3)
    m = rtrain.Sequential([
        L.Embedding(12, 3, input_length=6),
        L.Bidirectional(L.LSTM(4, return_sequences=True)),
        L.GRU(3, go_backwards=True),
        L.Dense(2, activation="softmax"),
    ])

    def forward(ws, xx):
        e = embed(ws[0], xx)
        fw = rnn_np("lstm", e, ws[1:4], seq=True)
        # Keras reverses the backward half's sequence back into time order.
        bw = rnn_np("lstm", e, ws[4:7], go_backwards=True, seq=True)[:, ::-1]
        h = rnn_np("gru", np.concatenate([fw, bw], axis=2), ws[7:10],
                   go_backwards=True)
        return softmax(h @ ws[10] + ws[11])

    fit_and_check(m, forward, x, y)


def test_keras_default_initializers_reach_the_daemon(client):
    """Orthogonal recurrent kernels and RandomUniform(-0.05, 0.05)
    embeddings, as the layers serialise Keras' defaults; LSTM's
    unit_forget_bias starts the forget gate's bias at 1."""
    m = rtrain.Sequential([L.Embedding(50, 8, input_length=4),
                           L.LSTM(6), L.Dense(2, activation="softmax")])
    m.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    e, k, r, b = m.get_weights()[:4]
    assert e.shape == (50, 8) and np.abs(e).max() <= 0.05
    assert e.std() > 0.01  # drawn, not constant
    # (6, 24): orthonormal rows.
    np.testing.assert_allclose(r @ r.T, np.eye(6), atol=1e-5)
    np.testing.assert_array_equal(b, np.r_[np.zeros(6), np.ones(6),
                                           np.zeros(12)].astype(np.float32))
