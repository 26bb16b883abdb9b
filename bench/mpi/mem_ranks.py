#!/usr/bin/python3
"""Per-rank memory of rtraind's MPI replicas, measured (VmRSS of each
rank's process from /proc, not computed from sizes).

    /usr/bin/python3 bench/mpi/mem_ranks.py BUILD [--gib 1] [--ns 1,2,4]
                                                  [--part data,adam]

data: a GIB GiB in-memory set (256 floats a row, int labels) is uploaded
and trained on for 2 steps with --shard-data on; each rank's VmRSS after,
less its VmRSS before the upload, is what the set costs it. The daemon runs
with --upload-pool-bytes 0 --upload-arena-bytes 0: by default rank 0 keeps
up to 1 GiB of freed upload buffers (and a 256 MiB prefaulted arena) idle
for the next upload, a cache of the upload path with or without replicas,
which would be counted as the set's otherwise.
adam: an 8.4M-parameter MLP (2048-2048-2048-10: T = 8,413,194 trainable
floats, Adam's state 2 x 4T bytes = 64.2 MiB) trains 3 steps with Adam,
with --shard-optimizer on and, at N > 1, off. Each rank's VmRSS after the
fit, and the resident bytes (smaps Rss) of the exec's parameter block, the
one mapping of 4 x 4T bytes that holds weights, gradient and Adam's two
slots: its Rss less the always-resident weights and gradient (2 x 4T) is
Adam's state on that rank. (The slots of an exec are zeroed when it is
made, so plain SGD holds them resident too: a difference of two
optimizers does not isolate the state.)

The ranks are found as mpirun's children carrying OMPI_COMM_WORLD_RANK:
an earlier script took every process on the machine with that variable and
"rtraind" in its command line, so other jobs' ranks (the suite's MPI tests,
a leftover job) came into its figures. That script also read mpirun's
output and waited for the job without a bound, and a step that raised
left its job running (a new session, never killed): the next run then
stood beside it. Here every wait is bounded and the job is stopped however
the measurement ends. mpirun runs as the suite's MPI tests run it (shared
memory, OpenMPI's single-copy mechanism off).
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import threading
import time

ap = argparse.ArgumentParser()
ap.add_argument("build")
ap.add_argument("--gib", type=float, default=1.0)
ap.add_argument("--ns", default="1,2,4")
ap.add_argument("--part", default="data,adam")
a = ap.parse_args()
sys.path.insert(0, os.path.join(a.build, "python"))
import numpy as np  # noqa: E402
import rtrain  # noqa: E402
from rtrain import layers  # noqa: E402

RTRAIND = os.path.join(a.build, "server", "rpc", "rtraind")
MIB = 2.0 ** 20


def children_ranks(mp):
    """rank -> pid of mpirun mp's child processes that are ranks"""
    out = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            st = open(f"/proc/{p}/status").read()
            ppid = int(re.search(r"^PPid:\s+(\d+)", st, re.M).group(1))
            if ppid != mp:
                continue
            env = open(f"/proc/{p}/environ", "rb").read().split(b"\0")
        except (OSError, AttributeError):
            continue
        for e in env:
            if e.startswith(b"OMPI_COMM_WORLD_RANK="):
                out[int(e.split(b"=")[1])] = int(p)
    return out


def rss(pid, field="VmRSS"):
    for ln in open(f"/proc/{pid}/status"):
        if ln.startswith(field + ":"):
            return int(ln.split()[1]) * 1024
    return 0


class Job:
    def __init__(self, n, extra):
        env = dict(os.environ, OMPI_MCA_btl="self,vader",
                   OMPI_MCA_btl_vader_single_copy_mechanism="none",
                   OMPI_MCA_plm_rsh_agent="false", OMP_NUM_THREADS="1")
        cmd = ["mpirun", "--oversubscribe", "--allow-run-as-root", "--bind-to", "none",
               "-x", "OMP_NUM_THREADS=1", "-n", str(n), RTRAIND, "--listen", "127.0.0.1:0",
               "--log-level", "warn"] + extra
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env,
                                  start_new_session=True)
        self.addr = None
        got = threading.Event()

        def drain():  # the pipe is read to its end: a full pipe would stall the job
            for line in self.p.stdout:
                m = re.search(r"rtraind listening on (\S+)", line)
                if m and not self.addr:
                    self.addr = m.group(1)
                    got.set()
            got.set()

        threading.Thread(target=drain, daemon=True).start()
        if not got.wait(120) or not self.addr:
            self.stop()
            raise SystemExit(f"mpirun -n {n}: no listening line")
        self.n = n
        for _ in range(200):
            self.ranks = children_ranks(self.p.pid)
            if len(self.ranks) == n:
                break
            time.sleep(0.05)
        if len(self.ranks) != n:
            self.stop()
            raise SystemExit(f"mpirun -n {n}: found ranks {sorted(self.ranks)}")
        self.c = rtrain.connect(self.addr, timeout=600)

    def rss(self, field="VmRSS"):
        return [rss(self.ranks[r], field) for r in range(self.n)]

    def stop(self):
        try:
            os.killpg(self.p.pid, signal.SIGTERM)
            self.p.wait(60)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait()


