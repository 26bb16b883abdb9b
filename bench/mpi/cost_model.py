#!/usr/bin/python3
"""Ring all-reduce cost model for rtraind's MPI replicas (README "More than
one machine").

    T_allreduce(N, S) = 2 (N-1)/N * S / BW + 2 (N-1) * alpha

S: gradient bytes, BW: link bandwidth, alpha: one message step's latency.
Weak scaling (each host keeps its per-host batch, no overlap of the
reduce with backward): efficiency = T_step / (T_step + T_allreduce).

usage: cost_model.py [MEASURED.txt]
With bench_mpi's output for N=2 and N=4 (all-reduce tables), fits BW and
alpha to the N=2 MPI_Allreduce column (least squares on relative error)
and compares the model's N=4
prediction with the measured N=4 column.
"""
import re
import sys

WC_PARAMS = 784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10  # 669,706
RESNET50_PARAMS = 25_557_032
ALPHA = 10e-6  # s per ring step over TCP

MODELS = [
    # name, gradient bytes, one host's step (s) at its per-host batch
    ("W-C (batch 128/host)", 4 * WC_PARAMS, 1.5e-3),
    ("ResNet-50 (batch 32/host)", 4 * RESNET50_PARAMS, 1.0),
]


def t_ring(n, s, bw, alpha):
    return 2 * (n - 1) / n * s / bw + 2 * (n - 1) * alpha


def table():
    print("%-26s %6s %9s %12s %11s" % ("model", "hosts", "link", "all-reduce", "efficiency"))
    for name, s, step in MODELS:
        for n in (8, 64):
            for gbps in (25, 100):
                t = t_ring(n, s, gbps * 1e9 / 8, ALPHA)
                print("%-26s %6d %6d Gb/s %9.2f ms %10.1f %%"
                      % (name, n, gbps, t * 1e3, 100 * step / (step + t)))


def measured(path):
    """{n: [(floats, mpi_us, rt_us)]} from bench_mpi output."""
    out, n = {}, None
    for line in open(path):
        m = re.match(r"all-reduce, (\d+) ranks", line)
        if m:
            n = int(m.group(1))
            out[n] = []
            continue
        # floats, loop length, MPI_Allreduce, rt_dist, ...
        m = re.match(r"\s*(\d+)\s+\d+\s+([\d.]+) us\s+([\d.]+) us", line)
        if m and n:
            out[n].append((int(m.group(1)), float(m.group(2)) * 1e-6,
                           float(m.group(3)) * 1e-6))
    return out


def check(path):
    pts = measured(path)
    if 2 not in pts or 4 not in pts:
        print("need N=2 and N=4 tables in", path)
        return 1
    # fit t = a * S + b (S in bytes) to every N=2 point, least squares on
    # the relative error (the sizes span 5 decades)
    p2 = pts[2]
    sxx = sx = s1 = sxy = sy = 0.0
    for floats, t, _ in p2:
        w, s = 1 / (t * t), 4 * floats
        sxx += w * s * s
        sx += w * s
        s1 += w
        sxy += w * s * t
        sy += w * t
    a = (sxy * s1 - sy * sx) / (sxx * s1 - sx * sx)  # = 2 (N-1)/N / BW = 1 / BW at N=2
    b = max((sy - a * sx) / s1, 0.0)                 # = 2 (N-1) alpha = 2 alpha at N=2
    bw, alpha = 1 / a, b / 2
    print("fitted to N=2: bandwidth %.2f GB/s, alpha %.1f us" % (bw / 1e9, alpha * 1e6))
    print("%4s %10s %12s %12s %8s" % ("N", "floats", "model", "measured", "ratio"))
    for n in (2, 4):
        for floats, t, _ in pts[n]:
            m = t_ring(n, 4 * floats, bw, alpha)
            print("%4d %10d %9.1f us %9.1f us %7.2fx" % (n, floats, m * 1e6, t * 1e6, t / m))
    return 0


if __name__ == "__main__":
    table()
    sys.exit(check(sys.argv[1]) if len(sys.argv) > 1 else 0)
