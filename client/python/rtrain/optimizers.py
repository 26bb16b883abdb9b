"""Keras-like optimizer declarations.

An optimizer here is only its settings; the update runs on the daemon.
``client.compile(spec, optimizer=rtrain.optimizers.Adam(learning_rate=0.1))``
or a plain name, ``optimizer="adam"``, as in Keras.
"""

__all__ = ["Optimizer", "LearningRateSchedule", "ExponentialDecay", "CosineDecay",
           "PiecewiseConstantDecay", "schedules", "SGD", "Adam", "AdamW", "RMSprop",
           "Adagrad", "Adadelta", "Adamax", "Nadam", "Ftrl", "get", "serialize",
           "deserialize"]


def _rate(v, what):
    v = float(v)
    if not v > 0.0 or v != v or v == float("inf"):
        raise ValueError("%s must be a positive number, got %r" % (what, v))
    return v


class LearningRateSchedule:
    """keras.optimizers.schedules' base: the rate at each optimizer step
    (0 for the first). ExponentialDecay and CosineDecay are computed by the
    daemon; a schedule the daemon has no form for (PiecewiseConstantDecay, a
    subclass with its own __call__, a callable rate) is computed here, and
    fit sends each rate with the steps it applies to (_python)."""

    _python = True

    def __call__(self, step):
        raise NotImplementedError

    def get_config(self):
        return {}

    def _span(self, step):
        """How many steps from step on keep step's rate (None: all)."""
        return 1

    def _keras(self):
        """Keras 3's serialized form (keras.optimizers.schedules.serialize)."""
        return {"module": "keras.optimizers.schedules", "class_name": type(self).__name__,
                "config": self.get_config(), "registered_name": None}


def _steps_arg(v, what):
    if isinstance(v, bool) or int(v) != v or v <= 0:
        raise ValueError("%s must be a positive int, got %r" % (what, v))
    return int(v)


class ExponentialDecay(LearningRateSchedule):
    """initial_learning_rate * decay_rate ** (step / decay_steps), the
    exponent floored when staircase (keras/src/optimizers/schedules/
    learning_rate_schedule.py)."""

    _python = False

    def __init__(self, initial_learning_rate, decay_steps, decay_rate,
                 staircase=False, name="ExponentialDecay"):
        self.initial_learning_rate = _rate(initial_learning_rate, "initial_learning_rate")
        self.decay_steps = _steps_arg(decay_steps, "decay_steps")
        self.decay_rate = _rate(decay_rate, "decay_rate")
        self.staircase = bool(staircase)
        self.name = name

    def __call__(self, step):
        p = step / self.decay_steps
        return self.initial_learning_rate * self.decay_rate ** (int(p) if self.staircase else p)

    def get_config(self):
        return {"initial_learning_rate": self.initial_learning_rate,
                "decay_steps": self.decay_steps, "decay_rate": self.decay_rate,
                "staircase": self.staircase, "name": self.name}

    def _rt(self):
        return {"schedule": "step_decay" if self.staircase else "exponential_decay",
                "gamma": self.decay_rate, "step_size": self.decay_steps}


class CosineDecay(LearningRateSchedule):
    """initial_learning_rate * ((1 - alpha) (1 + cos(pi min(step,
    decay_steps) / decay_steps)) / 2 + alpha); Keras 3's warmup_target is
    not supported."""

    _python = False

    def __init__(self, initial_learning_rate, decay_steps, alpha=0.0, name="CosineDecay",
                 warmup_target=None, warmup_steps=0):
        if warmup_target is not None or warmup_steps:
            raise ValueError("CosineDecay's warmup_target and warmup_steps are not "
                             "supported")
        self.initial_learning_rate = _rate(initial_learning_rate, "initial_learning_rate")
        self.decay_steps = _steps_arg(decay_steps, "decay_steps")
        self.alpha = float(alpha)
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError("alpha must be in [0, 1], got %r" % (alpha,))
        self.name = name

    def __call__(self, step):
        import math
        t = min(step, self.decay_steps) / self.decay_steps
        return self.initial_learning_rate * ((1 - self.alpha) * 0.5 * (1 + math.cos(math.pi * t))
                                             + self.alpha)

    def get_config(self):
        return {"initial_learning_rate": self.initial_learning_rate,
                "decay_steps": self.decay_steps, "alpha": self.alpha, "name": self.name,
                "warmup_target": None, "warmup_steps": 0}

    def _rt(self):
        return {"schedule": "cosine_decay", "total_steps": self.decay_steps,
                "min_lr": self.alpha * self.initial_learning_rate}


