#!/usr/bin/python3
"""A residual CNN as a PyTorch user writes it (Conv2d, BatchNorm2d, a skip
connection, F.log_softmax), exported with torch.onnx.export in training
mode, sklearn's digits as PyTorch holds them (NCHW float32 images, int64
labels), and PyTorch's own training loop on them: the reference that
torch_digits_cli.sh holds `rtrain fit --loss nll_loss` to.

    /usr/bin/python3 gen_torch_digits.py OUTDIR EPOCHS BATCH LR SEEDS STEPS

Writes OUTDIR/: res.onnx, x.npy (1437, 1, 8, 8) f32, y.npy (1437,) i64,
xv.npy, yv.npy (360 held out), xhwc.npy (the training images NHWC), and
ref.txt with lines
    exact LOSS VAL_LOSS VAL_ACC   the first STEPS steps, batches in order: their
                                  mean loss, then the held-out set's
    seed S VAL_ACC                EPOCHS epochs shuffled by torch's seed S
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


def evaluate(m, xv, yv):
    m.eval()
    with torch.no_grad():
        out = m(torch.from_numpy(xv))
        loss = F.nll_loss(out, torch.from_numpy(yv)).item()
        acc = (out.argmax(1).numpy() == yv).mean()
    return loss, acc


def train(init, x, y, xv, yv, epochs, batch, lr, seed, steps=None):
    """PyTorch's loop; seed None: batches in order; steps: stop after them"""
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
            loss = F.nll_loss(m(torch.from_numpy(x[idx])), torch.from_numpy(y[idx]))
            loss.backward()
            opt.step()
            tot += loss.item() * len(idx)
            n += len(idx)
    vl, va = evaluate(m, xv, yv)
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
    np.save(os.path.join(out, "xhwc.npy"), np.ascontiguousarray(x.transpose(0, 2, 3, 1)))
    lines = ["exact %.9g %.9g %.9g" % train(init, x, y, xv, yv, 1, batch, lr, None, steps)]
    for s in seeds:
        lines.append("seed %d %.9g" % (s, train(init, x, y, xv, yv, epochs, batch, lr, s)[2]))
    with open(os.path.join(out, "ref.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]),
         [int(s) for s in sys.argv[5].split(",")], int(sys.argv[6]))
