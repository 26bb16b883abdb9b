"""Fixtures for the rtrain Python client tests: a real rtraind on an
ephemeral loopback port, and the iris data set.

Environment (set by the ctest command in CMakeLists.txt):
  RTRAIND     path of the rtraind binary in the build tree
  PYTHONPATH  <build>/python, where the rtrain package is built
"""
import os
import re
import socket
import subprocess
import threading

import numpy as np
import pytest

IRIS_CSV = "/usr/lib/python3/dist-packages/sklearn/datasets/data/iris.csv"


def _start_daemon(*extra):
    exe = os.environ.get("RTRAIND")
    if not exe or not os.access(exe, os.X_OK):
        pytest.fail("RTRAIND must name the rtraind binary (got %r)" % exe)
    proc = subprocess.Popen([exe, "--listen", "127.0.0.1:0", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, bufsize=1)
    lines = []
    addr = None
    for line in proc.stdout:
        lines.append(line)
        m = re.search(r"rtraind listening on (127\.0\.0\.1:\d+)", line)
        if m:
            addr = m.group(1)
            break
    if addr is None:
        proc.kill()
        proc.wait()
        pytest.fail("rtraind did not start:\n" + "".join(lines))
    # Keep draining its output so a chatty daemon never blocks on a pipe.
    log = []
    t = threading.Thread(target=lambda: log.extend(proc.stdout), daemon=True)
    t.start()
    return proc, addr, log, t


class Daemon:
    """A real rtraind; extra: more flags."""
    def __init__(self, *extra):
        self.proc, self.addr, self.log, self._drain = _start_daemon(*extra)

    def alive(self):
        return self.proc.poll() is None

    def paused(self):
        """It stopped itself (--pause-at-step): state T."""
        try:
            with open("/proc/%d/stat" % self.proc.pid) as f:
                return f.read().rsplit(")", 1)[1].split()[0] == "T"
        except OSError:
            return False

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._drain.join(timeout=5)
        self.proc.stdout.close()


@pytest.fixture(scope="session")
def daemon():
    d = Daemon()
    yield d
    d.stop()


@pytest.fixture
def client(daemon):
    import rtrain
    c = rtrain.connect(daemon.addr, timeout=30)
    yield c
    c.close()


def load_iris():
    """(x float32 (150, 4), y int64 (150,)) from sklearn's copy."""
    data = np.loadtxt(IRIS_CSV, delimiter=",", skiprows=1)
    return data[:, :4].astype(np.float32), data[:, 4].astype(np.int64)


def stratified_split(x, y, test_fraction=0.3, seed=0):
    rng = np.random.RandomState(seed)
    tr, te = [], []
    for k in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == k))
        cut = int(round(len(idx) * test_fraction))
        te.extend(idx[:cut])
        tr.extend(idx[cut:])
    tr, te = rng.permutation(tr), rng.permutation(te)
    return x[tr], y[tr], x[te], y[te]


@pytest.fixture(scope="session")
def iris():
    x, y = load_iris()
    return stratified_split(x, y)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port
