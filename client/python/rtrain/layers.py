"""Keras-like layers for rtrain.Sequential and the Functional API.

A layer here is only a declaration: it records its Keras class name and
config, and the model serialises them to the JSON that Keras'
``model.to_json()`` writes. The daemon imports that JSON, so a model built
here and the same model exported from Keras compile to the same program.
Each layer also knows its output shape and its weights' names and shapes
(for summary(), count_params() and Keras' HDF5 weight files), the same as
the daemon's import computes.

Functional API: ``x = rtrain.Input((4,)); y = Dense(3)(x)`` records the
graph; ``rtrain.Model(x, y)`` serialises it as Keras' Functional JSON. A
layer called again (a shared layer) adds an inbound node and keeps its one
set of weights, as in Keras.
"""
import math as _math

__all__ = [
    "Layer", "Input", "InputLayer", "Dense", "Activation", "Dropout",
    "Flatten", "Reshape", "Conv2D", "MaxPooling2D", "AveragePooling2D",
    "GlobalAveragePooling2D", "BatchNormalization", "ReLU", "Softmax",
    "Concatenate", "KerasTensor", "Embedding", "SimpleRNN", "LSTM", "GRU",
    "Bidirectional",
]

_ACTIVATIONS = ("linear", "relu", "sigmoid", "tanh", "softmax", "log_softmax",
                "elu", "selu", "gelu", "swish", "silu", "softplus", "softsign",
                "hard_sigmoid", "relu6", "exponential")

# Keras' string initializer names (and their old aliases) -> class names.
_INITIALIZERS = {
    "glorot_uniform": "GlorotUniform", "glorot_normal": "GlorotNormal",
    "he_uniform": "HeUniform", "he_normal": "HeNormal",
    "zeros": "Zeros", "ones": "Ones", "zero": "Zeros", "one": "Ones",
    "xavier_uniform": "GlorotUniform", "xavier_normal": "GlorotNormal",
    "orthogonal": "Orthogonal", "uniform": "RandomUniform",
    "random_uniform": "RandomUniform", "random_normal": "RandomNormal",
    "normal": "RandomNormal", "truncated_normal": "TruncatedNormal",
    "lecun_normal": "LecunNormal", "lecun_uniform": "LecunUniform",
    "identity": "Identity",
}
# Configs Keras' initializers.get(name) serialises with (get_config's
# defaults); the VarianceScaling family writes {"seed": None}.
_INIT_CONFIGS = {
    "Zeros": {}, "Ones": {},
    "Orthogonal": {"gain": 1.0, "seed": None},
    "RandomUniform": {"minval": -0.05, "maxval": 0.05, "seed": None},
    "RandomNormal": {"mean": 0.0, "stddev": 0.05, "seed": None},
    "TruncatedNormal": {"mean": 0.0, "stddev": 0.05, "seed": None},
    "Identity": {"gain": 1.0},
}
for _v in list(_INITIALIZERS.values()):
    _INITIALIZERS[_v] = _v
# classes only given as objects (a config is needed), and Keras 3's names
_INITIALIZERS.update({"Constant": "Constant", "VarianceScaling": "VarianceScaling",
                      "OrthogonalInitializer": "Orthogonal",
                      "IdentityInitializer": "Identity"})

# Keras' regularizer names -> (class name, config): Keras 3's defaults
# (keras/src/regularizers/regularizers.py, 0.01); the daemon adds the
# penalties to the loss as Keras does.
_REGULARIZERS = {
    "l1": ("L1", {"l1": 0.01}), "l2": ("L2", {"l2": 0.01}),
    "l1_l2": ("L1L2", {"l1": 0.01, "l2": 0.01}),
}


def _check_activation(activation):
    if activation is None:
        return "linear"
    if not isinstance(activation, str):
        raise TypeError("activation must be a string such as 'relu', got %r"
                        % (activation,))
    if activation not in _ACTIVATIONS:
        raise ValueError("unknown activation %r (known: %s)"
                         % (activation, ", ".join(_ACTIVATIONS)))
    return activation


def _initializer(name, what):
    if isinstance(name, dict) and name.get("class_name") in _INITIALIZERS:
        return {"class_name": _INITIALIZERS[name["class_name"]],
                "config": dict(name.get("config") or {})}
    if not isinstance(name, str) or name not in _INITIALIZERS:
        raise ValueError("unknown %s %r (known: %s)"
                         % (what, name, ", ".join(sorted(
                             k for k in _INITIALIZERS if k.islower()))))
    cls = _INITIALIZERS[name]
    return {"class_name": cls,
            "config": dict(_INIT_CONFIGS.get(cls, {"seed": None}))}


def _regularizer(r, what):
    if r is None:
        return None
    if isinstance(r, str) and r.lower() in _REGULARIZERS:
        cls, cfg = _REGULARIZERS[r.lower()]
        return {"class_name": cls, "config": dict(cfg)}
    if isinstance(r, dict) and r.get("class_name") in ("L1", "L2", "L1L2"):
        return {"class_name": r["class_name"],
                "config": dict(r.get("config") or {})}
    raise ValueError("unknown %s %r (known: l1, l2, l1_l2)" % (what, r))


def _pos_int(v, what):
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ValueError("%s must be a positive int, got %r" % (what, v))
    return v


def _ints(v, n, what):
    """n ints from an int or a sequence of n (Keras' conv_utils.normalize_tuple)."""
    if isinstance(v, int) and not isinstance(v, bool):
        v = (v,) * n
    v = tuple(v)
    if len(v) != n:
        raise ValueError("%s must be an int or %s, got %r"
                         % (what, "a pair" if n == 2 else "%d ints" % n, v))
    return [_pos_int(int(e), what) for e in v]


def _dtype_name(dtype):
    """A layer's dtype as saved: a name, Keras 3's DTypePolicy object or
    Keras 2's Policy ({"class_name": ..., "config": {"name": ...}})."""
    if isinstance(dtype, dict):
        name = (dtype.get("config") or {}).get("name")
        if not isinstance(name, str):
            raise ValueError("dtype %r has no policy name" % (dtype,))
        return name
    return dtype


def _shape(shape, what="input_shape"):
    if shape is None:
        return None
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        shape = tuple(shape)
    except TypeError:
        raise TypeError("%s must be a tuple of ints, got %r" % (what, shape))
    if not shape:
        raise ValueError("%s must not be empty" % what)
    # None: a variable dim (a sequence of any length), as Keras writes
    # null; the daemon binds it from the data (docs/keras-import.md)
    return [None if d is None else _pos_int(d, what) for d in shape]


def _shapes_str(tensors):
    """(None, 5) or [(None, 5), (None, 3)], as Keras prints input shapes"""
    sh = [str(tuple(t.shape)) for t in tensors]
    return sh[0] if len(sh) == 1 else "[%s]" % ", ".join(sh)


def _fixed(in_shape, what):
    """in_shape, when no dim of it is variable (None)"""
    if any(d is None for d in in_shape):
        raise ValueError("%s needs fixed input dims, got %s (a variable dim "
                         "is bound from the data only where shapes allow it)"
                         % (what, tuple(in_shape)))
    return in_shape


class KerasTensor:
    """A symbolic tensor of the Functional API: the output of one call of a
    layer (shape without the batch dimension). node_index: which call of
    the layer made it (Keras' _keras_history node index); inputs: the
    tensors that call read."""

    def __init__(self, shape, layer, inputs, node_index=0, tensor_index=0, primary=None):
        self.shape = (None,) + tuple(shape)
        self.layer = layer
        self.inputs = list(inputs)
        self.node_index = node_index
        # which output of the call it is (an RNN's return_state: 0 the
        # output, then the states); _primary: the call's output 0, which
        # stands for the call in a model
        self.tensor_index = tensor_index
        self._primary = self if primary is None else primary

    @property
    def _keras_history(self):
        """(layer, node_index, tensor_index), as Keras names a tensor"""
        return (self.layer, self.node_index, self.tensor_index)

    def __repr__(self):
        return "<KerasTensor shape=%s from %s>" % (self.shape,
                                                   type(self.layer).__name__)


class _Called:
    """What Layer and Model share as callables of the Functional API:
    Keras' inbound nodes (self._inbound_nodes: one output tensor per call,
    in call order), the node accessors and the call's serialization."""

    def _add_node(self, t):
        """Record the call that made t. A later call (a shared layer) must
        fit the weights the first call built, as Keras' input_spec check."""
        if self._inbound_nodes:
            first = self._inbound_nodes[0]
            want, got = self._call_weights(first), self._call_weights(t)
            if [w[:2] for w in want] != [w[:2] for w in got]:
                bad = next(((a, b) for a, b in zip(want, got) if a[:2] != b[:2]),
                           (want[0] if want else None, got[0] if got else None))
                raise ValueError(
                    "Input of layer \"%s\" is incompatible with the layer: it was "
                    "first called on %s and a shared layer keeps one set of "
                    "weights (%s %s), but this call's input %s needs %s"
                    % (self.name or self._auto_name, _shapes_str(first.inputs),
                       bad[0][0] if bad[0] else "no weights",
                       tuple(bad[0][1]) if bad[0] else "",
                       _shapes_str(t.inputs),
                       "%s %s" % (bad[1][0], tuple(bad[1][1])) if bad[1] else "none"))
        self._inbound_nodes.append(t)
        return t

    def _call_weights(self, t):
        """[(suffix, shape, trainable)] the call that made t needs"""
        return self.weight_specs(list(t.inputs[0].shape[1:]))

    # -- Keras' node accessors (keras/engine/base_layer.py): input and
    # output are the first call's; a shape is ill-defined when the calls
    # differ in it

    def _node_at(self, node_index, what):
        if not self._inbound_nodes:
            raise RuntimeError("The layer has never been called and thus has no "
                               "defined %s." % what)
        if not isinstance(node_index, int) or not 0 <= node_index < len(self._inbound_nodes):
            raise ValueError("Asked to get %s at node %s, but the layer has only %d "
                             "inbound nodes." % (what, node_index, len(self._inbound_nodes)))
        return self._inbound_nodes[node_index]

    def get_output_at(self, node_index):
        """The output tensor of the layer's call node_index (0: the first);
        a list where the call has several (return_state)."""
        t = self._node_at(node_index, "output")
        outs = getattr(t, "_outputs", None)
        return list(outs) if outs else t

    def get_input_at(self, node_index):
        """The input tensor (a list for several) of call node_index."""
        ins = self._node_at(node_index, "input").inputs
        if not ins:  # an InputLayer's node reads its own tensor
            return self._inbound_nodes[node_index]
        return ins[0] if len(ins) == 1 else list(ins)

    def get_output_shape_at(self, node_index):
        return self._node_at(node_index, "output shape").shape

    def get_input_shape_at(self, node_index):
        t = self.get_input_at(node_index)
        return [i.shape for i in t] if isinstance(t, list) else t.shape

    @property
    def output(self):
        """The output of the layer's first call (tf.keras 2 and Keras 3;
        get_output_at(i) for a later call of a shared layer)."""
        if not self._inbound_nodes:
            raise AttributeError("Layer %s has no inbound nodes."
                                 % (self.name or self._auto_name))
        return self.get_output_at(0)

    @property
    def input(self):
        """The input of the layer's first call (get_input_at(i) for later
        calls)."""
        if not self._inbound_nodes:
            raise AttributeError("Layer %s is not connected, no input to return."
                                 % (self.name or self._auto_name))
        return self.get_input_at(0)

    @property
    def output_shape(self):
        """The output shape of every call; AttributeError where the calls of
        a shared layer differ in it, as Keras."""
        if not self._inbound_nodes:
            raise AttributeError("The layer \"%s\" has never been called and thus has "
                                 "no defined output shape." % (self.name or self._auto_name))
        shapes = {t.shape for t in self._inbound_nodes}
        if len(shapes) > 1:
            raise AttributeError(
                "The layer \"%s\" has multiple inbound nodes, with different output "
                "shapes. Hence the notion of \"output shape\" is ill-defined for the "
                "layer. Use `get_output_shape_at(node_index)` instead."
                % (self.name or self._auto_name))
        return self._inbound_nodes[0].shape

    def _keras2_node(self, srcs, t=None):
        """One inbound node (the call that made t) as Keras 2 writes it,
        from its sources [(layer name, node index)]: [[name, node, 0,
        kwargs], ...] (keras/engine/node.py Node.serialize)."""
        return [[s[0], s[1], s[2] if len(s) > 2 else 0, {}] for s in srcs]

    def _keras3_node(self, tensors, t=None):
        """Keras 3's {"args", "kwargs"}, from the serialized tensors."""
        return {"args": [tensors[0]] if len(tensors) == 1 else [tensors], "kwargs": {}}

    def _keras3_build(self, in_shapes):
        """Keras 3's build_config from the per-sample input shapes."""
        ins = [[None] + list(s) for s in in_shapes]
        return {"input_shape": ins[0] if len(ins) == 1 else ins}


