"""Keras models: Sequential and the Functional Model.

    model = rtrain.Sequential([rtrain.layers.Dense(8, input_dim=4,
                                                   activation="relu"),
                               rtrain.layers.Dense(3, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy", ["accuracy"])
    model.fit(x, y, epochs=10)

The model is declared here (layers, shapes, parameter counts, Keras JSON);
compile() makes the program on the daemon of the default connection
(rtrain.connect(...), or $RTRAIN_SERVER) and fit/evaluate/predict/weights
go to it.
"""
import json as _json

from . import layers as _layers

__all__ = ["Model", "Sequential", "model_from_json", "load_model"]

KERAS_VERSION = "2.11.0"


def _unique(base, taken):
    """Keras' automatic names: dense, dense_1, dense_2, ..."""
    k = 0
    name = base
    while name in taken:
        k += 1
        name = "%s_%d" % (base, k)
    return name


class _Node:
    """A layer placed in a model: its name, inputs and shapes."""

    def __init__(self, layer, name, inbound, in_shapes, out_shape):
        self.layer, self.name = layer, name
        self.inbound = inbound          # names of the layers it reads
        self.in_shapes = in_shapes      # per-sample shapes
        self.out_shape = out_shape

    def weight_specs(self):
        if isinstance(self.layer, _layers.InputLayer):
            return []
        out = [("%s/%s" % (self.name, sfx), shape, tr)
               for sfx, shape, tr in self.layer.weight_specs(
                   self.in_shapes[0])]
        for n, shape, _ in out:
            if any(d is None for d in shape):
                raise ValueError("weight %s would have the shape %s of a "
                                 "variable input dim" % (n, tuple(shape)))
        return out


