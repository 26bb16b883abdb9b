"""Keras' stateful RNNs (stateful=True) against PyTorch's own training loop
carrying the hidden states from batch to batch.

Keras (keras/layers/rnn/base_rnn.py; the FAQ "How can I use stateful
RNNs?"): the batch size is fixed by the model's batch_input_shape; the
final states of sample i of a batch are the initial states of sample i of
the next batch, in fit, evaluate and predict alike and across calls; they
do not carry a gradient (truncated backpropagation through time);
model.reset_states() and layer.reset_states() zero them; a data size the
batch size does not divide is refused ("In a stateful network, you should
only pass inputs with a number of samples that can be divided by the batch
size").

The reference is torch.nn.LSTM / GRU / RNN with the same weights (Keras'
gate order mapped to PyTorch's), trained by plain SGD on the same batches
in the same order, with (h, c) = (h, c).detach() between batches: the
weights after each fit and the predictions after reset_states must agree
on the CPU backend and on the reference backend (a second daemon run with
--backend ref).
"""
import numpy as np
import pytest
import torch

import rtrain
from rtrain import layers as L

from conftest import Daemon

B, T, F, U = 4, 5, 3, 6
LR = 0.1


@pytest.fixture(scope="module", params=["default", "ref"])
def sclient(request):
    d = Daemon("--backend", "ref") if request.param == "ref" else Daemon()
    c = rtrain.connect(d.addr, timeout=60)
    yield c
    c.close()
    d.stop()


def _data(n, seed=0):
    rng = np.random.RandomState(seed)
    return (rng.randn(n, T, F).astype(np.float32),
            rng.randn(n, 1).astype(np.float32))


def _build(client, kind, layers=1):
    cls = {"lstm": L.LSTM, "gru": L.GRU, "rnn": L.SimpleRNN}[kind]
    rnns = [cls(U, stateful=True, return_sequences=i + 1 < layers, name="rnn%d" % i,
                **({"batch_input_shape": (B, T, F)} if i == 0 else {}))
            for i in range(layers)]
    m = rtrain.Sequential(rnns + [L.Dense(1, name="out")])
    m.compile(rtrain.optimizers.SGD(LR), "mse", shuffle=False, client=client)
    rng = np.random.RandomState(11)
    # weights large enough that the carried states matter
    m.set_weights([rng.uniform(-0.6, 0.6, w.shape).astype(np.float32)
                   for w in m.get_weights()])
    return m


def _torch_rnn(kind, k, r, b, fin):
    """A torch module with Keras' kernel k (F, G*U), recurrent kernel r
    (U, G*U) and bias b ((G*U) or GRU's (2, 3U))."""
    t = lambda a: torch.tensor(np.ascontiguousarray(a))  # noqa: E731
    if kind == "lstm":  # Keras i, f, c, o = PyTorch i, f, g, o
        mod = torch.nn.LSTM(fin, U, batch_first=True)
        mod.weight_ih_l0.data, mod.weight_hh_l0.data = t(k.T), t(r.T)
        mod.bias_ih_l0.data, mod.bias_hh_l0.data = t(b), torch.zeros(4 * U)
    elif kind == "gru":  # Keras z, r, h (reset_after) -> PyTorch r, z, n
        perm = np.r_[U:2 * U, 0:U, 2 * U:3 * U]
        mod = torch.nn.GRU(fin, U, batch_first=True)
        mod.weight_ih_l0.data, mod.weight_hh_l0.data = t(k[:, perm].T), t(r[:, perm].T)
        mod.bias_ih_l0.data, mod.bias_hh_l0.data = t(b[0][perm]), t(b[1][perm])
    else:
        mod = torch.nn.RNN(fin, U, batch_first=True)
        mod.weight_ih_l0.data, mod.weight_hh_l0.data = t(k.T), t(r.T)
        mod.bias_ih_l0.data, mod.bias_hh_l0.data = t(b), torch.zeros(U)
    if kind != "gru":
        # Keras has one bias: PyTorch's second stays 0, out of the training
        mod.bias_hh_l0.requires_grad_(False)
    return mod


def _keras_of(kind, mod):
    """The torch module's weights back in Keras' layout."""
    g = lambda p: p.detach().numpy()  # noqa: E731
    k, r = g(mod.weight_ih_l0).T, g(mod.weight_hh_l0).T
    if kind == "gru":
        inv = np.r_[U:2 * U, 0:U, 2 * U:3 * U]  # the permutation is its own inverse
        return [k[:, inv], r[:, inv], np.stack([g(mod.bias_ih_l0)[inv], g(mod.bias_hh_l0)[inv]])]
    # one Keras bias: the two PyTorch biases get the same gradient
    return [k, r, g(mod.bias_ih_l0) + g(mod.bias_hh_l0)]


