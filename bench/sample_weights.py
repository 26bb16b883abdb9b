"""What Keras' sample_weight costs on the daemon: the daemon's execute time
of an epoch with per-sample loss weights against the same epoch without
them, on the same program shape, medians over repetitions.

  PYTHONPATH=build/python /usr/bin/python3 bench/sample_weights.py
      [--server HOST:PORT | --rtraind build/server/rpc/rtraind] [--reps 9]

Without --server it starts the given rtraind (by default the build tree's)
on a loopback port. The weighted loss runs the loss per sample and scales
it (rt_exec.c), so the cost is a fraction of the loss's own time: largest
where the loss is a large share of a step (tiny models).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def start_daemon(path):
    p = subprocess.Popen([path, "--listen", "127.0.0.1:0", "--log-level", "warn"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in p.stdout:
        m = re.match(r"rtraind listening on (\S+)", line)
        if m:
            return p, m.group(1)
    p.wait()
    sys.exit("sample_weights.py: %s did not start" % path)


def epoch_ns(client, shape, loss, x, y, sw, reps):
    import rtrain
    from rtrain import layers as L
    d_in, hidden, d_out, act = shape
    m = rtrain.Sequential([L.Dense(hidden, activation="relu", input_shape=(d_in,)),
                           L.Dense(d_out, activation=act)])
    m.compile("adam", loss, client=client, batch_size=128)
    out = []
    for r in range(reps + 1):
        h = m.fit(x, y, epochs=1, verbose=0, batch_size=128, sample_weight=sw)
        ns = sum(t["execute_ns"] for t in h.timings if t.get("method") == "Fit")
        if r:  # the first run warms the program
            out.append(ns)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server")
    ap.add_argument("--rtraind", default=os.path.join(ROOT, "build", "server", "rpc",
                                                      "rtraind"))
    ap.add_argument("--reps", type=int, default=9)
    a = ap.parse_args()
    import rtrain
    proc = None
    server = a.server
    if not server:
        proc, server = start_daemon(a.rtraind)
    try:
        client = rtrain.connect(server)
        rng = np.random.RandomState(0)
        n = 4096
        cases = [("784-128-10 softmax, sparse CE", (784, 128, 10, "softmax"),
                  "sparse_categorical_crossentropy"),
                 ("4-128-3 softmax, sparse CE", (4, 128, 3, "softmax"),
                  "sparse_categorical_crossentropy"),
                 ("32-64-8 linear, mse", (32, 64, 8, None), "mse")]
        print("| model (batch 128, %d samples) | unweighted ms/epoch | weighted ms/epoch "
              "| weighted / unweighted |" % n)
        print("| --- | ---: | ---: | ---: |")
        for name, shape, loss in cases:
            x = rng.normal(size=(n, shape[0])).astype(np.float32)
            if loss == "mse":
                y = rng.normal(size=(n, shape[2])).astype(np.float32)
            else:
                y = rng.randint(0, shape[2], n)
            sw = rng.uniform(0.5, 2.0, n)
            plain, weighted = [], []
            for _ in range(2):  # interleaved, so drift hits both alike
                plain += epoch_ns(client, shape, loss, x, y, None, a.reps)
                weighted += epoch_ns(client, shape, loss, x, y, sw, a.reps)
            p, w = statistics.median(plain), statistics.median(weighted)
            print("| %s | %.2f | %.2f | %.3f |" % (name, p / 1e6, w / 1e6, w / p))
        client.close()
    finally:
        if proc:
            proc.terminate()
            proc.wait()


if __name__ == "__main__":
    main()
