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


class _Call:
    """One call of a layer in a model (Keras' inbound node): its sources
    [(layer name, node index in this model)], per-sample shapes, and the
    tensor it made (None in a Sequential)."""

    __slots__ = ("srcs", "in_shapes", "out_shape", "tensor")

    def __init__(self, srcs, in_shapes, out_shape, tensor=None):
        self.srcs, self.in_shapes, self.out_shape = srcs, in_shapes, out_shape
        self.tensor = tensor


class _Node:
    """A layer placed in a model: its name and its calls (a shared layer
    has several, one set of weights); inbound, in_shapes and out_shape are
    the first call's."""

    def __init__(self, layer, name, inbound, in_shapes, out_shape, calls=None):
        self.layer, self.name = layer, name
        self.calls = calls if calls is not None else \
            [_Call([(src, 0) for src in inbound], in_shapes, out_shape)]

    @property
    def inbound(self):
        """names of the layers its first call reads"""
        return [s[0] for s in self.calls[0].srcs]

    @property
    def in_shapes(self):
        return self.calls[0].in_shapes

    @property
    def out_shape(self):
        return self.calls[0].out_shape

    def weight_specs(self):
        if isinstance(self.layer, _layers.InputLayer):
            return []
        if isinstance(self.layer, Model):
            # a nested model's weights are named by its own layers (the
            # daemon's importer and Keras' weight names do the same); a
            # frozen one (model.trainable = False) freezes them all
            return [(n, shape, tr and self.layer.trainable)
                    for n, shape, tr in self.layer.weight_specs()]
        out = [("%s/%s" % (self.name, sfx), shape, tr)
               for sfx, shape, tr in self.layer.weight_specs(
                   self.in_shapes[0])]
        for n, shape, _ in out:
            if any(d is None for d in shape):
                raise ValueError("weight %s would have the shape %s of a "
                                 "variable input dim" % (n, tuple(shape)))
        return out


def _node_offset(layer, where="keras2"):
    """Where a config numbers a layer's calls from: a nested model's own
    graph is its node 0 in Keras 2 (get_network_config's
    _should_skip_first_node), so its calls in the outer model count from
    1 ("keras2"); Keras 3 writes inbound tensors' keras_history from 0
    ("keras3_in", serialize_node drops the nodes outside the model) and a
    nested Functional's output_layers from 1 ("keras3_out", get_config's
    node_reindexing_map); keras/src/models/functional.py."""
    if not isinstance(layer, Model) or where == "keras3_in":
        return 0
    if where == "keras3_out" and isinstance(layer, Sequential):
        return 0
    return 1


def _layer_entry(layer, name):
    """{"class_name", "config"} of a layer of a model; a nested model's
    config is its own get_config() (Keras 2's layout)."""
    if isinstance(layer, Model):
        cfg = layer.get_config()
        cfg["name"] = name
        return {"class_name": layer._class_name(), "config": cfg}
    return layer.get_config(name)


