#!/usr/bin/python3
"""Write the TFRecord test files for tests/data (run by ctest as a fixture).

Framing follows the public TFRecord format: uint64 length (little-endian),
masked CRC32C of those 8 bytes, the data, masked CRC32C of the data. CRC32C
and the tf.train.Example protobuf encoding are written out here in pure
Python so the files do not depend on the C code they test.

Usage: gen_tfrecord.py OUTDIR
"""
import io
import os
import random
import struct
import sys
import zlib
import gzip

from PIL import Image

# ---------------------------------------------------------------- CRC32C
_T = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
    _T.append(c)


def crc32c(b):
    c = 0xFFFFFFFF
    for x in b:
        c = (c >> 8) ^ _T[(c ^ x) & 0xFF]
    return c ^ 0xFFFFFFFF


def masked(b):
    c = crc32c(b)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(data):
    n = struct.pack("<Q", len(data))
    return n + struct.pack("<I", masked(n)) + data + struct.pack("<I", masked(data))


# ------------------------------------------------------- protobuf encoding
def varint(v):
    if v < 0:
        v += 1 << 64
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def ld(field, payload):  # length-delimited
    return varint(field << 3 | 2) + varint(len(payload)) + payload


def feature(kind, values):
    if kind == "bytes":
        lst = b"".join(ld(1, v) for v in values)
        return ld(1, lst)
    if kind == "float":
        return ld(2, ld(1, struct.pack("<%df" % len(values), *values)) if values else b"")
    if kind == "int64":
        return ld(3, ld(1, b"".join(varint(v) for v in values)) if values else b"")
    raise ValueError(kind)


def features(d):
    return b"".join(ld(1, ld(1, k.encode()) + ld(2, feature(*v))) for k, v in d.items())


def example(d):
    return ld(1, features(d))


def sequence_example(context, lists):
    fl = b"".join(
        ld(1, ld(1, k.encode()) + ld(2, b"".join(ld(1, feature(kind, vals)) for vals in steps)))
        for k, (kind, steps) in lists.items())
    return ld(1, features(context)) + ld(2, fl)


def write(path, records):
    with open(path, "wb") as f:
        for r in records:
            f.write(frame(r))


# ------------------------------------------------------------------ images
COLOURS = [(220, 40, 40), (40, 200, 60), (50, 60, 220)]


def shape_image(cls, rng, size=16):
    """Class 0: a horizontal bar, 1: a vertical bar, 2: a filled square;
    position and colour jitter so the classes need spatial features."""
    im = Image.new("RGB", (size, size), (rng.randint(0, 60),) * 3)
    px = im.load()
    col = tuple(min(255, max(0, c + rng.randint(-30, 30))) for c in COLOURS[rng.randint(0, 2)])
    o = rng.randint(2, size - 6)
    for a in range(size):
        for t in range(3):
            if cls == 0:
                px[a, o + t] = col
            elif cls == 1:
                px[o + t, a] = col
    if cls == 2:
        for y in range(o, o + 5):
            for x in range(o, o + 5):
                px[x, y] = col
    return im