class PiecewiseConstantDecay(LearningRateSchedule):
    """values[0] while step <= boundaries[0], values[i] while
    boundaries[i-1] < step <= boundaries[i], values[-1] past the last
    boundary (keras/src/optimizers/schedules/learning_rate_schedule.py).
    Computed here: fit runs the steps of each constant piece with its rate."""

    def __init__(self, boundaries, values, name="PiecewiseConstant"):
        boundaries, values = list(boundaries), list(values)
        if len(boundaries) != len(values) - 1:
            raise ValueError("The length of boundaries should be 1 less than the length "
                             "of values. Received: boundaries=%r of length %d, and "
                             "values=%r of length %d" % (boundaries, len(boundaries),
                                                         values, len(values)))
        for b in boundaries:
            if isinstance(b, bool) or not isinstance(b, (int, float)) or b != b:
                raise ValueError("boundaries must be numbers, got %r" % (b,))
        if any(b2 <= b1 for b1, b2 in zip(boundaries, boundaries[1:])):
            raise ValueError("boundaries must be strictly increasing, got %r" % (boundaries,))
        self.boundaries = boundaries
        self.values = [_rate(v, "values[%d]" % i) for i, v in enumerate(values)]
        self.name = name
        self.initial_learning_rate = self.values[0]

    def __call__(self, step):
        for b, v in zip(self.boundaries, self.values):
            if step <= b:
                return v
        return self.values[-1]

    def _span(self, step):
        import math
        for b in self.boundaries:
            if step <= b:
                return int(math.floor(b)) - step + 1
        return None

    def get_config(self):
        return {"boundaries": self.boundaries, "values": self.values, "name": self.name}


class _CallableRate(LearningRateSchedule):
    """A learning rate given as a callable of no arguments: Keras calls it
    at every step (base_optimizer.py, _get_current_learning_rate); so does
    fit, before each step it sends."""

    def __init__(self, fn):
        self.fn = fn
        self.initial_learning_rate = None

    def __call__(self, step):
        return _rate(self.fn(), "the learning rate callable's value")

    def _keras(self):
        raise ValueError("a callable learning rate cannot be saved (Keras cannot "
                         "serialize it either); use a LearningRateSchedule")


class schedules:  # noqa: N801 - keras.optimizers.schedules
    LearningRateSchedule = LearningRateSchedule
    ExponentialDecay = ExponentialDecay
    CosineDecay = CosineDecay
    PiecewiseConstantDecay = PiecewiseConstantDecay

    @staticmethod
    def serialize(schedule):
        return schedule._keras()

    @staticmethod
    def deserialize(config):
        return _schedule_from(config)


_SCHEDULES = {"ExponentialDecay": ExponentialDecay, "CosineDecay": CosineDecay,
              "PiecewiseConstantDecay": PiecewiseConstantDecay}


def _schedule_from(d):
    """A schedule from Keras 2's or 3's serialized form."""
    cls = _SCHEDULES.get(d.get("class_name"))
    if cls is None:
        raise ValueError("learning rate schedule %r is not supported (known: %s)"
                         % (d.get("class_name"), ", ".join(sorted(_SCHEDULES))))
    return cls(**dict(d.get("config") or {}))


class Optimizer:
    name = None
    keras_name = None   # Keras' class name (serialize)

    def __init__(self, learning_rate, clipnorm=None, lr=None, name=None):
        if lr is not None:  # the Keras 1/2 spelling: Adam(lr=0.01)
            learning_rate = lr
        self.schedule = None
        if isinstance(learning_rate, dict):
            learning_rate = _schedule_from(learning_rate)
        if isinstance(learning_rate, LearningRateSchedule):
            self.schedule = learning_rate
            learning_rate = learning_rate.initial_learning_rate
        elif callable(learning_rate):
            self.schedule = _CallableRate(learning_rate)
            learning_rate = None
        self.learning_rate = None if learning_rate is None else \
            _rate(learning_rate, "learning_rate")
        self.clipnorm = None if clipnorm is None else _rate(clipnorm, "clipnorm")

    @property
    def lr(self):
        return self.learning_rate

    @lr.setter
    def lr(self, v):
        self.learning_rate = v

    def _python_rate(self):
        """The schedule fit computes here (see LearningRateSchedule), or None."""
        s = self.schedule
        return s if s is not None and s._python else None

    def get_config(self):
        """The options the C layer passes to rt_train_opts."""
        lr = self.learning_rate
        if lr is None:
            # a callable rate: fit calls it and sends its value with every
            # step, so the program's own rate is never used
            lr = 1.0
        cfg = {"optimizer": self.name, "learning_rate": lr}
        if self.clipnorm is not None:
            cfg["clipnorm"] = self.clipnorm
        if self.schedule is not None and not self.schedule._python:
            cfg.update(self.schedule._rt())
        cfg.update(self._extra())
        return cfg

    def _extra(self):
        return {}

    def keras_config(self):
        """Keras 3's optimizer config (what model.save writes)."""
        lr = self.schedule._keras() if self.schedule is not None else self.learning_rate
        cfg = {"name": self.name, "learning_rate": lr, "weight_decay": None,
               "clipnorm": self.clipnorm, "global_clipnorm": None, "clipvalue": None,
               "use_ema": False, "ema_momentum": 0.99, "ema_overwrite_frequency": None,
               "loss_scale_factor": None, "gradient_accumulation_steps": None}
        cfg.update(self._extra())
        return cfg

    def __repr__(self):
        cfg = dict(self._extra(), learning_rate=self.schedule or self.learning_rate)
        if self.clipnorm is not None:
            cfg["clipnorm"] = self.clipnorm
        return "%s(%s)" % (type(self).__name__, ", ".join(
            "%s=%r" % kv for kv in sorted(cfg.items())))


