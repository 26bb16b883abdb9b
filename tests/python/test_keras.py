"""The Keras idiom of the rtrain client against a real rtraind: models,
compile/fit/evaluate/predict on the default connection, callbacks (with
Keras' arithmetic), and Keras' HDF5 files."""
import csv
import json
import os
import re

import h5py
import numpy as np
import pytest

import rtrain
from rtrain import layers as L
from rtrain import callbacks as C


def iris_seq(**kw):
    return rtrain.Sequential([
        L.Dense(16, activation="relu", input_shape=(4,), **kw),
        L.Dense(3, activation="softmax"),
    ])


def compiled(client, lr=0.05, model=None, **kw):
    m = model or iris_seq()
    m.compile(optimizer=rtrain.optimizers.Adam(lr),
              loss="sparse_categorical_crossentropy", metrics=["accuracy"],
              **kw)
    return m


# ------------------------------------------------------------ declaring

def test_summary_shapes_and_counts(capsys):
    m = rtrain.Sequential([
        L.Conv2D(4, 3, activation="relu", input_shape=(8, 8, 1)),
        L.MaxPooling2D(),
        L.BatchNormalization(),
        L.Flatten(),
        L.Dense(5, input_dim=None),
        L.Dropout(0.1),
        L.Dense(2, activation="log_softmax"),
    ])
    m.summary()
    out = capsys.readouterr().out
    assert 'Model: "sequential"' in out
    # Keras' shapes and counts, worked by hand.
    for row in ["conv2d (Conv2D)              (None, 6, 6, 4)           40",
                "max_pooling2d (MaxPooling2D) (None, 3, 3, 4)           0",
                "batch_normalization (BatchNo",
                "flatten (Flatten)            (None, 36)                0",
                "dense (Dense)                (None, 5)                 185",
                "dense_1 (Dense)              (None, 2)                 12"]:
        assert row in out, row
    assert "Total params: 253" in out
    assert "Trainable params: 245" in out
    assert "Non-trainable params: 8" in out
    assert m.count_params() == 253
    assert [type(l).__name__ for l in m.layers][:2] == ["Conv2D",
                                                        "MaxPooling2D"]


def test_sequential_json_is_keras2():
    m = rtrain.Sequential([L.Dense(3, input_dim=4, kernel_initializer="he_normal")])
    doc = json.loads(m.to_json())
    assert doc["class_name"] == "Sequential"
    assert doc["keras_version"].startswith("2.")
    lays = doc["config"]["layers"]
    assert lays[0] == {"class_name": "InputLayer", "config": {
        "batch_input_shape": [None, 4], "dtype": "float32", "sparse": False,
        "ragged": False, "name": "dense_input"}}
    cfg = lays[1]["config"]
    assert cfg["name"] == "dense" and cfg["units"] == 3
    assert cfg["batch_input_shape"] == [None, 4]
    assert cfg["kernel_initializer"] == {"class_name": "HeNormal",
                                         "config": {"seed": None}}
    back = rtrain.models.model_from_json(m.to_json())
    assert json.loads(back.to_json()) == doc


def test_json_matches_keras_output():
    """examples/iris/model.json is real Keras' model.to_json() (2.12) of
    this model: rtrain's to_json gives the same document, key for key,
    apart from the version string."""
    src = os.environ.get("RT_SOURCE_DIR") or os.path.join(
        os.path.dirname(__file__), "..", "..")
    with open(os.path.join(src, "examples", "iris", "model.json")) as f:
        ref = json.load(f)
    m = rtrain.Sequential([L.Dense(32, activation="relu", input_shape=(4,)),
                           L.Dense(3, activation="softmax")])
    ours = json.loads(m.to_json())
    assert ours["keras_version"].startswith("2.")
    ours["keras_version"] = ref["keras_version"]
    assert ours == ref
    # and it reads back into the same model
    assert json.loads(rtrain.models.model_from_json(
        json.dumps(ref)).to_json())["config"] == ref["config"]


