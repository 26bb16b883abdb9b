#!/usr/bin/python3
"""Writes tests/onnx/fixtures/<m>.onnx and <m>_ref.bin: PyTorch models
exported with torch.onnx.export, their training data, and PyTorch's own
training run, read by tests/onnx/test_onnx_parity.c. torch is needed only to
regenerate the files:

    /usr/bin/python3 tests/onnx/gen_onnx_fixtures.py [outdir]

Models (docs/workloads.md):
    wa  the iris MLP (W-A): Linear(4,32) relu Linear(32,3) softmax
    wc  W-C: 784-512-512-10 MLP, logits
    wb  W-B's layers (Conv(64, 3x3) relu MaxPool 2 Flatten Linear(128) relu
        Linear(10)) on a 12x12x3 input instead of 32x32x3, which keeps the
        Linear's weight (and this file) 8x smaller
    wd  the digits CNN (W-D): Conv(16, 3x3, pad 1) relu Conv(32, pad 1) relu
        MaxPool 2 view(B, -1) Linear(64) relu Linear(10), on sklearn's digits
    rb  a ResNet-style block: Conv(8, 3x3) BN relu, then Conv BN relu Conv
        BN + the skip Add, relu, GlobalAveragePool, Flatten, Linear(10);
        exported in training mode so BatchNormalization stays a node
    mx  the other layout folds: a stride-2 padded Conv beside a SAME one,
        their channel Concat, a trainable (C,1,1) shift subtracted and a
        constant product, AvgPool(3, stride 1, pad 1, padding not counted),
        tanh, sigmoid, Flatten of a (C,2,2) value into a Linear, logsoftmax
    kx  the newer operators, exported at opset 17: a depthwise Conv,
        LeakyRelu, Elu, GELU (the Div-Erf-Add-Mul-Mul pattern), constant
        Pad, a strided Conv with Selu, ConvTranspose, relu6 (Clip), Div by
        a constant, PReLU, ReduceMean over H and W, Transpose to NHWC with
        x.reshape(x.size(0), -1), Concat, LayerNormalization, Softplus, Erf
    ln  nn.LayerNorm exported at opset 13, where torch writes it as
        ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add (folded into one
        LayerNormalization at import): Linear(12,16) LayerNorm GELU
        Linear(16,16) LayerNorm(eps 1e-3) tanh Linear(16,10), on (12,) inputs
    up  Resize and ConvTranspose: Conv relu, nn.Upsample(2) (nearest), a
        grouped ConvTranspose2d (groups 2, stride 2, output_padding 1) tanh,
        Conv relu, F.interpolate(2, bilinear, align_corners=False),
        avg_pool 4, Linear; the ConvTranspose's pads and output_padding are
        rewritten here as the equivalent ONNX output_shape (torch never
        writes it; other exporters do)
    em  nn.Embedding(20, 8) on int64 indices (B, 6), Linear(48, 16) tanh
        Linear(16, 10)
    rn  recurrent layers as torch exports them in training mode (weights
        sliced and concatenated into ONNX's gate order by Slice/Concat
        nodes): a bidirectional LSTM(5, 6, batch_first), a two-layer
        GRU(12, 4, batch_first) on its sequence, the sequence flattened
        into Linear(24, 10); on (6, 5) inputs
    o18 kx at opset 18: torch 1.13 exports up to 17, so its opset-17
        export is upgraded here as the opset-18 changes ask (ReduceMean's
        axes become an input); the reference is torch's training of kx
    o11, o12, o14, o15, o16  one model at each other opset, where the
        operators' forms change (Squeeze/Unsqueeze axes an attribute below
        13, an input from 13; Clip's bounds inputs; Dropout's ratio):
        GRU(5, 6, batch_first) in training mode, the sequence flattened,
        Linear(36, 16), relu6, Dropout(0), Linear(16, 10), on (6, 5) inputs
    r18, mv2  torchvision's resnet18 and mobilenet_v2 (10 classes; the
        classifier's Dropout at 0, since the two sides' masks differ) at
        32x32, exported in training mode (BatchNorm kept), batches of 8,
        SGD lr 0.002 and Adam 1e-4, one step each. mobilenet_v2 freshly
        initialised is chaotic in training mode (its BatchNorms over
        near-constant ReLU6 channels): PyTorch against itself, float32
        against float64, differs by 4e-4 in the loss at step 2 and by 3-6%
        at step 3. resnet18 is too, through its last stages, whose
        BatchNorms see 8 (1x1) and 32 (2x2) values a channel: at seed 11 a
        ReLU input of layer4.1 lies 4e-6 from its batch mean, and float32
        rounding upstream (oneDNN's convolutions against im2col's, both
        ~2e-7 from a double reference) flips it, changing that channel's
        gradient by 40% and the loss at step 3 by 3%; at seeds 111 and 211
        the im2col kernels alone miss PyTorch by 6e-4 and 7e-5 at step 3.
        So only their first step is compared, and resnet18 starts from
        seed 111: seed 11's knife edge is in the first step already (the
        kernels' rounding moves SGD's weights by 1.7e-4), while at 111, 211
        and 311 both convolution paths land within 3.3e-6 of PyTorch. Their weights make ~45 MB: tests/onnx/torchvision.sh
        writes them at test time into a scratch folder.

Each is trained by PyTorch for 10 steps on 10 fixed batches, in order, once
with SGD (lr 0.02, momentum 0.9) and once with Adam (lr 1e-3, eps 1e-7),
with cross-entropy (the mean over the batch; wa's loss is the NLL of its
softmax output, mx's the NLL of its log-softmax). Recorded: per-step losses, and every initializer after the
10 steps in ONNX's own layout (BatchNorm's running statistics included), so
that the test compares what rtrain exports.

Data are stored as uint8 with a scale (x = u8 * scale in float32, the same
operation on both sides) except iris (float32). Image data are NHWC as the
engine takes them; PyTorch gets the NCHW transpose.

Final weights: to keep W-C small, a final tensor is stored as its change
from the initial value in float16 (dtype 3) when that rounds every value by
less than 5e-6 (checked here), well under the test's 1e-4; otherwise as its
float32 values (dtype 1).

File format (little-endian): u32 magic 0x46525452 ("RTRF"), u32 version 1,
u32 count, then per tensor char name[64], u32 dtype (1 f32, 2 i32, 3 f16
delta, 4 u8), u32 ndim, u32 dims[4], data.
"""
import gzip
import os
import struct
import sys

