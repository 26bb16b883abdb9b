"""Durable training from Python: save_checkpoint/load_checkpoint move a
fit to another daemon bit-identically (a stateful LSTM's carried states
with it); a fit with steps_per_execution and
one with callbacks (a Fit stream per epoch) reattach when their daemon is
killed and restarted with --state-dir; fit(checkpoint_every_steps=N) sets
the fit's checkpoint interval."""
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


def test_fit_stream_with_callbacks_reattaches(tmp_path, capfd):
    """model.fit with callbacks runs a Fit stream per epoch; the daemon is
    killed inside epochs (at steps it chose: --pause-at-step) and
    between them. Each stream is sent again with its fit id and continues
    from the restored state (checkpoints every 3 steps of this fit): the
    weights and the History equal an uninterrupted run's, each epoch once."""
    class Batches(rtrain.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.seen = []
            self.epoch = None

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_batch_end(self, batch, logs=None):
            self.seen.append((self.epoch, batch))

    ref_d, addr = start()
    try:
        with rtrain.connect(addr) as c:
            ref = model(c)
            h_ref = fit(ref, 24, callbacks=[Batches()])
            w_ref = ref.get_weights()
    finally:
        stop(ref_d)
    state = str(tmp_path / "state")
    flags = ("--state-dir", state, "--checkpoint-every-s", "0")
    # Kills inside epochs land at steps the test chose: each daemon runs
    # with --pause-at-step at the next such point and stops itself there
    # (SIGSTOP), inside the running stream, where a watcher SIGKILLs it
    # and starts the next. 10 steps an epoch: epoch 2 (0-based) batch 4 is
    # global step 25, then epoch 7 batch 1, epoch 12 batch 6, epoch 19
    # batch 7. (A kill from the client's progress callback would race the
    # daemon, which may have ended the epoch's stream by then.)
    pauses = [2 * 10 + 5, 7 * 10 + 2, 12 * 10 + 7, 19 * 10 + 8]
    lock = threading.Lock()
    procs = []

    def launch(listen):
        extra = ("--pause-at-step", str(pauses[0])) if pauses else ()
        p, a = start(*flags, *extra, listen=listen)
        procs.append(p)
        return a

    def restart():
        stop(procs[-1], signal.SIGKILL)
        launch(addr)

    def paused(p):
        try:
            with open("/proc/%d/stat" % p.pid) as f:
                return f.read().rsplit(")", 1)[1].split()[0] == "T"
        except OSError:
            return False

    finished = threading.Event()

    def watcher():
        while not finished.is_set():
            with lock:
                if pauses and paused(procs[-1]):
                    pauses.pop(0)
                    restart()
            time.sleep(0.005)

    addr = launch(low_port())

    class KillAt(Batches):
        """SIGKILL and restart after these epochs (inside epochs: the
        watcher)."""
        def on_epoch_end(self, epoch, logs=None):
            if epoch in (5, 15):
                with lock:
                    restart()

    w_thread = threading.Thread(target=watcher, daemon=True)
    w_thread.start()
    try:
        with rtrain.connect(addr, reattach=60) as c:
            m = model(c)
            cb = KillAt()
            h = fit(m, 24, callbacks=[cb], checkpoint_every_steps=3)
            w = m.get_weights()
        finished.set()
        w_thread.join()
        assert not pauses, "pause points never reached: %s" % pauses
        err = capfd.readouterr().err
        resumed = re.findall(r"daemon restarted; resuming at epoch (\d+) step (\d+)", err)
        assert len(procs) == 7
        # A kill inside an epoch breaks the running stream: the client
        # reattaches and says so (epochs 3, 8, 13, 20, 1-based). A kill
        # between epochs is said only when the next epoch's stream meets the
        # dead connection; a channel that has already reconnected to the new
        # daemon sends it there directly, from the epoch-end checkpoint.
        got = [int(e) for e, _ in resumed]
        assert {3, 8, 13, 20} <= set(got) and len(got) <= 6, err[-2000:]
        for a, r in zip(w, w_ref):
            assert np.array_equal(a, r)
        assert h["loss"] == h_ref["loss"] and len(h["loss"]) == 24
        assert h["accuracy"] == h_ref["accuracy"]
        # no batch reported twice: the resumed streams skip the steps seen
        assert cb.seen == sorted(set(cb.seen)) and len(cb.seen) >= 24
    finally:
        finished.set()
        for p in procs:
            stop(p, signal.SIGKILL)


def test_fit_checkpoint_interval(tmp_path):
    """fit(checkpoint_every_steps=N) sets this fit's interval: 10 steps an
    epoch, N = 4 adds checkpoints at its 4th and 8th step to each epoch's
    end (the daemon's own interval is off), counted by the daemon's
    rtrain_checkpoints_total."""
    import urllib.request
    proc = subprocess.Popen([os.environ["RTRAIND"], "--listen", "127.0.0.1:0", "--log-level",
                             "warn", "--state-dir", str(tmp_path / "st"),
                             "--checkpoint-every-s", "0", "--metrics-listen", "127.0.0.1:0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    murl = addr = None
    for line in proc.stdout:
        m = re.match(r"rtraind metrics on (http://\S+/metrics)", line)
        murl = m.group(1) if m else murl
        m = re.match(r"rtraind listening on (\S+)", line)
        if m:
            addr = m.group(1)
            break
    threading.Thread(target=lambda: proc.stdout.read(), daemon=True).start()

    def written():
        page = urllib.request.urlopen(murl).read().decode()
        return int(re.search(r'^rtrain_checkpoints_total\{result="ok"\} (\d+)$', page,
                             re.M).group(1))

    try:
        with rtrain.connect(addr) as c:
            m = model(c)
            x, y = iris()
            m.fit(x, y, batch_size=16, epochs=1, verbose=0)  # compiles: Compile's checkpoint
            n0 = written()
            fit(m, 3, checkpoint_every_steps=4)
            assert written() - n0 == 3 * 3
            fit(m, 3)  # the daemon's: epoch ends only
            assert written() - n0 == 3 * 3 + 3
            with pytest.raises(ValueError):
                fit(m, 1, checkpoint_every_steps=0)
    finally:
        stop(proc)


def test_streamed_arrays_survive_a_restart(tmp_path):
    """A streamed array upload is kept in the state directory with its
    storage and shuffle buffer: after a restart the same upload finds it
    (same id, nothing sent) and it is streamed again."""
    x, y = iris()
    x = np.ascontiguousarray(x)
    y = y.astype(np.int32)
    state = tmp_path / "st"
    proc, addr = start("--state-dir", str(state), "--spool-dir", str(tmp_path))
    try:
        c = rtrain.connect(addr)
        ds = c.upload(x, y, storage="stream", shuffle_buffer=5)
        mem = c.upload(x, y, storage="memory")
        assert ds.streamed and not mem.streamed and ds.id != mem.id
        c.close()
    finally:
        stop(proc)
    proc, addr = start("--state-dir", str(state), "--spool-dir", str(tmp_path))
    try:
        c = rtrain.connect(addr)
        again = c.upload(x, y, storage="stream", shuffle_buffer=5)
        assert again.id == ds.id and again.info["deduplicated"] and again.streamed
        assert again.info["bytes_sent"] == 0
        m = model(c)
        h = m.fit(again, batch_size=16, epochs=30, verbose=0).history
        assert h["accuracy"][-1] > 0.9
        c.close()
    finally:
        stop(proc)


def test_checkpoint_keeps_stateful_rnn_states(tmp_path):
    """A stateful LSTM's carried states are part of the checkpoint: the fit
    moved to another daemon after one epoch goes on from them, ending on
    the weights of the fit that never moved (from zero states it would
    not)."""
    rng = np.random.RandomState(5)
    x = rng.randn(24, 5, 3).astype(np.float32)
    y = rng.randn(24, 1).astype(np.float32)

    def stateful(client):
        spec = rtrain.Sequential([
            rtrain.layers.LSTM(6, stateful=True, batch_input_shape=(4, 5, 3)),
            rtrain.layers.Dense(1)])
        m = client.compile(spec, optimizer=rtrain.optimizers.SGD(0.1), loss="mse", seed=3,
                           shuffle=False)
        assert m.batch_size == 4
        return m

    def fit1(m):
        m.fit(x, y, epochs=1, shuffle=False, verbose=0)

    a, addr_a = start()
    b, addr_b = start("--state-dir", str(tmp_path / "state"))
    try:
        with rtrain.connect(addr_a) as ca:
            ref = stateful(ca)
            fit1(ref)
            fit1(ref)
            w_ref = ref.get_weights()
            m = stateful(ca)
            fit1(m)
            m.save_checkpoint(str(tmp_path / "s.rtck"))
            m.reset_states()
            fit1(m)  # from zero states: not the reference
            assert not all(np.array_equal(w, r) for w, r in zip(m.get_weights(), w_ref))
        with rtrain.connect(addr_b) as cb:
            m2 = stateful(cb)
            m2.load_checkpoint(str(tmp_path / "s.rtck"))
            fit1(m2)
            for w, r in zip(m2.get_weights(), w_ref):
                assert np.array_equal(w, r)
    finally:
        stop(a)
        stop(b)