class SGD(Optimizer):
    name = "sgd"

    def __init__(self, learning_rate=0.01, momentum=0.0, nesterov=False,
                 **kw):
        super().__init__(learning_rate, **kw)
        self.momentum = float(momentum)
        if not 0.0 <= self.momentum < 1.0:
            raise ValueError("momentum must be in [0, 1), got %r" % momentum)
        self.nesterov = bool(nesterov)

    def _extra(self):
        return {"momentum": self.momentum, "nesterov": self.nesterov}


class Adam(Optimizer):
    name = "adam"

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999,
                 epsilon=1e-7, **kw):
        super().__init__(learning_rate, **kw)
        self.beta_1, self.beta_2 = float(beta_1), float(beta_2)
        for b, n in ((self.beta_1, "beta_1"), (self.beta_2, "beta_2")):
            if not 0.0 < b < 1.0:
                raise ValueError("%s must be in (0, 1), got %r" % (n, b))
        self.epsilon = _rate(epsilon, "epsilon")

    def _extra(self):
        return {"beta_1": self.beta_1, "beta_2": self.beta_2,
                "epsilon": self.epsilon}


class AdamW(Adam):
    name = "adamw"

    def __init__(self, learning_rate=0.001, weight_decay=0.004, **kw):
        super().__init__(learning_rate, **kw)
        self.weight_decay = float(weight_decay)
        if self.weight_decay < 0:
            raise ValueError("weight_decay must be >= 0")

    def _extra(self):
        d = super()._extra()
        d["weight_decay"] = self.weight_decay
        return d


class RMSprop(Optimizer):
    name = "rmsprop"

    def __init__(self, learning_rate=0.001, rho=0.9, momentum=0.0,
                 epsilon=1e-7, **kw):
        super().__init__(learning_rate, **kw)
        self.rho = float(rho)
        if not 0.0 < self.rho < 1.0:
            raise ValueError("rho must be in (0, 1), got %r" % rho)
        self.momentum = float(momentum)
        self.epsilon = _rate(epsilon, "epsilon")

    def _extra(self):
        return {"rho": self.rho, "momentum": self.momentum,
                "epsilon": self.epsilon}


class Adagrad(Optimizer):
    """keras.optimizers.Adagrad (keras/src/optimizers/adagrad.py); the
    accumulator starts at Keras' 0.1."""
    name = "adagrad"

    def __init__(self, learning_rate=0.001, initial_accumulator_value=0.1,
                 epsilon=1e-7, **kw):
        super().__init__(learning_rate, **kw)
        if float(initial_accumulator_value) != 0.1:
            raise ValueError("initial_accumulator_value: the daemon's Adagrad "
                             "starts at Keras' 0.1")
        self.initial_accumulator_value = 0.1
        self.epsilon = _rate(epsilon, "epsilon")

    def _extra(self):
        return {"epsilon": self.epsilon}


class Adadelta(Optimizer):
    """keras.optimizers.Adadelta (keras/src/optimizers/adadelta.py)."""
    name = "adadelta"

    def __init__(self, learning_rate=0.001, rho=0.95, epsilon=1e-7, **kw):
        super().__init__(learning_rate, **kw)
        self.rho = float(rho)
        if not 0.0 < self.rho < 1.0:
            raise ValueError("rho must be in (0, 1), got %r" % rho)
        self.epsilon = _rate(epsilon, "epsilon")

    def _extra(self):
        return {"rho": self.rho, "epsilon": self.epsilon}


class Adamax(Adam):
    """keras.optimizers.Adamax (keras/src/optimizers/adamax.py)."""
    name = "adamax"


class Nadam(Adam):
    """keras.optimizers.Nadam (keras/src/optimizers/nadam.py)."""
    name = "nadam"


