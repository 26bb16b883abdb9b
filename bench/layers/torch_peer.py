#!/usr/bin/python3
"""PyTorch peer of bench/layers/bench_layers.c: MobileNet v1 (as Keras'
keras.applications.mobilenet: ZeroPadding2D((0,1),(0,1)) before each
stride-2 depthwise convolution, BatchNorm eps 1e-3, ReLU6, 1x1 classifier
convolution) in eager mode, NCHW, 2 threads (OpenBLAS at 1), Adam, cross
entropy from logits. Prints: mobilenet_ms <median ms per training step>

    /usr/bin/python3 bench/layers/torch_peer.py [--reps N] [--size S] [--batch B]
"""
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(2)


def bn_relu6(c):
    return [nn.BatchNorm2d(c, eps=1e-3, momentum=0.01), nn.ReLU6()]


def mobilenet(classes):
    layers = [nn.ZeroPad2d((0, 1, 0, 1)), nn.Conv2d(3, 32, 3, 2, bias=False)] + bn_relu6(32)
    blocks = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1), (512, 1),
              (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1)]
    c = 32
    for f, s in blocks:
        if s == 2:
            layers += [nn.ZeroPad2d((0, 1, 0, 1)), nn.Conv2d(c, c, 3, 2, groups=c, bias=False)]
        else:
            layers += [nn.Conv2d(c, c, 3, 1, padding=1, groups=c, bias=False)]
        layers += bn_relu6(c) + [nn.Conv2d(c, f, 1, bias=False)] + bn_relu6(f)
        c = f
    layers += [nn.AdaptiveAvgPool2d(1), nn.Dropout(0.001), nn.Conv2d(c, classes, 1),
               nn.Flatten()]
    return nn.Sequential(*layers)


def main():
    args = sys.argv[1:]
    reps, size, batch = 3, 224, 32
    for i, a in enumerate(args):
        if a == "--reps":
            reps = int(args[i + 1])
        elif a == "--size":
            size = int(args[i + 1])
        elif a == "--batch":
            batch = int(args[i + 1])
    torch.manual_seed(1)
    m = mobilenet(1000)
    opt = torch.optim.Adam(m.parameters(), lr=1e-3, eps=1e-7)
    x = torch.rand(batch, 3, size, size)
    y = torch.arange(batch) % 1000
    ts = []
    for i in range(reps + 1):
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        if i >= 1:
            ts.append(time.perf_counter() - t0)
    print(f"mobilenet_ms {float(np.median(ts)) * 1e3:.1f}")


if __name__ == "__main__":
    main()