import numpy as np
import onnx
import onnx.numpy_helper
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
torch.set_num_threads(1)
STEPS = 10
TV = ("r18", "mv2")


class MLP(nn.Module):
    def __init__(self, sizes, softmax=False):
        super().__init__()
        self.fc = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))
        self.softmax = softmax

    def forward(self, x):
        for i, f in enumerate(self.fc):
            x = f(x)
            if i + 1 < len(self.fc):
                x = F.relu(x)
        return F.softmax(x, dim=1) if self.softmax else x


class WB(nn.Module):
    def __init__(self, hw):
        super().__init__()
        self.conv = nn.Conv2d(3, 64, 3)
        self.pool = nn.MaxPool2d(2)
        o = (hw - 2) // 2
        self.fc1 = nn.Linear(64 * o * o, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.conv(x)))
        x = torch.flatten(x, 1)
        return self.fc2(F.relu(self.fc1(x)))


class WD(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 4 * 4, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c2(F.relu(self.c1(x)))), 2)
        x = x.contiguous().view(x.size(0), -1)  # Shape -> Gather -> Unsqueeze -> Concat
        return self.fc2(F.relu(self.fc1(x)))


class RB(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn0 = nn.BatchNorm2d(8)
        self.c1 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        x = F.relu(self.bn0(self.stem(x)))
        y = F.relu(self.bn1(self.c1(x)))
        y = self.bn2(self.c2(y))
        x = F.relu(x + y)
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return self.fc(x)


class MX(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.b = nn.Conv2d(3, 2, 2, stride=2)
        self.shift = nn.Parameter(torch.linspace(-0.2, 0.3, 6).reshape(6, 1, 1))
        self.pool = nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False)
        self.fc = nn.Linear(6 * 2 * 2, 10)

    def forward(self, x):
        x = torch.cat([torch.relu(self.a(x)), torch.tanh(self.b(x))], dim=1)
        x = (x - self.shift) * 1.5
        x = torch.sigmoid(F.max_pool2d(self.pool(x), 2))
        return F.log_softmax(self.fc(torch.flatten(x, 1)), dim=1)


class LN(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(12, 16)
        self.n1 = nn.LayerNorm(16)
        self.b = nn.Linear(16, 16)
        self.n2 = nn.LayerNorm(16, eps=1e-3)
        self.c = nn.Linear(16, 10)
        # not the fresh ones and zeros: an eval export merges equal
        # initializers, which would tie the two LayerNorms
        with torch.no_grad():
            for n in (self.n1, self.n2):
                n.weight.uniform_(0.5, 1.5)
                n.bias.uniform_(-0.2, 0.2)

    def forward(self, x):
        h = F.gelu(self.n1(self.a(x)))
        return self.c(torch.tanh(self.n2(self.b(h))))


class KX(nn.Module):
    def __init__(self):
        super().__init__()
        self.dw = nn.Conv2d(3, 6, 3, padding=1, groups=3)
        self.pw = nn.Conv2d(6, 8, 1)
        self.c2 = nn.Conv2d(8, 8, 3, stride=2)
        self.up = nn.ConvTranspose2d(8, 4, 2, stride=2)
        self.prelu = nn.PReLU(4, init=0.2)
        self.fc0 = nn.Linear(8 * 8 * 4, 12)
        self.ln = nn.LayerNorm(16)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        a = F.elu(F.leaky_relu(self.dw(x), 0.1))
        b = F.pad(F.gelu(self.pw(a)), (1, 0, 0, 1))
        b = F.selu(self.c2(b))
        u = self.prelu(F.relu6(self.up(b)) / 2.0)
        m = u.mean(dim=(2, 3))
        t = u.permute(0, 2, 3, 1)
        t = t.reshape(t.size(0), -1)
        h = self.ln(torch.cat([m, self.fc0(t)], dim=1))
        return self.fc(F.softplus(h) + torch.erf(h))


class UP(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 4, 3, padding=1)
        self.up = nn.Upsample(scale_factor=2)
        self.ct = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2)
        self.c2 = nn.Conv2d(6, 4, 3, stride=2, padding=1)
        self.fc = nn.Linear(4 * 4 * 4, 10)

    def forward(self, x):
        x = self.up(F.relu(self.c1(x)))
        x = F.relu(self.c2(torch.tanh(self.ct(x))))
        x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
        return self.fc(torch.flatten(F.avg_pool2d(x, 4), 1))


class EM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 8)
        self.fc1 = nn.Linear(6 * 8, 16)
        self.fc2 = nn.Linear(16, 10)

    def forward(self, x):
        e = self.emb(x)
        return self.fc2(torch.tanh(self.fc1(e.reshape(e.size(0), -1))))


