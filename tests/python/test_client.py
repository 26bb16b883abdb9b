"""The rtrain notebook client against a real rtraind (see conftest.py)."""
import _thread
import builtins
import io
import os
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import rtrain
from conftest import free_port, load_iris

KEYS = ["loss", "accuracy", "val_loss", "val_accuracy"]


def iris_model(client, lr=0.05, seed=1, **kw):
    spec = rtrain.Sequential([
        rtrain.layers.Dense(32, activation="relu", input_shape=(4,)),
        rtrain.layers.Dense(3, activation="softmax"),
    ])
    return client.compile(spec, optimizer=rtrain.optimizers.Adam(lr),
                          loss="sparse_categorical_crossentropy",
                          metrics=["accuracy"], seed=seed, **kw)


def np_forward(weights, x):
    """Reference forward pass of iris_model in NumPy (float64)."""
    w1, b1, w2, b2 = [np.asarray(w, np.float64) for w in weights]
    h = np.maximum(x.astype(np.float64) @ w1 + b1, 0.0)
    z = h @ w2 + b2
    z -= z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


# ------------------------------------------------------------ connection

def test_daemon_not_running():
    port = free_port()  # nothing listens there
    with pytest.raises(rtrain.ConnectionError) as ei:
        rtrain.connect("127.0.0.1:%d" % port, timeout=5)
    e = ei.value
    assert isinstance(e, rtrain.Error)
    assert isinstance(e, builtins.ConnectionError)
    assert str(port) in str(e)
    assert e.grpc_status == 14


def test_bad_timeout():
    with pytest.raises(ValueError):
        rtrain.connect("127.0.0.1:1", timeout=-1)


def test_info_and_ping(client):
    info = client.info()
    assert info["version"]
    assert "Dense" in info["ops"]
    assert "sparse_categorical_crossentropy" in info["losses"]
    assert info["device"]["kind"]
    rtt = client.ping()
    assert 0 < rtt < 10
    t = client.last_timings
    assert t["method"] == "Ping"
    assert t["round_trip_ns"] > 0
    assert t["has_server"]
    # The account closes: round trip = server total + wire when the server
    # reported less than the round trip.
    if t["round_trip_ns"] >= t["server_total_ns"]:
        assert t["wire_ns"] == t["round_trip_ns"] - t["server_total_ns"]
    assert client.ping(payload_bytes=100000) > 0
    assert client.last_timings["bytes_received"] >= 100000


def test_close_is_idempotent(daemon):
    c = rtrain.connect(daemon.addr, timeout=5)
    assert c.session_id
    c.close()
    c.close()
    assert c.closed
    with pytest.raises(rtrain.Error, match="closed"):
        c.ping()


# ------------------------------------------------------------ training

def test_fit_evaluate_predict_iris(client, iris):
    xtr, ytr, xte, yte = iris
    model = iris_model(client, batch_size=16)
    hist = model.fit(xtr, ytr, batch_size=16, epochs=40, verbose=0,
                     validation_data=(xte, yte))
    assert sorted(hist.keys()) == sorted(KEYS)
    assert hist.history is hist
    for k in KEYS:
        assert len(hist[k]) == 40
        assert all(np.isfinite(hist[k]))
    assert hist["loss"][-1] < hist["loss"][0]
    assert hist.status == "done"
    # the default: pipelined RunSteps calls, K chosen as they run
    assert hist.params["steps_per_execution"] == "auto"
    methods = [t["method"] for t in hist.timings]
    assert methods[-1] == "RunSteps" and "Fit" not in methods

    loss, acc = model.evaluate(xte, yte)
    assert acc > 0.8
    # The history's last validation entry is the same evaluation.
    assert loss == pytest.approx(hist["val_loss"][-1], rel=1e-4, abs=1e-6)
    assert acc == pytest.approx(hist["val_accuracy"][-1], abs=1e-6)

    p = model.predict(xte)
    assert p.shape == (len(xte), 3) and p.dtype == np.float32
    assert model.last_timings["method"] == "Predict"
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=1e-5)
    # evaluate() agrees with a NumPy computation from predict()'s outputs...
    ref_loss = -np.mean(np.log(p[np.arange(len(yte)), yte].astype(np.float64)))
    assert loss == pytest.approx(ref_loss, rel=1e-4)
    assert acc == pytest.approx(np.mean(p.argmax(axis=1) == yte), abs=1e-9)
    # ...and predict() with a NumPy forward pass from get_weights().
    np.testing.assert_allclose(p, np_forward(model.get_weights(), xte),
                               rtol=1e-4, atol=1e-6)
    rd = model.evaluate(xte, yte, return_dict=True)
    assert set(rd) == {"loss", "accuracy"}


