#!/usr/bin/python3
"""Writes tests/layers/keras_ref.bin and the two models it belongs to,
tests/layers/data/keras_seq1d.json and keras_func2d.json: Keras JSON models
built from the layers import_keras_layers.c lowers to other ops, with
weights in Keras' layouts and the output PyTorch computes for them (float64).
test_layers_keras.c imports each JSON, sets the weights by name and
compares its prediction. torch is only needed to regenerate:

    /usr/bin/python3 tests/layers/gen_keras_fixture.py

keras_seq1d (Sequential, Keras 3 JSON), x (B, 10, 3):
    c1  Conv1D(4, 3, padding causal, dilation 2, bias)  kernel (3, 3, 4)
    up  UpSampling1D(2)
    mp  MaxPooling1D(3, strides 2, padding same)
    ap  AveragePooling1D(2)
    zp  ZeroPadding1D((1, 2));  cr Cropping1D((2, 0))
    pm  Permute((2, 1))
    rv  (Flatten + RepeatVector(2) + GlobalAveragePooling1D) after a Dense
keras_func2d (Functional, Keras 2 JSON), x (B, 6, 6, 3):
    dw  DepthwiseConv2D(3, depth_multiplier 2, same)  depthwise_kernel (3,3,3,2)
    sp  SeparableConv2D(4, 3, strides 2, same)        (3,3,6,1), (1,1,6,4), (4)
    ct  Conv2DTranspose(2, 3, strides 2, same)        kernel (3,3,2,4)
    cr  Cropping2D(((1, 0), (0, 1)));  zp ZeroPadding2D(((0, 1), (1, 0)))
    us  UpSampling2D(2, bilinear)
    ln  LayerNormalization;  pr PReLU(shared_axes [1, 2])
    a/s/m/v/x/n  Add, Subtract, Multiply, Average, Maximum, Minimum of the
        two branches relu6(ln) and elu(pr)
    gmp GlobalMaxPooling2D -> Dense(3)

TensorFlow's 'same' padding (odd cell after) is explicit F.pad; the
transposed convolution is computed unpadded and cropped to TF's window.
File format: as gen_layers_fixture.py.
"""
import json
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

MAGIC, VERSION = 0x46525452, 1
torch.set_default_dtype(torch.float64)
rng = np.random.default_rng(7)
tensors = []
B = 2
HERE = __file__.rsplit("/", 1)[0]


def put(name, a):
    a = np.ascontiguousarray(a).astype(np.float32)
    assert len(name.encode()) < 64 and a.ndim <= 4, name
    tensors.append((name, a))


def same_pads(n, k, s, d=1):
    keff = (k - 1) * d + 1
    out = (n + s - 1) // s
    tot = max((out - 1) * s + keff - n, 0)
    return tot // 2, tot - tot // 2


PREFIX = [""]


def w(name, *shape, scale=0.4, base=0.0):
    """a weight, stored as <model>/w/<name> (name = the graph parameter)"""
    v = (base + scale * rng.normal(size=shape)).astype(np.float32)
    put(PREFIX[0] + "/w/" + name, v)
    return torch.tensor(v.astype(np.float64))


def layer(cls, name, **cfg):
    cfg["name"] = name
    return {"class_name": cls, "config": cfg}


