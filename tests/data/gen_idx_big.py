#!/usr/bin/python3
"""A large, compressible IDX.gz pair for the larger-than-memory test: N
rows of 3072 u8 values (zeros but a bright block whose place is the class,
and 64 random values so it inflates about 40x, under the daemon's
inflate ratio cap), labels i % 10, gzip level 1. Written a chunk at a time.
usage: gen_idx_big.py OUT_DIR N"""
import gzip
import os
import struct
import sys

import numpy as np

out, n = sys.argv[1], int(sys.argv[2])
os.makedirs(out, exist_ok=True)
per = 3072
rng = np.random.default_rng(1)
proto = np.zeros((10, per), np.uint8)
for k in range(10):
    proto[k, k * 300:k * 300 + 200] = 255
with gzip.open(os.path.join(out, "big-images-idx2-ubyte.gz"), "wb", compresslevel=1) as f:
    f.write(struct.pack(">BBBBII", 0, 0, 8, 2, n, per))
    step = 10000
    for s in range(0, n, step):
        idx = np.arange(s, min(n, s + step)) % 10
        rows = proto[idx]
        rows[:, per - 64:] = rng.integers(0, 256, (len(idx), 64), dtype=np.uint8)
        f.write(rows.tobytes())
with gzip.open(os.path.join(out, "big-labels-idx1-ubyte.gz"), "wb") as f:
    f.write(struct.pack(">BBBBI", 0, 0, 8, 1, n))
    f.write((np.arange(n) % 10).astype(np.uint8).tobytes())