class Model:
    """Keras' Functional model: Model(inputs, outputs) over rtrain.Input and
    layer calls; inputs and outputs may be lists (up to 8 outputs): fit
    then takes lists or dicts (by layer name) of arrays, compile a loss
    and loss_weights per output, and predict returns a list."""

    _default_name = "model"

    def __init__(self, inputs=None, outputs=None, name=None):
        self.name = name or self._default_name
        self._compiled = None
        self._stop = False
        self._pending = None  # weights set before compile
        if inputs is None and outputs is None and type(self) is Model:
            raise ValueError("Model needs inputs and outputs")
        if type(self) is Model or inputs is not None:
            self._init_functional(inputs, outputs)

    # -- structure ---------------------------------------------------------

    def _init_functional(self, inputs, outputs):
        ins = inputs if isinstance(inputs, (list, tuple)) else [inputs]
        outs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
        if not ins or not outs or len(outs) > 8:
            raise ValueError("rtrain models have 1 or more inputs and 1 to 8 "
                             "outputs")
        for t in ins + outs:
            if not isinstance(t, _layers.KerasTensor):
                raise TypeError("Model(inputs, outputs) takes tensors from "
                                "rtrain.Input and layer calls")
        if not all(isinstance(t.layer, _layers.InputLayer) for t in ins):
            raise ValueError("the model inputs must come from rtrain.Input")
        # Topological order by a depth-first walk from the outputs.
        order, seen = [], set()

        def visit(t):
            if id(t.layer) in seen:
                return
            for i in t.inputs:
                visit(i)
            seen.add(id(t.layer))
            order.append(t)
        for o in outs:
            visit(o)
        in_ids = [id(t.layer) for t in ins]
        if sorted(id(t.layer) for t in order
                  if isinstance(t.layer, _layers.InputLayer)) != sorted(in_ids):
            raise ValueError("the outputs must depend on the model inputs "
                             "and on nothing else")
        self._in_layers = [t.layer for t in ins]
        self._out_layers = [t.layer for t in outs]
        # the inputs first, in the model's order, as Keras lists them
        self._tensors = list(ins) + [t for t in order
                                     if not isinstance(t.layer, _layers.InputLayer)]
        self._nodes = None
        self._build_nodes()

    def _build_nodes(self):
        taken, names, nodes = set(), {}, []
        for t in self._tensors:
            layer = t.layer
            if layer.name is None:
                base = "input" if isinstance(layer, _layers.InputLayer) \
                    else layer._auto_name
                if isinstance(layer, _layers.InputLayer):
                    layer.name = _unique("input_1", taken) if \
                        "input_1" in taken else "input_1"
                else:
                    layer.name = _unique(base, taken)
            if layer.name in taken:
                raise ValueError("duplicate layer name %r" % layer.name)
            taken.add(layer.name)
            names[id(layer)] = layer.name
            inb = [names[id(i.layer)] for i in t.inputs]
            nodes.append(_Node(layer, layer.name, inb,
                               [list(i.shape[1:]) for i in t.inputs],
                               list(t.shape[1:])))
        self._nodes = nodes

    @property
    def layers(self):
        return [n.layer for n in self._nodes]

    def get_layer(self, name=None, index=None):
        if index is not None:
            return self.layers[index]
        for n in self._nodes:
            if n.name == name:
                return n.layer
        raise ValueError("no layer named %r" % (name,))

    def _node_of(self, layer):
        return next(n for n in self._nodes if n.layer is layer)

    def _io(self):
        """([(name, shape)] of the inputs, [(name, shape)] of the outputs)"""
        ins = getattr(self, "_in_layers", None) or [self._nodes[0].layer]
        outs = getattr(self, "_out_layers", None) or [self._nodes[-1].layer]
        return ([(self._node_of(l).name, tuple(self._node_of(l).out_shape)) for l in ins],
                [(self._node_of(l).name, tuple(self._node_of(l).out_shape)) for l in outs])

    @property
    def input_shape(self):
        ins = self._io()[0]
        if len(ins) > 1:
            return [(None,) + s for _, s in ins]
        return (None,) + ins[0][1]

    @property
    def output_shape(self):
        outs = self._io()[1]
        if len(outs) > 1:
            return [(None,) + s for _, s in outs]
        return (None,) + outs[0][1]

    def weight_specs(self):
        """[(name, shape, trainable)] of every weight, in Keras' order (the
        daemon's parameter names are the same)."""
        return [w for n in self._nodes for w in n.weight_specs()]

    def count_params(self):
        total = 0
        for _, shape, _ in self.weight_specs():
            k = 1
            for d in shape:
                k *= d
            total += k
        return total

    def get_config(self):
        out = []
        for n in self._nodes:
            d = n.layer.get_config(n.name)
            d["name"] = n.name
            d["inbound_nodes"] = ([] if not n.inbound else
                                  [n.layer._keras2_node(n.inbound)])
            out.append(d)
        ins, outs = self._io()
        return {"name": self.name, "layers": out,
                "input_layers": [[nm, 0, 0] for nm, _ in ins],
                "output_layers": [[nm, 0, 0] for nm, _ in outs]}

    def _class_name(self):
        return "Functional"

    def to_json(self, **kw):
        """The JSON Keras' model.to_json() writes (Keras 2 layout)."""
        return _json.dumps({"class_name": self._class_name(),
                            "config": self.get_config(),
                            "keras_version": KERAS_VERSION,
                            "backend": "tensorflow"}, **kw)

    def summary(self, line_length=None, print_fn=None):
        """Keras' table: layer (type), output shape, parameter count."""
        print_fn = print_fn or print
        functional = self._class_name() == "Functional"
        cols = [("Layer (type)", 29), ("Output Shape", 26), ("Param #", 10)]
        if functional:
            cols.append(("Connected to", 20))
        width = line_length or sum(w for _, w in cols) + 3
        rows = []
        trainable = non_trainable = 0
        for n in self._nodes:
            if not functional and isinstance(n.layer, _layers.InputLayer):
                continue
            params = 0
            for _, shape, tr in n.weight_specs():
                k = 1
                for d in shape:
                    k *= d
                params += k
                if tr and n.layer.trainable:
                    trainable += k
                else:
                    non_trainable += k
            shape = "[(None, %s)]" % ", ".join(map(str, n.out_shape)) if \
                isinstance(n.layer, _layers.InputLayer) else \
                str((None,) + tuple(n.out_shape))
            row = ["%s (%s)" % (n.name, n.layer.keras_class), shape,
                   str(params)]
            if functional:
                row.append(", ".join("%s[0][0]" % s for s in n.inbound))
            rows.append(row)
        print_fn('Model: "%s"' % self.name)
        print_fn("_" * width)
        print_fn("".join(h.ljust(w) for h, w in cols).rstrip())
        print_fn("=" * width)
        for i, r in enumerate(rows):
            print_fn("".join(v.ljust(w) for v, (_, w) in zip(r, cols))
                     .rstrip())
            print_fn(("=" if i == len(rows) - 1 else "_") * width)
        total = trainable + non_trainable
        print_fn("Total params: {:,}".format(total))
        print_fn("Trainable params: {:,}".format(trainable))
        print_fn("Non-trainable params: {:,}".format(non_trainable))
        print_fn("_" * width)

    # -- the program on the daemon ------------------------------------------

    def compile(self, optimizer="rmsprop", loss=None, metrics=None,
                client=None, **kw):
        """Compile on the daemon of client (default: rtrain.connect()'s
        connection or $RTRAIN_SERVER). Further keywords go to
        Client.compile (batch_size, shuffle, seed, from_logits, ...)."""
        from . import _default_client
        client = client or _default_client()
        if self._compiled is not None and self._pending is None:
            # Keras' compile keeps the weights a model has
            got = self._compiled.get_named_weights()
            self._pending = [got[n].copy() for n in self._param_names()]
        self._compiled = client.compile(self, optimizer=optimizer, loss=loss,
                                        metrics=metrics, **kw)
        self._compiled._owner = self
        self._compiled.stop_training = self._stop
        import weakref
        for ly in self.layers:  # layer.reset_states() reaches the program
            ly._model_ref = weakref.ref(self)
        if self._pending is not None:
            # by name: the daemon lists the trainable weights first
            self._compiled.set_weights(dict(zip(self._param_names(), self._pending)))
            self._pending = None
        return None

    def _prog(self):
        if self._compiled is None:
            raise RuntimeError("the model must be compiled first: call "
                               "model.compile(optimizer, loss)")
        return self._compiled

    @property
    def compiled(self):
        """The program on the daemon (rtrain.CompiledModel), or None."""
        return self._compiled

    @property
    def optimizer(self):
        return self._prog().optimizer

    @property
    def loss(self):
        return self._prog().loss

    @property
    def metrics_names(self):
        return self._prog().metrics_names if self._compiled else []

    @property
    def history(self):
        return self._compiled.history if self._compiled else None

    @property
    def stop_training(self):
        return self._compiled.stop_training if self._compiled else self._stop

    @stop_training.setter
    def stop_training(self, v):
        self._stop = bool(v)
        if self._compiled is not None:
            self._compiled.stop_training = v

    def fit(self, *a, **kw):
        return self._prog().fit(*a, **kw)

    def evaluate(self, *a, **kw):
        return self._prog().evaluate(*a, **kw)

    def predict(self, *a, **kw):
        return self._prog().predict(*a, **kw)

    def reset_states(self):
        """Keras' model.reset_states(): the stateful RNNs' carried states
        back to zeros before the next step (nothing to do before compile)."""
        if self._compiled is not None:
            self._compiled.reset_states()

    def get_weights(self):
        """The weights (from the daemon once compiled), Keras' order."""
        if self._compiled is None and self._pending is not None:
            return [w.copy() for w in self._pending]
        return self._prog().get_weights()

    def set_weights(self, weights):
        """Set every weight (Keras' order). Before compile they are kept
        here and sent to the daemon by compile()."""
        if self._compiled is not None:
            self._compiled.set_weights(weights)
            return
        import numpy as np
        specs = self.weight_specs()
        weights = list(weights)
        if len(weights) != len(specs):
            raise ValueError("set_weights wants %d arrays, got %d"
                             % (len(specs), len(weights)))
        out = []
        for (name, shape, _), w in zip(specs, weights):
            a = np.ascontiguousarray(w, dtype=np.float32)
            if tuple(a.shape) != tuple(shape):
                raise ValueError("weight %s has shape %s, the model wants %s"
                                 % (name, a.shape, tuple(shape)))
            out.append(a)
        self._pending = out

    def save_weights(self, filepath, overwrite=True, save_format=None):
        """Keras' HDF5 weight file (legacy h5 layout)."""
        from . import saving
        saving.save_weights(self, filepath, overwrite=overwrite)

    def load_weights(self, filepath, by_name=False):
        from . import saving
        saving.load_weights(self, filepath, by_name=by_name)

    def save(self, filepath, overwrite=True, include_optimizer=False, format=None):
        """A path ending in .keras (or format="keras"): Keras 3's zip
        (config.json with the compile settings, metadata.json,
        model.weights.h5; rtrain.saving). Otherwise Keras 2's HDF5 model
        file: the model JSON (model_config), the compile settings
        (training_config) and the weights (model_weights).
        rtrain.models.load_model and Keras' load_model read both.
        format="tfjs": the TF.js layers format in the folder filepath
        (model.json and a weights shard), which tfjs loads."""
        from . import saving
        if format == "tfjs":
            return saving.save_tfjs(self, filepath, overwrite=overwrite)
        if format not in (None, "h5", "keras"):
            raise ValueError("format %r: 'keras', 'h5' or 'tfjs'" % (format,))
        if format == "keras" or (format is None and
                                 str(filepath).lower().endswith(".keras")):
            return saving.save_keras(self, filepath, overwrite=overwrite)
        saving.save_model(self, filepath, overwrite=overwrite)

    def _param_names(self):
        return [w[0] for w in self.weight_specs()]

    def __getattr__(self, name):
        # What only the program on the daemon has (last_timings, report,
        # global_step, get_named_weights, ...), once compiled.
        if name.startswith("_"):
            raise AttributeError(name)
        c = self.__dict__.get("_compiled")
        if c is None or not hasattr(c, name):
            raise AttributeError("%r has no attribute %r%s" % (
                type(self).__name__, name,
                " (compile the model first)" if c is None else ""))
        return getattr(c, name)

    def __repr__(self):
        return "<rtrain.%s %s>" % (type(self).__name__, self.name)


