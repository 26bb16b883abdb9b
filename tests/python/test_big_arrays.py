"""Arrays larger than one upload can hold (GetInfo's max_upload_bytes)
reach the daemon in chunks from fit and evaluate (rtrain._feed.ArrayRows),
also when Client.upload was given them (HeldArrays, with storage="stream":
each chunk is streamed from the daemon's disk).

A daemon run with --max-dataset-bytes 1 MiB refuses the whole training
array as one upload, so there fit must send it in chunks; the reference
is the same fit on the suite's daemon, where it is one upload. Unshuffled,
both run the same batches in the same order from the same initial weights,
so the chunked fit must end on bit-identical weights: a row left out, sent
twice or out of order changes them.
"""
import numpy as np
import pytest

import rtrain
from rtrain import _feed
from rtrain import layers as L

from conftest import Daemon

LIMIT = 1 << 20  # the small daemon's --max-dataset-bytes
N, D, K = 6000, 64, 4  # x: 1.5 MB of float32, over LIMIT


@pytest.fixture(scope="module")
def small():
    d = Daemon("--max-dataset-bytes", str(LIMIT))
    yield d
    d.stop()


@pytest.fixture
def sclient(small):
    c = rtrain.connect(small.addr, timeout=30)
    yield c
    c.close()


def _data(n=N, seed=1):
    rng = np.random.RandomState(seed)
    x = rng.randn(n, D).astype(np.float32)
    w = rng.randn(D, K)
    return x, np.argmax(x @ w, axis=1).astype(np.int64)


def _build(client, seed=7):
    m = rtrain.Sequential([L.Dense(16, activation="relu", input_shape=(D,)),
                           L.Dense(K, activation="softmax")])
    m.compile(rtrain.optimizers.SGD(0.05), "sparse_categorical_crossentropy",
              metrics=["accuracy"], batch_size=32, shuffle=False, seed=seed,
              client=client)
    return m


def test_limit_reported(sclient, client):
    assert sclient.info()["limits"]["max_upload_bytes"] == LIMIT
    lim = client.info()["limits"]
    assert 0 < lim["max_upload_bytes"] <= lim["max_dataset_bytes"]


def test_one_upload_is_refused(sclient):
    """The premise: the small daemon cannot take x in one upload."""
    x, y = _data()
    assert x.nbytes > LIMIT
    with pytest.raises(rtrain.Error, match="over the limit"):
        sclient._upload(x, y.astype(np.int32), "data")


def _count_uploads(client, monkeypatch):
    """Each upload's bytes (features, labels, weights), as the client sends."""
    sizes = []
    up = client._upload

    def counted(x, y=None, name="data", sw=None, **kw):
        sizes.append(sum(a.nbytes for a in (x, y, sw) if a is not None))
        return up(x, y, name, sw, **kw)
    monkeypatch.setattr(client, "_upload", counted)
    return sizes


def test_fit_in_chunks_is_bit_identical(sclient, client, monkeypatch):
    x, y = _data()
    xv, yv = _data(2000, seed=2)  # 520,000 bytes: one upload either way
    ref, big = _build(client), _build(sclient)
    big.set_weights(ref.get_weights())
    sizes = _count_uploads(sclient, monkeypatch)
    hr = ref.fit(x, y, epochs=2, batch_size=32, shuffle=False, validation_data=(xv, yv),
                 verbose=0)
    hb = big.fit(x, y, epochs=2, batch_size=32, shuffle=False, validation_data=(xv, yv),
                 verbose=0)
    # the validation set once, then each epoch's 188 batches in chunks of
    # at most LIMIT / 2 (the chunker counts 8,448 bytes a batch: x, y and a
    # weight a row): 62 batches, 4 uploads
    assert len(sizes) == 1 + 2 * 4, sizes
    assert max(sizes[1:]) <= LIMIT // 2 and sum(sizes[1:5]) == x.nbytes + 4 * N
    for a, b in zip(ref.get_weights(), big.get_weights()):
        assert np.array_equal(a, b)
    # the epoch means are merged from the chunks' means: the same sums in
    # another order
    for k in ("loss", "accuracy", "val_loss", "val_accuracy"):
        assert hb.history[k] == pytest.approx(hr.history[k], rel=1e-6), k
    # evaluate sends the large array in chunks too; predict never uploads
    er = ref.evaluate(x, y, return_dict=True)
    eb = big.evaluate(x, y, return_dict=True)
    assert eb == pytest.approx(er, rel=1e-6)
    assert np.array_equal(ref.predict(x), big.predict(x))