def test_logcosh_integer_labels_wa(client):
    """W-A: logcosh on integer labels (Keras broadcasts (B,) against (B,3))."""
    x, y = load_iris()
    model = client.compile(
        rtrain.Sequential([
            rtrain.layers.Dense(32, activation="relu", input_shape=(4,)),
            rtrain.layers.Dense(3, activation="softmax")]),
        optimizer=rtrain.optimizers.Adam(0.1, epsilon=1e-7), loss="logcosh",
        metrics=["accuracy"], batch_size=20, label_shape=())
    hist = model.fit(x[:105], y[:105], batch_size=20, epochs=3, verbose=0,
                     validation_data=(x[105:], y[105:]))
    assert sorted(hist) == sorted(KEYS)
    loss = model.evaluate(x[105:], y[105:])[0]
    p = model.predict(x[105:]).astype(np.float64)
    d = p - y[105:, None].astype(np.float64)
    ref = np.mean(np.mean(d + np.logaddexp(0.0, -2.0 * d) - np.log(2.0),
                          axis=1))
    assert loss == pytest.approx(ref, rel=1e-4, abs=1e-6)


@pytest.mark.parametrize("spx", [1, 4, "epoch", "auto", "default"])
def test_steps_per_execution_matches_one_call(client, iris, spx):
    """K steps per call (several calls in flight; or K chosen by "auto",
    the default) gives the weights of one streamed call."""
    xtr, ytr, xte, yte = iris
    steps = -(-len(xtr) // 20)
    a = iris_model(client, seed=7, batch_size=20)
    b = iris_model(client, seed=7, batch_size=20)
    np.testing.assert_array_equal(a.get_weights()[0], b.get_weights()[0])
    ha = a.fit(xtr, ytr, batch_size=20, epochs=3, verbose=0,
               validation_data=(xte, yte), steps_per_execution=None)
    assert [t["method"] for t in ha.timings][-1] == "Fit"
    kw = {} if spx == "default" else {
        "steps_per_execution": steps if spx == "epoch" else spx}
    hb = b.fit(xtr, ytr, batch_size=20, epochs=3, verbose=0,
               validation_data=(xte, yte), **kw)
    assert sorted(hb) == sorted(ha) == sorted(KEYS)
    for wa, wb in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_allclose(wa, wb, rtol=1e-6, atol=1e-7)
    for k in KEYS:
        np.testing.assert_allclose(ha[k], hb[k], rtol=1e-5, atol=1e-6)
    calls = [t["method"] for t in hb.timings]
    if spx in ("auto", "default"):  # K is the machine's: 1..steps per call
        assert 3 <= calls.count("RunSteps") <= 3 * steps
    else:
        k = steps if spx == "epoch" else spx
        assert calls.count("RunSteps") == 3 * -(-steps // k)
    # validation rides in each epoch's last RunSteps (val_at_end)
    assert calls.count("Evaluate") == 0
    assert a.global_step == b.global_step == 3 * steps


def test_default_mode_with_callbacks(client, iris):
    """The default runs pipelined RunSteps with auto K, also with epoch
    callbacks (one run per epoch); a callback with a per-batch hook is
    called per batch, so the default then runs the Fit stream, whose events come per
    step (coalesced when the client falls behind) and whose rate changes
    and stops apply at the daemon's next step (the Control call); both
    train the same weights."""
    xtr, ytr, xte, yte = iris
    steps = -(-len(xtr) // 20)
    ends, batches = [], []

    class EpochEnds(rtrain.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            ends.append((epoch, sorted(logs)))

    a = iris_model(client, seed=5, batch_size=20)
    ha = a.fit(xtr, ytr, batch_size=20, epochs=3, verbose=0,
               validation_data=(xte, yte), callbacks=[EpochEnds()])
    assert ha.params["steps_per_execution"] == "auto"
    ma = [t["method"] for t in ha.timings]
    assert "RunSteps" in ma and "Fit" not in ma
    assert [e for e, _ in ends] == [0, 1, 2]
    assert all(k == sorted(KEYS) for _, k in ends)

    b = iris_model(client, seed=5, batch_size=20)
    cb = rtrain.callbacks.LambdaCallback(
        on_batch_end=lambda batch, logs: batches.append((batch, logs["loss"])))
    hb = b.fit(xtr, ytr, batch_size=20, epochs=3, verbose=0,
               validation_data=(xte, yte), callbacks=[cb])
    assert hb.params["steps_per_execution"] is None
    mb = [t["method"] for t in hb.timings]
    assert "Fit" in mb and "RunSteps" not in mb
    # per-step events (indices within an epoch, rising), not one per epoch
    assert len(batches) > 3
    assert all(0 <= i < steps and np.isfinite(loss) for i, loss in batches)
    restarts = sum(1 for p, q in zip(batches, batches[1:]) if q[0] <= p[0])
    assert restarts <= 2  # three epochs, each in order
    for wa, wb in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_allclose(wa, wb, rtol=1e-6, atol=1e-7)
    assert not rtrain.callbacks.CallbackList([EpochEnds()], None, {}).batch_hooks()
    assert rtrain.callbacks.CallbackList([rtrain.callbacks.TerminateOnNaN()], None,
                                         {}).batch_hooks()


def test_event_hook_epochs(client, iris, monkeypatch):
    """The per-event hook (Program.fit's on_event) numbers epochs 0-based
    over the whole fit, as History and on_epoch_end do, on every fit of a
    model and with initial_epoch: not from the program's first fit (which
    is how a Fit stream's own events count). Both drivers: the Fit stream
    (a per-batch callback) and RunSteps calls (steps_per_execution)."""
    xtr, ytr, _, _ = iris
    hooked = []  # (kind, epoch) of each event the hook saw, per fit

    class Recorder:
        """The program, with fit's on_event wrapped to see every event."""

        def __init__(self, prog):
            self._prog = prog

        def __getattr__(self, name):
            return getattr(self._prog, name)

        def fit(self, *a, on_event=None, **kw):
            def hook(kind, info):
                hooked.append((kind, info["epoch"]))
                return on_event(kind, info)
            return self._prog.fit(*a, on_event=hook if on_event else None, **kw)

    real = rtrain.CompiledModel._prog
    monkeypatch.setattr(rtrain.CompiledModel, "_prog",
                        property(lambda m: Recorder(real.fget(m)), real.fset))

    class Epochs(rtrain.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            hooked.append(("begin", epoch))

        def on_epoch_end(self, epoch, logs=None):
            ends.append(epoch)

    def per_epoch(events):
        """{epoch: [kinds]} of the hook's events, each under the epoch
        on_epoch_begin announced last."""
        out, cur = {}, None
        for kind, ep in events:
            if kind == "begin":
                cur = ep
                out[cur] = []
            else:
                assert ep == cur, (kind, ep, cur, events)
                out[cur].append(kind)
        return out

    spe = -(-len(xtr) // 20)
    for spx in (None, 2):
        model = iris_model(client, seed=3, batch_size=20)
        batch_cb = rtrain.callbacks.LambdaCallback(on_batch_end=lambda b, l: None)
        cbs = [Epochs()] + ([batch_cb] if spx is None else [])
        for initial, epochs in ((0, 3), (0, 2), (2, 4)):
            hooked.clear()
            ends = []
            h = model.fit(xtr, ytr, batch_size=20, epochs=epochs, verbose=0,
                          initial_epoch=initial, steps_per_execution=spx,
                          callbacks=cbs)
            methods = {t["method"] for t in h.timings}
            assert ("Fit" in methods) == (spx is None), methods
            assert h.epoch == ends == list(range(initial, epochs))
            got = per_epoch(hooked)
            assert sorted(got) == ends
            for ep, kinds in got.items():
                # each epoch's batch events, then its one epoch end
                assert kinds[-1] == "epoch" and kinds.count("epoch") == 1, (ep, kinds)
                assert 1 <= kinds.count("batch") <= spe, (ep, kinds)

    # The Program's own fit, one call of several epochs, twice: the second
    # call's events number from first_epoch again, not from the program's
    # epochs so far.
    monkeypatch.undo()
    model = iris_model(client, seed=3, batch_size=20)
    model.fit(xtr, ytr, batch_size=20, epochs=1, verbose=0)
    ds = client.upload(xtr, ytr)
    prog = model._prog
    for first, spx in ((0, 0), (0, 0), (4, 0), (0, 3), (4, 3)):
        seen, hist = [], {}
        st = prog.fit(ds.id, None, 2, spe, spx, 0, hist, [], "accuracy", 1,
                      on_event=lambda kind, info: seen.append((kind, info["epoch"])),
                      first_epoch=first, total_epochs=first + 2)
        assert st == "done" and len(hist["loss"]) == 2
        ends = [ep for kind, ep in seen if kind == "epoch"]
        assert ends == [first, first + 1], (first, spx, seen)
        # a batch belongs to the epoch whose end comes next
        for i, (kind, ep) in enumerate(seen):
            if kind == "batch":
                nxt = next(e for k, e in seen[i:] if k == "epoch")
                assert ep == nxt, (first, spx, seen)


def test_progress_bar(client, iris, capsys, monkeypatch):
    xtr, ytr, xte, yte = iris
    model = iris_model(client, batch_size=20)
    # verbose=1 into a pipe: lines, no '\r' redraws; the default
    # (steps_per_execution "auto") says which K it chose.
    model.fit(xtr, ytr, batch_size=20, epochs=2, verbose=1,
              validation_data=(xte, yte))
    out = capsys.readouterr().out
    assert re.search(r"^steps per call: auto K = [1-6] \(fixed cost ", out, re.M)
    out = epoch_lines(out)
    assert "\r" not in out and out.count("\n") == 2
    assert out.startswith("Epoch 1/2 - ")
    # verbose=1 on a terminal (or in a notebook): the bar.
    monkeypatch.setattr(rtrain, "_interactive", lambda: True)
    model.fit(xtr, ytr, batch_size=20, epochs=2, verbose=1,
              validation_data=(xte, yte))
    monkeypatch.undo()
    out = capsys.readouterr().out
    assert "Epoch 1/2" in out and "Epoch 2/2" in out
    steps = -(-len(xtr) // 20)
    assert "%d/%d [==============================]" % (steps, steps) in out
    assert "val_accuracy:" in out and "loss:" in out
    model.fit(xtr, ytr, batch_size=20, epochs=1, verbose=2,
              steps_per_execution=2)
    out = capsys.readouterr().out
    assert "Epoch 1/1" in out and ("ms/step" in out or "us/step" in out)
    assert "\r" not in out  # verbose=2: one line per epoch
    model.fit(xtr, ytr, batch_size=20, epochs=2, verbose=2,
              steps_per_execution="auto")
    out = capsys.readouterr().out
    assert re.search(r"^steps per call: auto K = [1-6] \(fixed cost ", out, re.M)
    assert "Epoch 2/2 - %d/%d - " % (steps, steps) in out
    with pytest.raises(ValueError):
        model.fit(xtr, ytr, epochs=1, verbose=0, steps_per_execution="fast")
    model.fit(xtr, ytr, epochs=1, verbose=0)
    assert capsys.readouterr().out == ""
    # "auto" with an output that is no terminal (and no notebook): lines
    model.fit(xtr, ytr, batch_size=20, epochs=2)
    out = epoch_lines(capsys.readouterr().out)
    assert "\r" not in out and out.count("\n") == 2
    assert out.startswith("Epoch 1/2 - %d/%d - " % (steps, steps))
    # one Fit stream (None): no K to say
    model.fit(xtr, ytr, batch_size=20, epochs=2, verbose=2,
              steps_per_execution=None)
    out = capsys.readouterr().out
    assert "steps per call" not in out and out.count("\n") == 2


def epoch_lines(out):
    """out without the lines that say which K auto chose."""
    return "".join(ln for ln in out.splitlines(True)
                   if not ln.startswith("steps per call: "))


def test_recompile_keeps_weights(client, iris):
    xtr, ytr, _, _ = iris
    model = iris_model(client, batch_size=32)
    model.fit(xtr, ytr, epochs=2, verbose=0)
    before = model.get_weights()
    pid = model.program_id
    model.fit(xtr, ytr, batch_size=10, epochs=0, verbose=0)
    assert model.program_id != pid and model.batch_size == 10
    for w0, w1 in zip(before, model.get_weights()):
        np.testing.assert_array_equal(w0, w1)


# ------------------------------------------------------------ weights

def test_weights_round_trip(client, iris):
    xtr, ytr, xte, _ = iris
    model = iris_model(client)
    w = model.get_weights()
    assert [a.shape for a in w] == [(4, 32), (32,), (32, 3), (3,)]
    assert all(a.dtype == np.float32 for a in w)
    assert model.weight_names == [n for n in model.get_named_weights()]
    rng = np.random.RandomState(3)
    new = [rng.standard_normal(a.shape).astype(np.float32) * 0.3 for a in w]
    model.set_weights(new)
    for a, b in zip(new, model.get_weights()):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(model.predict(xte), np_forward(new, xte),
                               rtol=1e-4, atol=1e-6)
    # float64 and non-contiguous weights are converted.
    model.set_weights([np.asfortranarray(a.astype(np.float64)) for a in new])
    for a, b in zip(new, model.get_weights()):
        np.testing.assert_array_equal(a, b)
    # Weights move between models.
    other = iris_model(client, seed=99)
    other.set_weights(model.get_weights())
    np.testing.assert_array_equal(other.predict(xte), model.predict(xte))


def test_set_weights_errors(client):
    model = iris_model(client)
    w = model.get_weights()
    with pytest.raises(ValueError, match="4 arrays"):
        model.set_weights(w[:3])
    with pytest.raises(ValueError, match="shape"):
        model.set_weights([w[0].T] + w[1:])
    with pytest.raises(TypeError):
        model.set_weights([w[0].astype(str)] + w[1:])


# ------------------------------------------------------------ data errors

def test_dtype_and_shape_errors(client, iris):
    xtr, ytr, _, _ = iris
    model = iris_model(client)
    with pytest.raises(TypeError, match="real numbers"):
        model.fit(xtr.astype(str), ytr, epochs=1, verbose=0)
    with pytest.raises(TypeError, match="real numbers"):
        model.fit(xtr.astype(np.complex64), ytr, epochs=1, verbose=0)
    with pytest.raises(TypeError):
        model.fit(np.array([object()] * len(xtr)), ytr, epochs=1, verbose=0)
    with pytest.raises(ValueError, match=r"shape \(\d+, 5\).*\(n, 4\)"):
        model.fit(np.zeros((len(xtr), 5), np.float32), ytr, epochs=1,
                  verbose=0)
    with pytest.raises(ValueError, match="samples"):
        model.fit(xtr, ytr[:-1], epochs=1, verbose=0)
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        model.fit(xtr, ytr + 1, epochs=1, verbose=0)
    with pytest.raises(ValueError, match="whole numbers"):
        model.fit(xtr, ytr + 0.5, epochs=1, verbose=0)
    with pytest.raises(ValueError, match="no samples"):
        model.predict(np.zeros((0, 4), np.float32))
    with pytest.raises(ValueError, match="shape"):
        model.predict(np.zeros((3, 4, 1), np.float32))
    with pytest.raises(ValueError):
        model.fit(xtr, ytr, epochs=-1)
    with pytest.raises(ValueError):
        model.fit(xtr, ytr, batch_size=0)
    with pytest.raises(ValueError, match="loss"):
        client.compile(rtrain.Sequential([rtrain.layers.Dense(
            3, input_shape=(4,))]), loss="quantile")
    with pytest.raises(ValueError, match="input_shape"):
        rtrain.Sequential([rtrain.layers.Dense(3)]).to_json()
    with pytest.raises(ValueError, match="activation"):
        rtrain.layers.Dense(3, activation="gelu_fancy")
    # The C layer itself wants float32 C-contiguous buffers and says so.
    with pytest.raises(TypeError, match="float32"):
        client._upload(xtr.astype(np.float64))
    with pytest.raises(ValueError, match="contiguous"):
        client._upload(np.asfortranarray(xtr))
    with pytest.raises(TypeError, match="buffer"):
        client._upload([[1.0, 2.0]])


def test_conversions_give_the_same_result(client, iris):
    xtr, ytr, xte, yte = iris
    model = iris_model(client)
    ref = model.evaluate(xte, yte)
    # float64 features, int64 / float labels, Fortran order, strided views
    assert model.evaluate(xte.astype(np.float64), yte) == ref
    assert model.evaluate(xte, yte.astype(np.float32)) == ref
    assert model.evaluate(np.asfortranarray(xte), yte) == ref
    wide = np.repeat(xte, 2, axis=1)[:, ::2]
    assert not wide.flags.c_contiguous
    assert model.evaluate(wide, yte) == ref
    assert model.evaluate(xte.tolist(), yte.tolist()) == ref
    assert model.evaluate(xte, yte.reshape(-1, 1)) == ref
    np.testing.assert_array_equal(model.predict(xte.astype(np.float64)),
                                  model.predict(xte))


def test_daemon_errors_raise_with_its_message(client, iris):
    bad = ('{"class_name": "Sequential", "config": {"name": "s", "layers": '
           '[{"class_name": "FancyLayer", "config": {"name": "fancy", '
           '"batch_input_shape": [null, 4]}}]}}')
    with pytest.raises(rtrain.InvalidArgument) as ei:
        client.compile(bad, loss="mse")
    assert isinstance(ei.value, ValueError)
    assert "FancyLayer" in str(ei.value)
    model = iris_model(client)
    with pytest.raises(rtrain.NotFound) as ei:
        model._prog.evaluate("no-such-dataset")
    assert isinstance(ei.value, LookupError)
    assert ei.value.grpc_status == 5


# ------------------------------------------------------------ interrupting

class _Trigger(io.StringIO):
    """A stdout that sets an event once the progress bar reaches epoch 3."""

    def __init__(self):
        super().__init__()
        self.event = threading.Event()

    def write(self, s):
        if "Epoch 3/" in s:
            self.event.set()
        return super().write(s)


def _interrupt_case(client, iris, interrupt):
    xtr, ytr, xte, yte = iris
    model = iris_model(client, batch_size=20)
    w0 = model.get_weights()
    epochs = 200000  # far more than the test waits for
    out = _Trigger()
    t = threading.Thread(target=lambda: out.event.wait(60) and interrupt())
    t.start()
    old = sys.stdout
    sys.stdout = out
    try:
        with pytest.raises(KeyboardInterrupt):
            model.fit(xtr, ytr, batch_size=20, epochs=epochs, verbose=1,
                      validation_data=(xte, yte))
    finally:
        sys.stdout = old
        t.join()
    steps = -(-len(xtr) // 20)
    done = model.global_step
    assert 2 * steps <= done < epochs * steps
    # The model keeps what was trained, the history what completed.
    assert len(model.history["loss"]) >= 2
    assert model.history.status == "interrupted"
    assert any(not np.array_equal(a, b)
               for a, b in zip(w0, model.get_weights()))
    # The daemon stays healthy and the model trains on.
    assert client.ping() > 0
    h = model.fit(xtr, ytr, batch_size=20, epochs=1, verbose=0)
    assert model.global_step == done + steps and len(h["loss"]) == 1


def test_interrupt_main_from_thread(client, iris):
    _interrupt_case(client, iris, _thread.interrupt_main)


def test_sigint_from_thread(client, iris):
    _interrupt_case(client, iris, lambda: os.kill(os.getpid(), signal.SIGINT))


def test_sigint_during_run_steps(client, iris):
    xtr, ytr, _, _ = iris
    model = iris_model(client, batch_size=20)
    out = _Trigger()
    t = threading.Thread(target=lambda: out.event.wait(60) and
                         signal.pthread_kill(threading.main_thread().ident,
                                             signal.SIGINT))
    t.start()
    old, sys.stdout = sys.stdout, out
    try:
        with pytest.raises(KeyboardInterrupt):
            model.fit(xtr, ytr, epochs=200000, verbose=1,
                      steps_per_execution=1)
    finally:
        sys.stdout = old
        t.join()
    assert model.global_step >= 12
    assert client.ping() > 0


def test_stop_training_from_thread(client, iris):
    xtr, ytr, _, _ = iris
    model = iris_model(client, batch_size=20)
    out = _Trigger()
    t = threading.Thread(target=lambda: out.event.wait(60) and
                         setattr(model, "stop_training", True))
    t.start()
    old, sys.stdout = sys.stdout, out
    try:
        h = model.fit(xtr, ytr, batch_size=20, epochs=200000, verbose=1)
    finally:
        sys.stdout = old
        t.join()
    assert h.status == "stopped"
    assert len(h["loss"]) >= 2
    assert client.ping() > 0


def test_gil_released_during_fit():
    """With verbose=0 a streamed fit runs no Python code until it returns;
    the main thread can only see a half-filled history if the C code lets
    go of the GIL while it waits on the network. The daemon stops itself
    inside epoch 6 (--pause-at-step), so the fit is certainly waiting there
    however fast the machine; the main thread must see epochs 1-5 in the
    history meanwhile. (A held GIL would keep it from running at all: a
    watchdog process then resumes the daemon after 60 s, and the check
    fails.)"""
    from conftest import Daemon
    spe = 2048 // 16
    d = Daemon("--pause-at-step", str(5 * spe + spe // 2))
    watchdog = None
    try:
        client = rtrain.connect(d.addr, timeout=120)
        rng = np.random.RandomState(0)
        x = rng.standard_normal((2048, 64)).astype(np.float32)
        y = rng.randint(0, 4, 2048)
        model = client.compile(rtrain.Sequential([
            rtrain.layers.Dense(256, activation="relu", input_shape=(64,)),
            rtrain.layers.Dense(4, activation="softmax")]),
            optimizer="sgd", loss="sparse_categorical_crossentropy",
            batch_size=16)
        epochs = 10
        watchdog = subprocess.Popen(["sh", "-c", "sleep 60; kill -CONT %d" % d.proc.pid])
        result = {}
        t = threading.Thread(target=lambda: result.update(
            h=model.fit(x, y, batch_size=16, epochs=epochs, verbose=0)))
        t.start()
        seen = set()
        while t.is_alive():
            h = model.history
            n = len(h.get("loss", ())) if h is not None else 0
            if d.paused() and 0 < n < epochs:
                seen.add(n)
                os.kill(d.proc.pid, signal.SIGCONT)
            time.sleep(0.001)
        t.join()
        assert len(result["h"]["loss"]) == epochs
        assert seen and max(seen) <= 5, seen
        client.close()
    finally:
        if watchdog:
            watchdog.kill()
            watchdog.wait()
        if d.alive():
            os.kill(d.proc.pid, signal.SIGCONT)
        d.stop()


def test_timings_of_every_call(client, iris):
    xtr, ytr, xte, yte = iris
    model = iris_model(client, batch_size=20)
    h = model.fit(xtr, ytr, batch_size=20, epochs=2, verbose=0,
                  steps_per_execution=1)
    runs = [t for t in h.timings if t["method"] == "RunSteps"]
    assert len(runs) == 2 * -(-len(xtr) // 20)
    for t in runs:
        assert t["has_server"] and t["execute_ns"] > 0
        assert t["round_trip_ns"] > 0
        assert t["server_total_ns"] >= t["execute_ns"]
    s = rtrain.summarize_timings(h.timings)
    assert s["calls"] == len(h.timings)
    assert s["execute_ns"] == sum(t["execute_ns"] for t in h.timings)
    model.predict(xte)
    assert model.last_timings["method"] == "Predict"
    assert model.report["param_count"] == 4 * 32 + 32 + 32 * 3 + 3
    names = [n for n, _ in model.report["passes"]]
    assert names == ["validate", "infer_shapes", "fuse", "backward", "choose_kernels",
                     "plan_memory", "report"]
    assert 0 < sum(ns for _, ns in model.report["passes"]) <= model.report["compile_ns"]
    # the backend the program runs on: the daemon's (its description
    # starts with the name, "cpu+onednn-3.0")
    be = model.report["backend"]
    assert be and client.info()["device"]["backend"].startswith(be)


# ------------------------------------------------------------ model specs

KERAS3_JSON = """{"module": "keras", "class_name": "Sequential", "config": {
 "name": "sequential", "trainable": true, "dtype": "float32", "layers": [
 {"module": "keras.layers", "class_name": "InputLayer", "config": {
  "batch_shape": [null, 4], "dtype": "float32", "sparse": false,
  "name": "input_layer"}, "registered_name": null},
 {"module": "keras.layers", "class_name": "Dense", "config": {"name": "dense",
  "trainable": true, "dtype": "float32", "units": 32, "activation": "relu",
  "use_bias": true, "kernel_initializer": {"module": "keras.initializers",
  "class_name": "GlorotUniform", "config": {"seed": null},
  "registered_name": null}, "bias_initializer": {"module":
  "keras.initializers", "class_name": "Zeros", "config": {},
  "registered_name": null}, "kernel_regularizer": null,
  "bias_regularizer": null, "kernel_constraint": null,
  "bias_constraint": null}, "registered_name": null,
  "build_config": {"input_shape": [null, 4]}},
 {"module": "keras.layers", "class_name": "Dense", "config": {
  "name": "dense_1", "trainable": true, "dtype": "float32", "units": 3,
  "activation": "softmax", "use_bias": true, "kernel_initializer": {
  "module": "keras.initializers", "class_name": "GlorotUniform", "config":
  {"seed": null}, "registered_name": null}, "bias_initializer": {"module":
  "keras.initializers", "class_name": "Zeros", "config": {},
  "registered_name": null}, "kernel_regularizer": null,
  "bias_regularizer": null, "kernel_constraint": null,
  "bias_constraint": null}, "registered_name": null,
  "build_config": {"input_shape": [null, 32]}}]},
 "registered_name": null, "build_config": {"input_shape": [null, 4]},
 "compile_config": null}"""


def test_keras_json_string(client, iris):
    xtr, ytr, xte, yte = iris
    m = client.compile(KERAS3_JSON, optimizer="adam",
                       loss="sparse_categorical_crossentropy",
                       metrics=["accuracy"], seed=1)
    assert [w.shape for w in m.get_weights()] == [(4, 32), (32,), (32, 3),
                                                  (3,)]
    h = m.fit(xtr, ytr, epochs=2, verbose=0, validation_data=(xte, yte))
    assert sorted(h) == sorted(KEYS)
    # The Keras idiom's views of a model compiled from Keras 3 JSON.
    assert [l.name for l in m.layers] == ["dense", "dense_1"]
    lines = []
    m.summary(print_fn=lines.append)
    assert any(l.startswith("dense_1 (Dense)") and "(None, 3)" in l
               and l.rstrip().endswith("99") for l in lines)
    assert m.count_params() == 4 * 32 + 32 + 32 * 3 + 3
    # The Sequential builder writes Keras 2 JSON for the same model.
    seq = iris_model(client, seed=1)
    assert seq.report["param_count"] == m.report["param_count"]
    with pytest.raises(ValueError, match="JSON"):
        client.compile("{not json", loss="mse")
    with pytest.raises(TypeError):
        client.compile(42, loss="mse")


def test_cnn_sequential(client):
    rng = np.random.RandomState(0)
    x = rng.standard_normal((64, 8, 8, 1)).astype(np.float32)
    y = rng.randint(0, 10, 64)
    L = rtrain.layers
    spec = rtrain.Sequential([
        L.Conv2D(4, 3, padding="same", activation="relu",
                 input_shape=(8, 8, 1)),
        L.MaxPooling2D(2), L.Flatten(), L.Dense(10)])
    # rtraind imports Conv2D/MaxPooling2D/Flatten: a daemon that answers
    # "unknown Keras layer" here is a failure, not a reason to skip.
    m = client.compile(spec,
                       optimizer=rtrain.optimizers.SGD(0.05, momentum=0.9),
                       loss="sparse_categorical_crossentropy",
                       from_logits=True, metrics=["accuracy"],
                       batch_size=16)
    assert [w.shape for w in m.get_weights()] == [(3, 3, 1, 4), (4,),
                                                  (64, 10), (10,)]
    h = m.fit(x, y, epochs=3, verbose=0)
    assert len(h["loss"]) == 3 and h["loss"][-1] < h["loss"][0]
    assert m.predict(x[:5]).shape == (5, 10)


# ------------------------------------------------------------ threads

def test_threads_share_a_client(client):
    errors, rtts = [], []

    def worker():
        try:
            for _ in range(50):
                rtts.append(client.ping())
        except Exception as e:  # reported below
            errors.append(e)
    ts = [threading.Thread(target=worker) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors and len(rtts) == 200


class _PingingStdout(io.StringIO):
    def __init__(self, client):
        super().__init__()
        self.client = client

    def write(self, s):
        self.client.ping()  # re-enters the client from inside fit
        return super().write(s)


def test_reentrant_call_is_an_error_not_a_deadlock(client, iris):
    xtr, ytr, _, _ = iris
    model = iris_model(client, batch_size=20)
    old, sys.stdout = sys.stdout, _PingingStdout(client)
    try:
        with pytest.raises(RuntimeError, match="already in a call"):
            model.fit(xtr, ytr, epochs=5, verbose=1)
    finally:
        sys.stdout = old
    assert client.ping() > 0
    assert len(model.fit(xtr, ytr, epochs=1, verbose=0)["loss"]) == 1


def test_sigint_during_upload(client):
    """Ctrl-C during a long upload ends it with KeyboardInterrupt; the daemon
    stays healthy and the same data then uploads in full."""
    x = np.arange(1 << 26, dtype=np.float32).reshape(-1, 16)  # 256 MiB
    y = np.zeros(len(x), np.int32)
    main = threading.main_thread().ident
    t = threading.Timer(0.02, signal.pthread_kill, (main, signal.SIGINT))
    t.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            client._upload(x, y, "big")
            # a fast machine may finish first: the interrupt then lands here
            time.sleep(5)
    finally:
        t.join()
    assert client.ping() > 0
    ds = client._upload(x[:1 << 18], y[:1 << 18], "big")
    assert ds["samples"] == 1 << 18


def test_no_copy_for_float32_c_contiguous():
    from rtrain import _features
    x = np.zeros((10, 4), np.float32)
    assert _features(x, (4,)) is x          # handed to the buffer protocol
    assert _features(x.astype(np.float64), (4,)) is not x
    f = _features(np.asfortranarray(x), (4,))
    assert f.flags.c_contiguous and f.dtype == np.float32


def test_validation_split(client, iris):
    xtr, ytr, _, _ = iris
    model = iris_model(client, batch_size=20)
    h = model.fit(xtr, ytr, epochs=2, verbose=0, validation_split=0.2)
    assert sorted(h) == sorted(KEYS)
    assert h.params["samples"] == int(len(xtr) * 0.8)
    with pytest.raises(ValueError):
        model.fit(xtr, ytr, validation_split=1.5)


def _upload_calls(client, x, name):
    """Upload x; the dataset dict and the methods of the calls it made."""
    client.trace(True)
    try:
        ds = client._upload(x, None, name)
        return ds, [t["method"] for t in client.trace_calls()]
    finally:
        client.trace(False)


def test_upload_hashes_while_sending_and_dedups(client):
    """A large array new to the daemon streams at once (one probe, then the
    stream; the content hash goes in a later chunk); the same array again
    is found before anything is sent; an array whose change the probe's
    sample misses is hashed first, not found, and sent whole."""
    x = np.random.default_rng(16).random((9 << 10, 256), dtype=np.float32)  # 9 MiB
    ds, calls = _upload_calls(client, x, "later")
    assert calls == ["FindDataset", "UploadDataset"]
    assert not ds["deduplicated"] and ds["bytes_sent"] == x.nbytes
    assert ds["samples"] == len(x) and ds["x_shape"] == (256,)
    again, calls = _upload_calls(client, x, "later")
    assert calls == ["FindDataset", "FindDataset"]  # probe, then the content hash
    assert again["deduplicated"] and again["id"] == ds["id"] and again["bytes_sent"] == 0
    # float 5 of row 1000: byte 1024020 of the first MiB, past its sampled 4 KiB
    y = x.copy()
    y[1000, 5] += 1.0
    other, calls = _upload_calls(client, y, "later")
    assert calls == ["FindDataset", "FindDataset", "UploadDataset"]
    assert not other["deduplicated"] and other["id"] != ds["id"]
    assert other["bytes_sent"] == y.nbytes
    # the first float is sampled: new to the probe, streamed at once
    z = x.copy()
    z[0, 0] += 1.0
    third, calls = _upload_calls(client, z, "later")
    assert calls == ["FindDataset", "UploadDataset"]
    assert not third["deduplicated"] and third["id"] not in (ds["id"], other["id"])
    assert _upload_calls(client, z, "later")[0]["id"] == third["id"]


def test_upload_answered_early_when_the_probe_misses(client):
    """A stored array whose probe entry went (the daemon keeps the last 256
    uploads' probes; after a restart it has none) is streamed, and the
    daemon answers with the stored dataset as soon as the content hash
    arrives in the stream, before its end."""
    x = np.random.default_rng(17).random((9 << 10, 256), dtype=np.float32)
    ds = client._upload(x, None, "early")
    for i in range(256):
        client._upload(np.full((1, 4), i, np.float32), None, "tiny")
    again, calls = _upload_calls(client, x, "early")
    assert calls == ["FindDataset", "UploadDataset"]  # not probable: streamed
    assert again["deduplicated"] and again["id"] == ds["id"]