class RN(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(5, 6, batch_first=True, bidirectional=True)
        self.gru = nn.GRU(12, 4, num_layers=2, batch_first=True)
        self.fc = nn.Linear(6 * 4, 10)

    def forward(self, x):
        y, _ = self.lstm(x)
        y, _ = self.gru(y)
        return self.fc(y.reshape(y.size(0), -1))


class OV(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(5, 6, batch_first=True)
        self.a = nn.Linear(36, 16)
        self.drop = nn.Dropout(0.0)
        self.b = nn.Linear(16, 10)

    def forward(self, x):
        y, _ = self.gru(x)
        return self.b(self.drop(F.relu6(self.a(y.reshape(y.size(0), -1)))))


OPSETS = {"o11": 11, "o12": 12, "o14": 14, "o15": 15, "o16": 16}


def torchvision_model(name):
    import torchvision
    m = {"r18": torchvision.models.resnet18, "mv2": torchvision.models.mobilenet_v2}[name](
        num_classes=10)
    if name == "mv2":
        m.classifier[0].p = 0.0
    return m


def iris():
    rows = np.loadtxt(os.path.join(ROOT, "tests/fixtures/iris.csv"), delimiter=",",
                      skiprows=1, usecols=range(5), dtype=np.float64)
    return rows[:, :4].astype(np.float32), rows[:, 4].astype(np.int32)


def digits():
    with gzip.open(os.path.join(ROOT, "tests/conv/data/digits.csv.gz"), "rt") as f:
        a = np.loadtxt(f, delimiter=",", dtype=np.int64)
    return a[:, :64].astype(np.uint8), a[:, 64].astype(np.int32)


def data(name, n):
    """x as stored (u8 or f32, NHWC for images), its scale, labels"""
    rng = np.random.RandomState(7)
    if name == "wa":
        x, y = iris()
        p = rng.permutation(len(x))[:n]
        return x[p], None, y[p], (4,)
    if name == "wd":
        x, y = digits()
        return x[:n].reshape(n, 8, 8, 1), 1.0 / 16, y[:n], (8, 8, 1)
    if name == "em":
        x = rng.randint(0, 20, size=(n, 6)).astype(np.uint8)
        return x, 1.0, rng.randint(0, 10, size=n).astype(np.int32), (6,)
    shape = {"wc": (784,), "wb": (12, 12, 3), "rb": (8, 8, 3), "mx": (8, 8, 3),
             "kx": (8, 8, 3), "ln": (12,), "up": (4, 4, 3), "o18": (8, 8, 3),
             "r18": (32, 32, 3), "mv2": (32, 32, 3), "rn": (6, 5),
             **{o: (6, 5) for o in OPSETS}}[name]
    x = rng.randint(0, 256, size=(n,) + shape).astype(np.uint8)
    return x, 1.0 / 255, rng.randint(0, 10, size=n).astype(np.int32), shape


def model(name):
    torch.manual_seed({"wa": 1, "wc": 2, "wb": 3, "wd": 4, "rb": 5, "mx": 6, "kx": 7,
                       "ln": 8, "up": 9, "em": 10, "o18": 7, "r18": 111, "mv2": 12,
                       "rn": 13, **{o: 14 for o in OPSETS}}[name])
    if name in ("r18", "mv2"):
        return torchvision_model(name)
    return {"wa": lambda: MLP([4, 32, 3], softmax=True),
            "wc": lambda: MLP([784, 512, 512, 10]),
            "wb": lambda: WB(12), "wd": WD, "rb": RB, "mx": MX, "kx": KX, "ln": LN,
            "up": UP, "em": EM, "o18": KX, "rn": RN, **{o: OV for o in OPSETS}}[name]()


def to_torch(x, scale, name):
    if name == "em":  # indices, as nn.Embedding takes them
        return torch.from_numpy(x.astype(np.int64))
    t = torch.from_numpy(x.astype(np.float32))
    if scale is not None:
        t = t * torch.tensor(scale, dtype=torch.float32)
    if t.dim() == 4:
        t = t.permute(0, 3, 1, 2).contiguous()
    return t


def lrs(name):
    """SGD's and Adam's learning rates; the torchvision models' are smaller:
    from a fresh initialisation at 0.02 their first steps are chaotic (a
    float's rounding at step 1 is 1e-2 at step 3), which a comparison
    cannot tell from a bug"""
    return (0.002, 1e-4) if name in TV else (0.02, 1e-3)


def train(name, m, xb, yb, opt):
    if opt == "sgd":
        o = torch.optim.SGD(m.parameters(), lr=lrs(name)[0], momentum=0.9)
    else:
        o = torch.optim.Adam(m.parameters(), lr=lrs(name)[1], eps=1e-7)
    m.train()
    losses = []
    for x, y in zip(xb, yb):
        o.zero_grad()
        out = m(x)
        if name == "wa":
            loss = F.nll_loss(torch.log(out), y)
        elif name == "mx":  # its output is log-probabilities
            loss = F.nll_loss(out, y)
        else:
            loss = F.cross_entropy(out, y)
        loss.backward()
        o.step()
        losses.append(loss.item())
    return np.array(losses, dtype=np.float32)


def export(name, m, x0, path):
    kw = dict(opset_version=17 if name in ("kx", "o18") else OPSETS.get(name, 13),
              input_names=["x"],
              output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    # training mode: BatchNormalization kept (eval folds it into Conv); an
    # RNN's weights stay the state_dict's initializers, reordered by nodes
    if name in ("rb", "r18", "mv2", "rn") + tuple(OPSETS):
        m.train()
        kw.update(training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    else:
        m.eval()
    torch.onnx.export(m, x0, path, **kw)
    if name == "up":
        to_output_shape(path, "/ct/ConvTranspose", (16, 16))
    if name == "o18":
        to_opset18(path)


def to_output_shape(path, node, hw):
    """the ConvTranspose's pads and output_padding as ONNX's output_shape
    (the same output: ONNX derives the pads from it)"""
    p = onnx.load(path)
    n = [n for n in p.graph.node if n.name == node]
    assert len(n) == 1, [n.name for n in p.graph.node]
    keep = [a for a in n[0].attribute if a.name not in ("pads", "output_padding")]
    del n[0].attribute[:]
    n[0].attribute.extend(keep + [onnx.helper.make_attribute("output_shape", list(hw))])
    onnx.save(p, path)


def to_opset18(path):
    """opset 17 -> 18 for what torch writes: Reduce* (ReduceSum excepted)
    take their axes as an input; the other opset-18 changes (Pad's and
    Resize's optional axes, Split's num_outputs, new operators) leave a
    torch 17 export as it is"""
    p = onnx.load(path)
    for n in p.graph.node:
        if n.op_type.startswith("Reduce") and n.op_type != "ReduceSum":
            ax = [a for a in n.attribute if a.name == "axes"]
            if not ax:
                continue
            t = onnx.numpy_helper.from_array(np.array(ax[0].ints, np.int64), n.name + "_axes")
            p.graph.initializer.append(t)
            keep = [a for a in n.attribute if a.name != "axes"]
            del n.attribute[:]
            n.attribute.extend(keep)
            n.input.append(t.name)
    for o in p.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = 18
    onnx.save(p, path)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "fixtures")
    os.makedirs(out, exist_ok=True)
    batch = {"wa": 10, "wc": 16, "wb": 8, "wd": 16, "rb": 8, "mx": 8, "kx": 8, "ln": 8,
             "up": 8, "em": 8, "o18": 8, "r18": 8, "mv2": 8, "rn": 8,
             **{o: 8 for o in OPSETS}}
    for name in sys.argv[2:] or ["wa", "wc", "wb", "wd", "rb", "mx", "kx", "ln", "up", "em",
                                 "o18", "rn"] + list(OPSETS):
        B = batch[name]
        steps = {"r18": 1, "mv2": 1}.get(name, STEPS)
        x, scale, y, shape = data(name, B * steps)
        xt, yt = to_torch(x, scale, name), torch.from_numpy(y.astype(np.int64))
        xb, yb = list(xt.split(B)), list(yt.split(B))
        m = model(name)
        init_state = {k: v.clone() for k, v in m.state_dict().items()}
        path = os.path.join(out, name + ".onnx")
        export(name, m, xb[0], path)
        m.load_state_dict(init_state)  # the export ran a forward pass (BN stats)
        inits, sd_of = match_inits(name, path, init_state)
        tensors = []

        def put(n, a, dt):
            tensors.append((n, a, dt))

        put("x", x, 4 if scale is not None else 1)
        put("scale", np.array([scale if scale is not None else 0.0], np.float32), 1)
        put("y", y, 2)
        put("lr", np.array(lrs(name), np.float32), 1)
        for opt in ["sgd", "adam"]:
            m.load_state_dict(init_state)
            losses = train(name, m, xb, yb, opt)
            put(opt + "/loss", losses, 1)
            worst = put_final(put, opt, m, inits, sd_of)
            print("%s %-4s losses %s  f16 rounding %.1e" % (name, opt, losses[[0, -1]], worst))
        write_ref(os.path.join(out, name + "_ref.bin"), tensors)


def match_inits(name, path, init_state):
    """the exported initializers, and which state_dict entry each float one
    is (torch keeps the names, or numbers them: matched by value);
    init_state becomes the initializers as exported (the export's forward
    pass in training mode moved BatchNorm's statistics)"""
    proto = onnx.load(path)
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in proto.graph.initializer}
    sd_of = {}
    for iname, arr in inits.items():
        if arr.dtype != np.float32:
            continue
        if iname in init_state:
            sd_of[iname] = iname
            continue
        hits = [k for k, v in init_state.items()
                if v.numel() == arr.size and v.dtype == torch.float32 and
                np.array_equal(v.numpy().reshape(-1), arr.reshape(-1))]
        assert len(hits) == 1, (name, iname)
        sd_of[iname] = hits[0]
    for iname, key in sd_of.items():
        init_state[key] = torch.from_numpy(inits[iname].copy()).reshape(init_state[key].shape)
    return inits, sd_of


def put_final(put, opt, m, inits, sd_of):
    """every initializer's final value as "<opt>/<name>": its change in
    float16 where that rounds by under 5e-6, else float32; the worst
    rounding"""
    sd = m.state_dict()
    worst = 0.0
    for iname, key in sorted(sd_of.items()):
        fin = sd[key].detach().numpy().astype(np.float32)
        delta = (fin - inits[iname].reshape(fin.shape)).astype(np.float16)
        rec = inits[iname].reshape(fin.shape) + delta.astype(np.float32)
        err = float(np.max(np.abs(rec - fin))) if fin.size else 0.0
        if err < 5e-6:
            worst = max(worst, err)
            put(opt + "/" + iname, delta.reshape(-1), 3)
        else:
            put(opt + "/" + iname, fin.reshape(-1), 1)
    return worst


def write_ref(path, tensors):
    """the RTRF file (this script's docstring) of (name, array, dtype)"""
    with open(path, "wb") as f:
        f.write(struct.pack("<III", 0x46525452, 1, len(tensors)))
        for n, a, dt in tensors:
            assert len(n) < 64, n
            a = np.ascontiguousarray(a)
            assert a.ndim <= 4, n
            dims = (list(a.shape) + [1, 1, 1, 1])[:4]
            f.write(n.encode().ljust(64, b"\0"))
            f.write(struct.pack("<II4I", dt, a.ndim, *dims))
            f.write(a.astype({1: "<f4", 2: "<i4", 3: "<f2", 4: "u1"}[dt]).tobytes())


if __name__ == "__main__":
    main()
