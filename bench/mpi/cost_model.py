#!/usr/bin/python3
"""Ring all-reduce cost model for rtraind's MPI replicas (docs/mpi.md,
"Cost model"), and its check against this machine.

    T_allreduce(N, S) = r * 2 (N-1)/N * S / BW + 2 (N-1) * alpha
    r = max(1, ranks per host / cores per host)

S: gradient bytes, BW: bandwidth of one rank's link (a NIC, or here shared
memory), alpha: one ring step's latency. r is 1 when every rank has a core
of its own (one rank per host, the deployments in the table); it is the
time-sharing factor when ranks outnumber cores: a shared-memory reduce is
CPU work (copies and sums), so two ranks on one core move half as much.

A training step at a fixed global batch over N ranks (the batch split
across them, no overlap of the reduce with backward):

    T_step(N) = r * T_1 / N + T_allreduce(N, S)

T_1: one single-threaded rank's step at the whole batch. Weak scaling
(each host keeps its per-host batch): efficiency = T_1 / (T_1 + T_allreduce).

usage: cost_model.py [--cores C] [MEASURED.txt ...]
With bench_mpi output holding the all-reduce tables for N = 2 and N = 4,
fits BW and alpha to the N = 2 rt_dist column (what a training step pays:
4 MiB buckets; least squares on the relative error) and prints the model
against every measured N = 2 and N = 4 point, r taken from --cores
(default: this machine's). With W-C lines (`--part wc`) for N = 1 x 1
thread and N > 1 x 1 thread, also predicts the N > 1 step times from the
N = 1 step and the fitted all-reduce.

With a link table (`--part link`: ranks 0 and 1, a ping-pong and an
exchange), the model is also fed that link's own latency and bandwidth:
alpha = the smallest message's time, BW = the least-squares slope of
t - alpha over the messages from 1 MiB (a fit over every size lets the
small messages' scheduling noise set alpha): once from the one-way times,
once from the exchange (both ways at once, which is what a ring step does:
over a veth, where the wire is the CPU's copy, that matters), and printed against every all-reduce row,
beside docs/mpi.md's model (its alpha = 10 us per TCP ring step, with the
exchange's bandwidth: a veth has no nominal rate). That is the check across hosts (tests/mpi/netns.sh); the
N = 2 fit alone is the check on one host.
"""
import argparse
import os
import re
import statistics
import sys

WC_PARAMS = 784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10  # 669,706
RESNET50_PARAMS = 25_557_032
ALPHA = 10e-6  # s per ring step over TCP

MODELS = [
    # name, gradient bytes, one host's step (s) at its per-host batch
    ("W-C (batch 128/host)", 4 * WC_PARAMS, 1.5e-3),
    ("ResNet-50 (batch 32/host)", 4 * RESNET50_PARAMS, 1.0),
]


def t_ring(n, s, bw, alpha, r=1.0):
    return r * 2 * (n - 1) / n * s / bw + 2 * (n - 1) * alpha


def share(n, cores):
    return max(1.0, n / cores)


def table():
    print("%-26s %6s %9s %12s %11s" % ("model", "hosts", "link", "all-reduce", "efficiency"))
    for name, s, step in MODELS:
        for n in (8, 64):
            for gbps in (25, 100):
                t = t_ring(n, s, gbps * 1e9 / 8, ALPHA)
                print("%-26s %6d %6d Gb/s %9.2f ms %10.1f %%"
                      % (name, n, gbps, t * 1e3, 100 * step / (step + t)))


def measured(paths):
    """({n: [(floats, mpi_s, rt_s)]}, {(n, threads): [ms per step]},
    [(bytes, one-way s)]) from bench_mpi output; a size or configuration
    met twice keeps every value (the all-reduce and the link: the first
    table of each)."""
    ar, wc, link, n, in_link = {}, {}, None, None, False
    for path in paths:
        for line in open(path):
            if line.startswith("link, "):
                in_link = link is None
                link = [] if link is None else link
                continue
            m = re.match(r"\s*(\d+)\s+\d+\s+([\d.]+) us\s+[\d.]+ GB/s(?:\s+([\d.]+) us)?",
                         line)
            if m:
                if in_link:
                    link.append((int(m.group(1)), float(m.group(2)) * 1e-6,
                                 float(m.group(3)) * 1e-6 if m.group(3) else None))
                continue
            if in_link and line.split()[:1] == ["bytes"]:
                continue  # the link table's column names
            in_link = False
            m = re.match(r"all-reduce, (\d+) ranks", line)
            if m:
                n = int(m.group(1))
                n = n if n not in ar else None
                if n:
                    ar[n] = []
                continue
            # floats, loop length, MPI_Allreduce, rt_dist, ...
            m = re.match(r"\s*(\d+)\s+\d+\s+([\d.]+) us\s+([\d.]+) us", line)
            if m and n:
                ar[n].append((int(m.group(1)), float(m.group(2)) * 1e-6,
                              float(m.group(3)) * 1e-6))
            m = re.match(r"W-C, (\d+) replica\(s\) x (\d+) thread\(s\).*?: ([\d.]+) ms/step", line)
            if m:
                wc.setdefault((int(m.group(1)), int(m.group(2))), []).append(float(m.group(3)))
    return ar, wc, link or []