def seq1d():
    PREFIX[0] = "seq1d"
    x = rng.normal(size=(B, 10, 3)).astype(np.float32)
    put("seq1d/x", x)
    h = torch.tensor(x.astype(np.float64))
    k, b = w("c1/kernel", 3, 3, 4), w("c1/bias", 4, scale=0.2)
    hc = F.pad(h.permute(0, 2, 1), (4, 0))             # causal: (k-1)*d before
    h = F.conv1d(hc, k.permute(2, 1, 0), b, dilation=2).permute(0, 2, 1)   # (B,10,4)
    h = torch.relu(h)
    h = h.repeat_interleave(2, dim=1)                  # (B,20,4)
    pt, pb = same_pads(20, 3, 2)
    hp = F.pad(h.permute(0, 2, 1), (pt, pb), value=-float("inf"))
    h = F.max_pool1d(hp, 3, 2).permute(0, 2, 1)        # (B,10,4)
    h = F.avg_pool1d(h.permute(0, 2, 1), 2).permute(0, 2, 1)   # (B,5,4)
    h = F.pad(h, (0, 0, 1, 2))                         # (B,8,4)
    h = h[:, 2:, :]                                    # (B,6,4)
    h = h.permute(0, 2, 1)                             # (B,4,6)
    dk, db = w("d/kernel", 6, 5), w("d/bias", 5, scale=0.2)
    h = F.gelu(h @ dk + db)                            # (B,4,5)
    h = h.reshape(B, -1)                               # (B,20)
    h = h.unsqueeze(1).repeat(1, 2, 1)                 # (B,2,20)
    h = h.mean(dim=1)                                  # (B,20)
    ok, ob = w("out/kernel", 20, 3), w("out/bias", 3, scale=0.2)
    y = h @ ok + ob
    put("seq1d/y", y.numpy())
    layers = [
        {"class_name": "InputLayer", "config": {"batch_shape": [None, 10, 3], "name": "in"}},
        layer("Conv1D", "c1", filters=4, kernel_size=[3], strides=[1], padding="causal",
              dilation_rate=[2], groups=1, activation="relu", use_bias=True,
              data_format="channels_last"),
        layer("UpSampling1D", "up", size=2),
        layer("MaxPooling1D", "mp", pool_size=[3], strides=[2], padding="same",
              data_format="channels_last"),
        layer("AveragePooling1D", "ap", pool_size=[2], strides=None, padding="valid"),
        layer("ZeroPadding1D", "zp", padding=[1, 2]),
        layer("Cropping1D", "cr", cropping=[2, 0]),
        layer("Permute", "pm", dims=[2, 1]),
        layer("Dense", "d", units=5, activation="gelu"),
        layer("Flatten", "fl"),
        layer("RepeatVector", "rv", n=2),
        layer("GlobalAveragePooling1D", "gap", data_format="channels_last", keepdims=False),
        layer("Dense", "out", units=3, activation="linear"),
    ]
    return {"class_name": "Sequential", "config": {"name": "seq1d", "layers": layers},
            "keras_version": "3.3.3", "backend": "tensorflow"}


def conv_same(h, k, b, stride, groups):
    """h (B,C,H,W) torch layout; k torch (out, in/g, kh, kw)"""
    pt, pb = same_pads(h.shape[2], k.shape[2], stride)
    pl, pr = same_pads(h.shape[3], k.shape[3], stride)
    return F.conv2d(F.pad(h, (pl, pr, pt, pb)), k, b, stride=stride, groups=groups)


