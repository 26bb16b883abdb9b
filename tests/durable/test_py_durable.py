"""Durable training from Python: save_checkpoint/load_checkpoint move a
fit to another daemon bit-identically, and a fit with steps_per_execution
reattaches when its daemon is killed and restarted with --state-dir."""
import os
import re
import signal
import subprocess
import threading
import time

import numpy as np
import pytest

import rtrain

IRIS_CSV = "/usr/lib/python3/dist-packages/sklearn/datasets/data/iris.csv"


def iris():
    data = np.loadtxt(IRIS_CSV, delimiter=",", skiprows=1)
    return data[:, :4].astype(np.float32), data[:, 4].astype(np.int64)


def start(*args, listen="127.0.0.1:0"):
    """rtraind on listen; a fixed port that is briefly held (a connection's
    local port) is tried again."""
    for _ in range(50):
        proc = subprocess.Popen([os.environ["RTRAIND"], "--listen", listen, "--log-level",
                                 "warn", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, bufsize=1)
        seen = []
        for line in proc.stdout:
            seen.append(line)
            m = re.search(r"rtraind listening on (127\.0\.0\.1:\d+)", line)
            if m:
                threading.Thread(target=lambda: proc.stdout.read(), daemon=True).start()
                return proc, m.group(1)
        proc.wait()
        if "already in use" not in "".join(seen):
            break
        time.sleep(0.05)
    pytest.fail("rtraind did not start:\n" + "".join(seen[-5:]))


def low_port():
    """A port below the kernel's ephemeral range (32768-60999), so no
    connection's local port takes it while a killed daemon restarts."""
    import random
    return "127.0.0.1:%d" % random.randrange(20000, 32000)


def stop(proc, sig=signal.SIGTERM):
    if proc.poll() is None:
        proc.send_signal(sig)
        proc.wait(timeout=30)


def model(client):
    spec = rtrain.Sequential([
        rtrain.layers.Dense(16, activation="relu", input_shape=(4,)),
        rtrain.layers.Dense(3, activation="softmax"),
    ])
    return client.compile(spec, optimizer=rtrain.optimizers.Adam(0.02),
                          loss="sparse_categorical_crossentropy", metrics=["accuracy"],
                          seed=3)


def fit(m, epochs, **kw):
    x, y = iris()
    return m.fit(x, y, batch_size=16, epochs=epochs, verbose=0, **kw).history


def test_checkpoint_moves_to_an_empty_daemon(tmp_path):
    a, addr_a = start()
    b, addr_b = start("--state-dir", str(tmp_path / "state"))
    try:
        with rtrain.connect(addr_a) as ca:
            ref = model(ca)
            h_ref = fit(ref, 6)
            w_ref = ref.get_weights()
            m = model(ca)
            fit(m, 3)
            n = m.save_checkpoint(str(tmp_path / "s.rtck"))
            assert n > 0
        with rtrain.connect(addr_b) as cb:
            m2 = model(cb)
            assert m2.load_checkpoint(str(tmp_path / "s.rtck")) == 3 * 10
            h2 = fit(m2, 3)
            for w, r in zip(m2.get_weights(), w_ref):
                assert np.array_equal(w, r)
            assert h2["loss"] == h_ref["loss"][3:]
            with pytest.raises(rtrain.Error):
                m2.load_checkpoint(__file__)  # not a checkpoint: refused by the daemon
    finally:
        stop(a)
        stop(b)


def test_fit_reattaches_after_kill(tmp_path, capfd):
    ref_d, addr = start()
    try:
        with rtrain.connect(addr) as c:
            ref = model(c)
            h_ref = fit(ref, 120, steps_per_execution=2)
            w_ref = ref.get_weights()
    finally:
        stop(ref_d)
    state = str(tmp_path / "state")
    d, addr = start("--state-dir", state, "--checkpoint-every-steps", "4", listen=low_port())
    procs = [d]
    done = threading.Event()

    # The daemon is killed at fixed epochs from the client's own callback
    # (a timer could miss a fit that ends before it fires).
    class KillAt(rtrain.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch in (10, 40, 80):
                stop(procs[-1], signal.SIGKILL)
                procs.append(start("--state-dir", state, "--checkpoint-every-steps", "4",
                                   listen=addr)[0])

    try:
        with rtrain.connect(addr, reattach=60) as c:
            m = model(c)
            h = fit(m, 120, steps_per_execution=2, callbacks=[KillAt()])
            done.set()
            w = m.get_weights()
        err = capfd.readouterr().err
        assert re.search(r"daemon restarted; resuming at epoch \d+ step \d+", err)
        assert len(procs) == 4
        for a, r in zip(w, w_ref):
            assert np.array_equal(a, r)
        assert h["loss"] == h_ref["loss"] and len(h["loss"]) == 120
    finally:
        done.set()
        for p in procs:
            stop(p, signal.SIGKILL)
