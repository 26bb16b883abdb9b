"""Trains iris through an installed rtrain package (a venv's pip install)
against a real rtraind: the Keras-like API end to end.

usage: VENV/bin/python train_iris.py ADDR VENV LIBDIR
The package must come from VENV (not a build tree), its extension must have
loaded librtrain from LIBDIR, and the fit must learn iris (val_accuracy >=
0.9 after 60 epochs, as tests/cli/cli_e2e.sh's fit; History's keys are
Keras')."""
import os
import sys

import numpy as np

addr, venv, libdir = sys.argv[1:4]
import rtrain  # noqa: E402
from rtrain import layers as L  # noqa: E402

where = os.path.realpath(rtrain.__file__)
assert where.startswith(os.path.realpath(venv) + "/"), where
maps = open("/proc/self/maps").read().split("\n")
libs = {line.split()[-1] for line in maps if "librtrain.so" in line}
assert libs and all(os.path.dirname(os.path.realpath(p)) == os.path.realpath(libdir)
                    for p in libs), (libs, libdir)

data = np.loadtxt("/usr/lib/python3/dist-packages/sklearn/datasets/data/iris.csv",
                  delimiter=",", skiprows=1)
rng = np.random.RandomState(0)
idx = rng.permutation(len(data))
x, y = data[idx, :4].astype(np.float32), data[idx, 4].astype(np.int64)
rtrain.connect(addr, timeout=30)
m = rtrain.Sequential([L.Dense(16, activation="relu", input_shape=(4,)),
                       L.Dense(3, activation="softmax")])
m.compile(optimizer=rtrain.optimizers.Adam(0.02),
          loss="sparse_categorical_crossentropy", metrics=["accuracy"])
h = m.fit(x[:120], y[:120], batch_size=20, epochs=60, verbose=0,
          validation_data=(x[120:], y[120:]))
assert sorted(h) == ["accuracy", "loss", "val_accuracy", "val_loss"], sorted(h)
assert len(h["loss"]) == 60 and h["loss"][-1] < h["loss"][0], h["loss"]
acc = h["val_accuracy"][-1]
assert acc >= 0.9, acc
pred = m.predict(x[120:]).argmax(axis=1)
assert abs(float((pred == y[120:]).mean()) - acc) < 1e-6, (pred, acc)
print("iris through %s: val_accuracy %.4f, rtrain %s" % (where, acc, rtrain.__version__))
