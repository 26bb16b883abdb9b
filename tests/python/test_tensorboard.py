"""TensorBoard event files from rtrain.callbacks.TensorBoard and the CLI's
--tensorboard, read back by an independent reader (tfevents.py: its own
CRC32C and protobuf wire decoder, by TensorBoard's field numbers) and
checked against the fit's own history: Keras' layout and tags, the per-call
timing scalars."""
import csv
import os
import re
import struct
import subprocess

import numpy as np
import pytest

import rtrain
from rtrain import callbacks as C
from rtrain import layers as L

import tfevents

NAME = re.compile(r"^events\.out\.tfevents\.\d{10}\.[^/]+\.\d+\.\d+\.v2$")


def f32(x):
    return float(np.float32(x))


def check_file(run_dir):
    name, evs = tfevents.read_run(run_dir)
    assert NAME.match(name), name
    # The first record is the file version, as TensorFlow's writers have it.
    assert evs[0].what == "file_version"
    assert evs[0].file_version == "brain.Event:2"
    assert evs[0].wall_time > 1.5e9
    assert all(e.what == "summary" for e in evs[1:])
    return tfevents.scalars(evs)


def test_reader_on_known_bytes():
    """The reader against published encodings, not against rtrain's writer:
    CRC-32C's check value, the protobuf encoding guide's 150 (08 96 01) and
    "testing" (12 07 ...), a negative int64 as ten bytes, and an Event of
    TensorBoard's numbers put together by hand."""
    assert tfevents.crc32c(b"123456789") == 0xE3069283
    assert tfevents.fields(bytes.fromhex("089601")) == [(1, 0, 150)]
    assert tfevents.fields(bytes.fromhex("120774657374696e67")) == [(2, 2, b"testing")]
    assert tfevents.varint(bytes.fromhex("feffffffffffffffff01"), 0) == (2**64 - 2, 10)
    value = b"\x0a\x04loss" + b"\x15" + struct.pack("<f", 0.5)
    ev = (b"\x09" + struct.pack("<d", 1.7e9) + b"\x10\x07"
          + b"\x2a" + bytes([len(value) + 2]) + b"\x0a" + bytes([len(value)]) + value)
    e = tfevents.Event(ev)
    assert (e.wall_time, e.step, e.what) == (1.7e9, 7, "summary")
    assert [(v.tag, v.what, v.simple_value) for v in e.summary] == [
        ("loss", "simple_value", 0.5)]
    neg = tfevents.Event(b"\x10" + bytes.fromhex("feffffffffffffffff01"))
    assert (neg.step, neg.what) == (-2, None)
    for bad in (b"\x08\x01",                 # step's number with wall_time's type
                b"\x1a\x05ab",               # truncated string
                b"\x30\x01",                 # field 6: not one rtrain writes
                b"\x1a\x00\x2a\x00"):          # two of the oneof
        with pytest.raises(AssertionError):
            tfevents.Event(bad)


def check_calls(sc, timings):
    """Each call's account under timing/<Method>/<part>_ms, step = that
    method's count, in the order the calls were made."""
    by_method = {}
    for t in timings:
        by_method.setdefault(t["method"], []).append(t)
    assert by_method
    for meth, ts in by_method.items():
        rt = sc["timing/%s/round_trip_ms" % meth]
        assert [s for s, _ in rt] == list(range(len(ts)))
        for (s, v), t in zip(rt, ts):
            assert v == f32(t["round_trip_ns"] / 1e6)
        for part in ("client_encode", "wire", "client_decode", "unattributed"):
            got = [v for _, v in sc["timing/%s/%s_ms" % (meth, part)]]
            assert got == [f32(t[part + "_ns"] / 1e6) for t in ts], part
        if all(t["has_server"] for t in ts):
            got = [v for _, v in sc["timing/%s/execute_ms" % meth]]
            assert got == [f32(t["execute_ns"] / 1e6) for t in ts]


