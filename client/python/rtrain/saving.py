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
    values = _named_weights(model)
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


def _set_named(model, values):
    """Every weight of model from {name: array} (a compiled program lists
    them in its own order, trainable first)."""
    c = _compiled_of(model)
    if c is not None:
        c.set_weights(values)
    else:
        model.set_weights([values[w] for w in _keras_model(model)._param_names()])


def _named_weights(model):
    """{name: array} of every weight of a model, compiled or not."""
    if _compiled_of(model) is not None:
        return dict(model.get_named_weights())
    return dict(zip(_keras_model(model)._param_names(), model.get_weights()))


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
        current = _named_weights(model)
        current.update(values)
        values = current
    _set_named(model, values)


def _check_overwrite(path, overwrite):
    if _os.path.isdir(path):
        raise IsADirectoryError("%s is a directory" % path)
    if not overwrite and _os.path.exists(path):
        raise FileExistsError("%s exists (overwrite=False)" % path)


def save_weights(model, filepath, overwrite=True):
    """Keras 2's layout; a path ending in .weights.h5 gets Keras 3's (as
    Keras 3's save_weights writes it)."""
    h5py = _h5py()
    path = _os.fspath(filepath)
    _check_overwrite(path, overwrite)
    tmp = path + ".tmp"
    with h5py.File(tmp, "w") as f:
        if path.endswith(".weights.h5"):
            km = _keras_model(model)
            _write_keras3_weights(f, model, km, _keras_order(km))
        else:
            _write_weights_group(f, model)
    _os.replace(tmp, path)


def load_weights(model, filepath, by_name=False):
    """Keras 2's layout (a weights or model file), or Keras 3's
    .weights.h5 (layers/<class>/vars, nested for RNN cells, Bidirectional
    and MultiHeadAttention)."""
    h5py = _h5py()
    with h5py.File(_os.fspath(filepath), "r") as f:
        g = f
        if "layer_names" not in f.attrs and "layer_names0" not in f.attrs:
            if "model_weights" in f:
                g = f["model_weights"]
            elif "layers" in f:
                if by_name:
                    raise ValueError("by_name applies to Keras 2's layout; Keras 3's "
                                     ".weights.h5 is matched by layer class and order")
                km = _keras_model(model)
                _set_named(model, _read_keras3_weights(f, km, _keras3_model_paths(km),
                                                       _os.fspath(filepath)))
                return
        _read_weights_group(g, model, by_name=by_name)


def _compiled_of(model):
    c = model._compiled if isinstance(model, _models.Model) else model
    return c


def compile_settings(model):
    """What compile set, as Keras serializes it: {"optimizer": Optimizer,
    "loss", "loss_weights", "metrics"} (losses and metrics as Keras saves
    them: names, or {"class_name", "config"} objects; one per output by
    output name for a model with several), or None before compile."""
    c = _compiled_of(model)
    if c is None:
        return None
    from . import losses as _losses
    args = getattr(c, "_compile_args", None) or {
        "loss": c.loss, "loss_weights": None, "from_logits": False,
        "metrics": list(c.metrics_names[1:])}
    outs = c._multi_names() if hasattr(c, "_multi_names") else None

    def loss_obj(l, logits):
        from . import _loss_spec, _LOSSES
        if isinstance(l, dict) and "class_name" in l:
            return l
        if isinstance(l, _losses.Loss):
            cfg = l.get_config()
            if logits and l._logits:
                cfg["from_logits"] = True
            return {"module": "keras.losses", "class_name": type(l).__name__,
                    "config": cfg, "registered_name": None}
        name, lg = _loss_spec(l)
        if logits or lg:
            # from_logits given to compile lives in the loss object Keras saves
            cls = _losses._BY_NAME.get(_LOSSES.get(name, name)) or \
                _losses._BY_NAME.get(name)
            if cls is not None and cls._logits:
                return loss_obj(cls(from_logits=True), True)
        return l

    def metric_name(m):
        from . import metrics as _metrics
        return m.fn if isinstance(m, _metrics.Metric) else m

    logits = bool(args.get("from_logits"))
    loss, lw, metrics = args["loss"], args.get("loss_weights"), args.get("metrics")
    if outs:
        from . import _per_output
        loss = dict(zip(outs, (loss_obj(l, logits) for l in
                               _per_output(loss, outs, "loss"))))
        if lw is not None:
            lw = dict(zip(outs, (float(w) for w in _per_output(lw, outs, "loss_weights"))))
        if isinstance(metrics, dict):
            metrics = {k: [metric_name(m) for m in (v if isinstance(v, (list, tuple)) else [v])]
                       for k, v in metrics.items()}
        elif metrics:
            metrics = [metric_name(m) for m in metrics]
    else:
        loss = loss_obj(loss, logits)
        metrics = [metric_name(m) for m in metrics or []]
    return {"optimizer": c.optimizer, "loss": loss, "loss_weights": lw,
            "metrics": metrics or None}


