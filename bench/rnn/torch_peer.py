#!/usr/bin/python3
"""PyTorch peer for bench/rnn: the IMDB-like model of bench_rnn.c in eager
mode (Embedding(10000, 64) -> LSTM(64) -> Dense(1, sigmoid), binary
crossentropy, Adam, batch 32, sequence 100), on 2 threads and on 1, timed
the same way: the median over repetitions of the per-step time. Prints
"key value" lines that the C bench parses.

    /usr/bin/python3 bench/rnn/torch_peer.py [reps]
"""
import os
import statistics
import sys
import time

# As bench/conv's peer: OpenBLAS (under torch) at 1 thread so its pool and
# torch's do not oversubscribe the cores; set before torch loads it.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402

B, T, V, D, U = 32, 100, 10000, 64, 64


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(V, D)
        self.lstm = torch.nn.LSTM(D, U, batch_first=True)
        self.out = torch.nn.Linear(U, 1)

    def forward(self, x):
        _, (h, _) = self.lstm(self.emb(x))
        return torch.sigmoid(self.out(h[-1]))


def measure(reps, threads):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = Model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
    x = torch.randint(0, V, (8 * B, T))
    y = torch.randint(0, 2, (8 * B, 1)).float()
    loss_fn = torch.nn.BCELoss()

    def steps(n):
        for i in range(n):
            s = (i % 8) * B
            opt.zero_grad()
            loss = loss_fn(model(x[s:s + B]), y[s:s + B])
            loss.backward()
            opt.step()

    steps(3)
    per = []
    for _ in range(reps):
        t0 = time.perf_counter()
        steps(5)
        per.append((time.perf_counter() - t0) / 5)
    return statistics.median(per) * 1e6


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    print("lstm_step_us_2t", measure(reps, 2))
    print("lstm_step_us_1t", measure(reps, 1))
    print("torch_version", torch.__version__)


if __name__ == "__main__":
    main()