def fmt(v):
    return ", ".join(f"rank {i} {x / MIB:8.1f}" for i, x in enumerate(v))


def part_data(n):
    rows = int(a.gib * 2 ** 30 / (256 * 4))
    x = np.random.default_rng(0).standard_normal((rows, 256), dtype=np.float32)
    y = (np.arange(rows) % 10).astype(np.int32)
    j = Job(n, ["--shard-data", "on", "--deterministic-reduce", "4",
                "--upload-pool-bytes", "0", "--upload-arena-bytes", "0"])
    try:
        before = j.rss()
        ds = j.c.upload(x, y, storage="memory")
        m = rtrain.Sequential([layers.Dense(10, activation="softmax", input_shape=(256,))])
        m.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", client=j.c)
        m.fit(ds, epochs=1, steps_per_epoch=2, batch_size=64, verbose=0,
              steps_per_execution=2)
        after = j.rss()
        d = [b - c for b, c in zip(after, before)]
        print(f"data {a.gib:g} GiB N={n}: MiB after - before upload: {fmt(d)}", flush=True)
        print(f"data {a.gib:g} GiB N={n}: VmRSS MiB after: {fmt(after)}", flush=True)
        print(f"data {a.gib:g} GiB N={n}: VmHWM MiB (peak): {fmt(j.rss('VmHWM'))}", flush=True)
    finally:
        j.stop()


T_ADAM = 2048 * 2048 + 2048 + 2048 * 2048 + 2048 + 2048 * 10 + 10


def block_rss(pid, nbytes):
    """Rss of the anonymous mapping of nbytes (+ up to 4 MiB of rounding);
    None when the kernel merged it with a neighbour (then not told apart)"""
    size, best = None, None
    for ln in open(f"/proc/{pid}/smaps"):
        if ln.startswith("Size:"):
            size = int(ln.split()[1]) * 1024
        elif ln.startswith("Rss:") and size is not None:
            if nbytes <= size <= nbytes + (4 << 20):
                best = int(ln.split()[1]) * 1024
            size = None
    return best


def part_adam(n, mode):
    x = np.random.default_rng(1).standard_normal((256, 2048), dtype=np.float32)
    y = (np.arange(256) % 10).astype(np.int32)
    # (the upload arena stays: without it the kernel merged the block's
    # mapping with its neighbours and it could not be told apart)
    j = Job(n, ["--shard-optimizer", mode])
    try:
        ds = j.c.upload(x, y, storage="memory")
        m = rtrain.Sequential([layers.Dense(2048, activation="relu", input_shape=(2048,)),
                               layers.Dense(2048, activation="relu"),
                               layers.Dense(10, activation="softmax")])
        m.compile(optimizer="adam", loss="sparse_categorical_crossentropy", client=j.c)
        m.fit(ds, epochs=1, steps_per_epoch=3, batch_size=32, verbose=0,
              steps_per_execution=3)
        tot = j.rss()
        blk = [block_rss(j.ranks[r], 16 * T_ADAM) for r in range(n)]
    finally:
        j.stop()
    print(f"adam N={n} shard {mode}: VmRSS MiB: {fmt(tot)}", flush=True)
    if None in blk:
        print(f"adam N={n} shard {mode}: parameter block not found in smaps", flush=True)
        return
    print(f"adam N={n} shard {mode}: Adam's state resident (block Rss - weights - gradient), "
          f"MiB: {fmt([b - 8 * T_ADAM for b in blk])}", flush=True)


for n in [int(v) for v in a.ns.split(",")]:
    if "data" in a.part:
        part_data(n)
    if "adam" in a.part:
        part_adam(n, "on")
        if n > 1:
            part_adam(n, "off")
