"""The optimizer's variables of a Keras 3 .keras file (optimizer/vars in
model.weights.h5): model.save writes them, load_model restores them on the
daemon, so training goes on as if it had not stopped.

The layout, from keras-team/keras (keras/src/optimizers/base_optimizer.py):

    def save_own_variables(self, store):
        for i, variable in enumerate(self.variables):
            store[str(i)] = variable.numpy()

self.variables in creation order: __init__'s

    iterations = backend.Variable(0, name="iteration", dtype="int", ...)
    learning_rate = backend.Variable(learning_rate, name="learning_rate",
                                     dtype=backend.floatx(), ...)
        (only for a float rate: a schedule or a callable has none)

then build()'s over model.trainable_variables; adam.py:

    self._momentums, self._velocities = self.add_optimizer_variables(
        var_list, ["momentum", "velocity"])

and add_optimizer_variables interleaves them per variable:

    for variable in trainable_variables:
        # Interleaves adding variables for backward-compatibility.
        ... for i, (var_name, var_init) in enumerate(zip(name_list, ...)):
                optimizer_variables[i].append(
                    self.add_variable_from_reference(variable, name=var_name, ...))

keras/src/saving/saving_lib.py saves the model's attribute "optimizer"
through H5IOStore at optimizer/vars. tests/fixtures/keras3-zip/
diabetes_detection.keras, written by Keras 3.5.0 (TensorFlow), holds that
layout: 21 variables, iteration (int64, 117200) then momentum and velocity
of its 10 trainable variables (Adam over CosineDecay: no learning_rate).
"""
import gc
import io
import os
import re
import urllib.request
import zipfile

import h5py
import numpy as np
import pytest

import rtrain
from conftest import Daemon, free_port
from rtrain import layers as L
from rtrain import models

