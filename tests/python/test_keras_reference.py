"""rtrain's Keras pieces against references outside the project:

- EarlyStopping and ReduceLROnPlateau (rtrain.callbacks) against
  tests/keras_import/tfjs/callbacks.json, written by gen_tfjs_fixtures.js:
  the epoch EarlyStopping stops at and the learning rate after every epoch,
  on fixed monitor sequences, from TensorFlow.js' EarlyStopping where it
  agrees with Keras, and from a transcription of Keras 3's callbacks
  (keras/src/callbacks/early_stopping.py, reduce_lr_on_plateau.py) where
  tfjs has none or differs (each case says which);
- the loss spellings Keras saves (class names, loss objects, Keras 3's
  function objects) and Keras 3's DTypePolicy in model_from_json.

No daemon is needed: the callbacks run against a stand-in model.
"""
import json
import os

import pytest

import rtrain
from rtrain import callbacks, models

FIX = os.path.join(os.environ.get("RT_SOURCE_DIR", os.path.join(
    os.path.dirname(__file__), "..", "..")), "tests", "keras_import", "tfjs",
    "callbacks.json")


class _Opt:
    def __init__(self, lr):
        self.learning_rate = lr


class _Model:
    def __init__(self, lr=0.001):
        self.stop_training = False
        self.optimizer = _Opt(lr)

    def get_weights(self):
        return []

    def set_weights(self, w):
        pass


def _cases(kind):
    with open(FIX) as f:
        return json.load(f)[kind]


@pytest.mark.parametrize("case", _cases("early_stopping"),
                         ids=lambda c: "%s-%s" % (c["sequence"], c["patience"]))
def test_early_stopping(case):
    cb = callbacks.EarlyStopping(
        monitor="loss", patience=case["patience"],
        min_delta=case.get("min_delta", 0), mode=case.get("mode", "min"),
        baseline=case.get("baseline"),
        start_from_epoch=case.get("start_from_epoch", 0))
    m = _Model()
    cb.set_model(m)
    cb.on_train_begin()
    stopped = -1
    for epoch, v in enumerate(case["values"]):
        cb.on_epoch_end(epoch, {"loss": v})
        if m.stop_training:
            stopped = epoch
            break
    assert stopped == case["stopped_epoch"], case["reference"]


@pytest.mark.parametrize("case", _cases("reduce_lr_on_plateau"),
                         ids=lambda c: "%s-%s-%s" % (c["sequence"], c["patience"],
                                                     c["cooldown"]))
def test_reduce_lr_on_plateau(case):
    cb = callbacks.ReduceLROnPlateau(
        monitor="loss", factor=case["factor"], patience=case["patience"],
        min_delta=case["min_delta"], cooldown=case["cooldown"],
        min_lr=case["min_lr"], mode=case.get("mode", "min"))
    m = _Model(case["lr"])
    cb.set_model(m)
    cb.on_train_begin()
    got = []
    for epoch, v in enumerate(case["values"]):
        cb.on_epoch_end(epoch, {"loss": v})
        got.append(m.optimizer.learning_rate)
    assert got == pytest.approx(case["lrs"], rel=1e-12), case["reference"]


@pytest.mark.parametrize("saved,want", [
    ("SparseCategoricalCrossentropy", ("sparse_categorical_crossentropy", None)),
    ("MSE", ("mse", None)),
    ("LogCosh", ("log_cosh", None)),
    ({"class_name": "CategoricalCrossentropy",
      "config": {"from_logits": True, "reduction": "auto"}},
     ("categorical_crossentropy", True)),
    ({"module": "builtins", "class_name": "function",
      "config": "binary_crossentropy", "registered_name": "function"},
     ("binary_crossentropy", None)),
])
def test_saved_loss_spellings(saved, want):
    assert rtrain._loss_spec(saved) == want


def _dense(dtype):
    return json.dumps({
        "module": "keras", "class_name": "Sequential",
        "config": {"name": "s", "layers": [
            {"module": "keras.layers", "class_name": "InputLayer",
             "config": {"batch_shape": [None, 4], "dtype": "float32",
                        "name": "in"}},
            {"module": "keras.layers", "class_name": "Dense",
             "config": {"name": "d", "units": 2, "dtype": dtype}}]}})


def test_dtype_policy():
    pol = {"module": "keras", "class_name": "DTypePolicy",
           "config": {"name": "float32"}, "registered_name": None}
    m = models.model_from_json(_dense(pol))
    assert [type(layer).__name__ for layer in m.layers][-1] == "Dense"
    mixed = dict(pol, config={"name": "mixed_float16"})
    with pytest.raises(ValueError, match="mixed precision"):
        models.model_from_json(_dense(mixed))
