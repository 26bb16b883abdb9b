"""What both sides of bench/torch_users share: the data, the CNN as a
PyTorch user writes it, and the daemon's batch order. Imported by
bench_torch_users.py (the rtrain.torch client) and by torch_peer.py
(PyTorch's own eager loop, in its own process at its best setting), so the
two train the same module from the same initial weights on the same
batches in the same order.
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# sklearn digits as tests/onnx's PyTorch-user reference splits them, and
# examples/inception's IDX reader of Debian's dataset-fashion-mnist
sys.path.insert(0, os.path.join(ROOT, "tests", "onnx"))
sys.path.insert(0, os.path.join(ROOT, "examples", "inception"))


def load(task, n_train=0, n_test=0):
    """(x, y, x_test, y_test): NCHW float32 images in [0, 1], int64 class
    indices; n_train / n_test: the first N of each split (0: all)"""
    if task == "digits":
        from gen_torch_digits import data
        x, y, xt, yt = data()  # 1437 / 360, a fixed shuffle
    elif task == "fmnist":
        from make_shards import DATA, FILES, idx
        out = []
        for split in ("train", "test"):
            imf, lbf = (os.path.join(DATA, f) for f in FILES[split])
            if not os.path.exists(imf):
                sys.exit("needs Debian's dataset-fashion-mnist (%s; scripts/deps.sh --bench)"
                         % DATA)
            (n, h, w), pix = idx(imf)
            _, lab = idx(lbf)
            out.append((np.frombuffer(pix, np.uint8).reshape(n, 1, h, w).astype(np.float32)
                        / 255.0, np.frombuffer(lab, np.uint8).astype(np.int64)))
        (x, y), (xt, yt) = out
    else:
        raise ValueError("task %r: digits or fmnist" % task)
    if n_train:
        x, y = x[:n_train], y[:n_train]
    if n_test:
        xt, yt = xt[:n_test], yt[:n_test]
    return (np.ascontiguousarray(x), np.ascontiguousarray(y), np.ascontiguousarray(xt),
            np.ascontiguousarray(yt))


def make_net(task, seed):
    """The task's CNN with torch's default initialisation under seed:
    conv-BN-ReLU, a residual conv-BN, max pool (and for 28x28 a second
    conv-BN-ReLU stage and pool), a Linear head giving logits for
    nn.CrossEntropyLoss."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Net(nn.Module):
        def __init__(self, hw, width=16, stages=1):
            super().__init__()
            self.conv1 = nn.Conv2d(1, width, 3, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.stage2 = None
            out, hw = width, hw // 2
            if stages > 1:
                self.stage2 = nn.Sequential(nn.Conv2d(width, 2 * width, 3, padding=1, bias=False),
                                            nn.BatchNorm2d(2 * width), nn.ReLU(),
                                            nn.MaxPool2d(2))
                out, hw = 2 * width, hw // 2
            self.fc = nn.Linear(out * hw * hw, 10)

        def forward(self, x):
            h = F.relu(self.bn1(self.conv1(x)))
            h = F.relu(h + self.bn2(self.conv2(h)))  # the skip connection
            h = F.max_pool2d(h, 2)
            if self.stage2 is not None:
                h = self.stage2(h)
            return self.fc(torch.flatten(h, 1))

    torch.manual_seed(seed)
    return Net(8, 16, 1) if task == "digits" else Net(28, 16, 2)


def make_vision(name, seed, classes=1000):
    """torchvision's resnet18 (ImageNet stem) or mobilenet_v2, untrained"""
    import torch
    import torchvision
    torch.manual_seed(seed)
    return getattr(torchvision.models, name)(weights=None, num_classes=classes)


def vision_batch(batch, size, classes=1000):
    """one fixed batch of random images and labels (step timing only)"""
    g = np.random.default_rng(1)
    return (g.random((batch, 3, size, size), dtype=np.float32),
            g.integers(0, classes, batch).astype(np.int64))


# --------------------------------------------------- the daemon's batch order

def _mix64(z):
    """splitmix64's finalizer on uint64 arrays (server/engine/rt_graph.c)"""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def epoch_order(seed, n, epoch):
    """the sample order of an rtrain program's epoch (0-based) with
    shuffling on: rt_exec_epoch_order's Fisher-Yates, j from a 64-bit
    counter-based draw by multiply-shift. PyTorch's loop takes its batches
    in this order so that both train on the same batches."""
    with np.errstate(over="ignore"):
        k = _mix64(np.array([seed], np.uint64) + np.uint64(0x9E3779B97F4A7C15))
        k = _mix64(k ^ (np.array([0x2000000], np.uint64) * np.uint64(0xD6E8FEB86659FD93)))
        i = np.arange(n - 1, 0, -1, dtype=np.uint64)
        ctr = (np.uint64(epoch) << np.uint64(32)) | i
        r = _mix64(k ^ (ctr * np.uint64(0x9E3779B97F4A7C15) + np.uint64(0x632BE59BD9B4E019)))
    perm = list(range(n))
    for ii, rr in zip(i.tolist(), r.tolist()):
        j = (rr * (ii + 1)) >> 64
        perm[ii], perm[j] = perm[j], perm[ii]
    return np.array(perm, np.int64)
