"""rtrain: train on a remote rtraind from Python, Keras style.

    import rtrain
    from rtrain import layers, callbacks
    rtrain.connect("127.0.0.1:7070", timeout=10)   # or $RTRAIN_SERVER
    model = rtrain.Sequential([
        layers.Dense(32, activation="relu", input_shape=(4,)),
        layers.Dense(3, activation="softmax")])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    model.summary()
    history = model.fit(x, y, epochs=20, validation_data=(xv, yv),
                        callbacks=[callbacks.EarlyStopping(patience=3)])
    model.save_weights("iris.h5")          # Keras' HDF5 layout

The Functional API works the same way (rtrain.Input, layer calls,
rtrain.Model(inputs, outputs)). client.compile(spec, ...) compiles a
model or a Keras model JSON string on that client and returns the
CompiledModel that Model.compile keeps.

The C extension (rtrain._rtrain, on librtrain) does the networking, the
zero-copy uploads, the fit loop with its progress bar and Ctrl-C
cancellation, and the timing account of every call. This module declares
models (layers, Sequential -> Keras JSON) and converts arguments.

Data conversions (documented, never silent about what they cannot do):
  * features: C-contiguous float32 arrays are uploaded as they are, without a
    copy. Other real dtypes (float64, ints, bool) and non-contiguous views are
    converted to a C-contiguous float32 copy. Complex, object and string
    arrays raise TypeError. A shape that does not match the model's input
    raises ValueError.
  * labels: sparse losses take class indices and upload int32 (int64 or
    integral floats are converted; fractional values, or indices outside
    [0, classes), raise ValueError). Other losses upload float32.
    PyTorch's losses take labels as PyTorch makes them: cross_entropy and
    nll_loss integer class indices (int64 from torch or numpy; the
    ignore_index is allowed), cross_entropy also float probabilities of the
    output's shape; the others float targets of the output's shape.
  * layout: an ONNX model with a 4-D input takes NCHW data, as PyTorch
    holds it; NHWC only with compile(data_layout="NHWC").
"""

import json as _json
import os as _os
import sys as _sys
import time as _time
import weakref as _weakref

import numpy as _np

from . import _rtrain
from . import layers
from . import optimizers
from . import losses
from . import metrics as metrics_mod
from . import utils
from . import callbacks
from . import callbacks as callbacks_mod
from . import models
from . import mixed_precision
from .layers import Input
from .models import Model, Sequential
from ._rtrain import (Error, ConnectionError, InvalidArgument, NotFound,
                      DeadlineExceeded, Cancelled, ResourceExhausted,
                      FailedPrecondition, AlreadyExists, Unauthenticated,
                      Unimplemented, DataLoss, InternalError)

__all__ = [
    "connect", "get_default_client", "Client", "Model", "Sequential", "Input",
    "CompiledModel", "History", "Dataset", "HeldArrays", "layers", "optimizers", "callbacks",
    "models", "mixed_precision",
    "summarize_timings", "Error", "ConnectionError",
    "InvalidArgument", "NotFound", "DeadlineExceeded", "Cancelled",
    "ResourceExhausted", "FailedPrecondition", "AlreadyExists",
    "Unauthenticated", "Unimplemented", "DataLoss", "InternalError",
]

__version__ = _rtrain.__version__  # CMake project(VERSION), via rt_version.h

_SPARSE_LOSSES = {"sparse_categorical_crossentropy"}
# PyTorch's losses whose targets are class indices (cross_entropy: or
# float probabilities); the class axis is dim 1
_TORCH_CLASS_LOSSES = {"cross_entropy", "nll_loss"}
_LOSSES = {
    "sparse_categorical_crossentropy": "sparse_categorical_crossentropy",
    "categorical_crossentropy": "categorical_crossentropy",
    "binary_crossentropy": "binary_crossentropy",
    "mse": "mse", "mean_squared_error": "mse",
    "mae": "mae", "mean_absolute_error": "mae",
    "logcosh": "logcosh", "log_cosh": "logcosh",
    # Keras 3's (keras/src/losses/losses.py)
    "hinge": "hinge", "squared_hinge": "squared_hinge", "poisson": "poisson",
    "kl_divergence": "kl_divergence", "kld": "kl_divergence",
    "kullback_leibler_divergence": "kl_divergence", "huber": "huber",
    # PyTorch's, with PyTorch's semantics: torch.nn.functional's names and
    # torch.nn's modules
    "cross_entropy": "cross_entropy", "CrossEntropyLoss": "cross_entropy",
    "nll_loss": "nll_loss", "NLLLoss": "nll_loss",
    "bce_with_logits": "bce_with_logits",
    "binary_cross_entropy_with_logits": "bce_with_logits",
    "BCEWithLogitsLoss": "bce_with_logits",
    "binary_cross_entropy": "binary_cross_entropy", "BCELoss": "binary_cross_entropy",
    "mse_loss": "mse_loss", "MSELoss": "mse_loss",
    "l1_loss": "l1_loss", "L1Loss": "l1_loss",
    "smooth_l1_loss": "smooth_l1_loss", "SmoothL1Loss": "smooth_l1_loss",
    "huber_loss": "huber_loss", "HuberLoss": "huber_loss",
}
_TORCH_LOSSES = {"cross_entropy", "nll_loss", "bce_with_logits",
                 "binary_cross_entropy", "mse_loss", "l1_loss", "smooth_l1_loss",
                 "huber_loss"}
_METRICS = ("accuracy", "acc", "sparse_categorical_accuracy",
            "categorical_accuracy", "binary_accuracy")
# Keras metrics the daemon accumulates over the epoch besides accuracy
_VALUE_METRICS = {"top_k_categorical_accuracy": "top_k_categorical_accuracy",
                  "sparse_top_k_categorical_accuracy": "sparse_top_k_categorical_accuracy",
                  "mae": "mae", "mean_absolute_error": "mae",
                  "mse": "mse", "mean_squared_error": "mse",
                  "rmse": "rmse", "root_mean_squared_error": "rmse",
                  "auc": "auc", "AUC": "auc", "precision": "precision",
                  "recall": "recall"}
_DEFAULT_BATCH = 32  # Keras' fit/evaluate default

# Inline Predict messages stay well under gRPC's default 4 MiB receive limit.
_PREDICT_CHUNK_BYTES = 2 << 20


# ---------------------------------------------------------------- models

def _loss_spec(loss):
    """A loss as Keras saves or takes it, as (Keras function name,
    from_logits or None): a name ("mse"), a class name
    ("SparseCategoricalCrossentropy", as Keras 2.12 saves it), a Keras
    2/3 object ({"class_name": ..., "config": {"from_logits": ...}}) or
    Keras 3's function object ({"class_name": "function", "config":
    "binary_crossentropy"})."""
    from_logits = None
    if isinstance(loss, losses.Loss):
        return loss.fn, (loss.from_logits if loss._logits else None)
    if isinstance(loss, dict):
        cfg = loss.get("config")
        if loss.get("class_name") == "function" and isinstance(cfg, str):
            loss = cfg
        else:
            if isinstance(cfg, dict) and isinstance(cfg.get("from_logits"), bool):
                from_logits = cfg["from_logits"]
            loss = loss.get("class_name")
    if not isinstance(loss, str):
        return None, None
    if any(c.isupper() for c in loss):
        out = []
        for i, c in enumerate(loss):
            if c.isupper() and i and (loss[i - 1].islower() or loss[i - 1].isdigit() or
                                      (i + 1 < len(loss) and loss[i + 1].islower())):
                out.append("_")
            out.append(c.lower())
        loss = "".join(out)
    return loss, from_logits


def _saved_loss(spec_json):
    """The loss a Keras model saved with itself (Keras 3 compile_config,
    Keras 2 training_config, also inside TF.js modelTopology) as it was
    saved (a name or an object: _loss_spec reads it), or None."""
    try:
        doc = _json.loads(spec_json)
    except ValueError:
        return None
    for _ in range(3):
        if not isinstance(doc, dict):
            return None
        tc = doc.get("compile_config") or doc.get("training_config")
        if isinstance(tc, dict):
            loss = tc.get("loss")
            if isinstance(loss, dict) and "class_name" not in loss and len(loss) == 1:
                loss = next(iter(loss.values()))
            return loss if _loss_spec(loss)[0] else None
        doc = doc.get("modelTopology") or doc.get("model_config")
    return None


def _input_dims(spec_json):
    """The per-sample dims a Keras model's inputs declare (None where the
    JSON has null), one tuple per input found: a Sequential's first layer
    (or InputLayer), a Functional model's InputLayers."""
    try:
        doc = _json.loads(spec_json)
    except ValueError:
        return []
    # TF.js model.json and HDF5's attribute wrap the model (_spec_json)
    if isinstance(doc, dict) and "class_name" not in doc:
        doc = doc.get("modelTopology", doc)
        doc = doc.get("model_config", doc) if isinstance(doc, dict) else doc
    cfg = doc.get("config") if isinstance(doc, dict) else None
    layers = cfg if isinstance(cfg, list) else (
        cfg.get("layers") if isinstance(cfg, dict) else None)
    if not isinstance(layers, list):
        return []
    seq = doc.get("class_name") == "Sequential"
    found = []
    for ly in layers[:1] if seq else layers:
        if not isinstance(ly, dict):
            continue
        if not seq and ly.get("class_name") != "InputLayer":
            continue
        lc = ly.get("config") or {}
        bis = lc.get("batch_input_shape") or lc.get("batch_shape")
        if isinstance(bis, list) and bis:
            found.append(tuple(bis[1:]))
    return found


def _stateful_batch(spec_json):
    """A model with a stateful RNN: its fixed batch size (the first
    batch_input_shape / batch_shape with one, as the daemon reads it), else
    None."""
    if '"stateful": true' not in spec_json.replace('"stateful":true', '"stateful": true'):
        return None
    found = []

    def walk(o):
        if isinstance(o, dict):
            for k in ("batch_input_shape", "batch_shape"):
                v = o.get(k)
                if isinstance(v, list) and v and isinstance(v[0], int) and v[0] > 0:
                    found.append(v[0])
            for v in o.values():
                walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)
    walk(_json.loads(spec_json))
    return found[0] if found else None


def _spec_json(spec):
    if isinstance(spec, models.Model):
        return spec.to_json()
    if isinstance(spec, str):
        try:
            doc = _json.loads(spec)
        except ValueError as e:
            raise ValueError("model spec is not valid JSON: %s" % e) from None
        # TF.js model.json and HDF5's attribute wrap the model
        if isinstance(doc, dict) and "class_name" not in doc:
            doc = doc.get("modelTopology", doc)
            doc = doc.get("model_config", doc) if isinstance(doc, dict) else doc
        if not isinstance(doc, dict) or "class_name" not in doc:
            raise ValueError("model spec JSON is not a Keras model "
                             "(no class_name)")
        return spec
    if hasattr(spec, "to_json"):  # a Keras model object
        return spec.to_json()
    raise TypeError("model spec must be rtrain.Sequential or a Keras model "
                    "JSON string, got %r" % (type(spec).__name__,))


