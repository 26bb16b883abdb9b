"""Keras 2's HDF5 files (the legacy h5 format of keras.saving), with h5py.

Weights file (model.save_weights("w.h5")), as Keras'
save_weights_to_hdf5_group writes it:
  root attrs  layer_names    array of bytes, every layer of model.layers
              backend        b"tensorflow"
              keras_version  b"2.11.0"
  /<layer>    attrs weight_names: array of bytes such as b"dense/kernel:0"
              (trainable weights, then the others), one dataset per name,
              at /<layer>/<weight name> (so /dense/dense/kernel:0)
  /top_level_model_weights   attrs weight_names: an empty array (the
              model's own weights; Sequential and Functional have none)
Layer groups are created in sorted name order, and an attribute list over
64512 bytes is split into name0, name1, ... as Keras'
save_attributes_to_hdf5_group does (and read back either way).
Loading matches the layers that have weights by order (by name with
by_name=True), as Keras' load_weights does, and checks every shape.

Model file (model.save("m.h5")): root attrs keras_version, backend,
model_config (the model JSON) and training_config (loss, metrics,
optimizer); the weights in the group /model_weights, laid out as above.
"""
import json as _json
import os as _os

import numpy as _np

from . import models as _models

BACKEND = "tensorflow"


def _h5py():
    try:
        import h5py
    except ImportError:
        raise ImportError("saving HDF5 files needs h5py (Debian: "
                          "python3-h5py)") from None
    return h5py


def _keras_model(model):
    """The models.Model declaring model's layers."""
    if isinstance(model, _models.Model):
        return model
    return model._keras_model()


def _layer_weights(km):
    """[(layer name, [(weight name, shape)])] over model.layers."""
    out = []
    nodes = km._nodes
    if isinstance(km, _models.Sequential):
        nodes = nodes[1:]
    for n in nodes:
        ws = n.weight_specs()
        # Keras lists trainable weights first, then the others.
        tr = [w for w in ws if w[2] and n.layer.trainable]
        nt = [w for w in ws if not (w[2] and n.layer.trainable)]
        out.append((n.name, [(w[0], tuple(w[1])) for w in tr + nt]))
    return out


HDF5_OBJECT_HEADER_LIMIT = 64512


def _save_attr_list(group, name, data):
    """Keras' save_attributes_to_hdf5_group: one attribute, or chunks
    name0, name1, ... when the array exceeds the object header limit."""
    big = [x for x in data if len(x) > HDF5_OBJECT_HEADER_LIMIT]
    if big:
        raise RuntimeError("attribute values longer than %d bytes cannot be "
                           "saved in HDF5: %s" % (HDF5_OBJECT_HEADER_LIMIT,
                                                  big[0][:40]))
    arr = _np.asarray(data)
    chunks, k = [arr], 1
    while any(c.nbytes > HDF5_OBJECT_HEADER_LIMIT for c in chunks):
        k += 1
        chunks = _np.array_split(arr, k)
    if k == 1:
        group.attrs[name] = arr
    else:
        for i, c in enumerate(chunks):
            group.attrs["%s%d" % (name, i)] = c


def _load_attr_list(group, name):
    """Keras' load_attributes_from_hdf5_group (str items)."""
    if name in group.attrs:
        return [_str(v) for v in group.attrs[name]]
    out, i = [], 0
    while "%s%d" % (name, i) in group.attrs:
        out.extend(_str(v) for v in group.attrs["%s%d" % (name, i)])
        i += 1
    return out


def _write_weights_group(g, model):
    km = _keras_model(model)
    values = dict(model.get_named_weights()) if hasattr(
        model, "get_named_weights") else None
    if values is None:
        values = dict(zip(km._param_names(), model.get_weights()))
    layers = _layer_weights(km)
    g.attrs["backend"] = BACKEND.encode("utf8")
    g.attrs["keras_version"] = _models.KERAS_VERSION.encode("utf8")
    _save_attr_list(g, "layer_names", [n.encode("utf8") for n, _ in layers])
    # Keras creates the groups sorted by name ("strictly growing to avoid
    # prefix issues").
    for name, ws in sorted(layers, key=lambda l: l[0]):
        lg = g.create_group(name)
        names = [(w + ":0").encode("utf8") for w, _ in ws]
        _save_attr_list(lg, "weight_names", names)
        for (w, shape), wn in zip(ws, names):
            val = _np.asarray(values[w], dtype=_np.float32)
            if tuple(val.shape) != shape:
                raise ValueError("weight %s has shape %s, expected %s"
                                 % (w, val.shape, shape))
            ds = lg.create_dataset(wn.decode("utf8"), val.shape,
                                   dtype=val.dtype)
            ds[()] = val
    # The model's own (top-level) weights: none for these models.
    g.create_group("top_level_model_weights").attrs["weight_names"] = \
        _np.asarray([])


