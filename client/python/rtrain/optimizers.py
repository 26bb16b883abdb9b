"""Keras-like optimizer declarations.

An optimizer here is only its settings; the update runs on the daemon.
``client.compile(spec, optimizer=rtrain.optimizers.Adam(learning_rate=0.1))``
or a plain name, ``optimizer="adam"``, as in Keras.
"""

__all__ = ["Optimizer", "LearningRateSchedule", "ExponentialDecay", "CosineDecay",
           "schedules", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta",
           "Adamax", "Nadam", "get"]


def _rate(v, what):
    v = float(v)
    if not v > 0.0 or v != v or v == float("inf"):
        raise ValueError("%s must be a positive number, got %r" % (what, v))
    return v


class LearningRateSchedule:
    """keras.optimizers.schedules' base: the rate at each optimizer step
    (0 for the first), computed by the daemon; __call__ gives it here."""

    def __call__(self, step):
        raise NotImplementedError


class ExponentialDecay(LearningRateSchedule):
    """initial_learning_rate * decay_rate ** (step / decay_steps), the
    exponent floored when staircase (keras/src/optimizers/schedules/
    learning_rate_schedule.py)."""

    def __init__(self, initial_learning_rate, decay_steps, decay_rate,
                 staircase=False, name=None):
        self.initial_learning_rate = _rate(initial_learning_rate, "initial_learning_rate")
        if isinstance(decay_steps, bool) or int(decay_steps) != decay_steps or decay_steps <= 0:
            raise ValueError("decay_steps must be a positive int, got %r" % (decay_steps,))
        self.decay_steps = int(decay_steps)
        self.decay_rate = _rate(decay_rate, "decay_rate")
        self.staircase = bool(staircase)

    def __call__(self, step):
        p = step / self.decay_steps
        return self.initial_learning_rate * self.decay_rate ** (int(p) if self.staircase else p)

    def _rt(self):
        return {"schedule": "step_decay" if self.staircase else "exponential_decay",
                "gamma": self.decay_rate, "step_size": self.decay_steps}


class CosineDecay(LearningRateSchedule):
    """initial_learning_rate * ((1 - alpha) (1 + cos(pi min(step,
    decay_steps) / decay_steps)) / 2 + alpha); Keras 3's warmup_target is
    not supported."""

    def __init__(self, initial_learning_rate, decay_steps, alpha=0.0, name=None,
                 warmup_target=None, warmup_steps=0):
        if warmup_target is not None or warmup_steps:
            raise ValueError("CosineDecay's warmup_target and warmup_steps are not "
                             "supported")
        self.initial_learning_rate = _rate(initial_learning_rate, "initial_learning_rate")
        if isinstance(decay_steps, bool) or int(decay_steps) != decay_steps or decay_steps <= 0:
            raise ValueError("decay_steps must be a positive int, got %r" % (decay_steps,))
        self.decay_steps = int(decay_steps)
        self.alpha = float(alpha)
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError("alpha must be in [0, 1], got %r" % (alpha,))

    def __call__(self, step):
        import math
        t = min(step, self.decay_steps) / self.decay_steps
        return self.initial_learning_rate * ((1 - self.alpha) * 0.5 * (1 + math.cos(math.pi * t))
                                             + self.alpha)

    def _rt(self):
        return {"schedule": "cosine_decay", "total_steps": self.decay_steps,
                "min_lr": self.alpha * self.initial_learning_rate}


class schedules:  # noqa: N801 - keras.optimizers.schedules
    LearningRateSchedule = LearningRateSchedule
    ExponentialDecay = ExponentialDecay
    CosineDecay = CosineDecay


class Optimizer:
    name = None

    def __init__(self, learning_rate, clipnorm=None, lr=None):
        if lr is not None:  # the Keras 1/2 spelling: Adam(lr=0.01)
            learning_rate = lr
        self.schedule = None
        if isinstance(learning_rate, LearningRateSchedule):
            self.schedule = learning_rate
            learning_rate = learning_rate.initial_learning_rate
        elif callable(learning_rate):
            raise TypeError("a callable learning rate runs in Python at every step; "
                            "the daemon takes a rate or a schedule "
                            "(rtrain.optimizers.schedules)")
        self.learning_rate = _rate(learning_rate, "learning_rate")
        self.clipnorm = None if clipnorm is None else _rate(clipnorm, "clipnorm")

    @property
    def lr(self):
        return self.learning_rate

    @lr.setter
    def lr(self, v):
        self.learning_rate = v

    def get_config(self):
        """The options the C layer passes to rt_train_opts."""
        cfg = {"optimizer": self.name, "learning_rate": self.learning_rate}
        if self.clipnorm is not None:
            cfg["clipnorm"] = self.clipnorm
        if self.schedule is not None:
            cfg.update(self.schedule._rt())
        cfg.update(self._extra())
        return cfg

    def _extra(self):
        return {}

    def __repr__(self):
        return "%s(%s)" % (type(self).__name__, ", ".join(
            "%s=%r" % kv for kv in sorted(self.get_config().items())
            if kv[0] != "optimizer"))


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


_BY_NAME = {"sgd": SGD, "adam": Adam, "adamw": AdamW, "rmsprop": RMSprop,
            "adagrad": Adagrad, "adadelta": Adadelta, "adamax": Adamax,
            "nadam": Nadam}


def get(identifier):
    """An Optimizer from a name ("adam") or an Optimizer (returned as is)."""
    if isinstance(identifier, Optimizer):
        return identifier
    if isinstance(identifier, str):
        cls = _BY_NAME.get(identifier.lower())
        if cls is None:
            raise ValueError("unknown optimizer %r (known: %s)"
                             % (identifier, ", ".join(sorted(_BY_NAME))))
        return cls()
    raise TypeError("optimizer must be a name or an rtrain.optimizers "
                    "object, got %r" % (identifier,))
