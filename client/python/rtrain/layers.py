"""Keras-like layers for rtrain.Sequential.

A layer here is only a declaration: it records its Keras class name and
config, and Sequential serialises the list to the JSON that Keras'
``model.to_json()`` writes. The daemon imports that JSON, so a model built
here and the same model exported from Keras compile to the same program.
"""

__all__ = [
    "Layer", "Input", "InputLayer", "Dense", "Activation", "Dropout",
    "Flatten", "Reshape", "Conv2D", "MaxPooling2D", "AveragePooling2D",
    "GlobalAveragePooling2D", "BatchNormalization", "ReLU", "Softmax",
]

_ACTIVATIONS = ("linear", "relu", "sigmoid", "tanh", "softmax")

_INITIALIZERS = {
    "glorot_uniform": "GlorotUniform", "glorot_normal": "GlorotNormal",
    "he_uniform": "HeUniform", "he_normal": "HeNormal",
    "zeros": "Zeros", "ones": "Ones",
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
    if not isinstance(name, str) or name not in _INITIALIZERS:
        raise ValueError("unknown %s %r (known: %s)"
                         % (what, name, ", ".join(_INITIALIZERS)))
    return {"class_name": _INITIALIZERS[name], "config": {}}


def _pos_int(v, what):
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ValueError("%s must be a positive int, got %r" % (what, v))
    return v


def _pair(v, what):
    if isinstance(v, int) and not isinstance(v, bool):
        v = (v, v)
    v = tuple(v)
    if len(v) != 2:
        raise ValueError("%s must be an int or a pair, got %r" % (what, v))
    return [_pos_int(int(e), what) for e in v]


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
    return [_pos_int(d, what) for d in shape]


class Layer:
    """Base class: a Keras class name plus its config."""

    keras_class = None
    _auto_name = None

    def __init__(self, name=None, input_shape=None, trainable=True):
        if name is not None and (not isinstance(name, str) or not name):
            raise ValueError("layer name must be a non-empty string")
        self.name = name
        self.input_shape = _shape(input_shape)
        self.trainable = bool(trainable)

    def _config(self):
        return {}

    def get_config(self, name):
        cfg = {"name": name, "trainable": self.trainable, "dtype": "float32"}
        if self.input_shape is not None:
            cfg["batch_input_shape"] = [None] + list(self.input_shape)
        cfg.update(self._config())
        return {"class_name": self.keras_class, "config": cfg}

    def __repr__(self):
        args = ", ".join("%s=%r" % kv for kv in sorted(self._config().items()))
        return "%s(%s)" % (type(self).__name__, args)


class InputLayer(Layer):
    """The model input; Sequential([Input((4,)), ...]) equals input_shape=(4,)."""

    keras_class = "InputLayer"
    _auto_name = "input"

    def __init__(self, shape=None, name=None, input_shape=None):
        shape = shape if shape is not None else input_shape
        if shape is None:
            raise ValueError("InputLayer needs a shape, e.g. Input((4,))")
        super().__init__(name=name, input_shape=shape)

    def get_config(self, name):
        return {"class_name": "InputLayer", "config": {
            "batch_input_shape": [None] + list(self.input_shape),
            "dtype": "float32", "sparse": False, "ragged": False,
            "name": name}}


def Input(shape, name=None):
    """Keras' Input(shape=...) for Sequential models."""
    return InputLayer(shape, name=name)


class Dense(Layer):
    keras_class = "Dense"
    _auto_name = "dense"

    def __init__(self, units, activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 **kw):
        super().__init__(**kw)
        self.units = _pos_int(units, "Dense units")
        self.activation = _check_activation(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = _initializer(kernel_initializer,
                                               "kernel_initializer")
        self.bias_initializer = _initializer(bias_initializer,
                                             "bias_initializer")

    def _config(self):
        return {"units": self.units, "activation": self.activation,
                "use_bias": self.use_bias,
                "kernel_initializer": self.kernel_initializer,
                "bias_initializer": self.bias_initializer,
                "kernel_regularizer": None, "bias_regularizer": None,
                "activity_regularizer": None, "kernel_constraint": None,
                "bias_constraint": None}


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


def _padding(p):
    if p not in ("valid", "same"):
        raise ValueError("padding must be 'valid' or 'same', got %r" % (p,))
    return p


class Conv2D(Layer):
    keras_class = "Conv2D"
    _auto_name = "conv2d"

    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid",
                 dilation_rate=(1, 1), activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 **kw):
        super().__init__(**kw)
        self.filters = _pos_int(filters, "Conv2D filters")
        self.kernel_size = _pair(kernel_size, "kernel_size")
        self.strides = _pair(strides, "strides")
        self.padding = _padding(padding)
        self.dilation_rate = _pair(dilation_rate, "dilation_rate")
        self.activation = _check_activation(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = _initializer(kernel_initializer,
                                               "kernel_initializer")
        self.bias_initializer = _initializer(bias_initializer,
                                             "bias_initializer")

    def _config(self):
        return {"filters": self.filters, "kernel_size": self.kernel_size,
                "strides": self.strides, "padding": self.padding,
                "data_format": "channels_last",
                "dilation_rate": self.dilation_rate, "groups": 1,
                "activation": self.activation, "use_bias": self.use_bias,
                "kernel_initializer": self.kernel_initializer,
                "bias_initializer": self.bias_initializer,
                "kernel_regularizer": None, "bias_regularizer": None,
                "activity_regularizer": None, "kernel_constraint": None,
                "bias_constraint": None}


class _Pool2D(Layer):
    def __init__(self, pool_size=(2, 2), strides=None, padding="valid", **kw):
        super().__init__(**kw)
        self.pool_size = _pair(pool_size, "pool_size")
        self.strides = (_pair(strides, "strides") if strides is not None
                        else list(self.pool_size))
        self.padding = _padding(padding)

    def _config(self):
        return {"pool_size": self.pool_size, "padding": self.padding,
                "strides": self.strides, "data_format": "channels_last"}


class MaxPooling2D(_Pool2D):
    keras_class = "MaxPooling2D"
    _auto_name = "max_pooling2d"


class AveragePooling2D(_Pool2D):
    keras_class = "AveragePooling2D"
    _auto_name = "average_pooling2d"


class GlobalAveragePooling2D(Layer):
    keras_class = "GlobalAveragePooling2D"
    _auto_name = "global_average_pooling2d"

    def _config(self):
        return {"data_format": "channels_last", "keepdims": False}


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


# Keras' aliases.
MaxPool2D = MaxPooling2D
AvgPool2D = AveragePooling2D
__all__ += ["MaxPool2D", "AvgPool2D"]