def _training_config(model):
    """Keras 2's training_config (model.save's h5)."""
    cs = compile_settings(model)
    if cs is None:
        return None
    from . import optimizers
    opt = optimizers.serialize(cs["optimizer"])
    return {"loss": cs["loss"], "metrics": cs["metrics"], "weighted_metrics": None,
            "loss_weights": cs["loss_weights"],
            "optimizer_config": {"class_name": opt["class_name"], "config": opt["config"]}}


def _compile_config(model):
    """Keras 3's compile_config (config.json of a .keras file)."""
    cs = compile_settings(model)
    if cs is None:
        return None
    from . import optimizers
    return {"optimizer": optimizers.serialize(cs["optimizer"]), "loss": cs["loss"],
            "loss_weights": cs["loss_weights"], "metrics": cs["metrics"],
            "weighted_metrics": None, "run_eagerly": False, "steps_per_execution": 1,
            "jit_compile": False}


def _metric_key(m):
    """A saved metric (a name, a class name such as "Precision", or a
    serialized metric object) as compile takes it."""
    from . import _loss_spec
    if isinstance(m, dict):
        m = m.get("class_name") if m.get("class_name") != "function" else m.get("config")
    if not isinstance(m, str):
        raise ValueError("saved metric %r is not supported" % (m,))
    if m in ("acc", "accuracy") or m.islower():
        return m
    return _loss_spec(m)[0]


def compile_from_config(model, tc, client=None):
    """Compile model as a saved training_config (Keras 2) or compile_config
    (Keras 3) says: optimizer (with its schedule), loss (objects keep
    from_logits), loss_weights and metrics."""
    from . import optimizers
    oc = tc.get("optimizer_config") or tc.get("optimizer")
    if isinstance(oc, dict):
        opt = optimizers.deserialize(oc)
    elif isinstance(oc, str):
        opt = optimizers.get(oc)
    else:
        opt = "rmsprop"
    metrics = tc.get("metrics")

    def keys(v):
        return [_metric_key(m) for m in (v if isinstance(v, list) else [v]) if m is not None]
    if isinstance(metrics, dict):
        metrics = {k: keys(v) for k, v in metrics.items()}
    elif metrics and len(model._io()[1]) > 1:
        n = len(model._io()[1])
        if len(metrics) == n:
            metrics = [keys(v) for v in metrics]  # one entry per output
        else:  # Keras 2: one list for every output
            metrics = [keys(metrics)] * n
    elif metrics:
        metrics = keys(metrics)
    kw = {}
    if tc.get("loss_weights") is not None:
        kw["loss_weights"] = tc["loss_weights"]
    model.compile(optimizer=opt, loss=tc.get("loss"), metrics=metrics or None,
                  client=client, **kw)


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
    with h5py.File(_os.fspath(filepath), "r") as f:
        if "model_config" not in f.attrs:
            raise ValueError("%s is not a Keras model file (no model_config)"
                             % filepath)
        model = _models.model_from_json(_str(f.attrs["model_config"]))
        tc = f.attrs.get("training_config")
        if tc is not None and compile:
            compile_from_config(model, _json.loads(_str(tc)), client)
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
            try:
                with open(_os.path.join(folder, p), "rb") as f:
                    data += f.read()
            except FileNotFoundError:
                raise ValueError("weight shard %s is missing (the weightsManifest of %s names "
                                 "it): put its .bin shards beside model.json, or drop "
                                 "weightsManifest to start from fresh weights"
                                 % (_os.path.join(folder, p), mj)) from None
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
    _set_named(model, values)
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
    named = _named_weights(model)
    weights = [np.ascontiguousarray(named[n], dtype="<f4") for n in names]
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


# ------------------------------------------------------- Keras 3's .keras

# Keras 3's zip (keras/src/saving/saving_lib.py): config.json (the model
# serialized with "module", "class_name", "config", "registered_name",
# "build_config" and "compile_config"), metadata.json (keras_version,
# date_saved) and model.weights.h5, where each layer's variables sit in
# layers/<name>/vars as datasets "0", "1", ... (the layer's trainable
# variables, then the others, in creation order). <name> is the snake case
# of the layer's class, numbered in model.layers' order ("dense",
# "dense_1", ...); a recurrent layer keeps its variables in its cell
# (layers/lstm/cell/vars), Bidirectional in forward_layer/cell and
# backward_layer/cell. Sequential.layers leaves the InputLayer out;
# Functional.layers has it. The optimizer's variables: optimizer/vars
# (below).