class Sequential(Model):
    """A linear stack of rtrain.layers, Keras' Sequential."""

    _default_name = "sequential"

    def __init__(self, layers=None, name=None):
        super().__init__(name=name)
        self._nodes = None
        self._list = []
        self._input = None
        for layer in layers or []:
            self.add(layer)

    def add(self, layer):
        if isinstance(layer, _layers.KerasTensor):
            if not isinstance(layer.layer, _layers.InputLayer) or self._list:
                raise ValueError("only an rtrain.Input can start a "
                                 "Sequential")
            layer = layer.layer
        if not isinstance(layer, _layers.Layer):
            raise TypeError("Sequential takes rtrain.layers objects, got %r"
                            % (layer,))
        if isinstance(layer, _layers.InputLayer):
            if self._list or self._input is not None:
                raise ValueError("an InputLayer can only be the first layer")
            self._input = layer
            return
        self._list.append(layer)
        self._nodes = None

    @property
    def _nodes(self):
        if self.__nodes is None:
            self.__nodes = self._build_seq()
        return self.__nodes

    @_nodes.setter
    def _nodes(self, v):
        self.__nodes = v

    def _build_seq(self):
        if not self._list:
            raise ValueError("Sequential model has no layers")
        first = self._list[0]
        inp = self._input
        if inp is None:
            if first.input_shape is None:
                raise ValueError("the first layer needs input_shape=... (or "
                                 "start with rtrain.layers.Input(shape))")
        taken, nodes = set(), []
        for layer in self._list:
            if layer.name is None:
                layer.name = _unique(layer._auto_name, taken)
            if layer.name in taken:
                raise ValueError("duplicate layer name %r" % layer.name)
            taken.add(layer.name)
        if inp is None:
            in_name = first.name + "_input"
            inp_layer = _layers.InputLayer(first.input_shape,
                                           batch_size=getattr(first, "batch_size", None))
        else:
            inp_layer = inp
            in_name = inp.name or _unique(first.name + "_input", taken)
        shape = list(inp_layer.input_shape)
        nodes.append(_Node(inp_layer, in_name, [], [], shape))
        prev = in_name
        for layer in self._list:
            out = layer._out_shape([shape])
            nodes.append(_Node(layer, layer.name, [prev], [shape], out))
            prev, shape = layer.name, out
        return nodes

    @property
    def layers(self):
        # Keras' Sequential.layers leaves out the InputLayer.
        return [n.layer for n in self._nodes[1:]]

    def get_config(self):
        out = [self._nodes[0].layer.get_config(self._nodes[0].name)]
        for n in self._nodes[1:]:
            out.append(n.layer.get_config(n.name))
        return {"name": self.name, "layers": out}

    def _class_name(self):
        return "Sequential"

    def __repr__(self):
        return "Sequential([%s])" % ", ".join(map(repr, self._list))


