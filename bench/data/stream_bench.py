#!/usr/bin/python3
"""Streamed datasets against in-memory ones, measured in the same run.

Fashion-MNIST (the real IDX files of Debian's dataset-fashion-mnist, 60,000
28 x 28 images) three ways: the IDX.gz pair (in memory: IDX is never
streamed), and the same images as a TFRecord of PNG-encoded tf.train.Example
records (as tensorflow_datasets stores them), in memory and streamed. For
each: time to first step (a fresh daemon; upload, compile, one training
step) and the time of a training epoch (the second one), with a small MLP
(data-bound: the decode is most of an epoch) and with the CNN of
docs/fashion-mnist.md (compute-bound).

Then an image folder (JPEG, 64 x 64, random crop, flip, brightness and
contrast): the step time of a CNN on it streamed (decode and augmentation on
the workers, overlapping the steps) against the compute-only step time
(the same images in memory without augmentation: nothing to decode or
draw), and against in memory with augmentation (the daemon's per-epoch
augmentation pass).

Every figure is the median of --reps runs, each on a fresh daemon.

Usage: stream_bench.py RTRAIND [--reps 3] [--fashion DIR] [--images N]
                       [--skip-cnn]
(PYTHONPATH must hold the built rtrain module: build/python)
"""
import argparse
import io
import os
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(SRC, "tests", "data"))
from gen_tfrecord import example, frame  # noqa: E402

import rtrain  # noqa: E402