def test_large_validation_and_weights_in_chunks(sclient, client):
    """validation_data and sample weights over the limit go in chunks too."""
    x, y = _data()
    sw = np.random.RandomState(3).uniform(0.5, 2.0, N).astype(np.float32)
    ref, big = _build(client), _build(sclient)
    big.set_weights(ref.get_weights())
    kw = dict(epochs=1, batch_size=32, shuffle=False, sample_weight=sw,
              validation_data=(x, y), verbose=0)
    hr, hb = ref.fit(x, y, **kw), big.fit(x, y, **kw)
    for a, b in zip(ref.get_weights(), big.get_weights()):
        assert np.array_equal(a, b)
    assert hb.history["val_loss"] == pytest.approx(hr.history["val_loss"], rel=1e-6)
    assert hb.history["loss"] == pytest.approx(hr.history["loss"], rel=1e-6)


def test_shuffled_epochs_cover_every_row():
    """shuffle=True: each epoch's batches are a permutation of all rows,
    a new one each epoch."""
    x = np.arange(100, dtype=np.float32).reshape(100, 1)
    y = np.arange(100)
    rows = _feed.ArrayRows(x, y, None, 32, shuffle=True, seed=0)
    assert len(rows) == 4
    seen = []
    for _ in range(2):
        ep = np.concatenate([rows[i][0][:, 0] for i in range(len(rows))])
        ep_y = np.concatenate([rows[i][1] for i in range(len(rows))])
        assert np.array_equal(ep, ep_y)  # x and y rows stay together
        assert sorted(ep.tolist()) == list(range(100))
        seen.append(ep)
        rows.on_epoch_end()
    assert not np.array_equal(seen[0], seen[1])
    assert not np.array_equal(seen[0], np.arange(100))


def test_shuffled_fit_in_chunks_learns(sclient):
    x, y = _data()
    m = _build(sclient)
    h = m.fit(x, y, epochs=3, batch_size=32, shuffle=True, verbose=0)
    assert all(np.isfinite(h.history["loss"]))
    assert h.history["loss"][-1] < h.history["loss"][0]
    assert h.history["accuracy"][-1] > 0.5  # 4 classes: chance is 0.25


def test_upload_over_the_limit_streams_in_chunks(sclient, client, monkeypatch):
    """Client.upload(storage="stream") of arrays over the limit keeps them
    here (HeldArrays); fit, evaluate and predict on it send the rows in
    chunks, each uploaded streamed, and give what the same calls on the
    arrays as one upload give: the same weights, bit for bit (unshuffled),
    the same History, evaluate and predictions."""
    x, y = _data()
    sw = np.random.RandomState(4).uniform(0.5, 2.0, N).astype(np.float32)
    held = sclient.upload(x, y, sample_weight=sw, storage="stream")
    assert isinstance(held, rtrain.HeldArrays) and held.id is None
    assert held.samples == N and held.x_shape == (D,) and held.streamed
    sent = []
    up = sclient._upload

    def counted(x, y=None, name="data", sw=None, **kw):
        info = up(x, y, name, sw, **kw)
        sent.append((kw.get("storage"), info.get("streamed"), x.shape[0]))
        return info
    monkeypatch.setattr(sclient, "_upload", counted)
    ref, big = _build(client), _build(sclient)
    big.set_weights(ref.get_weights())
    kw = dict(epochs=2, batch_size=32, shuffle=False, verbose=0)
    hr = ref.fit(x, y, sample_weight=sw, **kw)
    hb = big.fit(held, **kw)
    assert len(sent) == 2 * 4 and sum(n for _, _, n in sent) == 2 * N, sent
    assert all(st == 2 and streamed for st, streamed, _ in sent), sent
    for a, b in zip(ref.get_weights(), big.get_weights()):
        assert np.array_equal(a, b)
    for k in ("loss", "accuracy"):
        assert hb.history[k] == pytest.approx(hr.history[k], rel=1e-6), k
    er = ref.evaluate(x, y, sample_weight=sw, return_dict=True)
    assert big.evaluate(held, return_dict=True) == pytest.approx(er, rel=1e-6)
    assert np.array_equal(ref.predict(x), big.predict(held))
    with pytest.raises(ValueError, match="y must be None"):
        big.fit(held, y, **kw)


def test_held_validation_data_with_small_training_data(sclient, client):
    """Training data that fits one upload with validation data that does
    not (held, or arrays): the validation goes in chunks, its metrics
    combined by rows, and the fit is the one-upload fit."""
    x, y = _data()
    xt, yt = x[:1000], y[:1000]
    ref, big, big2 = _build(client), _build(sclient), _build(sclient)
    big.set_weights(ref.get_weights())
    big2.set_weights(ref.get_weights())
    kw = dict(epochs=2, batch_size=32, shuffle=False, verbose=0)
    hr = ref.fit(xt, yt, validation_data=(x, y), **kw)
    hb = big.fit(xt, yt, validation_data=sclient.upload(x, y), **kw)
    hb2 = big2.fit(xt, yt, validation_data=(x, y), **kw)
    for h in (hb, hb2):
        for k in ("loss", "val_loss", "val_accuracy"):
            assert h.history[k] == pytest.approx(hr.history[k], rel=1e-6), k
    for m in (big, big2):
        for a, b in zip(ref.get_weights(), m.get_weights()):
            assert np.array_equal(a, b)