def test_functional_json_and_training(client, iris):
    xtr, ytr, xte, yte = iris
    x = rtrain.Input((4,))
    a = L.Dense(8, activation="relu")(x)
    b = L.Dense(8, activation="tanh")(x)
    h = L.Concatenate()([a, b])
    out = L.Dense(3, activation="softmax")(h)
    m = rtrain.Model(x, out, name="two_paths")
    doc = json.loads(m.to_json())
    assert doc["class_name"] == "Functional"
    cfg = doc["config"]
    assert cfg["input_layers"] == [["input_1", 0, 0]]
    assert cfg["output_layers"] == [["dense_2", 0, 0]]
    byname = {l["name"]: l for l in cfg["layers"]}
    assert byname["concatenate"]["inbound_nodes"] == [
        [["dense", 0, 0, {}], ["dense_1", 0, 0, {}]]]
    assert byname["input_1"]["inbound_nodes"] == []
    assert m.count_params() == 40 + 40 + 51
    assert m.output_shape == (None, 3)
    compiled(client, model=m)
    assert m.compiled.report["param_count"] == m.count_params()
    assert m.metrics_names == ["loss", "accuracy"]
    h = m.fit(xtr, ytr, epochs=3, verbose=0, validation_data=(xte, yte))
    assert len(h["val_loss"]) == 3
    loss, acc = m.evaluate(xte, yte)
    assert abs(loss - h["val_loss"][-1]) < 1e-5
    assert m.predict(xte).shape == (len(xte), 3)
    back = rtrain.models.model_from_json(m.to_json())
    assert json.loads(back.to_json()) == doc


def test_old_idioms(client, iris):
    xtr, ytr, _, _ = iris
    m = rtrain.Sequential([
        L.Dense(12, input_dim=4, activation="relu", init="glorot_normal"),
        L.Dense(3, activation="log_softmax")])
    opt = rtrain.optimizers.Adam(lr=0.02)
    assert opt.learning_rate == 0.02 and opt.lr == 0.02
    m.compile(optimizer=opt, loss="sparse_categorical_crossentropy",
              from_logits=True, metrics=["acc"])
    h = m.fit(xtr, ytr, epochs=2, verbose=0)
    assert sorted(h) == ["acc", "loss"]
    reg = rtrain.Sequential([L.Dense(3, input_dim=4,
                                     kernel_regularizer="l2")])
    assert json.loads(reg.to_json())["config"]["layers"][1]["config"][
        "kernel_regularizer"] == {"class_name": "L2", "config": {"l2": 0.01}}
    # the daemon applies it (test_keras_api.py checks the penalty)
    reg.compile("sgd", "mse")
    with pytest.raises(ValueError, match="input_shape, input_dim"):
        L.Dense(3, input_dim=4, input_shape=(4,))


def test_default_connection_from_env(daemon, monkeypatch, iris):
    xtr, ytr, _, _ = iris
    monkeypatch.setattr(rtrain, "_default", None)
    monkeypatch.setenv("RTRAIN_SERVER", daemon.addr)
    m = iris_seq()
    with pytest.raises(RuntimeError, match="compile"):
        m.fit(xtr, ytr)
    m.compile("adam", "sparse_categorical_crossentropy")
    assert m.compiled._client.target == daemon.addr
    assert m.metrics_names == ["loss"]
    m.compiled._client.close()


# ------------------------------------------------------------ fit options

def test_fit_defaults_and_options(client, iris):
    xtr, ytr, xte, yte = iris
    m = compiled(client)
    h = m.fit(xtr, ytr, epochs=1, verbose=0)
    assert h.params["batch_size"] == 32 and h.params["steps"] == 4
    w = m.get_weights()
    # Another batch size: a new program, the weights carried over.
    h = m.fit(xtr, ytr, batch_size=10, epochs=0, verbose=0)
    assert all(np.array_equal(a, b) for a, b in zip(w, m.get_weights()))
    h = m.fit(xtr, ytr, epochs=5, initial_epoch=2, verbose=0,
              validation_data=(xte, yte), validation_freq=2,
              validation_batch_size=7)
    assert h.epoch == [2, 3, 4] and len(h["loss"]) == 3
    assert len(h["val_loss"]) == 1  # epoch 4 (the 4th, 1-based) only
    h = m.fit(xtr, ytr, epochs=3, verbose=0, validation_data=(xte, yte),
              validation_freq=[1, 3])
    assert len(h["val_loss"]) == 2
    with pytest.raises(ValueError, match="no weight for class 2"):
        m.fit(xtr, ytr, class_weight={0: 1.0, 1: 2.0})
    with pytest.raises(ValueError, match=r"one weight per sample"):
        m.fit(xtr, ytr, sample_weight=np.ones(3))