KERAS3_VERSION = "3.5.0"
_ZIP_MAX_CONFIG = 64 << 20  # a config.json larger than this is refused


def _snake(name):
    """keras/src/utils/naming.py to_snake_case"""
    import re
    name = re.sub(r"\W+", "", name)
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()


def _keras_paths(classes):
    """The h5 paths of layers of these class names, in model.layers order."""
    used, out = {}, []
    for c in classes:
        base = _snake(c)
        if base in used:
            used[base] += 1
            out.append("layers/%s_%d" % (base, used[base]))
        else:
            used[base] = 0
            out.append("layers/" + base)
    return out


# MultiHeadAttention's sublayers: Keras 3 visits its public properties
# (query_dense, ...; saving_lib._walk_saveable) before the attributes
# (_query_dense, ...), which Keras 3.0 wrote
_MHA_PARTS = (("query_dense", "query/"), ("key_dense", "key/"),
              ("value_dense", "value/"), ("output_dense", "attention_output/"))


def _var_groups(layer, path):
    """[(h5 group of vars, the weight suffixes it holds (a prefix), or
    None for all)]."""
    from . import layers as L
    if isinstance(layer, L.Bidirectional):
        return [(path + "/forward_layer/cell/vars", "forward_"),
                (path + "/backward_layer/cell/vars", "backward_")]
    if isinstance(layer, L._RNN):
        return [(path + "/cell/vars", None)]
    if isinstance(layer, L.MultiHeadAttention):
        return [("%s/%s/vars" % (path, sub), part) for sub, part in _MHA_PARTS]
    return [(path + "/vars", None)]


def _old_group(group):
    """Keras 3.0's name of a MultiHeadAttention sublayer group"""
    for sub, _ in _MHA_PARTS:
        tail = "/%s/vars" % sub
        if group.endswith(tail):
            return group[:-len(tail)] + "/_%s/vars" % sub
    return None


def _keras_order(km):
    """The model's nodes in Keras 3's model.layers order (keras/src/ops/
    function.py _build_map, _map_graph; Keras 2's _map_graph_network is
    the same): the calls are walked depth first from the outputs; going
    back from the outputs, a call's depth is one more than the deepest call
    that reads it, raised to the deepest call of its layer seen so far; a
    layer takes its calls' largest depth. Layers go by depth from the
    inputs down, ties in the order the walk first met them. A Sequential
    keeps its order."""
    nodes = km._nodes
    if isinstance(km, _models.Sequential):
        return list(nodes)
    by = {n.name: n for n in nodes}
    index, done, topo = {}, set(), []

    def walk(key):
        if key in done:
            return
        if key[0] not in index:
            index[key[0]] = len(index)
        for src in by[key[0]].calls[key[1]].srcs:
            walk(tuple(src[:2]))
        done.add(key)
        topo.append(key)
    for key in km._out_refs():
        walk(tuple(key))
    node_depth, layer_depth = {}, {}
    for key in reversed(topo):
        d = max(node_depth.setdefault(key, 0), layer_depth.get(key[0], 0))
        layer_depth[key[0]] = node_depth[key] = d
        for src in by[key[0]].calls[key[1]].srcs:
            node_depth[tuple(src[:2])] = max(d + 1, node_depth.get(tuple(src[:2]), 0))
    # an input no output reads: depth 0, first among its depth
    return sorted(nodes, key=lambda n: (-layer_depth.get(n.name, 0), index.get(n.name, -1)))


def _keras3_tensor(src_node, k, ti=0):
    """Keras 3's serialized KerasTensor: call k of src_node's output ti"""
    if ti:
        raise ValueError("the states of layer %s (return_state) feed another layer; the "
                         "Keras 3 .keras format is not written for such models here: save "
                         "to .h5" % src_node.name)
    return {"class_name": "__keras_tensor__",
            "config": {"shape": [None] + list(src_node.calls[k].out_shape), "dtype": "float32",
                       "keras_history": [src_node.name, k, 0]}}