# ---------------------------------------------------------------- loading

def _layer_from_config(cls_name, cfg):
    cls = getattr(_layers, cls_name, None)
    if cls is None or not isinstance(cls, type) or \
            not issubclass(cls, _layers.Layer) or cls is _layers.Layer:
        raise ValueError("layer class %r is not supported" % cls_name)
    cfg = dict(cfg)
    name = cfg.pop("name", None)
    if cls is _layers.InputLayer:
        bis = cfg.get("batch_input_shape") or cfg.get("batch_shape")
        return _layers.InputLayer(tuple(bis)[1:], name=name, batch_size=tuple(bis)[0])
    kw = {"name": name}
    if cfg.get("batch_input_shape"):
        kw["batch_input_shape"] = tuple(cfg["batch_input_shape"])
    if "trainable" in cfg:
        kw["trainable"] = cfg["trainable"]
    import inspect
    params = set()
    # A subclass passes its base's settings on through **kw (the RNNs).
    for c in cls.__mro__:
        if "__init__" in vars(c) and c is not object:
            params.update(inspect.signature(c.__init__).parameters)
    for k, v in cfg.items():
        if k in params and k not in ("self", "kw", "name", "input_shape",
                                     "batch_input_shape", "trainable", "batch_size"):
            kw[k] = v
    if cls is _layers.Bidirectional and isinstance(kw.get("layer"), dict):
        kw["layer"] = _layer_from_config(kw["layer"]["class_name"],
                                         kw["layer"]["config"])
    return cls(**kw)