def test_initial_epoch_progress(client, iris, capsys):
    xtr, ytr, _, _ = iris
    m = compiled(client)
    m.fit(xtr, ytr, epochs=4, initial_epoch=2, verbose=2)
    out = capsys.readouterr().out
    # the default (steps_per_execution "auto") first says which K it chose
    assert re.match(r"steps per call: auto K = \d+ ", out)
    out = "".join(ln for ln in out.splitlines(True)
                  if not ln.startswith("steps per call: "))
    assert out.startswith("Epoch 3/4 - ") and "Epoch 4/4 - " in out
    assert out.count("\n") == 2


# ------------------------------------------------------------ callbacks

class Recorder(C.Callback):
    def __init__(self, weights=False):
        super().__init__()
        self.events, self.weights, self.want_w = [], [], weights

    def on_train_begin(self, logs=None):
        self.events.append(("train_begin",))

    def on_epoch_begin(self, epoch, logs=None):
        self.events.append(("epoch_begin", epoch))

    def on_batch_end(self, batch, logs=None):
        self.events.append(("batch", batch))

    def on_epoch_end(self, epoch, logs=None):
        self.events.append(("epoch_end", epoch, dict(logs)))
        if self.want_w:
            self.weights.append(self.model.get_weights())

    def on_train_end(self, logs=None):
        self.events.append(("train_end",))


