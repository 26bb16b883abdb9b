#!/usr/bin/python3
"""Writes tests/onnx/fixtures/mio.onnx and mio_ref.bin: a PyTorch model with
two inputs and two outputs exported with torch.onnx.export, its training
data, and PyTorch's own training run, read by tests/onnx/test_onnx_parity.c
(the file format: gen_onnx_fixtures.py). torch is needed only to
regenerate the files:

    /usr/bin/python3 tests/onnx/gen_onnx_multi.py [outdir]

The model: input "a" (B, 6) through Linear(6, 8) relu; input "b" (B, 2, 4,
4), an NCHW image, through Conv2d(2, 4, 3, padding 1) relu, flatten,
Linear(64, 8) tanh; the two concatenated into Linear(16, 12) relu, then two
heads: "cls" Linear(12, 3) (logits) and "reg" Linear(12, 2).

The loss is Keras' weighted sum over the outputs as PyTorch writes it:
cross_entropy(cls, y_cls) + 0.5 * mse_loss(reg, y_reg), which are Keras'
sparse_categorical_crossentropy from logits and mse (both the batch mean).
Trained 6 steps on 6 fixed batches of 4, once with SGD (lr 0.05, momentum
0.9) and once with Adam (lr 1e-3, eps 1e-7).

Tensors: "x" the packed inputs per sample as the daemon takes them (a's 6
values, then b's 32 in NCHW order), "x_nhwc" the same with b NHWC, "y" the
packed labels per sample (the class index, then reg's 2 values), "heads"
(int32: per output its loss, 0 sparse_categorical_crossentropy, 1 mse, and
from_logits), "head_w" the loss weights, "lr" the two rates, "<opt>/loss"
PyTorch's per-step total losses and "<opt>/<initializer>" the final weights.
"""
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from gen_onnx_fixtures import match_inits, put_final, write_ref

HERE = os.path.dirname(os.path.abspath(__file__))
torch.set_num_threads(1)
STEPS, B = 6, 4
LR = (0.05, 1e-3)
W_REG = 0.5


class MIO(nn.Module):
    def __init__(self):
        super().__init__()
        self.fa = nn.Linear(6, 8)
        self.conv = nn.Conv2d(2, 4, 3, padding=1)
        self.fb = nn.Linear(64, 8)
        self.shared = nn.Linear(16, 12)
        self.cls = nn.Linear(12, 3)
        self.reg = nn.Linear(12, 2)

    def forward(self, a, b):
        ha = F.relu(self.fa(a))
        hb = torch.tanh(self.fb(torch.flatten(F.relu(self.conv(b)), 1)))
        h = F.relu(self.shared(torch.cat([ha, hb], 1)))
        return self.cls(h), self.reg(h)


def train(m, ab, bb, yc, yr, opt):
    if opt == "sgd":
        o = torch.optim.SGD(m.parameters(), lr=LR[0], momentum=0.9)
    else:
        o = torch.optim.Adam(m.parameters(), lr=LR[1], eps=1e-7)
    losses = []
    for a, b, c, r in zip(ab, bb, yc, yr):
        o.zero_grad()
        pc, pr = m(a, b)
        loss = F.cross_entropy(pc, c) + W_REG * F.mse_loss(pr, r)
        loss.backward()
        o.step()
        losses.append(loss.item())
    return np.array(losses, dtype=np.float32)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "fixtures")
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(29)
    rng = np.random.RandomState(29)
    n = B * STEPS
    a = rng.uniform(-1, 1, (n, 6)).astype(np.float32)
    b = rng.uniform(-1, 1, (n, 2, 4, 4)).astype(np.float32)
    yc = rng.randint(0, 3, n).astype(np.int64)
    yr = rng.uniform(-1, 1, (n, 2)).astype(np.float32)
    m = MIO()
    init_state = {k: v.clone() for k, v in m.state_dict().items()}
    path = os.path.join(out, "mio.onnx")
    m.eval()
    torch.onnx.export(m, (torch.from_numpy(a[:B]), torch.from_numpy(b[:B])), path,
                      opset_version=13, input_names=["a", "b"], output_names=["cls", "reg"],
                      dynamic_axes={k: {0: "batch"} for k in ("a", "b", "cls", "reg")})
    inits, sd_of = match_inits("mio", path, init_state)
    tensors = []

    def put(nm, arr, dt):
        tensors.append((nm, arr, dt))

    put("x", np.concatenate([a, b.reshape(n, -1)], 1), 1)
    put("x_nhwc", np.concatenate([a, b.transpose(0, 2, 3, 1).reshape(n, -1)], 1), 1)
    put("y", np.concatenate([yc.reshape(n, 1).astype(np.float32), yr], 1), 1)
    put("heads", np.array([0, 1, 1, 0], np.int32), 2)
    put("head_w", np.array([1.0, W_REG], np.float32), 1)
    put("lr", np.array(LR, np.float32), 1)
    split = lambda t: list(torch.from_numpy(t).split(B))  # noqa: E731
    for opt in ["sgd", "adam"]:
        m.load_state_dict(init_state)
        m.train()
        losses = train(m, split(a), split(b), split(yc), split(yr), opt)
        put(opt + "/loss", losses, 1)
        worst = put_final(put, opt, m, inits, sd_of)
        print("mio %-4s losses %s  f16 rounding %.1e" % (opt, losses[[0, -1]], worst))
    write_ref(os.path.join(out, "mio_ref.bin"), tensors)


if __name__ == "__main__":
    main()
