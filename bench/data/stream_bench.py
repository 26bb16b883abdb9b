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


DAEMON_ARGS = []


def start(exe, spool, extra=()):
    p = subprocess.Popen([exe, "--listen", "127.0.0.1:0", "--spool-dir", spool,
                          "--log-level", "warn", *DAEMON_ARGS, *extra],
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


def upload_fashion(c, fmt, storage, fm, tfr):
    if fmt == "idx":
        ds = c.upload_idx(os.path.join(fm, "train-images-idx3-ubyte.gz"),
                          os.path.join(fm, "train-labels-idx1-ubyte.gz"), storage=storage)
    else:
        ds = c.upload_tfrecord(tfr, {"image": "png", "label": "int64"},
                               image_size=(28, 28), channels=1, storage=storage)
    assert ds.streamed == (storage == "stream")
    return ds


def first_step(exe, spool, how, model, fm, tfr):
    """Time to first step on a fresh daemon: upload, compile, one step."""
    p, addr = start(exe, spool)
    try:
        c = rtrain.connect(addr, timeout=600)
        t0 = time.perf_counter()
        ds = upload_fashion(c, *how.split("-"), fm, tfr)
        m = compile_on(c, model)
        m.fit(ds, epochs=1, steps_per_epoch=1, verbose=0)
        t = time.perf_counter() - t0
        c.close()
        return t
    finally:
        stop(p)


def epochs_pair(exe, spool, fmt, model, fm, tfr, reps):
    """One daemon holding the set in memory and streamed, a program on
    each (same seed); after a warm-up epoch each, reps epochs of each,
    alternating, so both see the same load. Returns ([mem s], [stream s])."""
    p, addr = start(exe, spool)
    try:
        c = rtrain.connect(addr, timeout=600)
        sets = [upload_fashion(c, fmt, st, fm, tfr) for st in ("memory", "stream")]
        progs = [compile_on(c, model) for _ in sets]
        for m, ds in zip(progs, sets):
            m.fit(ds, epochs=1, verbose=0)
        out = ([], [])
        for _ in range(reps):
            for k, (m, ds) in enumerate(zip(progs, sets)):
                t = time.perf_counter()
                m.fit(ds, epochs=1, verbose=0)
                out[k].append(time.perf_counter() - t)
        c.close()
        return out
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


FOLDER_PATHS = (("compute", "in memory, no augmentation (compute only)"),
                ("memory", "in memory, augmentation pass per epoch"),
                ("stream", "streamed: 8-bit rows augmented per batch"))


def folder_epochs(exe, spool, folder, reps):
    """One daemon, the folder three ways (FOLDER_PATHS), a program on each;
    after a warm-up epoch each, reps epochs of each, alternating. Returns
    {how: [seconds per step]}."""
    p, addr = start(exe, spool)
    try:
        c = rtrain.connect(addr, timeout=600)
        runs = []
        for how, _ in FOLDER_PATHS:
            aug = None if how == "compute" else {"flip": True, "crop": 4, "brightness": 0.1,
                                                  "contrast": 0.1}
            ds = c.upload_image_folder(folder, image_size=(64, 64), mean=0.5, std=0.25,
                                       augment=aug,
                                       storage="stream" if how == "stream" else "memory")
            assert ds.streamed == (how == "stream")
            m = c.compile(image_cnn(), optimizer=rtrain.optimizers.Adam(0.001),
                          loss="sparse_categorical_crossentropy", metrics=["accuracy"],
                          batch_size=64, seed=1)
            m.fit(ds, epochs=1, verbose=0)
            runs.append((how, m, ds))
        out = {how: [] for how, _ in FOLDER_PATHS}
        for _ in range(reps):
            for how, m, ds in runs:
                t = time.perf_counter()
                m.fit(ds, epochs=1, verbose=0)
                out[how].append((time.perf_counter() - t) / ((ds.samples + 63) // 64))
        c.close()
        return out
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
    ap.add_argument("--epochs", type=int, default=7, help="alternating epochs per path")
    ap.add_argument("--threads", type=int, default=0,
                    help="rtraind --threads (0: its default, the CPUs)")
    ap.add_argument("--skip-fashion", action="store_true")
    ap.add_argument("--no-map", action="store_true",
                    help="rtraind --map-spool-below 0: streamed sets read by the workers")
    a = ap.parse_args()
    if a.threads:
        DAEMON_ARGS.extend(["--threads", str(a.threads)])
    if a.no_map:
        DAEMON_ARGS.extend(["--map-spool-below", "0"])
    tmp = tempfile.mkdtemp(prefix="stream_bench.")
    try:
        run(a, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(a, tmp):
    spool = os.path.join(tmp, "spool")
    os.makedirs(spool)
    if not a.skip_fashion:
        fashion(a, tmp, spool)
    if not a.skip_folder:
        folder(a, tmp, spool)


def fashion(a, tmp, spool):
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
    names = {"idx": "IDX.gz", "tfr": "TFRecord PNG"}
    for model in models:
        print("\n%s, batch 128" % ("MLP 784-128-10" if model == "mlp" else
                                   "CNN of docs/fashion-mnist.md"))
        ttfs = {}
        for _ in range(a.reps):  # interleaved, so load drifts hit all four
            for fmt in names:
                for st in ("memory", "stream"):
                    ttfs.setdefault((fmt, st), []).append(
                        first_step(a.rtraind, spool, fmt + "-" + st, model, a.fashion, tfr))
        print("time to first step (fresh daemon: upload, compile, one step), median of %d"
              % a.reps)
        print("%-14s %12s %12s %9s" % ("data", "memory s", "streamed s", "ratio"))
        for fmt, name in names.items():
            tm, ts = med(ttfs[(fmt, "memory")]), med(ttfs[(fmt, "stream")])
            print("%-14s %12.3f %12.3f %8.2fx" % (name, tm, ts, ts / tm))
        print("epoch (one daemon, memory and streamed epochs alternating), median of %d"
              % a.epochs)
        print("%-14s %12s %12s %9s %14s" % ("data", "memory s", "streamed s", "ratio",
                                            "pair ratios"))
        for fmt, name in names.items():
            em, es = epochs_pair(a.rtraind, spool, fmt, model, a.fashion, tfr, a.epochs)
            ratios = sorted(s_ / m_ for m_, s_ in zip(em, es))
            print("%-14s %12.3f %12.3f %8.2fx   %s" % (name, med(em), med(es),
                                                      med(es) / med(em),
                                                      " ".join("%.2f" % r for r in ratios)))


def folder(a, tmp, spool):
    fdir = os.path.join(tmp, "imgs")
    subprocess.run(["/usr/bin/python3", os.path.join(SRC, "tests", "data", "gen_images.py"),
                    fdir, str(a.images), "0", "64"], check=True)
    res = folder_epochs(a.rtraind, spool, os.path.join(fdir, "train"), a.epochs)
    base = med(res["compute"])
    print("\nImage folder: %d JPEGs 64x64, CNN conv16-pool-conv32-pool-dense, batch 64; "
          "one daemon, epochs alternating, median of %d" % (3 * a.images, a.epochs))
    print("%-44s %10s %11s   %s" % ("path", "ms/step", "vs compute", "per epoch vs compute"))
    for how, name in FOLDER_PATHS:
        s_ = med(res[how])
        ratios = sorted(x / y for x, y in zip(res[how], res["compute"]))
        print("%-44s %10.2f %10.2fx   %s" % (name, s_ * 1e3, s_ / base,
                                            " ".join("%.2f" % r for r in ratios)))


if __name__ == "__main__":
    main()
