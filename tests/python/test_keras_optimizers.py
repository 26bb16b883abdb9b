"""Keras' Adagrad, Adadelta, Adamax and Nadam through rtrain.optimizers and
rtraind, against NumPy transcriptions of Keras 3's update steps
(keras-team/keras: keras/src/optimizers/adagrad.py, adadelta.py,
adamax.py, nadam.py). tfjs has no Nadam; Adagrad, Adadelta and Adamax are
also held to TensorFlow.js by keras_tfjs.

The model is one Dense layer trained on the whole batch with mse, whose
gradient is exact in closed form: d/dW mean((xW + b - y)^2) = 2 x^T r / n.
"""
import numpy as np
import pytest

import rtrain
from rtrain import layers as L


def _adagrad(o):
    def step(t, w, g, s):
        acc = s.setdefault("acc", np.full_like(w, o["initial_accumulator_value"]))
        acc += g * g
        return w - o["learning_rate"] * g / np.sqrt(acc + o["epsilon"])
    return step


def _adadelta(o):
    rho, eps = o["rho"], o["epsilon"]

    def step(t, w, g, s):
        ag = s.setdefault("ag", np.zeros_like(w))
        ad = s.setdefault("ad", np.zeros_like(w))
        ag[:] = rho * ag + (1 - rho) * g * g
        d = -np.sqrt(ad + eps) * g / np.sqrt(ag + eps)
        ad[:] = rho * ad + (1 - rho) * d * d
        return w + o["learning_rate"] * d
    return step


def _adamax(o):
    b1, b2, eps = o["beta_1"], o["beta_2"], o["epsilon"]

    def step(t, w, g, s):
        m = s.setdefault("m", np.zeros_like(w))
        u = s.setdefault("u", np.zeros_like(w))
        m += (g - m) * (1 - b1)
        u[:] = np.maximum(b2 * u, np.abs(g))
        return w - o["learning_rate"] * m / ((1 - b1 ** t) * (u + eps))
    return step


def _nadam(o):
    b1, b2, eps = o["beta_1"], o["beta_2"], o["epsilon"]

    def step(t, w, g, s):
        m = s.setdefault("m", np.zeros_like(w))
        v = s.setdefault("v", np.zeros_like(w))
        # _backend_update_step multiplies _u_product by u_t before the step
        prod = np.prod([b1 * (1 - 0.5 * 0.96 ** k) for k in range(1, t + 1)])
        u_t = b1 * (1 - 0.5 * 0.96 ** t)
        u_t1 = b1 * (1 - 0.5 * 0.96 ** (t + 1))
        m += (g - m) * (1 - b1)
        v += (g * g - v) * (1 - b2)
        m_hat = u_t1 * m / (1 - prod * u_t1) + (1 - u_t) * g / (1 - prod)
        v_hat = v / (1 - b2 ** t)
        return w - m_hat * o["learning_rate"] / (np.sqrt(v_hat) + eps)
    return step


CASES = [
    (rtrain.optimizers.Adagrad(learning_rate=0.05), _adagrad),
    (rtrain.optimizers.Adadelta(learning_rate=1.0), _adadelta),
    (rtrain.optimizers.Adamax(learning_rate=0.02), _adamax),
    (rtrain.optimizers.Nadam(learning_rate=0.02), _nadam),
]


@pytest.mark.parametrize("opt,ref", CASES, ids=lambda c: getattr(c, "name", ""))
def test_update_rule(client, opt, ref):
    rng = np.random.RandomState(3)
    x = rng.uniform(-1, 1, (16, 5)).astype(np.float32)
    y = rng.uniform(-1, 1, (16, 2)).astype(np.float32)
    m = rtrain.Sequential([L.Dense(2, input_shape=(5,))])
    m.compile(optimizer=opt, loss="mse", batch_size=16, shuffle=False, client=client)
    W, b = [w.astype(np.float64) for w in m.get_weights()]
    W0 = W.copy()
    cfg = dict(vars(opt))
    cfg.setdefault("initial_accumulator_value", 0.1)
    step = ref(cfg)
    sw, sb = {}, {}
    X, Y = x.astype(np.float64), y.astype(np.float64)
    for t in range(1, 5):
        r = X @ W + b - Y
        gW, gb = 2 * X.T @ r / r.size, 2 * r.sum(0) / r.size
        W, b = step(t, W, gW, sw), step(t, b, gb, sb)
    m.fit(x, y, epochs=4, batch_size=16, shuffle=False, verbose=0)
    gotW, gotb = m.get_weights()
    np.testing.assert_allclose(gotW, W, rtol=2e-4, atol=1e-6)
    np.testing.assert_allclose(gotb, b, rtol=2e-4, atol=1e-6)
    # the steps moved the weights far past the tolerance
    assert np.abs(W - W0).max() > 2e-3


def test_names_and_refusals():
    assert isinstance(rtrain.optimizers.get("nadam"), rtrain.optimizers.Nadam)
    assert rtrain.optimizers.get("Adagrad").get_config()["optimizer"] == "adagrad"
    assert rtrain.optimizers.Adadelta().rho == 0.95  # Keras' default, not RMSprop's
    with pytest.raises(ValueError, match="initial_accumulator_value"):
        rtrain.optimizers.Adagrad(initial_accumulator_value=0.5)


# keras/src/optimizers/schedules/learning_rate_schedule.py: the rate of
# optimizer step t (0 for the first)
def _exp(lr0, steps, rate, stair):
    return lambda t: lr0 * rate ** ((t // steps) if stair else t / steps)


def _cos(lr0, steps, alpha):
    return lambda t: lr0 * ((1 - alpha) * 0.5 * (1 + np.cos(np.pi * min(t, steps) / steps))
                            + alpha)


S = rtrain.optimizers.schedules
SCHEDULES = [
    (S.ExponentialDecay(0.2, decay_steps=2, decay_rate=0.5), _exp(0.2, 2, 0.5, False)),
    (S.ExponentialDecay(0.2, decay_steps=2, decay_rate=0.5, staircase=True),
     _exp(0.2, 2, 0.5, True)),
    (S.CosineDecay(0.2, decay_steps=3, alpha=0.1), _cos(0.2, 3, 0.1)),
]


@pytest.mark.parametrize("sched,ref", SCHEDULES, ids=["exp", "staircase", "cosine"])
def test_schedules(client, sched, ref):
    for t in range(6):
        assert sched(t) == pytest.approx(ref(t), rel=1e-12)
    rng = np.random.RandomState(4)
    x = rng.uniform(-1, 1, (8, 3)).astype(np.float32)
    y = rng.uniform(-1, 1, (8, 1)).astype(np.float32)
    m = rtrain.Sequential([L.Dense(1, input_shape=(3,))])
    m.compile(optimizer=rtrain.optimizers.SGD(learning_rate=sched), loss="mse",
              batch_size=8, shuffle=False, client=client)
    W, b = [w.astype(np.float64) for w in m.get_weights()]
    X, Y = x.astype(np.float64), y.astype(np.float64)
    for t in range(5):
        r = X @ W + b - Y
        W, b = W - ref(t) * 2 * X.T @ r / r.size, b - ref(t) * 2 * r.sum(0) / r.size
    m.fit(x, y, epochs=5, batch_size=8, shuffle=False, verbose=0)
    np.testing.assert_allclose(m.get_weights()[0], W, rtol=1e-5, atol=1e-7)
    assert m.compiled.learning_rate == pytest.approx(ref(5), rel=1e-6)