@pytest.mark.parametrize("spx", [None, 1])
def test_callback_order(client, iris, spx):
    xtr, ytr, xte, yte = iris
    m = compiled(client)
    r = Recorder()
    h = m.fit(xtr, ytr, batch_size=20, epochs=2, verbose=0, callbacks=[r],
              validation_data=(xte, yte), steps_per_execution=spx)
    kinds = [e[0] for e in r.events]
    assert kinds[0] == "train_begin" and kinds[-1] == "train_end"
    assert kinds.count("epoch_begin") == kinds.count("epoch_end") == 2
    ends = [e for e in r.events if e[0] == "epoch_end"]
    for k, (_, ep, logs) in enumerate(ends):
        assert ep == k
        assert sorted(logs) == ["accuracy", "loss", "val_accuracy",
                                "val_loss"]
        assert logs["loss"] == h["loss"][k]
        assert logs["val_loss"] == h["val_loss"][k]
    steps = -(-len(xtr) // 20)
    for ep in range(2):
        a = r.events.index(("epoch_begin", ep))
        b = [i for i, e in enumerate(r.events) if e[0] == "epoch_end"][ep]
        batches = [e[1] for e in r.events[a:b] if e[0] == "batch"]
        if spx is None:
            # The stream reports steps before the last (the epoch end has
            # that one); a progress event the daemon could not send at
            # once gives way to a later one.
            assert batches and batches == sorted(set(batches))
            assert 0 <= batches[0] and batches[-1] < steps - 1
        else:
            # One-step RunSteps calls: each reports its step.
            assert batches == list(range(steps))
    assert h.status == "done"


def early_stop_reference(values, patience, min_delta, baseline=None):
    """Keras' EarlyStopping over a monitored 'min' series, written out
    long-hand: (stopped epoch or None, best epoch)."""
    best, best_epoch, wait = np.inf, 0, 0
    for ep, v in enumerate(values):
        wait += 1
        if v + min_delta < best:  # monitor_op(v - (-min_delta), best)
            best, best_epoch = v, ep
            if baseline is None or v + min_delta < baseline:
                wait = 0
            # keras/src/callbacks/early_stopping.py returns here: an
            # improving epoch never stops
            continue
        if wait >= patience and ep > 0:
            return ep, best_epoch
    return None, best_epoch


class FakeModel:
    def __init__(self):
        self.stop_training = False
        self.w = 0
        self.optimizer = rtrain.optimizers.SGD(0.1)

    def get_weights(self):
        return [np.array(self.w)]

    def set_weights(self, w):
        self.w = int(w[0])


@pytest.mark.parametrize("patience,min_delta,baseline", [
    (0, 0.0, None), (1, 0.0, None), (2, 0.05, None), (3, 0.0, 0.5),
    (2, 0.2, None)])
def test_early_stopping_arithmetic(patience, min_delta, baseline):
    series = [1.0, 0.9, 0.92, 0.89, 0.88, 0.95, 0.7, 0.71, 0.72, 0.73, 0.74]
    fm = FakeModel()
    es = C.EarlyStopping(monitor="val_loss", patience=patience,
                         min_delta=min_delta, baseline=baseline,
                         restore_best_weights=True)
    es.set_model(fm)
    es.on_train_begin()
    stopped = None
    for ep, v in enumerate(series):
        fm.w = ep  # the "weights" are the epoch number
        es.on_epoch_end(ep, {"val_loss": v})
        if fm.stop_training:
            stopped = ep
            break
    want_stop, want_best = early_stop_reference(series, patience, min_delta,
                                                baseline)
    assert stopped == want_stop
    if stopped is not None:
        assert es.stopped_epoch == stopped
        assert fm.w == want_best  # restored from the best epoch


def test_early_stopping_real_fit(client, iris):
    xtr, ytr, xte, yte = iris
    m = compiled(client, lr=0.05)
    r = Recorder(weights=True)
    es = C.EarlyStopping(monitor="loss", patience=2, min_delta=0.08,
                         restore_best_weights=True)
    h = m.fit(xtr, ytr, batch_size=20, epochs=40, verbose=0,
              callbacks=[r, es])
    want_stop, want_best = early_stop_reference(h["loss"], 2, 0.08)
    assert want_stop is not None and want_stop < 39
    assert len(h["loss"]) == want_stop + 1 and h.status == "stopped"
    assert m.stop_training
    assert es.best_epoch == want_best
    for a, b in zip(m.get_weights(), r.weights[want_best]):
        assert np.array_equal(a, b)
    steps = -(-len(xtr) // 20)
    # Stopped at the epoch end: no step of the next epoch ran.
    assert m.compiled.global_step == (want_stop + 1) * steps


def test_stop_in_on_batch_end(client, iris):
    xtr, ytr, _, _ = iris

    class StopAt(C.Callback):
        def on_batch_end(self, batch, logs=None):
            if batch == 1:
                self.model.stop_training = True
    m = compiled(client)
    h = m.fit(xtr, ytr, batch_size=10, epochs=50, verbose=0,
              callbacks=[StopAt()], steps_per_execution=1)
    assert h.status == "stopped" and "loss" not in h
    assert 2 <= m.compiled.global_step < 11


def test_learning_rate_scheduler(client, iris):
    xtr, ytr, _, _ = iris
    m = iris_seq()
    m.compile(optimizer=rtrain.optimizers.SGD(0.1),
              loss="sparse_categorical_crossentropy")
    w0 = m.get_weights()
    r = Recorder(weights=True)
    # lr 0.1 for epoch 0, then far below float32's resolution of the
    # weights: the weights stop moving.
    sched = C.LearningRateScheduler(lambda ep, lr: 0.1 if ep == 0 else 1e-30)
    h = m.fit(xtr, ytr, batch_size=15, epochs=3, verbose=0,
              callbacks=[sched, r])
    assert [e[2]["lr"] for e in r.events if e[0] == "epoch_end"] == \
        [0.1, 1e-30, 1e-30]
    assert m.optimizer.learning_rate == 1e-30
    assert not any(np.array_equal(a, b) for a, b in zip(w0, r.weights[0]))
    for a, b, c in zip(r.weights[0], r.weights[1], r.weights[2]):
        assert np.array_equal(a, b) and np.array_equal(b, c)
    assert len(h["loss"]) == 3


def test_reduce_lr_on_plateau_arithmetic():
    fm = FakeModel()
    cb = C.ReduceLROnPlateau(monitor="val_loss", factor=0.5, patience=2,
                             min_delta=0.01, cooldown=1, min_lr=0.02)
    cb.set_model(fm)
    cb.on_train_begin()
    lrs = []
    for ep, v in enumerate([1.0, 0.995, 0.99, 0.98, 0.98, 0.98, 0.98,
                            0.98, 0.98, 0.98, 0.98]):
        logs = {"val_loss": v}
        cb.on_epoch_end(ep, logs)
        lrs.append(round(fm.optimizer.learning_rate, 6))
    # Keras' steps: best 1.0; 0.995 and 0.99 are within min_delta (wait
    # 1, 2) -> 0.05 at epoch 2, cooldown 1. Epoch 3 spends the cooldown
    # and 0.98 beats 1.0 - 0.01: best 0.98. Epochs 4, 5: wait 1, 2 ->
    # 0.025, cooldown. Epoch 6 spends it, wait 1; 7: wait 2 -> 0.02
    # (min_lr). 8: cooldown, wait 1; 9: wait 2, lr 0.02 is still above
    # float32(min_lr), so it is set to max(0.01, 0.02) again.
    assert lrs == [0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025, 0.02, 0.02,
                   0.02, 0.02]


def test_csv_logger_and_checkpoint(client, iris, tmp_path):
    xtr, ytr, xte, yte = iris
    m = compiled(client)
    log = tmp_path / "log.csv"
    ck = tmp_path / "w-{epoch:02d}.h5"
    best = tmp_path / "best.h5"
    r = Recorder(weights=True)
    h = m.fit(xtr, ytr, epochs=3, verbose=0, validation_data=(xte, yte),
              callbacks=[r, C.CSVLogger(str(log)),
                         C.ModelCheckpoint(str(ck), save_weights_only=True),
                         C.ModelCheckpoint(str(best), monitor="val_loss",
                                           save_best_only=True)])
    rows = list(csv.DictReader(open(log)))
    assert [int(r_["epoch"]) for r_ in rows] == [0, 1, 2]
    assert sorted(rows[0]) == ["accuracy", "epoch", "loss", "val_accuracy",
                               "val_loss"]
    for k, row in enumerate(rows):
        assert float(row["loss"]) == pytest.approx(h["loss"][k], rel=1e-12)
    for ep in range(3):
        f = tmp_path / ("w-%02d.h5" % (ep + 1))
        m2 = iris_seq()
        m2.load_weights(str(f))
        for a, b in zip(m2.get_weights(), r.weights[ep]):
            assert np.array_equal(a, b)
    # The best epoch's full model.
    k = int(np.argmin(h["val_loss"]))
    mb = rtrain.models.load_model(str(best))
    for a, b in zip(mb.get_weights(), r.weights[k]):
        assert np.array_equal(a, b)


def test_terminate_on_nan():
    fm = FakeModel()
    cb = C.TerminateOnNaN()
    cb.set_model(fm)
    cb.on_batch_end(0, {"loss": 1.0})
    assert not fm.stop_training
    cb.on_batch_end(1, {"loss": float("nan")})
    assert fm.stop_training


# ------------------------------------------------------------ HDF5

def keras_layout_file(path, layers):
    """A weights file written the way Keras 2's save_weights_to_hdf5_group
    does: [(layer name, [(weight name, array)])]."""
    with h5py.File(path, "w") as f:
        f.attrs["backend"] = b"tensorflow"
        f.attrs["keras_version"] = b"2.11.0"
        f.attrs["layer_names"] = np.asarray([n.encode() for n, _ in layers])
        for name, ws in layers:
            g = f.create_group(name)
            g.attrs["weight_names"] = np.asarray([w.encode() for w, _ in ws])
            for w, v in ws:
                d = g.create_dataset(w, v.shape, dtype=v.dtype)
                d[()] = v


def test_h5_weights_layout_and_bit_identical_reload(client, iris, tmp_path):
    xtr, ytr, xte, _ = iris
    m = compiled(client)
    m.fit(xtr, ytr, epochs=3, verbose=0)
    p = str(tmp_path / "w.h5")
    m.save_weights(p)
    with h5py.File(p, "r") as f:
        assert [n.decode() for n in f.attrs["layer_names"]] == ["dense",
                                                                 "dense_1"]
        # Keras writes these as encoded bytes; h5py may give them back as
        # str, and Keras' loader takes either.
        dec = lambda v: v.decode() if hasattr(v, "decode") else v  # noqa
        assert dec(f.attrs["backend"]) == "tensorflow"
        assert dec(f.attrs["keras_version"]).startswith("2.")
        assert [w.decode() for w in f["dense"].attrs["weight_names"]] == \
            ["dense/kernel:0", "dense/bias:0"]
        assert f["dense/dense/kernel:0"].shape == (4, 16)
        assert f["dense_1/dense_1/bias:0"].dtype == np.float32
        # Keras 2.11 ends with the model's own weights: none, written as
        # numpy's empty array.
        tl = f["top_level_model_weights"].attrs["weight_names"]
        assert tl.shape == (0,) and tl.dtype == np.float64
    fresh = iris_seq()
    fresh.compile("adam", "sparse_categorical_crossentropy", seed=99)
    assert not np.array_equal(fresh.predict(xte), m.predict(xte))
    fresh.load_weights(p)
    assert np.array_equal(fresh.predict(xte), m.predict(xte))


def test_h5_keras_written_file_loads(client, iris, tmp_path):
    _, _, xte, _ = iris
    rng = np.random.RandomState(3)
    w = [rng.standard_normal(s).astype(np.float32)
         for s in [(4, 16), (16,), (16, 3), (3,)]]
    p = str(tmp_path / "keras.h5")
    # Keras' names may differ from the model's (another session's
    # counters): loading goes by order, as Keras' does.
    keras_layout_file(p, [("dense_7", [("dense_7/kernel:0", w[0]),
                                       ("dense_7/bias:0", w[1])]),
                          ("dropout", []),
                          ("dense_8", [("dense_8/kernel:0", w[2]),
                                       ("dense_8/bias:0", w[3])])])
    m = iris_seq()
    m.load_weights(p)  # before compile: kept, sent by compile
    m.compile("adam", "sparse_categorical_crossentropy")
    for a, b in zip(m.get_weights(), w):
        assert np.array_equal(a, b)
    h = np.maximum(xte @ w[0] + w[1], 0) @ w[2] + w[3]
    e = np.exp(h - h.max(1, keepdims=True))
    np.testing.assert_allclose(m.predict(xte), e / e.sum(1, keepdims=True),
                               rtol=1e-5, atol=1e-6)
    bad = str(tmp_path / "bad.h5")
    keras_layout_file(bad, [("dense", [("dense/kernel:0", w[0]),
                                       ("dense/bias:0", w[1])])])
    with pytest.raises(ValueError, match="1 layers but the model has 2"):
        m.load_weights(bad)


def test_h5_chunked_attributes(client, iris, tmp_path):
    """Keras splits an attribute list past 64512 bytes into name0, name1,
    ... (save_attributes_to_hdf5_group); both directions handle it."""
    _, _, xte, _ = iris
    rng = np.random.RandomState(4)
    w = [rng.standard_normal(s).astype(np.float32)
         for s in [(4, 16), (16,), (16, 3), (3,)]]
    p = str(tmp_path / "chunked.h5")
    keras_layout_file(p, [("dense_3", [("dense_3/kernel:0", w[0]),
                                       ("dense_3/bias:0", w[1])]),
                          ("dense_4", [("dense_4/kernel:0", w[2]),
                                       ("dense_4/bias:0", w[3])])])
    with h5py.File(p, "a") as f:
        names = f.attrs["layer_names"]
        del f.attrs["layer_names"]
        f.attrs["layer_names0"] = names[:1]
        f.attrs["layer_names1"] = names[1:]
        wn = f["dense_4"].attrs["weight_names"]
        del f["dense_4"].attrs["weight_names"]
        f["dense_4"].attrs["weight_names0"] = wn[:1]
        f["dense_4"].attrs["weight_names1"] = wn[1:]
    m = iris_seq()
    m.compile("adam", "sparse_categorical_crossentropy")
    m.load_weights(p)
    for a, b in zip(m.get_weights(), w):
        assert np.array_equal(a, b)
    # Writing: a list past the limit is split the same way and reads back.
    from rtrain import saving
    long = [("l%05d" % i).encode() * 40 for i in range(400)]  # 96 KB
    with h5py.File(str(tmp_path / "big.h5"), "w") as f:
        saving._save_attr_list(f, "layer_names", long)
        assert "layer_names" not in f.attrs and "layer_names1" in f.attrs
        assert all(f.attrs[k].nbytes <= 64512 for k in f.attrs)
        assert saving._load_attr_list(f, "layer_names") == \
            [n.decode() for n in long]


def test_h5_batchnorm_order(client, tmp_path):
    m = rtrain.Sequential([L.Dense(3, input_shape=(2,)),
                           L.BatchNormalization()])
    m.compile("sgd", "mse")
    p = str(tmp_path / "bn.h5")
    m.save_weights(p)
    with h5py.File(p, "r") as f:
        assert [w.decode() for w in
                f["batch_normalization"].attrs["weight_names"]] == [
            "batch_normalization/gamma:0", "batch_normalization/beta:0",
            "batch_normalization/moving_mean:0",
            "batch_normalization/moving_variance:0"]
        np.testing.assert_array_equal(
            f["batch_normalization/batch_normalization/moving_variance:0"],
            np.ones(3, np.float32))


def test_save_and_load_model(client, iris, tmp_path):
    xtr, ytr, xte, yte = iris
    m = compiled(client)
    m.fit(xtr, ytr, epochs=2, verbose=0)
    p = str(tmp_path / "model.h5")
    m.save(p)
    with h5py.File(p, "r") as f:
        cfg = json.loads(f.attrs["model_config"])
        assert cfg["class_name"] == "Sequential"
        tc = json.loads(f.attrs["training_config"])
        assert tc["loss"] == "sparse_categorical_crossentropy"
        assert tc["optimizer_config"]["class_name"] == "Adam"
        assert "layer_names" in f["model_weights"].attrs
    back = rtrain.models.load_model(p)
    assert np.array_equal(back.predict(xte), m.predict(xte))
    assert back.metrics_names == ["loss", "accuracy"]
    assert back.optimizer.learning_rate == pytest.approx(0.05)
    # A compiled model from Client.compile saves the same way.
    c = client.compile(iris_seq(), optimizer="sgd", loss="mse")
    c.save_weights(str(tmp_path / "c.h5"))
    assert len(c.layers) == 2


def test_variable_length_input_shape(client):
    """A null sequence length in Keras JSON: client.compile(input_shape=...)
    binds it (None keeps the model's dim) and the program trains; a binding
    that contradicts a fixed dim is refused naming the input. Without
    input_shape, fit/predict bind it from x (test_fit_binds_null_dims)."""
    spec = json.dumps({"class_name": "Sequential", "config": {"name": "s", "layers": [
        {"class_name": "InputLayer", "config": {"batch_input_shape": [None, None, 3],
                                                "name": "seq"}},
        {"class_name": "SimpleRNN", "config": {"name": "r", "units": 4}},
        {"class_name": "Dense", "config": {"name": "d", "units": 1}}]}})
    with pytest.raises(rtrain.InvalidArgument) as e:
        client.compile(spec, optimizer="adam", loss="mse", batch_size=8,
                       input_shape=(5, 4))
    assert "input 'seq' has dim 2 = 3" in str(e.value)
    m = client.compile(spec, optimizer="adam", loss="mse", batch_size=8,
                       input_shape=(5, None))
    assert tuple(m.input_shape) == (5, 3)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 5, 3)).astype(np.float32)
    y = (x.sum(axis=(1, 2)) * 0.1).astype(np.float32)[:, None]
    h = m.fit(x, y, epochs=2, verbose=0)
    assert len(h.history["loss"]) == 2 and np.isfinite(h.history["loss"]).all()


