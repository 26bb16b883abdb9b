#!/usr/bin/python3
"""PyTorch eager peer of `rtrain bench story` (bench/story.py runs both): W-A
trained locally, the way
the remote-TPU story's laptop run did it (Keras on the CPU, ~1.3 s).

W-A (docs/workloads.md): Dense(32, relu, input 4) -> Dense(3, softmax),
Glorot-uniform weights, zero biases; Adam lr 0.1, eps 1e-7; Keras logcosh on
integer labels (labels (B,) -> (B,1) broadcast against the (B,3) output; per
sample the mean over columns of x + softplus(-2x) - log 2; then the batch
mean); batch 20, EPOCHS epochs of 2 steps, reshuffled each epoch, validation
each epoch. Times one whole run (model creation included, data loading not)
per repetition and prints the median, and the last repetition's last
validation (loss and accuracy, as rtrain bench story reports its own):

  torch_story median_s=0.0312 val_accuracy=0.0000 val_loss=1.0086 per_step_us=...

That loss is least where the softmax is uniform (every column 1/3: val loss
1.0086 on the story's split, train loss 0.1728), and a model whose softmax
saturates on one class rests at 1.0279; both frameworks end in one of the
two, predicting (nearly) the same for every flower, so the accuracy of the
all-class-2 validation split is 0 or 1 by which class that favours. Compare
val loss.

Usage: /usr/bin/python3 bench/story_torch.py --train T.csv --val V.csv
       [--epochs 20] [--reps 5] [--steps-per-epoch 2]
"""
import argparse
import math
import statistics
import sys
import time


def load(path):
    xs, ys = [], []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            v = line.split(",")
            xs.append([float(a) for a in v[:-1]])
            ys.append(int(float(v[-1])))
    return xs, ys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", required=True)
    ap.add_argument("--val", required=True)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps-per-epoch", type=int, default=2)
    ap.add_argument("--batch", type=int, default=20)
    a = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("torch_story n/a: python3-torch not installed")
        return 0
    torch.set_num_threads(1)
    xt, yt = load(a.train)
    xv, yv = load(a.val)
    xt = torch.tensor(xt, dtype=torch.float32)
    yt = torch.tensor(yt, dtype=torch.int64)
    xv = torch.tensor(xv, dtype=torch.float32)
    yv = torch.tensor(yv, dtype=torch.int64)
    log2 = math.log(2.0)

    def logcosh(pred, y):
        d = pred - y.to(torch.float32).unsqueeze(1)
        return (d + F.softplus(-2.0 * d) - log2).mean(dim=1).mean()

    def run(seed):
        torch.manual_seed(seed)
        m = torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 3), torch.nn.Softmax(dim=1))
        for layer in (m[0], m[2]):
            torch.nn.init.xavier_uniform_(layer.weight)
            torch.nn.init.zeros_(layer.bias)
        opt = torch.optim.Adam(m.parameters(), lr=0.1, eps=1e-7)
        n = xt.shape[0]
        acc = vloss = float("nan")
        for _ in range(a.epochs):
            perm = torch.randperm(n)
            for s in range(a.steps_per_epoch):
                idx = perm[(s * a.batch) % n:(s * a.batch) % n + a.batch]
                opt.zero_grad()
                loss = logcosh(m(xt[idx]), yt[idx])
                loss.backward()
                opt.step()
            with torch.no_grad():
                p = m(xv)
                vloss = logcosh(p, yv).item()
                acc = (p.argmax(dim=1) == yv).to(torch.float32).mean().item()
        return acc, vloss

    run(0)  # warm-up: first-call allocations and lazy init
    times, acc, vloss = [], float("nan"), float("nan")
    for r in range(a.reps):
        t0 = time.perf_counter()
        acc, vloss = run(r + 1)
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    steps = a.epochs * a.steps_per_epoch
    print("torch_story median_s=%.6f val_accuracy=%.4f val_loss=%.4f per_step_us=%.1f reps=%d "
          "torch=%s" % (med, acc, vloss, med / steps * 1e6, a.reps, torch.__version__))
    return 0


if __name__ == "__main__":
    sys.exit(main())