class Ftrl(Optimizer):
    """keras.optimizers.Ftrl's settings (keras/src/optimizers/ftrl.py).
    Compiling it needs a daemon with the Ftrl update (_FTRL_ON_DAEMON)."""
    name = "ftrl"

    def __init__(self, learning_rate=0.001, learning_rate_power=-0.5,
                 initial_accumulator_value=0.1, l1_regularization_strength=0.0,
                 l2_regularization_strength=0.0, l2_shrinkage_regularization_strength=0.0,
                 beta=0.0, **kw):
        super().__init__(learning_rate, **kw)
        self.learning_rate_power = float(learning_rate_power)
        if self.learning_rate_power > 0:
            raise ValueError("learning_rate_power must be <= 0, got %r" % learning_rate_power)
        self.initial_accumulator_value = float(initial_accumulator_value)
        if self.initial_accumulator_value < 0:
            raise ValueError("initial_accumulator_value must be >= 0")
        for n in ("l1_regularization_strength", "l2_regularization_strength",
                  "l2_shrinkage_regularization_strength", "beta"):
            v = float(locals()[n])
            if not v >= 0.0:
                raise ValueError("%s must be >= 0, got %r" % (n, v))
            setattr(self, n, v)

    def _extra(self):
        return {k: getattr(self, k) for k in (
            "learning_rate_power", "initial_accumulator_value", "l1_regularization_strength",
            "l2_regularization_strength", "l2_shrinkage_regularization_strength", "beta")}

    def get_config(self):
        if not _FTRL_ON_DAEMON:
            raise ValueError("Ftrl is not supported: rtraind has no Ftrl update yet "
                             "(compile with another optimizer, e.g. 'adagrad')")
        return super().get_config()


# librtrain sends Ftrl's settings (rt_train_opts.has_ftrl) and the daemon
# built with it updates with Ftrl; rtrain/__init__.py sets it
_FTRL_ON_DAEMON = False

_BY_NAME = {"sgd": SGD, "adam": Adam, "adamw": AdamW, "rmsprop": RMSprop,
            "adagrad": Adagrad, "adadelta": Adadelta, "adamax": Adamax,
            "nadam": Nadam, "ftrl": Ftrl}


def get(identifier):
    """An Optimizer from a name ("adam"), Keras' serialized form, or an
    Optimizer (returned as is)."""
    if isinstance(identifier, Optimizer):
        return identifier
    if isinstance(identifier, dict):
        return deserialize(identifier)
    if isinstance(identifier, str):
        cls = _BY_NAME.get(identifier.lower())
        if cls is None:
            raise ValueError("unknown optimizer %r (known: %s)"
                             % (identifier, ", ".join(sorted(_BY_NAME))))
        return cls()
    raise TypeError("optimizer must be a name or an rtrain.optimizers "
                    "object, got %r" % (identifier,))


def serialize(optimizer):
    """Keras 3's form: {"module", "class_name", "config", "registered_name"}."""
    return {"module": "keras.optimizers", "class_name": type(optimizer).__name__,
            "config": optimizer.keras_config(), "registered_name": None}


# Keras settings an rtrain optimizer has no use for, and the values that
# mean "off"; any other value is refused rather than dropped.
_OFF = {"decay": (0.0, None), "amsgrad": (False,), "use_ema": (False,),
        "weight_decay": (None, 0.0), "global_clipnorm": (None,), "clipvalue": (None,),
        "loss_scale_factor": (None,), "gradient_accumulation_steps": (None, 1),
        "centered": (False,)}
_FREE = {"name", "jit_compile", "is_legacy_optimizer", "ema_momentum",
         "ema_overwrite_frequency"}


def deserialize(config):
    """An Optimizer from Keras 2's or 3's serialized form (class_name and
    config), as model files save it. A setting rtrain does not implement
    (amsgrad, clipvalue, EMA, ...) set to anything but its off value is an
    error naming it."""
    import inspect
    if isinstance(config, str):
        return get(config)
    name = str(config.get("class_name", ""))
    cls = next((c for c in _BY_NAME.values() if c.__name__ == name), None) or \
        _BY_NAME.get(name.lower())
    if cls is None:
        raise ValueError("unknown optimizer %r (known: %s)"
                         % (name, ", ".join(sorted(c.__name__ for c in _BY_NAME.values()))))
    params = set()
    for c in cls.__mro__:
        if "__init__" in vars(c) and c is not object:
            params.update(inspect.signature(c.__init__).parameters)
    params -= {"self", "kw"}
    kw = {}
    for k, v in dict(config.get("config") or {}).items():
        if k in params and not (k == "weight_decay" and cls is not AdamW):
            kw[k] = v
        elif k in _FREE or (k in _OFF and v in _OFF[k]):
            continue
        else:
            raise ValueError("optimizer %s: %s=%r is not supported by rtrain (load the "
                             "model with compile=False and compile it again)" % (name, k, v))
    return cls(**kw)
