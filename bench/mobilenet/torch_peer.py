#!/usr/bin/python3
"""PyTorch peer for bench/mobilenet: builds the model of a Keras JSON file
(the layers MobileNet v1 uses: InputLayer, ZeroPadding2D, Conv2D,
DepthwiseConv2D, BatchNormalization, Activation, GlobalAveragePooling2D,
Reshape, Dropout) as a torch module with the same layer sequence, and times
the build (json.load + module construction, median of 9) and a training step
(sparse categorical crossentropy on the logits before the final softmax,
Adam; 1 warm-up step, then the median of reps steps). Prints "key value"
lines that the C bench parses.

    /usr/bin/python3 bench/mobilenet/torch_peer.py model.json [reps] [batch] [threads]
"""
import json
import os
import statistics
import sys
import time

# OpenBLAS (under torch) at 1 thread so its pool and torch's do not
# oversubscribe the cores; set before torch loads it.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402


def pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


class Keras(nn.Module):
    """A chain of Keras layers (each layer's one input is the previous one),
    NCHW inside; the final softmax is left to the loss."""

    def __init__(self, text):
        super().__init__()
        cfg = json.loads(text)["config"]
        layers = cfg["layers"] if isinstance(cfg, dict) else cfg
        mods = []
        shape = None  # (C, H, W)
        for layer in layers:
            cls, c = layer["class_name"], layer["config"]
            if cls == "InputLayer":
                h, w, ch = c["batch_input_shape"][1:]
                shape = (ch, h, w)
                self.in_shape = (ch, h, w)
                continue
            if cls == "ZeroPadding2D":
                (t, b), (l, r) = [pair(p) for p in c["padding"]]
                mods.append(nn.ZeroPad2d((l, r, t, b)))
                shape = (shape[0], shape[1] + t + b, shape[2] + l + r)
            elif cls in ("Conv2D", "DepthwiseConv2D"):
                k, st = pair(c["kernel_size"]), pair(c["strides"])
                same = c["padding"] == "same"
                cin = shape[0]
                if cls == "Conv2D":
                    cout, groups = c["filters"], 1
                else:
                    cout, groups = cin * c.get("depth_multiplier", 1), cin
                if same and st != (1, 1):
                    raise SystemExit("strided 'same' convolution not in this peer")
                mods.append(nn.Conv2d(cin, cout, k, st, padding="same" if same else 0,
                                      groups=groups, bias=c.get("use_bias", True)))
                oh = shape[1] if same else (shape[1] - k[0]) // st[0] + 1
                ow = shape[2] if same else (shape[2] - k[1]) // st[1] + 1
                shape = (cout, oh, ow)
                act = c.get("activation", "linear")
                if act not in ("linear", "softmax"):
                    mods.append(self.act(act))
            elif cls == "BatchNormalization":
                mods.append(nn.BatchNorm2d(shape[0], eps=c["epsilon"],
                                           momentum=1 - c["momentum"]))
            elif cls == "Activation":
                if c["activation"] != "softmax":
                    mods.append(self.act(c["activation"]))
            elif cls == "GlobalAveragePooling2D":
                mods.append(nn.AdaptiveAvgPool2d(1))
                shape = (shape[0], 1, 1)
            elif cls == "Reshape":
                ts = c["target_shape"]
                if len(ts) == 3:
                    shape = (ts[2], ts[0], ts[1])  # NHWC (1, 1, C) is NCHW (C, 1, 1)
                    mods.append(nn.Unflatten(1, shape))
                mods.insert(len(mods) - (len(ts) == 3), nn.Flatten())
                if len(ts) == 1:
                    shape = (ts[0],)
            elif cls == "Dropout":
                mods.append(nn.Dropout(c["rate"]))
            else:
                raise SystemExit("layer %s not in this peer" % cls)
        self.net = nn.Sequential(*mods)

    @staticmethod
    def act(name):
        return {"relu": nn.ReLU, "relu6": nn.ReLU6, "tanh": nn.Tanh,
                "sigmoid": nn.Sigmoid}[name]()

    def forward(self, x):
        return self.net(x)


def main():
    path = sys.argv[1]
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    batch = int(sys.argv[3]) if len(sys.argv) > 3 else 32
    threads = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    with open(path) as f:
        text = f.read()
    builds = []
    for _ in range(9):
        t0 = time.perf_counter()
        model = Keras(text)
        builds.append((time.perf_counter() - t0) * 1e3)
    ch, h, w = model.in_shape
    x = torch.rand(2 * batch, ch, h, w) * 2 - 1
    with torch.no_grad():
        classes = model(x[:1]).shape[1]
    y = torch.arange(2 * batch) * 37 % classes
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
    loss_fn = nn.CrossEntropyLoss()
    model.train()

    def step(i):
        s = (i % 2) * batch
        opt.zero_grad()
        loss = loss_fn(model(x[s:s + batch]), y[s:s + batch])
        loss.backward()
        opt.step()

    step(0)
    per = []
    for r in range(reps):
        t0 = time.perf_counter()
        step(r + 1)
        per.append((time.perf_counter() - t0) * 1e3)
    print("build_ms", statistics.median(builds))
    print("step_ms", statistics.median(per))
    print("params", sum(p.numel() for p in model.parameters()))
    print("torch_version", torch.__version__)


if __name__ == "__main__":
    main()