class Dataset:
    """A dataset held by the daemon (Client.upload_tfrecord,
    Client.upload_image_folder, Client.upload_idx, Client.upload): pass it
    as Model.fit's x (y None) or in validation_data, or to evaluate or
    predict. streamed: kept on the daemon's disk and read per batch."""

    def __init__(self, info):
        self.info = info
        self.id = info["id"]
        self.samples = info["samples"]
        self.x_shape = tuple(info["x_shape"])
        self.y_shape = tuple(info["y_shape"])
        self.records_skipped = info.get("records_skipped", 0)
        self.first_skipped = info.get("first_skipped", "")
        self.streamed = info.get("streamed", False)

    def _label(self):
        # DType: 1 F32, 2 I32
        return ("int32" if self.info["y_dtype"] == 2 else "float32", self.y_shape)

    def __repr__(self):
        return "<rtrain.Dataset %s: %d samples of %s>" % (self.id, self.samples,
                                                          self.x_shape)


class HeldArrays:
    """What Client.upload returns for arrays larger than one upload (the
    daemon holds an upload whole while it arrives, so the rows cannot
    become one data set there, streamed or not): the arrays stay here, and
    fit, evaluate and predict given it (as x, or as validation_data) send
    their rows in chunks of at most half the limit, each uploaded with
    the storage and shuffle_buffer given to upload, as they do for arrays
    given directly. id is None: it names no data set on the daemon."""

    id = None
    held_here = True

    def __init__(self, x, y, sw, upload_kw):
        self.x, self.y, self.sw, self.upload_kw = x, y, sw, upload_kw
        self.samples = int(x.shape[0])
        self.x_shape = tuple(x.shape[1:])
        self.y_shape = tuple(y.shape[1:]) if y is not None else ()
        self.streamed = upload_kw.get("storage") == _STORAGE.index("stream")
        self.records_skipped, self.first_skipped = 0, ""

    def __repr__(self):
        return "<rtrain.HeldArrays: %d samples of %s, sent in chunks>" % (self.samples,
                                                                          self.x_shape)


def _unheld(x, y, sw, what="x"):
    """(x, y, sample weights, upload kw) of HeldArrays x; else as given
    (kw None)."""
    if not isinstance(x, HeldArrays):
        return x, y, sw, None
    if y is not None:
        raise ValueError("%s is arrays held by Client.upload (they carry y); y must be None"
                         % what)
    return x.x, x.y, (x.sw if sw is None else sw), x.upload_kw


_KINDS = ("int64", "float", "jpeg", "png", "image")
_STORAGE = ("auto", "memory", "stream")


def _storage_kw(storage, shuffle_buffer):
    if storage not in _STORAGE:
        raise ValueError("storage is 'auto', 'memory' or 'stream'")
    if int(shuffle_buffer) < 0:
        raise ValueError("shuffle_buffer must be >= 0")
    return {"storage": _STORAGE.index(storage), "shuffle_buffer": int(shuffle_buffer)}


def _feature_spec(features):
    """{"image": "jpeg", "x": ("float", (4,)), "@frames": ("float", (10, 2))}
    -> "image:jpeg,x:float[4],@frames:float[10x2]" (the CLI's --features)."""
    if not isinstance(features, dict) or not features:
        raise ValueError("features must be a non-empty dict of key -> kind")
    out = []
    for key, kind in features.items():
        shape = ()
        if isinstance(kind, (tuple, list)):
            kind, shape = kind[0], tuple(kind[1])
        if kind not in _KINDS:
            raise ValueError("feature %r: kind must be one of %s, got %r"
                             % (key, ", ".join(_KINDS), kind))
        if any(c in str(key) for c in ",:[]"):
            raise ValueError("feature key %r has a reserved character" % key)
        if len(shape) > 2 or any(int(d) < 1 for d in shape):
            raise ValueError("feature %r: shape has 1 or 2 positive dims" % key)
        dims = "[%s]" % "x".join(str(int(d)) for d in shape) if shape else ""
        out.append("%s:%s%s" % (key, kind, dims))
    return ",".join(out)


def _model_image(model):
    """(h, w, channels) of a compiled model's image input, or None."""
    prog = getattr(model, "_prog", None) if model is not None else None
    if prog is None:
        return None
    s = prog.report.get("input_shape") or ()
    if len(s) != 3:
        return None
    h, w, c = (s[1], s[2], s[0]) if prog.report.get("data_layout") == "NCHW" else s
    return (int(h), int(w), int(c)) if c in (1, 3) and h > 0 and w > 0 else None


def _image_kw(image_size, channels, resize, mean, std, augment, model=None,
              default=None, images=True):
    """image_size/channels None: the model's input (the client's last
    compiled model), else default (an image folder's 256x256x3); without
    images to decode no size is needed."""
    kw = {}
    img = _model_image(model)
    if image_size is None:
        image_size = img[:2] if img else default
    if image_size is None and images:
        raise ValueError("image_size is not given and no compiled model has an image "
                         "input to take it from; pass image_size=(height, width)")
    if image_size is not None:
        h, w = image_size
        kw["height"], kw["width"] = int(h), int(w)
    if channels is None:
        channels = img[2] if img else 3
    kw["channels"] = int(channels)
    kw["resize"] = {"auto": 0, "bilinear": 1, "area": 2}[resize]
    if mean is not None:
        kw["mean"] = [float(v) for v in (mean if hasattr(mean, "__len__") else [mean])]
    if std is not None:
        kw["std"] = [float(v) for v in (std if hasattr(std, "__len__") else [std])]
    aug = dict(augment or {})
    kw["flip"] = bool(aug.pop("flip", False))
    kw["crop_pad"] = int(aug.pop("crop", 0))
    kw["brightness"] = float(aug.pop("brightness", 0.0))
    kw["contrast"] = float(aug.pop("contrast", 0.0))
    if aug:
        raise ValueError("augment takes flip, crop, brightness, contrast; got %s"
                         % sorted(aug))
    return kw


class History(dict):
    """fit()'s result: a dict with Keras' keys (loss, accuracy, val_loss,
    val_accuracy; one value per epoch). ``history.history`` is the dict
    itself, as on Keras' History object. ``timings`` lists the timing
    breakdown of every remote call the fit made. With callbacks, inside
    a Fit stream: ``lr_changes`` lists (global step, rate) for each step
    that started a new learning rate, ``stopped_at_step`` is the program's
    global step where a stop ended the fit (None otherwise)."""

    def __init__(self):
        super().__init__()
        self.lr_changes = []
        self.lr_seen = []
        self.stopped_at_step = None
        self.timings = []
        self.epoch = []
        self.params = {}
        self.status = "running"
        self.wall_s = 0.0

    @property
    def history(self):
        return self


def summarize_timings(timings):
    """Sum a list of timing dicts (e.g. History.timings): calls, and the
    total of every *_ns field, plus bytes sent/received."""
    out = {"calls": 0}
    for t in timings:
        out["calls"] += 1
        for k, v in t.items():
            if k.endswith("_ns") and k != "start_ns" or k.startswith("bytes_"):
                out[k] = out.get(k, 0) + v
    return out


def _as_array(a, what):
    try:
        arr = _np.asarray(a)
    except Exception as e:  # ragged lists and the like
        raise TypeError("%s cannot be made into an array: %s" % (what, e))
    if arr.dtype.kind not in "biuf":
        raise TypeError("%s must hold real numbers, got dtype %s"
                        % (what, arr.dtype))
    return arr


def _n_values(a):
    """How many values a holds: a NumPy array, a torch tensor (whose .size
    is a method), a list or dict of arrays (several inputs), or a nested
    list."""
    if isinstance(a, dict):
        return sum(_n_values(v) for v in a.values())
    if isinstance(a, (list, tuple)) and a and hasattr(a[0], "shape"):
        return sum(_n_values(v) for v in a)
    numel = getattr(a, "numel", None)
    if callable(numel):
        return int(numel())
    size = getattr(a, "size", None)
    if isinstance(size, (int, _np.integer)):
        return int(size)
    return int(_np.asarray(a).size)


def _features(x, input_shape, what="x"):
    """float32, C-contiguous, shape (n,) + input_shape. No copy when x is
    already that."""
    arr = _as_array(x, what)
    if arr.ndim == 0:
        raise ValueError("%s must have a sample dimension, got a scalar" % what)
    if input_shape is not None and tuple(arr.shape[1:]) != tuple(input_shape):
        hint = ""
        s, m = tuple(arr.shape[1:]), tuple(input_shape)
        if len(s) == 3 and len(m) == 3 and s == (m[1], m[2], m[0]):
            hint = ("; it looks NHWC and the model takes NCHW (PyTorch's): "
                    "transpose it, or compile with data_layout='NHWC'")
        raise ValueError("%s has shape %s but the model wants (n, %s)%s"
                         % (what, tuple(arr.shape),
                            ", ".join(map(str, input_shape)), hint))
    if arr.shape[0] == 0:
        raise ValueError("%s has no samples" % what)
    return _np.ascontiguousarray(arr, dtype=_np.float32)


# ------------------------------------------------ several inputs, outputs

def _multi_io(spec):
    """A Keras model with several inputs or outputs: ([(name, shape)] of
    its inputs, [(name, shape)] of its outputs); None for one of each."""
    if isinstance(spec, models.Model) and not isinstance(spec, models.Sequential):
        m = spec
    elif isinstance(spec, str):
        try:
            doc = _json.loads(spec)
        except ValueError:
            return None
        cfg = doc.get("config") if isinstance(doc, dict) else None
        if not isinstance(cfg, dict) or doc.get("class_name") not in ("Functional", "Model") \
                or (len(cfg.get("input_layers") or []) < 2 and
                    len(cfg.get("output_layers") or []) < 2) \
                or isinstance((cfg.get("input_layers") or [None])[0], str):
            return None
        m = models.model_from_json(doc)
    else:
        return None
    ins, outs = m._io()
    return (ins, outs) if len(ins) > 1 or len(outs) > 1 else None


def _per_output(v, names, what):
    """A list (in output order) or dict (by output name) of one value per
    output, as Keras' compile takes loss and loss_weights; a single value
    applies to every output."""
    if isinstance(v, (list, tuple)):
        if len(v) != len(names):
            raise ValueError("%s has %d entries; the model has %d outputs (%s)"
                             % (what, len(v), len(names), ", ".join(names)))
        return list(v)
    if isinstance(v, dict) and "class_name" not in v:
        bad = sorted(set(v) - set(names))
        if bad:
            raise ValueError("%s names %r, which is not an output (%s)"
                             % (what, bad[0], ", ".join(names)))
        return [v.get(nm) for nm in names]
    return [v] * len(names)


# librtrain takes one loss, weight and metric list per output, and the
# daemon reports each output's loss and metrics under Keras' names
_PER_OUTPUT = hasattr(_rtrain, "MAX_OUTPUTS")
# the same librtrain (and the daemon built with it) has Ftrl
optimizers._FTRL_ON_DAEMON = _PER_OUTPUT