def _str(v):
    return v.decode("utf8") if isinstance(v, bytes) else str(v)


def _read_weights_group(g, model, by_name=False):
    km = _keras_model(model)
    if "layer_names" not in g.attrs and "layer_names0" not in g.attrs:
        raise ValueError("not a Keras weights file: no layer_names "
                         "attribute")
    file_layers = []
    for ln in _load_attr_list(g, "layer_names"):
        lg = g[ln]
        wn = _load_attr_list(lg, "weight_names")
        if wn:
            file_layers.append((ln, [_np.asarray(lg[w]) for w in wn]))
    ours = [(n, ws) for n, ws in _layer_weights(km) if ws]
    if by_name:
        have = dict(file_layers)
        pairs = [(n, ws, have[n]) for n, ws in ours if n in have]
    else:
        if len(file_layers) != len(ours):
            raise ValueError(
                "the file holds weights for %d layers but the model has %d "
                "layers with weights" % (len(file_layers), len(ours)))
        pairs = [(n, ws, vals) for (n, ws), (_, vals) in
                 zip(ours, file_layers)]
    values = {}
    for n, ws, vals in pairs:
        if len(vals) != len(ws):
            raise ValueError("layer %s: the file has %d weights, the model "
                             "%d" % (n, len(vals), len(ws)))
        for (w, shape), v in zip(ws, vals):
            if tuple(v.shape) != shape:
                raise ValueError("weight %s: the file has shape %s, the "
                                 "model %s" % (w, tuple(v.shape), shape))
            values[w] = v
    if by_name and len(values) != len(km._param_names()):
        current = dict(zip(km._param_names(), model.get_weights()))
        current.update(values)
        values = current
    model.set_weights([values[w] for w in km._param_names()])


def _check_overwrite(path, overwrite):
    if _os.path.isdir(path):
        raise IsADirectoryError("%s is a directory" % path)
    if not overwrite and _os.path.exists(path):
        raise FileExistsError("%s exists (overwrite=False)" % path)


def save_weights(model, filepath, overwrite=True):
    h5py = _h5py()
    path = _os.fspath(filepath)
    _check_overwrite(path, overwrite)
    tmp = path + ".tmp"
    with h5py.File(tmp, "w") as f:
        _write_weights_group(f, model)
    _os.replace(tmp, path)


def load_weights(model, filepath, by_name=False):
    h5py = _h5py()
    with h5py.File(_os.fspath(filepath), "r") as f:
        g = f
        if "layer_names" not in f.attrs and "layer_names0" not in f.attrs \
                and "model_weights" in f:
            g = f["model_weights"]
        _read_weights_group(g, model, by_name=by_name)


def _training_config(model):
    c = model._prog() if isinstance(model, _models.Model) else model
    if c is None:
        return None
    opt = c.optimizer
    cfg = {k: v for k, v in opt.get_config().items() if k != "optimizer"}
    cfg["name"] = type(opt).__name__
    return {"loss": c.loss, "metrics": list(c.metrics_names[1:]),
            "weighted_metrics": None, "loss_weights": None,
            "optimizer_config": {"class_name": type(opt).__name__,
                                 "config": cfg}}


def save_model(model, filepath, overwrite=True):
    h5py = _h5py()
    path = _os.fspath(filepath)
    _check_overwrite(path, overwrite)
    km = _keras_model(model)
    tmp = path + ".tmp"
    with h5py.File(tmp, "w") as f:
        f.attrs["keras_version"] = _models.KERAS_VERSION.encode("utf8")
        f.attrs["backend"] = BACKEND.encode("utf8")
        f.attrs["model_config"] = _json.dumps(
            {"class_name": km._class_name(),
             "config": km.get_config()}).encode("utf8")
        tc = _training_config(model)
        if tc is not None:
            f.attrs["training_config"] = _json.dumps(tc).encode("utf8")
        _write_weights_group(f.create_group("model_weights"), model)
    _os.replace(tmp, path)


