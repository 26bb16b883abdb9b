#!/usr/bin/python3
"""PyTorch eager peer of bench/onnx/bench_onnx.c, run by it in the same run:
ResNet-18 (bench/onnx/models.py) training steps at batch 64 on 32x32x3,
SGD (lr 0.01, momentum 0.9), cross-entropy, 2 threads. bench_onnx.c starts
it with OPENBLAS_CORETYPE unset (OpenBLAS' AVX-512 kernel) and OpenBLAS at
one thread, PyTorch's best setting here (docs/workloads.md).

    /usr/bin/python3 bench/onnx/torch_peer.py [--reps N]
        prints: resnet18_step_ms <median of N steps after 2 warm-up steps>
    /usr/bin/python3 bench/onnx/torch_peer.py --serve
        prints "ready" after 2 warm-up steps, then runs one step per line
        read from stdin and prints its ms: bench_onnx.c interleaves these
        with its own steps, so the machine's load hits both alike
"""
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402

torch.set_num_threads(2)


def main():
    reps = int(sys.argv[sys.argv.index("--reps") + 1]) if "--reps" in sys.argv else 5
    m = models.resnet18()
    m.train()
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    x = torch.rand(64, 3, 32, 32, generator=g)
    y = torch.randint(0, 10, (64,), generator=g)
    def step():
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        return time.perf_counter() - t0

    step()
    step()
    if "--serve" in sys.argv:
        print("ready", flush=True)
        for _ in sys.stdin:
            print("%.3f" % (1e3 * step()), flush=True)
        return
    times = sorted(step() for _ in range(reps))
    print("resnet18_step_ms %.3f" % (1e3 * times[len(times) // 2]))


if __name__ == "__main__":
    main()
