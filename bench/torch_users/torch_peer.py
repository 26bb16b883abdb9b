#!/usr/bin/python3
"""PyTorch's own eager loop, the peer of bench_torch_users.py. It runs in
its own process at PyTorch's best setting on this machine (the driver
starts it with OPENBLAS_CORETYPE unset, OMP_NUM_THREADS=2,
OPENBLAS_NUM_THREADS=1) and serves one JSON request per stdin line with
one JSON line on stdout:

  {"cmd": "train", "task": T, "seed": S, "epochs": E, "batch": B, "lr": LR,
   "momentum": M, "n_train": N, "n_test": N}
      common.make_net(T, S) trained by SGD(LR, momentum M) on
      nn.CrossEntropyLoss, its batches in rtrain's order for seed S
      (common.epoch_order), BatchNorm in training mode; then the test
      split's accuracy in eval mode. -> {"loss": [per epoch, the batch
      losses' mean weighted by batch size], "epoch_s": [...], "acc": A}
  {"cmd": "net", "name": resnet18|mobilenet_v2, "size": S, "batch": B}
      the torchvision model, SGD(0.01, momentum 0.9), cross entropy on one
      fixed batch, two warm-up steps -> {"params": P}
  {"cmd": "step"}  one more step of that model -> {"ms": MS}

The first line it prints is {"torch": version, "threads": N}.
"""
import json
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def accuracy(m, x, y, chunk=1000):
    m.eval()
    hits = 0
    with torch.no_grad():
        for s in range(0, len(y), chunk):
            hits += int((m(torch.from_numpy(x[s:s + chunk])).argmax(1).numpy() ==
                         y[s:s + chunk]).sum())
    return hits / len(y)


def train(q, cache):
    key = (q["task"], q["n_train"], q["n_test"])
    if key not in cache:
        cache.clear()
        cache[key] = common.load(*key)
    x, y, xt, yt = cache[key]
    X, Y = torch.from_numpy(x), torch.from_numpy(y)
    m = common.make_net(q["task"], q["seed"])
    opt = torch.optim.SGD(m.parameters(), lr=q["lr"], momentum=q["momentum"])
    loss_fn = nn.CrossEntropyLoss()
    B, n = q["batch"], len(y)
    losses, times = [], []
    for ep in range(q["epochs"]):
        order = torch.from_numpy(common.epoch_order(q["seed"], n, ep))
        t0 = time.perf_counter()
        m.train()
        tot = 0.0
        for s in range(0, n, B):
            idx = order[s:s + B]
            opt.zero_grad()
            loss = loss_fn(m(X[idx]), Y[idx])
            loss.backward()
            opt.step()
            tot += loss.item() * len(idx)
        times.append(time.perf_counter() - t0)
        losses.append(tot / n)
    return {"loss": losses, "epoch_s": times, "acc": accuracy(m, xt, yt)}


class Stepper:
    def __init__(self, q):
        self.m = common.make_vision(q["name"], 0)
        self.m.train()
        self.opt = torch.optim.SGD(self.m.parameters(), lr=0.01, momentum=0.9)
        self.loss_fn = nn.CrossEntropyLoss()
        x, y = common.vision_batch(q["batch"], q["size"])
        self.x, self.y = torch.from_numpy(x), torch.from_numpy(y)
        self.step()
        self.step()

    def step(self):
        t0 = time.perf_counter()
        self.opt.zero_grad()
        loss = self.loss_fn(self.m(self.x), self.y)
        loss.backward()
        self.opt.step()
        return (time.perf_counter() - t0) * 1e3


def main():
    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads()}),
          flush=True)
    cache, stepper = {}, None
    for line in sys.stdin:
        q = json.loads(line)
        if q["cmd"] == "train":
            r = train(q, cache)
        elif q["cmd"] == "net":
            stepper = Stepper(q)
            r = {"params": sum(p.numel() for p in stepper.m.parameters())}
        elif q["cmd"] == "step":
            r = {"ms": stepper.step()}
        else:
            r = {"error": "unknown cmd %r" % q["cmd"]}
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
