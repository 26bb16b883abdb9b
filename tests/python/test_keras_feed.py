"""fit, evaluate and predict on a Python generator and on a keras.utils.
Sequence (rtrain.utils.Sequence), and learning rates computed in Python
(PiecewiseConstantDecay, a callable), through rtraind.

The references are NumPy: one Dense layer trained with SGD on mse, whose
gradient is exact in closed form (d/dW mean((xW + b - y)^2) = 2 x^T r /
r.size), batch by batch in the order Keras 3 would feed them:
  * keras/src/trainers/epoch_iterator.py (EpochIterator): steps_per_epoch
    batches per epoch, a Sequence's order carried across epochs when
    steps_per_epoch is given and restarted after len(seq) batches;
  * keras/src/trainers/data_adapters/py_dataset_adapter.py: with shuffle
    the order of a Sequence's batches is random.Random(epoch).shuffle(
    list(range(len))), epoch counting the adapter's on_epoch_end calls;
  * keras/src/trainers/trainer.py and compile_utils.py: the epoch loss is
    the batches' losses (each before its update) weighted by batch size;
  * keras/src/optimizers/schedules/learning_rate_schedule.py
    (PiecewiseConstantDecay) and base_optimizer.py
    (_get_current_learning_rate: a schedule at optimizer.iterations, a
    callable called with no arguments, once per step).
"""
import random

import numpy as np
import pytest

import rtrain
from rtrain import _feed
from rtrain import layers as L

SIZES = [8, 8, 8, 8, 3]  # one pass: the last batch smaller


def _batches(seed=5, sizes=SIZES, d_in=5, d_out=2):
    rng = np.random.RandomState(seed)
    out = []
    for n in sizes:
        x = rng.uniform(-1, 1, (n, d_in)).astype(np.float32)
        y = rng.uniform(-1, 1, (n, d_out)).astype(np.float32)
        out.append((x, y))
    return out


class Seq(rtrain.utils.Sequence):
    def __init__(self, batches):
        super().__init__()
        self.b = batches
        self.begins = self.ends = 0

    def __len__(self):
        return len(self.b)

    def __getitem__(self, i):
        return self.b[i]

    def on_epoch_begin(self):
        self.begins += 1

    def on_epoch_end(self):
        self.ends += 1


class Ref:
    """SGD on one Dense layer, in float64."""

    def __init__(self, W, b):
        self.W, self.b = W.astype(np.float64), b.astype(np.float64)

    def loss(self, x, y):
        r = x.astype(np.float64) @ self.W + self.b - y
        return float(np.mean(r * r)), float(np.mean(np.abs(r)))

    def step(self, x, y, lr):
        X = x.astype(np.float64)
        r = X @ self.W + self.b - y
        loss, mae = float(np.mean(r * r)), float(np.mean(np.abs(r)))
        self.W -= lr * 2 * X.T @ r / r.size
        self.b -= lr * 2 * r.sum(0) / r.size
        return loss, mae

    def epoch(self, batches, lr):
        """Keras' epoch logs: losses weighted by batch size."""
        n = ls = ms = 0.0
        for k, (x, y) in enumerate(batches):
            rate = lr(k) if callable(lr) else lr
            loss, mae = self.step(x, y, rate)
            n, ls, ms = n + len(x), ls + len(x) * loss, ms + len(x) * mae
        return ls / n, ms / n


def _model(client, opt, metrics=("mae",)):
    m = rtrain.Sequential([L.Dense(2, input_shape=(5,))])
    m.compile(optimizer=opt, loss="mse", metrics=list(metrics), label_shape=(2,),
              client=client)
    return m, Ref(*m.get_weights())


def _close(m, ref):
    W, b = m.get_weights()
    np.testing.assert_allclose(W, ref.W, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b, ref.b, rtol=1e-5, atol=1e-6)


def _keras_order(n, epoch, shuffle):
    order = list(range(n))
    if shuffle:
        random.Random(epoch).shuffle(order)
    return order


