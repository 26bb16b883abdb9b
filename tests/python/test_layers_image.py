"""rtrain.layers' random image preprocessing layers (RandomFlip,
RandomRotation, RandomTranslation, RandomZoom, RandomContrast,
RandomBrightness, RandomCrop): their configs carry Keras 2.15's get_config keys
(keras/layers/preprocessing/image_preprocessing.py), a Sequential of them
compiles on a real rtraind and trains, and outside training they leave
the images as they are: the model predicts what the same model without
them predicts with the same weights."""
import json

import numpy as np
import pytest

import rtrain
from rtrain import layers as L

BASE = {"name", "trainable", "dtype", "seed"}
WARP = BASE | {"fill_mode", "fill_value", "interpolation"}
KEYS = {
    "RandomFlip": BASE | {"mode"},
    "RandomRotation": WARP | {"factor"},
    "RandomTranslation": WARP | {"height_factor", "width_factor"},
    "RandomZoom": WARP | {"height_factor", "width_factor"},
    "RandomContrast": BASE | {"factor"},
    "RandomBrightness": BASE | {"factor", "value_range"},
    "RandomCrop": BASE | {"height", "width"},
}


def augment():
    return [
        L.RandomFlip("horizontal", input_shape=(10, 9, 2)),
        L.RandomRotation((-0.1, 0.2), fill_mode="constant", fill_value=0.5),
        L.RandomTranslation(0.1, (-0.2, 0.1), interpolation="nearest"),
        L.RandomZoom(0.2, fill_mode="wrap"),
        L.RandomContrast(0.3),
        L.RandomBrightness(0.1, value_range=(0, 1)),
        L.RandomCrop(10, 9),
    ]


def head(first=None):
    kw = {} if first is None else {"input_shape": first}
    return [L.Conv2D(3, 3, activation="relu", **kw), L.Flatten(), L.Dense(1)]


def test_configs_have_keras_keys():
    doc = json.loads(rtrain.Sequential(augment() + head()).to_json())
    seen = set()
    for l in doc["config"]["layers"]:
        if l["class_name"] in KEYS:
            assert set(l["config"]) - {"batch_input_shape"} == KEYS[l["class_name"]]
            seen.add(l["class_name"])
    assert seen == set(KEYS)
    back = rtrain.models.model_from_json(json.dumps(doc))
    assert json.loads(back.to_json()) == doc


def test_trains_and_is_identity_at_inference(client):
    m = rtrain.Sequential(augment() + head())
    m.compile("adam", "mse", client=client, batch_size=16)
    assert tuple(m.compiled.report["output_shape"]) == (1,)
    rng = np.random.default_rng(5)
    x = rng.uniform(size=(64, 10, 9, 2)).astype(np.float32)
    y = rng.normal(size=(64, 1)).astype(np.float32)
    h = m.fit(x, y, epochs=2, verbose=0)
    assert np.isfinite(h.history["loss"]).all()
    plain = rtrain.Sequential(head((10, 9, 2)))
    plain.compile("adam", "mse", client=client, batch_size=16)
    plain.set_weights(m.get_weights())
    np.testing.assert_array_equal(m.predict(x), plain.predict(x))


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="mode"):
        L.RandomFlip("diagonal")
    with pytest.raises(ValueError, match="fill_mode"):
        L.RandomRotation(0.1, fill_mode="mirror")
    with pytest.raises(ValueError, match="interpolation"):
        L.RandomZoom(0.1, interpolation="bicubic")
    with pytest.raises(ValueError, match="height_factor"):
        L.RandomTranslation(1.5, 0.1)
    with pytest.raises(ValueError, match="RandomContrast factor"):
        L.RandomContrast(-0.1)
    with pytest.raises(ValueError, match="RandomCrop height"):
        L.RandomCrop(0, 3)
    with pytest.raises(ValueError, match="images"):
        rtrain.Sequential([L.RandomFlip(input_shape=(6, 2)), L.Dense(1)]).count_params()


def test_random_crop_shape(client):
    """(height, width) out in training and in predict (Keras 2.6+): a
    (7, 5) crop of (10, 9, 2) images feeds a head built for (7, 5, 2)"""
    m = rtrain.Sequential([L.RandomCrop(7, 5, input_shape=(10, 9, 2))] + head())
    assert m.layers[0].compute_output_shape([10, 9, 2]) == [7, 5, 2]
    m.compile("sgd", "mse", client=client, batch_size=8)
    rng = np.random.default_rng(6)
    x = rng.uniform(size=(16, 10, 9, 2)).astype(np.float32)
    y = rng.normal(size=(16, 1)).astype(np.float32)
    h = m.fit(x, y, epochs=1, verbose=0)
    assert np.isfinite(h.history["loss"]).all()
    assert m.predict(x).shape == (16, 1)
