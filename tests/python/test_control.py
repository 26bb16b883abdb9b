"""Learning-rate changes and stops from a batch callback reach the daemon
inside a Fit stream (the Control call) and take effect at its next step
boundary, on a real rtraind.

The daemon runs ahead of the events the callbacks see, so the step where a
change lands is the one the stream reports (history.lr_changes,
history.stopped_at_step); the references replay plain SGD on a linear
softmax model in NumPy with the change at exactly that step."""
import numpy as np
import pytest

import rtrain
from rtrain import layers as L
from rtrain import callbacks as C


def model(w, b):
    m = rtrain.Sequential([L.Dense(w.shape[1], activation="softmax",
                                   input_shape=(w.shape[0],))])
    m.set_weights([w, b])
    return m


def init(seed=1):
    rng = np.random.RandomState(seed)
    return (rng.normal(0, 0.5, (4, 3)).astype(np.float32),
            rng.normal(0, 0.1, (3,)).astype(np.float32))


def data(n, seed=2):
    rng = np.random.RandomState(seed)
    return (rng.normal(0, 1, (n, 4)).astype(np.float32),
            rng.randint(0, 3, n).astype(np.int64))


def sgd_replay(x, y, w, b, bs, rates):
    """len(rates) SGD steps over x, y in order (batches of bs, wrapping
    around), step k at rates[k]; sparse CE over softmax (float64)."""
    w, b = w.astype(np.float64), b.astype(np.float64)
    spe = -(-len(x) // bs)
    for k, lr in enumerate(rates):
        i = k % spe
        xb = x[i * bs:(i + 1) * bs].astype(np.float64)
        yb = y[i * bs:(i + 1) * bs]
        z = xb @ w + b
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
        p[np.arange(len(xb)), yb] -= 1.0
        p /= len(xb)
        w, b = w - lr * (xb.T @ p), b - lr * p.sum(axis=0)
    return w, b


def replay_tol(steps, w, b):
    """How far the daemon's float32 weights may be from the float64 replay
    after `steps` steps, which is as many as the daemon ran ahead of the
    callbacks: a few, or thousands on a quick machine. Each step rounds
    every weight at most twice (the product and the update; unit roundoff
    2^-24 relative to the weight), accumulated linearly, plus 1e-5."""
    return 1e-5 + 2 * steps * 2.0**-24 * max(np.abs(w).max(), np.abs(b).max(), 1.0)


class Script(C.Callback):
    """At the first batch end, sets the first rate; once the stream has
    reported the step where the previous rate landed, sets the next; after
    the last one landed, stops. fired: the batches it acted at."""

    def __init__(self, rates):
        super().__init__()
        self.rates, self.fired, self.pids = list(rates), [], set()

    def on_batch_end(self, batch, logs=None):
        self.pids.add(self.model.compiled.program_id)
        landed = len(self.model.history.lr_changes)
        if landed < len(self.fired):
            return
        if self.rates:
            self.fired.append(batch)
            self.model.optimizer.learning_rate = self.rates.pop(0)
        elif not self.model.stop_training:
            self.fired.append(batch)
            self.model.stop_training = True


# An epoch of 10^6 steps over a few samples: only the callbacks' stop ends it
# early, so every change lands inside it.
SPE = 1000000


def test_lr_set_in_on_batch_end_applies_at_the_reported_step(client):
    x, y = data(64)
    w0, b0 = init()
    m = model(w0, b0)
    m.compile(optimizer=rtrain.optimizers.SGD(0.1),
              loss="sparse_categorical_crossentropy")
    cb = Script([0.02, 1e-5])
    h = m.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False,
              steps_per_epoch=SPE, callbacks=[cb])
    assert h.status == "stopped"
    assert cb.pids == {m.compiled.program_id}  # no recompile
    assert len(cb.fired) == 3
    # Each change is reported at the first step that used it, in order;
    # the callback saw the event of step fired + 1, so the daemon cannot
    # have changed the rate before step fired + 2.
    assert [r for _, r in h.lr_changes] == pytest.approx([0.02, 1e-5],
                                                          rel=1e-7)
    (s1, _), (s2, _) = h.lr_changes
    assert cb.fired[0] + 2 <= s1 and cb.fired[1] + 2 <= s2 and s1 < s2
    gs = m.compiled.global_step
    assert h.stopped_at_step == gs and s2 <= gs < SPE
    rates = [0.1] * (s1 - 1) + [0.02] * (s2 - s1) + [1e-5] * (gs - s2 + 1)
    w, b = sgd_replay(x, y, w0, b0, 8, rates)
    w1, b1 = m.get_weights()
    tol = replay_tol(gs, w, b)
    np.testing.assert_allclose(w1, w, rtol=0, atol=tol)
    np.testing.assert_allclose(b1, b, rtol=0, atol=tol)
    # Had the first change been ignored, the weights would differ (the
    # last rate is small so that the steps after it keep the difference).
    w_old, _ = sgd_replay(x, y, w0, b0, 8,
                          [0.1] * (s2 - 1) + [1e-5] * (gs - s2 + 1))
    assert np.abs(w_old - w1).max() > 10 * np.abs(w - w1).max()
    # The rate is kept on the daemon for the next fit.
    assert m.compiled.learning_rate == pytest.approx(1e-5, rel=1e-7)


def test_stop_in_on_batch_end_ends_the_fit_at_the_next_step(client):
    x, y = data(8)
    w0, b0 = init(4)
    m = model(w0, b0)
    m.compile(optimizer=rtrain.optimizers.SGD(0.05),
              loss="sparse_categorical_crossentropy")
    seen = []

    class Stop(C.Callback):
        def on_batch_end(self, batch, logs=None):
            seen.append(batch)
            if batch >= 2:
                self.model.stop_training = True

        def on_epoch_end(self, epoch, logs=None):
            seen.append(("epoch", epoch))

    spe = SPE
    h = m.fit(x, y, batch_size=2, epochs=3, verbose=0, shuffle=False,
              steps_per_epoch=spe, callbacks=[Stop()])
    assert h.status == "stopped"
    assert ("epoch", 0) not in seen  # stopped inside epoch 0
    gs = m.compiled.global_step
    assert h.stopped_at_step == gs
    # After the event of step 3 (batch 2) and before the epoch's end.
    assert 4 <= gs < spe
    assert "loss" not in h  # no epoch completed
    w, b = sgd_replay(x, y, w0, b0, 2, [0.05] * gs)
    np.testing.assert_allclose(m.get_weights()[0], w, rtol=0, atol=replay_tol(gs, w, b))
    # A stop never carries over: the next fit runs in full.
    m.stop_training = False
    h2 = m.fit(x, y, batch_size=2, epochs=1, verbose=0, shuffle=False,
               callbacks=[C.Callback()])
    assert h2.status == "done"
    assert m.compiled.global_step == gs + 4


def test_control_outside_a_fit(client):
    x, y = data(8)
    w0, b0 = init()
    m = model(w0, b0)
    m.compile(optimizer=rtrain.optimizers.SGD(0.1),
              loss="sparse_categorical_crossentropy")
    prog = m.compiled._prog
    # Nothing runs: a stop is a no-op, a rate is kept for the next run.
    assert prog.control(stop=True) is False
    assert prog.control(learning_rate=0.03) is False
    assert m.compiled.learning_rate == pytest.approx(0.03, rel=1e-7)
    m.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False)
    w, b = sgd_replay(x, y, w0, b0, 8, [0.03])
    np.testing.assert_allclose(m.get_weights()[0], w, rtol=1e-5, atol=1e-6)
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            prog.control(learning_rate=bad)