def _output_metrics(metrics, names):
    """Keras 3's metrics of a model with several outputs: a list with one
    entry per output or a dict by output name (compile_utils.py
    _build_metrics_set), each entry a metric or a list; as per-output
    lists of the daemon's metric names."""
    if isinstance(metrics, dict):
        bad = sorted(set(metrics) - set(names))
        if bad:
            raise ValueError("metrics names %r, which is not an output (%s)"
                             % (bad[0], ", ".join(names)))
        per = [metrics.get(nm) for nm in names]
    elif isinstance(metrics, (list, tuple)) and len(metrics) == len(names):
        per = list(metrics)
    else:
        raise ValueError("metrics of a model with %d outputs: a list with one entry per "
                         "output or a dict by output name (%s), as Keras 3 takes them"
                         % (len(names), ", ".join(names)))
    out = []
    for nm, ms in zip(names, per):
        ms = [] if ms is None else (list(ms) if isinstance(ms, (list, tuple)) else [ms])
        got = []
        for m in ms:
            m = m.fn if isinstance(m, metrics_mod.Metric) else m
            if m in _METRICS:
                m = "accuracy"
            elif m in _VALUE_METRICS:
                m = _VALUE_METRICS[m]
            else:
                raise ValueError("output %r: unknown metric %r (known: %s)"
                                 % (nm, m, ", ".join(_METRICS + tuple(_VALUE_METRICS))))
            if m not in got:
                got.append(m)
        out.append(got)
    return out


def _compile_multi(spec, io, loss, loss_weights, from_logits, metrics):
    """The model JSON with Keras 3's compile_config holding one loss and
    weight per output (the daemon reads them: import_keras.h,
    rt_keras_heads), the loss that names the program, the heads
    [(name, shape, sparse)], librtrain's per-output entries (None without
    _PER_OUTPUT) and the names of what the daemon reports beside the total
    loss, in Keras' order: each output's loss, then each output's metrics
    ("out1_loss", "out2_loss", "out1_accuracy")."""
    names = [nm for nm, _ in io[1]]
    if metrics and not _PER_OUTPUT:
        raise ValueError("metrics of a model with several outputs are not "
                         "computed yet; compile it without metrics (the "
                         "loss is reported)")
    per_metrics = _output_metrics(metrics, names) if metrics else [[] for _ in names]
    losses = _per_output(loss, names, "loss")
    weights = _per_output(1.0 if loss_weights is None else loss_weights, names,
                          "loss_weights")
    saved, heads, outputs = {}, [], []
    for (nm, shape), l, w in zip(io[1], losses, weights):
        if l is None:
            raise ValueError("output %r has no loss (Keras would leave it "
                             "untrained, which rtrain does not)" % nm)
        name, logits = _loss_spec(l)
        key = _LOSSES.get(l if isinstance(l, str) else name) or _LOSSES.get(name)
        if key is None or key in _TORCH_LOSSES:
            raise ValueError("output %r: unknown loss %r (a Keras loss: %s)" % (
                nm, l, ", ".join(sorted(k for k in _LOSSES
                                        if _LOSSES[k] not in _TORCH_LOSSES))))
        if w is None or not (float(w) >= 0.0 and float(w) != float("inf")):
            raise ValueError("loss_weights[%r] = %r must be finite and >= 0" % (nm, w))
        saved[nm] = {"class_name": "".join(p.title() for p in key.split("_")),
                     "config": {"from_logits": bool(from_logits or logits)}} \
            if key in ("categorical_crossentropy", "sparse_categorical_crossentropy",
                       "binary_crossentropy") else key
        heads.append((nm, tuple(shape), key in _SPARSE_LOSSES))
        outputs.append({"loss": key, "from_logits": bool(from_logits or logits),
                        "weight": float(w), "metrics": per_metrics[len(outputs)]})
    doc = _json.loads(_spec_json(spec))
    doc["compile_config"] = {"loss": saved,
                             "loss_weights": {nm: float(w) for nm, w in zip(names, weights)}}
    first = _LOSSES.get(losses[0]) if isinstance(losses[0], str) else None
    reported = []
    if _PER_OUTPUT:
        reported = ["%s_loss" % nm for nm in names] + [
            "%s_%s" % (nm, m) for nm, ms in zip(names, per_metrics) for m in ms]
    return (_json.dumps(doc), first or _LOSSES[_loss_spec(losses[0])[0]], heads,
            outputs if _PER_OUTPUT else None, reported)


def _by_output(v, names, what):
    """Arrays given as a list (in order) or dict (by layer name), or one
    array for a single input or output."""
    if isinstance(v, dict):
        missing = [nm for nm in names if nm not in v]
        if missing:
            raise ValueError("%s has no array for %r (it needs %s)"
                             % (what, missing[0], ", ".join(names)))
        return [v[nm] for nm in names]
    if isinstance(v, (list, tuple)):
        if len(v) != len(names):
            raise ValueError("%s has %d arrays; the model has %d (%s)"
                             % (what, len(v), len(names), ", ".join(names)))
        return list(v)
    if len(names) == 1:
        return [v]
    raise ValueError("%s needs a list or dict of %d arrays (%s)"
                     % (what, len(names), ", ".join(names)))