class Model(_layers._Called):
    """Keras' Functional model: Model(inputs, outputs) over rtrain.Input and
    layer calls; inputs and outputs may be lists (up to 8 outputs): fit
    then takes lists or dicts (by layer name) of arrays, compile a loss
    and loss_weights per output, and predict returns a list."""

    _default_name = "model"

    def __init__(self, inputs=None, outputs=None, name=None):
        self.name = name or self._default_name
        self.trainable = True
        self._inbound_nodes = []  # its calls as a layer of another model
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
        # Keras 3 writes input_layers/output_layers in the structure given
        # (a tensor: one [name, node, 0]; a list: a list of them)
        self._io_lists = (isinstance(inputs, (list, tuple)), isinstance(outputs, (list, tuple)))
        if not ins or not outs or len(outs) > 8:
            raise ValueError("rtrain models have 1 or more inputs and 1 to 8 "
                             "outputs")
        for t in ins + outs:
            if not isinstance(t, _layers.KerasTensor):
                raise TypeError("Model(inputs, outputs) takes tensors from "
                                "rtrain.Input and layer calls")
        if not all(isinstance(t.layer, _layers.InputLayer) for t in ins):
            raise ValueError("the model inputs must come from rtrain.Input")
        # The calls (tensors) the outputs need, inputs first: a depth-first
        # walk from the outputs; a layer is listed where its first call
        # in the walk is placed.
        order, seen = [], set()

        def visit(t):
            t = t._primary  # a call's other outputs stand for the call
            if id(t) in seen:
                return
            seen.add(id(t))
            for i in t.inputs:
                visit(i)
            order.append(t)
        for o in outs:
            visit(o)
        in_ids = [id(t.layer) for t in ins]
        if len(set(in_ids)) != len(in_ids):
            raise ValueError("an input is given twice in Model(inputs, ...)")
        if sorted(id(t.layer) for t in order
                  if isinstance(t.layer, _layers.InputLayer)) != sorted(in_ids):
            raise ValueError("the outputs must depend on the model inputs "
                             "and on nothing else")
        self._in_layers = [t.layer for t in ins]
        self._outputs = list(outs)
        # the inputs first, in the model's order, as Keras lists them
        self._tensors = list(ins) + [t for t in order
                                     if not isinstance(t.layer, _layers.InputLayer)]
        self._nodes = None
        self._build_nodes()

    def _order_as_listed(self, names):
        """Order the layers as a config lists them (names), as the daemon's
        importer places a Keras file's layers (server/import/import_keras.c
        place_from: the listed order, a call after the calls it reads, a
        shared layer's calls in their order). Initial weights are drawn by
        their position, so model_from_json(text) then compile draws what
        client.compile(text) draws (docs/python.md)."""
        rank = {n: i for i, n in enumerate(names)}
        ins = [t for t in self._tensors if isinstance(t.layer, _layers.InputLayer)]
        calls = sorted((t for t in self._tensors if not isinstance(t.layer, _layers.InputLayer)),
                       key=lambda t: (rank.get(t.layer.name, len(rank)), t.node_index))
        member = {id(t) for t in calls}
        order, seen = [], set()
        for top in calls:
            stack = [top]
            while stack:  # depth first, without recursion
                t = stack[-1]
                if id(t) in seen:
                    stack.pop()
                    continue
                need = [i._primary for i in t.inputs
                        if id(i._primary) in member and id(i._primary) not in seen]
                if need:
                    stack.append(need[0])
                    continue
                seen.add(id(t))
                order.append(t)
                stack.pop()
        self._tensors = ins + order
        self._build_nodes()

    def _build_nodes(self):
        taken, names, nodes, placed = set(), {}, [], {}
        layers = []
        for t in self._tensors:
            if id(t.layer) not in placed:
                placed[id(t.layer)] = []
                layers.append(t.layer)
            placed[id(t.layer)].append(t)
        for layer in layers:
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
        # Keras' node_conversion_map (keras/engine/functional.py
        # get_network_config): a layer's calls in this model, numbered in
        # call order from 0 (calls outside the model are left out)
        conv = {}
        for layer in layers:
            for k, t in enumerate(sorted(placed[id(layer)], key=lambda t: t.node_index)):
                conv[id(t)] = k
        self._conv = conv
        for layer in layers:
            calls = [_Call([(names[id(i.layer)], conv[id(i._primary)], i.tensor_index)
                            for i in t.inputs],
                           [list(i.shape[1:]) for i in t.inputs], list(t.shape[1:]), t)
                     for t in sorted(placed[id(layer)], key=lambda t: t.node_index)]
            nodes.append(_Node(layer, layer.name, None, None, None, calls=calls))
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
        outs = getattr(self, "_outputs", None)
        if not outs:
            last = self._nodes[-1]
            return ([(self._node_of(l).name, tuple(self._node_of(l).out_shape)) for l in ins],
                    [(last.name, tuple(last.out_shape))])
        return ([(self._node_of(l).name, tuple(self._node_of(l).out_shape)) for l in ins],
                [(self._node_of(t.layer).name, tuple(t.shape[1:])) for t in outs])

    def _out_refs(self):
        """[(layer name, node index)] of the outputs (Keras' output_layers)"""
        return [r[:2] for r in self._out_refs3()]

    def _out_refs3(self):
        """[(layer name, node index, tensor index)] of the outputs"""
        outs = getattr(self, "_outputs", None)
        if not outs:
            return [(self._nodes[-1].name, 0, 0)]
        return [(self._node_of(t.layer).name, self._conv[id(t._primary)], t.tensor_index)
                for t in outs]

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
        out = [w for n in self._nodes for w in n.weight_specs()]
        seen = set()
        for w in out:
            if w[0] in seen:
                raise ValueError(
                    "two weights are named %s: a layer of a nested model is also "
                    "a layer of the model around it, or two nested models hold "
                    "layers of one name (weights are named by their layers: "
                    "rename one)" % w[0])
            seen.add(w[0])
        return out

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
        by = {n.name: n.layer for n in self._nodes}
        for n in self._nodes:
            d = _layer_entry(n.layer, n.name)
            d["name"] = n.name
            d["inbound_nodes"] = [
                n.layer._keras2_node([(s[0], s[1] + _node_offset(by[s[0]])) + tuple(s[2:])
                                      for s in c.srcs],
                                     c.tensor)
                for c in n.calls if c.srcs]
            out.append(d)
        ins = self._io()[0]
        cfg = {"name": self.name, "layers": out,
               "input_layers": [[nm, 0, 0] for nm, _ in ins],
               "output_layers": [[nm, k + _node_offset(by[nm]), ti]
                                 for nm, k, ti in self._out_refs3()]}
        if not self.trainable:
            cfg["trainable"] = False
        return cfg

    def _class_name(self):
        return "Functional"

    @property
    def keras_class(self):
        return self._class_name()

    # -- a model called as a layer of another model ------------------------

    def __call__(self, inputs):
        """The model applied to new tensors, as one layer of another model
        (a Siamese tower as a Model called on two inputs): every call uses
        its one set of weights. It takes tensors of its inputs' shapes and
        has one output (the daemon nests models with one)."""
        ins = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        if not ins or not all(isinstance(t, _layers.KerasTensor) for t in ins):
            raise TypeError("a model is called on rtrain.Input tensors or "
                            "other layers' outputs")
        own_in, own_out = self._io()
        if len(own_out) != 1:
            raise ValueError("model %s has %d outputs; a model called as a layer "
                             "has one here" % (self.name, len(own_out)))
        if len(ins) != len(own_in):
            raise ValueError("model %s has %d inputs, called on %d tensors"
                             % (self.name, len(own_in), len(ins)))
        for k, (t, (nm, shape)) in enumerate(zip(ins, own_in)):
            got = tuple(t.shape[1:])
            if len(got) != len(shape) or any(
                    a is not None and b is not None and a != b for a, b in zip(got, shape)):
                raise ValueError("Input %d of model \"%s\" is incompatible with the "
                                 "model: expected shape %s, found shape %s"
                                 % (k, self.name, (None,) + tuple(shape), tuple(t.shape)))
        if any(n.layer is self for n in self._nodes):
            raise ValueError("model %s cannot be called inside itself" % self.name)
        return self._add_node(_layers.KerasTensor(own_out[0][1], self, ins,
                                                  len(self._inbound_nodes)))

    def _call_weights(self, t):
        return self.weight_specs()

    def _out_shape(self, shapes):
        raise ValueError("a model is a layer of a Functional model (model(x)), "
                         "not of a Sequential")

    @property
    def input(self):
        """The model's input tensor(s), as Keras' model.input"""
        ins = getattr(self, "_tensors", None)
        if ins is None:
            raise AttributeError("a Sequential has no input tensors here")
        ins = [t for t in self._tensors if t.layer in self._in_layers]
        return ins[0] if len(ins) == 1 else ins

    @property
    def output(self):
        """The model's output tensor(s), as Keras' model.output"""
        outs = getattr(self, "_outputs", None)
        if outs is None:
            raise AttributeError("a Sequential has no output tensors here")
        return outs[0] if len(outs) == 1 else list(outs)

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
                by = {m.name: m.layer for m in self._nodes}
                row.append(", ".join("%s[%d][%d]" % (s[0], s[1] + _node_offset(by[s[0]]), s[2])
                                     for c in n.calls for s in c.srcs))
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
            named = self._op_constants()
            named.update(zip(self._param_names(), self._pending))
            self._compiled.set_weights(named)
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

    def _op_constants(self, named=None):
        """{name: array} of the daemon's parameters that no Keras layer
        lists: the constants of recorded TensorFlow ops (TFOpLambda,
        TensorFlowOpLayer), which the importer keeps as frozen parameters
        "<layer>/..." (server/import/import_keras_tfop.c). Keras' weights
        leave them out; setting the weights keeps them."""
        ops = self._op_prefixes()
        if not ops or self._compiled is None:
            return {}
        named = self._compiled.get_named_weights() if named is None else named
        return {n: w for n, w in named.items() if n.startswith(ops)}

    def _op_prefixes(self):
        return tuple(n.name + "/" for n in (self._nodes or []) if isinstance(
            n.layer, (_layers.TFOpLambda, _layers.TensorFlowOpLayer)))

    def get_weights(self):
        """The weights (from the daemon once compiled), Keras' order."""
        if self._compiled is None and self._pending is not None:
            return [w.copy() for w in self._pending]
        if not self._op_prefixes():
            return self._prog().get_weights()
        named = self._prog().get_named_weights()
        ops = self._op_constants(named)
        return [w for n, w in named.items() if n not in ops]

    def set_weights(self, weights):
        """Set every weight (Keras' order). Before compile they are kept
        here and sent to the daemon by compile()."""
        if self._compiled is not None:
            named = self._compiled.get_named_weights() if self._op_prefixes() else {}
            ops = self._op_constants(named)
            if ops and not isinstance(weights, dict):
                # get_weights()' order, the recorded ops' constants kept
                keep = [n for n in named if n not in ops]
                weights = list(weights)
                if len(weights) != len(keep):
                    raise ValueError("set_weights wants %d arrays, got %d"
                                     % (len(keep), len(weights)))
                weights = dict(ops, **dict(zip(keep, weights)))
            elif ops:
                weights = dict(ops, **weights)
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
        if getattr(layer, "_returns_state", lambda: False)():
            # Keras refuses it too: "All layers in a Sequential model
            # should have a single output tensor"
            raise ValueError("%s with return_state has several outputs; use a "
                             "Functional model (rtrain.Model) for its states"
                             % layer.keras_class)
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
    if cls_name in ("Functional", "Model", "Sequential"):
        # a nested model
        m = model_from_json({"class_name": cls_name, "config": cfg})
        if isinstance(cfg, dict) and cfg.get("trainable") is False:
            m.trainable = False
        return m
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
    if cls is _layers.Bidirectional:
        # the wrapped layer and Keras 3's backward_layer, each a layer config
        for k in ("layer", "backward_layer"):
            if isinstance(kw.get(k), dict):
                kw[k] = _layer_from_config(kw[k]["class_name"], kw[k]["config"])
    return cls(**kw)