@pytest.mark.parametrize("shuffle", [False, True])
def test_sequence_epochs(client, shuffle, monkeypatch):
    batches = _batches()
    seq = Seq(batches)
    m, ref = _model(client, rtrain.optimizers.SGD(0.1))
    # a small chunk budget: several uploads per epoch, none holding more
    monkeypatch.setattr(_feed, "CHUNK_BYTES", 600)  # two batches of 8
    sent = []
    orig = client._upload

    def spy(xs, ys=None, name="data", sw=None, **kw):
        sent.append((name, xs.nbytes + (ys.nbytes if ys is not None else 0)))
        return orig(xs, ys, name, sw, **kw)
    monkeypatch.setattr(client, "_upload", spy)
    h = m.fit(seq, epochs=3, shuffle=shuffle, verbose=0)
    want = [ref.epoch([batches[i] for i in _keras_order(5, e, shuffle)], 0.1)
            for e in range(3)]
    assert h.status == "done"
    assert h.history["loss"] == pytest.approx([w[0] for w in want], rel=1e-5)
    assert h.history["mae"] == pytest.approx([w[1] for w in want], rel=1e-5)
    _close(m, ref)
    assert (seq.begins, seq.ends) == (3, 3)
    train = [b for n, b in sent if n == "train"]
    assert len(train) >= 9 and max(train) <= _feed.CHUNK_BYTES


def test_sequence_steps_per_epoch_carries_over(client):
    """len 5, steps_per_epoch 2: epochs take batches 0-1, 2-3, then 4 alone
    (the order ran out: Keras warns and the epoch is shorter), then 0-1."""
    batches = _batches(seed=6)
    seq = Seq(batches)
    m, ref = _model(client, rtrain.optimizers.SGD(0.05))
    with pytest.warns(UserWarning, match="ran out of data"):
        h = m.fit(seq, epochs=4, steps_per_epoch=2, shuffle=False, verbose=0)
    want = [ref.epoch([batches[i] for i in idx], 0.05)
            for idx in ([0, 1], [2, 3], [4], [0, 1])]
    assert h.history["loss"] == pytest.approx([w[0] for w in want], rel=1e-5)
    _close(m, ref)
    assert seq.ends == 4


def test_generator_steps_and_exhaustion(client):
    batches = _batches(seed=7, sizes=[6] * 7)

    def loop():
        while True:
            yield from batches
    m, ref = _model(client, rtrain.optimizers.SGD(0.1))
    h = m.fit(loop(), epochs=3, steps_per_epoch=4, verbose=0)
    flat = (batches * 2)[:12]
    want = [ref.epoch(flat[4 * e:4 * e + 4], 0.1) for e in range(3)]
    assert h.history["loss"] == pytest.approx([w[0] for w in want], rel=1e-5)
    _close(m, ref)
    # a finite generator without steps_per_epoch: the first epoch runs it
    # out, the second has no data and the fit ends (Keras' warning)
    m2, ref2 = _model(client, rtrain.optimizers.SGD(0.1))
    with pytest.warns(UserWarning, match="ran out of data"):
        h2 = m2.fit((b for b in batches), epochs=3, verbose=0)
    assert h2.status == "stopped" and len(h2.history["loss"]) == 1
    assert h2.history["loss"][0] == pytest.approx(ref2.epoch(batches, 0.1)[0], rel=1e-5)
    _close(m2, ref2)


def test_validation_evaluate_predict_from_batches(client):
    batches = _batches(seed=8)
    val = _batches(seed=9, sizes=[4, 4, 2])
    m, ref = _model(client, rtrain.optimizers.SGD(0.1))
    h = m.fit(Seq(batches), validation_data=Seq(val), epochs=2, shuffle=False, verbose=0)
    for _ in range(2):
        ref.epoch(batches, 0.1)
    xv = np.concatenate([b[0] for b in val])
    yv = np.concatenate([b[1] for b in val])
    vloss, vmae = ref.loss(xv, yv)
    assert h.history["val_loss"][-1] == pytest.approx(vloss, rel=1e-5)
    assert h.history["val_mae"][-1] == pytest.approx(vmae, rel=1e-5)
    # validation_steps: a generator gives that many batches each time
    assert m.evaluate((b for b in val), steps=2) == pytest.approx(
        list(ref.loss(np.concatenate([b[0] for b in val[:2]]),
                      np.concatenate([b[1] for b in val[:2]]))), rel=1e-5)
    assert m.evaluate(Seq(val), return_dict=True) == pytest.approx(
        {"loss": vloss, "mae": vmae}, rel=1e-5)
    p = m.predict((b[0] for b in val))
    np.testing.assert_allclose(p, xv @ ref.W + ref.b, rtol=1e-5, atol=1e-6)
    assert m.predict(Seq(val), steps=1).shape == (4, 2)


