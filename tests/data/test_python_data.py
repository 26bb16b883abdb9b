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
