#!/usr/bin/python3
"""PyTorch peer for bench/engine: the same workloads as bench_engine.c, in
eager mode, timed the same way (median over repetitions of the per-step
time). Prints one "key value" line per number, which the C bench parses.

    /usr/bin/python3 bench/engine/torch_peer.py [iris.csv] [reps]
"""
import math
import statistics
import sys
import time

import numpy as np
import torch

torch.set_num_threads(2)


def wa(path, reps):
    # W-A: Dense(32, relu, input 4) -> Dense(3, softmax), logcosh on int
    # labels (Keras semantics), Adam lr 0.1 eps 1e-7, batch 20, 105 samples
    # shuffled every epoch; 20 epochs = 120 steps per repetition
    data = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.float32)
    x = torch.tensor(data[:105, :4])
    y = torch.tensor(data[:105, 4]).reshape(-1, 1)
    model = torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 3), torch.nn.Softmax(dim=-1))
    opt = torch.optim.Adam(model.parameters(), lr=0.1, eps=1e-7)
    log2 = math.log(2.0)
    g = torch.Generator().manual_seed(1)

    def epochs(n):
        for _ in range(n):
            perm = torch.randperm(105, generator=g)
            for s in range(0, 105, 20):
                idx = perm[s:s + 20]
                opt.zero_grad()
                d = model(x[idx]) - y[idx]
                loss = (d + torch.nn.functional.softplus(-2.0 * d) - log2).mean()
                loss.backward()
                opt.step()

    epochs(5)  # warm up
    per_step = []
    for _ in range(reps):
        t0 = time.perf_counter()
        epochs(20)
        per_step.append((time.perf_counter() - t0) / 120)
    return statistics.median(per_step) * 1e6


def wc(reps):
    # W-C: 784-512-512-10 relu MLP, sparse CE from logits, Adam, batch 128,
    # synthetic data
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
    x = torch.randn(1280, 784)
    y = torch.randint(0, 10, (1280,))

    def steps(n):
        for s in range(n):
            lo = (s % 10) * 128
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x[lo:lo + 128]), y[lo:lo + 128])
            loss.backward()
            opt.step()

    steps(5)
    per_step = []
    for _ in range(reps):
        t0 = time.perf_counter()
        steps(10)
        per_step.append((time.perf_counter() - t0) / 10)
    return statistics.median(per_step) * 1e6


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/iris.csv"
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    print(f"torch_version {torch.__version__}")
    print(f"wa_step_us {wa(path, reps):.3f}")
    print(f"wc_step_us {wc(reps):.3f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