def encode(im, fmt, **kw):
    b = io.BytesIO()
    im.save(b, fmt, **kw)
    return b.getvalue()


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = random.Random(1234)

    # numeric Examples: x = 4 floats, label int64 = argmax(x)
    recs = []
    for i in range(100):
        x = [round(rng.uniform(-1, 1), 3) for _ in range(4)]
        recs.append(example({"x": ("float", x), "label": ("int64", [x.index(max(x))]),
                             "id": ("bytes", [b"r%d" % i])}))
    write(os.path.join(out, "num.tfrecord"), recs)
    raw = b"".join(frame(r) for r in recs)
    with gzip.GzipFile(os.path.join(out, "num.tfrecord.gz"), "wb", mtime=0) as f:
        f.write(raw)
    with open(os.path.join(out, "num.tfrecord.zlib"), "wb") as f:
        f.write(zlib.compress(raw))
    # two shards: the first 60 and the last 40
    write(os.path.join(out, "num-00000-of-00002.tfrecord"), recs[:60])
    write(os.path.join(out, "num-00001-of-00002.tfrecord"), recs[60:])

    # bad files, each with the fault at record 3
    def corrupt(name, fn):
        b = bytearray(b"".join(frame(r) for r in recs[:6]))
        off = sum(len(frame(r)) for r in recs[:3])
        fn(b, off)
        with open(os.path.join(out, name), "wb") as f:
            f.write(bytes(b))

    def flip_data(b, off):
        b[off + 12 + 5] ^= 0x40

    def flip_len(b, off):
        b[off + 8] ^= 0x01

    corrupt("bad_datacrc.tfrecord", flip_data)
    corrupt("bad_lencrc.tfrecord", flip_len)
    full = b"".join(frame(r) for r in recs[:4])
    with open(os.path.join(out, "bad_truncated.tfrecord"), "wb") as f:
        f.write(full[:-7])
    wrong = list(recs[:6])
    wrong[3] = example({"x": ("int64", [1, 2, 3, 4]), "label": ("int64", [0])})
    write(os.path.join(out, "bad_type.tfrecord"), wrong)
    short = list(recs[:6])
    short[3] = example({"x": ("float", [1.0, 2.0]), "label": ("int64", [0])})
    write(os.path.join(out, "bad_count.tfrecord"), short)
    nolabel = list(recs[:6])
    nolabel[3] = example({"x": ("float", [1.0, 2.0, 3.0, 4.0])})
    write(os.path.join(out, "bad_missing.tfrecord"), nolabel)

    # SequenceExamples: context label, feature list "frames" of 5 steps x 2
    seq = []
    for i in range(20):
        steps = [[float(i + t), float(-t)] for t in range(5)]
        seq.append(sequence_example({"label": ("int64", [i % 3])},
                                    {"frames": ("float", steps)}))
    write(os.path.join(out, "seq.tfrecord"), seq)

    # images: 16x16 JPEGs and PNGs of three shape classes
    imgs = []
    for i in range(60):
        cls = i % 3
        im = shape_image(cls, rng)
        fmt = "JPEG" if i % 2 == 0 else "PNG"
        b = encode(im, fmt, quality=95) if fmt == "JPEG" else encode(im, fmt)
        imgs.append(example({"image": ("bytes", [b]), "label": ("int64", [cls])}))
    write(os.path.join(out, "img.tfrecord"), imgs)
    # a gradient image whose exact pixels the C test checks (PNG: lossless)
    g = Image.new("RGB", (8, 4))
    for y in range(4):
        for x in range(8):
            g.putpixel((x, y), (x * 32, y * 64, 255 - x * 32))
    with open(os.path.join(out, "gradient.png"), "wb") as f:
        f.write(encode(g, "PNG"))
    with open(os.path.join(out, "gradient.jpg"), "wb") as f:
        f.write(encode(g, "JPEG", quality=100, subsampling=0))
    # bad images at record 3
    jpg = encode(shape_image(0, rng), "JPEG", quality=90)
    png = encode(shape_image(1, rng), "PNG")
    trunc = list(imgs[:6])
    trunc[3] = example({"image": ("bytes", [jpg[: len(jpg) // 2]]), "label": ("int64", [0])})
    write(os.path.join(out, "bad_jpeg_truncated.tfrecord"), trunc)
    junk = list(imgs[:6])
    junk[3] = example({"image": ("bytes", [b"\xff\xd8\xff" + b"\x00" * 40]), "label": ("int64", [0])})
    write(os.path.join(out, "bad_jpeg_junk.tfrecord"), junk)
    # bombs: a PNG declaring 100000 x 100000 (IHDR patched, its CRC fixed)
    # and a JPEG declaring 65500 x 65500 (SOF0 patched)
    p = bytearray(png)
    assert p[12:16] == b"IHDR"
    p[16:24] = struct.pack(">II", 100000, 100000)
    p[29:33] = struct.pack(">I", zlib.crc32(bytes(p[12:29])) & 0xFFFFFFFF)
    with open(os.path.join(out, "bomb.png"), "wb") as f:
        f.write(bytes(p))
    j = bytearray(jpg)
    k = j.index(b"\xff\xc0")
    j[k + 5:k + 9] = struct.pack(">HH", 65500, 65500)
    with open(os.path.join(out, "bomb.jpg"), "wb") as f:
        f.write(bytes(j))
    bomb = list(imgs[:6])
    bomb[3] = example({"image": ("bytes", [bytes(p)]), "label": ("int64", [1])})
    write(os.path.join(out, "bad_bomb.tfrecord"), bomb)

    # ImageNet/Inception-style shards, as the TF models' build_imagenet_data
    # writes them: gzip TFRecord files of tf.train.Example with the
    # standard keys (image/encoded JPEG, image/format, image/class/label,
    # image/height, image/width) plus a non-standard class_id; 32x32 shape
    # images, two shards of 75
    inc = []
    for i in range(150):
        cls = i % 3
        b = encode(shape_image(cls, rng, 32), "JPEG", quality=95)
        inc.append(example({"image/encoded": ("bytes", [b]),
                            "image/format": ("bytes", [b"JPEG"]),
                            "image/class/label": ("int64", [cls]),
                            "image/height": ("int64", [32]),
                            "image/width": ("int64", [32]),
                            "class_id": ("int64", [cls])}))
    for k in range(2):
        raw = io.BytesIO()
        for r in inc[75 * k:75 * (k + 1)]:
            raw.write(frame(r))
        with gzip.GzipFile(os.path.join(out, "inc-%05d-of-00002.tfrecord.gz" % k), "wb",
                           mtime=0) as f:
            f.write(raw.getvalue())


if __name__ == "__main__":
    main()
