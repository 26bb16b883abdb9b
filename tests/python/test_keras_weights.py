"""fit's per-sample loss weights, learning-rate changes and batch-size
changes against NumPy references of Keras' arithmetic, on a real rtraind.

The models are linear (Dense, then softmax or nothing) so their loss and
gradient have closed forms: Keras' weighted loss is sum(w_i * l_i) / batch
(SUM_OVER_BATCH_SIZE), its gradient sum(w_i * dl_i) / batch; one SGD step
moves the weights by -lr times that, and Adam follows rt_optim.c's (Keras')
update. A changed learning rate or batch size must keep Adam's moments and
step count, which the references carry across the change."""
import numpy as np
import pytest

import rtrain
from rtrain import layers as L
from rtrain import callbacks as C


def softmax_model(w, b, act="softmax"):
    m = rtrain.Sequential([L.Dense(w.shape[1], activation=act,
                                   input_shape=(w.shape[0],))])
    m.set_weights([w, b])
    return m


def init(k_in=4, k_out=3, seed=1):
    rng = np.random.RandomState(seed)
    return (rng.normal(0, 0.5, (k_in, k_out)).astype(np.float32),
            rng.normal(0, 0.1, (k_out,)).astype(np.float32))


def ce_loss_grad(x, y, w, b, sw):
    """Sparse CE over softmax(x w + b): per-sample losses weighted, summed
    over the batch size; gradients of that mean (float64)."""
    x, w, b = x.astype(np.float64), w.astype(np.float64), b.astype(np.float64)
    z = x @ w + b
    z = z - z.max(axis=1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    n = len(x)
    l = -np.log(p[np.arange(n), y])
    d = p.copy()
    d[np.arange(n), y] -= 1.0
    d *= (sw / n)[:, None]
    return (sw * l).sum() / n, x.T @ d, d.sum(axis=0)


def mse_loss_grad(x, y, w, b, sw):
    x, w, b = x.astype(np.float64), w.astype(np.float64), b.astype(np.float64)
    e = x @ w + b - y.reshape(-1, 1)
    n = len(x)
    l = (e ** 2).mean(axis=1)
    d = 2.0 * e / e.shape[1] * (sw / n)[:, None]
    return (sw * l).sum() / n, x.T @ d, d.sum(axis=0)


def data(n=24, seed=2):
    rng = np.random.RandomState(seed)
    x = rng.normal(0, 1, (n, 4)).astype(np.float32)
    y = rng.randint(0, 3, n).astype(np.int64)
    return x, y


def test_class_weight_loss_and_step_match_numpy(client):
    x, y = data()
    w0, b0 = init()
    cw = {0: 0.5, 1: 2.0, 2: 1.25}
    sw = np.array([cw[int(k)] for k in y])
    loss, gw, gb = ce_loss_grad(x, y, w0, b0, sw)
    m = softmax_model(w0, b0)
    lr = 0.1
    m.compile(optimizer=rtrain.optimizers.SGD(lr),
              loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    # One step over the whole set: the reported loss is the weighted one at
    # the initial weights, and the step follows the weighted gradient.
    h = m.fit(x, y, batch_size=len(x), epochs=1, verbose=0, class_weight=cw)
    assert h["loss"][0] == pytest.approx(loss, rel=1e-5)
    unweighted, _, _ = ce_loss_grad(x, y, w0, b0, np.ones(len(x)))
    assert abs(loss - unweighted) > 1e-3  # the weights change the loss
    w1, b1 = m.get_weights()
    np.testing.assert_allclose(w1, w0 - lr * gw, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b1, b0 - lr * gb, rtol=1e-5, atol=1e-6)
    # Accuracy is not weighted (Keras' compile(metrics=...)).
    acc = (np.argmax(x @ w0 + b0, axis=1) == y).mean()
    assert h["accuracy"][0] == pytest.approx(acc, abs=1e-6)


@pytest.mark.parametrize("spx", [None, 2])
def test_sample_weight_times_class_weight_smaller_batches(client, spx):
    x, y = data(30)
    w0, b0 = init()
    cw = {0: 1.0, 1: 3.0, 2: 0.0}
    sw = np.linspace(0.2, 2.0, len(x))
    full = sw * np.array([cw[int(k)] for k in y])
    m = softmax_model(w0, b0)
    lr = 0.05
    m.compile(optimizer=rtrain.optimizers.SGD(lr),
              loss="sparse_categorical_crossentropy")
    # Three steps of 10 in order: each is its batch's weighted mean.
    # The Fit stream (spx None) and RunSteps calls of 2 steps alike.
    h = m.fit(x, y, batch_size=10, epochs=1, verbose=0, shuffle=False,
              sample_weight=sw, class_weight=cw, steps_per_execution=spx)
    w, b = w0.astype(np.float64), b0.astype(np.float64)
    total = 0.0
    for s in range(3):
        sl = slice(10 * s, 10 * s + 10)
        l, gw, gb = ce_loss_grad(x[sl], y[sl], w, b, full[sl])
        total += l * 10
        w, b = w - lr * gw, b - lr * gb
    assert h["loss"][0] == pytest.approx(total / 30, rel=1e-5)
    w1, b1 = m.get_weights()
    np.testing.assert_allclose(w1, w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b1, b, rtol=1e-5, atol=1e-6)


def test_sample_weight_mse_and_evaluate(client):
    x, _ = data(16)
    rng = np.random.RandomState(5)
    y = rng.normal(0, 1, 16).astype(np.float32)
    w0, b0 = init(4, 1)
    sw = rng.uniform(0, 3, 16)
    m = softmax_model(w0, b0, act=None)
    m.compile(optimizer=rtrain.optimizers.SGD(0.01), loss="mse")
    l_ref, _, _ = mse_loss_grad(x, y, w0, b0, sw)
    assert m.evaluate(x, y, sample_weight=sw) == pytest.approx(l_ref,
                                                               rel=1e-5)
    assert m.evaluate(x, y) == pytest.approx(
        mse_loss_grad(x, y, w0, b0, np.ones(16))[0], rel=1e-5)
    l, gw, gb = mse_loss_grad(x, y, w0, b0, sw)
    h = m.fit(x, y, batch_size=16, epochs=1, verbose=0, sample_weight=sw)
    assert h["loss"][0] == pytest.approx(l, rel=1e-5)
    w1, b1 = m.get_weights()
    np.testing.assert_allclose(w1, w0 - 0.01 * gw, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(b1, b0 - 0.01 * gb, rtol=1e-5, atol=1e-7)


def test_class_weight_one_hot_labels(client):
    x, y = data(12)
    oh = np.eye(3, dtype=np.float32)[y]
    w0, b0 = init()
    cw = {0: 2.0, 1: 0.5, 2: 1.0}
    sw = np.array([cw[int(k)] for k in y])
    m = softmax_model(w0, b0)
    m.compile(optimizer=rtrain.optimizers.SGD(0.1),
              loss="categorical_crossentropy")
    h = m.fit(x, oh, batch_size=12, epochs=1, verbose=0, class_weight=cw)
    assert h["loss"][0] == pytest.approx(ce_loss_grad(x, y, w0, b0, sw)[0],
                                         rel=1e-5)


def test_bad_sample_weights_are_refused(client):
    x, y = data(8)
    m = softmax_model(*init())
    m.compile("sgd", "sparse_categorical_crossentropy")
    with pytest.raises(ValueError, match="finite and >= 0"):
        m.fit(x, y, sample_weight=-np.ones(8), verbose=0)
    with pytest.raises(ValueError, match="class_weight"):
        m.fit(x, y, class_weight=[1, 2, 3], verbose=0)


def adam_ref(x, y, w, b, lrs, batches, b1=0.9, b2=0.999, eps=1e-7):
    """Keras' Adam (rt_optim.c's form) over the given batches, lrs[i] for
    step i; one state through all of them."""
    w, b = w.astype(np.float64), b.astype(np.float64)
    mw, vw, mb, vb = (np.zeros_like(w), np.zeros_like(w), np.zeros_like(b),
                      np.zeros_like(b))
    for t, (sl, lr) in enumerate(zip(batches, lrs), start=1):
        _, gw, gb = ce_loss_grad(x[sl], y[sl], w, b, np.ones(len(x[sl])))
        for p, g, m_, v_ in ((w, gw, mw, vw), (b, gb, mb, vb)):
            m_ *= b1
            m_ += (1 - b1) * g
            v_ *= b2
            v_ += (1 - b2) * g * g
            # keras/src/optimizers/adam.py: eps added to sqrt(v)
            p -= m_ * (lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)) / (np.sqrt(v_)
                                                                    + eps)
    return w, b


@pytest.mark.parametrize("spx", [None, 1])
def test_lr_change_keeps_adam_state_and_program(client, spx):
    x, y = data(20)
    w0, b0 = init()
    m = softmax_model(w0, b0)
    m.compile(optimizer=rtrain.optimizers.Adam(0.01),
              loss="sparse_categorical_crossentropy", batch_size=20)
    pid = m.compiled.program_id
    # LearningRateScheduler: 0.01 in epochs 0-1, 0.05 in epochs 2-3; one
    # full batch per epoch.
    sched = C.LearningRateScheduler(lambda ep, lr: 0.01 if ep < 2 else 0.05)
    m.fit(x, y, batch_size=20, epochs=4, verbose=0, callbacks=[sched],
          steps_per_execution=spx)
    assert m.compiled.program_id == pid  # no recompile
    assert m.compiled.global_step == 4
    assert m.compiled.learning_rate == pytest.approx(0.05, rel=1e-7)
    full = slice(0, 20)
    w, b = adam_ref(x, y, w0, b0, [0.01, 0.01, 0.05, 0.05], [full] * 4)
    w1, b1 = m.get_weights()
    np.testing.assert_allclose(w1, w, rtol=2e-4, atol=2e-6)
    np.testing.assert_allclose(b1, b, rtol=2e-4, atol=2e-6)
    # Had Adam's state restarted at the change (as a recompile would), the
    # weights would be far further from the daemon's than the reference.
    w_fresh, _ = adam_ref(x, y, *adam_ref(x, y, w0, b0, [0.01] * 2,
                                          [full] * 2), [0.05] * 2, [full] * 2)
    assert np.abs(w_fresh - w1).max() > 20 * np.abs(w - w1).max()
    # Set by hand between fits, as Keras users do.
    m.optimizer.learning_rate = 0.002
    m.fit(x, y, batch_size=20, epochs=1, verbose=0, steps_per_execution=spx)
    w, b = adam_ref(x, y, w0, b0, [0.01, 0.01, 0.05, 0.05, 0.002],
                    [full] * 5)
    np.testing.assert_allclose(m.get_weights()[0], w, rtol=2e-4, atol=2e-6)


def test_reduce_lr_on_plateau_reaches_the_daemon(client):
    x, y = data(20)
    w0, b0 = init()
    m = softmax_model(w0, b0)
    m.compile(optimizer=rtrain.optimizers.SGD(0.1),
              loss="sparse_categorical_crossentropy")
    # A monitor that improves once and then never by min_delta: with
    # patience 1 Keras halves the rate at the end of epochs 1, 2 and 3, so
    # epochs 0..3 train at 0.1, 0.1, 0.05, 0.025 and 0.0125 is left for
    # the next fit.
    cb = C.ReduceLROnPlateau(monitor="loss", factor=0.5, patience=1,
                             min_delta=1e9, mode="min")
    m.fit(x, y, batch_size=20, epochs=4, verbose=0, callbacks=[cb])
    assert m.optimizer.learning_rate == pytest.approx(0.0125)
    assert m.compiled.learning_rate == pytest.approx(0.025, rel=1e-6)
    w, b = w0.astype(np.float64), b0.astype(np.float64)
    for lr in (0.1, 0.1, 0.05, 0.025):
        _, gw, gb = ce_loss_grad(x, y, w, b, np.ones(20))
        w, b = w - lr * gw, b - lr * gb
    np.testing.assert_allclose(m.get_weights()[0], w, rtol=1e-5, atol=1e-6)


def test_batch_size_change_keeps_adam_state(client):
    x, y = data(20)
    w0, b0 = init()
    m = softmax_model(w0, b0)
    m.compile(optimizer=rtrain.optimizers.Adam(0.02),
              loss="sparse_categorical_crossentropy")
    m.fit(x, y, batch_size=20, epochs=2, verbose=0, shuffle=False)
    pid = m.compiled.program_id
    m.fit(x, y, batch_size=10, epochs=1, verbose=0, shuffle=False)
    assert m.compiled.program_id != pid  # another program ...
    assert m.compiled.global_step == 4   # ... that kept the step count
    full, h1, h2 = slice(0, 20), slice(0, 10), slice(10, 20)
    w, b = adam_ref(x, y, w0, b0, [0.02] * 4, [full, full, h1, h2])
    w1, b1 = m.get_weights()
    np.testing.assert_allclose(w1, w, rtol=2e-4, atol=2e-6)
    np.testing.assert_allclose(b1, b, rtol=2e-4, atol=2e-6)
    # fit() without batch_size is Keras' 32, not the previous call's 10.
    h = m.fit(x, y, epochs=1, verbose=0)
    assert h.params["batch_size"] == 32 and m.compiled.batch_size == 32
    assert m.compiled.global_step == 5
