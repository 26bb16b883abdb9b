#!/usr/bin/python3
"""Writes tests/layers/layers_ref.bin: PyTorch reference values for the ops
behind the wider Keras/ONNX layer set, read by
tests/layers/test_layers_fixture.c. torch is only needed to regenerate:

    /usr/bin/python3 tests/layers/gen_layers_fixture.py [out.bin]

Every case is the engine graph
    x (B, dims) -> h = x + P -> op(h, params) -> Flatten -> MSE against t
with P = 0, computed here in float64 from the same float32 values. Per case
<c>/x, <c>/t (the labels), <c>/p/<name> (each parameter of the op), then the
forward output <c>/y (flattened), the loss <c>/loss and the gradients
<c>/g/<name> and <c>/g/P (the batch sum of dL/dx). The loss is the mean of
the squared error over every element, Keras' MSE for equal-width rows.

Layout conversions: the engine is NHWC with Keras' kernels. Conv2D kernels
(kh, kw, cin/groups, cout) are torch's (cout, cin/groups, kh, kw) after
permute(3, 2, 0, 1); ConvTranspose kernels (kh, kw, cout, cin) are torch's
(cin, cout, kh, kw) after permute(3, 2, 0, 1). TensorFlow's 'same' padding
(the odd cell after) is an explicit F.pad; a transposed convolution is
computed unpadded and cropped to the engine's window (PT, PL, OH, OW).

Conventions checked against their definitions: KerasRelu is written out
from Keras' backend relu; HardSigmoid(alpha, beta) is max(0, min(1,
alpha x + beta)); bilinear Upsample is F.interpolate(align_corners=False),
which equals tf.image.resize's half-pixel bilinear when upscaling.

File format: as tests/fixtures/gen_fixtures.py (little-endian): u32 magic
0x46525452 ("RTRF"), u32 version 1, u32 tensor count, then per tensor
char name[64], u32 dtype (1 f32, 2 i32), u32 ndim, u32 dims[4], data.
"""
import math
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

MAGIC, VERSION = 0x46525452, 1
torch.set_num_threads(1)
torch.set_default_dtype(torch.float64)
tensors = []
rng = np.random.default_rng(20261203)
B = 3


def put(name, a):
    a = np.ascontiguousarray(a)
    if a.dtype == np.float64:
        a = a.astype(np.float32)
    assert a.dtype == np.float32, (name, a.dtype)
    assert len(name.encode()) < 64 and a.ndim <= 4, name
    tensors.append((name, a))


def same_pads(n, k, s, d=1):
    keff = (k - 1) * d + 1
    out = (n + s - 1) // s
    tot = max((out - 1) * s + keff - n, 0)
    return tot // 2, tot - tot // 2


def conv(h, w, b, stride=(1, 1), dil=(1, 1), padding="valid", groups=1):
    """h (B,H,W,C), w (kh,kw,cin/g,cout) -> (B,OH,OW,cout)"""
    xc = h.permute(0, 3, 1, 2)
    if padding == "same":
        pt, pb = same_pads(xc.shape[2], w.shape[0], stride[0], dil[0])
        pl, pr = same_pads(xc.shape[3], w.shape[1], stride[1], dil[1])
        xc = F.pad(xc, (pl, pr, pt, pb))
    y = F.conv2d(xc, w.permute(3, 2, 0, 1), b, stride=stride, dilation=dil, groups=groups)
    return y.permute(0, 2, 3, 1)


def convt(h, w, b, stride, dil, pt, pl, oh, ow):
    """h (B,H,W,C), w (kh,kw,cout,cin): unpadded, then the window
    [pt, pt+oh) x [pl, pl+ow) (zeros past the end)"""
    y = F.conv_transpose2d(h.permute(0, 3, 1, 2), w.permute(3, 2, 0, 1), None,
                           stride=stride, dilation=dil)
    extra_h = max(pt + oh - y.shape[2], 0)
    extra_w = max(pl + ow - y.shape[3], 0)
    y = F.pad(y, (0, extra_w, 0, extra_h))[:, :, pt:pt + oh, pl:pl + ow]
    if b is not None:
        y = y + b.view(1, -1, 1, 1)
    return y.permute(0, 2, 3, 1)


def keras_relu(x, slope, th, maxv):
    pos = x * (x > th).to(x.dtype)
    pos = torch.clamp(pos, 0.0, maxv)
    return pos - slope * torch.relu(th - x)


def case(name, dims, fn, params=None):
    """params: list of (name, numpy f32 array)"""
    params = params or []
    x = rng.normal(size=(B,) + tuple(dims)).astype(np.float32)
    P = torch.zeros(dims, requires_grad=True)
    ps = [torch.tensor(v.astype(np.float64), requires_grad=True) for _, v in params]
    y = fn(torch.tensor(x.astype(np.float64)) + P, *ps).reshape(B, -1)
    t = rng.normal(size=tuple(y.shape)).astype(np.float32)
    loss = ((y - torch.tensor(t.astype(np.float64))) ** 2).mean()
    loss.backward()
    put(name + "/x", x)
    put(name + "/t", t)
    for (pn, v) in params:
        put(name + "/p/" + pn, v)
    put(name + "/y", y.detach().numpy())
    put(name + "/loss", np.array([loss.item()]))
    put(name + "/g/P", P.grad.numpy())
    for (pn, _), p in zip(params, ps):
        put(name + "/g/" + pn, p.grad.numpy())