def load_model(filepath, compile=True, client=None):
    h5py = _h5py()
    from . import optimizers
    with h5py.File(_os.fspath(filepath), "r") as f:
        if "model_config" not in f.attrs:
            raise ValueError("%s is not a Keras model file (no model_config)"
                             % filepath)
        model = _models.model_from_json(_str(f.attrs["model_config"]))
        tc = f.attrs.get("training_config")
        if tc is not None and compile:
            tc = _json.loads(_str(tc))
            oc = tc.get("optimizer_config") or {}
            ocfg = dict(oc.get("config") or {})
            ocfg.pop("name", None)
            cls = getattr(optimizers, oc.get("class_name", ""), None)
            opt = cls(**{k: v for k, v in ocfg.items()
                         if k in cls.__init__.__code__.co_varnames}) \
                if cls else "rmsprop"
            metrics = [m for m in tc.get("metrics") or []
                       if isinstance(m, str)]
            model.compile(optimizer=opt, loss=tc.get("loss"),
                          metrics=metrics, client=client)
        g = f["model_weights"]
        _read_weights_group(g, model)
    return model


# ------------------------------------------------------------------ TF.js

def _tfjs_paths(path):
    """(folder, model.json) of a TF.js layers model given as either."""
    path = _os.fspath(path)
    if _os.path.isdir(path):
        return path, _os.path.join(path, "model.json")
    return _os.path.dirname(path) or ".", path


def load_tfjs(path, compile=True, client=None):
    """A TF.js layers model (model.json whose weightsManifest names .bin
    shards, as tfjs' model.save and tensorflowjs_converter write it): the
    model from its modelTopology, compiled when it carries a
    training_config, with the shards' float32 weights set by name."""
    import numpy as np
    folder, mj = _tfjs_paths(path)
    with open(mj) as f:
        doc = _json.load(f)
    topo = doc.get("modelTopology")
    if not isinstance(topo, dict):
        raise ValueError("%s is not a TF.js layers model (no modelTopology)" % mj)
    cfg = topo.get("model_config", topo)
    model = _models.model_from_json(cfg)
    values = {}
    for group in doc.get("weightsManifest") or []:
        data = b""
        for p in group.get("paths") or []:
            if _os.path.isabs(p) or ".." in p.split("/"):
                raise ValueError("weight shard path %r leaves the model's folder" % p)
            with open(_os.path.join(folder, p), "rb") as f:
                data += f.read()
        at = 0
        for w in group.get("weights") or []:
            if w.get("dtype", "float32") != "float32" or w.get("quantization"):
                raise ValueError("weight %s: only float32 unquantized TF.js weights are "
                                 "read (%s%s)" % (w.get("name"), w.get("dtype"),
                                                  ", quantized" if w.get("quantization") else ""))
            n = int(np.prod(w["shape"])) if w["shape"] else 1
            if at + 4 * n > len(data):
                raise ValueError("weight %s runs past the end of its shards" % w["name"])
            values[w["name"]] = np.frombuffer(data, "<f4", n, at).reshape(w["shape"])
            at += 4 * n
    specs = model.weight_specs()
    missing = [name for name, _, _ in specs if name not in values]
    if missing:
        raise ValueError("the weights manifest has no %s (it holds %s)"
                         % (missing[0], ", ".join(sorted(values)) or "nothing"))
    tc = topo.get("training_config")
    if tc and compile:
        model.compile(optimizer="adam", loss=tc.get("loss"), client=client)
    model.set_weights([values[name] for name, _, _ in specs])
    return model


def save_tfjs(model, path, overwrite=True):
    """The TF.js layers format (model.json and one weights shard) in the
    folder path: tfjs' tf.loadLayersModel reads it."""
    import numpy as np
    km = _keras_model(model)
    if _os.path.exists(_os.path.join(path, "model.json")) and not overwrite:
        raise FileExistsError(_os.path.join(path, "model.json"))
    _os.makedirs(path, exist_ok=True)
    names = [name for name, _, _ in km.weight_specs()]
    weights = [np.ascontiguousarray(w, dtype="<f4") for w in model.get_weights()]
    topo = {"class_name": km._class_name(), "config": km.get_config(),
            "keras_version": _models.KERAS_VERSION, "backend": BACKEND}
    tc = _training_config(model) if getattr(model, "_compiled", model) is not None else None
    if tc is not None:
        topo["training_config"] = tc
    shard = "group1-shard1of1.bin"
    with open(_os.path.join(path, shard), "wb") as f:
        for w in weights:
            f.write(w.tobytes())
    with open(_os.path.join(path, "model.json"), "w") as f:
        _json.dump({"format": "layers-model", "generatedBy": "rtrain",
                    "convertedBy": None, "modelTopology": topo,
                    "weightsManifest": [{"paths": [shard], "weights": [
                        {"name": n, "shape": list(w.shape), "dtype": "float32"}
                        for n, w in zip(names, weights)]}]}, f)
