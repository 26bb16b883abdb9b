"""Keras' loss objects (keras.losses.*) for compile(loss=...): each names
the loss the daemon computes (keras/src/losses/losses.py) and carries its
from_logits (and Huber's delta). Like Keras, compile also takes the names.
"""

__all__ = ["Loss", "SparseCategoricalCrossentropy", "CategoricalCrossentropy",
           "BinaryCrossentropy", "MeanSquaredError", "MeanAbsoluteError", "LogCosh",
           "Hinge", "SquaredHinge", "Poisson", "KLDivergence", "Huber", "get"]


class Loss:
    """A Keras loss: fn is the function's name, from_logits where it
    applies. get_config() is what Keras saves."""
    fn = None
    _logits = False

    def __init__(self, name=None, reduction="sum_over_batch_size"):
        if reduction not in ("sum_over_batch_size", "auto"):
            raise ValueError("reduction %r: the daemon reduces as Keras' default, "
                             "sum_over_batch_size" % (reduction,))
        self.name = name or self.fn
        self.reduction = "sum_over_batch_size"
        self.from_logits = False

    def get_config(self):
        cfg = {"name": self.name, "reduction": self.reduction}
        if self._logits:
            cfg["from_logits"] = self.from_logits
        return cfg

    def __repr__(self):
        return "%s(%s)" % (type(self).__name__, ", ".join(
            "%s=%r" % kv for kv in sorted(self.get_config().items())))


class _LogitsLoss(Loss):
    _logits = True

    def __init__(self, from_logits=False, name=None, **kw):
        super().__init__(name=name, **kw)
        self.from_logits = bool(from_logits)


class SparseCategoricalCrossentropy(_LogitsLoss):
    fn = "sparse_categorical_crossentropy"


class CategoricalCrossentropy(_LogitsLoss):
    fn = "categorical_crossentropy"

    def __init__(self, from_logits=False, label_smoothing=0.0, **kw):
        if label_smoothing:
            raise ValueError("label_smoothing is not supported for Keras' "
                             "categorical_crossentropy")
        super().__init__(from_logits=from_logits, **kw)


class BinaryCrossentropy(_LogitsLoss):
    fn = "binary_crossentropy"

    def __init__(self, from_logits=False, label_smoothing=0.0, **kw):
        if label_smoothing:
            raise ValueError("label_smoothing is not supported for Keras' "
                             "binary_crossentropy")
        super().__init__(from_logits=from_logits, **kw)


class MeanSquaredError(Loss):
    fn = "mean_squared_error"


class MeanAbsoluteError(Loss):
    fn = "mean_absolute_error"


class LogCosh(Loss):
    fn = "log_cosh"


class Hinge(Loss):
    fn = "hinge"


class SquaredHinge(Loss):
    fn = "squared_hinge"


class Poisson(Loss):
    fn = "poisson"


class KLDivergence(Loss):
    fn = "kl_divergence"


class Huber(Loss):
    fn = "huber"

    def __init__(self, delta=1.0, **kw):
        super().__init__(**kw)
        self.delta = float(delta)
        if not self.delta > 0:
            raise ValueError("delta must be > 0, got %r" % (delta,))

    def get_config(self):
        cfg = super().get_config()
        cfg["delta"] = self.delta
        return cfg


_BY_NAME = {c.fn: c for c in (SparseCategoricalCrossentropy, CategoricalCrossentropy,
                              BinaryCrossentropy, MeanSquaredError, MeanAbsoluteError,
                              LogCosh, Hinge, SquaredHinge, Poisson, KLDivergence, Huber)}


def get(identifier):
    """A Loss from a function name ("huber") or a Loss (returned as is)."""
    if isinstance(identifier, Loss):
        return identifier
    cls = _BY_NAME.get(str(identifier))
    if cls is None:
        raise ValueError("unknown loss %r (known: %s)" % (identifier, ", ".join(sorted(_BY_NAME))))
    return cls()
