"""Train a PyTorch module on a remote rtraind without leaving PyTorch.

    import torch, rtrain.torch
    model = MyNet()                           # an nn.Module, BatchNorm and all
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    hist = rtrain.torch.fit(model, (x, y), loss_fn=torch.nn.CrossEntropyLoss(),
                            optimizer=opt, epochs=5, batch_size=64,
                            server="gpu-host:7070")
    # model's parameters and BatchNorm running statistics are the trained ones
    rtrain.torch.evaluate(model, (xv, yv), loss_fn=..., server=...)
    rtrain.torch.predict(model, xv, server=...)          # a torch.Tensor

What it does: exports the module with torch.onnx.export in training mode
(BatchNorm kept, its running statistics as they were before the export),
maps the loss module (or torch.nn.functional loss) and the torch.optim
optimizer onto the daemon's, uploads the data once (content-addressed: the
same tensors are not sent again), trains with a progress display, and
loads the trained weights and BatchNorm statistics back into the module's
state_dict. Data as PyTorch holds it: NCHW images, int64 class indices.

Mapped: losses CrossEntropyLoss (weight, ignore_index, label_smoothing),
NLLLoss (weight, ignore_index), BCEWithLogitsLoss (pos_weight), BCELoss,
MSELoss, L1Loss, SmoothL1Loss (beta), HuberLoss (delta), each with
reduction "mean" or "sum", and their torch.nn.functional forms with their
defaults; optimizers SGD (momentum, dampening, nesterov, weight_decay),
Adam (weight_decay added to the gradient, as torch.optim.Adam) and AdamW
(decoupled weight_decay), one parameter group holding every trainable
parameter. Anything else is refused by name (ValueError): a loss's
per-element weight, reduction "none", amsgrad, maximize, an optimizer
that already holds state, several parameter groups.
"""
import io
import struct

import numpy as np

from . import optimizers as _optimizers

__all__ = ["fit", "evaluate", "predict"]


def _torch():
    import torch  # noqa: F401 (imported here: rtrain does not need torch)
    return torch


# ------------------------------------------------------------------ data

def _np(t, what):
    torch = _torch()
    if isinstance(t, torch.Tensor):
        return t.detach().cpu().numpy()
    return np.asarray(t)


def _arrays(data, what="data"):
    """(x, y or None, loader batch size, loader shuffles) from tensors, a
    (x, y) pair, a TensorDataset or a DataLoader"""
    torch = _torch()
    from torch.utils.data import DataLoader, RandomSampler, TensorDataset
    bs = shuffle = None
    if isinstance(data, DataLoader):
        bs = data.batch_size
        shuffle = isinstance(data.sampler, RandomSampler)
        data = data.dataset
    if isinstance(data, TensorDataset):
        ts = data.tensors
    elif isinstance(data, (tuple, list)):
        ts = tuple(data)
    elif isinstance(data, (torch.Tensor, np.ndarray)):
        ts = (data,)
    elif hasattr(data, "__getitem__") and hasattr(data, "__len__"):
        # a map-style Dataset: its items, stacked once
        items = [data[i] for i in range(len(data))]
        if not items or not isinstance(items[0], (tuple, list)):
            raise ValueError("%s: a Dataset's items must be (x, y) pairs" % what)
        ts = tuple(np.stack([_np(it[k], what) for it in items])
                   for k in range(len(items[0])))
    else:
        raise TypeError("%s must be tensors, an (x, y) pair, a TensorDataset or a "
                        "DataLoader, got %s" % (what, type(data).__name__))
    if not 1 <= len(ts) <= 2:
        raise ValueError("%s holds %d tensors; it needs x, or x and y" % (what, len(ts)))
    x = np.ascontiguousarray(_np(ts[0], what), dtype=np.float32)
    y = None
    if len(ts) == 2:
        y = _np(ts[1], what)
        y = np.ascontiguousarray(y, dtype=np.int64 if y.dtype.kind in "iub" else np.float32)
        if len(y) != len(x):
            raise ValueError("%s: x has %d samples, y %d" % (what, len(x), len(y)))
    return x, y, bs, shuffle


# ------------------------------------------------------------------ loss

def _reduction(fn, name):
    r = getattr(fn, "reduction", "mean")
    if r not in ("mean", "sum"):
        raise ValueError("%s(reduction=%r): rtrain trains on a mean or a sum" % (name, r))
    return r


