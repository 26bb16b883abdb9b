"""The Keras API around fit: keras.losses and keras.metrics objects,
keras.utils.to_categorical and kernel_regularizer="l2", through rtraind,
against NumPy transcriptions of Keras 3 (keras-team/keras:
keras/src/losses/losses.py, keras/src/utils/numerical_utils.py,
keras/src/regularizers/regularizers.py; the reported loss adds the
regularization losses, keras/src/trainers/trainer.py compute_loss)."""
import numpy as np
import pytest

import rtrain
from rtrain import layers as L


def _data(seed=5):
    rng = np.random.RandomState(seed)
    return (rng.uniform(-1, 1, (12, 4)).astype(np.float32),
            rng.uniform(-2, 2, (12, 3)).astype(np.float32))


def _linear(client, loss, **kw):
    m = rtrain.Sequential([L.Dense(3, input_shape=(4,), **kw)])
    m.compile(optimizer="sgd", loss=loss, batch_size=12, shuffle=False, client=client)
    return m


def test_to_categorical():
    y = rtrain.utils.to_categorical([[2], [0], [1]])
    assert y.dtype == np.float32 and y.shape == (3, 3)
    np.testing.assert_array_equal(y, np.eye(3, dtype=np.float32)[[2, 0, 1]])
    assert rtrain.utils.to_categorical([1, 0], num_classes=4).shape == (2, 4)
    assert rtrain.utils.to_categorical(np.zeros((2, 5), int), 3).shape == (2, 5, 3)
    with pytest.raises(ValueError, match=r"\[0, 2\)"):
        rtrain.utils.to_categorical([0, 2], num_classes=2)


@pytest.mark.parametrize("delta", [1.0, 0.5])
def test_huber_object(client, delta):
    x, y = _data()
    m = _linear(client, rtrain.losses.Huber(delta=delta))
    W, b = m.get_weights()
    e = np.abs(x @ W + b - y).astype(np.float64)
    want = np.mean(np.where(e <= delta, 0.5 * e * e, delta * e - 0.5 * delta * delta))
    assert m.evaluate(x, y) == pytest.approx(want, rel=1e-5)


def test_loss_objects_carry_from_logits(client):
    x, _ = _data()
    k = np.arange(12) % 3
    m = _linear(client, rtrain.losses.SparseCategoricalCrossentropy(from_logits=True))
    W, b = m.get_weights()
    z = (x @ W + b).astype(np.float64)
    lse = np.log(np.exp(z - z.max(1, keepdims=True)).sum(1)) + z.max(1)
    assert m.evaluate(x, k) == pytest.approx(np.mean(lse - z[np.arange(12), k]), rel=1e-5)
    assert rtrain.losses.get("kl_divergence").fn == "kl_divergence"
    with pytest.raises(ValueError, match="reduction"):
        rtrain.losses.MeanSquaredError(reduction="sum")


def test_metric_objects(client):
    x, y = _data()
    m = rtrain.Sequential([L.Dense(3, input_shape=(4,))])
    m.compile(optimizer="sgd", loss="mse", batch_size=12, shuffle=False, client=client,
              label_shape=(3,),
              metrics=[rtrain.metrics.MeanAbsoluteError(), rtrain.metrics.RootMeanSquaredError()])
    W, b = m.get_weights()
    d = (x @ W + b - y).astype(np.float64)
    got = m.evaluate(x, y, return_dict=True)
    assert got["mae"] == pytest.approx(np.abs(d).mean(), rel=1e-5)
    assert got["rmse"] == pytest.approx(np.sqrt((d * d).mean()), rel=1e-5)
    with pytest.raises(ValueError, match="200 thresholds"):
        rtrain.metrics.AUC(num_thresholds=50)


def test_kernel_regularizer_l2(client):
    x, y = _data()
    m = _linear(client, "mse", kernel_regularizer="l2")
    W, b = m.get_weights()
    d = (x @ W + b - y).astype(np.float64)
    # Keras 3's L2(0.01): 0.01 * sum(W^2), added to the reported loss
    want = (d * d).mean() + 0.01 * (W.astype(np.float64) ** 2).sum()
    assert m.evaluate(x, y) == pytest.approx(want, rel=1e-5)
    # one SGD step follows the penalised gradient: 2 x^T d / size + 0.02 W
    m.fit(x, y, epochs=1, batch_size=12, shuffle=False, verbose=0)
    gW = 2 * x.T.astype(np.float64) @ d / d.size + 0.02 * W
    np.testing.assert_allclose(m.get_weights()[0], W - 0.01 * gW, rtol=1e-5, atol=1e-7)