class _Ref(tuple):
    """A keyword argument of a call that is a tensor: (source layer, node
    index, tensor index)."""


def _tensor_ref(v):
    """(source layer, node index, tensor index) of a serialized tensor
    (Keras 2's [name, node, tensor], Keras 3's __keras_tensor__), else
    None."""
    if isinstance(v, list) and 3 <= len(v) <= 4 and isinstance(v[0], str) and \
            all(isinstance(i, int) for i in v[1:3]):
        return (v[0], v[1], v[2])
    if isinstance(v, dict) and v.get("class_name") == "__keras_tensor__":
        h = v["config"]["keras_history"]
        return (h[0], h[1], h[2] if len(h) > 2 else 0)
    return None


def _node_call(node):
    """One inbound node: its sources [(layer name, node index)] and its
    keyword arguments (tensors as _Ref): Keras 2's [["name", node, 0,
    {kwargs}], ...] or Keras 3's {"args": [tensor(s)], "kwargs": {...}}."""
    if isinstance(node, list):
        if node and isinstance(node[0], str):
            # tf.keras' TFOpLambda keeps one first argument as the entry
            # itself: [name, node, tensor, kwargs]
            node = [node]
        kw = node[0][3] if node and len(node[0]) > 3 and isinstance(node[0][3], dict) else {}
        if node and len(node[0]) > 2 and node[0][0] == "_CONSTANT_VALUE" and node[0][1] == -1:
            # tf.keras' constant first argument (a TFOpLambda's 1 - x):
            # the call's x
            kw = dict(kw, x=node[0][2])
            node = node[1:]
        srcs, kwargs = [(ref[0], ref[1] if len(ref) > 1 else 0, ref[2] if len(ref) > 2 else 0)
                        for ref in node], kw
    else:
        args = node.get("args") or []
        if len(args) == 1 and isinstance(args[0], list):
            args = args[0]
        else:  # an RNN's initial states: Keras 3's second argument, maybe a list
            args = [e for a in args for e in (a if isinstance(a, list) and a and all(
                isinstance(t, dict) for t in a) else [a])]
        srcs = [_tensor_ref(t) for t in args]
        if not srcs or None in srcs:
            raise ValueError("an inbound node's arguments are not tensors: %r" % (args,))
        kwargs = node.get("kwargs") or {}
    out = {}
    for k, v in kwargs.items():
        st = v if isinstance(v, list) else [v]
        if k == "initial_state" and st and all(_tensor_ref(e) is not None for e in st):
            # Keras 3 may keep an RNN's initial states a keyword (a tensor
            # or a list); the call reads them after its input, as Keras 2
            # writes them
            srcs = srcs + [_tensor_ref(e) for e in st]
            continue
        r = _tensor_ref(v)
        out[k] = _Ref(r) if r is not None else v
    return srcs, out