def _map_loss(fn):
    """(rtrain loss name, Client.compile keywords)"""
    torch = _torch()
    nn, F = torch.nn, torch.nn.functional
    if fn is None:
        raise ValueError("loss_fn is required, e.g. torch.nn.CrossEntropyLoss()")
    funcs = {F.cross_entropy: "cross_entropy", F.nll_loss: "nll_loss",
             F.binary_cross_entropy_with_logits: "bce_with_logits",
             F.binary_cross_entropy: "binary_cross_entropy", F.mse_loss: "mse_loss",
             F.l1_loss: "l1_loss", F.smooth_l1_loss: "smooth_l1_loss",
             F.huber_loss: "huber_loss"}
    if fn in funcs:
        return funcs[fn], {}
    name = type(fn).__name__
    kw = {}
    if isinstance(fn, (nn.CrossEntropyLoss, nn.NLLLoss)):
        kw["reduction"] = _reduction(fn, name)
        kw["ignore_index"] = int(fn.ignore_index)
        if fn.weight is not None:
            kw["class_weight"] = fn.weight
        if isinstance(fn, nn.CrossEntropyLoss):
            kw["label_smoothing"] = float(fn.label_smoothing)
            return "cross_entropy", kw
        return "nll_loss", kw
    if isinstance(fn, (nn.BCEWithLogitsLoss, nn.BCELoss)):
        if fn.weight is not None:
            raise ValueError("%s(weight=...): a per-element weight is not supported "
                             "(pos_weight is)" % name)
        kw["reduction"] = _reduction(fn, name)
        if isinstance(fn, nn.BCELoss):
            return "binary_cross_entropy", kw
        if fn.pos_weight is not None:
            kw["pos_weight"] = fn.pos_weight
        return "bce_with_logits", kw
    simple = {nn.MSELoss: "mse_loss", nn.L1Loss: "l1_loss"}
    if type(fn) in simple:
        return simple[type(fn)], {"reduction": _reduction(fn, name)}
    if isinstance(fn, nn.SmoothL1Loss):
        return "smooth_l1_loss", {"reduction": _reduction(fn, name), "beta": float(fn.beta)}
    if isinstance(fn, nn.HuberLoss):
        return "huber_loss", {"reduction": _reduction(fn, name), "delta": float(fn.delta)}
    raise ValueError("rtrain.torch cannot map the loss %s; it maps CrossEntropyLoss, "
                     "NLLLoss, BCEWithLogitsLoss, BCELoss, MSELoss, L1Loss, SmoothL1Loss, "
                     "HuberLoss and their torch.nn.functional forms" % name)


# ------------------------------------------------------------- optimizer

class _Mapped(_optimizers.Optimizer):
    """A torch.optim optimizer's settings, as the daemon takes them"""

    def __init__(self, name, cfg):
        super().__init__(cfg["learning_rate"])
        self.name = name
        self._cfg = cfg

    def _extra(self):
        return {k: v for k, v in self._cfg.items() if k != "learning_rate"}


def _map_optimizer(opt, module):
    torch = _torch()
    if opt is None:
        raise ValueError("optimizer is required, e.g. torch.optim.SGD(model.parameters(), "
                         "lr=0.1)")
    name = type(opt).__name__
    if len(opt.param_groups) != 1:
        raise ValueError("%s has %d parameter groups; rtrain.torch maps one" %
                         (name, len(opt.param_groups)))
    g = opt.param_groups[0]
    want = {id(p) for p in module.parameters() if p.requires_grad}
    have = {id(p) for p in g["params"]}
    if want != have:
        raise ValueError("%s holds %d of the module's %d trainable parameters; rtrain.torch "
                         "trains them all" % (name, len(want & have), len(want)))
    if any(len(s) for s in opt.state.values()):
        raise ValueError("%s already holds state from earlier steps; rtrain starts the "
                         "optimizer fresh: pass a new one" % name)
    if g.get("maximize"):
        raise ValueError("%s(maximize=True) is not supported" % name)
    lr = float(g["lr"])
    if type(opt) is torch.optim.SGD:
        mom = float(g["momentum"])
        if not 0.0 <= mom < 1.0:
            raise ValueError("SGD(momentum=%r): rtrain takes momentum in [0, 1)" % mom)
        return _Mapped("sgd", {"learning_rate": lr, "momentum": mom,
                               "nesterov": bool(g["nesterov"]),
                               "dampening": float(g["dampening"]) if mom else 0.0,
                               "l2_weight_decay": float(g["weight_decay"])})
    if type(opt) in (torch.optim.Adam, torch.optim.AdamW):
        if g.get("amsgrad"):
            raise ValueError("%s(amsgrad=True) is not supported" % name)
        b1, b2 = (float(b) for b in g["betas"])
        if not (0 < b1 < 1 and 0 < b2 < 1):
            raise ValueError("%s(betas=%r): rtrain takes betas in (0, 1)" % (name, g["betas"]))
        cfg = {"learning_rate": lr, "beta_1": b1, "beta_2": b2, "epsilon": float(g["eps"])}
        wd = float(g["weight_decay"])
        if type(opt) is torch.optim.AdamW and wd > 0:
            cfg["weight_decay"] = wd   # decoupled: w *= 1 - lr wd
            return _Mapped("adamw", cfg)
        if type(opt) is torch.optim.Adam:
            cfg["l2_weight_decay"] = wd   # added to the gradient
        return _Mapped("adam", cfg)
    raise ValueError("rtrain.torch cannot map the optimizer %s; it maps SGD, Adam and "
                     "AdamW" % name)