ROOT = os.environ.get("RT_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
REAL = os.path.join(ROOT, "tests", "fixtures", "keras3-zip", "diabetes_detection.keras")


def _opt_vars(path):
    with zipfile.ZipFile(path) as zf:
        data = zf.read("model.weights.h5")
    with h5py.File(io.BytesIO(data), "r") as f:
        if "optimizer/vars" not in f:
            return None
        g = f["optimizer/vars"]
        return [np.asarray(g[str(i)]) for i in range(len(g))]


def _drop(src, dst, what):
    """A copy of a .keras file without the h5 object what (optimizer: as
    an older file, or one of its variables)."""
    with zipfile.ZipFile(src) as zf:
        parts = {n: zf.read(n) for n in zf.namelist()}
    buf = io.BytesIO(parts["model.weights.h5"])
    with h5py.File(buf, "r+") as f:
        del f[what]
    parts["model.weights.h5"] = buf.getvalue()
    with zipfile.ZipFile(dst, "w") as zf:
        for n, b in parts.items():
            zf.writestr(n, b)


def _model(client, opt, w0=None):
    # an LSTM (three weights in its cell) and two Dense: seven trainable
    m = rtrain.Sequential([L.LSTM(5, input_shape=(4, 3), name="r"),
                           L.Dense(8, activation="tanh", name="d1"), L.Dense(2, name="d2")])
    m.compile(optimizer=opt, loss="mse", client=client, batch_size=8, shuffle=False)
    if w0 is not None:
        m.set_weights(w0)
    return m


def _data():
    rng = np.random.RandomState(3)
    x = rng.randn(32, 4, 3).astype(np.float32)
    y = rng.randn(32, 2).astype(np.float32)
    return x, y


# model.trainable_variables: the layers in turn, each one's in creation order
TRAIN = ["r/kernel", "r/recurrent_kernel", "r/bias", "d1/kernel", "d1/bias", "d2/kernel",
         "d2/bias"]


def _check_resume(client, tmp_path, make_opt):
    """Train 12 steps, save, load, train 8: the weights of 20 steps in one
    go. Returns the saved optimizer/vars and what the test needs."""
    x, y = _data()
    ref = _model(client, make_opt())
    w0 = ref.get_weights()
    ref.fit(x, y, epochs=5, batch_size=8, shuffle=False, verbose=0)  # 20 steps
    a = _model(client, make_opt(), w0)
    a.fit(x, y, epochs=3, batch_size=8, shuffle=False, verbose=0)  # 12 steps
    p = str(tmp_path / "a.keras")
    a.save(p)
    b = models.load_model(p, client=client)
    assert b.global_step == 12
    b.fit(x, y, epochs=2, batch_size=8, shuffle=False, verbose=0)  # 8 more
    for got, want in zip(b.get_weights(), ref.get_weights()):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    v = _opt_vars(p)
    named = a.get_named_weights()
    assert sorted(named) == sorted(TRAIN)
    # iteration (int64 as TensorFlow's Keras writes it), learning_rate
    assert v[0].dtype == np.int64 and v[0].shape == () and int(v[0]) == 12
    assert v[1].dtype == np.float32 and v[1].shape == ()
    assert v[1] == np.float32(a.optimizer.learning_rate)
    return v, named, p, x, y, ref


def test_adam_resumes_as_uninterrupted(client, tmp_path):
    v, named, p, x, y, ref = _check_resume(
        client, tmp_path, lambda: rtrain.optimizers.Adam(learning_rate=0.02))
    # then momentum and velocity of each trainable variable, interleaved
    assert len(v) == 2 + 2 * len(TRAIN)
    for k, name in enumerate(TRAIN):
        m, vel = v[2 + 2 * k], v[3 + 2 * k]
        assert m.shape == named[name].shape and vel.shape == named[name].shape
        assert m.dtype == np.float32 and vel.dtype == np.float32
        assert np.any(m != 0) and np.all(vel >= 0) and np.any(vel > 0)
    # a file without them loads with a fresh optimizer, as in Keras: the
    # step count and the moments start over, and the weights then differ
    q = str(tmp_path / "fresh.keras")
    _drop(p, q, "optimizer")
    c = models.load_model(q, client=client)
    assert c.global_step == 0
    c.fit(x, y, epochs=2, batch_size=8, shuffle=False, verbose=0)
    assert max(float(np.max(np.abs(g - w))) for g, w in
               zip(c.get_weights(), ref.get_weights())) > 1e-4


def test_sgd_momentum_resumes(client, tmp_path):
    v, named, *_ = _check_resume(
        client, tmp_path, lambda: rtrain.optimizers.SGD(learning_rate=0.05, momentum=0.9))
    # iteration, learning_rate, one momentum each
    assert len(v) == 2 + len(TRAIN)
    for k, name in enumerate(TRAIN):
        assert v[2 + k].shape == named[name].shape and np.any(v[2 + k] != 0)


def test_keras_written_optimizer_vars(client, tmp_path):
    """Keras 3.5.0's file: its iteration and Adam slots reach the daemon
    (the step count), and a save writes them back as they were."""
    want = _opt_vars(REAL)
    assert len(want) == 21 and int(want[0]) == 117200
    m = models.load_model(REAL, client=client)
    assert m.global_step == 117200
    p = str(tmp_path / "again.keras")
    m.save(p)
    got = _opt_vars(p)
    assert len(got) == len(want)
    assert int(got[0]) == int(want[0])
    for g, w in zip(got[1:], want[1:]):
        assert g.shape == w.shape
        np.testing.assert_array_equal(g, w)
    # a count that does not fit: Keras' warning, and a fresh optimizer
    bad = str(tmp_path / "bad.keras")
    _drop(REAL, bad, "optimizer/vars/20")
    with pytest.warns(UserWarning, match="optimizer/vars holds 20, a built Adam .* has 21"):
        fresh = models.load_model(bad, client=client)
    assert fresh.global_step == 0


def _programs(url):
    """The daemon's rtrain_programs gauge (its /metrics page)."""
    page = urllib.request.urlopen(url, timeout=10).read().decode()
    return int(re.search(r"^rtrain_programs (\d+)$", page, re.M).group(1))


def test_dropped_models_free_their_programs(tmp_path):
    """Issue 29: a model's program leaves the daemon with the model. A
    model loaded five times into one name, a model deleted, and a model
    recompiled for another batch size (its program replaced) keep the
    daemon's program count where it was; the recompiled model trains on
    from its old program's state (state_from is read before the drop)."""
    port = free_port()
    url = "http://127.0.0.1:%d/metrics" % port
    d = Daemon("--metrics-listen", "127.0.0.1:%d" % port)
    try:
        with rtrain.connect(d.addr, timeout=30) as client:
            x, y = _data()
            a = _model(client, rtrain.optimizers.Adam(learning_rate=0.02))
            a.fit(x, y, epochs=1, batch_size=8, shuffle=False, verbose=0)  # 4 steps
            p = str(tmp_path / "a.keras")
            a.save(p)
            n = _programs(url)
            for i in range(5):
                b = models.load_model(p, client=client)
                b.fit(x, y, epochs=1, batch_size=8, shuffle=False, verbose=0)
                gc.collect()  # a model is in reference cycles (its layers)
                assert _programs(url) == n + 1, "load_model %d" % i
            del b
            gc.collect()
            assert _programs(url) == n
            pid, step = a.program_id, a.global_step
            a.fit(x, y, epochs=1, batch_size=4, shuffle=False, verbose=0)  # a new program
            assert a.program_id != pid and a.global_step == step + 8
            assert _programs(url) == n
    finally:
        d.stop()


def test_reloads_make_no_program(tmp_path):
    """Issue 29: a state restored into a model loads into its program, so
    reloading in a loop leaves nothing behind on the daemon (each reload
    made a program that stayed until the session closed). load_checkpoint
    five times into one model: the daemon's program count stays; each
    load_model of a .keras file makes its model's program and no other;
    and the weights after the last reload and 8 more steps are those of 20
    steps in one go."""
    port = free_port()
    url = "http://127.0.0.1:%d/metrics" % port
    d = Daemon("--metrics-listen", "127.0.0.1:%d" % port)
    try:
        with rtrain.connect(d.addr, timeout=30) as client:
            x, y = _data()
            ref = _model(client, rtrain.optimizers.Adam(learning_rate=0.02))
            w0 = ref.get_weights()
            ref.fit(x, y, epochs=5, batch_size=8, shuffle=False, verbose=0)  # 20 steps
            a = _model(client, rtrain.optimizers.Adam(learning_rate=0.02), w0)
            a.fit(x, y, epochs=3, batch_size=8, shuffle=False, verbose=0)  # 12 steps
            ck = str(tmp_path / "a.rtck")
            a.save_checkpoint(ck)
            p = str(tmp_path / "a.keras")
            a.save(p)
            pid, n = a.program_id, _programs(url)
            for i in range(5):
                a.fit(x, y, epochs=1, batch_size=8, shuffle=False, verbose=0)  # away from 12
                assert a.load_checkpoint(ck) == 12
                assert a.program_id == pid and a.global_step == 12
                assert _programs(url) == n, "load_checkpoint %d made a program" % i
            a.fit(x, y, epochs=2, batch_size=8, shuffle=False, verbose=0)  # 8 more
            for got, want in zip(a.get_weights(), ref.get_weights()):
                np.testing.assert_array_equal(got, want)
            # load_model: the loaded model's own program, and its
            # optimizer state pushed into that program; the model it
            # replaces in b is collected and its program dropped
            for i in range(5):
                b = models.load_model(p, client=client)
                assert b.global_step == 12
                gc.collect()  # a model is in reference cycles (its layers)
                got = _programs(url)
                assert got == n + 1, "load_model %d: %d programs, not %d" % (i, got, n + 1)
            b.fit(x, y, epochs=2, batch_size=8, shuffle=False, verbose=0)
            for got, want in zip(b.get_weights(), ref.get_weights()):
                np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
            # a file of another model at the same batch size and labels:
            # the daemon refuses it into this model's program, and it
            # resumes as a new program of the file's model, as before
            o = rtrain.Sequential([L.LSTM(3, input_shape=(4, 3), name="r"), L.Dense(2, name="d")])
            o.compile(optimizer=rtrain.optimizers.Adam(learning_rate=0.02), loss="mse",
                      client=client, batch_size=8, shuffle=False)
            o.fit(x, y, epochs=1, batch_size=8, shuffle=False, verbose=0)
            old, before = o.program_id, _programs(url)
            with open(ck, "rb") as f:
                state = f.read().partition(b"\n")[2]  # the daemon's checkpoint
            with pytest.raises(rtrain.FailedPrecondition, match="different model"):
                o._compiled._prog.push_state(state)
            assert o.program_id == old and o.global_step == 4
            assert o.load_checkpoint(ck) == 12
            # the program it was is dropped: o was its only holder
            assert o.program_id != old and _programs(url) == before
    finally:
        d.stop()
