"""PyTorch's losses through the Python client, with labels as PyTorch makes
them (int64 class indices from torch and numpy, float targets), against
PyTorch's own training loop on the same exported model: the epoch's mean
loss to 1e-5 relative and the predictions after it to 1e-5. A loss that
does not fit the model's output is refused naming the loss that fits,
loss_check=False compiles it, and PyTorch's loss arguments are refused
with Keras' losses."""
import io

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import rtrain


class MLP(torch.nn.Module):
    def __init__(self, out=3, head=None):
        super().__init__()
        self.a = torch.nn.Linear(4, 16)
        self.b = torch.nn.Linear(16, out)
        self.head = head

    def forward(self, x):
        z = self.b(torch.relu(self.a(x)))
        if self.head == "log_softmax":
            return F.log_softmax(z, dim=1)
        if self.head == "softmax":
            return F.softmax(z, dim=1)
        if self.head == "sigmoid":
            return torch.sigmoid(z)
        return z


def export(m):
    f = io.BytesIO()
    m.eval()
    torch.onnx.export(m, torch.zeros(2, 4), f, opset_version=13, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "b"}, "y": {0: "b"}})
    return f.getvalue()


def torch_loop(m, x, y, batch, lr, loss_fn):
    """PyTorch's SGD over x in order; the mean of the step losses"""
    opt = torch.optim.SGD(m.parameters(), lr=lr)
    m.train()
    losses = []
    for s in range(0, len(x), batch):
        opt.zero_grad()
        loss = loss_fn(m(x[s:s + batch]), y[s:s + batch])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    m.eval()
    return float(np.mean(losses))


def both(client, iris, head, y, loss, fn, batch=15, lr=0.1, **kw):
    """train the exported model in rtrain and the module in PyTorch; compare"""
    xtr = iris[0]
    torch.manual_seed(4)
    m = MLP(out=y.shape[1] if y.ndim == 2 else 3, head=head)
    data = export(m)
    r = client.compile(data, loss=loss, optimizer=rtrain.optimizers.SGD(lr),
                       batch_size=batch, shuffle=False, **kw)
    h = r.fit(xtr, y, batch_size=batch, epochs=1, shuffle=False, verbose=0)
    tx = torch.from_numpy(xtr)
    ty = y if isinstance(y, torch.Tensor) else torch.from_numpy(np.asarray(y))
    want = torch_loop(m, tx, ty, batch, lr, fn)
    got = h.history["loss"][0]
    print("%s: rtrain %.8g, PyTorch %.8g" % (loss, got, want))
    assert abs(got - want) <= 1e-5 * abs(want), (got, want)
    with torch.no_grad():
        ref = m(tx).numpy()
    np.testing.assert_allclose(r.predict(xtr, batch_size=batch), ref, rtol=1e-5, atol=1e-5)
    return r


def test_cross_entropy_int64_torch_labels(client, iris):
    y = torch.from_numpy(iris[1])  # int64, as PyTorch makes them
    assert y.dtype == torch.int64
    w = [1.0, 2.0, 0.5]
    both(client, iris, None, y, "cross_entropy",
         lambda o, t: F.cross_entropy(o, t, weight=torch.tensor(w), label_smoothing=0.1,
                                      ignore_index=2),
         class_weight=w, label_smoothing=0.1, ignore_index=2)


def test_nll_loss_module_name_numpy_int64(client, iris):
    y = iris[1].astype(np.int64)
    r = both(client, iris, "log_softmax", y, "NLLLoss", lambda o, t: F.nll_loss(o, t),
             metrics=["accuracy"])
    assert r.loss == "NLLLoss"


def test_cross_entropy_probability_targets(client, iris):
    rng = np.random.default_rng(0)
    p = rng.random((len(iris[1]), 3)).astype(np.float32)
    p /= p.sum(1, keepdims=True)
    both(client, iris, None, p, "cross_entropy",
         lambda o, t: F.cross_entropy(o, t, label_smoothing=0.05), label_smoothing=0.05)


def test_bce_with_logits_pos_weight_sum(client, iris):
    y = (np.random.default_rng(1).random((len(iris[1]), 2)) > 0.5).astype(np.float32)
    pw = [2.0, 0.5]
    both(client, iris, None, y, "BCEWithLogitsLoss",
         lambda o, t: F.binary_cross_entropy_with_logits(o, t, pos_weight=torch.tensor(pw),
                                                         reduction="sum"),
         lr=0.01, pos_weight=pw, reduction="sum")


def test_bce_on_sigmoid(client, iris):
    y = (np.random.default_rng(2).random((len(iris[1]), 2)) > 0.5).astype(np.float32)
    both(client, iris, "sigmoid", y, "binary_cross_entropy",
         lambda o, t: F.binary_cross_entropy(o, t))


@pytest.mark.parametrize("loss,fn,kw", [
    ("mse_loss", lambda o, t: F.mse_loss(o, t), {}),
    ("l1_loss", lambda o, t: F.l1_loss(o, t), {}),
    ("smooth_l1_loss", lambda o, t: F.smooth_l1_loss(o, t, beta=0.5), {"beta": 0.5}),
    ("huber_loss", lambda o, t: F.huber_loss(o, t, delta=0.3), {"delta": 0.3}),
])
def test_regression_float_targets(client, iris, loss, fn, kw):
    y = np.random.default_rng(3).normal(size=(len(iris[1]), 2)).astype(np.float32)
    both(client, iris, None, y, loss, fn, lr=0.05, **kw)


def test_a_loss_that_does_not_fit_is_refused(client, iris):
    torch.manual_seed(0)
    soft = export(MLP(head="softmax"))
    with pytest.raises(rtrain.InvalidArgument) as e:
        client.compile(soft, loss="cross_entropy", batch_size=15)
    msg = str(e.value)
    assert "node 'y'" in msg and "Softmax" in msg and "sparse_categorical_crossentropy" in msg
    logp = export(MLP(head="log_softmax"))
    with pytest.raises(rtrain.InvalidArgument, match="Use nll_loss"):
        client.compile(logp, loss="sparse_categorical_crossentropy", batch_size=15)
    logits = export(MLP())
    with pytest.raises(rtrain.InvalidArgument, match="cross_entropy"):
        client.compile(logits, loss="sparse_categorical_crossentropy", batch_size=15)
    # for those who know better
    r = client.compile(logp, loss="sparse_categorical_crossentropy", batch_size=15,
                       loss_check=False)
    r.fit(iris[0], iris[1], batch_size=15, epochs=1, verbose=0)
    # PyTorch's arguments go with PyTorch's losses
    with pytest.raises(ValueError, match="Keras'"):
        client.compile(logits, loss="sparse_categorical_crossentropy", from_logits=True,
                       label_smoothing=0.1)


def test_labels_checked_as_pytorch_would(client, iris):
    torch.manual_seed(0)
    r = client.compile(export(MLP()), loss="cross_entropy", batch_size=15)
    y = iris[1].copy()
    y[3] = 3
    with pytest.raises(ValueError, match="ignore_index"):
        r.fit(iris[0], y, batch_size=15, epochs=1, verbose=0)
    y[3] = -100  # PyTorch's default ignore_index passes
    r.fit(iris[0], y, batch_size=15, epochs=1, verbose=0)