class _Ref(str):
    """A keyword argument of a call that is a tensor: its source layer."""


def _tensor_ref(v):
    """The source layer of a serialized tensor (Keras 2's [name, 0, 0],
    Keras 3's __keras_tensor__), else None."""
    if isinstance(v, list) and 3 <= len(v) <= 4 and isinstance(v[0], str) and \
            all(isinstance(i, int) for i in v[1:3]):
        return v[0]
    if isinstance(v, dict) and v.get("class_name") == "__keras_tensor__":
        return v["config"]["keras_history"][0]
    return None


def _inbound_call(nodes):
    """The source layers of a layer's first inbound node, and its keyword
    arguments (tensors as _Ref): Keras 2's [[["name", 0, 0, {kwargs}],
    ...]] or Keras 3's [{"args": [tensor(s)], "kwargs": {...}}]."""
    if not nodes:
        return [], {}
    node = nodes[0]
    if isinstance(node, list):
        kw = node[0][3] if node and len(node[0]) > 3 and isinstance(node[0][3], dict) else {}
        names, kwargs = [ref[0] for ref in node], kw
    else:
        args = node.get("args") or []
        if len(args) == 1 and isinstance(args[0], list):
            args = args[0]
        names = [t["config"]["keras_history"][0] for t in args]
        kwargs = node.get("kwargs") or {}
    out = {}
    for k, v in kwargs.items():
        r = _tensor_ref(v)
        out[k] = _Ref(r) if r is not None else v
    return names, out