def test_fit_binds_null_dims(client):
    """Keras JSON with a null sequence length, compiled without
    input_shape: its shapes are unknown until the first fit, which binds
    them from x (as Keras builds on the data) and trains; weights set
    before binding are applied at binding (predictions equal the trained
    model's); x contradicting a fixed dim is refused naming the input,
    and so is a different length after binding (programs have fixed
    shapes)."""
    spec = json.dumps({"class_name": "Sequential", "config": {"name": "s", "layers": [
        {"class_name": "InputLayer", "config": {"batch_input_shape": [None, None, 3],
                                                "name": "seq"}},
        {"class_name": "LSTM", "config": {"name": "r", "units": 4, "dropout": 0.2,
                                          "recurrent_dropout": 0.2}},
        {"class_name": "Dense", "config": {"name": "d", "units": 1}}]}})
    m = client.compile(spec, optimizer="adam", loss="mse", batch_size=8)
    with pytest.raises(RuntimeError, match="variable dims"):
        m.input_shape
    assert "unbound" in repr(m)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(48, 7, 3)).astype(np.float32)
    y = (x[:, :, 0].sum(axis=1) * 0.2).astype(np.float32)[:, None]
    h = m.fit(x, y, epochs=3, verbose=0)
    assert tuple(m.input_shape) == (7, 3)
    assert len(h.history["loss"]) == 3 and np.isfinite(h.history["loss"]).all()
    # it learns: the loss without dropout falls over more epochs (the epoch
    # losses above carry dropout's noise, larger than 3 epochs' progress)
    l0 = float(np.atleast_1d(m.evaluate(x, y))[0])
    m.fit(x, y, epochs=10, verbose=0)
    assert float(np.atleast_1d(m.evaluate(x, y))[0]) < l0
    with pytest.raises(ValueError, match="7, 3"):
        m.predict(x[:, :5])
    # weights set before the first predict bind with it
    m2 = client.compile(spec, optimizer="adam", loss="mse", batch_size=8)
    m2.set_weights(m.get_weights())
    np.testing.assert_array_equal(m2.predict(x), m.predict(x))
    # the fixed feature dim must match
    m3 = client.compile(spec, optimizer="adam", loss="mse", batch_size=8)
    with pytest.raises(rtrain.InvalidArgument) as e:
        m3.fit(x[:, :, :2], y, epochs=1, verbose=0)
    assert "input 'seq'" in str(e.value)