def fit(pts):
    """t = a S + b over (S bytes, t s), least squares on the relative error
    (the sizes span five decades)."""
    sxx = sx = s1 = sxy = sy = 0.0
    for s, t in pts:
        w = 1 / (t * t)
        sxx += w * s * s
        sx += w * s
        s1 += w
        sxy += w * s * t
        sy += w * t
    a = (sxy * s1 - sy * sx) / (sxx * s1 - sx * sx)
    return a, max((sy - a * sx) / s1, 0.0)


def check_link(ar, link, cores):
    """the model fed the link's measured alpha and BW (one way, and both
    ways at once), and docs/mpi.md's (alpha = ALPHA, the exchange's BW),
    against both all-reduce columns"""
    def lat_bw(pts):
        pts = sorted(pts)
        al = pts[0][1]
        big = [(s_, t - al) for s_, t in pts if s_ >= 1 << 20]
        return al, sum(s_ * s_ for s_, _ in big) / sum(s_ * d for s_, d in big)
    al1, bw1 = lat_bw([(s_, t) for s_, t, _ in link])
    ex = [(s_, t) for s_, _, t in link if t is not None]
    al2, bw2 = lat_bw(ex) if len(ex) == len(link) else (al1, bw1)
    print("link (rank 0 <-> 1), %d cores, r = max(1, N / %d):" % (cores, cores))
    print("  one way (ping-pong):       alpha %6.1f us, bandwidth %.3f GB/s (%.1f Gb/s)"
          % (al1 * 1e6, bw1 / 1e9, bw1 * 8 / 1e9))
    print("  both ways (exchange):      alpha %6.1f us, bandwidth %.3f GB/s (%.1f Gb/s)"
          % (al2 * 1e6, bw2 / 1e9, bw2 * 8 / 1e9))
    for s_, t, t2 in link:
        print("  %10d B  one-way %10.1f us (fit %5.2fx)   exchange %s"
              % (s_, t * 1e6, t / (al1 + s_ / bw1),
                 "%10.1f us (fit %5.2fx)" % (t2 * 1e6, t2 / (al2 + s_ / bw2)) if t2 else "-"))
    print("%4s %10s %11s %11s %11s %11s %11s %8s %8s %8s %8s"
          % ("N", "floats", "one-way m.", "exchange m.", "README a", "MPI_Allred", "rt_dist",
             "MPI/1way", "MPI/exch", "rt/exch", "rt/READ"))
    for n in sorted(ar):
        r = share(n, cores)
        for floats, tm, t in ar[n]:
            m1 = t_ring(n, 4 * floats, bw1, al1, r)
            m2 = t_ring(n, 4 * floats, bw2, al2, r)
            mr = t_ring(n, 4 * floats, bw2, ALPHA, r)
            print("%4d %10d %8.1f us %8.1f us %8.1f us %8.1f us %8.1f us %7.2fx %7.2fx %7.2fx "
                  "%7.2fx" % (n, floats, m1 * 1e6, m2 * 1e6, mr * 1e6, tm * 1e6, t * 1e6,
                             tm / m1, tm / m2, t / m2, t / mr))
    return 0


def check(paths, cores):
    ar, wc, link = measured(paths)
    if link and ar:
        return check_link(ar, link, cores)
    if 2 not in ar or 4 not in ar:
        print("need the N=2 and N=4 all-reduce tables")
        return 1
    a, b = fit([(4 * f, rt) for f, _, rt in ar[2]])  # at N=2: a = 1/BW, b = 2 alpha
    bw, alpha = 1 / a, b / 2
    print("fitted to the N=2 rt_dist column: bandwidth %.2f GB/s, alpha %.2f us; "
          "%d cores, so r = %s"
          % (bw / 1e9, alpha * 1e6, cores,
             ", ".join("%g at N=%d" % (share(n, cores), n) for n in (2, 4))))
    print("%4s %10s %12s %12s %8s %12s" % ("N", "floats", "model", "rt_dist", "ratio",
                                           "r=1 ratio"))
    for n in (2, 4):
        r = share(n, cores)
        for floats, _, t in ar[n]:
            m = t_ring(n, 4 * floats, bw, alpha, r)
            m1 = t_ring(n, 4 * floats, bw, alpha)
            print("%4d %10d %9.1f us %9.1f us %7.2fx %11.2fx"
                  % (n, floats, m * 1e6, t * 1e6, t / m, t / m1))
    one = wc.get((1, 1))
    if one:
        t1 = statistics.median(one) * 1e-3
        print("W-C step, global batch 128: N=1 x 1 thread measured %.2f ms "
              "(median of %d)" % (t1 * 1e3, len(one)))
        print("%4s %12s %12s %8s" % ("N", "model", "measured", "ratio"))
        for (n, th), v in sorted(wc.items()):
            if th != 1 or n == 1:
                continue
            r = share(n, cores)
            m = r * t1 / n + t_ring(n, 4 * WC_PARAMS, bw, alpha, r)
            t = statistics.median(v) * 1e-3
            print("%4d %9.2f ms %9.2f ms %7.2fx   (median of %d)"
                  % (n, m * 1e3, t * 1e3, t / m, len(v)))
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--cores", type=int, default=os.cpu_count())
    ap.add_argument("measured", nargs="*")
    args = ap.parse_args()
    table()
    sys.exit(check(args.measured, args.cores) if args.measured else 0)