def _keras3_config(km, order):
    """The model as Keras 3's serialize_keras_object writes it."""
    seq = isinstance(km, _models.Sequential)
    by = {n.name: n for n in km._nodes}
    out = []
    for n in order:
        if isinstance(n.layer, _models.Model):
            inner = _keras3_config(n.layer, _keras_order(n.layer))
            inner["config"]["name"] = n.name
            entry = {"module": "keras.src.models." + n.layer._class_name().lower(),
                     "class_name": n.layer._class_name(), "config": inner["config"],
                     "registered_name": n.layer._class_name(),
                     "build_config": inner["build_config"]}
        elif isinstance(n.layer, _layers_mod().InputLayer):
            entry = {"module": "keras.layers", "class_name": "InputLayer",
                     "config": {"batch_shape": [None] + list(n.out_shape), "dtype": "float32",
                                "sparse": False, "name": n.name},
                     "registered_name": None}
        else:
            cfg = n.layer.get_config(n.name)
            c = dict(cfg.get("config", cfg))
            c.pop("batch_input_shape", None)
            c["name"] = n.name
            entry = {"module": "keras.layers", "class_name": cfg.get("class_name",
                                                                    n.layer.keras_class),
                     "config": c, "registered_name": None}
            entry["build_config"] = n.layer._keras3_build(n.in_shapes)
        if not seq:
            # one node per call (keras/src/models/functional.py
            # serialize_node), each tensor's keras_history by node index
            entry["name"] = n.name
            entry["inbound_nodes"] = [
                n.layer._keras3_node([_keras3_tensor(by[s[0]], s[1], s[2]) for s in c.srcs],
                                     c.tensor)
                for c in n.calls if c.srcs]
        out.append(entry)
    cfg = {"name": km.name, "trainable": km.trainable, "layers": out}
    ins, outs = km._io()
    if seq:
        cfg["build_input_shape"] = [None] + list(ins[0][1])
    else:
        lists = getattr(km, "_io_lists", (False, False))

        def refs(v, listed):
            return [[nm, k, 0] for nm, k in v] if listed or len(v) > 1 else [v[0][0], v[0][1], 0]
        cfg["input_layers"] = refs([(nm, 0) for nm, _ in ins], lists[0])
        for nm, _, ti in km._out_refs3():
            if ti:
                raise ValueError("output %s is a state of layer %s (return_state); the Keras "
                                 "3 .keras format is not written for such models here: save "
                                 "to .h5" % (ti, nm))
        cfg["output_layers"] = refs([
            (nm, k + _models._node_offset(by[nm].layer, "keras3_out"))
            for nm, k in km._out_refs()], lists[1])
    doc = {"module": "keras", "class_name": km._class_name(), "config": cfg,
           "registered_name": None,
           "build_config": {"input_shape": [None] + list(ins[0][1]) if len(ins) == 1
                            else [[None] + list(s) for _, s in ins]}}
    return doc


def _layers_mod():
    from . import layers
    return layers


def _split_specs(specs, part):
    """Indices of a layer's weight specs ([(layer/suffix, shape,
    trainable)]) in one vars group, Keras' order: the trainable variables,
    then the others (as created: a frozen layer's kernel stays first)."""
    idx = list(range(len(specs)))
    if part is not None:
        idx = [i for i in idx if specs[i][0].split("/", 1)[1].startswith(part)]
    return [i for i in idx if specs[i][2]] + [i for i in idx if not specs[i][2]]


def _write_keras3_weights(f, model, km, order, values=None, prefix=""):
    """model.weights.h5 (Keras 3's layout) into the open h5py file f; a
    nested model's layers sit in its own layers/ (saving_lib walks a
    model's layers list: <model path>/layers/<snake case>)."""
    if values is None:
        values = _named_weights(model)
    listed = [n for n in order if not (isinstance(km, _models.Sequential) and
                                       isinstance(n.layer, _layers_mod().InputLayer))]
    paths = _keras_paths([n.layer.keras_class or type(n.layer).__name__ for n in listed])
    for n, p in zip(listed, paths):
        p = prefix + p
        if isinstance(n.layer, _models.Model):
            f.create_group(p + "/vars").attrs["name"] = n.name
            _write_keras3_weights(f, model, n.layer, _keras_order(n.layer), values, p + "/")
            continue
        specs = n.weight_specs()
        groups = _var_groups(n.layer, p)
        if groups[0][0] != p + "/vars":  # the layer's own (empty) group, as Keras'
            f.create_group(p + "/vars").attrs["name"] = n.name
        for group, part in groups:
            g = f.create_group(group)
            g.attrs["name"] = n.name
            for k, i in enumerate(_split_specs(specs, part)):
                g.create_dataset(str(k), data=_np.asarray(values[specs[i][0]], _np.float32))
    if not prefix:
        f.create_group("vars")


