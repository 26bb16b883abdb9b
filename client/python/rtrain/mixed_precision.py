"""Keras' mixed precision API (keras.mixed_precision), for the policies
rtrain computes: "float32" and "mixed_bfloat16".

    from rtrain import mixed_precision
    mixed_precision.set_global_policy("mixed_bfloat16")
    model = rtrain.Sequential([..., layers.Dense(10),
                               layers.Activation("softmax", dtype="float32")])

As in Keras, a layer takes the global policy when it is created (or its own
dtype=...), and the model's JSON carries it to the daemon: under
mixed_bfloat16 Dense and Conv2D multiply bf16 inputs with float32
accumulation; variables, the loss, softmax, BatchNorm's statistics and the
optimizer stay float32, and a layer set to "float32" stays float32. The
daemon refuses mixed_bfloat16 (FailedPrecondition) on a CPU without bf16
instructions. compile(..., precision=...) overrides the whole model.
"""

_POLICIES = ("float32", "mixed_bfloat16")


class Policy:
    """A dtype policy: Policy("mixed_bfloat16") computes in bfloat16 and
    keeps variables in float32; Policy("float32") does both in float32."""

    def __init__(self, name):
        if isinstance(name, Policy):
            name = name.name
        if name not in _POLICIES:
            raise ValueError(
                "dtype policy %r is not supported: rtrain's mixed precision "
                "is mixed_bfloat16 (or float32)" % (name,))
        self._name = name

    @property
    def name(self):
        return self._name

    @property
    def compute_dtype(self):
        return "bfloat16" if self._name == "mixed_bfloat16" else "float32"

    @property
    def variable_dtype(self):
        return "float32"

    def get_config(self):
        return {"name": self._name}

    def __eq__(self, other):
        return isinstance(other, Policy) and other.name == self.name

    def __hash__(self):
        return hash(self._name)

    def __repr__(self):
        return '<Policy "%s">' % self._name


_global = Policy("float32")


def set_global_policy(policy):
    """The policy of the layers created from now on ("float32",
    "mixed_bfloat16" or a Policy); None resets it to float32."""
    global _global
    _global = Policy("float32" if policy is None else policy)


def global_policy():
    """The current global Policy."""
    return _global


get_global_policy = global_policy
DTypePolicy = Policy

__all__ = ["Policy", "DTypePolicy", "set_global_policy", "global_policy",
           "get_global_policy"]
