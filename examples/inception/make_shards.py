#!/usr/bin/python3
"""Fashion-MNIST as the Inception v3 paper's input pipeline had ImageNet:
gzip TFRecord shards of tf.train.Example, one JPEG per record under the
standard keys of TensorFlow's build_imagenet_data.py:

    image/encoded      bytes  the JPEG (RGB: the grey image in 3 channels)
    image/class/label  int64  the class, 0-9
    image/height       int64  SIZE
    image/width        int64  SIZE
    image/format       bytes  b"JPEG"

Each 28x28 image is resized to SIZE x SIZE (bilinear, PIL) so that it
fits the model's input (InceptionV3 needs 75x75 or larger).

Usage: make_shards.py OUTDIR [--split train|test] [--count N] [--shards S]
                      [--size SIZE] [--quality Q]
    Writes OUTDIR/{split}-0000i-of-0000S.tfrecord.gz from the first N images
    (default all) of Debian's dataset-fashion-mnist.
"""
import argparse
import gzip
import io
import os
import struct
import sys

from PIL import Image

# the TFRecord framing (CRC32C) and protobuf encoding, written out in Python
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "tests", "data"))
from gen_tfrecord import example, frame  # noqa: E402

DATA = "/usr/share/datasets/fashion-mnist"
FILES = {"train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
         "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")}


def idx(path):
    b = gzip.open(path).read()
    nd = b[3]
    dims = struct.unpack(">%dI" % nd, b[4:4 + 4 * nd])
    return dims, b[4 + 4 * nd:]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--split", choices=FILES, default="train")
    ap.add_argument("--count", type=int, default=0, help="first N images (default all)")
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--size", type=int, default=75)
    ap.add_argument("--quality", type=int, default=95)
    a = ap.parse_args()
    imf, lbf = (os.path.join(DATA, f) for f in FILES[a.split])
    if not os.path.exists(imf):
        sys.exit("make_shards: needs Debian's dataset-fashion-mnist (%s; scripts/deps.sh)" % DATA)
    (n, h, w), pix = idx(imf)
    _, labels = idx(lbf)
    if a.count:
        n = min(n, a.count)
    os.makedirs(a.outdir, exist_ok=True)
    per = (n + a.shards - 1) // a.shards
    for s in range(a.shards):
        path = os.path.join(a.outdir, "%s-%05d-of-%05d.tfrecord.gz" % (a.split, s, a.shards))
        # mtime 0: the same images give the same bytes
        with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
            for i in range(s * per, min(n, (s + 1) * per)):
                im = Image.frombytes("L", (w, h), pix[i * h * w:(i + 1) * h * w])
                im = im.resize((a.size, a.size), Image.BILINEAR).convert("RGB")
                jpg = io.BytesIO()
                im.save(jpg, "JPEG", quality=a.quality)
                f.write(frame(example({
                    "image/encoded": ("bytes", [jpg.getvalue()]),
                    "image/class/label": ("int64", [labels[i]]),
                    "image/height": ("int64", [a.size]),
                    "image/width": ("int64", [a.size]),
                    "image/format": ("bytes", [b"JPEG"])})))
    print("%d %s images, %dx%d, in %d shards under %s" % (n, a.split, a.size, a.size,
                                                           a.shards, a.outdir))


if __name__ == "__main__":
    main()