def _read_keras3_weights(f, km, paths, what):
    """{weight name: array} from Keras 3's layout in the open h5py file f;
    paths: the layers' h5 paths by layer name."""
    values = {}
    for n in km._nodes:
        specs = n.weight_specs()
        if not specs:
            continue
        p = paths.get(n.name)
        if p is None:
            raise ValueError("layer %s is not among %s's layers" % (n.name, what))
        if isinstance(n.layer, _models.Model):
            inner = {k: p + "/" + v for k, v in _keras3_model_paths(n.layer).items()}
            values.update(_read_keras3_weights(f, n.layer, inner, what))
            continue
        for group, part in _var_groups(n.layer, p):
            idx = _split_specs(specs, part)
            if group not in f and _old_group(group) in f:
                group = _old_group(group)
            g = f.get(group)
            have = 0 if g is None else len(g)
            if have != len(idx):
                raise ValueError("layer %s: %s has %d variables at %s, the "
                                 "layer has %d" % (n.name, what, have, group, len(idx)))
            for k, i in enumerate(idx):
                v = _np.asarray(g[str(k)])
                if tuple(v.shape) != tuple(specs[i][1]):
                    raise ValueError("weight %s: %s has shape %s at %s/%d, "
                                     "the layer %s" % (specs[i][0], what, tuple(v.shape), group,
                                                       k, tuple(specs[i][1])))
                values[specs[i][0]] = v
    return values


def _keras3_model_paths(km):
    """The h5 paths of a model's layers (by name) in Keras 3's order."""
    listed = [n for n in _keras_order(km) if not (isinstance(km, _models.Sequential) and
                                                  isinstance(n.layer, _layers_mod().InputLayer))]
    return dict(zip([n.name for n in listed],
                    _keras_paths([n.layer.keras_class or type(n.layer).__name__
                                  for n in listed])))


def save_keras(model, filepath, overwrite=True):
    """Keras 3's .keras zip (see above)."""
    import datetime
    import io
    import zipfile
    h5py = _h5py()
    path = _os.fspath(filepath)
    _check_overwrite(path, overwrite)
    km = _keras_model(model)
    order = _keras_order(km)
    doc = _keras3_config(km, order)
    cc = _compile_config(model) if _compiled_of(model) is not None else None
    if cc is not None:
        doc["compile_config"] = cc
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        _write_keras3_weights(f, model, km, order)
        _write_optimizer_vars(f, model, km)
    meta = {"keras_version": KERAS3_VERSION,
            "date_saved": datetime.datetime.now().strftime("%Y-%m-%d@%H:%M:%S")}
    tmp = path + ".tmp"
    with zipfile.ZipFile(tmp, "w") as zf:
        zf.writestr("metadata.json", _json.dumps(meta))
        zf.writestr("config.json", _json.dumps(doc))
        zf.writestr("model.weights.h5", buf.getvalue())
    _os.replace(tmp, path)


def load_keras(filepath, compile=True, client=None):
    """A Keras 3 .keras file: the model from config.json, compiled as its
    compile_config says (compile=True), its weights from model.weights.h5."""
    import io
    import zipfile
    h5py = _h5py()
    with zipfile.ZipFile(_os.fspath(filepath), "r") as zf:
        names = set(zf.namelist())
        for need in ("config.json", "model.weights.h5"):
            if need not in names:
                raise ValueError("%s is not a Keras 3 .keras file: it has no %s%s" % (
                    filepath, need, " (model.weights.npz is not read)"
                    if need == "model.weights.h5" and "model.weights.npz" in names else ""))
        if zf.getinfo("config.json").file_size > _ZIP_MAX_CONFIG:
            raise ValueError("%s: config.json is larger than %d bytes"
                             % (filepath, _ZIP_MAX_CONFIG))
        doc = _json.loads(zf.read("config.json").decode("utf8"))
        weights = zf.read("model.weights.h5")
    if not isinstance(doc, dict) or doc.get("class_name") not in (
            "Sequential", "Functional", "Model"):
        raise ValueError("%s: config.json holds a %r, not a Sequential or Functional model"
                         % (filepath, doc.get("class_name") if isinstance(doc, dict) else doc))
    model = _models.model_from_json(doc)
    # the h5 paths follow config.json's layer order (Keras wrote it from
    # model.layers)
    cfg_layers = doc["config"]["layers"]
    seq = doc["class_name"] == "Sequential"
    listed = [ld for ld in cfg_layers if not (seq and ld["class_name"] == "InputLayer")]
    paths = dict(zip([(ld.get("name") or ld["config"]["name"]) for ld in listed],
                     _keras_paths([ld["class_name"] for ld in listed])))
    with h5py.File(io.BytesIO(weights), "r") as f:
        values = _read_keras3_weights(f, model, paths, "model.weights.h5")
        cc = doc.get("compile_config")
        if compile and cc:
            compile_from_config(model, cc, client)
        _set_named(model, values)
        if compile and cc:
            _read_optimizer_vars(f, model, _keras_model(model), "model.weights.h5")
    return model