def func2d():
    PREFIX[0] = "func2d"
    x = rng.normal(size=(B, 6, 6, 3)).astype(np.float32)
    put("func2d/x", x)
    h = torch.tensor(x.astype(np.float64)).permute(0, 3, 1, 2)   # NCHW
    dk, dbias = w("dw/depthwise_kernel", 3, 3, 3, 2), w("dw/bias", 6, scale=0.2)
    # (kh,kw,C,M) -> torch (C*M, 1, kh, kw): output channel c*M + m
    h = conv_same(h, dk.reshape(3, 3, 6).permute(2, 0, 1).unsqueeze(1), dbias, 1, 3)
    sdk = w("sp/depthwise_kernel", 3, 3, 6, 1)
    spk, spb = w("sp/pointwise_kernel", 1, 1, 6, 4), w("sp/bias", 4, scale=0.2)
    h = conv_same(h, sdk.reshape(3, 3, 6).permute(2, 0, 1).unsqueeze(1), None, 2, 6)
    h = F.conv2d(h, spk.permute(3, 2, 0, 1), spb)                # (B,4,3,3)
    h = torch.tanh(h)
    ck, cb = w("ct/kernel", 3, 3, 2, 4), w("ct/bias", 2, scale=0.2)
    y = F.conv_transpose2d(h, ck.permute(3, 2, 0, 1), None, stride=2)   # (B,2,7,7)
    # Keras 'same': OH = 3*2 = 6, PT = (2*2 + 3 - 6)//2 = 0
    h = y[:, :, 0:6, 0:6] + cb.view(1, -1, 1, 1)
    h = h[:, :, 1:, :-1]                                          # Cropping2D (1,0),(0,1)
    h = F.pad(h, (1, 0, 0, 1))                                    # ZeroPadding2D (0,1),(1,0)
    h = F.interpolate(h, scale_factor=2, mode="bilinear", align_corners=False)  # (B,2,12,12)
    h = h.permute(0, 2, 3, 1)                                     # NHWC (B,12,12,2)
    g, be = w("ln/gamma", 2, scale=0.3, base=1.0), w("ln/beta", 2, scale=0.3)
    ln = F.layer_norm(h, (2,), g, be, 1e-3)
    a = w("pr/alpha", 1, 1, 2, scale=0.3)
    pr = torch.where(h > 0, h, a * h)
    b1 = torch.clamp(ln, 0.0, 6.0)                                # relu6
    b2 = F.elu(pr)
    m = [b1 + b2, b1 - b2, b1 * b2, (b1 + b2) / 2, torch.maximum(b1, b2),
         torch.minimum(b1, b2)]
    s = m[0]
    for t in m[1:]:
        s = s + t                                                 # Add of all six
    gm = s.amax(dim=(1, 2))                                       # (B,2)
    ok, ob = w("out/kernel", 2, 3), w("out/bias", 3, scale=0.2)
    out = gm @ ok + ob
    put("func2d/y", out.numpy())

    def L(cls, name, inb, **cfg):
        cfg["name"] = name
        return {"class_name": cls, "name": name, "config": cfg,
                "inbound_nodes": [[[i, 0, 0, {}] for i in inb]]}

    layers = [
        {"class_name": "InputLayer", "name": "img", "inbound_nodes": [],
         "config": {"batch_input_shape": [None, 6, 6, 3], "name": "img"}},
        L("DepthwiseConv2D", "dw", ["img"], kernel_size=[3, 3], strides=[1, 1],
          padding="same", depth_multiplier=2, data_format="channels_last",
          dilation_rate=[1, 1], activation="linear", use_bias=True),
        L("SeparableConv2D", "sp", ["dw"], filters=4, kernel_size=[3, 3], strides=[2, 2],
          padding="same", depth_multiplier=1, activation="tanh", use_bias=True),
        L("Conv2DTranspose", "ct", ["sp"], filters=2, kernel_size=[3, 3], strides=[2, 2],
          padding="same", output_padding=None, activation="linear", use_bias=True),
        L("Cropping2D", "cr", ["ct"], cropping=[[1, 0], [0, 1]]),
        L("ZeroPadding2D", "zp", ["cr"], padding=[[0, 1], [1, 0]]),
        L("UpSampling2D", "us", ["zp"], size=[2, 2], interpolation="bilinear"),
        L("LayerNormalization", "ln", ["us"], axis=[3], epsilon=0.001, center=True,
          scale=True),
        L("PReLU", "pr", ["us"], shared_axes=[1, 2]),
        L("ReLU", "r6", ["ln"], max_value=6.0, negative_slope=0.0, threshold=0.0),
        L("ELU", "el", ["pr"], alpha=1.0),
        L("Add", "m_add", ["r6", "el"]),
        L("Subtract", "m_sub", ["r6", "el"]),
        L("Multiply", "m_mul", ["r6", "el"]),
        L("Average", "m_avg", ["r6", "el"]),
        L("Maximum", "m_max", ["r6", "el"]),
        L("Minimum", "m_min", ["r6", "el"]),
        L("Add", "sum", ["m_add", "m_sub", "m_mul", "m_avg", "m_max", "m_min"]),
        L("GlobalMaxPooling2D", "gmp", ["sum"], data_format="channels_last"),
        L("Dense", "out", ["gmp"], units=3, activation="linear"),
    ]
    return {"class_name": "Functional", "keras_version": "2.13.1", "backend": "tensorflow",
            "config": {"name": "func2d", "layers": layers,
                       "input_layers": [["img", 0, 0]], "output_layers": [["out", 0, 0]]}}


def main():
    for name, model in (("keras_seq1d.json", seq1d()), ("keras_func2d.json", func2d())):
        with open(f"{HERE}/data/{name}", "w") as f:
            json.dump(model, f, indent=1)
            f.write("\n")
    path = f"{HERE}/keras_ref.bin"
    with open(path, "wb") as f:
        f.write(struct.pack("<III", MAGIC, VERSION, len(tensors)))
        for name, a in tensors:
            dims = list(a.shape) + [1] * (4 - a.ndim)
            f.write(name.encode().ljust(64, b"\0"))
            f.write(struct.pack("<II4I", 1, a.ndim, *dims))
            f.write(a.astype("<f4").tobytes())
    print(f"{path}: {len(tensors)} tensors")


if __name__ == "__main__":
    main()