@pytest.mark.parametrize("spx", ["auto", None])
def test_callback_matches_history(client, iris, tmp_path, spx):
    xtr, ytr, xte, yte = iris
    m = rtrain.Sequential([L.Dense(16, activation="relu", input_shape=(4,)),
                           L.Dense(3, activation="softmax")])
    m.compile(optimizer=rtrain.optimizers.Adam(0.05),
              loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    logdir = tmp_path / "logs"
    h = m.fit(xtr, ytr, epochs=4, batch_size=16, verbose=0,
              validation_data=(xte, yte), steps_per_execution=spx,
              callbacks=[C.TensorBoard(log_dir=str(logdir),
                                       write_steps_per_second=True)])
    assert sorted(os.listdir(logdir)) == ["train", "validation"]
    tr = check_file(logdir / "train")
    va = check_file(logdir / "validation")
    for k in ("loss", "accuracy"):
        assert tr["epoch_" + k] == [(e, f32(v)) for e, v in enumerate(h[k])]
        assert va["epoch_" + k] == [(e, f32(v))
                                    for e, v in enumerate(h["val_" + k])]
    assert [s for s, _ in tr["epoch_steps_per_second"]] == [0, 1, 2, 3]
    assert all(v > 0 for _, v in tr["epoch_steps_per_second"])
    assert not any(t.startswith("timing/") for t in va)
    assert not any(t.startswith("epoch_val") for t in tr)
    # every remote call of the fit, uploads included
    check_calls(tr, h.timings)
    meths = {t["method"] for t in h.timings}
    assert ("RunSteps" if spx else "Fit") in meths


def test_callback_rejects_what_it_cannot_write(tmp_path):
    with pytest.raises(ValueError, match="histogram_freq"):
        C.TensorBoard(str(tmp_path), histogram_freq=1)
    with pytest.raises(ValueError, match="update_freq"):
        C.TensorBoard(str(tmp_path), update_freq="batch")
    f = tmp_path / "file"
    f.write_text("")
    cb = C.TensorBoard(str(f / "logs"))
    with pytest.raises(OSError, match="cannot make"):
        cb.on_train_begin()


@pytest.mark.parametrize("spc", ["7", "stream"])
def test_cli_matches_csv_log(daemon, tmp_path, spc):
    cli = os.environ["RTRAIN_CLI"]
    ex = os.path.join(os.environ["RT_SOURCE_DIR"], "examples", "iris")
    logdir = tmp_path / "tb"
    r = subprocess.run(
        [cli, "fit", "--server", daemon.addr, "--model", ex + "/model.json",
         "--data", ex + "/train_shuffled.csv", "--val", ex + "/val_shuffled.csv",
         "--loss", "sparse_categorical_crossentropy", "--lr", "0.02",
         "--batch-size", "20", "--epochs", "5", "--seed", "1",
         "--steps-per-call", spc, "--csv-log", str(tmp_path / "log.csv"),
         "--tensorboard", str(logdir), "--trace", str(tmp_path / "t.json")],
        capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(open(tmp_path / "log.csv")))
    assert len(rows) == 5
    tr = check_file(logdir / "train")
    va = check_file(logdir / "validation")
    for k in ("loss", "accuracy"):
        assert tr["epoch_" + k] == [(int(w["epoch"]), f32(w[k])) for w in rows]
        assert va["epoch_" + k] == [(int(w["epoch"]), f32(w["val_" + k]))
                                    for w in rows]
    meth = "RunSteps" if spc == "7" else "Fit"
    rt = tr["timing/%s/round_trip_ms" % meth]
    # 120 samples / 20 = 6 steps an epoch: one call of 6 a K=7 epoch
    assert [s for s, _ in rt] == list(range(5 if spc == "7" else 1))
    assert all(v > 0 for _, v in rt)
    assert "timing/%s/execute_ms" % meth in tr


def test_cli_unwritable_dir(daemon, tmp_path):
    cli = os.environ["RTRAIN_CLI"]
    ex = os.path.join(os.environ["RT_SOURCE_DIR"], "examples", "iris")
    (tmp_path / "f").write_text("")
    r = subprocess.run(
        [cli, "fit", "--server", daemon.addr, "--model", ex + "/model.json",
         "--data", ex + "/train_shuffled.csv",
         "--loss", "sparse_categorical_crossentropy", "--epochs", "1",
         "--tensorboard", str(tmp_path / "f" / "tb")],
        capture_output=True, text=True, timeout=60)
    assert r.returncode == 4, r.stderr
    assert "--tensorboard" in r.stderr and "cannot make" in r.stderr