# ------------------------------------------- the optimizer's variables

# Keras 3 writes the optimizer's variables in optimizer/vars as datasets
# "0", "1", ... in Optimizer.variables order (keras/src/optimizers/
# base_optimizer.py save_own_variables: `store[str(i)] = variable.numpy()`
# for self.variables): "iteration" (int64 on TensorFlow, int32 on JAX),
# "learning_rate" (float32; none when the rate is a schedule or a
# callable), then build()'s slots for model.trainable_variables, which
# add_optimizer_variables interleaves ("Interleaves adding variables for
# backward-compatibility"): Adam's momentum and velocity of the first
# variable, then of the second, ... Nadam then adds u_product.
# rtrain's slots live on the daemon, in the exec's state blob that
# pull_state returns (server/durable/rt_ckpt.c, server/engine/rt_exec.c
# rt_exec_state_spans): each parameter at a 16-float aligned offset,
# program order, its two slots at the same place in the trainable block.

# Keras' slot names per trainable variable, and the daemon slot each is
# (rt_kern_optim.c: s1, s2)
_OPT_SLOTS = {"sgd": (), "adam": ("momentum", "velocity"),
              "adamw": ("momentum", "velocity"), "rmsprop": ("velocity",),
              "adagrad": ("accumulator",),
              "adadelta": ("accumulated_grad", "accumulated_delta_var"),
              "adamax": ("momentum", "norm"), "nadam": ("momentum", "velocity"),
              "ftrl": ("accumulator", "linear")}
_EXEC_PF, _EXEC_TF, _EXEC_STEP = 16, 24, 32  # rt__state_hdr's fields


def _opt_slot_names(opt):
    names = _OPT_SLOTS.get(opt.name)
    if names is None:
        raise ValueError("optimizer %s: its variables are not mapped to Keras'" % opt.name)
    if opt.name == "sgd" and opt.momentum:
        names = ("momentum",)
    if opt.name == "rmsprop" and opt.momentum:
        raise ValueError("RMSprop with momentum: Keras keeps a momentum slot the daemon's "
                         "RMSprop has not (save to .h5 or use momentum=0)")
    return names


def _opt_has_lr(opt):
    """Keras keeps a learning_rate variable for a float rate only."""
    return opt.schedule is None


def _nadam_u_product(beta_1, t):
    """keras/src/optimizers/nadam.py's u_product after t steps."""
    u = _np.float32(1.0)
    for k in range(1, t + 1):
        u = _np.float32(u * _np.float32(beta_1 * (1.0 - 0.5 * 0.96 ** k)))
    return u


def _keras_trainable(km, order=None):
    """The names of the model's trainable weights in Keras'
    model.trainable_variables order (each layer of model.layers, its
    trainable variables in the order its vars groups hold them)."""
    order = _keras_order(km) if order is None else order
    out = []
    for n in order:
        if isinstance(km, _models.Sequential) and isinstance(n.layer, _layers_mod().InputLayer):
            continue
        if isinstance(n.layer, _models.Model):
            out += _keras_trainable(n.layer)
            continue
        specs = n.weight_specs()
        for _, part in _var_groups(n.layer, "l"):
            out += [specs[i][0] for i in _split_specs(specs, part) if specs[i][2]]
    return out


def _ckpt_exec(blob):
    """(offset, length) of the exec state in a daemon checkpoint:
    "RTCKPT1\\0", u64 req_len, req, u64 meta_len, meta, u64 exec_len, exec,
    u64 XXH3-64 (server/durable/rt_ckpt.c)."""
    import struct
    if blob[:8] != b"RTCKPT1\0":
        raise ValueError("the daemon's state is not a checkpoint (RTCKPT1)")
    o = 8
    for _ in range(2):
        o += 8 + struct.unpack_from("<Q", blob, o)[0]
    n = struct.unpack_from("<Q", blob, o)[0]
    if o + 8 + n + 8 != len(blob) or blob[o + 8:o + 14] != b"RTEXEC":
        raise ValueError("the daemon's checkpoint has an unexpected layout")
    return o + 8, n


