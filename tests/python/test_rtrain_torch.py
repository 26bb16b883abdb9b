"""rtrain.torch: a PyTorch module trained on rtraind without leaving
PyTorch, against PyTorch's own training loop from the same module state.

A CNN with BatchNorm on NCHW images, one batch per epoch with shuffling
off, so each epoch of the History is one step: 10 steps' losses match
PyTorch's to 1e-5 relative, and the module's parameters and BatchNorm
running statistics after them (loaded back into its state_dict) match
PyTorch's to 1e-4. For SGD (momentum, dampening, weight_decay; and
Nesterov), Adam (weight_decay added to the gradient) and AdamW (decoupled),
with CrossEntropyLoss and NLLLoss and their arguments. What cannot be
mapped is refused by name."""
import copy

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import rtrain
import rtrain.torch as rt


class Net(nn.Module):
    def __init__(self, log_softmax=False):
        super().__init__()
        # no bias before BatchNorm: its gradient is rounding noise, which
        # Adam's normalisation would blow up to full steps in any direction
        self.conv = nn.Conv2d(3, 6, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(6)
        self.fc = nn.Linear(6 * 4 * 4, 5)
        self.log_softmax = log_softmax

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        z = self.fc(torch.flatten(h, 1))
        return F.log_softmax(z, dim=1) if self.log_softmax else z


def data(n=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 3, 8, 8, generator=g)
    y = torch.randint(0, 5, (n,), generator=g)  # int64
    return x, y


def torch_steps(m, x, y, loss_fn, opt, steps):
    losses = []
    for _ in range(steps):
        m.train()
        opt.zero_grad()
        loss = loss_fn(m(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


CASES = [
    ("sgd", nn.CrossEntropyLoss(),
     lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01)),
    ("sgd_nesterov", nn.CrossEntropyLoss(label_smoothing=0.1, reduction="sum"),
     lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9, nesterov=True)),
    ("adam", nn.CrossEntropyLoss(weight=torch.tensor([1.0, 2.0, 0.5, 1.0, 1.5])),
     lambda p: torch.optim.Adam(p, lr=0.01, weight_decay=0.01)),
    ("adamw_nll", nn.NLLLoss(ignore_index=3),
     lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1)),
]


@pytest.mark.parametrize("name,loss_fn,make_opt", CASES, ids=[c[0] for c in CASES])
def test_ten_steps_match_pytorch(daemon, name, loss_fn, make_opt):
    torch.manual_seed(1)
    m = Net(log_softmax=name.endswith("nll"))
    ref = copy.deepcopy(m)
    x, y = data()
    client = rtrain.connect(daemon.addr, timeout=60)
    hist = rt.fit(m, (x, y), loss_fn=loss_fn, optimizer=make_opt(m.parameters()),
                  epochs=10, batch_size=len(y), shuffle=False, server=client, verbose=0)
    want = torch_steps(ref, x, y, loss_fn, make_opt(ref.parameters()), 10)
    got = hist["loss"]
    assert len(got) == 10
    worst = max(abs(a - b) / abs(b) for a, b in zip(got, want))
    print("%s: worst step loss rel dev %.2e" % (name, worst))
    assert worst <= 1e-5, (got, want)
    sd, sr = m.state_dict(), ref.state_dict()
    assert set(sd) == set(sr)
    for k in sr:
        if k.endswith("num_batches_tracked"):
            assert int(sd[k]) == int(sr[k]), k
            continue
        np.testing.assert_allclose(sd[k].numpy(), sr[k].numpy(), rtol=1e-4, atol=1e-4,
                                   err_msg=k)
    # evaluate and predict in eval mode, as PyTorch's
    ref.eval()
    with torch.no_grad():
        out = ref(x)
    np.testing.assert_allclose(rt.predict(m, x, server=client).numpy(), out.numpy(),
                               rtol=1e-4, atol=1e-4)
    ev = rt.evaluate(m, (x, y), loss_fn=loss_fn, server=client)
    assert abs(ev[0] - loss_fn(out, y).item()) <= 1e-4 * abs(loss_fn(out, y).item())
    client.close()


def test_dataloader_and_tensordataset(daemon):
    from torch.utils.data import DataLoader, TensorDataset
    torch.manual_seed(2)
    m = Net()
    x, y = data(64, seed=3)
    client = rtrain.connect(daemon.addr, timeout=60)
    dl = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)
    h = rt.fit(m, dl, loss_fn=nn.CrossEntropyLoss(),
               optimizer=torch.optim.SGD(m.parameters(), lr=0.05), epochs=2, server=client,
               verbose=0, validation_data=TensorDataset(x[:16], y[:16]))
    assert len(h["loss"]) == 2 and "val_loss" in h and "accuracy" in h
    client.close()


def test_unmappable_refused_by_name(daemon):
    torch.manual_seed(0)
    m = Net()
    x, y = data()
    sgd = torch.optim.SGD(m.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="KLDivLoss"):
        rt.fit(m, (x, y), loss_fn=nn.KLDivLoss(), optimizer=sgd, server=daemon.addr)
    with pytest.raises(ValueError, match="reduction='none'"):
        rt.fit(m, (x, y), loss_fn=nn.CrossEntropyLoss(reduction="none"), optimizer=sgd,
               server=daemon.addr)
    with pytest.raises(ValueError, match="RMSprop"):
        rt.fit(m, (x, y), loss_fn=nn.CrossEntropyLoss(),
               optimizer=torch.optim.RMSprop(m.parameters()), server=daemon.addr)
    with pytest.raises(ValueError, match="amsgrad"):
        rt.fit(m, (x, y), loss_fn=nn.CrossEntropyLoss(),
               optimizer=torch.optim.Adam(m.parameters(), amsgrad=True), server=daemon.addr)
    with pytest.raises(ValueError, match="parameter groups"):
        rt.fit(m, (x, y), loss_fn=nn.CrossEntropyLoss(), server=daemon.addr,
               optimizer=torch.optim.SGD([{"params": m.conv.parameters()},
                                          {"params": list(m.bn.parameters()) +
                                           list(m.fc.parameters()), "lr": 0.5}], lr=0.1))
    with pytest.raises(ValueError, match="per-element weight"):
        rt.fit(m, (x, y.float()), loss_fn=nn.BCEWithLogitsLoss(weight=torch.ones(5)),
               optimizer=sgd, server=daemon.addr)
    # a loss that does not fit the module's output: the daemon's refusal
    n = Net()
    with pytest.raises(rtrain.InvalidArgument, match="cross_entropy"):
        rt.fit(n, (x, y), loss_fn=nn.NLLLoss(), server=daemon.addr,
               optimizer=torch.optim.SGD(n.parameters(), lr=0.1))