def start(exe, spool, extra=()):
    p = subprocess.Popen([exe, "--listen", "127.0.0.1:0", "--spool-dir", spool,
                          "--log-level", "warn", *extra],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    for line in p.stdout:
        m = re.search(r"rtraind listening on (127\.0\.0\.1:\d+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()
            return p, m.group(1)
    raise SystemExit("rtraind did not start")


def stop(p):
    p.terminate()
    p.wait()


def read_idx(path):
    import gzip
    with gzip.open(path, "rb") as f:
        b = f.read()
    nd = b[3]
    dims = struct.unpack(">%dI" % nd, b[4:4 + 4 * nd])
    return np.frombuffer(b, np.uint8, offset=4 + 4 * nd).reshape(dims)


def write_tfrecord(path, images, labels):
    with open(path, "wb") as f:
        for im, y in zip(images, labels):
            buf = io.BytesIO()
            Image.fromarray(im).save(buf, "PNG")
            f.write(frame(example({"image": ("bytes", [buf.getvalue()]),
                                   "label": ("int64", [int(y)])})))


def mlp():
    return rtrain.Sequential([
        rtrain.layers.Flatten(input_shape=(28, 28, 1)),
        rtrain.layers.Dense(128, activation="relu"),
        rtrain.layers.Dense(10, activation="softmax")])


def compile_on(c, model):
    spec = open(os.path.join(SRC, "bench", "conv", "fashion_cnn.json")).read() \
        if model == "cnn" else mlp()
    return c.compile(spec, optimizer=rtrain.optimizers.Adam(0.001),
                     loss="sparse_categorical_crossentropy", metrics=["accuracy"],
                     batch_size=128, seed=1)


def fashion_run(exe, spool, how, model, fm, tfr):
    """(time to first step, epoch time) on a fresh daemon."""
    p, addr = start(exe, spool)
    try:
        c = rtrain.connect(addr, timeout=600)
        t0 = time.perf_counter()
        fmt, storage = how.split("-")
        if fmt == "idx":
            ds = c.upload_idx(os.path.join(fm, "train-images-idx3-ubyte.gz"),
                              os.path.join(fm, "train-labels-idx1-ubyte.gz"), storage=storage)
        else:
            ds = c.upload_tfrecord(tfr, {"image": "png", "label": "int64"},
                                   image_size=(28, 28), channels=1, storage=storage)
        assert ds.streamed == (storage == "stream")
        m = compile_on(c, model)
        m.fit(ds, epochs=1, steps_per_epoch=1, verbose=0)
        ttfs = time.perf_counter() - t0
        m.fit(ds, epochs=1, verbose=0)  # the rest of a first epoch's worth
        t1 = time.perf_counter()
        m.fit(ds, epochs=1, verbose=0)
        epoch = time.perf_counter() - t1
        c.close()
        return ttfs, epoch
    finally:
        stop(p)


def image_cnn():
    return rtrain.Sequential([
        rtrain.layers.Conv2D(16, 3, padding="same", activation="relu", input_shape=(64, 64, 3)),
        rtrain.layers.MaxPooling2D(2),
        rtrain.layers.Conv2D(32, 3, padding="same", activation="relu"),
        rtrain.layers.MaxPooling2D(2),
        rtrain.layers.Flatten(),
        rtrain.layers.Dense(3, activation="softmax")])


def folder_run(exe, spool, folder, how):
    """Seconds per step of a training epoch (the second one)."""
    p, addr = start(exe, spool)
    try:
        c = rtrain.connect(addr, timeout=600)
        aug = None if how == "compute" else {"flip": True, "crop": 4, "brightness": 0.1,
                                              "contrast": 0.1}
        ds = c.upload_image_folder(folder, image_size=(64, 64), mean=0.5, std=0.25,
                                   augment=aug,
                                   storage="stream" if how == "stream" else "memory")
        m = c.compile(image_cnn(), optimizer=rtrain.optimizers.Adam(0.001),
                      loss="sparse_categorical_crossentropy", metrics=["accuracy"],
                      batch_size=64, seed=1)
        m.fit(ds, epochs=1, verbose=0)
        t = time.perf_counter()
        m.fit(ds, epochs=1, verbose=0)
        steps = (ds.samples + 63) // 64
        return (time.perf_counter() - t) / steps
    finally:
        stop(p)


def med(xs):
    return statistics.median(xs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("rtraind")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--fashion", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--images", type=int, default=1000, help="per class, 3 classes")
    ap.add_argument("--skip-cnn", action="store_true")
    ap.add_argument("--skip-folder", action="store_true")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="stream_bench.")
    try:
        run(a, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(a, tmp):
    spool = os.path.join(tmp, "spool")
    os.makedirs(spool)

    x = read_idx(os.path.join(a.fashion, "train-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(a.fashion, "train-labels-idx1-ubyte.gz"))
    tfr = os.path.join(tmp, "fashion-train.tfrecord")
    write_tfrecord(tfr, x, y)
    print("Fashion-MNIST train: %d images; IDX.gz %.1f MB, TFRecord of PNGs %.1f MB; "
          "%d cores, median of %d" % (len(x), (os.path.getsize(os.path.join(
              a.fashion, "train-images-idx3-ubyte.gz")) + os.path.getsize(os.path.join(
                  a.fashion, "train-labels-idx1-ubyte.gz"))) / 1e6,
              os.path.getsize(tfr) / 1e6, os.cpu_count(), a.reps))
    models = ["mlp"] if a.skip_cnn else ["mlp", "cnn"]
    names = {"idx-memory": "IDX.gz, in memory", "idx-stream": "IDX.gz, streamed",
             "tfr-memory": "TFRecord PNG, in memory", "tfr-stream": "TFRecord PNG, streamed"}
    for model in models:
        res = {k: [] for k in names}
        for _ in range(a.reps):
            for how in res:  # interleaved, so load drifts hit all four
                res[how].append(fashion_run(a.rtraind, spool, how, model, a.fashion, tfr))
        print("\n%s, batch 128" % ("MLP 784-128-10" if model == "mlp" else
                                   "CNN of docs/fashion-mnist.md"))
        print("%-26s %13s %9s %13s %9s %14s" % ("path", "first step s", "vs mem", "epoch s",
                                               "vs mem", "epochs (all)"))
        for how, name in names.items():
            peer = how.split("-")[0] + "-memory"
            t, tp = med([r[0] for r in res[how]]), med([r[0] for r in res[peer]])
            e, ep = med([r[1] for r in res[how]]), med([r[1] for r in res[peer]])
            print("%-26s %13.3f %8.2fx %13.3f %8.2fx %14s" % (
                name, t, t / tp, e, e / ep, " ".join("%.3f" % r[1] for r in res[how])))
    if a.skip_folder:
        return

    folder = os.path.join(tmp, "imgs")
    subprocess.run(["/usr/bin/python3", os.path.join(SRC, "tests", "data", "gen_images.py"),
                    folder, str(a.images), "0", "64"], check=True)
    res = {k: [] for k in ("compute", "memory", "stream")}
    for _ in range(a.reps):
        for how in res:
            res[how].append(folder_run(a.rtraind, spool, os.path.join(folder, "train"), how))
    base = med(res["compute"])
    print("\nImage folder: %d JPEGs 64x64, CNN conv16-pool-conv32-pool-dense, batch 64"
          % (3 * a.images))
    print("%-46s %12s %12s" % ("path", "ms/step", "vs compute"))
    for how, name in (("compute", "in memory, no augmentation (compute only)"),
                      ("memory", "in memory, augmentation pass per epoch"),
                      ("stream", "streamed: decode+augment on workers")):
        s = med(res[how])
        print("%-46s %12.2f %11.2fx" % (name, s * 1e3, s / base))


if __name__ == "__main__":
    main()