class TorchModel:
    """The same model in PyTorch, with its states carried by hand."""

    def __init__(self, kind, weights, layers):
        self.kind, self.rnns, fin = kind, [], F
        for i in range(layers):
            self.rnns.append(_torch_rnn(kind, *weights[3 * i:3 * i + 3], fin))
            fin = U
        self.dense = torch.nn.Linear(U, 1)
        self.dense.weight.data = torch.tensor(weights[-2].T.copy())
        self.dense.bias.data = torch.tensor(weights[-1].copy())
        self.params = [p for m in self.rnns + [self.dense] for p in m.parameters()
                       if p.requires_grad]
        self.reset()

    def reset(self, only=None):
        for i in range(len(self.rnns)):
            if only is None or only == i:
                z = torch.zeros(1, B, U)
                self.states = getattr(self, "states", [None] * len(self.rnns))
                self.states[i] = (z, z.clone()) if self.kind == "lstm" else z

    def forward(self, x):
        h = torch.tensor(x)
        for i, mod in enumerate(self.rnns):
            h, st = mod(h, self.states[i])
            # truncated BPTT: the next batch starts from the values only
            self.states[i] = tuple(s.detach() for s in st) if self.kind == "lstm" \
                else st.detach()
        return self.dense(h[:, -1])

    def fit(self, x, y):
        for s in range(0, len(x), B):
            loss = torch.mean((self.forward(x[s:s + B]) - torch.tensor(y[s:s + B])) ** 2)
            for p in self.params:
                p.grad = None
            loss.backward()
            with torch.no_grad():
                for p in self.params:
                    p -= LR * p.grad

    def predict(self, x):
        with torch.no_grad():
            return np.concatenate([self.forward(x[s:s + B]).numpy()
                                   for s in range(0, len(x), B)])

    def weights(self):
        out = []
        for mod in self.rnns:
            out += _keras_of(self.kind, mod)
        return out + [self.dense.weight.detach().numpy().T, self.dense.bias.detach().numpy()]


def _close(got, want, what):
    for i, (a, b) in enumerate(zip(got, want)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=2e-5, err_msg="%s %d" % (what, i))


@pytest.mark.parametrize("kind,layers", [("lstm", 2), ("gru", 1), ("rnn", 2)])
def test_fit_predict_and_reset_match_torch(sclient, kind, layers):
    m = _build(sclient, kind, layers)
    assert m.compiled.batch_size == B  # the model's fixed batch, not 32
    tm = TorchModel(kind, m.get_weights(), layers)
    x, y = _data(6 * B)
    # two fit calls: the states go on across calls, as across batches
    m.fit(x, y, epochs=1, shuffle=False, verbose=0)
    tm.fit(x, y)
    _close(m.get_weights(), tm.weights(), "weights after the first fit")
    m.fit(x, y, epochs=1, shuffle=False, verbose=0)
    tm.fit(x, y)
    _close(m.get_weights(), tm.weights(), "weights after the second fit")
    # predict carries the states on (Keras: predict updates them too)
    _close([m.predict(x[:2 * B])], [tm.predict(x[:2 * B])], "carried predict")
    m.reset_states()
    tm.reset()
    p0 = m.predict(x)
    _close([p0], [tm.predict(x)], "predict after reset_states")
    # the carried states change the output: without a reset, the same
    # input predicts something else (the test would not see a missed carry)
    assert np.max(np.abs(m.predict(x) - p0)) > 1e-3
    # evaluate carries them as well, from zeros after a reset
    m.reset_states()
    tm.reset()
    ev = m.evaluate(x, y, verbose=0)
    ev = ev[0] if isinstance(ev, (list, tuple)) else ev
    want = float(np.mean((tm.predict(x) - y) ** 2))
    assert ev == pytest.approx(want, rel=1e-4)


def test_layer_reset_states_resets_only_that_layer(sclient):
    m = _build(sclient, "lstm", 2)
    tm = TorchModel("lstm", m.get_weights(), 2)
    x, _ = _data(3 * B, seed=3)
    _close([m.predict(x)], [tm.predict(x)], "predict")
    m.get_layer("rnn1").reset_states()
    tm.reset(only=1)
    _close([m.predict(x)], [tm.predict(x)], "predict after rnn1.reset_states()")
    with pytest.raises(AttributeError, match="Layer must be stateful"):
        L.LSTM(2).reset_states()
    with pytest.raises(rtrain.Error, match="no stateful RNN layer 'out'"):
        m.compiled.reset_states("out")


def test_keras_rules_are_kept(sclient):
    m = _build(sclient, "gru", 1)
    x, y = _data(3 * B + 1)
    with pytest.raises(rtrain.Error, match="can be divided by the batch size 4. Found: 13"):
        m.fit(x, y, epochs=1, shuffle=False, verbose=0)
    with pytest.raises(rtrain.Error, match="can be divided by the batch size 4"):
        m.predict(x)
    with pytest.raises(rtrain.Error, match="compile with batch_size 4, not 8"):
        m.fit(x[:8], y[:8], batch_size=8, epochs=1, shuffle=False, verbose=0)
    # without a fixed batch size Keras cannot build a stateful layer
    bad = rtrain.Sequential([L.LSTM(3, stateful=True, input_shape=(T, F)), L.Dense(1)])
    with pytest.raises(rtrain.Error, match="needs a fixed batch size"):
        bad.compile("sgd", "mse", client=sclient)