def test_multi_io_generator_matches_arrays(client):
    """Two inputs, two outputs: batches from a generator train the same
    program steps as the arrays do (batch size 8, unshuffled)."""
    def build():
        a = L.Input(shape=(3,), name="a")
        b = L.Input(shape=(2,), name="b")
        j = L.Concatenate(name="j")([a, b])
        o1 = L.Dense(3, activation="softmax", name="o1")(j)
        o2 = L.Dense(1, name="o2")(j)
        m = rtrain.Model([a, b], [o1, o2])
        m.compile(rtrain.optimizers.SGD(0.2),
                  loss={"o1": "sparse_categorical_crossentropy", "o2": "mse"},
                  loss_weights={"o1": 1.0, "o2": 0.5}, batch_size=8, shuffle=False,
                  seed=3, client=client)
        return m
    rng = np.random.RandomState(10)
    xa, xb = rng.randn(20, 3).astype(np.float32), rng.randn(20, 2).astype(np.float32)
    y1, y2 = rng.randint(0, 3, 20), rng.randn(20, 1).astype(np.float32)
    ma, mg = build(), build()
    mg.set_weights(ma.get_weights())
    ha = ma.fit([xa, xb], [y1, y2], epochs=2, batch_size=8, shuffle=False, verbose=0)

    def gen():
        for _ in range(2):
            for i in range(0, 20, 8):
                yield ({"a": xa[i:i + 8], "b": xb[i:i + 8]},
                       {"o1": y1[i:i + 8], "o2": y2[i:i + 8]})
    hg = mg.fit(gen(), epochs=2, steps_per_epoch=3, verbose=0)
    assert hg.history["loss"] == pytest.approx(ha.history["loss"], rel=1e-6)
    for a, b in zip(ma.get_weights(), mg.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_class_weight_and_batch_weights_match_arrays(client):
    """class_weight applies per batch as on arrays, and a batch's third item
    is its sample weights (Keras' (x, y, sample_weight))."""
    rng = np.random.RandomState(15)
    x = rng.randn(20, 4).astype(np.float32)
    y = rng.randint(0, 3, 20)
    sw = rng.uniform(0.5, 2, 20).astype(np.float32)
    cw = {0: 1.0, 1: 3.0, 2: 0.5}

    def build():
        m = rtrain.Sequential([L.Dense(3, activation="softmax", input_shape=(4,))])
        m.compile(rtrain.optimizers.SGD(0.3), "sparse_categorical_crossentropy",
                  metrics=["accuracy"], batch_size=8, shuffle=False, seed=4, client=client)
        return m
    for kw, batch in (({"class_weight": cw}, lambda i: (x[i:i + 8], y[i:i + 8])),
                      ({"sample_weight": sw},
                       lambda i: (x[i:i + 8], y[i:i + 8], sw[i:i + 8]))):
        ma, mg = build(), build()
        mg.set_weights(ma.get_weights())
        ha = ma.fit(x, y, epochs=2, batch_size=8, shuffle=False, verbose=0, **kw)
        seq = Seq([batch(i) for i in range(0, 20, 8)])
        hg = mg.fit(seq, epochs=2, shuffle=False, verbose=0,
                    class_weight=kw.get("class_weight"))
        assert hg.history["loss"] == pytest.approx(ha.history["loss"], rel=1e-6)
        assert hg.history["accuracy"] == pytest.approx(ha.history["accuracy"], rel=1e-6)
        for a, b in zip(ma.get_weights(), mg.get_weights()):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_refusals(client):
    m, _ = _model(client, rtrain.optimizers.SGD(0.1))
    batches = _batches()
    with pytest.raises(ValueError, match="y must be None"):
        m.fit(Seq(batches), np.zeros(3), verbose=0)
    with pytest.raises(ValueError, match="without targets"):
        m.fit((b[0] for b in batches), epochs=1, verbose=0)
    with pytest.raises(ValueError, match="validation_split"):
        m.fit(Seq(batches), validation_split=0.2, verbose=0)
    m2 = rtrain.Sequential([L.Dense(1, activation="sigmoid", input_shape=(5,))])
    m2.compile("sgd", "binary_crossentropy", metrics=["auc"], client=client)
    with pytest.raises(ValueError, match="metric auc"):
        m2.fit((b[0], (b[1][:, :1] > 0).astype(np.float32)) for b in batches)


# ----------------------------------------------------------- learning rates

def _piecewise(boundaries, values):
    # learning_rate_schedule.py PiecewiseConstantDecay.__call__, transcribed
    def f(step):
        r = 0.0
        r += (step <= boundaries[0]) * values[0]
        r += (step > boundaries[-1]) * values[-1]
        for low, high, v in zip(boundaries[:-1], boundaries[1:], values[1:-1]):
            r += ((step > low) & (step <= high)) * v
        return r
    return f


@pytest.mark.parametrize("boundaries,values", [([2, 5], [0.3, 0.1, 0.02]),
                                               ([3.5], [0.2, 0.05])])
def test_piecewise_constant_decay(client, boundaries, values):
    S = rtrain.optimizers.schedules
    sched = S.PiecewiseConstantDecay(boundaries, values)
    ref_lr = _piecewise(boundaries, values)
    for t in range(10):
        assert sched(t) == pytest.approx(ref_lr(t), rel=1e-15)
    batches = _batches(seed=11, sizes=[8, 8, 4])
    m, ref = _model(client, rtrain.optimizers.SGD(learning_rate=sched))
    # 3 steps per epoch: the boundaries fall inside epochs
    h = m.fit(Seq(batches), epochs=3, shuffle=False, verbose=0)
    want = [ref.epoch(batches, lambda k, e=e: ref_lr(3 * e + k)) for e in range(3)]
    assert h.history["loss"] == pytest.approx([w[0] for w in want], rel=1e-5)
    _close(m, ref)
    # the same on arrays (the data uploaded once, runs of one rate)
    x = np.concatenate([b[0] for b in batches])
    y = np.concatenate([b[1] for b in batches])
    m2, ref2 = _model(client, rtrain.optimizers.SGD(learning_rate=sched))
    h2 = m2.fit(x, y, batch_size=8, shuffle=False, epochs=3, verbose=0)
    want2 = [ref2.epoch(batches, lambda k, e=e: ref_lr(3 * e + k)) for e in range(3)]
    assert h2.history["loss"] == pytest.approx([w[0] for w in want2], rel=1e-5)
    _close(m2, ref2)
    with pytest.raises(ValueError, match="1 less than the length"):
        S.PiecewiseConstantDecay([1, 2], [0.1, 0.2])


def test_callable_learning_rate(client):
    calls = []

    def rate():
        calls.append(1)
        return 0.2 / len(calls)
    batches = _batches(seed=12, sizes=[8, 8])
    m, ref = _model(client, rtrain.optimizers.SGD(learning_rate=rate))
    h = m.fit(Seq(batches), epochs=2, shuffle=False, verbose=0)
    want = [ref.epoch(batches, lambda k, e=e: 0.2 / (2 * e + k + 1)) for e in range(2)]
    assert h.history["loss"] == pytest.approx([w[0] for w in want], rel=1e-5)
    _close(m, ref)
    assert len(calls) == 4  # once per step, as Keras


def _ftrl_step(o, w, g, s):
    # keras/src/optimizers/ftrl.py update_step, transcribed
    lr, p = o.learning_rate, o.learning_rate_power
    acc = s.setdefault("acc", np.full_like(w, o.initial_accumulator_value))
    lin = s.setdefault("lin", np.zeros_like(w))
    l2 = o.l2_regularization_strength + o.beta / (2.0 * lr)
    gu = g + 2 * o.l2_shrinkage_regularization_strength * w
    new = acc + g * g
    lin += gu - (new ** -p - acc ** -p) / lr * w
    quad = new ** -p / lr + 2 * l2
    l1 = o.l1_regularization_strength
    acc[:] = new
    return (np.clip(lin, -l1, l1) - lin) / quad


def test_ftrl(client):
    opt = rtrain.optimizers.get("ftrl")
    assert isinstance(opt, rtrain.optimizers.Ftrl)
    assert opt.learning_rate_power == -0.5 and opt.initial_accumulator_value == 0.1
    opt = rtrain.optimizers.Ftrl(learning_rate=0.3, l1_regularization_strength=0.01,
                                 l2_regularization_strength=0.02, beta=0.1,
                                 l2_shrinkage_regularization_strength=0.005)
    if not rtrain.optimizers._FTRL_ON_DAEMON:
        # this build's daemon has no Ftrl update: refused by name, never
        # trained as something else
        with pytest.raises(ValueError, match="Ftrl is not supported"):
            _model(client, opt)
        return
    batches = _batches(seed=13, sizes=[10])
    m, ref = _model(client, opt)
    x, y = batches[0]
    sW, sb = {}, {}
    for _ in range(4):
        X = x.astype(np.float64)
        r = X @ ref.W + ref.b - y
        gW, gb = 2 * X.T @ r / r.size, 2 * r.sum(0) / r.size
        ref.W, ref.b = _ftrl_step(opt, ref.W, gW, sW), _ftrl_step(opt, ref.b, gb, sb)
    m.fit(x, y, batch_size=10, epochs=4, shuffle=False, verbose=0)
    _close(m, ref)


def test_optimizer_configs():
    O = rtrain.optimizers
    # Keras 2.11's Adam as model.save wrote it (training_config)
    k2 = {"class_name": "Adam", "config": {
        "name": "Adam", "weight_decay": None, "clipnorm": None, "global_clipnorm": None,
        "clipvalue": None, "use_ema": False, "ema_momentum": 0.99,
        "ema_overwrite_frequency": None, "jit_compile": True, "is_legacy_optimizer": False,
        "learning_rate": 0.0010000000474974513, "beta_1": 0.9, "beta_2": 0.999,
        "epsilon": 1e-07, "amsgrad": False}}
    a = O.deserialize(k2)
    assert isinstance(a, O.Adam) and a.learning_rate == pytest.approx(0.001)
    bad = dict(k2, config=dict(k2["config"], amsgrad=True))
    with pytest.raises(ValueError, match="amsgrad"):
        O.deserialize(bad)
    sched = O.schedules.PiecewiseConstantDecay([10], [0.1, 0.01])
    s = O.serialize(O.SGD(learning_rate=sched, momentum=0.9, clipnorm=1.0))
    assert s["class_name"] == "SGD" and s["config"]["learning_rate"]["class_name"] == \
        "PiecewiseConstantDecay"
    back = O.deserialize(s)
    assert back.momentum == 0.9 and back.clipnorm == 1.0
    assert back.schedule.get_config() == sched.get_config()
    with pytest.raises(ValueError, match="callable learning rate cannot be saved"):
        O.serialize(O.Adam(learning_rate=lambda: 0.1))


# ------------------------------------------------- per-output History

def _heads_model(client, metrics):
    a = L.Input(shape=(3,), name="a")
    h = L.Dense(4, activation="tanh", name="h")(a)
    o1 = L.Dense(3, activation="softmax", name="o1")(h)
    o2 = L.Dense(1, name="o2")(h)
    m = rtrain.Model(a, [o1, o2])
    m.compile(rtrain.optimizers.SGD(0.1), loss={"o1": "sparse_categorical_crossentropy",
                                                "o2": "mse"},
              loss_weights={"o1": 1.0, "o2": 0.5}, metrics=metrics, batch_size=12,
              shuffle=False, client=client)
    return m


def _head_figures(p1, p2, y1, y2):
    # Keras' per-output logs (compile_utils.py): each output's unweighted
    # loss and its metrics
    return {"o1_loss": float(-np.mean(np.log(p1[np.arange(len(y1)), y1]))),
            "o2_loss": float(np.mean((p2 - y2) ** 2)),
            "o1_accuracy": float(np.mean(np.argmax(p1, 1) == y1)),
            "o2_mae": float(np.mean(np.abs(p2 - y2)))}


def test_per_output_history(client):
    metrics = {"o1": ["accuracy"], "o2": ["mae"]}
    if not rtrain._PER_OUTPUT:
        # this build's librtrain has no per-output losses and metrics:
        # refused, never reported wrong
        with pytest.raises(ValueError, match="metrics of a model with several outputs"):
            _heads_model(client, metrics)
        return
    m = _heads_model(client, metrics)
    rng = np.random.RandomState(14)
    x = rng.randn(12, 3).astype(np.float32)
    y1, y2 = rng.randint(0, 3, 12), rng.randn(12, 1).astype(np.float32)
    xv = rng.randn(6, 3).astype(np.float32)
    yv1, yv2 = rng.randint(0, 3, 6), rng.randn(6, 1).astype(np.float32)
    # one step per epoch (the batch is all the data): an epoch's figures
    # are those of the weights before its step, validation's after it
    before = _head_figures(*m.predict(x), y1, y2)
    h = m.fit(x, [y1, y2], epochs=1, validation_data=(xv, [yv1, yv2]), verbose=0)
    after = _head_figures(*m.predict(xv), yv1, yv2)
    for k, v in before.items():
        assert h.history[k] == pytest.approx([v], rel=1e-5), k
    assert h.history["loss"] == pytest.approx(
        [before["o1_loss"] + 0.5 * before["o2_loss"]], rel=1e-5)
    for k, v in after.items():
        assert h.history["val_" + k] == pytest.approx([v], rel=1e-5), k
    assert m.evaluate(xv, [yv1, yv2], return_dict=True) == pytest.approx(
        dict(after, loss=after["o1_loss"] + 0.5 * after["o2_loss"]), rel=1e-5)
    assert m.metrics_names == ["loss", "o1_loss", "o2_loss", "o1_accuracy", "o2_mae"]


def test_per_output_from_generator(client):
    """Each output's History entries from a generator fit (the pieces'
    means merged here) equal the arrays' (the daemon's epoch means)."""
    metrics = {"o1": ["accuracy"], "o2": ["mae"]}
    if not rtrain._PER_OUTPUT:
        with pytest.raises(ValueError, match="metrics of a model with several outputs"):
            _heads_model(client, metrics)
        return
    rng = np.random.RandomState(16)
    x = rng.randn(20, 3).astype(np.float32)
    y1, y2 = rng.randint(0, 3, 20), rng.randn(20, 1).astype(np.float32)
    ma, mg = _heads_model(client, metrics), _heads_model(client, metrics)
    mg.set_weights(ma.get_weights())
    val = (x[:6], [y1[:6], y2[:6]])
    ha = ma.fit(x, [y1, y2], epochs=2, batch_size=4, shuffle=False, validation_data=val,
                verbose=0)
    batches = [(x[i:i + 4], [y1[i:i + 4], y2[i:i + 4]]) for i in range(0, 20, 4)]
    _feed.CHUNK_BYTES, keep = 200, _feed.CHUNK_BYTES  # a few batches per upload
    try:
        hg = mg.fit(Seq(batches), epochs=2, shuffle=False, validation_data=Seq([val]),
                    verbose=0)
    finally:
        _feed.CHUNK_BYTES = keep
    assert sorted(hg.history) == sorted(ha.history)
    assert "val_o2_mae" in hg.history and "o1_loss" in hg.history
    for k, v in ha.history.items():
        assert hg.history[k] == pytest.approx(v, rel=1e-5), k
