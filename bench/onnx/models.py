#!/usr/bin/python3
"""The ONNX benchmark's models (bench_onnx.c runs this to write them, and
torch_peer.py trains the same modules):

    /usr/bin/python3 bench/onnx/models.py OUTDIR

writes OUTDIR/wb.onnx (W-B at 32x32x3, docs/workloads.md, as PyTorch writes
it: Conv -> Relu -> MaxPool -> Flatten -> Gemm -> Relu -> Gemm) and
OUTDIR/resnet18.onnx: ResNet-18 for 32x32 inputs (the CIFAR variant: a 3x3
stem without max pool, BasicBlocks [2, 2, 2, 2] at 64..512 channels,
1x1 strided projections, global average pool, Linear(10)), exported in
training mode so BatchNormalization stays a node. The ResNet-style block is
tests/onnx/fixtures/rb.onnx.
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


def wb(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(3, 64, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(15 * 15 * 64, 128), nn.ReLU(), nn.Linear(128, 10))


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.proj = None
        if stride != 1 or cin != cout:
            self.proj = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return F.relu(y + (x if self.proj is None else self.proj(x)))


class ResNet18(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(64)
        layers, cin = [], 64
        for cout, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
            layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = self.layers(F.relu(self.bn(self.stem(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def resnet18(seed=0):
    torch.manual_seed(seed)
    return ResNet18()


def export(m, path, training, shape=(3, 32, 32)):
    """path: a file name or a binary file object (io.BytesIO)"""
    x = torch.zeros(2, *shape)
    kw = dict(opset_version=13, input_names=["x"], output_names=["y"],
              dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    if training:
        m.train()
        kw.update(training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    else:
        m.eval()
    torch.onnx.export(m, x, path, **kw)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    export(wb(), os.path.join(out, "wb.onnx"), False)
    export(resnet18(), os.path.join(out, "resnet18.onnx"), True)


if __name__ == "__main__":
    main()