# ------------------------------------------------------------------ ONNX

def _export(module, x):
    """The module as ONNX (training mode: BatchNorm kept) and its
    state_dict as it was before: tracing in training mode moves BatchNorm's
    running statistics, which the caller puts back"""
    torch = _torch()
    sd = {k: v.detach().clone() for k, v in module.state_dict().items()}
    was = module.training
    f = io.BytesIO()
    module.train()
    try:
        torch.onnx.export(module, torch.from_numpy(x[:2].copy()), f, opset_version=13,
                          input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
                          training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False)
    finally:
        module.load_state_dict(sd)
        module.train(was)
    return f.getvalue(), sd


def _varint(b, i):
    v = s = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return v, i


def _fields(b):
    """(field number, wire type, value) of one protobuf message"""
    i = 0
    while i < len(b):
        key, i = _varint(b, i)
        f, w = key >> 3, key & 7
        if w == 0:
            v, i = _varint(b, i)
        elif w == 1:
            v, i = b[i:i + 8], i + 8
        elif w == 2:
            n, i = _varint(b, i)
            v, i = b[i:i + n], i + n
        elif w == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise ValueError("unexpected protobuf wire type %d" % w)
        yield f, w, v


def _initializers(onnx_bytes):
    """{name: float32 array} of a ModelProto's float initializers"""
    out = {}
    for f, _, graph in _fields(onnx_bytes):
        if f != 7:  # ModelProto.graph
            continue
        for g, _, t in _fields(graph):
            if g != 5:  # GraphProto.initializer
                continue
            dims, dtype, name, raw, floats = [], 1, "", None, []
            for k, w, v in _fields(t):
                if k == 1:  # dims, packed or not
                    if w == 2:
                        j = 0
                        while j < len(v):
                            d, j = _varint(v, j)
                            dims.append(d)
                    else:
                        dims.append(v)
                elif k == 2:
                    dtype = v
                elif k == 4:  # float_data
                    floats.extend(struct.unpack("<%df" % (len(v) // 4), v) if w == 2
                                  else struct.unpack("<f", v))
                elif k == 8:
                    name = bytes(v).decode()
                elif k == 9:
                    raw = bytes(v)
            if dtype != 1:
                continue
            a = (np.frombuffer(raw, "<f4") if raw is not None
                 else np.asarray(floats, np.float32))
            out[name] = a.reshape(dims) if dims else a.reshape(())
    return out


def _keys(inits, sd):
    """initializer name -> state_dict key: by name, else (PyTorch renames
    a few) by equal values"""
    keys = {}
    for n, a in inits.items():
        if n in sd:
            keys[n] = n
            continue
        hits = [k for k, v in sd.items() if v.numel() == a.size and v.is_floating_point()
                and np.array_equal(v.detach().cpu().numpy().reshape(-1), a.reshape(-1))]
        if len(hits) == 1:
            keys[n] = hits[0]
    return keys


# --------------------------------------------------------------- program

def _client(server):
    from . import Client, connect, get_default_client
    if server is None:
        return get_default_client()
    if isinstance(server, Client):
        return server
    return connect(server)


def _compile(module, x, loss, lkw, opt, batch_size, shuffle, seed, server, data_layout):
    onnx, sd = _export(module, x)
    # every parameter and statistic is its own initializer (an export that
    # merged equal ones would tie them in training)
    mapped = set(_keys(_initializers(onnx), sd).values())
    lost = [k for k, v in sd.items() if v.is_floating_point() and k not in mapped]
    if lost:
        raise ValueError("the ONNX export of the module has no initializer of its own for "
                         "%s; rtrain.torch cannot train it as PyTorch does" % ", ".join(lost[:4]))
    client = _client(server)
    cls = loss in ("cross_entropy", "nll_loss")
    model = client.compile(onnx, optimizer=opt, loss=loss, batch_size=batch_size,
                           shuffle=shuffle, seed=seed, data_layout=data_layout,
                           metrics=["accuracy"] if cls else None, **lkw)
    # the export's trace moved BatchNorm's statistics in the file: the
    # program starts from the module's own (vectors: the same layout in
    # the engine; weights of rank 2 and up are permuted, and unmoved)
    names = [p[0] for p in model._prog.report["params"]]
    w = model.get_weights()
    for i, n in enumerate(names):
        if n in sd and sd[n].dim() <= 1 and sd[n].numel() == w[i].size:
            w[i] = sd[n].detach().cpu().numpy().astype(np.float32).reshape(w[i].shape)
    model.set_weights(w)
    return model, onnx, sd


def _load_back(module, model, onnx0, sd):
    """the program's weights and BatchNorm statistics into the module"""
    torch = _torch()
    keys = _keys(_initializers(onnx0), sd)
    trained = _initializers(model.to_onnx())
    new = dict(module.state_dict())
    for n, a in trained.items():
        k = keys.get(n)
        if k is not None:
            new[k] = torch.from_numpy(a.copy()).reshape(new[k].shape).to(new[k].dtype)
    steps = model.global_step
    for k, v in new.items():
        if k.endswith("num_batches_tracked"):
            new[k] = v + steps
    module.load_state_dict(new)


def fit(module, data, loss_fn=None, optimizer=None, epochs=1, batch_size=None,
        server=None, shuffle=None, validation_data=None, verbose="auto", seed=0,
        data_layout=None):
    """Train module on rtraind; returns the History (per-epoch loss,
    accuracy for the class losses, val_* with validation_data).

    data and validation_data: (x, y) tensors or arrays, a TensorDataset or
    a DataLoader (its dataset, batch size and shuffling). batch_size: the
    DataLoader's, else 32. server: "host:port", an rtrain.Client, or None
    for the default connection. data_layout: "NHWC" for channels-last
    images (the default is the module's own NCHW)."""
    x, y, bs, sh = _arrays(data)
    if y is None:
        raise ValueError("fit needs targets: data must hold x and y")
    batch_size = batch_size or bs or 32
    shuffle = sh if shuffle is None else bool(shuffle)
    shuffle = True if shuffle is None else shuffle
    loss, lkw = _map_loss(loss_fn)
    opt = _map_optimizer(optimizer, module)
    model, onnx0, sd = _compile(module, x, loss, lkw, opt, batch_size, shuffle, seed, server,
                                data_layout)
    val = None
    if validation_data is not None:
        xv, yv, _, _ = _arrays(validation_data, "validation_data")
        val = (xv, yv)
    hist = model.fit(x, y, batch_size=batch_size, epochs=epochs, shuffle=shuffle,
                     validation_data=val, verbose=verbose)
    _load_back(module, model, onnx0, sd)
    return hist


def evaluate(module, data, loss_fn=None, batch_size=None, server=None, data_layout=None):
    """The loss over data on rtraind ([loss, accuracy] for the class
    losses), with the module in eval mode (BatchNorm's running statistics,
    no dropout)."""
    x, y, bs, _ = _arrays(data)
    if y is None:
        raise ValueError("evaluate needs targets: data must hold x and y")
    loss, lkw = _map_loss(loss_fn)
    torch = _torch()
    opt = _map_optimizer(torch.optim.SGD(
        [p for p in module.parameters() if p.requires_grad], lr=0.01), module)
    model, _, _ = _compile(module, x, loss, lkw, opt, batch_size or bs or 32, False, 0,
                           server, data_layout)
    return model.evaluate(x, y)


def predict(module, x, batch_size=None, server=None, data_layout=None):
    """The module's outputs for x (eval mode), computed on rtraind, as a
    torch.Tensor."""
    torch = _torch()
    xs, _, bs, _ = _arrays(x)
    opt = _map_optimizer(torch.optim.SGD(
        [p for p in module.parameters() if p.requires_grad], lr=0.01), module)
    # no loss is trained: any loss compiles (unchecked)
    model, _, _ = _compile(module, xs, "mse_loss", {"loss_check": False}, opt,
                           batch_size or bs or 32, False, 0, server, data_layout)
    return torch.from_numpy(model.predict(xs))