class CompiledModel:
    """A model compiled on the daemon (made by Client.compile, or by
    Model.compile, which forwards to it)."""

    def __init__(self, client, spec_json, opts, metric, optimizer=None,
                 loss=None, onnx=None, onnx_output=None):
        self._client = client
        self._json = spec_json
        self._onnx = onnx            # the ONNX model's bytes, or None
        self._onnx_output = onnx_output
        self._opts = opts
        self._metric = metric
        self._sparse = opts["loss"] in _SPARSE_LOSSES
        self._torch_class = opts["loss"] in _TORCH_CLASS_LOSSES
        self._p = None          # the program (_prog), once compiled
        self._key = None
        self._unbound = False   # deferred: null input dims, bound from x
        self._pending_weights = None
        self._n_classes = None
        self._owner = None      # the rtrain.Model this program belongs to
        self._stop = False
        self._fitting = False
        self._in_batch_cb = False
        self._lr_set = False
        self.optimizer = optimizer
        self.loss = loss
        self.history = None

    def _multi_names(self):
        """The output names of a model with several outputs, else None."""
        m = getattr(self, "_multi", None)
        return [h[0] for h in m[1]] if m is not None else None

    def _keras_model(self):
        if self._onnx is not None:
            raise TypeError("an ONNX model has no Keras layers")
        if self._owner is None:
            self._owner = models.model_from_json(self._json)
        return self._owner

    @property
    def metrics_names(self):
        return (["loss"] + ([self._metric] if self._metric else [])
                + list(getattr(self, "_values", [])))

    @property
    def stop_training(self):
        """Keras' flag: set it (from a callback, or from another thread
        during fit) to end the fit at the next step boundary."""
        return self._stop

    @stop_training.setter
    def stop_training(self, v):
        self._stop = bool(v)
        # From a batch callback inside a Fit stream the stop goes to the
        # daemon as a Control call (fit's on_event); from anywhere else
        # the running call is cancelled.
        if self._stop and self._fitting and not self._in_batch_cb:
            self._client.cancel()

    @property
    def layers(self):
        return self._keras_model().layers

    def count_params(self):
        return int(self._prog.report["param_count"])

    def reset_states(self, layer=None):
        """Keras' model.reset_states() (layer: a layer's name, as
        layer.reset_states()): the stateful RNNs' carried states back to
        zeros before the next step. The daemon keeps them with the program
        between calls (fit, evaluate and predict carry them, as Keras) and
        in its checkpoints."""
        if self._p is not None:  # else not compiled yet: nothing carried
            self._p.control(reset_states=True, reset_layer=layer)

    def to_onnx(self, filepath=None):
        """The ONNX model this was compiled from, with the current (trained)
        weights as its initializers, in ONNX's own layout: load them into
        the PyTorch module through its state_dict. Writes filepath when
        given; returns the bytes."""
        if self._onnx is None:
            raise TypeError("to_onnx needs a model compiled from ONNX")
        data = self._prog.export_onnx(self._onnx, self._onnx_output)
        if filepath is not None:
            with open(filepath, "wb") as f:
                f.write(data)
        return data

    def to_json(self, **kw):
        if self._onnx is not None:
            raise TypeError("an ONNX model has no Keras JSON; use to_onnx")
        return self._json if not kw else _json.dumps(
            _json.loads(self._json), **kw)

    def save_weights(self, filepath, overwrite=True, save_format=None):
        """Keras' HDF5 weights layout (rtrain.saving)."""
        from . import saving
        saving.save_weights(self, filepath, overwrite=overwrite)

    def load_weights(self, filepath, by_name=False):
        from . import saving
        saving.load_weights(self, filepath, by_name=by_name)

    def save(self, filepath, overwrite=True, include_optimizer=False, format=None):
        """As Model.save: .keras (Keras 3's zip) or Keras 2's h5."""
        from . import saving
        if format == "keras" or (format is None and str(filepath).lower().endswith(".keras")):
            return saving.save_keras(self, filepath, overwrite=overwrite)
        saving.save_model(self, filepath, overwrite=overwrite)

    def _lr_arg(self):
        """The learning rate the next remote run sets on the daemon: the
        optimizer's, once it differs from the compiled config's (a
        callback or the user set optimizer.learning_rate); 0 leaves the
        program's own. The daemon applies it from the run's first step,
        keeping the optimizer state and the step count."""
        lr = getattr(self.optimizer, "learning_rate", None)
        if lr is None:
            return 0.0
        lr = float(lr)
        if not self._lr_set and lr == self._opts.get("learning_rate"):
            return 0.0
        if not lr > 0.0 or lr != lr or lr == float("inf"):
            raise ValueError("learning_rate must be a positive number, got "
                             "%r" % lr)
        self._lr_set = True
        return lr

    @property
    def learning_rate(self):
        """The rate the daemon's next step uses (its schedule's, or the
        one set through optimizer.learning_rate)."""
        return self._prog.get_weights()[2]

    # -- the program on the daemon ---------------------------------------

    @property
    def _prog(self):
        if self._p is None and self._unbound:
            raise RuntimeError(
                "the model's input has variable dims (null in its JSON): "
                "fit, evaluate or predict bind them from x, or give "
                "compile(input_shape=...)")
        return self._p

    @_prog.setter
    def _prog(self, v):
        self._p = v

    def _bind(self, x):
        """A deferred program (null input dims): compile it with x's
        per-sample shape. Keras, too, takes those dims from the data."""
        if self._p is not None or not self._unbound:
            return
        if isinstance(x, Dataset):
            raise ValueError("the model's input has variable dims; bind them "
                             "with arrays for x or compile(input_shape=...)")
        arr = _np.asarray(x)
        if arr.ndim < 2:
            raise ValueError("x has shape %s: it needs a batch axis and the "
                             "model's input dims" % (arr.shape,))
        self._opts["input_shape"] = tuple(int(d) for d in arr.shape[1:])
        self._compile(self._key)
        if self._pending_weights is not None:
            w, self._pending_weights = self._pending_weights, None
            self.set_weights(w)
        pend = getattr(self, "_pending_opt_vars", None)
        if pend is not None:  # a .keras file's optimizer/vars (saving.py)
            self._pending_opt_vars = None
            from . import saving
            saving.apply_optimizer_vars(self, pend)

    def _compile(self, key):
        if self._p is None and self._unbound and "input_shape" not in self._opts:
            self._key = key    # compiled by _bind on the first x
            return
        batch_size, shuffle, label = key
        opts = dict(self._opts, batch_size=batch_size, shuffle=shuffle)
        if label is not None:
            opts["label_dtype"], opts["label_shape"] = label
        old = self._p
        if old is not None:
            # A new batch size or label layout is a new program (the daemon
            # keys programs by their whole training config); it starts from
            # the old one's weights, optimizer state, step count and
            # learning rate.
            opts["state_from"] = old.id
        if self._onnx is not None:
            prog = self._client._compile(self._onnx, opts, self._onnx_output)
        else:
            prog = self._client._compile(self._json, opts)
        self._prog, self._key = prog, key
        out = prog.report["output_shape"]
        # PyTorch's class losses read the classes on dim 1
        self._n_classes = (out[0] if self._torch_class else out[-1]) if out else None

    def _ensure(self, batch_size=None, shuffle=None, label=None):
        bs, sh, lab = self._key
        key = (bs if batch_size is None else int(batch_size),
               sh if shuffle is None else bool(shuffle),
               lab if label is None else label)
        if key != self._key:
            self._compile(key)

    @property
    def program_id(self):
        return self._prog.id

    @property
    def report(self):
        """The daemon's compile report (params, FLOPs, arena bytes, ...)."""
        return self._prog.report

    @property
    def input_shape(self):
        s = self._prog.report["input_shape"]
        return tuple(s) if s else None

    @property
    def output_shape(self):
        s = self._prog.report["output_shape"]
        return tuple(s) if s else None

    @property
    def weight_names(self):
        return [p[0] for p in self._prog.report["params"]]

    @property
    def last_timings(self):
        """Timing breakdown (ns) of this model's last remote call: the
        daemon's queue/decode/compile/execute/encode/other, the client's
        encode/round trip/decode, and wire = round trip - server total."""
        return self._prog.last_timings

    @property
    def batch_size(self):
        return self._key[0]

    def summary(self, line_length=None, print_fn=print):
        """Keras' table (layers, output shapes, parameter counts), then the
        daemon's program: id, FLOPs per step and arena bytes."""
        self._keras_model().summary(line_length=line_length,
                                    print_fn=print_fn)
        r = self.report
        print_fn("Program %s on %s: %d FLOP/step, arena %d B"
                 % (r["program_id"], self._client.target,
                    r["flops_per_step"], r["arena_bytes"]))

    # -- data -------------------------------------------------------------

    def _labels(self, y, n, what="y"):
        arr = _as_array(y, what)
        if arr.ndim == 0 or arr.shape[0] != n:
            raise ValueError("%s has %s samples but x has %d"
                             % (what, arr.shape[0] if arr.ndim else "no", n))
        if getattr(self, "_multi", None) is not None:
            arr = _np.ascontiguousarray(arr, dtype=_np.float32)  # packed (_pack_y)
            return arr, ("float32", tuple(arr.shape[1:]))
        if self._torch_class and (arr.dtype.kind in "iub" or
                                  self._opts["loss"] == "nll_loss"):
            # class indices, as PyTorch takes them (int64 usually): the
            # ignore_index passes, the rest must be classes
            if arr.dtype.kind == "f" and not _np.all(_np.floor(arr) == arr):
                raise ValueError("%s: class indices must be whole numbers" % what)
            ign = self._opts.get("ignore_index", -100)
            k = self._n_classes
            kept = arr[arr != ign]
            if kept.size and (kept.min() < 0 or (k is not None and kept.max() >= k)):
                raise ValueError("%s: class indices must be in [0, %s) or the "
                                 "ignore_index %d, got %s..%s" % (
                                     what, k, ign, kept.min(), kept.max()))
            if arr.ndim == 2 and arr.shape[1] == 1 and (k is None or k > 1):
                arr = arr.reshape(-1)
            return (_np.ascontiguousarray(arr, dtype=_np.int32),
                    ("int32", tuple(arr.shape[1:])))
        if self._sparse:
            if arr.ndim == 2 and arr.shape[1] == 1:
                arr = arr.reshape(-1)
            if arr.ndim != 1:
                raise ValueError("%s: a sparse loss wants class indices of "
                                 "shape (n,), got %s" % (what, arr.shape))
            if arr.dtype.kind == "f" and not _np.all(_np.floor(arr) == arr):
                raise ValueError("%s: class indices must be whole numbers"
                                 % what)
            k = self._n_classes
            if k is not None and (arr.min() < 0 or arr.max() >= k):
                raise ValueError("%s: class indices must be in [0, %d), got "
                                 "%s..%s" % (what, k, arr.min(), arr.max()))
            return (_np.ascontiguousarray(arr, dtype=_np.int32),
                    ("int32", ()))
        arr = _np.ascontiguousarray(arr, dtype=_np.float32)
        return arr, ("float32", tuple(arr.shape[1:]))

    # several inputs and outputs travel packed: per sample each input's
    # values in turn, each output's labels in turn (f32; one class index
    # per row for a sparse loss), as the daemon's program takes them

    def _pack_x(self, x, what="x"):
        m = getattr(self, "_multi", None)
        if m is None or x is None or isinstance(x, Dataset):
            return x
        arrs = [_as_array(a, what) for a in _by_output(x, [nm for nm, _ in m[0]], what)]
        n = arrs[0].shape[0] if arrs[0].ndim else 0
        for (nm, shape), a in zip(m[0], arrs):
            if a.ndim == 0 or a.shape[0] != n or tuple(a.shape[1:]) != tuple(shape):
                raise ValueError("%s[%r] has shape %s; the input wants (%d,) + %s"
                                 % (what, nm, a.shape, n, tuple(shape)))
        return _np.ascontiguousarray(_np.concatenate(
            [a.reshape(n, -1).astype(_np.float32) for a in arrs], axis=1))

    def _pack_y(self, y, what="y"):
        m = getattr(self, "_multi", None)
        if m is None or y is None:
            return y
        arrs = [_as_array(a, what) for a in _by_output(y, [h[0] for h in m[1]], what)]
        n = arrs[0].shape[0] if arrs[0].ndim else 0
        out = []
        for (nm, shape, sparse), a in zip(m[1], arrs):
            per = int(_np.prod(shape))
            want = per // shape[-1] if sparse else per
            if a.ndim == 0 or a.shape[0] != n or a.size != n * want:
                raise ValueError("%s[%r] has shape %s; the output %s wants %d "
                                 "values a sample" % (what, nm, a.shape, shape, want))
            a = a.reshape(n, want)
            if sparse and (not _np.all(_np.floor(a) == a) or a.min() < 0
                           or a.max() >= shape[-1]):
                raise ValueError("%s[%r]: class indices must be whole numbers in "
                                 "[0, %d)" % (what, nm, shape[-1]))
            out.append(a.astype(_np.float32))
        return _np.ascontiguousarray(_np.concatenate(out, axis=1))

    def _unpack(self, out):
        m = getattr(self, "_multi", None)
        if m is None:
            return out
        n, res, at = out.shape[0], [], 0
        out = out.reshape(n, -1)
        for _, shape, _ in m[1]:
            k = int(_np.prod(shape))
            res.append(out[:, at:at + k].reshape((n,) + tuple(shape)))
            at += k
        # one output (several inputs): its array, as Keras' predict
        return res if len(res) > 1 else res[0]

    def _upload(self, x, y, name, sw=None):
        self._bind(x)
        if isinstance(x, Dataset):
            if y is not None:
                raise ValueError("a Dataset holds its labels; y must be None")
            if sw is not None:
                raise ValueError("sample_weight and class_weight need x and "
                                 "y as arrays, not an uploaded Dataset")
            return x.info, x._label()
        xs = _features(x, self.input_shape, "x" if name == "train" else
                       "%s x" % name)
        if y is None:
            return self._client._upload(xs, None, name), None
        ys, label = self._labels(y, xs.shape[0],
                                 "y" if name == "train" else "%s y" % name)
        return self._client._upload(xs, ys, name, sw), label

    def _over_upload(self, x, y, sw):
        """Whether x, y and sw (arrays, as fit packed them) hold more
        bytes than the daemon takes in one upload: then they go in chunks."""
        if x is None or isinstance(x, Dataset):
            return False
        f = getattr(self._client, "_upload_limit", None)
        lim = f() if f is not None else 0
        if not lim:
            return False
        n = 4 * sum(_n_values(a) for a in (x, y, sw) if a is not None)
        return n > lim

    def _sample_weights(self, y, n, sample_weight, class_weight, what="y"):
        """Keras' per-sample loss weights: sample_weight, times
        class_weight[class of the sample] (the class index for sparse
        labels, the argmax of a one-hot row, the 0/1 value of a binary
        label). None when neither is given."""
        if sample_weight is None and class_weight is None:
            return None
        w = _np.ones(n, dtype=_np.float64)
        if sample_weight is not None:
            sw = _np.asarray(sample_weight, dtype=_np.float64)
            if sw.ndim == 2 and sw.shape[1] == 1:
                sw = sw.reshape(-1)
            if sw.shape != (n,):
                raise ValueError("sample_weight has shape %s; it needs one "
                                 "weight per sample: (%d,)" % (sw.shape, n))
            if not _np.all(_np.isfinite(sw)) or _np.any(sw < 0):
                raise ValueError("sample_weight must be finite and >= 0")
            w *= sw
        if class_weight is not None:
            if not isinstance(class_weight, dict):
                raise ValueError("class_weight must be a dict {class: weight}")
            ya = _np.asarray(y)
            if ya.ndim == 2 and ya.shape[1] > 1:
                cls = ya.argmax(axis=1)
            elif ya.ndim <= 2:
                cls = ya.reshape(-1)
                if cls.dtype.kind == "f":
                    cls = _np.round(cls)
                cls = cls.astype(_np.int64)
            else:
                raise ValueError("class_weight is not supported for %d-D "
                                 "labels" % ya.ndim)
            try:
                cw = {int(k): float(v) for k, v in class_weight.items()}
            except (TypeError, ValueError):
                raise ValueError("class_weight maps class indices to "
                                 "numbers") from None
            missing = sorted(set(_np.unique(cls).tolist()) - set(cw))
            if missing:
                raise ValueError("class_weight has no weight for class %s"
                                 % missing[0])
            for k, v in cw.items():
                if not (v >= 0.0 and v != float("inf")):
                    raise ValueError("class_weight[%d] = %r must be finite "
                                     "and >= 0" % (k, v))
            w *= _np.array([cw[int(c)] for c in cls], dtype=_np.float64)
        return _np.ascontiguousarray(w, dtype=_np.float32)

    # -- Keras API --------------------------------------------------------

    def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto",
            callbacks=None, validation_split=0.0, validation_data=None,
            shuffle=True, class_weight=None, sample_weight=None,
            initial_epoch=0, steps_per_epoch=None, validation_steps=None,
            validation_batch_size=None, validation_freq=1,
            steps_per_execution="auto", checkpoint_every_steps=None,
            checkpoint_every_s=None):
        """Train on the daemon; returns a History (a dict of per-epoch
        lists under Keras' keys).

        batch_size: None is Keras' 32. epochs: the index of the last epoch
        (epochs - initial_epoch epochs run). validation_freq: validate every
        n-th epoch (an int) or at the epochs listed (1-based).
        validation_batch_size: accepted; the daemon evaluates in the
        program's batches and the result does not depend on it.
        sample_weight (n,) and class_weight {class: weight}: per-sample
        loss weights, as Keras (the batch loss is sum(w_i * l_i) / batch;
        accuracy unweighted); validation_data may carry a third array of
        validation sample weights. A learning rate set on
        model.optimizer.learning_rate (by LearningRateScheduler,
        ReduceLROnPlateau or the user) takes effect on the daemon from the
        next run's first step, keeping the optimizer state.
        callbacks: rtrain.callbacks objects (see that module); the fit then
        runs one remote run per epoch so that each epoch end is seen before
        the next epoch starts.
        steps_per_execution: "auto" (the default) runs RunSteps calls, up
        to 8 in flight and run in order, with K steps each picked from the
        measured round trip and step time and re-chosen as the fit runs
        (the chosen K is printed with verbose); an int K runs K steps per
        call (never across an epoch end); None runs each run as one Fit
        stream. A callback with a per-batch hook (on_batch_end,
        on_train_batch_end) gets one call per batch, as
        Keras' default does: with "auto" such a fit runs one Fit stream
        (with an int K the hooks see every K-th batch, as Keras' own
        steps_per_execution); so does an "auto" fit with
        checkpoint_every_steps (a RunSteps call is checkpointed at its
        end).
        Ctrl-C (KeyboardInterrupt) stops the remote fit at a step boundary;
        the model keeps the weights of the steps done, model.history holds
        the epochs completed and its status is "interrupted".
        model.stop_training = True (a callback, another thread) ends the
        fit at the next step boundary with status "stopped".
        checkpoint_every_steps, checkpoint_every_s: against a daemon with
        --state-dir, a checkpoint every N steps / T seconds of this fit in
        place of the daemon's default (each epoch end has one anyway)."""
        from . import _feed
        x, y, sample_weight, upkw = _unheld(x, y, sample_weight)
        vkw = None
        if isinstance(validation_data, HeldArrays):
            vx, vy, vsw, vkw = _unheld(validation_data, None, None, "validation_data")
            validation_data = (vx, vy) if vsw is None else (vx, vy, vsw)
        src = _feed.is_batch_source(x)
        if src:
            if y is not None:
                raise ValueError("y must be None when x is a generator or a Sequence (its "
                                 "batches hold the targets)")
            if validation_split:
                raise ValueError("validation_split needs arrays; give validation_data "
                                 "with a generator or a Sequence")
            if sample_weight is not None:
                raise ValueError("sample_weight needs arrays; a generator or Sequence "
                                 "gives weights as the third item of its batches")
        elif x is None or (y is None and not isinstance(x, Dataset)):
            raise ValueError("fit needs x and y (or an uploaded Dataset as x)")
        val_src = _feed.is_batch_source(validation_data)
        if not src:
            x, y = self._pack_x(x), self._pack_y(y)
        if not val_src and isinstance(validation_data, (list, tuple)) and \
                len(validation_data) >= 2:
            validation_data = (self._pack_x(validation_data[0], "validation x"),
                               self._pack_y(validation_data[1], "validation y")) + \
                tuple(validation_data[2:])
        for v, n in ((epochs, "epochs"), (initial_epoch, "initial_epoch")):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError("%s must be an int >= 0, got %r" % (n, v))
        ckpt = {}
        for v, n in ((checkpoint_every_steps, "checkpoint_every_steps"),
                     (checkpoint_every_s, "checkpoint_every_s")):
            if v is not None:
                if isinstance(v, bool) or not isinstance(v, int) or not 0 < v < 2**31:
                    raise ValueError("%s must be a positive int, got %r" % (n, v))
                ckpt[n] = v
        self._ckpt = ckpt
        verbose = _auto_verbose() if verbose == "auto" else int(verbose)
        if verbose not in (0, 1, 2):
            raise ValueError("verbose must be 0, 1, 2 or 'auto'")
        if verbose == 1 and not _interactive():
            verbose = 2  # no '\r' bar redraws into a pipe or a log file
        if batch_size is None:  # Keras: the model's fixed batch size, else 32
            batch_size = getattr(self, "_fixed_batch", None) or _DEFAULT_BATCH
        for v, n in ((batch_size, "batch_size"),
                     (validation_batch_size, "validation_batch_size")):
            if v is not None and (isinstance(v, bool) or int(v) <= 0):
                raise ValueError("%s must be a positive int" % n)
        if isinstance(validation_freq, int) and not isinstance(
                validation_freq, bool):
            if validation_freq < 1:
                raise ValueError("validation_freq must be >= 1")
            due = lambda ep: (ep + 1) % validation_freq == 0  # noqa: E731
        else:
            try:
                freq = set(int(e) for e in validation_freq)
            except TypeError:
                raise ValueError("validation_freq must be an int or a list "
                                 "of epochs") from None
            due = lambda ep: ep + 1 in freq  # noqa: E731
        if validation_data is not None and validation_split:
            raise ValueError("give validation_data or validation_split, "
                             "not both")
        if validation_split:
            if not 0.0 < validation_split < 1.0:
                raise ValueError("validation_split must be in (0, 1)")
            x, y = _as_array(x, "x"), _as_array(y, "y")
            # Keras takes the last fraction, before any shuffling.
            cut = int(len(x) * (1.0 - validation_split))
            if cut <= 0 or cut >= len(x):
                raise ValueError("validation_split leaves no training or no "
                                 "validation samples")
            validation_data = (x[cut:], y[cut:])
            x, y = x[:cut], y[:cut]
            if sample_weight is not None:
                sample_weight = _np.asarray(sample_weight)[:cut]
        t0 = _time.perf_counter()
        hist = History()
        self.history = hist
        self._stop = False
        owner = self._owner if self._owner is not None else self
        cbl = None
        try:
            if src:
                hist.status = self._fit_source(
                    _feed, x, validation_data, val_src, validation_steps, epochs,
                    initial_epoch, steps_per_epoch, shuffle, class_weight, callbacks,
                    owner, hist, due, verbose)
                return hist
            sw = None
            if not isinstance(x, Dataset):
                sw = self._sample_weights(y, len(x), sample_weight,
                                          class_weight)
            elif sample_weight is not None or class_weight is not None:
                raise ValueError("sample_weight and class_weight need x and "
                                 "y as arrays, not an uploaded Dataset")
            vd = validation_data
            val_over = vkw is not None or (
                isinstance(vd, (tuple, list)) and len(vd) >= 2 and
                not isinstance(vd[0], Dataset) and self._over_upload(vd[0], vd[1], None))
            if upkw is not None or val_over or self._over_upload(x, y, sw):
                # too large for one upload (or its validation data is): sent
                # in chunks, the rows shuffled here (sw holds the class
                # weights already)
                rows = _feed.ArrayRows(x, y, sw, batch_size, shuffle,
                                       self._opts.get("seed", 0), upload_kw=upkw)
                hist.status = self._fit_source(
                    _feed, rows, validation_data, val_src, validation_steps, epochs,
                    initial_epoch, steps_per_epoch, False, None, callbacks,
                    owner, hist, due, verbose, val_kw=vkw)
                return hist
            ds, label = self._upload(x, y, "train", sw)
            hist.timings.append(self._client.last_timings)
            val_id = None
            if validation_data is not None:
                if isinstance(validation_data, Dataset):
                    validation_data = (validation_data, None)
                if (not isinstance(validation_data, (tuple, list)) or
                        len(validation_data) not in (2, 3)):
                    raise ValueError("validation_data must be (x_val, y_val) "
                                     "or (x_val, y_val, val_sample_weight)")
                vsw = None
                if len(validation_data) == 3 and validation_data[2] is not None:
                    vsw = self._sample_weights(
                        validation_data[1], len(validation_data[0]),
                        validation_data[2], None)
                if val_src:
                    raise ValueError("validation_data from a generator or a Sequence "
                                     "needs x from one too, or arrays")
                vds, vlabel = self._upload(validation_data[0],
                                           validation_data[1], "validation",
                                           vsw)
                hist.timings.append(self._client.last_timings)
                if vlabel != label:
                    raise ValueError("validation labels have layout %s but "
                                     "training labels %s" % (vlabel, label))
                val_id = vds["id"]
            self._ensure(batch_size, shuffle, label)
            bs = self._key[0]
            n = ds["samples"]
            spe = (int(steps_per_epoch) if steps_per_epoch is not None
                   else -(-n // bs))
            if spe <= 0:
                raise ValueError("steps_per_epoch must be positive")
            spx = 0
            if steps_per_execution == "auto":
                spx = "auto"
            elif steps_per_execution is not None:
                if isinstance(steps_per_execution, str):
                    raise ValueError("steps_per_execution must be an int or "
                                     "'auto', got %r" % (steps_per_execution,))
                spx = int(steps_per_execution)
                if spx <= 0:
                    raise ValueError("steps_per_execution must be positive")
            hist.params = {"epochs": epochs, "steps": spe, "batch_size": bs,
                           "samples": n, "steps_per_execution": spx or None,
                           "verbose": verbose,
                           "initial_epoch": initial_epoch}
            cbl = callbacks_mod.CallbackList(callbacks, owner, hist.params)
            if spx == "auto" and (cbl.batch_hooks() or
                                  checkpoint_every_steps is not None):
                # every batch's hook, at the step it ran: the stream's
                # events; a checkpoint every N steps: the stream's (a
                # RunSteps call is checkpointed at its end, auto K's ends
                # are not every N steps)
                spx = 0
                hist.params["steps_per_execution"] = None
            per_epoch = bool(cbl.callbacks) or validation_freq != 1
            if epochs <= initial_epoch:
                hist.status = "done"
                return hist
            self._fitting = True
            if self.optimizer is not None and self.optimizer._python_rate() is not None:
                # the rate of each step comes from here: runs of one rate
                hist.params["steps_per_execution"] = None
                hist.status = _feed.fit_driven(self, (ds["id"], label, spe), val_id, epochs,
                                               initial_epoch, cbl, hist, due, verbose)
                return hist
            if not per_epoch:
                hist.status = self._prog.fit(
                    ds["id"], val_id, epochs - initial_epoch, spe, spx,
                    verbose, hist, hist.timings, self._metric, 1,
                    first_epoch=initial_epoch, total_epochs=epochs,
                    learning_rate=self._lr_arg(), **ckpt)
                if hist.status == "cancelled" and self._stop:
                    hist.status = "stopped"
                return hist
            hist.status = self._fit_epochs(cbl, hist, ds["id"], val_id, due,
                                           initial_epoch, epochs, spe, spx,
                                           verbose)
        finally:
            self._fitting = False
            if hist.status == "running":
                hist.status = "interrupted"
            hist.epoch = list(range(initial_epoch, initial_epoch +
                                    len(hist.get("loss", ()))))
            hist.wall_s = _time.perf_counter() - t0
        return hist

    def _fit_source(self, _feed, x, validation_data, val_src, validation_steps, epochs,
                    initial_epoch, steps_per_epoch, shuffle, class_weight, callbacks,
                    owner, hist, due, verbose, val_kw=None):
        """fit on a generator or Sequence (rtrain._feed)."""
        train = _feed.Source(x, steps_per_epoch, shuffle, "x")
        val = None
        if val_src:
            val = _feed.Source(validation_data, validation_steps, False, "validation_data")
        elif validation_data is not None:
            if isinstance(validation_data, Dataset):
                validation_data = (validation_data, None)
            if not isinstance(validation_data, (tuple, list)) or \
                    len(validation_data) not in (2, 3):
                raise ValueError("validation_data must be (x_val, y_val), (x_val, y_val, "
                                 "val_sample_weight), a generator or a Sequence")
            vx, vy = validation_data[0], validation_data[1]
            vsw = None
            if len(validation_data) == 3 and validation_data[2] is not None:
                vsw = self._sample_weights(vy, len(vx), validation_data[2], None)
            if val_kw is not None or self._over_upload(vx, vy, vsw):
                val = _feed.Source(_feed.ArrayRows(vx, vy, vsw, self._key[0] if self._key
                                                   else _DEFAULT_BATCH, upload_kw=val_kw),
                                   None, False, "validation_data")
            else:
                vds, _ = self._upload(vx, vy, "validation", vsw)
                hist.timings.append(self._client.last_timings)
                val = vds["id"]
        hist.params = {"epochs": epochs, "steps": steps_per_epoch or train.n,
                       "verbose": verbose, "initial_epoch": initial_epoch,
                       "steps_per_execution": None}
        cbl = callbacks_mod.CallbackList(callbacks, owner, hist.params)
        if epochs <= initial_epoch:
            return "done"
        self._fitting = True
        return _feed.fit_driven(self, train, val, epochs, initial_epoch, cbl, hist, due,
                                verbose, class_weight=class_weight)

    def _fit_epochs(self, cbl, hist, ds, val_id, due, initial_epoch, epochs,
                    spe, spx, verbose):
        """fit with callbacks: one remote run per epoch.

        Inside a Fit stream a learning rate or model.stop_training set by
        on_batch_end goes to the daemon at once (a Control call), which
        applies it at its next step boundary: the first step that starts
        after the call reaches it (the daemon runs ahead of the events the
        callbacks see). The stream reports the first step of every new rate
        (history.lr_changes: (global step, rate)); a stop ends the run after
        a step, without an error (history.status "stopped", history.
        stopped_at_step). With steps_per_execution the rate goes with the
        next RunSteps call and a stop cancels the run."""
        last = {}
        sent = {"lr": None}
        stream = not spx

        def on_event(kind, info):
            if kind == "epoch":
                last.clear()
                last.update(info)
                return self._stop if not stream else None
            lr = info.get("learning_rate", 0.0)
            if lr and (not hist.lr_seen or hist.lr_seen[-1] != lr):
                if hist.lr_seen:
                    hist.lr_changes.append((info["step"], lr))
                hist.lr_seen.append(lr)
            logs = {"loss": info["loss"]}
            if self._metric:
                logs[self._metric] = info["accuracy"]
            self._in_batch_cb = stream
            try:
                cbl.on_batch_end(info["batch"], logs)
            finally:
                self._in_batch_cb = False
            if not stream:
                return self._stop
            want = self._lr_arg()
            new_lr = want if want and want != sent["lr"] else 0.0
            if new_lr:
                sent["lr"] = new_lr
            if new_lr or self._stop:
                return (new_lr, bool(self._stop))
            return None

        cbl.on_train_begin()
        status = "done"
        for ep in range(initial_epoch, epochs):
            if self._stop:
                status = "stopped"
                break
            cbl.on_epoch_begin(ep)
            last.clear()
            sent["lr"] = self._lr_arg() or None
            had = {k: len(v) for k, v in hist.items()}
            r = self._prog.fit(ds, val_id if due(ep) else None, 1, spe, spx,
                               verbose, hist, hist.timings, self._metric, 1,
                               on_event=on_event, first_epoch=ep,
                               total_epochs=epochs,
                               learning_rate=sent["lr"] or 0.0, **self._ckpt)
            if not last:  # stopped inside the epoch
                status = "stopped" if self._stop else r
                break
            logs = {"loss": last["loss"]}
            if self._metric:
                logs[self._metric] = last["accuracy"]
            if last["has_val"]:
                logs["val_loss"] = last["val_loss"]
                if self._metric:
                    logs["val_" + self._metric] = last["val_accuracy"]
            # the other figures this epoch put in History (mae, auc, each
            # output's loss and metrics), as Keras' logs carry them
            for k, v in hist.items():
                if k not in logs and len(v) > had.get(k, 0):
                    logs[k] = v[-1]
            cbl.on_epoch_end(ep, logs)
            if r == "cancelled":
                status = "stopped" if self._stop else r
                break
        else:
            if self._stop:
                status = "stopped"
        cbl.on_train_end()
        return status

    def evaluate(self, x=None, y=None, batch_size=None, verbose=0,
                 sample_weight=None, return_dict=False, steps=None):
        """Loss (and the metric) over x, y on the daemon: a float, or
        [loss, accuracy] when compiled with metrics, or a dict. batch_size
        is accepted for Keras compatibility; the daemon evaluates in the
        program's batches and the result does not depend on it (changing
        it would mean a new program and a fresh optimizer state). x may be
        a generator or a Sequence of (x, y[, sample_weight]) batches (steps:
        how many; a generator without steps runs until it ends), sent in
        chunks (rtrain._feed)."""
        from . import _feed
        if _feed.is_batch_source(x):
            if y is not None or sample_weight is not None:
                raise ValueError("y and sample_weight must be None when x is a generator "
                                 "or a Sequence (its batches hold them)")
            d = _feed.evaluate_source(self, _feed.Source(x, steps, False, "x"))
        else:
            sw = None
            x, y, sample_weight, upkw = _unheld(x, y, sample_weight)
            x, y = self._pack_x(x), self._pack_y(y)
            if sample_weight is not None:
                if isinstance(x, Dataset):
                    raise ValueError("sample_weight needs x and y as arrays, not an "
                                     "uploaded Dataset")
                sw = self._sample_weights(y, len(x), sample_weight, None)
            if upkw is not None or self._over_upload(x, y, sw):
                rows = _feed.ArrayRows(x, y, sw, self._key[0] if self._key
                                       else _DEFAULT_BATCH, upload_kw=upkw)
                d = _feed.evaluate_source(self, _feed.Source(rows, None, False, "x"))
            else:
                ds, label = self._upload(x, y, "evaluate", sw)
                self._ensure(None, None, label)
                d = _feed.evaluate_dataset(self, ds["id"])[1]
        if return_dict:
            return d
        out = [d.get(k) for k in _feed._eval_keys(self)]
        return out if len(out) > 1 else out[0]

    def predict(self, x, batch_size=None, verbose=0, steps=None):
        """Model outputs for x, as a float32 array (n,) + output_shape. x
        may be an uploaded Dataset (streamed ones included): the daemon
        reads it in file order; a generator or a Sequence of batches (x or
        (x, ...) each; steps: how many) is sent in chunks."""
        from . import _feed
        if _feed.is_batch_source(x):
            return _feed.predict_source(self, _feed.Source(x, steps, False, "x"))
        if isinstance(x, HeldArrays):  # rows in Predict calls, as arrays
            x = x.x
        x = self._pack_x(x)
        self._bind(x)
        if isinstance(x, Dataset):
            return self._unpack(self._prog.predict(x.id))
        return self._unpack(self._predict_rows(_features(x, self.input_shape), batch_size))

    def _predict_rows(self, xs, batch_size=None):
        """The packed outputs for float32 rows xs, in Predict calls that
        stay under gRPC's message limit."""
        n = xs.shape[0]
        row_in = xs[0].nbytes
        out_shape = self.output_shape or ()
        row_out = 4 * int(_np.prod(out_shape)) if out_shape else 4
        rows = max(1, _PREDICT_CHUNK_BYTES // max(row_in, row_out, 1))
        if batch_size is not None:
            rows = max(1, min(rows, int(batch_size) * 64))
        # whole batches of the program's in each call: a stateful RNN's
        # daemon refuses a part batch (the same batches either way)
        bs = self._key[0] if self._key else 1
        rows = max(bs, rows // bs * bs)
        parts = [self._prog.predict(xs[i:i + rows]) for i in range(0, n, rows)]
        return parts[0] if len(parts) == 1 else _np.concatenate(parts)

    def save_checkpoint(self, filepath):
        """The full training state (weights, optimizer slots, step, data
        cursor, metric accumulators) into filepath; load_checkpoint resumes
        it, on this daemon or another, bit-identically. The file is the
        daemon's checkpoint behind one line naming the program's batch size,
        shuffling and label layout (what fit compiles for)."""
        state = self._prog.pull_state()
        with open(filepath, "wb") as f:
            f.write(b"RTPYCKPT1 " + repr(self._key).encode() + b"\n")
            f.write(state)
        return len(state)

    def load_checkpoint(self, filepath):
        """Resume a save_checkpoint file (or a state `rtrain checkpoint
        pull` wrote): training continues from its step. Returns that step.
        A state of this model's program is loaded into it (loading again
        and again makes no new program); one of another batch size, label
        layout or model becomes a new program of the file's model, as a new
        batch size does."""
        import ast
        with open(filepath, "rb") as f:
            data = f.read()
        key = self._key
        if data.startswith(b"RTPYCKPT1 "):
            line, _, data = data.partition(b"\n")
            key = ast.literal_eval(line[len(b"RTPYCKPT1 "):].decode())
            if key[2] is not None:
                key = (key[0], key[1], (key[2][0], tuple(key[2][1])))
        if tuple(key) == self._key:
            try:
                step = self._prog.push_state(data)
            except FailedPrecondition:
                # the daemon's answer for a state of another model (seed,
                # layers, optimizer): it has always resumed as that model
                step = self._prog.push_state(data, new=True)
        else:
            step = self._prog.push_state(data, new=True)
        self._key = tuple(key)
        return step

    def get_weights(self):
        """The parameters as float32 arrays, in the model's order."""
        return [w for _, w in self._prog.get_weights()[1]]

    def get_named_weights(self):
        return dict(self._prog.get_weights()[1])

    @property
    def global_step(self):
        return self._prog.get_weights()[0]

    def set_weights(self, weights):
        """Replace every parameter: a list in get_weights() order, or a
        dict {name: array} of them all. On a model still to be bound (null
        input dims) they are sent after the first fit/evaluate/predict
        compiles it."""
        if self._p is None and self._unbound:
            self._pending_weights = {k: _np.array(w, dtype=_np.float32)
                                     for k, w in weights.items()} \
                if isinstance(weights, dict) else \
                [_np.array(w, dtype=_np.float32) for w in weights]
            return
        params = self._prog.report["params"]
        if isinstance(weights, dict):
            missing = [p[0] for p in params if p[0] not in weights]
            if missing or len(weights) != len(params):
                raise ValueError("set_weights wants every weight by name: %s"
                                 % ("no %s" % missing[0] if missing else
                                    "%d given for %d" % (len(weights), len(params))))
            weights = [weights[p[0]] for p in params]
        weights = list(weights)
        if len(weights) != len(params):
            raise ValueError("set_weights wants %d arrays, got %d"
                             % (len(params), len(weights)))
        out = []
        for (name, shape, _), w in zip(params, weights):
            a = _as_array(w, "weight %s" % name)
            if tuple(a.shape) != tuple(shape):
                raise ValueError("weight %s has shape %s, the model wants %s"
                                 % (name, tuple(a.shape), tuple(shape)))
            out.append((name, _np.ascontiguousarray(a, dtype=_np.float32)))
        self._prog.set_weights(out)

    def __repr__(self):
        return "<rtrain.CompiledModel %s on %s>" % (
            self._p.id if self._p is not None else "(input dims unbound)",
            self._client.target)


# ---------------------------------------------------------------- client

def _interactive():
    """A terminal or a notebook: where a bar redrawn with '\r' shows."""
    if "ipykernel" in _sys.modules:
        return True
    try:
        return _sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def _auto_verbose():
    """verbose="auto": the bar redrawn with '\r' on a terminal and in a
    notebook (whose output stream is no TTY but draws it), otherwise one
    line per epoch (logs and pipes get no '\r'), as the rtrain CLI."""
    try:
        if _sys.stdout.isatty():
            return 1
    except (AttributeError, ValueError):
        pass
    return 1 if "ipykernel" in _sys.modules else 2


class Client(_rtrain.Client):
    """A session on one rtraind. Use rtrain.connect()."""

    # the last compile's CompiledModel, weakly: images take its input size,
    # and a model the notebook let go frees its program on the daemon
    _last_ref = None

    @property
    def _last_model(self):
        return self._last_ref() if self._last_ref is not None else None

    def compile(self, spec, optimizer="rmsprop", loss=None, metrics=None,
                batch_size=None, shuffle=True, seed=0, from_logits=False,
                label_shape=None, label_dtype=None, onnx_output=None,
                input_shape=None, data_layout=None, loss_check=True,
                reduction="mean", label_smoothing=0.0, ignore_index=-100,
                class_weight=None, pos_weight=None, beta=None, delta=None,
                loss_weights=None, precision=None):
        """Compile spec (rtrain.Sequential, Keras model JSON, or an ONNX
        model: its bytes or a path ending in .onnx) on the daemon.
        optimizer: a name or an rtrain.optimizers object; loss: a Keras
        loss name; metrics: [] or ["accuracy"].

        An ONNX model (torch.onnx.export) trains from its initializers
        (PyTorch's initial weights); onnx_output names the graph output
        to train when it has several; a 4-D model takes NCHW data, as
        PyTorch holds it (data_layout="NHWC": channels-last data instead;
        never guessed from the shape); model.to_onnx(path) writes it back
        with the trained weights.

        loss: a Keras name (Keras' semantics), or PyTorch's (cross_entropy,
        nll_loss, bce_with_logits, binary_cross_entropy, mse_loss, l1_loss,
        smooth_l1_loss, huber_loss, or the torch.nn module names) with
        PyTorch's semantics and arguments: reduction ("mean", "sum"),
        label_smoothing, ignore_index, class_weight (the loss's weight, one
        per class), pos_weight, beta (smooth_l1_loss), delta (huber_loss).
        loss_check=False compiles a loss that does not fit what the output
        ends in (the daemon refuses e.g. a probability loss on a
        LogSoftmax or on raw logits, naming the loss that fits).

        batch_size, shuffle and the label layout are part of a program;
        fit() recompiles (keeping the weights) when they change, so giving
        them here saves that first recompile. batch_size None is 32, or a
        stateful RNN's fixed batch size (its model's batch_input_shape),
        which Keras requires every call to use.

        precision: None (the layers' dtype policies, see
        rtrain.mixed_precision), "mixed_bfloat16" (or "bf16") or "float32"
        for the whole model; report["ops"] lists each compiled op as
        (name, op, precision).

        input_shape: a Keras model's per-sample input dims (None or 0 keeps
        the model's); it binds null dims, e.g. a sequence length saved as
        None, and must match the fixed ones. Without it, a model whose
        input has null dims is compiled by the first fit, evaluate or
        predict, with x's per-sample shape (as Keras builds on the data);
        until then its shapes, summary and weights are not known."""
        multi = _multi_io(spec) if _onnx_bytes(spec) is None else None
        heads, outputs, reported = None, None, []
        # what Keras' compile would keep (model.save writes it)
        args = {"loss": loss, "loss_weights": loss_weights, "metrics": metrics,
                "from_logits": from_logits}
        if multi is not None:
            if loss is None:
                doc = _json.loads(_spec_json(spec))
                cc = doc.get("compile_config") or doc.get("training_config") or {}
                loss, loss_weights = cc.get("loss"), cc.get("loss_weights")
                args.update(loss=loss, loss_weights=loss_weights)
            if loss is None:
                raise ValueError("compile needs a loss (one, or one per output)")
            spec, loss, heads, outputs, reported = _compile_multi(
                spec, multi, loss, loss_weights, from_logits, metrics)
            metrics = []
            label_shape, label_dtype = (sum(
                int(_np.prod(sh)) // (sh[-1] if sp else 1) for _, sh, sp in heads),), "float32"
        elif loss_weights is not None:
            raise ValueError("loss_weights applies to a model with several outputs")
        if loss is None and not isinstance(spec, models.Model):
            loss = args["loss"] = _saved_loss(_spec_json(spec))
        if loss is None:
            raise ValueError("compile needs a loss (the model saved none), e.g. "
                             "loss='sparse_categorical_crossentropy'")
        if isinstance(loss, losses.Huber) and delta is None:
            delta = loss.delta
        # a class name or a saved loss object, as Keras takes them (a name
        # rtrain knows as given, PyTorch's "NLLLoss" included, stays)
        name, logits = _loss_spec(loss)
        if not (isinstance(loss, str) and loss in _LOSSES) and name in _LOSSES:
            loss = name
            from_logits = from_logits or bool(logits)
        if not isinstance(loss, str) or loss not in _LOSSES:
            raise ValueError("unknown loss %r (known: %s)"
                             % (loss, ", ".join(sorted(_LOSSES))))
        metric = None
        values = []
        metrics = [m.fn if isinstance(m, metrics_mod.Metric) else m for m in metrics or []]
        for m in metrics:
            if m in _VALUE_METRICS:
                if _VALUE_METRICS[m] not in values:
                    values.append(_VALUE_METRICS[m])
                continue
            if m not in _METRICS:
                raise ValueError("unknown metric %r (known: %s)"
                                 % (m, ", ".join(_METRICS + tuple(_VALUE_METRICS))))
            want = {"sparse_categorical_accuracy":
                    "sparse_categorical_crossentropy",
                    "categorical_accuracy": "categorical_crossentropy",
                    "binary_accuracy": "binary_crossentropy"}.get(m)
            if want and _LOSSES[loss] != want:
                raise ValueError("metric %s goes with loss %s (the daemon's "
                                 "accuracy follows the loss); use "
                                 "'accuracy'" % (m, want))
            metric = m
        optimizer = optimizers.get(optimizer)
        opts = optimizer.get_config()
        opts.update(loss=_LOSSES[loss], from_logits=bool(from_logits),
                    metrics=(["accuracy"] if metric else []) + values, seed=int(seed))
        opts.update(_loss_opts(_LOSSES[loss], data_layout, loss_check, reduction,
                               label_smoothing, ignore_index, class_weight,
                               pos_weight, beta, delta))
        # several inputs, one output: its loss is TrainConfig.loss (the
        # daemon takes outputs for several only); the data still go packed
        if outputs is not None and len(outputs) > 1:
            opts["outputs"] = outputs
        if input_shape is not None:
            opts["input_shape"] = tuple(int(d or 0) for d in input_shape)
        if precision is not None:  # the whole model; None: its layers' policies
            opts["precision"] = mixed_precision.Policy(
                "mixed_bfloat16" if precision == "bf16" else precision).name
        onnx = _onnx_bytes(spec)
        spec_json = _spec_json(spec) if onnx is None else None
        if onnx is None and onnx_output is not None:
            raise ValueError("onnx_output applies to ONNX models only")
        model = CompiledModel(self, spec_json, opts, metric,
                              optimizer=optimizer, loss=loss, onnx=onnx,
                              onnx_output=onnx_output)
        model._values = values + reported
        model._compile_args = args
        if heads is not None:
            model._multi = ([(nm, tuple(sh)) for nm, sh in multi[0]], heads)
            model._sparse = model._torch_class = False
        label = None
        if label_shape is not None or label_dtype is not None or \
                _LOSSES[loss] in _SPARSE_LOSSES or _LOSSES[loss] in _TORCH_CLASS_LOSSES:
            sparse = _LOSSES[loss] in _SPARSE_LOSSES or \
                (_LOSSES[loss] in _TORCH_CLASS_LOSSES and not label_shape)
            label = (label_dtype or ("int32" if sparse else "float32"),
                     tuple(label_shape) if label_shape is not None else ())
        elif _LOSSES[loss] == "categorical_crossentropy" and \
                isinstance(spec, models.Model):
            # One-hot labels have the output's shape (Keras' y for this
            # loss); the daemon's default is one value per sample.
            label = ("float32", tuple(spec.output_shape[1:]))
        fixed = _stateful_batch(spec_json) if spec_json is not None else None
        if batch_size is None:
            batch_size = fixed or _DEFAULT_BATCH
        if int(batch_size) <= 0:
            raise ValueError("batch_size must be a positive int")
        if spec_json is not None and input_shape is None:
            dims = _input_dims(spec_json)
            model._unbound = len(dims) == 1 and any(d is None for d in dims[0])
        model._fixed_batch = fixed  # fit's batch_size default
        model._compile((int(batch_size), bool(shuffle), label))
        self._last_ref = _weakref.ref(model)  # images uploaded next take its input size
        return model

    def upload_tfrecord(self, paths, features, label=None, image_size=None,
                        channels=None, resize="auto", mean=None, std=None,
                        augment=None, on_bad_record="fail", name="data",
                        storage="auto", shuffle_buffer=0, model=None):
        """TFRecord files of tf.train.Example records as a Dataset: paths is
        a file, a glob of shards or a list; features maps keys to kinds
        like tf.io.parse_single_example's dict: "int64", "float", "jpeg",
        "png", "image", or (kind, shape); "@key" reads a SequenceExample
        feature list of shape (steps, values). The label is `label`, else
        the key "label" or one ending in "/label" (image/class/label); two
        such keys are an error naming both. Images are decoded on the daemon
        to image_size (h, w) with `channels`, by default model's input (the
        model last compiled on this client when model is None),
        normalised with mean/std; augment={"flip": True, "crop": 4,
        "brightness": 0.1, "contrast": 0.1} applies while training.
        on_bad_record "skip" leaves bad records out (Dataset.records_skipped).
        storage "stream" keeps the records on the daemon's disk and decodes
        batches on worker threads, shuffled through shuffle_buffer samples
        as tf.data's shuffle (0: the daemon's default); "memory" decodes it
        all once; "auto" streams past the daemon's --stream-above."""
        if on_bad_record not in ("fail", "skip"):
            raise ValueError("on_bad_record is 'fail' or 'skip'")
        spec = _feature_spec(features)
        images = any((k[0] if isinstance(k, (tuple, list)) else k) in ("jpeg", "png", "image")
                     for k in features.values())
        kw = _image_kw(image_size, channels, resize, mean, std, augment,
                       model if model is not None else self._last_model, images=images)
        kw.update(_storage_kw(storage, shuffle_buffer))
        src = list(paths) if isinstance(paths, (list, tuple)) else str(paths)
        return Dataset(self._upload_data(src, spec, label,
                                         name, on_bad_record == "skip", **kw))

    def upload_idx(self, images, labels, normalize=True, name="data", storage="auto",
                   shuffle_buffer=0):
        """MNIST/Fashion-MNIST IDX files (train-images-idx3-ubyte.gz and
        train-labels-idx1-ubyte.gz, gzipped or not) as a Dataset: they go
        up as they are, compressed, and the daemon decodes them (u8 images
        divided by 255 unless normalize is False). A re-run sends nothing.
        storage and shuffle_buffer as in upload_tfrecord: "stream" keeps
        the images on the daemon's disk, read per batch."""
        return Dataset(self._upload_idx(str(images), str(labels), bool(normalize), name,
                                        **_storage_kw(storage, shuffle_buffer)))

    def _upload_limit(self):
        """The most bytes one upload may hold on this daemon (GetInfo's
        max_upload_bytes, from an older daemon its max_dataset_bytes);
        fit and evaluate send larger arrays in chunks."""
        lim = getattr(self, "_up_limit", None)
        if lim is None:
            lim = self.info()["limits"]
            lim = lim.get("max_upload_bytes") or lim["max_dataset_bytes"]
            self._up_limit = lim
        return lim

    def upload(self, x, y=None, sample_weight=None, name="data", storage="auto",
               shuffle_buffer=0):
        """Arrays (numpy or anything with the buffer protocol) as a
        Dataset, for fit/evaluate/predict by reference. storage and
        shuffle_buffer as in upload_tfrecord. Arrays larger than one
        upload holds (GetInfo's max_upload_bytes) come back as HeldArrays:
        kept here, sent in chunks (each with this storage) by the calls
        that take them."""
        kw = _storage_kw(storage, shuffle_buffer)
        xs = _np.ascontiguousarray(x, dtype=_np.float32)
        ys = None
        if y is not None:
            ys = _np.asarray(y)
            ys = _np.ascontiguousarray(ys, dtype=_np.int32 if ys.dtype.kind in "iub"
                                       else _np.float32)
        sw = None if sample_weight is None else _np.ascontiguousarray(sample_weight,
                                                                      dtype=_np.float32)
        lim = self._upload_limit()
        if lim and sum(a.nbytes for a in (xs, ys, sw) if a is not None) > lim:
            for a, n in ((ys, "y"), (sw, "sample_weight")):
                if a is not None and (a.ndim < 1 or a.shape[0] != xs.shape[0]):
                    raise ValueError("%s has %s rows; x has %d" % (
                        n, a.shape[0] if a.ndim else "no", xs.shape[0]))
            return HeldArrays(xs, ys, sw, kw)
        return Dataset(self._upload(xs, ys, name, sw, **kw))

    def upload_image_folder(self, directory, image_size=None, channels=None,
                            resize="auto", mean=None, std=None, augment=None,
                            on_bad_record="fail", name="images", storage="auto",
                            shuffle_buffer=0, model=None):
        """A Keras image_dataset_from_directory folder (one subfolder per
        class, labels by sorted class name) as a Dataset; the JPEG/PNG files
        go up as they are and are decoded on the daemon, to image_size and
        channels as in upload_tfrecord (with no model: Keras' 256x256x3).
        storage and shuffle_buffer as in upload_tfrecord."""
        if on_bad_record not in ("fail", "skip"):
            raise ValueError("on_bad_record is 'fail' or 'skip'")
        kw = _image_kw(image_size, channels, resize, mean, std, augment,
                       model if model is not None else self._last_model, (256, 256))
        kw.update(_storage_kw(storage, shuffle_buffer))
        return Dataset(self._upload_data(str(directory), None, None, name,
                                         on_bad_record == "skip", **kw))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return "<rtrain.Client %s session %s>" % (self.target, self.session_id)


_default = None


def connect(target=None, timeout=60.0, name="python", *, tls_ca=None,
            tls_cert=None, tls_key=None, token=None, token_file=None,
            reattach=None):
    """Connect to rtraind at target ("host:port"; None = $RTRAIN_SERVER or
    127.0.0.1:7070) and open a session. timeout: seconds per call (0 = no
    deadline; fits never have one). A daemon that is not running raises
    rtrain.ConnectionError here. The newest connection is the default one
    model.compile() uses.

    tls_ca: PEM file of the CA that signed the daemon's certificate (turns
    TLS on); tls_cert/tls_key: a client certificate for mTLS; token or
    token_file: the bearer token. Each left None is taken from
    $RTRAIN_TLS_CA, $RTRAIN_TLS_CERT, $RTRAIN_TLS_KEY, $RTRAIN_TOKEN and
    $RTRAIN_TOKEN_FILE.

    reattach: seconds a fit (streamed or with steps_per_execution) keeps
    retrying when the daemon is unavailable (restarted, preempted) before
    it gives up (default 300; 0 = fail at once). Against a daemon with
    --state-dir it then resumes exactly where the daemon's state is: no
    step twice or lost, each epoch once in the History."""
    global _default
    c = Client(target, float(timeout), name, tls_ca=_path(tls_ca),
               tls_cert=_path(tls_cert), tls_key=_path(tls_key),
               token=token, token_file=_path(token_file))
    if reattach is not None:
        c.set_reattach(float(reattach))
    _default = c
    return c


def _path(p):
    return None if p is None else str(p)


def _loss_opts(loss, data_layout, loss_check, reduction, label_smoothing,
               ignore_index, class_weight, pos_weight, beta, delta):
    """Client.compile's layout, loss-check and PyTorch loss arguments as
    the extension's options"""
    o = {}
    if data_layout is not None:
        if str(data_layout).upper() not in ("NCHW", "NHWC"):
            raise ValueError("data_layout is 'NCHW' or 'NHWC', got %r" % (data_layout,))
        o["data_layout"] = str(data_layout).upper()
    if not loss_check:
        o["no_loss_check"] = True
    torch_args = {}
    if reduction != "mean":
        if reduction != "sum":
            raise ValueError("reduction is 'mean' or 'sum', got %r" % (reduction,))
        torch_args["reduction"] = reduction
    if label_smoothing:
        torch_args["label_smoothing"] = float(label_smoothing)
    if ignore_index != -100:
        if isinstance(ignore_index, bool) or int(ignore_index) != ignore_index:
            raise ValueError("ignore_index must be an int, got %r" % (ignore_index,))
        torch_args["ignore_index"] = int(ignore_index)
    for name, w in (("class_weight", class_weight), ("pos_weight", pos_weight)):
        if w is not None:
            a = _np.asarray(w.detach().cpu().numpy() if hasattr(w, "detach") else w,
                            dtype=_np.float64).reshape(-1)
            if a.size == 0 or not _np.all(_np.isfinite(a)) or _np.any(a < 0):
                raise ValueError("%s must be finite values >= 0" % name)
            torch_args[name] = a.astype("<f4").tobytes()
    if beta is not None and delta is not None:
        raise ValueError("give beta (smooth_l1_loss) or delta (huber_loss), not both")
    b = beta if beta is not None else delta
    if b is not None:
        if not float(b) >= 0:
            raise ValueError("beta/delta must be >= 0, got %r" % (b,))
        torch_args["loss_beta"] = float(b)
        torch_args["has_loss_beta"] = True
    if set(torch_args) <= {"loss_beta", "has_loss_beta"} and loss == "huber":
        pass  # Keras' huber: delta
    elif torch_args and loss not in _TORCH_LOSSES:
        raise ValueError("%s apply to PyTorch's losses; %s is Keras'"
                         % (", ".join(sorted(torch_args)), loss))
    if "ignore_index" in torch_args:
        o["ignore_index"] = torch_args["ignore_index"]
    o.update(torch_args)
    return o


def _onnx_bytes(spec):
    """spec's ONNX bytes when it is an ONNX model (bytes, or a path ending
    in .onnx), else None."""
    if isinstance(spec, (bytes, bytearray, memoryview)):
        return bytes(spec)
    if isinstance(spec, (str, _os.PathLike)) and \
            str(_os.fspath(spec)).lower().endswith(".onnx"):
        with open(spec, "rb") as f:
            return f.read()
    return None


def from_onnx(path, loss="sparse_categorical_crossentropy", optimizer="adam",
              client=None, **kw):
    """An ONNX model (a path, or its bytes) compiled on the default client
    (or client) for training: client.compile(path, loss=..., ...), with
    PyTorch's initial weights. kw as Client.compile (from_logits,
    batch_size, metrics, onnx_output, ...)."""
    data = _onnx_bytes(path)
    if data is None:
        raise ValueError("from_onnx wants a path ending in .onnx or bytes")
    return (client or get_default_client()).compile(
        data, optimizer=optimizer, loss=loss, **kw)


def get_default_client():
    """The connection model.compile() uses: the last rtrain.connect()'s
    while it is open, else a new one to $RTRAIN_SERVER (or
    127.0.0.1:7070; TLS and token from the environment)."""
    if _default is None or _default.closed:
        return connect(None)
    return _default


_default_client = get_default_client