def test_python_model_with_a_variable_length(client):
    """rtrain.Sequential with input_shape=(None, 3) (and the same read
    from Keras JSON by model_from_json): summary and counts work with the
    variable dim, compile defers, the first fit binds it from x; a layer
    that needs fixed dims says so."""
    m = rtrain.Sequential([L.Masking(0.0, input_shape=(None, 3)),
                           L.LSTM(4, dropout=0.1, recurrent_dropout=0.1),
                           L.Dense(1)])
    assert m.input_shape == (None, None, 3)
    assert m.count_params() == 4 * (3 * 4 + 4 * 4 + 4) + 5
    lines = []
    m.summary(print_fn=lines.append)
    assert any("(None, None, 3)" in ln for ln in lines)
    back = rtrain.models.model_from_json(m.to_json())
    assert back.input_shape == (None, None, 3)
    rng = np.random.default_rng(2)
    x = rng.normal(size=(40, 6, 3)).astype(np.float32)
    x[::4, 4:] = 0.0  # padded, masked steps
    y = x[:, :, 1].sum(axis=1, keepdims=True).astype(np.float32) * 0.3
    for model in (m, back):
        model.compile("adam", "mse", client=client, batch_size=8)
        h = model.fit(x, y, epochs=2, verbose=0)
        assert np.isfinite(h.history["loss"]).all()
        assert tuple(model.compiled.input_shape) == (6, 3)
    with pytest.raises(ValueError, match="Flatten needs fixed input dims"):
        rtrain.Sequential([L.Conv1D(2, 3, input_shape=(None, 3)), L.Flatten(),
                           L.Dense(1)]).count_params()


def test_tfjs_wrapped_model_binds_null_dims(client):
    """A TF.js model.json (the model under modelTopology) with a null
    length is bound by fit too."""
    spec = json.dumps({"format": "layers-model", "modelTopology": {
        "class_name": "Sequential", "config": {"name": "s", "layers": [
            {"class_name": "GRU", "config": {"name": "g", "units": 3,
                                             "batch_input_shape": [None, None, 2],
                                             "dropout": 0.1}},
            {"class_name": "Dense", "config": {"name": "d", "units": 1}}]}}})
    m = client.compile(spec, optimizer="adam", loss="mse", batch_size=4)
    x = np.random.default_rng(4).normal(size=(16, 9, 2)).astype(np.float32)
    m.fit(x, x[:, 0, :1], epochs=1, verbose=0)
    assert tuple(m.input_shape) == (9, 2)