def _seal(blob):
    """The checkpoint with its XXH3-64 recomputed."""
    import struct
    from . import _rtrain
    return blob[:-8] + struct.pack("<Q", _rtrain.xxh3_64(blob[:-8]))


class _SlotLayout:
    """Where each parameter and its slots lie in a pulled state: the
    exec's offset, the floats of the parameter and trainable blocks, and
    per name [param offset, slot offset or -1, shape, numel]; the block
    is checked against get_weights, parameter by parameter."""

    def __init__(self, c, blob):
        import struct
        self.eo, self.elen = _ckpt_exec(blob)
        pf, tf = struct.unpack_from("<qq", blob, self.eo + _EXEC_PF)
        self.pf, self.tf = pf, tf
        params = c._prog.report["params"]
        step, named = c._prog.get_weights()[:2]
        named = dict(named)
        self.params, off, goff = {}, 0, 0
        for p in params:
            name, trainable = p[0], bool(p[2])
            shape = tuple(_np.shape(named[name]))  # the user's (get_weights')
            numel = int(_np.prod(shape)) if shape else 1
            self.params[name] = [off, goff if trainable else -1, shape, numel]
            off += (numel + 15) & ~15
            if trainable:
                goff += (numel + 15) & ~15
        if off != pf or goff != tf:
            raise ValueError("the daemon's state holds %d/%d parameter/slot floats, the "
                             "program lists %d/%d" % (pf, tf, off, goff))
        # the parameter block follows the header (its size is the build's,
        # a stateful RNN's states follow the slots): find it by a parameter
        # of distinct values that the daemon keeps in the user's order
        ex = blob[self.eo:self.eo + self.elen]
        base = None
        for name, (o, _, _, numel) in self.params.items():
            w = _np.ascontiguousarray(named[name], "<f4").reshape(-1)
            if numel < 4 or len(_np.unique(w)) < 4:
                continue
            at = ex.find(w.tobytes())
            if at >= 0 and at % 4 == 0 and 0 <= at - 4 * o <= self.elen - 4 * (pf + 2 * tf):
                base = at - 4 * o
                break
        if base is None:
            base = self.elen - 4 * (pf + 2 * tf)  # no state after the slots
        self.base = self.eo + base
        self.w0 = self.base
        self.s1 = self.base + 4 * pf
        self.s2 = self.s1 + 4 * tf
        self.step = step
        for name, e in self.params.items():
            got = self.floats(blob, self.w0, e[0], e[3])
            if not _np.array_equal(got, _np.asarray(named[name], _np.float32).reshape(-1)):
                # a parameter view (rt_graph_set_param_view) that moves
                # elements: the Keras importer's channels_first Flatten
                # folded into a Dense, which no Python-built model has
                raise ValueError("weight %s: the daemon keeps it in another order than "
                                 "get_weights; its optimizer slots cannot be read" % name)

    def floats(self, blob, start, off, n):
        return _np.frombuffer(blob, "<f4", n, start + 4 * off).copy()

    def get(self, blob, name, slot):
        """A slot of a weight (slot 1 or 2), in the user's shape."""
        o, g, shape, numel = self.params[name]
        return self.floats(blob, self.s1 if slot == 1 else self.s2, g, numel).reshape(shape)

    def put(self, b, name, slot, value):
        o, g, shape, numel = self.params[name]
        v = _np.asarray(value, _np.float32).reshape(-1)
        start = (self.s1 if slot == 1 else self.s2) + 4 * g
        b[start:start + 4 * numel] = v.astype("<f4").tobytes()


def _opt_state(model):
    """(compiled program, Optimizer) of a model trained on a daemon, or
    None (not compiled, not yet sent, or a model without Keras layers)."""
    c = _compiled_of(model)
    if c is None or getattr(c, "_p", None) is None or getattr(c, "_onnx", None) is not None:
        return None
    opt = getattr(c, "optimizer", None)
    if opt is None or getattr(opt, "name", None) not in _OPT_SLOTS:
        return None
    return c, opt


