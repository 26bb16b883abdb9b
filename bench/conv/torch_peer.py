#!/usr/bin/python3
"""PyTorch peer of bench/conv/bench_conv.c, run by it in the same process
tree (PyTorch's best measured setting here is 2 threads).

    /usr/bin/python3 bench/conv/torch_peer.py [--reps N] [--b1024]

Prints lines the C side parses:
    wb256_ms <median ms per W-B training step at batch 256>
    wb1024_ms <same at batch 1024>          (with --b1024)
    wd_s <seconds for W-D's 10 epochs> <test accuracy>

W-B and W-D are the models of bench_conv.c, NCHW (torch's layout), Adam
(eps 1e-7, as Keras), sparse CE from logits. W-D uses the same digits file
and the same stratified split (the LCG of tests/conv/conv_models.h).
"""
import gzip
import os
import sys
import time

# PyTorch's best measured setting on this machine: torch's own
# 2 threads, OpenBLAS (under it) at 1 thread so the two pools do not
# oversubscribe the cores. Must be set before numpy/torch load OpenBLAS.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(2)
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def wb_model():
    return nn.Sequential(nn.Conv2d(3, 64, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(15 * 15 * 64, 128), nn.ReLU(), nn.Linear(128, 10))


def bench_wb(batch, reps):
    torch.manual_seed(1)
    m = wb_model()
    opt = torch.optim.Adam(m.parameters(), lr=1e-3, eps=1e-7)
    x = torch.rand(batch, 3, 32, 32)
    y = torch.arange(batch) % 10
    ts = []
    for i in range(reps + 3):
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        if i >= 3:
            ts.append(time.perf_counter() - t0)
    return float(np.median(ts)) * 1e3


def load_digits():
    rows = []
    with gzip.open(os.path.join(ROOT, "tests/conv/data/digits.csv.gz"), "rt") as f:
        for line in f:
            rows.append([int(v) for v in line.strip().split(",")])
    a = np.array(rows, dtype=np.int64)
    x = (a[:, :64].astype(np.float32) / 16.0).reshape(-1, 8, 8, 1)
    y = a[:, 64]
    # the split of tests/conv/conv_models.h, bit for bit
    s, M = 20240607, (1 << 64) - 1
    test = np.zeros(len(y), bool)
    for c in range(10):
        idx = [i for i in range(len(y)) if y[i] == c]
        for i in range(len(idx) - 1, 0, -1):
            s = (s * 6364136223846793005 + 1442695040888963407) & M
            j = (s >> 33) % (i + 1)
            idx[i], idx[j] = idx[j], idx[i]
        for i in idx[:(len(idx) * 2 + 5) // 10]:
            test[i] = True
    xtr, xte = x[~test], x[test]
    # per-pixel standardisation, as rt_conv_standardize_digits
    m = xtr.reshape(len(xtr), 64).astype(np.float64).mean(axis=0)
    sd = xtr.reshape(len(xtr), 64).astype(np.float64).std(axis=0) + 1e-3
    xtr = ((xtr.reshape(-1, 64) - m) / sd).astype(np.float32).reshape(-1, 8, 8, 1)
    xte = ((xte.reshape(-1, 64) - m) / sd).astype(np.float32).reshape(-1, 8, 8, 1)
    return xtr, y[~test], xte, y[test]


def wd_model():
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(4 * 4 * 32, 64), nn.ReLU(), nn.Linear(64, 10))


def bench_wd(data):
    xtr, ytr, xte, yte = data
    torch.manual_seed(1)
    t0 = time.perf_counter()
    m = wd_model()
    opt = torch.optim.Adam(m.parameters(), lr=1e-3, eps=1e-7)
    xt = torch.tensor(xtr).permute(0, 3, 1, 2).contiguous()
    yt = torch.tensor(ytr)
    g = torch.Generator().manual_seed(1)
    for _ in range(10):
        perm = torch.randperm(len(yt), generator=g)
        for lo in range(0, len(yt), 32):
            b = perm[lo:lo + 32]
            opt.zero_grad()
            F.cross_entropy(m(xt[b]), yt[b]).backward()
            opt.step()
    secs = time.perf_counter() - t0
    with torch.no_grad():
        pred = m(torch.tensor(xte).permute(0, 3, 1, 2)).argmax(dim=1).numpy()
    return secs, float((pred == yte).mean())


def main():
    reps = 20
    if "--reps" in sys.argv:
        reps = int(sys.argv[sys.argv.index("--reps") + 1])
    print("wb256_ms %.3f" % bench_wb(256, reps), flush=True)
    if "--b1024" in sys.argv:
        print("wb1024_ms %.3f" % bench_wb(1024, max(3, reps // 2)), flush=True)
    data = load_digits()
    runs = [bench_wd(data) for _ in range(3)]
    runs.sort()
    print("wd_s %.4f %.4f" % runs[1], flush=True)


if __name__ == "__main__":
    main()
