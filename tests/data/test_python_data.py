"""The Python client's TFRecord and image-folder uploads against a real
rtraind: a features dict like tf.io.parse_single_example's, Datasets in
fit/evaluate, per-shard dedup, bad-record policies, seeded determinism."""
import os
import subprocess

import numpy as np
import pytest

import rtrain

SRC = os.environ.get("RT_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
GEN = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("tfr")
    subprocess.run(["/usr/bin/python3", os.path.join(GEN, "gen_tfrecord.py"), str(d)], check=True)
    subprocess.run(["/usr/bin/python3", os.path.join(GEN, "gen_images.py"), str(d / "imgs"),
                    "60", "20"], check=True)
    return d


def dense(client):
    return client.compile(rtrain.Sequential([
        rtrain.layers.Dense(16, activation="relu", input_shape=(4,)),
        rtrain.layers.Dense(4, activation="softmax")]),
        optimizer=rtrain.optimizers.Adam(0.02), loss="sparse_categorical_crossentropy",
        metrics=["accuracy"])


def test_feature_spec_text():
    assert rtrain._feature_spec({"image": "jpeg", "label": "int64"}) == "image:jpeg,label:int64"
    assert rtrain._feature_spec({"x": ("float", (4,)), "@f": ("float", [5, 2])}) == \
        "x:float[4],@f:float[5x2]"
    with pytest.raises(ValueError):
        rtrain._feature_spec({"x": "string"})
    with pytest.raises(ValueError):
        rtrain._feature_spec({"a,b": "int64"})


def test_tfrecord_fit_and_dedup(client, files):
    ds = client.upload_tfrecord(str(files / "num.tfrecord.gz"),
                                {"x": ("float", (4,)), "label": "int64"})
    assert isinstance(ds, rtrain.Dataset) and ds.samples == 100 and ds.x_shape == (4,)
    shards = client.upload_tfrecord(str(files / "num-0000*-of-00002.tfrecord"),
                                    {"x": ("float", (4,)), "label": "int64"})
    assert shards.samples == 100
    again = client.upload_tfrecord([str(files / "num-00000-of-00002.tfrecord"),
                                    str(files / "num-00001-of-00002.tfrecord")],
                                   {"x": ("float", (4,)), "label": "int64"})
    assert again.id == shards.id and again.info["deduplicated"] and again.info["bytes_sent"] == 0
    m = dense(client)
    h = m.fit(ds, epochs=30, batch_size=10, verbose=0, validation_data=shards)
    assert h["accuracy"][-1] >= 0.9
    loss, acc = m.evaluate(shards)
    assert acc >= 0.9


def test_bad_records(client, files):
    spec = {"x": ("float", (4,)), "label": "int64"}
    with pytest.raises(rtrain.DataLoss, match="record 3 at byte .*data CRC mismatch"):
        client.upload_tfrecord(str(files / "bad_datacrc.tfrecord"), spec)
    ds = client.upload_tfrecord(str(files / "bad_datacrc.tfrecord"), spec, on_bad_record="skip")
    assert ds.samples == 5 and ds.records_skipped == 1 and "record 3" in ds.first_skipped
    with pytest.raises(rtrain.InvalidArgument, match="record 3: feature 'x' is int64"):
        client.upload_tfrecord(str(files / "bad_type.tfrecord"), spec)
    with pytest.raises(rtrain.ResourceExhausted, match="100000 x 100000"):
        client.upload_tfrecord(str(files / "bad_bomb.tfrecord"),
                               {"image": "image", "label": "int64"}, image_size=(16, 16))
    with pytest.raises(ValueError):
        client.upload_tfrecord(str(files / "num.tfrecord"), spec, on_bad_record="ignore")
    assert client.info()["version"]


def cnn(client, seed):
    return client.compile(rtrain.Sequential([
        rtrain.layers.Conv2D(8, 3, padding="same", activation="relu", input_shape=(16, 16, 3)),
        rtrain.layers.MaxPooling2D(2),
        rtrain.layers.Flatten(),
        rtrain.layers.Dense(3, activation="softmax")]),
        optimizer=rtrain.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
        seed=seed)


def test_image_folder_deterministic(client, files):
    kw = dict(image_size=(16, 16), mean=0.5, std=0.5,
              augment={"flip": True, "crop": 2, "brightness": 0.1})
    train = client.upload_image_folder(files / "imgs" / "train", **kw)
    val = client.upload_image_folder(files / "imgs" / "val", image_size=(16, 16), mean=0.5,
                                     std=0.5)
    assert train.samples == 180 and train.x_shape == (16, 16, 3)
    ws = []
    for _ in range(2):
        m = cnn(client, 7)
        h = m.fit(train, epochs=12, batch_size=20, verbose=0, validation_data=val)
        ws.append(m.get_weights())
    assert h["val_accuracy"][-1] >= 0.9
    for a, b in zip(*ws):
        assert np.array_equal(a, b)


def test_tfrecord_defaults_from_model(client, files):
    """ImageNet-style gzip shards (image/encoded, image/class/label, ...):
    the image size and channels come from the compiled model's input, the
    label from the key ending in /label; two label-like keys are named."""
    shards = str(files / "inc-0000*-of-00002.tfrecord.gz")
    feats = {"image/encoded": "jpeg", "image/class/label": "int64"}
    with pytest.raises(ValueError, match="image_size"):
        client.upload_tfrecord(shards, feats)  # no model compiled on this client yet
    with open(os.path.join(SRC, "tests", "data", "cnn24.json")) as f:
        m = client.compile(f.read(), optimizer=rtrain.optimizers.Adam(0.01),
                           loss="sparse_categorical_crossentropy", metrics=["accuracy"],
                           batch_size=25, seed=2)
    assert m.input_shape == (24, 24, 3)
    ds = client.upload_tfrecord(shards, feats, mean=0.5, std=0.5)
    assert ds.samples == 150 and ds.x_shape == (24, 24, 3)
    h = m.fit(ds, epochs=15, verbose=0)
    assert h["accuracy"][-1] >= 0.9
    small = client.upload_tfrecord(shards, feats, image_size=(16, 16), channels=1)
    assert small.x_shape == (16, 16, 1)
    with pytest.raises(ValueError, match="'image/class/label' and 'label'"):
        client.upload_tfrecord(shards, dict(feats, label="int64"))
    byid = client.upload_tfrecord(shards, {"image/encoded": "jpeg", "class_id": "int64"},
                                  label="class_id")
    assert byid.samples == 150 and byid.x_shape == (24, 24, 3)


def test_streamed_matches_memory(client, files):
    """storage="stream": the records stay on the daemon's disk and batches
    are decoded by its workers; without shuffling the weights equal the
    in-memory ones bit for bit, augmentation included."""
    kw = dict(image_size=(16, 16), mean=0.5, std=0.5, augment={"flip": True, "crop": 2})
    mem = client.upload_image_folder(files / "imgs" / "train", storage="memory", **kw)
    st = client.upload_image_folder(files / "imgs" / "train", storage="stream", **kw)
    assert not mem.streamed and st.streamed and st.samples == mem.samples == 180
    ws = []
    for ds in (mem, st):
        m = client.compile(rtrain.Sequential([
            rtrain.layers.Conv2D(4, 3, activation="relu", input_shape=(16, 16, 3)),
            rtrain.layers.Flatten(),
            rtrain.layers.Dense(3, activation="softmax")]),
            optimizer=rtrain.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy",
            shuffle=False, seed=5)
        m.fit(ds, epochs=3, batch_size=20, verbose=0, shuffle=False)
        ws.append(m.get_weights())
    for a, b in zip(*ws):
        assert np.array_equal(a, b)
    tf = client.upload_tfrecord(str(files / "num.tfrecord"),
                                {"x": ("float", (4,)), "label": "int64"}, storage="stream",
                                shuffle_buffer=16)
    assert tf.streamed and tf.samples == 100
    with pytest.raises(ValueError):
        client.upload_tfrecord(str(files / "num.tfrecord"), {"x": "float"}, storage="disk")


def write_idx(path, arr):
    """IDX as MNIST ships it: magic 0x0000 08 NDIM, big-endian dims, u8 data, gzipped."""
    import gzip
    import struct
    hdr = struct.pack(">BBBB", 0, 0, 8, arr.ndim) + struct.pack(">%dI" % arr.ndim, *arr.shape)
    with gzip.open(path, "wb") as f:
        f.write(hdr + arr.astype(np.uint8).tobytes())


def test_idx_upload(client, tmp_path):
    """Fashion-MNIST-style IDX.gz files go up as they are and the daemon
    decodes them; a re-run sends nothing."""
    rng = np.random.default_rng(3)
    y = rng.integers(0, 10, 300).astype(np.uint8)
    x = rng.integers(0, 60, (300, 28, 28))
    for i in range(300):  # class k: rows 2k, 2k+1 bright
        x[i, 2 * y[i]:2 * y[i] + 2, :] += 150
    x = x.astype(np.uint8)
    write_idx(tmp_path / "train-images-idx3-ubyte.gz", x)
    write_idx(tmp_path / "train-labels-idx1-ubyte.gz", y)
    sent = os.path.getsize(tmp_path / "train-images-idx3-ubyte.gz") + \
        os.path.getsize(tmp_path / "train-labels-idx1-ubyte.gz")
    ds = client.upload_idx(tmp_path / "train-images-idx3-ubyte.gz",
                           tmp_path / "train-labels-idx1-ubyte.gz")
    assert ds.samples == 300 and ds.x_shape == (28, 28)
    assert ds.info["bytes_sent"] == sent and sent < x.size  # compressed, as it is
    again = client.upload_idx(tmp_path / "train-images-idx3-ubyte.gz",
                              tmp_path / "train-labels-idx1-ubyte.gz")
    assert again.id == ds.id and again.info["bytes_sent"] == 0 and again.info["deduplicated"]
    m = client.compile(rtrain.Sequential([
        rtrain.layers.Flatten(input_shape=(28, 28)),
        rtrain.layers.Dense(10, activation="softmax")]),
        optimizer=rtrain.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy",
        metrics=["accuracy"], seed=1)
    h = m.fit(ds, epochs=15, batch_size=30, verbose=0)
    assert h["accuracy"][-1] >= 0.9
    # the daemon divided by 255: the same model on x / 255 uploaded as floats agrees
    m2 = client.compile(rtrain.Sequential([
        rtrain.layers.Flatten(input_shape=(28, 28)),
        rtrain.layers.Dense(10, activation="softmax")]),
        optimizer=rtrain.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy",
        metrics=["accuracy"], seed=1)
    m2.fit(x.astype(np.float32) / 255, y.astype(np.int32), epochs=15, batch_size=30, verbose=0)
    for a, b in zip(m.get_weights(), m2.get_weights()):
        assert np.array_equal(a, b)


def test_streamed_idx_and_arrays(client, tmp_path):
    """IDX.gz and arrays streamed from the daemon's disk (storage="stream"):
    without shuffling they train to the in-memory weights bit for bit, with
    sample weights too; Predict and evaluate by Dataset read the streamed
    set; the shuffle buffer trains reproducibly."""
    rng = np.random.default_rng(5)
    y = rng.integers(0, 10, 250).astype(np.uint8)
    x = rng.integers(0, 60, (250, 28, 28))
    for i in range(250):
        x[i, 2 * y[i]:2 * y[i] + 2, :] += 150
    x = x.astype(np.uint8)
    write_idx(tmp_path / "x.gz", x)
    write_idx(tmp_path / "y.gz", y)
    mem = client.upload_idx(tmp_path / "x.gz", tmp_path / "y.gz", storage="memory")
    st = client.upload_idx(tmp_path / "x.gz", tmp_path / "y.gz", storage="stream",
                           shuffle_buffer=50)
    assert not mem.streamed and st.streamed and st.id != mem.id
    assert st.samples == 250 and st.x_shape == (28, 28) and st.info["spool_bytes"] == x.size

    def model(shuffle=False):
        return client.compile(rtrain.Sequential([
            rtrain.layers.Flatten(input_shape=(28, 28)),
            rtrain.layers.Dense(10, activation="softmax")]),
            optimizer=rtrain.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy",
            metrics=["accuracy"], seed=1, batch_size=32, shuffle=shuffle)
    ms = []
    for ds in (mem, st):
        m = model()
        m.fit(ds, epochs=3, verbose=0, shuffle=False)
        ms.append(m)
    for a, b in zip(ms[0].get_weights(), ms[1].get_weights()):
        assert np.array_equal(a, b)
    # Predict and evaluate by Dataset on the streamed set
    p_mem, p_st = ms[0].predict(mem), ms[1].predict(st)
    assert p_st.shape == (250, 10)
    assert np.array_equal(p_mem, p_st)
    assert np.array_equal(p_st, ms[1].predict(x.astype(np.float32) / 255))
    e_mem, e_st = ms[0].evaluate(mem), ms[1].evaluate(st)
    assert e_mem == e_st and e_st[1] > 0.5
    # shuffled through the buffer: reproducible, and another order than the file's
    w = []
    for _ in range(2):
        m = model(shuffle=True)
        m.fit(st, epochs=2, verbose=0)
        w.append(m.get_weights())
    for a, b in zip(*w):
        assert np.array_equal(a, b)
    assert not all(np.array_equal(a, b) for a, b in zip(w[0], ms[1].get_weights()))

    # arrays with sample weights: streamed = in memory, and the weights count
    xf = rng.normal(size=(120, 6)).astype(np.float32)
    yf = (xf[:, 0] > 0).astype(np.int32)
    sw = rng.uniform(0, 2, 120).astype(np.float32)
    dm = client.upload(xf, yf, sample_weight=sw, storage="memory")
    ds = client.upload(xf, yf, sample_weight=sw, storage="stream")
    d0 = client.upload(xf, yf, storage="stream")
    assert ds.streamed and not dm.streamed and d0.streamed
    ws = []
    for d in (dm, ds, d0):
        m = client.compile(rtrain.Sequential([rtrain.layers.Dense(2, activation="softmax",
                                                                  input_shape=(6,))]),
                           optimizer=rtrain.optimizers.SGD(0.1),
                           loss="sparse_categorical_crossentropy", seed=2, batch_size=16,
                           shuffle=False)
        m.fit(d, epochs=2, verbose=0, shuffle=False)
        ws.append(m.get_weights())
    for a, b in zip(ws[0], ws[1]):
        assert np.array_equal(a, b)
    assert not all(np.array_equal(a, b) for a, b in zip(ws[1], ws[2]))
    with pytest.raises(ValueError):
        client.upload(xf, yf, storage="disk")


def test_streamed_embedding_indices(client):
    """A streamed set is decoded batch by batch into one buffer, so every
    batch's Embedding indices are checked, not only the first one's: a bad
    index in the third batch fails fit, evaluate and predict with
    INVALID_ARGUMENT naming it, and the model keeps working."""
    rng = np.random.default_rng(5)
    x = rng.integers(0, 10, size=(40, 3)).astype(np.float32)
    y = rng.integers(0, 2, size=40).astype(np.int32)
    m = client.compile(rtrain.Sequential([
        rtrain.layers.Embedding(10, 4, input_length=3),
        rtrain.layers.Flatten(),
        rtrain.layers.Dense(2, activation="softmax")]),
        optimizer=rtrain.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy",
        batch_size=8, shuffle=False)
    good = client.upload(x, y, storage="stream")
    xb = x.copy()
    xb[21, 1] = 12.0  # batch 2 (rows 16..23), after two good batches
    bad = client.upload(xb, y, storage="stream")
    assert good.streamed and bad.streamed
    p0 = m.predict(good)
    for call in (lambda: m.predict(bad), lambda: m.evaluate(bad, verbose=0),
                 lambda: m.fit(bad, epochs=1, verbose=0, shuffle=False)):
        with pytest.raises(Exception, match="INVALID_ARGUMENT.*12.*Embedding"):
            call()
    assert np.array_equal(m.predict(good), p0)