class Layer(_Called):
    """Base class: a Keras class name plus its config."""

    keras_class = None
    _auto_name = None

    def __init__(self, name=None, input_shape=None, trainable=True,
                 input_dim=None, batch_input_shape=None, dtype=None, batch_size=None):
        if name is not None and (not isinstance(name, str) or not name):
            raise ValueError("layer name must be a non-empty string")
        # the layer's dtype policy: its own, else the global one now (as
        # Keras); float32 or mixed_bfloat16 (mixed_precision.Policy refuses
        # the rest)
        from . import mixed_precision as _mp
        dtype = _dtype_name(dtype)
        if isinstance(dtype, _mp.Policy):
            dtype = dtype.name
        self.dtype_policy = _mp.Policy(dtype if dtype is not None
                                       else _mp.global_policy())
        given = [v for v in (input_shape, input_dim, batch_input_shape)
                 if v is not None]
        if len(given) > 1:
            raise ValueError("give one of input_shape, input_dim and "
                             "batch_input_shape")
        if input_dim is not None:  # Keras 1's Dense(12, input_dim=8)
            input_shape = (input_dim,)
        if batch_input_shape is not None:
            input_shape = tuple(batch_input_shape)[1:]
            batch_size = tuple(batch_input_shape)[0] if batch_size is None else batch_size
        # a fixed batch size (Keras' batch_size / batch_input_shape[0]): a
        # stateful RNN's model needs one
        self.batch_size = None if batch_size is None else int(batch_size)
        self.name = name
        self.input_shape = _shape(input_shape)
        self.trainable = bool(trainable)
        # Keras' inbound nodes: one output tensor per call, in call order
        # (a shared layer has several; every call uses the one set of
        # weights)
        self._inbound_nodes = []

    def _config(self):
        return {}

    # -- shapes and weights (per sample, no batch dimension) --------------

    def compute_output_shape(self, in_shape):
        return list(in_shape)

    def weight_specs(self, in_shape):
        """[(suffix, shape, trainable)] in Keras' weight order."""
        return []

    def __call__(self, inputs):
        ins = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        if not ins or not all(isinstance(t, KerasTensor) for t in ins):
            raise TypeError("a layer is called on rtrain.Input tensors or "
                            "other layers' outputs")
        shapes = [list(t.shape[1:]) for t in ins]
        out = self._out_shape(shapes)
        return self._add_node(KerasTensor(out, self, ins, len(self._inbound_nodes)))

    def _out_shape(self, shapes):
        if len(shapes) != 1:
            raise ValueError("%s takes one input, got %d"
                             % (self.keras_class, len(shapes)))
        return self.compute_output_shape(shapes[0])

    @classmethod
    def from_config(cls, config):
        """The layer of a config: get_config()'s {"class_name", "config"}
        or the inner config dict (Keras' layer.from_config)."""
        from . import models
        if "class_name" in config and isinstance(config.get("config"), dict):
            if config["class_name"] != cls.keras_class:
                raise ValueError("%s.from_config got a %s config"
                                 % (cls.__name__, config["class_name"]))
            config = config["config"]
        return models._layer_from_config(cls.keras_class, config)

    def get_config(self, name=None):
        """{"class_name", "config"} as Keras serializes the layer (the
        name: the one given, else the layer's own)."""
        if name is None:
            name = self.name or self._auto_name
        pol = getattr(self, "dtype_policy", None)
        # Keras 2's Policy object for a mixed one, the plain name otherwise
        dtype = ({"class_name": "Policy", "config": {"name": pol.name}}
                 if pol is not None and pol.name != "float32" else "float32")
        cfg = {"name": name, "trainable": self.trainable, "dtype": dtype}
        if self.input_shape is not None:
            cfg["batch_input_shape"] = [getattr(self, "batch_size", None)] + list(self.input_shape)
        cfg.update(self._config())
        return {"class_name": self.keras_class, "config": cfg}

    def __repr__(self):
        args = ", ".join("%s=%r" % kv for kv in sorted(self._config().items()))
        return "%s(%s)" % (type(self).__name__, args)


class InputLayer(Layer):
    """The model input; Sequential([Input((4,)), ...]) equals input_shape=(4,)."""

    keras_class = "InputLayer"
    _auto_name = "input"

    def __init__(self, shape=None, name=None, input_shape=None, batch_size=None):
        shape = shape if shape is not None else input_shape
        if shape is None:
            raise ValueError("InputLayer needs a shape, e.g. Input((4,))")
        super().__init__(name=name, input_shape=shape, batch_size=batch_size)

    def _tensor(self):
        """Its one node's tensor (an InputLayer is never called)."""
        if not self._inbound_nodes:
            self._inbound_nodes.append(KerasTensor(self.input_shape, self, []))
        return self._inbound_nodes[0]

    def __call__(self, inputs):
        raise TypeError("an InputLayer is not called: use rtrain.Input(shape)")

    def get_config(self, name=None):
        name = name if name is not None else (self.name or "input_1")
        return {"class_name": "InputLayer", "config": {
            "batch_input_shape": [self.batch_size] + list(self.input_shape),
            "dtype": "float32", "sparse": False, "ragged": False,
            "name": name}}


def Input(shape=None, name=None, batch_size=None, dtype=None):
    """Keras' Input(shape=...): a symbolic tensor for the Functional API,
    also accepted as the first entry of a Sequential."""
    if dtype not in (None, "float32"):
        raise ValueError("only float32 inputs are supported")
    layer = InputLayer(shape, name=name, batch_size=batch_size)
    return layer._tensor()


class Dense(Layer):
    keras_class = "Dense"
    _auto_name = "dense"

    def __init__(self, units, activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 kernel_regularizer=None, bias_regularizer=None,
                 activity_regularizer=None, init=None, **kw):
        super().__init__(**kw)
        self.units = _pos_int(units, "Dense units")
        self.activation = _check_activation(activation)
        self.use_bias = bool(use_bias)
        if init is not None:  # Keras 1's Dense(..., init="uniform")
            kernel_initializer = init
        self.kernel_initializer = _initializer(kernel_initializer,
                                               "kernel_initializer")
        self.bias_initializer = _initializer(bias_initializer,
                                             "bias_initializer")
        self.regularizers = {
            "kernel_regularizer": _regularizer(kernel_regularizer,
                                               "kernel_regularizer"),
            "bias_regularizer": _regularizer(bias_regularizer,
                                             "bias_regularizer"),
            "activity_regularizer": _regularizer(activity_regularizer,
                                                 "activity_regularizer")}

    def _config(self):
        cfg = {"units": self.units, "activation": self.activation,
               "use_bias": self.use_bias,
               "kernel_initializer": self.kernel_initializer,
               "bias_initializer": self.bias_initializer}
        cfg.update(self.regularizers)
        cfg.update(kernel_constraint=None, bias_constraint=None)
        return cfg

    def compute_output_shape(self, in_shape):
        return list(in_shape[:-1]) + [self.units]

    def weight_specs(self, in_shape):
        w = [("kernel", [in_shape[-1], self.units], True)]
        if self.use_bias:
            w.append(("bias", [self.units], True))
        return w


class Activation(Layer):
    keras_class = "Activation"
    _auto_name = "activation"

    def __init__(self, activation, **kw):
        super().__init__(**kw)
        self.activation = _check_activation(activation)

    def _config(self):
        return {"activation": self.activation}


def ReLU(**kw):
    return Activation("relu", **kw)


def Softmax(**kw):
    return Activation("softmax", **kw)


class Dropout(Layer):
    keras_class = "Dropout"
    _auto_name = "dropout"

    def __init__(self, rate, seed=None, **kw):
        super().__init__(**kw)
        rate = float(rate)
        if not 0.0 <= rate < 1.0:
            raise ValueError("Dropout rate must be in [0, 1), got %r" % rate)
        self.rate = rate
        self.seed = seed

    def _config(self):
        return {"rate": self.rate, "noise_shape": None, "seed": self.seed}


class Flatten(Layer):
    keras_class = "Flatten"
    _auto_name = "flatten"

    def _config(self):
        return {"data_format": "channels_last"}

    def compute_output_shape(self, in_shape):
        return [int(_prod(_fixed(in_shape, "Flatten")))]


def _prod(v):
    n = 1
    for d in v:
        n *= d
    return n


class Reshape(Layer):
    keras_class = "Reshape"
    _auto_name = "reshape"

    def __init__(self, target_shape, **kw):
        super().__init__(**kw)
        ts = [int(d) for d in tuple(target_shape)]
        if not ts or any(d == 0 or d < -1 for d in ts) or ts.count(-1) > 1:
            raise ValueError("bad Reshape target_shape %r" % (target_shape,))
        self.target_shape = ts

    def _config(self):
        return {"target_shape": self.target_shape}

    def compute_output_shape(self, in_shape):
        n, ts = _prod(_fixed(in_shape, "Reshape")), list(self.target_shape)
        known = _prod(d for d in ts if d != -1)
        if -1 in ts:
            if n % known:
                raise ValueError("cannot Reshape %s into %s" % (in_shape, ts))
            ts[ts.index(-1)] = n // known
        if _prod(ts) != n:
            raise ValueError("cannot Reshape %s into %s" % (in_shape, ts))
        return ts


def _padding(p):
    if p not in ("valid", "same"):
        raise ValueError("padding must be 'valid' or 'same', got %r" % (p,))
    return p


def _conv_padding(p, causal=False):
    if p == "causal" and causal:
        return p
    return _padding(p)


