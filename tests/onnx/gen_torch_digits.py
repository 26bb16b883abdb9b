#!/usr/bin/python3
"""A residual CNN as a PyTorch user writes it (Conv2d, BatchNorm2d, a skip
connection, F.log_softmax), exported with torch.onnx.export in training
mode, sklearn's digits as PyTorch holds them (NCHW float32 images, int64
labels), and PyTorch's own training loop on them: the reference that
torch_digits_cli.sh holds `rtrain fit --loss nll_loss` to.

    /usr/bin/python3 gen_torch_digits.py OUTDIR EPOCHS BATCH LR SEEDS STEPS

Writes OUTDIR/: res.onnx, x.npy (1437, 1, 8, 8) f32, y.npy (1437,) i64,
xv.npy, yv.npy (360 held out), y1h.npy, yv1h.npy (the labels one-hot, f32),
and ref.txt with lines
    exact NAME LOSS VAL_LOSS VAL_ACC  the first STEPS steps, batches in order:
                                      their mean loss, then the held-out set's
    seed S VAL_ACC                    EPOCHS epochs shuffled by torch's seed S
The exact runs: nll (nll_loss, LR), ce (cross_entropy with CE_ARGS below,
reduction sum, LR / BATCH), huber (huber_loss, delta 0.5, one-hot targets)
and bcel (bce_with_logits, pos_weight 2, one-hot targets; it does not fit a
log_softmax output, which the CLI is told with --loss-check off).
Only a few steps are compared exactly: at this rate PyTorch's own float32
and float64 runs part by 1e-4 relative after 4 steps and 1e-2 after 40.
PyTorch's loop: SGD(lr) over nll_loss of the batch, BatchNorm in training
mode while training and in eval mode for the held-out set, the same
initial weights as the export.
"""
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits


class ResCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(h + self.bn2(self.conv2(h)))  # the skip connection
        h = F.max_pool2d(h, 2)
        return F.log_softmax(self.fc(torch.flatten(h, 1)), dim=1)


def data():
    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None, :, :]  # (n, 1, 8, 8)
    y = d.target.astype(np.int64)
    p = np.random.default_rng(0).permutation(len(y))
    x, y = x[p], y[p]
    return x[:1437], y[:1437], x[1437:], y[1437:]


CE_WEIGHT = [1.0, 0.5, 2.0, 1.0, 1.0, 1.5, 1.0, 0.8, 1.2, 1.0]
LOSSES = {
    "nll": F.nll_loss,
    "ce": lambda o, t: F.cross_entropy(o, t, weight=torch.tensor(CE_WEIGHT), ignore_index=3,
                                       label_smoothing=0.1, reduction="sum"),
    "huber": lambda o, t: F.huber_loss(o, t, delta=0.5),
    "bcel": lambda o, t: F.binary_cross_entropy_with_logits(o, t, pos_weight=torch.tensor([2.0])),
}


def evaluate(m, xv, yv, loss_fn=F.nll_loss, yl=None, batch=32):
    """the held-out loss as rtrain reports one over several batches: the
    batch losses' mean, weighted by the batch sizes (with reduction sum,
    the mean batch sum); and the accuracy"""
    m.eval()
    t = yv if yl is None else yl
    tot = 0.0
    with torch.no_grad():
        out = m(torch.from_numpy(xv))
        for s in range(0, len(yv), batch):
            tot += loss_fn(out[s:s + batch], torch.from_numpy(t[s:s + batch])).item() * \
                len(yv[s:s + batch])
        acc = (out.argmax(1).numpy() == yv).mean()
    return tot / len(yv), acc


def train(init, x, y, xv, yv, epochs, batch, lr, seed, steps=None, loss_fn=F.nll_loss,
          yl=None, yvl=None):
    """PyTorch's loop; seed None: batches in order; steps: stop after them;
    yl, yvl: the targets of loss_fn when not the class indices"""
    m = ResCNN()
    m.load_state_dict(init)
    opt = torch.optim.SGD(m.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed) if seed is not None else None
    tot = n = 0
    for _ in range(epochs):
        m.train()
        order = torch.randperm(len(y), generator=g).numpy() if g else np.arange(len(y))
        tot = n = 0
        for s in range(0, len(y), batch):
            if steps is not None and n >= steps * batch:
                break
            idx = order[s:s + batch]
            opt.zero_grad()
            t = (y if yl is None else yl)[idx]
            loss = loss_fn(m(torch.from_numpy(x[idx])), torch.from_numpy(t))
            loss.backward()
            opt.step()
            tot += loss.item() * len(idx)
            n += len(idx)
    vl, va = evaluate(m, xv, yv, loss_fn, yvl, batch)
    return tot / n, vl, va


def main(out, epochs, batch, lr, seeds, steps):
    torch.set_num_threads(1)
    os.makedirs(out, exist_ok=True)
    x, y, xv, yv = data()
    torch.manual_seed(26)
    m = ResCNN()
    m.train()
    torch.onnx.export(m, torch.from_numpy(x[:2]), os.path.join(out, "res.onnx"),
                      opset_version=13, input_names=["x"], output_names=["logp"],
                      dynamic_axes={"x": {0: "batch"}, "logp": {0: "batch"}},
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    # the export's traced forward in training mode moved BatchNorm's running
    # statistics: the file holds the moved ones, and so does the reference
    init = {k: v.clone() for k, v in m.state_dict().items()}
    np.save(os.path.join(out, "x.npy"), x)
    np.save(os.path.join(out, "y.npy"), y)
    np.save(os.path.join(out, "xv.npy"), xv)
    np.save(os.path.join(out, "yv.npy"), yv)
    y1h, yv1h = np.eye(10, dtype=np.float32)[y], np.eye(10, dtype=np.float32)[yv]
    np.save(os.path.join(out, "y1h.npy"), y1h)
    np.save(os.path.join(out, "yv1h.npy"), yv1h)
    lines = []
    for name, fn in LOSSES.items():
        hot = name in ("huber", "bcel")
        r = train(init, x, y, xv, yv, 1, batch, lr / batch if name == "ce" else lr, None,
                  steps, fn, y1h if hot else None, yv1h if hot else None)
        lines.append("exact %s %.9g %.9g %.9g" % ((name,) + r))
    for s in seeds:
        lines.append("seed %d %.9g" % (s, train(init, x, y, xv, yv, epochs, batch, lr, s)[2]))
    with open(os.path.join(out, "ref.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]),
         [int(s) for s in sys.argv[5].split(",")], int(sys.argv[6]))