def _io_refs(v):
    """[(name, node index)] of input_layers/output_layers: Keras 2's
    [["name", 0, 0], ...]; Keras 3 may write one ["name", 0, 0]"""
    if v and isinstance(v[0], str):
        v = [v]
    return [(e[0], e[1] if len(e) > 1 else 0, e[2] if len(e) > 2 else 0) for e in v]


def _made(made, ref):
    """the tensor (layer, call, tensor index) of the calls made so far,
    else None"""
    outs = made.get((ref[0], ref[1]))
    return outs[ref[2]] if outs is not None and 0 <= ref[2] < len(outs) else None


def _functional_from_config(cfg, lays):
    """Keras' reconstruct_from_config (keras/engine/functional.py): make
    every layer, then call each on its inbound nodes in the config's order;
    a call whose inputs are not made yet (a layer shared at several depths)
    waits for the next pass. A layer's calls are made in their order, so
    node k of the config is the layer's call k."""
    made, layers, queue = {}, {}, []
    off_in, off_out = {}, {}  # config node index - call index (nested models)
    for ld in lays:
        layer = _layer_from_config(ld["class_name"], ld["config"])
        name = ld.get("name") or (ld["config"].get("name")
                                  if isinstance(ld["config"], dict) else None)
        if name in layers:
            raise ValueError("two layers are named %r" % (name,))
        layer.name = name
        layers[name] = layer
        if "module" in ld:  # Keras 3
            off_in[name] = _node_offset(layer, "keras3_in")
            off_out[name] = _node_offset(layer, "keras3_out")
        else:
            first = (ld["config"].get("layers") if isinstance(ld["config"], dict)
                     else ld["config"]) if isinstance(layer, Model) else None
            starts = bool(first) and isinstance(first[0], dict) and \
                first[0].get("class_name") == "InputLayer"
            off_in[name] = off_out[name] = _node_offset(layer) if starts or \
                not isinstance(layer, Sequential) else 0
        if isinstance(layer, _layers.InputLayer):
            made[(name, 0)] = [layer._tensor()]
            continue
        nodes = ld.get("inbound_nodes") or []
        if not nodes:
            raise ValueError("layer %r has no inbound node" % (name,))
        queue.append((layer, name, [_node_call(nd) for nd in nodes]))
    for i, (layer, name, calls) in enumerate(queue):
        for srcs, kwargs in calls:
            refs = srcs + [v for v in kwargs.values() if isinstance(v, _Ref)]
            bad = [r[0] for r in refs if r[0] not in layers]
            if bad:
                raise ValueError("layer %r: inbound layers %s are not defined"
                                 % (name, bad))
        # the sources as (layer, call index)
        queue[i] = (layer, name, [
            ([(s, k - off_in[s], ti) for s, k, ti in srcs],
             {a: _Ref((v[0], v[1] - off_in[v[0]], v[2])) if isinstance(v, _Ref) else v
              for a, v in kwargs.items()})
            for srcs, kwargs in calls])
    while queue:
        left, progressed = [], False
        for layer, name, calls in queue:
            while calls:
                srcs, kwargs = calls[0]
                # MultiHeadAttention's and TFOpLambda's keyword arguments
                # may be tensors; other layers' are not tensors they read
                # (a recurrent layer's mask too)
                mha = getattr(layer, "_kw_tensors", False)
                mask = kwargs.get("mask")
                if isinstance(mask, _Ref) and not (mha or getattr(layer, "_kw_mask", False)):
                    raise ValueError("layer %r: a mask tensor argument is read for SimpleRNN, "
                                     "LSTM and GRU layers only" % (name,))
                refs = srcs + ([v for v in kwargs.values() if isinstance(v, _Ref)]
                               if mha else [mask] if isinstance(mask, _Ref) else [])
                if any(not _made(made, r) for r in refs):
                    break
                ins = [_made(made, r) for r in srcs]
                if mha:
                    kw = {k: _made(made, v) if isinstance(v, _Ref) else v
                          for k, v in kwargs.items()}
                    t = layer(*ins, **kw)
                elif isinstance(mask, _Ref):
                    t = layer(ins if len(ins) > 1 else ins[0], mask=_made(made, mask))
                else:
                    t = layer(ins if len(ins) > 1 else ins[0])
                # a call's outputs: [output, *states] with return_state
                outs = t if isinstance(t, list) else [t]
                made[(name, outs[0].node_index)] = outs
                calls.pop(0)
                progressed = True
            if calls:
                left.append((layer, name, calls))
        if left and not progressed:
            layer, name, calls = left[0]
            missing = [r for r in calls[0][0] if not _made(made, r)]
            raise ValueError("layer %r reads %s, which no layer call makes (a "
                             "node index past the layer's calls, or a cycle)"
                             % (name, ", ".join("%s[%d][%d]" % r for r in missing)))
        queue = left

    def tensors(v, what):
        out = []
        for r in _io_refs(v):
            c = (r[0], r[1] - off_out.get(r[0], 0), r[2])
            if not _made(made, c):
                raise ValueError("%s names %s[%d][%d], which no layer call makes"
                                 % (what, r[0], r[1], r[2]))
            out.append(_made(made, c))
        return out
    ins = tensors(cfg["input_layers"], "input_layers")
    outs = tensors(cfg["output_layers"], "output_layers")

    def listed(v):  # Keras 3 keeps a single tensor unlisted
        return not (v and isinstance(v[0], str))
    m = Model(ins if listed(cfg["input_layers"]) else ins[0],
              outs if listed(cfg["output_layers"]) else outs[0], name=cfg.get("name"))
    m._order_as_listed([ld.get("name") or (ld["config"].get("name") if isinstance(
        ld["config"], dict) else None) for ld in lays])
    return m


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
        return _functional_from_config(cfg, lays)
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