def _conv_out(n, k, s, d, padding):
    if padding == "causal" and n is not None:
        return -(-n // s)
    return _conv_len(n, (k - 1) * d + 1, s, padding)


_CONV_NULLS = ("kernel_regularizer", "bias_regularizer", "activity_regularizer",
               "kernel_constraint", "bias_constraint")


class _Spatial(Layer):
    """Layers over (steps, channels) or (height, width, channels)."""

    _rank = 2

    def _check_rank(self, in_shape):
        if len(in_shape) != self._rank + 1:
            raise ValueError("%s wants (%s, channels) input, got %s"
                             % (self.keras_class,
                                "steps" if self._rank == 1 else "height, width",
                                in_shape))


class _Conv(_Spatial):
    """Keras' Conv base: rank 1 (Conv1D) or 2."""

    def __init__(self, filters, kernel_size, strides=1, padding="valid",
                 dilation_rate=1, activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 **kw):
        super().__init__(**kw)
        r, what = self._rank, self.keras_class
        self.filters = _pos_int(filters, "%s filters" % what)
        self.kernel_size = _ints(kernel_size, r, "kernel_size")
        self.strides = _ints(strides, r, "strides")
        self.padding = _conv_padding(padding, causal=r == 1)
        self.dilation_rate = _ints(dilation_rate, r, "dilation_rate")
        self.activation = _check_activation(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = _initializer(kernel_initializer,
                                               "kernel_initializer")
        self.bias_initializer = _initializer(bias_initializer,
                                             "bias_initializer")

    def _config(self):
        cfg = {"filters": self.filters, "kernel_size": self.kernel_size,
               "strides": self.strides, "padding": self.padding,
               "data_format": "channels_last",
               "dilation_rate": self.dilation_rate, "groups": 1,
               "activation": self.activation, "use_bias": self.use_bias,
               "kernel_initializer": self.kernel_initializer,
               "bias_initializer": self.bias_initializer}
        cfg.update((k, None) for k in _CONV_NULLS)
        return cfg

    def _spatial(self, in_shape):
        return [_conv_out(in_shape[i], self.kernel_size[i], self.strides[i],
                          self.dilation_rate[i], self.padding)
                for i in range(self._rank)]

    def compute_output_shape(self, in_shape):
        self._check_rank(in_shape)
        return self._spatial(in_shape) + [self.filters]

    def _kernel_shape(self, in_shape):
        return list(self.kernel_size) + [in_shape[-1], self.filters]

    def weight_specs(self, in_shape):
        w = [("kernel", self._kernel_shape(in_shape), True)]
        if self.use_bias:
            w.append(("bias", [self.filters], True))
        return w


class Conv2D(_Conv):
    keras_class = "Conv2D"
    _auto_name = "conv2d"

    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid",
                 dilation_rate=(1, 1), activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 **kw):
        super().__init__(filters, kernel_size, strides=strides, padding=padding,
                         dilation_rate=dilation_rate, activation=activation,
                         use_bias=use_bias, kernel_initializer=kernel_initializer,
                         bias_initializer=bias_initializer, **kw)


def _conv_len(n, k, s, padding):
    if n is None:  # a variable length stays variable
        return None
    if padding == "same":
        return -(-n // s)
    if n < k:
        raise ValueError("a window of %d does not fit an input of %d" % (k, n))
    return (n - k) // s + 1


class _Pool(_Spatial):
    """Max and average pooling, rank 1 or 2."""

    def __init__(self, pool_size, strides, padding, **kw):
        super().__init__(**kw)
        r = self._rank
        self.pool_size = _ints(pool_size, r, "pool_size")
        self.strides = (_ints(strides, r, "strides") if strides is not None
                        else list(self.pool_size))
        self.padding = _padding(padding)

    def _config(self):
        return {"pool_size": self.pool_size, "padding": self.padding,
                "strides": self.strides, "data_format": "channels_last"}

    def compute_output_shape(self, in_shape):
        self._check_rank(in_shape)
        return [_conv_len(in_shape[i], self.pool_size[i], self.strides[i],
                          self.padding) for i in range(self._rank)] + [in_shape[-1]]


class _Pool2D(_Pool):
    def __init__(self, pool_size=(2, 2), strides=None, padding="valid", **kw):
        super().__init__(pool_size, strides, padding, **kw)


class MaxPooling2D(_Pool2D):
    keras_class = "MaxPooling2D"
    _auto_name = "max_pooling2d"


class AveragePooling2D(_Pool2D):
    keras_class = "AveragePooling2D"
    _auto_name = "average_pooling2d"


class _GlobalPool(Layer):
    """Global pooling over every axis but the channels."""

    _rank = 2

    def _config(self):
        return {"data_format": "channels_last", "keepdims": False}

    def compute_output_shape(self, in_shape):
        if len(in_shape) != self._rank + 1:
            raise ValueError("%s wants rank %d input, got %s"
                             % (self.keras_class, self._rank + 1, in_shape))
        return [in_shape[-1]]


class GlobalAveragePooling2D(_GlobalPool):
    keras_class = "GlobalAveragePooling2D"
    _auto_name = "global_average_pooling2d"


class BatchNormalization(Layer):
    keras_class = "BatchNormalization"
    _auto_name = "batch_normalization"

    def __init__(self, momentum=0.99, epsilon=1e-3, **kw):
        super().__init__(**kw)
        self.momentum = float(momentum)
        self.epsilon = float(epsilon)
        if not 0.0 <= self.momentum < 1.0 or self.epsilon <= 0.0:
            raise ValueError("BatchNormalization needs 0 <= momentum < 1 and "
                             "epsilon > 0")

    def _config(self):
        return {"axis": [-1], "momentum": self.momentum,
                "epsilon": self.epsilon, "center": True, "scale": True,
                "beta_initializer": {"class_name": "Zeros", "config": {}},
                "gamma_initializer": {"class_name": "Ones", "config": {}},
                "moving_mean_initializer": {"class_name": "Zeros",
                                            "config": {}},
                "moving_variance_initializer": {"class_name": "Ones",
                                                "config": {}}}

    def weight_specs(self, in_shape):
        c = [in_shape[-1]]
        return [("gamma", c, True), ("beta", c, True),
                ("moving_mean", c, False), ("moving_variance", c, False)]


class Concatenate(Layer):
    """Joins its inputs along axis (Functional models)."""

    keras_class = "Concatenate"
    _auto_name = "concatenate"

    def __init__(self, axis=-1, **kw):
        super().__init__(**kw)
        self.axis = int(axis)

    def _config(self):
        return {"axis": self.axis}

    def _out_shape(self, shapes):
        if len(shapes) < 2:
            raise ValueError("Concatenate takes at least two inputs")
        rank = len(shapes[0])
        if any(len(s) != rank for s in shapes):
            raise ValueError("Concatenate inputs have different ranks")
        ax = self.axis if self.axis < 0 else self.axis - 1
        ax %= rank
        out = list(shapes[0])
        for s in shapes[1:]:
            for i in range(rank):
                if i != ax and s[i] != out[i]:
                    raise ValueError("Concatenate inputs differ in dim %d"
                                     % (i + 1))
            out[ax] += s[ax]
        return out


# Keras' aliases.
MaxPool2D = MaxPooling2D
AvgPool2D = AveragePooling2D
__all__ += ["MaxPool2D", "AvgPool2D"]


# ---------------------------------------------------------------- recurrent
# Keras 2's configs (keras/layers/core/embedding.py, keras/layers/rnn/*.py):
# the RNN base writes return_sequences, return_state, go_backwards,
# stateful, unroll and time_major; each layer its cell's settings. Weights
# are named and laid out as the daemon's importer (docs/recurrent.md):
# kernel, recurrent_kernel, bias with Keras' gate order.

_RNN_ACTIVATIONS = ("tanh", "sigmoid", "relu", "linear", "hard_sigmoid")


def _rnn_activation(a, what):
    if a is None:
        return "linear"
    if not isinstance(a, str) or a not in _RNN_ACTIVATIONS:
        raise ValueError("%s must be one of %s, got %r"
                         % (what, ", ".join(_RNN_ACTIVATIONS), a))
    return a


# the constraints the daemon's importer reads (server/import/
# import_keras_cfg.c parse_constraint), by the names Keras 2 and 3 write
_CONSTRAINTS = ("MaxNorm", "max_norm", "NonNeg", "non_neg", "NonNegativity",
                "UnitNorm", "unit_norm", "MinMaxNorm", "min_max_norm")


def _constraint(v, what):
    """a weight constraint: None, a name ("max_norm") or a config dict
    (Keras 2's {"class_name", "config"}, Keras 3's with module and
    registered_name), kept as given for the daemon's importer"""
    if v is None:
        return None
    name = v.get("class_name") if isinstance(v, dict) else v
    if not isinstance(name, str) or name not in _CONSTRAINTS:
        raise ValueError("unknown %s %r (known: MaxNorm, NonNeg, UnitNorm, MinMaxNorm)"
                         % (what, name if isinstance(v, dict) else v))
    return dict(v) if isinstance(v, dict) else v


def _call_recurrent(layer, inputs, initial_state, mask=None):
    """An RNN or Bidirectional call: inputs x or [x, *states] (Keras 2's
    folded form), initial_state a list of tensors, mask a (timesteps,)
    step mask tensor (tf.keras' TFOpLambda math.not_equal: the importer
    reads it, docs/keras-import.md); returns the output, or [output,
    *states] with return_state."""
    ins = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    if initial_state is not None:
        if len(ins) != 1:
            raise ValueError("%s: give the initial states once, in initial_state or "
                             "after the input, not both" % layer.keras_class)
        ins += list(initial_state) if isinstance(initial_state, (list, tuple)) \
            else [initial_state]
    if not ins or not all(isinstance(t, KerasTensor) for t in ins):
        raise TypeError("a layer is called on rtrain.Input tensors or "
                        "other layers' outputs")
    if mask is not None:
        if not isinstance(mask, KerasTensor) or \
                not isinstance(mask.layer, TFOpLambda) or mask.layer.function != "math.not_equal":
            raise ValueError("%s mask: a tensor of tf.math.not_equal (TFOpLambda) is "
                             "supported; Embedding(mask_zero=True) masks by itself"
                             % layer.keras_class)
        x = list(ins[0].shape[1:])
        if list(mask.shape[1:]) != x[:1]:
            raise ValueError("%s mask has shape %s; the input %s needs (None, %s)"
                             % (layer.keras_class, tuple(mask.shape), tuple(ins[0].shape),
                                x[0] if x else "?"))
    out = layer._out_shape([list(t.shape[1:]) for t in ins])
    n = len(layer._inbound_nodes)
    t = KerasTensor(out, layer, ins + ([mask] if mask is not None else []), n)
    t._has_mask = mask is not None
    outs = [t] + [KerasTensor(s, layer, ins, n, tensor_index=k + 1, primary=t)
                  for k, s in enumerate(layer._state_shapes())] \
        if layer._returns_state() else [t]
    layer._add_node(t)
    if len(outs) > 1:
        t._outputs = outs
    return outs if len(outs) > 1 else t


def _recurrent_out_shape(layer, shapes):
    """the output shape of a call on [x, *initial states], the states
    checked against the layer's"""
    want = layer._state_shapes()
    states = shapes[1:]
    if states:
        if len(states) != len(want):
            raise ValueError("%s takes %d initial state tensors, got %d"
                             % (layer.keras_class, len(want), len(states)))
        for k, (got, w) in enumerate(zip(states, want)):
            if list(got) != list(w):
                raise ValueError("%s initial state %d has shape %s; the layer's states "
                                 "have %s" % (layer.keras_class, k, (None,) + tuple(got),
                                              (None,) + tuple(w)))
    return layer.compute_output_shape(shapes[0])


def _rate(v, what):
    v = float(v)
    if not 0.0 <= v <= 1.0:
        raise ValueError("%s must be in [0, 1], got %r" % (what, v))
    return v


class Embedding(Layer):
    """Keras' Embedding: integer indices in [0, input_dim) (sent as float
    features) to vectors of output_dim. The sequence length comes from
    input_length or input_shape (the daemon's programs have fixed shapes)."""

    keras_class = "Embedding"
    _auto_name = "embedding"

    def __init__(self, input_dim, output_dim, embeddings_initializer="uniform",
                 embeddings_regularizer=None, activity_regularizer=None,
                 embeddings_constraint=None, mask_zero=False,
                 input_length=None, **kw):
        if input_length is not None and not any(
                k in kw for k in ("input_shape", "batch_input_shape",
                                  "input_dim")):
            kw["input_shape"] = (input_length,)
        super().__init__(**kw)
        self.input_dim = _pos_int(input_dim, "Embedding input_dim")
        self.output_dim = _pos_int(output_dim, "Embedding output_dim")
        self.embeddings_initializer = _initializer(embeddings_initializer,
                                                   "embeddings_initializer")
        self.embeddings_regularizer = _regularizer(embeddings_regularizer,
                                                   "embeddings_regularizer")
        self.activity_regularizer = _regularizer(activity_regularizer,
                                                 "activity_regularizer")
        # applied after each update by the daemon (import_keras_cfg.c)
        self.embeddings_constraint = _constraint(embeddings_constraint,
                                                 "embeddings_constraint")
        self.mask_zero = bool(mask_zero)
        self.input_length = (None if input_length is None else
                             _pos_int(input_length, "input_length"))

    def _config(self):
        return {"input_dim": self.input_dim, "output_dim": self.output_dim,
                "embeddings_initializer": self.embeddings_initializer,
                "embeddings_regularizer": self.embeddings_regularizer,
                "activity_regularizer": self.activity_regularizer,
                "embeddings_constraint": self.embeddings_constraint,
                "mask_zero": self.mask_zero,
                "input_length": self.input_length}

    def compute_output_shape(self, in_shape):
        if self.input_length is not None and list(in_shape) != [
                self.input_length]:
            raise ValueError("Embedding input_length is %d but its input "
                             "has shape %s" % (self.input_length, in_shape))
        return list(in_shape) + [self.output_dim]

    def weight_specs(self, in_shape):
        return [("embeddings", [self.input_dim, self.output_dim], True)]


class _RNN(Layer):
    """The RNN base: one cell over the time axis of (timesteps, features)."""

    _gates = 1
    _kw_mask = True  # its call's keyword mask may be a tensor

    def __init__(self, units, activation="tanh", use_bias=True,
                 kernel_initializer="glorot_uniform",
                 recurrent_initializer="orthogonal", bias_initializer="zeros",
                 kernel_regularizer=None, recurrent_regularizer=None,
                 bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, recurrent_constraint=None,
                 bias_constraint=None, dropout=0.0, recurrent_dropout=0.0,
                 return_sequences=False, return_state=False,
                 go_backwards=False, stateful=False, unroll=False,
                 time_major=False, **kw):
        super().__init__(**kw)
        self.units = _pos_int(units, "%s units" % self.keras_class)
        self.activation = _rnn_activation(activation, "activation")
        self.use_bias = bool(use_bias)
        self.inits = {
            "kernel_initializer": _initializer(kernel_initializer,
                                               "kernel_initializer"),
            "recurrent_initializer": _initializer(recurrent_initializer,
                                                  "recurrent_initializer"),
            "bias_initializer": _initializer(bias_initializer,
                                             "bias_initializer")}
        self.regularizers = {
            k: _regularizer(v, k) for k, v in (
                ("kernel_regularizer", kernel_regularizer),
                ("recurrent_regularizer", recurrent_regularizer),
                ("bias_regularizer", bias_regularizer),
                ("activity_regularizer", activity_regularizer))}
        self.constraints = {
            k: _constraint(v, k) for k, v in (
                ("kernel_constraint", kernel_constraint),
                ("recurrent_constraint", recurrent_constraint),
                ("bias_constraint", bias_constraint))}
        self.dropout = _rate(dropout, "dropout")
        self.recurrent_dropout = _rate(recurrent_dropout, "recurrent_dropout")
        self.flags = {"return_sequences": bool(return_sequences),
                      "return_state": bool(return_state),
                      "go_backwards": bool(go_backwards),
                      "stateful": bool(stateful), "unroll": bool(unroll),
                      "time_major": bool(time_major)}

    # -- return_state and initial_state (Keras' RNN.__call__): Keras 2
    # folds initial_state into the call's inputs, [x, *states], and a
    # return_state call has the outputs [output, *states]

    def _n_states(self):
        """the states one call carries: h (and c for an LSTM)"""
        return 2 if self._gates == 4 else 1

    def _state_shapes(self):
        return [[self.units]] * self._n_states()

    def _returns_state(self):
        return self.flags["return_state"]

    def __call__(self, inputs, initial_state=None, mask=None):
        return _call_recurrent(self, inputs, initial_state, mask)

    def _out_shape(self, shapes):
        return _recurrent_out_shape(self, shapes)

    def _keras2_node(self, srcs, t=None):
        # a mask is the first entry's keyword (keras/engine/node.py
        # serialize), its tensor the call's last input
        if t is None or not getattr(t, "_has_mask", False):
            return super()._keras2_node(srcs, t)
        m = srcs[-1]
        nodes = super()._keras2_node(srcs[:-1], t)
        nodes[0][3] = {"mask": [m[0], m[1], m[2] if len(m) > 2 else 0]}
        return nodes

    def _keras3_node(self, tensors, t=None):
        if t is not None and getattr(t, "_has_mask", False):
            raise ValueError("a mask tensor is tf.keras 2's (TFOpLambda): save the model as "
                             "JSON or h5")
        return super()._keras3_node(tensors, t)

    def _cell_config(self):
        return {}

    def reset_states(self):
        """Keras' layer.reset_states(): this stateful layer's carried
        states back to zeros before its model's next step."""
        if not self.flags["stateful"]:
            raise AttributeError("Layer must be stateful.")
        ref = getattr(self, "_model_ref", None)
        m = ref() if ref is not None else None
        if m is not None and m.compiled is not None:
            m.compiled.reset_states(self.name)

    def _config(self):
        cfg = dict(self.flags)
        cfg.update(units=self.units, activation=self.activation)
        cfg.update(self._gate_config())
        cfg["use_bias"] = self.use_bias
        cfg.update(self.inits)
        cfg.update(self._cell_config())
        cfg.update(kernel_regularizer=self.regularizers["kernel_regularizer"],
                   recurrent_regularizer=self.regularizers[
                       "recurrent_regularizer"],
                   bias_regularizer=self.regularizers["bias_regularizer"],
                   activity_regularizer=self.regularizers[
                       "activity_regularizer"],
                   kernel_constraint=self.constraints["kernel_constraint"],
                   recurrent_constraint=self.constraints["recurrent_constraint"],
                   bias_constraint=self.constraints["bias_constraint"],
                   dropout=self.dropout,
                   recurrent_dropout=self.recurrent_dropout)
        cfg.update(self._tail_config())
        return cfg

    def _gate_config(self):
        return {}

    def _tail_config(self):
        return {}

    def compute_output_shape(self, in_shape):
        if len(in_shape) != 2:
            raise ValueError("%s wants (timesteps, features) input, got %s"
                             % (self.keras_class, in_shape))
        if self.flags["return_sequences"]:
            return [in_shape[0], self.units]
        return [self.units]

    def _bias_shape(self):
        return [self._gates * self.units]

    def weight_specs(self, in_shape):
        g = self._gates * self.units
        w = [("kernel", [in_shape[-1], g], True),
             ("recurrent_kernel", [self.units, g], True)]
        if self.use_bias:
            w.append(("bias", self._bias_shape(), True))
        return w


class SimpleRNN(_RNN):
    keras_class = "SimpleRNN"
    _auto_name = "simple_rnn"


class _Gated(_RNN):
    """LSTM and GRU: a recurrent activation for the gates, and Keras'
    implementation setting."""

    def __init__(self, units, recurrent_activation, implementation, **kw):
        super().__init__(units, **kw)
        self.recurrent_activation = _rnn_activation(recurrent_activation,
                                                    "recurrent_activation")
        self.implementation = int(implementation)

    def _gate_config(self):
        return {"recurrent_activation": self.recurrent_activation}


class LSTM(_Gated):
    keras_class = "LSTM"
    _auto_name = "lstm"
    _gates = 4

    def __init__(self, units, recurrent_activation="sigmoid",
                 unit_forget_bias=True, implementation=2, **kw):
        super().__init__(units, recurrent_activation, implementation, **kw)
        self.unit_forget_bias = bool(unit_forget_bias)

    def _cell_config(self):
        return {"unit_forget_bias": self.unit_forget_bias}

    def _tail_config(self):
        return {"implementation": self.implementation}


class GRU(_Gated):
    keras_class = "GRU"
    _auto_name = "gru"
    _gates = 3

    def __init__(self, units, recurrent_activation="sigmoid",
                 implementation=2, reset_after=True, **kw):
        super().__init__(units, recurrent_activation, implementation, **kw)
        self.reset_after = bool(reset_after)

    def _tail_config(self):
        return {"implementation": self.implementation,
                "reset_after": self.reset_after}

    def _bias_shape(self):
        g = 3 * self.units
        return [2, g] if self.reset_after else [g]


# the LSTM/GRU settings Keras 2's cuDNN layers do not have (their
# from_config refuses them as unknown keywords; server/import/
# import_keras_rnn.c k_cudnn_cfg refuses the same)
_NOT_CUDNN = ("activation", "recurrent_activation", "use_bias", "dropout",
              "recurrent_dropout", "reset_after", "time_major",
              "zero_output_for_mask", "unroll", "implementation")


def _cudnn_kw(layer_cls, kw):
    bad = [k for k in _NOT_CUDNN if k in kw]
    if bad:
        raise ValueError("%s has no setting %r (cuDNN's layer: tanh, sigmoid, two "
                         "biases, no dropout)" % (layer_cls, bad[0]))
    return kw


class _CuDNN:
    """Keras 2's CuDNNLSTM and CuDNNGRU (keras/layers/cudnn_recurrent.py):
    the LSTM/GRU with tanh and sigmoid, no dropout and no mask, and one flat
    bias of 2 * gates * units (the input biases, then the recurrent ones;
    an LSTM's unit_forget_bias sets the forget gate of the recurrent half).
    The daemon's importer reads them (server/import/import_keras_rnn.c)."""

    def _config(self):
        cfg = super()._config()
        for k in _NOT_CUDNN:
            cfg.pop(k, None)
        return cfg

    def _bias_shape(self):
        return [2 * self._gates * self.units]


class CuDNNLSTM(_CuDNN, LSTM):
    keras_class = "CuDNNLSTM"
    _auto_name = "cu_dnnlstm"

    def __init__(self, units, kernel_initializer="glorot_uniform",
                 recurrent_initializer="orthogonal", bias_initializer="zeros",
                 unit_forget_bias=True, **kw):
        super().__init__(units, kernel_initializer=kernel_initializer,
                         recurrent_initializer=recurrent_initializer,
                         bias_initializer=bias_initializer,
                         unit_forget_bias=unit_forget_bias,
                         **_cudnn_kw("CuDNNLSTM", kw))


class CuDNNGRU(_CuDNN, GRU):
    keras_class = "CuDNNGRU"
    _auto_name = "cu_dnngru"

    def __init__(self, units, kernel_initializer="glorot_uniform",
                 recurrent_initializer="orthogonal", bias_initializer="zeros",
                 unit_forget_bias=None, **kw):
        if unit_forget_bias is not None:  # an LSTM's only
            raise ValueError("CuDNNGRU has no setting 'unit_forget_bias'")
        super().__init__(units, kernel_initializer=kernel_initializer,
                         recurrent_initializer=recurrent_initializer,
                         bias_initializer=bias_initializer,
                         **_cudnn_kw("CuDNNGRU", kw))


# -- TensorFlow operations tf.keras 2 recorded as layers. The daemon's
# importer reads them (server/import/import_keras_tfop.c: the semantics and
# every check); here they carry their config through unchanged and give
# their output shapes to the Functional graph.

# TFOpLambda functions (tf.keras 2.4+): element-wise, TensorFlow's
# broadcasting
_TF_FUNCTIONS = ("math.add", "__operators__.add", "math.subtract", "__operators__.sub",
                 "math.multiply", "__operators__.mul", "math.truediv",
                 "__operators__.truediv", "math.divide", "math.maximum", "math.minimum")
# math.not_equal(x, number) on a (timesteps,) value: an RNN's step mask
_TF_MASK = "math.not_equal"
# TensorFlowOpLayer ops (tf.keras 2.2-2.3) by kind
_TF_BINARY = ("Add", "AddV2", "Sub", "Mul", "RealDiv", "Div", "Maximum", "Minimum")
_TF_UNARY = ("Softmax", "Sigmoid", "Relu", "Relu6", "Tanh", "Elu", "Selu", "Softplus",
             "Softsign", "Exp", "Identity", "LeakyRelu", "Square", "Sqrt", "Rsqrt", "Neg",
             "Abs", "Log")
_TF_REDUCE = ("Mean", "Sum", "Max", "Min", "Prod")
_TF_OTHER = _TF_REDUCE + ("Reshape", "ConcatV2")


def _const_dims(v, what):
    """the shape of a number or a nested list of numbers"""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return []
    if not isinstance(v, list) or not v:
        raise ValueError("%s: a constant operand must be a number or a nested list" % what)
    inner = [_const_dims(e, what) for e in v]
    if any(d != inner[0] for d in inner):
        raise ValueError("%s: a constant operand must be a number or a nested list" % what)
    return [len(v)] + inner[0]


def _tf_broadcast(a, b, what):
    """TensorFlow's broadcast of per-sample dims a and b, right-aligned"""
    n = max(len(a), len(b))
    a, b = [1] * (n - len(a)) + list(a), [1] * (n - len(b)) + list(b)
    if any(x != y and 1 not in (x, y) for x, y in zip(a, b)):
        raise ValueError("%s: shapes %s and %s do not broadcast" % (what, tuple(a), tuple(b)))
    return [y if x == 1 else x for x, y in zip(a, b)]


def _tf_operand(v, rank, what):
    """a constant's per-sample dims beside a value of per-sample rank: its
    leading 1s beyond that rank meet the batch"""
    d = _const_dims(v, what)
    while len(d) > rank and d[0] == 1:
        d = d[1:]
    if len(d) > rank:
        raise ValueError("%s: a constant of rank %d does not broadcast over a value of "
                         "rank %d" % (what, len(d), rank + 1))
    return d or [1]


def _tf_ints(v, what):
    vals = v if isinstance(v, list) else [v]
    if not all(isinstance(e, (int, float)) and not isinstance(e, bool) and e == int(e)
               for e in vals):
        raise ValueError("%s needs constant whole numbers, got %r" % (what, v))
    return [int(e) for e in vals]


class TFOpLambda(Layer):
    """tf.keras 2's TFOpLambda (keras/layers/core/tf_op_layer.py): a
    TensorFlow function called on Keras tensors, config.function its name
    under tf. Read here: the element-wise functions of two tensors or a
    tensor and a constant on either side (1 - x: a constant first
    argument, which Keras writes as ["_CONSTANT_VALUE", -1, value,
    kwargs]), and math.not_equal(x, number) on a (timesteps,) value as a
    recurrent layer's mask (the importer reads it as Embedding(mask_zero)'s
    mask, docs/keras-import.md)."""

    keras_class = "TFOpLambda"
    _auto_name = "tf_op_lambda"
    _kw_tensors = True  # its call's keyword arguments may be tensors

    def __init__(self, function=None, **kw):
        super().__init__(**kw)
        if function not in _TF_FUNCTIONS + (_TF_MASK,):
            raise ValueError("TFOpLambda '%s' (a TensorFlow function recorded by tf.keras) "
                             "is not supported: element-wise %s, and %s as a recurrent "
                             "layer's mask, are" % (function, ", ".join(_TF_FUNCTIONS), _TF_MASK))
        self.function = function

    def _config(self):
        return {"function": self.function}

    def __call__(self, x=None, y=None, name=None, **kw):
        if kw:
            raise ValueError("TFOpLambda %s argument '%s' is not supported"
                             % (self.function, next(iter(kw))))
        args = (("x", x), ("y", y))
        ins = [v for _, v in args if isinstance(v, KerasTensor)]
        if not ins:
            raise TypeError("TFOpLambda %s is called on a tensor" % self.function)
        if len(ins) == 1 and all(v is None for _, v in args if not isinstance(v, KerasTensor)):
            raise ValueError("TFOpLambda %s needs two operands" % self.function)
        if self.function == _TF_MASK and (
                not isinstance(x, KerasTensor) or isinstance(y, KerasTensor) or
                not isinstance(y, (int, float)) or isinstance(y, bool) or
                len(list(x.shape[1:])) != 1):
            raise ValueError("TFOpLambda math.not_equal(x, y) is read as a step mask: x a "
                             "(timesteps,) tensor and y a number")
        shapes = [list(v.shape[1:]) if isinstance(v, KerasTensor) else None for _, v in args]
        rank = len(list(ins[0].shape[1:]))
        dims = [s if s is not None else _tf_operand(v, rank, self.function)
                for s, (_, v) in zip(shapes, args)]
        out = _tf_broadcast(dims[0], dims[1], self.function)
        t = KerasTensor(out, self, ins, len(self._inbound_nodes))
        # the call's constants, as Keras keeps them
        t._consts = {k: v for k, v in args if not isinstance(v, KerasTensor)}
        t._op_name = name
        return self._add_node(t)

    def _keras2_node(self, srcs, t=None):
        # keras/engine/node.py serialize: the one first argument is the
        # node's entry itself (a constant one ["_CONSTANT_VALUE", -1,
        # value]), y a keyword
        refs = [[s[0], s[1], s[2] if len(s) > 2 else 0] for s in srcs]
        first = ["_CONSTANT_VALUE", -1, t._consts["x"]] if "x" in t._consts else refs.pop(0)
        kw = {"y": t._consts["y"] if "y" in t._consts else refs.pop(0), "name": t._op_name}
        return first + [kw]

    def _keras3_node(self, tensors, t=None):
        raise ValueError("TFOpLambda is tf.keras 2's layer and Keras 3 has none: save the "
                         "model as JSON or h5")


class TensorFlowOpLayer(Layer):
    """TF 2.2-2.3's TensorFlowOpLayer (tensorflow/python/keras/engine/
    base_layer.py): one TensorFlow op, config.node_def (op, input, attr)
    and config.constants ({"<input index>": value}; the layer's tensors
    fill the other inputs in order). Read here: element-wise %s; unary %s;
    and %s (constant reduction_indices, not the batch, attr keep_dims),
    Reshape (a constant shape keeping the batch) and ConcatV2 (a constant
    axis last).
    """ % (", ".join(_TF_BINARY), ", ".join(_TF_UNARY), ", ".join(_TF_REDUCE))

    keras_class = "TensorFlowOpLayer"
    _auto_name = "tf_op_layer"

    def __init__(self, node_def=None, constants=None, **kw):
        super().__init__(**kw)
        op = node_def.get("op") if isinstance(node_def, dict) else None
        if not isinstance(op, str):
            raise ValueError("TensorFlowOpLayer needs node_def.op")
        if op not in _TF_BINARY + _TF_UNARY + _TF_OTHER:
            raise ValueError("TensorFlowOpLayer op '%s' (a TensorFlow operation recorded by "
                             "tf.keras 2.2-2.3) is not supported: %s are"
                             % (op, ", ".join(_TF_BINARY + _TF_UNARY + _TF_OTHER)))
        self.node_def = node_def
        self.constants = {str(k): v for k, v in (constants or {}).items()}

    def _config(self):
        return {"node_def": self.node_def, "constants": self.constants}

    def _out_shape(self, shapes):
        op = self.node_def["op"]
        ins = self.node_def.get("input")
        n = len(ins) if isinstance(ins, list) else len(shapes) + len(self.constants)
        if n != len(shapes) + len(self.constants):
            raise ValueError("TensorFlowOpLayer %s: node_def has %d inputs but the layer has "
                             "%d tensors and %d constants"
                             % (op, n, len(shapes), len(self.constants)))
        # the op's operands in order: a tensor's dims, or ("c", value)
        it = iter(shapes)
        ops = [("c", self.constants[str(i)]) if str(i) in self.constants else next(it)
               for i in range(n)]
        if not shapes:
            raise ValueError("TensorFlowOpLayer %s is called on a tensor" % op)
        x = shapes[0]
        if op in _TF_UNARY:
            return list(x)
        if op in _TF_BINARY:
            if n != 2:
                raise ValueError("TensorFlowOpLayer %s takes two inputs" % op)
            a, b = (_tf_operand(o[1], len(x), op) if isinstance(o, tuple) else o for o in ops)
            return _tf_broadcast(a, b, op)
        if op == "ConcatV2":
            ax = _tf_ints(ops[-1][1], "ConcatV2 axis") if isinstance(ops[-1], tuple) else None
            if ax is None or len(ax) != 1 or any(isinstance(o, tuple) for o in ops[:-1]):
                raise ValueError("TensorFlowOpLayer ConcatV2 takes the layer's tensors and a "
                                 "constant axis last")
            a = ax[0] + len(x) + 1 if ax[0] < 0 else ax[0]
            if not 1 <= a <= len(x):
                raise ValueError("TensorFlowOpLayer ConcatV2: axis %d is not a per-sample "
                                 "axis of %s" % (ax[0], tuple(x)))
            out = list(x)
            out[a - 1] = sum(s[a - 1] for s in shapes)
            return out
        if n != 2 or not isinstance(ops[1], tuple):
            raise ValueError("TensorFlowOpLayer %s takes one tensor and a constant" % op)
        if op == "Reshape":
            t = _tf_ints(ops[1][1], "Reshape shape")
            if t[0] != -1:
                raise ValueError("TensorFlowOpLayer Reshape: shape[0] is %d; only -1 (the "
                                 "batch kept) is supported" % t[0])
            if None not in x and _math.prod(t[1:]) != _math.prod(x):
                raise ValueError("TensorFlowOpLayer Reshape: the shape holds %d values per "
                                 "sample but the input has %d (the batch dim must be kept)"
                                 % (_math.prod(t[1:]), _math.prod(x)))
            return t[1:] or [1]
        r = len(x) + 1
        red = {a + r if a < 0 else a for a in _tf_ints(ops[1][1], op + " reduction_indices")}
        if not red <= set(range(1, r)):
            raise ValueError("TensorFlowOpLayer %s: reduction_indices %r must be per-sample "
                             "axes of a rank-%d value" % (op, ops[1][1], r))
        keep = bool(((self.node_def.get("attr") or {}).get("keep_dims") or {}).get("b"))
        out = [1 if i + 1 in red else d for i, d in enumerate(x) if keep or i + 1 not in red]
        return out or [1]


_MERGE_MODES = ("concat", "sum", "mul", "ave")


class Bidirectional(Layer):
    """Keras' Bidirectional(layer, merge_mode="concat"): the layer forward
    and a copy going backwards, merged. Weights: forward_<inner>/... then
    backward_<inner>/..., as Keras orders them."""

    keras_class = "Bidirectional"
    _auto_name = "bidirectional"

    def __init__(self, layer, merge_mode="concat", backward_layer=None, **kw):
        super().__init__(**kw)
        if not isinstance(layer, _RNN):
            raise TypeError("Bidirectional wraps a SimpleRNN, LSTM or GRU")
        if backward_layer is not None:
            # Keras 3 writes both halves; the backward one goes backwards
            # and is of the forward one's kind (keras/src/layers/rnn/
            # bidirectional.py checks the same)
            if not isinstance(backward_layer, _RNN) or \
                    backward_layer.keras_class != layer.keras_class:
                raise ValueError("Bidirectional backward_layer must be a %s like layer, "
                                 "got %r" % (layer.keras_class, backward_layer))
            for f in ("return_sequences", "return_state"):
                if backward_layer.flags[f] != layer.flags[f]:
                    raise ValueError("Bidirectional backward_layer must have the same %s "
                                     "as layer" % f)
            if backward_layer.flags["go_backwards"] == layer.flags["go_backwards"]:
                raise ValueError("Bidirectional backward_layer must go the other way "
                                 "(go_backwards=%s)" % (not layer.flags["go_backwards"]))
        if merge_mode not in _MERGE_MODES:
            raise ValueError("merge_mode must be one of %s, got %r"
                             % (", ".join(_MERGE_MODES), merge_mode))
        self.layer = layer
        self.backward_layer = backward_layer
        self.merge_mode = merge_mode

    def _inner_name(self):
        return self.layer.name or self.layer._auto_name

    def _config(self):
        inner = self.layer.get_config(self._inner_name())
        cfg = {"layer": inner, "merge_mode": self.merge_mode}
        if self.backward_layer is not None:
            b = self.backward_layer
            cfg["backward_layer"] = b.get_config(b.name or "backward_" + self._inner_name())
        return cfg

    # the states: the forward half's, then the backward half's
    def _state_shapes(self):
        return self.layer._state_shapes() * 2

    def _returns_state(self):
        return self.layer.flags["return_state"]

    def __call__(self, inputs, initial_state=None):
        return _call_recurrent(self, inputs, initial_state)

    def _out_shape(self, shapes):
        return _recurrent_out_shape(self, shapes)

    def compute_output_shape(self, in_shape):
        out = self.layer.compute_output_shape(in_shape)
        if self.merge_mode == "concat":
            out = list(out[:-1]) + [2 * out[-1]]
        return out

    def weight_specs(self, in_shape):
        # the halves' names as the daemon's importer gives them
        # (import_keras_rnn.c rt_keras_bidirectional): forward_<x> with x
        # the layer's name less a "forward_", and the backward layer's own
        # name where it starts with "backward_", else backward_<x>
        inner = self._inner_name()
        base = inner[8:] if inner.startswith("forward_") else inner
        back = self.backward_layer
        bname = back.name if back is not None and back.name and \
            back.name.startswith("backward_") else "backward_" + base
        bws = (back or self.layer).weight_specs(in_shape)
        return ([("forward_%s/%s" % (base, n), sh, tr)
                 for n, sh, tr in self.layer.weight_specs(in_shape)] +
                [("%s/%s" % (bname, n), sh, tr) for n, sh, tr in bws])


# ------------------------------------------------- the importer's other layers
# Keras 2's configs for the remaining layers the daemon imports
# (keras/layers/convolutional/*.py, pooling/*.py, reshaping/*.py,
# merging/*.py, activation/*.py, normalization/layer_normalization.py,
# regularization/*.py, core/masking.py). Weight names and shapes are the
# importer's (server/import/import_keras_layers.c), which are Keras'.

def _nonneg_pairs(v, n, what):
    """n (before, after) pairs of ints >= 0 from an int, a pair (1-D) or
    n pairs (Keras' ZeroPadding/Cropping argument forms)."""
    if isinstance(v, int) and not isinstance(v, bool):
        v = [(v, v)] * n
    else:
        v = list(v)
        if n == 1 and len(v) == 2 and all(isinstance(e, int) for e in v):
            v = [tuple(v)]
        elif n > 1 and len(v) == n and all(isinstance(e, int) for e in v):
            v = [(e, e) for e in v]
    out = []
    for p in v:
        p = tuple(p)
        if len(p) != 2 or any(isinstance(e, bool) or not isinstance(e, int) or e < 0
                              for e in p):
            raise ValueError("%s wants ints >= 0, got %r" % (what, v))
        out.append(list(p))
    if len(out) != n:
        raise ValueError("%s wants %d pairs, got %r" % (what, n, v))
    return out


def _grow(n, by):
    """a dim plus by; a variable dim (None) stays variable"""
    return None if n is None else n + by


class Conv1D(_Conv):
    keras_class = "Conv1D"
    _auto_name = "conv1d"
    _rank = 1


class Conv2DTranspose(_Conv):
    """Keras' Conv2DTranspose (output_padding None): out = in * stride,
    plus max(kernel - stride, 0) with 'valid'."""

    keras_class = "Conv2DTranspose"
    _auto_name = "conv2d_transpose"

    def _config(self):
        cfg = super()._config()
        cfg["output_padding"] = None
        return cfg

    def compute_output_shape(self, in_shape):
        self._check_rank(in_shape)
        out = []
        for i in range(2):
            k = (self.kernel_size[i] - 1) * self.dilation_rate[i] + 1
            n = in_shape[i] * self.strides[i]
            out.append(n + max(k - self.strides[i], 0) if self.padding == "valid" else n)
        return out + [self.filters]

    def _kernel_shape(self, in_shape):
        return list(self.kernel_size) + [self.filters, in_shape[-1]]


class DepthwiseConv2D(_Conv):
    """Keras' DepthwiseConv2D: depth_multiplier filters per input channel."""

    keras_class = "DepthwiseConv2D"
    _auto_name = "depthwise_conv2d"

    def __init__(self, kernel_size, strides=(1, 1), padding="valid",
                 depth_multiplier=1, dilation_rate=(1, 1), activation=None,
                 use_bias=True, depthwise_initializer="glorot_uniform",
                 bias_initializer="zeros", **kw):
        super().__init__(1, kernel_size, strides=strides, padding=padding,
                         dilation_rate=dilation_rate, activation=activation,
                         use_bias=use_bias, bias_initializer=bias_initializer,
                         **kw)
        self.depth_multiplier = _pos_int(depth_multiplier, "depth_multiplier")
        self.depthwise_initializer = _initializer(depthwise_initializer,
                                                  "depthwise_initializer")

    def _config(self):
        cfg = super()._config()
        for k in ("filters", "kernel_initializer", "kernel_regularizer",
                  "kernel_constraint"):
            del cfg[k]
        cfg.update(depth_multiplier=self.depth_multiplier,
                   depthwise_initializer=self.depthwise_initializer,
                   depthwise_regularizer=None, depthwise_constraint=None)
        return cfg

    def compute_output_shape(self, in_shape):
        self._check_rank(in_shape)
        return self._spatial(in_shape) + [in_shape[-1] * self.depth_multiplier]

    def weight_specs(self, in_shape):
        w = [("depthwise_kernel", list(self.kernel_size) +
              [in_shape[-1], self.depth_multiplier], True)]
        if self.use_bias:
            w.append(("bias", [in_shape[-1] * self.depth_multiplier], True))
        return w


class SeparableConv2D(_Conv):
    """Keras' SeparableConv2D: a depthwise then a 1x1 pointwise kernel."""

    keras_class = "SeparableConv2D"
    _auto_name = "separable_conv2d"

    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid",
                 dilation_rate=(1, 1), depth_multiplier=1, activation=None,
                 use_bias=True, depthwise_initializer="glorot_uniform",
                 pointwise_initializer="glorot_uniform",
                 bias_initializer="zeros", **kw):
        super().__init__(filters, kernel_size, strides=strides, padding=padding,
                         dilation_rate=dilation_rate, activation=activation,
                         use_bias=use_bias, bias_initializer=bias_initializer,
                         **kw)
        self.depth_multiplier = _pos_int(depth_multiplier, "depth_multiplier")
        self.depthwise_initializer = _initializer(depthwise_initializer,
                                                  "depthwise_initializer")
        self.pointwise_initializer = _initializer(pointwise_initializer,
                                                  "pointwise_initializer")

    def _config(self):
        # Keras' SeparableConv.get_config: the Conv base's, updated
        cfg = super()._config()
        cfg.update(depth_multiplier=self.depth_multiplier,
                   depthwise_initializer=self.depthwise_initializer,
                   pointwise_initializer=self.pointwise_initializer,
                   depthwise_regularizer=None, pointwise_regularizer=None,
                   depthwise_constraint=None, pointwise_constraint=None)
        return cfg

    def weight_specs(self, in_shape):
        c, m = in_shape[-1], self.depth_multiplier
        w = [("depthwise_kernel", list(self.kernel_size) + [c, m], True),
             ("pointwise_kernel", [1, 1, c * m, self.filters], True)]
        if self.use_bias:
            w.append(("bias", [self.filters], True))
        return w


class _Pool1D(_Pool):
    _rank = 1

    def __init__(self, pool_size=2, strides=None, padding="valid", **kw):
        super().__init__(pool_size, strides, padding, **kw)


class MaxPooling1D(_Pool1D):
    keras_class = "MaxPooling1D"
    _auto_name = "max_pooling1d"


class AveragePooling1D(_Pool1D):
    keras_class = "AveragePooling1D"
    _auto_name = "average_pooling1d"


class GlobalAveragePooling1D(_GlobalPool):
    keras_class = "GlobalAveragePooling1D"
    _auto_name = "global_average_pooling1d"
    _rank = 1


class GlobalMaxPooling1D(_GlobalPool):
    keras_class = "GlobalMaxPooling1D"
    _auto_name = "global_max_pooling1d"
    _rank = 1


class GlobalMaxPooling2D(_GlobalPool):
    keras_class = "GlobalMaxPooling2D"
    _auto_name = "global_max_pooling2d"


class ZeroPadding1D(Layer):
    keras_class = "ZeroPadding1D"
    _auto_name = "zero_padding1d"

    def __init__(self, padding=1, **kw):
        super().__init__(**kw)
        self.padding = _nonneg_pairs(padding, 1, "ZeroPadding1D padding")[0]

    def _config(self):
        return {"padding": self.padding}

    def compute_output_shape(self, in_shape):
        return [_grow(in_shape[0], sum(self.padding))] + list(in_shape[1:])


class ZeroPadding2D(Layer):
    keras_class = "ZeroPadding2D"
    _auto_name = "zero_padding2d"

    def __init__(self, padding=(1, 1), **kw):
        super().__init__(**kw)
        self.padding = _nonneg_pairs(padding, 2, "ZeroPadding2D padding")

    def _config(self):
        return {"padding": self.padding, "data_format": "channels_last"}

    def compute_output_shape(self, in_shape):
        return [in_shape[i] + sum(self.padding[i]) for i in range(2)] + [in_shape[2]]


class Cropping1D(Layer):
    keras_class = "Cropping1D"
    _auto_name = "cropping1d"

    def __init__(self, cropping=(1, 1), **kw):
        super().__init__(**kw)
        self.cropping = _nonneg_pairs(cropping, 1, "Cropping1D cropping")[0]

    def _config(self):
        return {"cropping": self.cropping}

    def compute_output_shape(self, in_shape):
        n = _grow(in_shape[0], -sum(self.cropping))
        if n is not None and n <= 0:
            raise ValueError("Cropping1D %s leaves nothing of %s"
                             % (self.cropping, in_shape))
        return [n] + list(in_shape[1:])


class Cropping2D(Layer):
    keras_class = "Cropping2D"
    _auto_name = "cropping2d"

    def __init__(self, cropping=((0, 0), (0, 0)), **kw):
        super().__init__(**kw)
        self.cropping = _nonneg_pairs(cropping, 2, "Cropping2D cropping")

    def _config(self):
        return {"cropping": self.cropping, "data_format": "channels_last"}

    def compute_output_shape(self, in_shape):
        out = [in_shape[i] - sum(self.cropping[i]) for i in range(2)]
        if min(out) <= 0:
            raise ValueError("Cropping2D %s leaves nothing of %s"
                             % (self.cropping, in_shape))
        return out + [in_shape[2]]


class UpSampling1D(Layer):
    keras_class = "UpSampling1D"
    _auto_name = "up_sampling1d"

    def __init__(self, size=2, **kw):
        super().__init__(**kw)
        self.size = _pos_int(size, "UpSampling1D size")

    def _config(self):
        return {"size": self.size}

    def compute_output_shape(self, in_shape):
        return [None if in_shape[0] is None else in_shape[0] * self.size] + list(in_shape[1:])


class UpSampling2D(Layer):
    keras_class = "UpSampling2D"
    _auto_name = "up_sampling2d"

    def __init__(self, size=(2, 2), interpolation="nearest", **kw):
        super().__init__(**kw)
        self.size = _ints(size, 2, "UpSampling2D size")
        if interpolation != "nearest":
            raise ValueError("UpSampling2D interpolation %r: only 'nearest'"
                             % (interpolation,))

    def _config(self):
        return {"size": self.size, "data_format": "channels_last",
                "interpolation": "nearest"}

    def compute_output_shape(self, in_shape):
        return [in_shape[0] * self.size[0], in_shape[1] * self.size[1], in_shape[2]]


class Permute(Layer):
    keras_class = "Permute"
    _auto_name = "permute"

    def __init__(self, dims, **kw):
        super().__init__(**kw)
        self.dims = [int(d) for d in dims]
        if sorted(self.dims) != list(range(1, len(self.dims) + 1)):
            raise ValueError("Permute dims must permute 1..%d, got %r"
                             % (len(self.dims), dims))

    def _config(self):
        return {"dims": self.dims}

    def compute_output_shape(self, in_shape):
        if len(in_shape) != len(self.dims):
            raise ValueError("Permute %s on an input of rank %d"
                             % (self.dims, len(in_shape)))
        return [in_shape[d - 1] for d in self.dims]


class RepeatVector(Layer):
    keras_class = "RepeatVector"
    _auto_name = "repeat_vector"

    def __init__(self, n, **kw):
        super().__init__(**kw)
        self.n = _pos_int(n, "RepeatVector n")

    def _config(self):
        return {"n": self.n}

    def compute_output_shape(self, in_shape):
        if len(in_shape) != 1:
            raise ValueError("RepeatVector wants (features,) input, got %s"
                             % (in_shape,))
        return [self.n, in_shape[0]]


class _Merge(Layer):
    """Keras' merging layers: inputs of one shape, element-wise."""

    _n_in = None

    def _out_shape(self, shapes):
        if len(shapes) < 2 or (self._n_in and len(shapes) != self._n_in):
            raise ValueError("%s takes %s inputs, got %d"
                             % (self.keras_class,
                                self._n_in or "at least two", len(shapes)))
        if any(list(s) != list(shapes[0]) for s in shapes[1:]):
            raise ValueError("%s inputs have different shapes %s"
                             % (self.keras_class, shapes))
        return list(shapes[0])


class Add(_Merge):
    keras_class = "Add"
    _auto_name = "add"


class Subtract(_Merge):
    keras_class = "Subtract"
    _auto_name = "subtract"
    _n_in = 2


class Multiply(_Merge):
    keras_class = "Multiply"
    _auto_name = "multiply"


class Average(_Merge):
    keras_class = "Average"
    _auto_name = "average"


class Maximum(_Merge):
    keras_class = "Maximum"
    _auto_name = "maximum"


class Minimum(_Merge):
    keras_class = "Minimum"
    _auto_name = "minimum"


class _Scalar(Layer):
    """A layer of one float setting, kept as the attribute _key and
    configured as {_key: value}."""

    _key = None

    def __init__(self, value, **kw):
        super().__init__(**kw)
        setattr(self, self._key, self._check(float(value), value))

    def _check(self, v, given):
        return v

    def _config(self):
        return {self._key: getattr(self, self._key)}


class LeakyReLU(_Scalar):
    keras_class = "LeakyReLU"
    _auto_name = "leaky_re_lu"
    _key = "alpha"

    def __init__(self, alpha=0.3, **kw):
        super().__init__(alpha, **kw)


class ELU(_Scalar):
    keras_class = "ELU"
    _auto_name = "elu"
    _key = "alpha"

    def __init__(self, alpha=1.0, **kw):
        super().__init__(alpha, **kw)


class ThresholdedReLU(_Scalar):
    keras_class = "ThresholdedReLU"
    _auto_name = "thresholded_re_lu"
    _key = "theta"

    def __init__(self, theta=1.0, **kw):
        super().__init__(theta, **kw)

    def _check(self, v, given):
        if v < 0:
            raise ValueError("ThresholdedReLU theta must be >= 0")
        return v


class PReLU(Layer):
    """Keras' PReLU: a learned slope per value, shared along shared_axes
    (1-based, as Keras)."""

    keras_class = "PReLU"
    _auto_name = "p_re_lu"

    def __init__(self, alpha_initializer="zeros", shared_axes=None, **kw):
        super().__init__(**kw)
        self.alpha_initializer = _initializer(alpha_initializer,
                                              "alpha_initializer")
        if shared_axes is not None and not isinstance(shared_axes, (list, tuple)):
            shared_axes = [shared_axes]
        self.shared_axes = (None if shared_axes is None else
                            [_pos_int(int(a), "shared_axes") for a in shared_axes])

    def _config(self):
        return {"alpha_initializer": self.alpha_initializer,
                "alpha_regularizer": None, "alpha_constraint": None,
                "shared_axes": self.shared_axes}

    def weight_specs(self, in_shape):
        shape = list(in_shape)
        for a in self.shared_axes or []:
            if a > len(shape):
                raise ValueError("PReLU shared axis %d on an input of rank %d"
                                 % (a, len(shape)))
            shape[a - 1] = 1
        return [("alpha", shape, True)]


class LayerNormalization(Layer):
    """Keras' LayerNormalization over the last axis."""

    keras_class = "LayerNormalization"
    _auto_name = "layer_normalization"

    def __init__(self, axis=-1, epsilon=1e-3, center=True, scale=True,
                 beta_initializer="zeros", gamma_initializer="ones", **kw):
        super().__init__(**kw)
        # Keras 2 saves -1 as the positive index ([2] for (B, T, C)): the
        # input's rank checks it
        ax = list(axis) if isinstance(axis, (list, tuple)) else [axis]
        if len(ax) != 1 or isinstance(ax[0], bool) or not isinstance(ax[0], int):
            raise ValueError("LayerNormalization over the last axis only "
                             "(axis=-1), got %r" % (axis,))
        self.axis = ax[0]
        self.epsilon = float(epsilon)
        if self.epsilon <= 0:
            raise ValueError("LayerNormalization epsilon must be > 0")
        self.center, self.scale = bool(center), bool(scale)
        self.beta_initializer = _initializer(beta_initializer, "beta_initializer")
        self.gamma_initializer = _initializer(gamma_initializer,
                                              "gamma_initializer")

    def compute_output_shape(self, in_shape):
        if self.axis not in (-1, len(in_shape)):
            raise ValueError("LayerNormalization over the last axis only "
                             "(axis=-1), got %d for an input of rank %d"
                             % (self.axis, len(in_shape) + 1))
        return list(in_shape)

    def _config(self):
        return {"axis": [self.axis], "epsilon": self.epsilon, "center": self.center,
                "scale": self.scale, "beta_initializer": self.beta_initializer,
                "gamma_initializer": self.gamma_initializer,
                "beta_regularizer": None, "gamma_regularizer": None,
                "beta_constraint": None, "gamma_constraint": None}

    def weight_specs(self, in_shape):
        c = [in_shape[-1]]
        return (([("gamma", c, True)] if self.scale else []) +
                ([("beta", c, True)] if self.center else []))


class _Noise(_Scalar):
    _key = "rate"

    def __init__(self, value, seed=None, **kw):
        super().__init__(value, **kw)
        self.seed = seed

    def _check(self, v, given):
        if not (0.0 <= v < 1.0 if self._key == "rate" else v >= 0.0):
            raise ValueError("%s %s out of range: %r" % (self.keras_class, self._key, given))
        return v

    def _config(self):
        cfg = super()._config()
        cfg["seed"] = self.seed
        return cfg


class SpatialDropout1D(_Noise):
    keras_class = "SpatialDropout1D"
    _auto_name = "spatial_dropout1d"

    def __init__(self, rate, seed=None, **kw):
        super().__init__(rate, seed=seed, **kw)

    def _config(self):
        return {"rate": self.rate, "noise_shape": None, "seed": self.seed}


class SpatialDropout2D(SpatialDropout1D):
    keras_class = "SpatialDropout2D"
    _auto_name = "spatial_dropout2d"

    def _config(self):
        cfg = super()._config()
        cfg["data_format"] = "channels_last"
        return cfg


class GaussianNoise(_Noise):
    keras_class = "GaussianNoise"
    _auto_name = "gaussian_noise"
    _key = "stddev"

    def __init__(self, stddev, seed=None, **kw):
        super().__init__(stddev, seed=seed, **kw)


class GaussianDropout(_Noise):
    keras_class = "GaussianDropout"
    _auto_name = "gaussian_dropout"

    def __init__(self, rate, seed=None, **kw):
        super().__init__(rate, seed=seed, **kw)


class ActivityRegularization(Layer):
    keras_class = "ActivityRegularization"
    _auto_name = "activity_regularization"

    def __init__(self, l1=0.0, l2=0.0, **kw):
        super().__init__(**kw)
        self.l1, self.l2 = float(l1), float(l2)
        if self.l1 < 0 or self.l2 < 0:
            raise ValueError("ActivityRegularization l1 and l2 must be >= 0")

    def _config(self):
        return {"l1": self.l1, "l2": self.l2}


class Masking(_Scalar):
    """Keras' Masking: steps whose features all equal mask_value are
    skipped by the recurrent layers after it (and zeroed)."""

    keras_class = "Masking"
    _auto_name = "masking"
    _key = "mask_value"

    def __init__(self, mask_value=0.0, **kw):
        super().__init__(mask_value, **kw)


# Keras' aliases.
Convolution1D = Conv1D
Convolution2DTranspose = Conv2DTranspose
SeparableConvolution2D = SeparableConv2D
MaxPool1D = MaxPooling1D
AvgPool1D = AveragePooling1D
GlobalAvgPool1D = GlobalAveragePooling1D
GlobalAvgPool2D = GlobalAveragePooling2D
GlobalMaxPool1D = GlobalMaxPooling1D
GlobalMaxPool2D = GlobalMaxPooling2D
__all__ += [
    "Conv1D", "Conv2DTranspose", "DepthwiseConv2D", "SeparableConv2D",
    "MaxPooling1D", "AveragePooling1D", "GlobalAveragePooling1D",
    "GlobalMaxPooling1D", "GlobalMaxPooling2D", "ZeroPadding1D",
    "ZeroPadding2D", "Cropping1D", "Cropping2D", "UpSampling1D",
    "UpSampling2D", "Permute", "RepeatVector", "Add", "Subtract", "Multiply",
    "Average", "Maximum", "Minimum", "LeakyReLU", "ELU", "ThresholdedReLU",
    "PReLU", "LayerNormalization", "SpatialDropout1D", "SpatialDropout2D",
    "GaussianNoise", "GaussianDropout", "ActivityRegularization", "Masking",
    "Convolution1D", "Convolution2DTranspose", "SeparableConvolution2D",
    "MaxPool1D", "AvgPool1D", "GlobalAvgPool1D", "GlobalAvgPool2D",
    "GlobalMaxPool1D", "GlobalMaxPool2D",
]


# ------------------------------------------------ random image preprocessing
# Keras 2.15's RandomFlip, RandomRotation, RandomTranslation, RandomZoom,
# RandomContrast, RandomBrightness and RandomCrop (keras/layers/preprocessing/
# image_preprocessing.py; get_config's keys): (height, width, channels)
# images, unchanged outside training; in training each image gets its own
# random transform from the session's seed (docs/layers.md).

_FILL_MODES = ("reflect", "wrap", "constant", "nearest")


def _factor(name, f):
    """a number or a pair of numbers, kept as given (a list for a pair)"""
    if isinstance(f, (list, tuple)):
        if len(f) != 2:
            raise ValueError("%s must be a number or two numbers, got %r" % (name, f))
        return [float(f[0]), float(f[1])]
    return float(f)


def _bounds(f, sym=True):
    return tuple(f) if isinstance(f, list) else ((-f, f) if sym else (f, f))


class _Image(Layer):
    def __init__(self, seed=None, **kw):
        super().__init__(**kw)
        self.seed = seed

    def compute_output_shape(self, in_shape):
        if len(in_shape) != 3:
            raise ValueError("%s wants images (height, width, channels), got %r"
                             % (self.keras_class, in_shape))
        return list(in_shape)


class _Warp(_Image):
    """the layers that resample: fill_mode, interpolation, fill_value"""

    def __init__(self, fill_mode="reflect", interpolation="bilinear", seed=None,
                 fill_value=0.0, **kw):
        super().__init__(seed=seed, **kw)
        if fill_mode not in _FILL_MODES:
            raise ValueError("%s fill_mode %r is not one of %s"
                             % (self.keras_class, fill_mode, ", ".join(_FILL_MODES)))
        if interpolation not in ("bilinear", "nearest"):
            raise ValueError("%s interpolation %r is not bilinear or nearest"
                             % (self.keras_class, interpolation))
        self.fill_mode, self.interpolation = fill_mode, interpolation
        self.fill_value = float(fill_value)

    def _config(self):
        return {"fill_mode": self.fill_mode, "fill_value": self.fill_value,
                "interpolation": self.interpolation, "seed": self.seed}


class RandomFlip(_Image):
    keras_class = "RandomFlip"
    _auto_name = "random_flip"

    def __init__(self, mode="horizontal_and_vertical", seed=None, **kw):
        super().__init__(seed=seed, **kw)
        if mode not in ("horizontal", "vertical", "horizontal_and_vertical"):
            raise ValueError("RandomFlip mode %r is not horizontal, vertical or "
                             "horizontal_and_vertical" % (mode,))
        self.mode = mode

    def _config(self):
        return {"mode": self.mode, "seed": self.seed}


class RandomRotation(_Warp):
    keras_class = "RandomRotation"
    _auto_name = "random_rotation"

    def __init__(self, factor, fill_mode="reflect", interpolation="bilinear",
                 seed=None, fill_value=0.0, **kw):
        super().__init__(fill_mode, interpolation, seed, fill_value, **kw)
        self.factor = _factor("factor", factor)
        lo, hi = _bounds(self.factor)
        if hi < lo:
            raise ValueError("RandomRotation factor: upper %r below lower %r" % (hi, lo))

    def _config(self):
        return dict({"factor": self.factor}, **super()._config())


class RandomTranslation(_Warp):
    keras_class = "RandomTranslation"
    _auto_name = "random_translation"

    def __init__(self, height_factor, width_factor, fill_mode="reflect",
                 interpolation="bilinear", seed=None, fill_value=0.0, **kw):
        super().__init__(fill_mode, interpolation, seed, fill_value, **kw)
        self.height_factor = _factor("height_factor", height_factor)
        self.width_factor = _factor("width_factor", width_factor)
        for n in ("height_factor", "width_factor"):
            lo, hi = _bounds(getattr(self, n))
            if hi < lo or abs(lo) > 1 or abs(hi) > 1:
                raise ValueError("RandomTranslation %s %r: bounds in [-1, 1], lower first"
                                 % (n, getattr(self, n)))

    def _config(self):
        return dict({"height_factor": self.height_factor,
                     "width_factor": self.width_factor}, **super()._config())


class RandomZoom(_Warp):
    keras_class = "RandomZoom"
    _auto_name = "random_zoom"

    def __init__(self, height_factor, width_factor=None, fill_mode="reflect",
                 interpolation="bilinear", seed=None, fill_value=0.0, **kw):
        super().__init__(fill_mode, interpolation, seed, fill_value, **kw)
        self.height_factor = _factor("height_factor", height_factor)
        self.width_factor = (None if width_factor is None
                             else _factor("width_factor", width_factor))
        lo, hi = _bounds(self.height_factor)
        if abs(lo) > 1 or abs(hi) > 1:
            raise ValueError("RandomZoom height_factor %r: values in [-1, 1]"
                             % (self.height_factor,))
        if self.width_factor is not None and min(_bounds(self.width_factor)) < -1:
            raise ValueError("RandomZoom width_factor %r: values >= -1"
                             % (self.width_factor,))

    def _config(self):
        return dict({"height_factor": self.height_factor,
                     "width_factor": self.width_factor}, **super()._config())


class RandomContrast(_Image):
    keras_class = "RandomContrast"
    _auto_name = "random_contrast"

    def __init__(self, factor, seed=None, **kw):
        super().__init__(seed=seed, **kw)
        self.factor = _factor("factor", factor)
        lo, hi = _bounds(self.factor, sym=False)
        if lo < 0 or hi < 0 or lo > 1:
            raise ValueError("RandomContrast factor %r: lower in [0, 1], upper >= 0"
                             % (self.factor,))

    def _config(self):
        return {"factor": self.factor, "seed": self.seed}


class RandomBrightness(_Image):
    keras_class = "RandomBrightness"
    _auto_name = "random_brightness"

    def __init__(self, factor, value_range=(0, 255), seed=None, **kw):
        super().__init__(seed=seed, **kw)
        f = _factor("factor", factor)
        lo, hi = sorted(f) if isinstance(f, list) else (-abs(f), abs(f))
        if lo < -1 or hi > 1:
            raise ValueError("RandomBrightness factor %r: values in [-1, 1]" % (factor,))
        if not isinstance(value_range, (list, tuple)) or len(value_range) != 2:
            raise ValueError("RandomBrightness value_range must be two numbers")
        self.factor = [lo, hi]
        self.value_range = sorted(float(v) for v in value_range)

    def _config(self):
        return {"factor": self.factor, "value_range": self.value_range,
                "seed": self.seed}


class RandomCrop(_Image):
    """Keras 2.6+'s RandomCrop: (height, width, channels) out in every
    mode; in training a random window when the image is at least that
    large, otherwise (and outside training) Keras' smart_resize (the
    centred box of the output's aspect ratio, resized bilinearly)."""
    keras_class = "RandomCrop"
    _auto_name = "random_crop"

    def __init__(self, height, width, seed=None, **kw):
        super().__init__(seed=seed, **kw)
        self.height = _pos_int(height, "RandomCrop height")
        self.width = _pos_int(width, "RandomCrop width")

    def compute_output_shape(self, in_shape):
        shape = super().compute_output_shape(in_shape)
        return [self.height, self.width, shape[2]]

    def _config(self):
        return {"height": self.height, "width": self.width, "seed": self.seed}


__all__ += ["RandomFlip", "RandomRotation", "RandomTranslation", "RandomZoom",
            "RandomContrast", "RandomBrightness", "RandomCrop"]


# -------------------------------------------------------------- attention
# keras/src/layers/attention/multi_head_attention.py and
# keras/src/layers/merging/dot.py: the constructors' arguments, the call
# conventions and the weights (names, shapes, order) are Keras'; the daemon
# computes them (server/import/import_keras_attn.c, docs/keras-import.md).

def _opt_pos_int(v, what):
    return None if v is None else _pos_int(v, what)


class MultiHeadAttention(Layer):
    """Keras' MultiHeadAttention, called as Keras calls it:

        mha = MultiHeadAttention(num_heads=2, key_dim=16)
        y = mha(query, value)                       # self-attention: (x, x)
        y = mha(query, value, key=k, attention_mask=m, use_causal_mask=True)

    query (B, T, dim) (or any rank: attention_axes), value and key (B, S,
    .); attention_mask (B, T, S) of 0/1 for rank-3 inputs. The output is
    (B, T, output_shape or dim). Weights, Keras' order: query/kernel
    (dim, heads, key_dim), query/bias (heads, key_dim), key/..., value/...
    (value_dim), attention_output/kernel (heads, value_dim, out...),
    attention_output/bias (out...)."""

    _kw_tensors = True  # value, key and the masks are keyword tensors
    keras_class = "MultiHeadAttention"
    _auto_name = "multi_head_attention"
    _TENSORS = ("query", "value", "key", "query_mask", "value_mask", "key_mask",
                "attention_mask")

    def __init__(self, num_heads, key_dim, value_dim=None, dropout=0.0,
                 use_bias=True, output_shape=None, attention_axes=None,
                 sliding_window=None, flash_attention=None,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 kernel_regularizer=None, bias_regularizer=None,
                 activity_regularizer=None, kernel_constraint=None,
                 bias_constraint=None, use_gate=False, seed=None, **kw):
        super().__init__(**kw)
        self.num_heads = _pos_int(num_heads, "MultiHeadAttention num_heads")
        self.key_dim = _pos_int(key_dim, "MultiHeadAttention key_dim")
        # Keras: value_dim None (or 0) is key_dim
        self.value_dim = _opt_pos_int(value_dim or None, "MultiHeadAttention value_dim") \
            or self.key_dim
        self.dropout = float(dropout)
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError("MultiHeadAttention dropout must be in [0, 1), got %r"
                             % (dropout,))
        self.use_bias = bool(use_bias)
        if output_shape:
            if isinstance(output_shape, int) and not isinstance(output_shape, bool):
                output_shape = (output_shape,)
            output_shape = [_pos_int(int(d), "MultiHeadAttention output_shape")
                            for d in output_shape]
        self.output_shape_ = output_shape or None
        if isinstance(attention_axes, int) and not isinstance(attention_axes, bool):
            attention_axes = (attention_axes,)
        elif attention_axes is not None and not isinstance(attention_axes, (list, tuple)):
            raise ValueError("attention_axes must be an int, list, or tuple, got %r"
                             % (attention_axes,))
        self.attention_axes = None if attention_axes is None else \
            [int(a) for a in attention_axes]
        self.sliding_window = _opt_pos_int(sliding_window,
                                           "MultiHeadAttention sliding_window")
        if use_gate:
            raise ValueError("MultiHeadAttention use_gate=True is not supported")
        if activity_regularizer is not None:
            raise ValueError("MultiHeadAttention activity_regularizer is not supported")
        if kernel_constraint is not None or bias_constraint is not None:
            raise ValueError("MultiHeadAttention constraints are not supported here")
        self.flash_attention = flash_attention
        self.seed = seed
        self.kernel_initializer = _initializer(kernel_initializer, "kernel_initializer")
        self.bias_initializer = _initializer(bias_initializer, "bias_initializer")
        self.regularizers = {
            "kernel_regularizer": _regularizer(kernel_regularizer, "kernel_regularizer"),
            "bias_regularizer": _regularizer(bias_regularizer, "bias_regularizer")}
        self._roles = None    # the first call's tensor arguments, in its inputs' order
        self._shapes = None   # {role: per-sample shape} of the first call (the build)

    def _config(self):
        sh = self._shapes or {}

        def full(role):
            s = sh.get(role) or (sh.get("value") if role == "key" else None)
            return None if s is None else [None] + list(s)
        cfg = {"num_heads": self.num_heads, "key_dim": self.key_dim,
               "value_dim": self.value_dim, "dropout": self.dropout,
               "use_bias": self.use_bias, "output_shape": self.output_shape_,
               "attention_axes": self.attention_axes,
               "kernel_initializer": self.kernel_initializer,
               "bias_initializer": self.bias_initializer}
        cfg.update(self.regularizers)
        cfg.update(activity_regularizer=None, kernel_constraint=None, bias_constraint=None)
        # Keras 3's settings only where they are set (Keras 2 has none)
        if self.sliding_window is not None:
            cfg["sliding_window"] = self.sliding_window
        if self.seed is not None:
            cfg["seed"] = self.seed
        # Keras 2.11+ keeps the built shapes (its from_config pops them)
        cfg.update(query_shape=full("query"), key_shape=full("key"),
                   value_shape=full("value"))
        return cfg

    def __call__(self, query, value=None, key=None, query_mask=None,
                 value_mask=None, key_mask=None, attention_mask=None,
                 return_attention_scores=False, training=None,
                 use_causal_mask=False):
        if value is None:
            raise TypeError("MultiHeadAttention is called as mha(query, value) "
                            "(self-attention: mha(x, x))")
        if return_attention_scores:
            raise ValueError("return_attention_scores=True (a second output) is "
                             "not supported")
        if training is not None:
            raise ValueError("MultiHeadAttention training=: the daemon applies "
                             "dropout in fit and not in predict, as Keras")
        given = dict(query=query, value=value, key=key, query_mask=query_mask,
                     value_mask=value_mask, key_mask=key_mask,
                     attention_mask=attention_mask)
        roles, ins = [], []
        for r in self._TENSORS:
            t = given[r]
            if t is None:
                continue
            if not isinstance(t, KerasTensor):
                raise TypeError("MultiHeadAttention %s must be a tensor of the "
                                "Functional API, got %r" % (r, t))
            roles.append(r)
            ins.append(t)
        shapes = {r: list(t.shape[1:]) for r, t in zip(roles, ins)}
        out = self._shape_of(shapes, bool(use_causal_mask))
        t = KerasTensor(out, self, ins, len(self._inbound_nodes))
        # each call's own arguments (a shared layer's calls may differ)
        t._roles, t._shapes = roles, shapes
        t._call_kw = {"use_causal_mask": True} if use_causal_mask else {}
        self._add_node(t)
        if len(self._inbound_nodes) == 1:
            self._roles, self._shapes = roles, shapes
        return t

    def _call_weights(self, t):
        return self._weights_of(t._shapes)

    def _out_shape(self, shapes):
        raise ValueError("MultiHeadAttention takes a query and a value: call it "
                         "in the Functional API, mha(query, value)")

    def _shape_of(self, sh, causal):
        """The output shape; Keras' build and call checks"""
        q, v = sh["query"], sh["value"]
        k = sh.get("key", v)
        if len(q) < 2 or len(v) != len(q) or len(k) != len(q):
            raise ValueError("MultiHeadAttention query, value and key need the "
                             "same rank, at least (B, T, dim): got %s, %s, %s"
                             % (tuple(q), tuple(v), tuple(k)))
        if any(d is None for d in q + v + k):
            raise ValueError("MultiHeadAttention needs fixed input dims, got %s, %s"
                             % (tuple(q), tuple(v)))
        if v[:-1] != k[:-1]:
            raise ValueError("All dimensions of value and key, except the last one, "
                             "must be equal: %s and %s" % (tuple(v), tuple(k)))
        m = len(q) - 1
        axes = list(range(1, m + 1)) if self.attention_axes is None else \
            [a if a >= 0 else a + m + 2 for a in self.attention_axes]
        for a, given in zip(axes, self.attention_axes or axes):
            if not 1 <= a <= m:
                raise ValueError("attention axis %d is not a dim of the query %s"
                                 % (given, tuple(q)))
        for i in range(m):
            if i + 1 not in axes and q[i] != v[i]:
                raise ValueError("query and value differ in non-attention dim %d"
                                 % (i + 1))
        masks = [r for r in sh if r.endswith("mask")]
        if (masks or causal or self.sliding_window) and m != 1:
            raise ValueError("attention masks are supported for (B, T, dim) inputs only")
        if "attention_mask" in sh and list(sh["attention_mask"]) != [q[0], v[0]]:
            raise ValueError("attention_mask must be (B, %d, %d), got (B, %s)"
                             % (q[0], v[0], ", ".join(map(str, sh["attention_mask"]))))
        for r, want in (("query_mask", [q[0]]), ("value_mask", [v[0]]), ("key_mask", [v[0]])):
            if r in sh and list(sh[r]) != want:
                raise ValueError("%s must be (B, %d), got (B, %s)"
                                 % (r, want[0], ", ".join(map(str, sh[r]))))
        return list(q[:-1]) + list(self.output_shape_ or [q[-1]])

    def compute_output_shape(self, in_shape):
        return self._shape_of({"query": list(in_shape), "value": list(in_shape)}, False)

    def weight_specs(self, in_shape):
        return self._weights_of(self._shapes or {"query": list(in_shape),
                                                 "value": list(in_shape)})

    def _weights_of(self, sh):
        q, v = sh["query"], sh["value"]
        k = sh.get("key", v)
        H, kd, vd = self.num_heads, self.key_dim, self.value_dim
        out = list(self.output_shape_ or [q[-1]])
        w = []
        for part, dim, width in (("query", q[-1], kd), ("key", k[-1], kd),
                                 ("value", v[-1], vd)):
            w.append((part + "/kernel", [dim, H, width], True))
            if self.use_bias:
                w.append((part + "/bias", [H, width], True))
        w.append(("attention_output/kernel", [H, vd] + out, True))
        if self.use_bias:
            w.append(("attention_output/bias", out, True))
        return w

    def _keras2_node(self, srcs, t=None):
        # Keras 2 (Node.serialize): the first argument is the entry, every
        # other one (tensors as [name, node, 0]) a keyword
        kw = {r: [s[0], s[1], s[2] if len(s) > 2 else 0] for r, s in zip(t._roles[1:], srcs[1:])}
        kw.update(t._call_kw)
        return [[srcs[0][0], srcs[0][1], srcs[0][2] if len(srcs[0]) > 2 else 0, kw]]

    def _keras3_build(self, in_shapes):
        # build(query_shape, value_shape, key_shape=None): the tensor
        # arguments' shapes but the masks
        return {"shapes_dict": {"%s_shape" % r: [None] + list(self._shapes[r])
                                for r in self._roles if r in ("query", "value", "key")}}

    def _keras3_node(self, tensors, t=None):
        # Keras 3: query and value positional, the rest keywords
        kw = dict(zip(t._roles[2:], tensors[2:]))
        kw.update(t._call_kw)
        return {"args": list(tensors[:2]), "kwargs": kw}


class Dot(Layer):
    """Keras' Dot(axes, normalize=False) of two inputs, called on a list:
    Dot(axes=2)([a, b]) is the batch dot product of a's axis with b's
    (axes count the batch; an int for both, or a pair; negative from the
    end); normalize: l2-normalize both along their axes first (cosine)."""

    keras_class = "Dot"
    _auto_name = "dot"

    def __init__(self, axes, normalize=False, **kw):
        super().__init__(**kw)
        if isinstance(axes, bool) or not isinstance(axes, (int, list, tuple)):
            raise TypeError("Invalid type for argument axes: it should be a list "
                            "or an int, got %r" % (axes,))
        if not isinstance(axes, int):
            if len(axes) != 2 or not all(isinstance(a, int) and not isinstance(a, bool)
                                         for a in axes):
                raise ValueError("Dot axes must be an int or a pair of ints, got %r"
                                 % (axes,))
            axes = [int(a) for a in axes]
        self.axes = axes
        self.normalize = bool(normalize)

    def _config(self):
        return {"axes": self.axes, "normalize": self.normalize}

    def _out_shape(self, shapes):
        if len(shapes) != 2:
            raise ValueError("A Dot layer should be called on a list of 2 inputs, "
                             "got %d" % len(shapes))
        s1, s2 = [None] + list(shapes[0]), [None] + list(shapes[1])
        if len(s1) < 2 or len(s2) < 2:
            raise ValueError("Dot needs inputs of rank >= 2")
        if isinstance(self.axes, int):
            ax = [self.axes % len(s1), self.axes % len(s2)] if self.axes < 0 \
                else [self.axes] * 2
        else:
            ax = [a % len(s) for a, s in zip(self.axes, (s1, s2))]
        if not (1 <= ax[0] < len(s1) and 1 <= ax[1] < len(s2)):
            raise ValueError("Dot axes %r must name non-batch dims of %s and %s"
                             % (self.axes, tuple(s1), tuple(s2)))
        if s1[ax[0]] != s2[ax[1]]:
            raise ValueError("Dimension incompatibility: %s != %s (Dot axes %r of %s "
                             "and %s)" % (s1[ax[0]], s2[ax[1]], self.axes,
                                          tuple(s1), tuple(s2)))
        s1.pop(ax[0])
        s2.pop(ax[1])
        out = s1[1:] + s2[1:]
        return out or [1]


def dot(inputs, axes=-1, **kwargs):
    """Keras' functional form: Dot(axes, **kwargs)(inputs)."""
    return Dot(axes=axes, **kwargs)(inputs)


__all__ += ["MultiHeadAttention", "Dot", "dot"]
