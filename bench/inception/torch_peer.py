#!/usr/bin/python3
"""PyTorch peer for bench/inception: torchvision's inception_v3
(aux_logits=False, init_weights=True, 10 classes, transform_input=False)
trained in eager mode, Adam lr 1e-3, cross entropy, synthetic images; in
float32 and under torch.autocast("cpu", dtype=torch.bfloat16). For each
prints "PRECISION IMAGES_PER_S FIRST_STEP_S": images/s from the median of
STEPS steps after the first, and the time from building the model to the
end of its first step.

    /usr/bin/python3 bench/inception/torch_peer.py STEPS BATCH SIZE THREADS
"""
import contextlib
import os
import statistics
import sys
import time

# OpenBLAS (under torch) at 1 thread so its pool and torch's do not
# oversubscribe the cores; set before torch loads it.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402
import torchvision  # noqa: E402


def run(steps, batch, size, bf16):
    g = torch.Generator().manual_seed(42)
    x = torch.rand(batch, 3, size, size, generator=g) * 2 - 1
    y = torch.arange(batch) * 7 % 10
    t0 = time.perf_counter()
    torch.manual_seed(1)
    m = torchvision.models.inception_v3(weights=None, aux_logits=False, init_weights=True,
                                        num_classes=10, transform_input=False)
    m.train()
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    ctx = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext

    def step():
        opt.zero_grad()
        with ctx():
            loss = loss_fn(m(x), y)
        loss.backward()
        opt.step()

    step()
    first = time.perf_counter() - t0
    t = []
    for _ in range(steps):
        a = time.perf_counter()
        step()
        t.append(time.perf_counter() - a)
    return batch / statistics.median(t), first


def main():
    steps, batch, size, threads = (int(a) for a in sys.argv[1:5])
    torch.set_num_threads(threads)
    print("torch_version", torch.__version__)
    for name, bf16 in (("fp32", False), ("bf16", True)):
        ips, first = run(steps, batch, size, bf16)
        print(name, "%.4f %.4f" % (ips, first), flush=True)


if __name__ == "__main__":
    main()
