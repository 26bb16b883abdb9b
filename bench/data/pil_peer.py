#!/usr/bin/python3
"""The PIL peer of bench_image, and its test images.

  pil_peer.py make DIR N        write N synthetic 500x375 JPEG photos (q 90)
  pil_peer.py run DIR REPS SIZE one line per rep: images/s of PIL decode +
                                bilinear resize to SIZE x SIZE + the same
                                augmentation as rtrain (flip, crop by a
                                4-pixel zero-padded shift, brightness,
                                contrast) + normalisation, in numpy float32
"""
import io
import os
import random
import sys
import time

import numpy as np
from PIL import Image


def make(d, n):
    os.makedirs(d, exist_ok=True)
    rng = np.random.RandomState(5)
    yy, xx = np.mgrid[0:375, 0:500].astype(np.float32)
    for i in range(n):
        a, b, c = rng.uniform(0.005, 0.05, 3)
        img = np.stack([127 + 100 * np.sin(a * xx + b * yy + k + i) for k in range(3)], -1)
        img += rng.normal(0, 12, img.shape)
        im = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")
        im.save(os.path.join(d, "%04d.jpg" % i), "JPEG", quality=90)


def run(d, reps, size):
    files = sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".jpg"))
    blobs = [open(f, "rb").read() for f in files]
    rnd = random.Random(1)
    mean = np.float32(0.5)
    std = np.float32(0.25)
    for _ in range(reps):
        t0 = time.perf_counter()
        for b in blobs:
            im = Image.open(io.BytesIO(b)).convert("RGB").resize((size, size), Image.BILINEAR)
            x = np.asarray(im, dtype=np.float32) * np.float32(1 / 255)
            if rnd.random() < 0.5:
                x = x[:, ::-1]
            dx, dy = rnd.randint(-4, 4), rnd.randint(-4, 4)
            x = np.roll(np.roll(x, dy, 0), dx, 1)  # shift; the zero border below
            if dy > 0:
                x[:dy] = 0
            elif dy < 0:
                x[dy:] = 0
            if dx > 0:
                x[:, :dx] = 0
            elif dx < 0:
                x[:, dx:] = 0
            m = x.mean(axis=(0, 1))
            x = (x - m) * np.float32(rnd.uniform(0.8, 1.2)) + m + np.float32(rnd.uniform(-0.1, 0.1))
            x = (np.clip(x, 0, 1) - mean) / std
        print("%.3f" % (len(blobs) / (time.perf_counter() - t0)), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], int(sys.argv[3]))
    else:
        run(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
