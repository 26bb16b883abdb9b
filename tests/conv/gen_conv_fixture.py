#!/usr/bin/python3
"""Writes tests/conv/conv_ref.bin: PyTorch reference values for a small CNN
(conv, BatchNorm, max pool, strided conv with asymmetric 'same' padding,
dense), read by tests/conv/test_conv_fixture.c. torch is not needed to run
the test; only to regenerate the file:

    /usr/bin/python3 tests/conv/gen_conv_fixture.py [out.bin]

The model, NHWC as Keras and the engine (torch computes in NCHW):
    x (B, 9, 9, 3)
    c1 = Conv2D(16, 3x3, padding same, relu)         -> (B, 9, 9, 16)
    p  = MaxPool2D(2x2, valid)                       -> (B, 4, 4, 16)
         (the engine fuses c1 and p: the pool runs inside the conv)
    bn = BatchNormalization(momentum 0.99, eps 1e-3) -> (B, 4, 4, 16)
    c2 = Conv2D(8, 3x3, strides 2, padding same)     -> (B, 2, 2, 8)
         TF 'same' pads 0 before and 1 after here: torch's padding= cannot
         say that, so the input is padded with F.pad first.
    f  = Flatten (in NHWC order)                     -> (B, 32)
    d  = Dense(5) logits, sparse categorical cross-entropy

Conversions made here:
  * kernels are stored Keras-shaped (kh, kw, cin, cout); torch wants
    (cout, cin, kh, kw): permute(3, 2, 0, 1). Dense kernels are (in, out).
  * Flatten: Keras flattens (h, w, c); the torch graph permutes to NHWC
    before flattening.
  * BatchNorm: Keras semantics. torch's F.batch_norm normalises a training
    batch with the biased variance (as Keras), but its running_var update
    uses the unbiased variance and momentum 0.1 on the new value; here the
    moving statistics are updated by hand, Keras' way:
        moving = 0.99 * moving + 0.01 * batch   (batch variance biased).

Contents: the data (16 samples, two batches of 8, no shuffling), initial
values, the first batch's loss and every gradient (training mode), the
inference-mode output at init, then 10 Adam steps (lr 0.01, eps 1e-7):
losses, all weights and the moving statistics after each step, and the
inference-mode output after training.

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
tensors = []
MOM, EPS = 0.99, 1e-3


def put(name, a):
    a = np.ascontiguousarray(a)
    if a.dtype == np.float64:
        a = a.astype(np.float32)
    assert a.dtype in (np.float32, np.int32), (name, a.dtype)
    assert len(name.encode()) < 64 and a.ndim <= 4, name
    tensors.append((name, a))


def same_pads(n, k, s):
    """TF 'same': (before, after) for one dim"""
    out = (n + s - 1) // s
    tot = max((out - 1) * s + k - n, 0)
    return tot // 2, tot - tot // 2


def conv_nhwc(x, k, b, stride, padding):
    """x (B,H,W,C) torch, k (kh,kw,cin,cout) -> (B,OH,OW,cout)"""
    xc = x.permute(0, 3, 1, 2)
    kh, kw = k.shape[0], k.shape[1]
    if padding == "same":
        pt, pb = same_pads(xc.shape[2], kh, stride)
        pl, pr = same_pads(xc.shape[3], kw, stride)
        xc = F.pad(xc, (pl, pr, pt, pb))
    y = F.conv2d(xc, k.permute(3, 2, 0, 1), b, stride=stride)
    return y.permute(0, 2, 3, 1)


NAMES = ["c1/kernel", "c1/bias", "bn/gamma", "bn/beta", "c2/kernel", "c2/bias",
         "d/kernel", "d/bias"]
STATS = ["bn/moving_mean", "bn/moving_variance"]


def forward(ps, stats, xb, training):
    """ps: trainable tensors in NAMES order; stats: [mm, mv] (updated in
    place in training mode, Keras' rule)"""
    h = torch.relu(conv_nhwc(xb, ps[0], ps[1], 1, "same"))
    h = F.max_pool2d(h.permute(0, 3, 1, 2), 2).permute(0, 2, 3, 1)
    if training:
        flat = h.reshape(-1, h.shape[-1])
        mean = flat.mean(dim=0)
        var = flat.var(dim=0, unbiased=False)
        hn = (h - mean) / torch.sqrt(var + EPS) * ps[2] + ps[3]
        with torch.no_grad():
            stats[0].mul_(MOM).add_((1 - MOM) * mean)
            stats[1].mul_(MOM).add_((1 - MOM) * var)
        # the same through torch's own kernel (biased variance when
        # normalising a training batch), as a check of the formula above
        ref = F.batch_norm(h.permute(0, 3, 1, 2), None, None, ps[2], ps[3], True, 0.0,
                           EPS).permute(0, 2, 3, 1)
        assert torch.allclose(ref, hn, atol=1e-5), "batch norm formula"
    else:
        hn = (h - stats[0]) / torch.sqrt(stats[1] + EPS) * ps[2] + ps[3]
    c2 = conv_nhwc(hn, ps[4], ps[5], 2, "same")
    f = c2.reshape(c2.shape[0], -1)  # NHWC order, as Keras' Flatten
    return f @ ps[6] + ps[7]


def main(path):
    rng = np.random.default_rng(20240605)
    n, B = 16, 8
    x = rng.normal(size=(n, 9, 9, 3)).astype(np.float32)
    y = rng.integers(0, 5, size=n).astype(np.int32)

    def glorot(shape):
        rf = int(np.prod(shape[:-2])) if len(shape) > 2 else 1
        lim = math.sqrt(6 / (shape[-2] * rf + shape[-1] * rf))
        return rng.uniform(-lim, lim, shape).astype(np.float32)

    # c1 has 16 filters over K = 27: the engine's small-K microkernel path
    init = [glorot((3, 3, 3, 16)), (rng.normal(size=16) * 0.1).astype(np.float32),
            (1 + 0.2 * rng.normal(size=16)).astype(np.float32),
            (0.1 * rng.normal(size=16)).astype(np.float32),
            glorot((3, 3, 16, 8)), (rng.normal(size=8) * 0.1).astype(np.float32),
            glorot((32, 5)), (rng.normal(size=5) * 0.1).astype(np.float32)]
    stats0 = [np.zeros(16, np.float32), np.ones(16, np.float32)]

    put("cnn/x", x)
    put("cnn/y", y)
    for nm, v in zip(NAMES + STATS, init + stats0):
        put("cnn/init/" + nm, v)

    def params():
        return [torch.tensor(v, requires_grad=True) for v in init]

    def stats():
        return [torch.tensor(v) for v in stats0]

    # inference output at init (moving statistics 0 and 1)
    with torch.no_grad():
        put("cnn/eval0", forward(params(), stats(), torch.tensor(x), False).numpy())

    # first batch: loss and gradients in training mode
    ps, st = params(), stats()
    out = forward(ps, st, torch.tensor(x[:B]), True)
    loss = F.cross_entropy(out, torch.tensor(y[:B]).long())
    loss.backward()
    put("cnn/out0", out.detach().numpy())
    put("cnn/loss0", np.array([loss.item()], np.float32))
    for nm, p in zip(NAMES, ps):
        put("cnn/grad0/" + nm, p.grad.numpy())

    # 10 Adam steps over the two batches in order
    ps, st = params(), stats()
    opt = torch.optim.Adam(ps, lr=0.01, betas=(0.9, 0.999), eps=1e-7)
    losses, traj = [], [[] for _ in NAMES + STATS]
    for s in range(10):
        lo = (s % 2) * B
        opt.zero_grad()
        loss = F.cross_entropy(forward(ps, st, torch.tensor(x[lo:lo + B]), True),
                               torch.tensor(y[lo:lo + B]).long())
        loss.backward()
        opt.step()
        losses.append(loss.item())
        for k, p in enumerate(ps + st):
            traj[k].append(p.detach().numpy().copy())
    put("cnn/losses", np.array(losses, np.float32))
    for nm, tr in zip(NAMES + STATS, traj):
        put("cnn/traj/" + nm, np.stack(tr).reshape(10, -1))
    with torch.no_grad():
        put("cnn/eval10", forward(ps, st, torch.tensor(x), False).numpy())

    with open(path, "wb") as f:
        f.write(struct.pack("<III", MAGIC, VERSION, len(tensors)))
        for name, a in tensors:
            dims = list(a.shape) + [1] * (4 - a.ndim)
            f.write(name.encode().ljust(64, b"\0"))
            f.write(struct.pack("<II", 1 if a.dtype == np.float32 else 2, a.ndim))
            f.write(struct.pack("<4I", *dims))
            f.write(a.astype("<f4" if a.dtype == np.float32 else "<i4").tobytes())
    print("wrote %s: %d tensors" % (path, len(tensors)))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/conv/conv_ref.bin")