def _write_optimizer_vars(f, model, km):
    """optimizer/vars of a compiled, trained model, in Keras 3's layout
    (see above); nothing before the first step (Keras' optimizer is not
    built then either)."""
    got = _opt_state(model)
    if got is None:
        return
    c, opt = got
    blob = c._prog.pull_state()
    lay = _SlotLayout(c, blob)
    if lay.step <= 0:
        return
    names = _opt_slot_names(opt)
    g = f.create_group("optimizer/vars")
    vals = [_np.asarray(lay.step, _np.int64)]
    if _opt_has_lr(opt):
        vals.append(_np.asarray(c.learning_rate, _np.float32))
    for w in _keras_trainable(km):
        if w not in lay.params or lay.params[w][1] < 0:
            raise ValueError("weight %s: the daemon has no optimizer slots for it" % w)
        for k in range(len(names)):
            vals.append(lay.get(blob, w, k + 1))
    if opt.name == "nadam":
        vals.append(_nadam_u_product(opt.beta_1, int(lay.step)))
    for i, v in enumerate(vals):
        g.create_dataset(str(i), data=v)


def _read_optimizer_vars(f, model, km, what):
    """Restore optimizer/vars (Keras 3's layout, written by rtrain or
    Keras) into the daemon's program of a compiled model: its slots, its
    step (Adam's bias correction, the schedules) and a float rate. A file
    without them leaves a fresh optimizer, as Keras. A program still to be
    bound (null input dims) gets them when fit/evaluate/predict binds it."""
    g = f.get("optimizer/vars")
    c = _compiled_of(model)
    if g is None or len(g) == 0 or c is None:
        return
    vals = [_np.asarray(g[str(i)]) if str(i) in g else None for i in range(len(g))]
    pend = (vals, _keras_trainable(km), what)
    if getattr(c, "_p", None) is None and getattr(c, "_unbound", False):
        c._pending_opt_vars = pend
        return
    apply_optimizer_vars(c, pend)


def apply_optimizer_vars(c, pend):
    """optimizer/vars' arrays (vals, the weights in Keras' trainable order,
    the file's name for messages) into compiled program c."""
    vals, train, what = pend
    opt = getattr(c, "optimizer", None)
    if getattr(c, "_onnx", None) is not None or opt is None:
        return
    names = _opt_slot_names(opt)
    has_lr = _opt_has_lr(opt)
    head = 2 if has_lr else 1
    want = head + len(names) * len(train) + (1 if opt.name == "nadam" else 0)
    it = int(vals[0]) if vals and vals[0] is not None and vals[0].shape == () else None
    if it == 0 and len(vals) <= 2:
        return  # Keras' optimizer, not built yet: iteration 0, no slots
    if len(vals) != want or any(v is None for v in vals) or it is None or it < 0:
        # Keras' load_own_variables: "Skipping variable loading for
        # optimizer ..." (a warning; the optimizer starts afresh)
        import warnings
        warnings.warn("%s: skipping the optimizer's variables: optimizer/vars holds %d, a "
                      "built %s over this model's %d trainable weights has %d (iteration%s, "
                      "%d slot(s) each%s); the optimizer starts afresh"
                      % (what, len(vals), type(opt).__name__, len(train), want,
                         ", learning_rate" if has_lr else "", len(names),
                         ", u_product" if opt.name == "nadam" else ""), stacklevel=3)
        return
    named = dict(c._prog.get_weights()[1])
    trainable = {p[0]: bool(p[2]) for p in c._prog.report["params"]}
    if has_lr and not (vals[1].shape == () and 0 < float(vals[1]) < float("inf")):
        raise ValueError("%s: optimizer/vars/1 (learning_rate) is %r, not a positive rate"
                         % (what, vals[1]))
    k = head
    for w in train:
        if not trainable.get(w, False):
            raise ValueError("weight %s: the daemon has no optimizer slots for it (frozen "
                             "there, trainable in the file's model)" % w)
        for s in range(len(names)):
            v = vals[k]
            want_shape = tuple(_np.shape(named[w])) if w in named else None
            if tuple(v.shape) != want_shape:
                raise ValueError("%s: optimizer/vars/%d (%s of %s) has shape %s, the weight "
                                 "%s" % (what, k, names[s], w, tuple(v.shape), want_shape))
            if not _np.all(_np.isfinite(v)):
                raise ValueError("%s: optimizer/vars/%d (%s of %s) is not finite"
                                 % (what, k, names[s], w))
            k += 1
    blob = c._prog.pull_state()
    lay = _SlotLayout(c, blob)
    b = bytearray(blob)
    k = head
    for w in train:
        for s in range(len(names)):
            lay.put(b, w, s + 1, vals[k])
            k += 1
    import struct
    struct.pack_into("<q", b, lay.eo + _EXEC_STEP, it)
    c._prog.push_state(_seal(bytes(b)))
    if has_lr and _np.float32(vals[1]) != _np.float32(opt.learning_rate):
        opt.learning_rate = float(vals[1])  # the next run sets it (Keras assigns it)