def rnd(*shape, base=0.0, scale=0.5):
    return (base + scale * rng.normal(size=shape)).astype(np.float32)


def main(path):
    D = (2, 5)
    case("elu", D, lambda h: F.elu(h, alpha=0.7))
    case("selu", D, lambda h: torch.selu(h))
    case("leakyrelu", D, lambda h: F.leaky_relu(h, 0.3))
    case("gelu", D, lambda h: F.gelu(h))
    case("gelu_tanh", D, lambda h: F.gelu(h, approximate="tanh"))
    case("erf", D, lambda h: torch.erf(h))
    case("softplus", D, lambda h: F.softplus(h))
    case("softsign", D, lambda h: F.softsign(h))
    case("hardsigmoid", D, lambda h: torch.clamp(0.2 * h + 0.5, 0.0, 1.0))
    case("swish", D, lambda h: F.silu(h))
    case("clip", D, lambda h: torch.clamp(h, 0.0, 1.5))
    case("thresholdedrelu", D, lambda h: F.threshold(h, 0.4, 0.0))
    case("kerasrelu", D, lambda h: keras_relu(h, 0.2, 0.5, 2.0))
    case("exp", D, lambda h: torch.exp(h))
    case("mish", D, lambda h: F.mish(h))
    case("hardswish", D, lambda h: F.hardswish(h))
    case("logsigmoid", D, lambda h: F.logsigmoid(h))
    case("div", (3, 4), lambda h, q: h / q, [("q", rnd(4, base=1.0, scale=0.2))])
    case("max", (3, 4), lambda h, q: torch.maximum(h, q), [("q", rnd(3, 1, scale=1.0))])
    case("min", (3, 4), lambda h, q: torch.minimum(q, h), [("q", rnd(4, scale=1.0))])
    case("prelu", (2, 3, 4), lambda h, a: torch.where(h > 0, h, a * h),
         [("a", rnd(1, 1, 4, base=0.25, scale=0.1))])
    case("pad", (3, 4, 2), lambda h: F.pad(h, (2, 0, 0, 1, 1, 2), value=0.5))
    case("crop", (3, 4, 2), lambda h: F.pad(h, (0, 1, 0, -2, -1, 0)))
    case("transpose", (2, 3, 4), lambda h: h.permute(0, 3, 1, 2))
    case("reducemean", (2, 3, 4), lambda h: h.mean(dim=(1, 2), keepdim=True))
    case("reducesum", (2, 3, 4), lambda h: h.sum(dim=2))
    case("up_nearest", (2, 3, 2), lambda h: F.interpolate(
        h.permute(0, 3, 1, 2), scale_factor=(2, 3), mode="nearest").permute(0, 2, 3, 1))
    case("up_bilinear", (3, 2, 2), lambda h: F.interpolate(
        h.permute(0, 3, 1, 2), scale_factor=(2, 3), mode="bilinear",
        align_corners=False).permute(0, 2, 3, 1))
    case("gmp", (3, 4, 3), lambda h: h.amax(dim=(1, 2)))
    case("layernorm", (3, 5), lambda h, g, b: F.layer_norm(h, (5,), g, b, 1e-3),
         [("gamma", rnd(5, base=1.0, scale=0.3)), ("beta", rnd(5, scale=0.3))])
    case("depthwise", (5, 6, 3), lambda h, w, b: conv(h, w, b, padding="same", groups=3),
         [("w", rnd(3, 3, 1, 6)), ("b", rnd(6, scale=0.3))])
    case("grouped", (6, 5, 4), lambda h, w: torch.tanh(
        conv(h, w, None, stride=(2, 2), padding="same", groups=2)), [("w", rnd(2, 3, 2, 6))])
    case("dilated", (7, 6, 2), lambda h, w: conv(h, w, None, dil=(2, 1)),
         [("w", rnd(3, 2, 2, 3))])
    # ConvTranspose 3x3 s2 'same' from 3x3: OH = 6, PT = (2*2+3-6)//2 = 0
    case("convt_same", (3, 3, 2), lambda h, w, b: convt(h, w, b, (2, 2), (1, 1), 0, 0, 6, 6),
         [("w", rnd(3, 3, 3, 2)), ("b", rnd(3, scale=0.3))])
    # 3x3 s2 'valid' from 3x4: OH = 7, OW = 9
    case("convt_valid", (3, 4, 2), lambda h, w: convt(h, w, None, (2, 2), (1, 1), 0, 0, 7, 9),
         [("w", rnd(3, 3, 3, 2))])
    # 3x3 s2 'same' output_padding (1, 0) from 3x3: OH = 4+1+1 = 6 -> PT =
    # (4+3-6)//2 = 0; OW = 4+1 = 5 -> PL = (4+3-5)//2 = 1
    case("convt_outpad", (3, 3, 2), lambda h, w: convt(h, w, None, (2, 2), (1, 1), 0, 1, 6, 5),
         [("w", rnd(3, 3, 2, 2))])
    with open(path, "wb") as f:
        f.write(struct.pack("<III", MAGIC, VERSION, len(tensors)))
        for name, a in tensors:
            dims = list(a.shape) + [1] * (4 - a.ndim)
            f.write(name.encode().ljust(64, b"\0"))
            f.write(struct.pack("<II4I", 1, a.ndim, *dims))
            f.write(a.astype("<f4").tobytes())
    print(f"{path}: {len(tensors)} tensors")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else __file__.rsplit("/", 1)[0] + "/layers_ref.bin")
