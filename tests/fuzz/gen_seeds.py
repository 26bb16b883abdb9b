#!/usr/bin/python3
"""Write the seed corpora of the CSV, NPY, IDX and inflate harnesses
(tests/fuzz/csv, npy, idx, inflate): small real files of each format and
dtype, and near misses.

    /usr/bin/python3 tests/fuzz/gen_seeds.py

The Keras seeds are copies of tests/integration/data/*.json; the RPC seeds
come from gen_rpc_seeds.c. Rerun and commit when a format gains a case."""
import gzip
import io
import os
import struct
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
IRIS = os.path.join(HERE, "..", "integration", "data", "iris.csv")


def put(sub, name, data):
    os.makedirs(os.path.join(HERE, sub), exist_ok=True)
    with open(os.path.join(HERE, sub, name), "wb") as f:
        f.write(data)


def npy(a):
    b = io.BytesIO()
    np.save(b, a, allow_pickle=False)
    return b.getvalue()


def idx(a, code):
    a = np.ascontiguousarray(a)
    hdr = struct.pack(">BBBB", 0, 0, code, a.ndim) + struct.pack(">" + "I" * a.ndim, *a.shape)
    return hdr + a.astype(a.dtype.newbyteorder(">")).tobytes()


def main():
    with open(IRIS, "rb") as f:
        lines = f.read().splitlines(keepends=True)
    put("csv", "iris_head.csv", b"".join(lines[:12]))
    put("csv", "iris_no_header.csv", b"".join(lines[1:8]))
    put("csv", "crlf_blank.csv", b"1,2,0\r\n\r\n  3 , 4 ,1\r\n")
    put("csv", "floats.csv", b"1e-3,-2.5e+2,0\n.5,0x1p3,1\ninf,nan,2\n")
    put("csv", "ragged.csv", b"1,2,3\n4,5\n")
    put("csv", "empty_field.csv", b"1,,3\n")
    put("csv", "big_values.csv", b"1e300,1,0\n-1e308,2,1\n")

    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 4)).astype(np.float32)
    put("npy", "f4_6x4.npy", npy(x))
    put("npy", "f8_6x4.npy", npy(x.astype(np.float64)))
    put("npy", "i4_labels.npy", npy(np.array([0, 1, 2, 1, 0, 2], np.int32)))
    put("npy", "i8_labels.npy", npy(np.array([0, 1, 2, 1, 0, 2], np.int64)))
    put("npy", "u1_3x2x2.npy", npy(rng.integers(0, 255, (3, 2, 2)).astype(np.uint8)))
    put("npy", "i1_4.npy", npy(np.array([-1, 0, 1, 2], np.int8)))
    put("npy", "i2_2x3.npy", npy(np.arange(6, dtype=np.int16).reshape(2, 3)))
    put("npy", "f4_onehot_6x3.npy", npy(np.eye(3, dtype=np.float32)[[0, 1, 2, 1, 0, 2]]))
    v2 = npy(x)
    # Version 2.0 header: 4-byte header length.
    hl = struct.unpack("<H", v2[8:10])[0]
    put("npy", "f4_v2.npy", b"\x93NUMPY\x02\x00" + struct.pack("<I", hl) + v2[10:])
    put("npy", "fortran.npy", npy(np.asfortranarray(np.ones((2, 3), np.float32))))
    put("npy", "truncated.npy", v2[:-5])
    put("npy", "scalar.npy", npy(np.float32(1.0)))

    imgs = rng.integers(0, 255, (4, 3, 3)).astype(np.uint8)
    put("idx", "u8_4x3x3.idx", idx(imgs, 0x08))
    put("idx", "u8_labels.idx", idx(np.array([0, 1, 2, 1], np.uint8), 0x08))
    put("idx", "u8_4x3x3.idx.gz", gzip.compress(idx(imgs, 0x08), mtime=0))
    put("idx", "i8_4.idx", idx(np.array([-1, 0, 1, 2], np.int8), 0x09))
    put("idx", "i16_2x2.idx", idx(np.arange(4, dtype=np.int16).reshape(2, 2), 0x0B))
    put("idx", "i32_4.idx", idx(np.array([0, 1, 2, 1], np.int32), 0x0C))
    put("idx", "f32_2x3.idx", idx(x[:2, :3], 0x0D))
    put("idx", "f64_2x3.idx", idx(x[:2, :3].astype(np.float64), 0x0E))
    put("idx", "header_only.idx", idx(imgs, 0x08)[:16])
    put("idx", "bad_type.idx", b"\x00\x00\x07\x01\x00\x00\x00\x01\x00")

    # inflate: byte 0 = format | bound << 2 | ratio << 4, byte 1 = piece - 1
    # (fuzz_inflate.c), then the compressed bytes.
    text = b"".join(lines)

    def raw_deflate(b):
        c = zlib.compressobj(9, zlib.DEFLATED, -15)
        return c.compress(b) + c.flush()

    g = gzip.compress(text, mtime=0)
    put("inflate", "deflate_iris", bytes([0 | 2 << 2, 255]) + raw_deflate(text))
    put("inflate", "zlib_iris", bytes([1 | 2 << 2 | 2 << 4, 6]) + zlib.compress(text, 9))
    put("inflate", "gzip_iris", bytes([2 | 3 << 2 | 2 << 4, 0]) + g)
    put("inflate", "gzip_two_members", bytes([3 | 2 << 2, 99]) + g + g)
    put("inflate", "gzip_truncated", bytes([2 | 2 << 2, 15]) + g[:-5])
    put("inflate", "zlib_trailing", bytes([1 | 2 << 2, 31]) + zlib.compress(text) + b"junk")
    # bombs: 1 MiB and 8 MiB of zeros, past the smaller bounds and ratios
    put("inflate", "gzip_bomb_1m", bytes([2 | 1 << 2 | 2 << 4, 255]) +
        gzip.compress(bytes(1 << 20), 9, mtime=0))
    put("inflate", "zlib_bomb_8m", bytes([1 | 3 << 2 | 3 << 4, 127]) +
        zlib.compress(bytes(8 << 20), 9))


if __name__ == "__main__":
    main()