def model_from_json(json_string):
    """A model from Keras model JSON (Sequential or Functional)."""
    doc = _json.loads(json_string) if isinstance(json_string, str) \
        else json_string
    cls = doc.get("class_name")
    cfg = doc.get("config") or {}
    lays = cfg.get("layers") if isinstance(cfg, dict) else cfg
    if cls == "Sequential":
        m = Sequential(name=cfg.get("name") if isinstance(cfg, dict)
                       else None)
        for ld in lays:
            m.add(_layer_from_config(ld["class_name"], ld["config"]))
        return m
    if cls in ("Functional", "Model"):
        made = {}
        for ld in lays:
            layer = _layer_from_config(ld["class_name"], ld["config"])
            name = ld.get("name") or ld["config"].get("name")
            layer.name = name
            if isinstance(layer, _layers.InputLayer):
                made[name] = _layers.KerasTensor(layer.input_shape, layer, [])
                continue
            srcs, kwargs = _inbound_call(ld.get("inbound_nodes") or [])
            if isinstance(layer, _layers.MultiHeadAttention):
                refs = [v for v in kwargs.values() if isinstance(v, _Ref)]
            else:  # other layers' keyword arguments are not tensors they read
                refs, kwargs = [], {}
            if not srcs or any(s not in made for s in srcs + refs):
                raise ValueError("layer %r: inbound layers %s are not "
                                 "defined before it" % (name, srcs + refs))
            ins = [made[s] for s in srcs]
            if isinstance(layer, _layers.MultiHeadAttention):
                kw = {k: made[v] if isinstance(v, _Ref) else v
                      for k, v in kwargs.items()}
                made[name] = layer(*ins, **kw)
            else:
                made[name] = layer(ins if len(ins) > 1 else ins[0])
        def names(v):
            # Keras 2: [["name", 0, 0], ...]; Keras 3 may write one ["name", 0, 0]
            return [v[0]] if v and isinstance(v[0], str) else [e[0] for e in v]
        ins = [made[nm] for nm in names(cfg["input_layers"])]
        outs = [made[nm] for nm in names(cfg["output_layers"])]
        return Model(ins if len(ins) > 1 else ins[0],
                     outs if len(outs) > 1 else outs[0], name=cfg.get("name"))
    raise ValueError("not a Keras model JSON (class_name %r)" % (cls,))


def load_model(filepath, compile=True, client=None):
    """A model saved by model.save: Keras 3's .keras zip, Keras 2's h5, or
    a TF.js folder/model.json; built, compiled on the daemon when it has
    compile settings (compile=True), its weights loaded."""
    from . import saving
    import os
    import zipfile
    p = os.fspath(filepath)
    if os.path.isdir(p) or p.endswith(".json"):
        return saving.load_tfjs(p, compile=compile, client=client)
    if zipfile.is_zipfile(p):
        return saving.load_keras(p, compile=compile, client=client)
    return saving.load_model(filepath, compile=compile, client=client)
