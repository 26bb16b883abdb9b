"""rtrain.layers for the rest of the Keras layers the daemon imports:
their configs carry Keras 2's keys (the sets below are get_config's, read
from keras/layers/convolutional/base_conv.py, base_depthwise_conv.py,
base_separable_conv.py, conv2d_transpose.py, pooling/*.py, reshaping/*.py,
activation/*.py, normalization/layer_normalization.py, regularization/*.py
and core/masking.py), and on a real rtraind each model compiles to the
same output shape, parameter count and weight names and shapes that the
Python side computes for summary() and HDF5 files, and trains."""
import json

import numpy as np
import pytest

import rtrain
from rtrain import layers as L

BASE = {"name", "trainable", "dtype"}
CONV = BASE | {"filters", "kernel_size", "strides", "padding", "data_format",
               "dilation_rate", "groups", "activation", "use_bias",
               "kernel_initializer", "bias_initializer", "kernel_regularizer",
               "bias_regularizer", "activity_regularizer", "kernel_constraint",
               "bias_constraint"}
KEYS = {
    "Conv1D": CONV,
    "Conv2DTranspose": CONV | {"output_padding"},
    "DepthwiseConv2D": (CONV - {"filters", "kernel_initializer", "kernel_regularizer",
                                "kernel_constraint"}) |
    {"depth_multiplier", "depthwise_initializer", "depthwise_regularizer",
     "depthwise_constraint"},
    "SeparableConv2D": CONV | {"depth_multiplier", "depthwise_initializer",
                               "pointwise_initializer", "depthwise_regularizer",
                               "pointwise_regularizer", "depthwise_constraint",
                               "pointwise_constraint"},
    "MaxPooling1D": BASE | {"pool_size", "padding", "strides", "data_format"},
    "AveragePooling1D": BASE | {"pool_size", "padding", "strides", "data_format"},
    "GlobalAveragePooling1D": BASE | {"data_format", "keepdims"},
    "GlobalMaxPooling1D": BASE | {"data_format", "keepdims"},
    "GlobalMaxPooling2D": BASE | {"data_format", "keepdims"},
    "ZeroPadding1D": BASE | {"padding"},
    "ZeroPadding2D": BASE | {"padding", "data_format"},
    "Cropping1D": BASE | {"cropping"},
    "Cropping2D": BASE | {"cropping", "data_format"},
    "UpSampling1D": BASE | {"size"},
    "UpSampling2D": BASE | {"size", "data_format", "interpolation"},
    "Permute": BASE | {"dims"},
    "RepeatVector": BASE | {"n"},
    "Add": BASE, "Subtract": BASE, "Multiply": BASE, "Average": BASE,
    "Maximum": BASE, "Minimum": BASE,
    "LeakyReLU": BASE | {"alpha"},
    "ELU": BASE | {"alpha"},
    "ThresholdedReLU": BASE | {"theta"},
    "PReLU": BASE | {"alpha_initializer", "alpha_regularizer", "alpha_constraint",
                     "shared_axes"},
    "LayerNormalization": BASE | {"axis", "epsilon", "center", "scale",
                                  "beta_initializer", "gamma_initializer",
                                  "beta_regularizer", "gamma_regularizer",
                                  "beta_constraint", "gamma_constraint"},
    "SpatialDropout1D": BASE | {"rate", "noise_shape", "seed"},
    "SpatialDropout2D": BASE | {"rate", "noise_shape", "seed", "data_format"},
    "GaussianNoise": BASE | {"stddev", "seed"},
    "GaussianDropout": BASE | {"rate", "seed"},
    "ActivityRegularization": BASE | {"l1", "l2"},
    "Masking": BASE | {"mask_value"},
}


def seq1d():
    """(12, 3) sequences through the 1-D layers; 18 + 18 + ... weights"""
    return rtrain.Sequential([
        L.ZeroPadding1D((1, 2), input_shape=(12, 3)),
        L.Conv1D(4, 3, activation="relu"),
        L.Cropping1D(1),
        L.MaxPooling1D(2),
        L.UpSampling1D(2),
        L.Conv1D(5, 2, padding="causal", dilation_rate=2),
        L.LeakyReLU(0.1),
        L.AveragePooling1D(2, strides=1, padding="same"),
        L.SpatialDropout1D(0.2),
        L.LayerNormalization(),
        L.GaussianNoise(0.05),
        L.GlobalAveragePooling1D(),
        L.Dense(1),
    ])


def seq2d():
    """(8, 8, 2) images through the 2-D layers"""
    return rtrain.Sequential([
        L.ZeroPadding2D(((1, 0), (0, 1)), input_shape=(8, 8, 2)),
        L.DepthwiseConv2D(3, depth_multiplier=2, activation="relu"),
        L.SeparableConv2D(4, (3, 3), padding="same", depth_multiplier=2),
        L.ELU(0.5),
        L.Cropping2D(((1, 1), (0, 1))),
        L.UpSampling2D((2, 1)),
        L.Conv2DTranspose(3, 3, strides=2),
        L.PReLU(shared_axes=[1, 2]),
        L.SpatialDropout2D(0.1),
        L.GaussianDropout(0.1),
        L.ThresholdedReLU(0.0),
        L.GlobalMaxPooling2D(),
        L.ActivityRegularization(l2=1e-4),
        L.Dense(1),
    ])


def merged():
    """one input, merged by every merging layer, Permute and RepeatVector"""
    x = rtrain.Input((6,))
    a, b = L.Dense(4, activation="tanh")(x), L.Dense(4)(x)
    outs = [M()([a, b]) for M in (L.Add, L.Multiply, L.Average, L.Maximum,
                                  L.Minimum)] + [L.Subtract()([a, b])]
    s = L.Add()(outs)
    r = L.RepeatVector(3)(s)                 # (3, 4)
    p = L.Permute((2, 1))(r)                 # (4, 3)
    y = L.GlobalMaxPooling1D()(p)
    return rtrain.Model(x, L.Dense(1)(y))


def masked_rnn():
    return rtrain.Sequential([
        L.Masking(0.0, input_shape=(5, 3)),
        L.LSTM(4, dropout=0.2, recurrent_dropout=0.2),
        L.Dense(1)])


def configs(m):
    doc = json.loads(m.to_json())
    return [(l["class_name"], l["config"]) for l in doc["config"]["layers"]]


@pytest.mark.parametrize("build", [seq1d, seq2d])
def test_configs_have_keras_keys(build):
    seen = set()
    for cls, cfg in configs(build()):
        if cls in KEYS:
            assert set(cfg) - {"batch_input_shape"} == KEYS[cls], cls
            seen.add(cls)
    assert seen


def test_merge_and_masking_configs():
    doc = json.loads(merged().to_json())
    seen = {l["class_name"]: l for l in doc["config"]["layers"]}
    for cls in ("Add", "Subtract", "Multiply", "Average", "Maximum", "Minimum",
                "Permute", "RepeatVector", "GlobalMaxPooling1D"):
        assert set(seen[cls]["config"]) == KEYS[cls], cls
    (cls, cfg), = [c for c in configs(masked_rnn()) if c[0] == "Masking"]
    assert set(cfg) - {"batch_input_shape"} == KEYS["Masking"]
    assert cfg["mask_value"] == 0.0
    assert len(seen["Subtract"]["inbound_nodes"][0]) == 2
    assert seen["Permute"]["config"]["dims"] == [2, 1]


def test_shapes_and_counts_by_hand():
    m = seq1d()
    # ZeroPadding (15, 3); Conv1D k3 -> (13, 4): 3*3*4 + 4 = 40; Cropping
    # (11, 4); pool (5, 4); up (10, 4); causal Conv1D (10, 5): 2*4*5 + 5 =
    # 45; LayerNormalization 2*5; Dense 5 + 1
    assert m.count_params() == 40 + 45 + 10 + 6
    shapes = [n.out_shape for n in m._nodes[1:]]
    assert shapes[:6] == [[15, 3], [13, 4], [11, 4], [5, 4], [10, 4], [10, 5]]
    m = seq2d()
    # pad (9, 9, 2); depthwise 3x3x2x2 + 4 -> (7, 7, 4); separable
    # 3x3x4x2 + 1x1x8x4 + 4 -> (7, 7, 4); crop (5, 6, 4); up (10, 6, 4);
    # transpose 3x3x3x4 + 3 -> (21, 13, 3); PReLU alpha (1, 1, 3)
    assert [n.out_shape for n in m._nodes[1:8]] == [
        [9, 9, 2], [7, 7, 4], [7, 7, 4], [7, 7, 4], [5, 6, 4], [10, 6, 4],
        [21, 13, 3]]
    assert m.count_params() == (36 + 4) + (72 + 32 + 4) + (108 + 3) + 3 + 4


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="padding"):
        L.Conv2DTranspose(3, 3, padding="causal")
    with pytest.raises(ValueError, match="Permute dims"):
        L.Permute((1, 3))
    with pytest.raises(ValueError, match="Subtract takes 2"):
        x = rtrain.Input((3,))
        L.Subtract()([x, L.Dense(3)(x), L.Dense(3)(x)])
    with pytest.raises(ValueError, match="different shapes"):
        x = rtrain.Input((3,))
        L.Add()([L.Dense(2)(x), L.Dense(3)(x)])
    with pytest.raises(ValueError, match="leaves nothing"):
        rtrain.Sequential([L.Cropping1D((3, 3), input_shape=(6, 2))]).count_params()
    # every global pooling checks its input's rank, as the daemon's import
    for layer, shape in ((L.GlobalAveragePooling2D, (6, 2)),
                         (L.GlobalMaxPooling2D, (6, 2)),
                         (L.GlobalAveragePooling1D, (4, 4, 2))):
        with pytest.raises(ValueError, match="wants rank"):
            x = rtrain.Input(shape)
            layer()(x)


@pytest.mark.parametrize("build,xshape", [(seq1d, (12, 3)), (seq2d, (8, 8, 2)),
                                          (merged, (6,)), (masked_rnn, (5, 3))])
def test_daemon_agrees_and_trains(client, build, xshape):
    """The daemon's compile report (output shape, parameter count, every
    weight's name and shape) equals the Python layers', and a fit runs."""
    m = build()
    m.compile("adam", "mse", client=client, batch_size=16)
    rep = m.compiled.report
    assert rep["param_count"] == m.count_params()
    assert tuple(rep["output_shape"]) == tuple(m.output_shape[1:])
    got = [(n, tuple(s)) for n, s, _ in rep["params"]]
    want = [(n, tuple(s)) for n, s, _ in m.weight_specs()]
    assert got == want
    rng = np.random.default_rng(3)
    x = rng.normal(size=(64,) + xshape).astype(np.float32)
    if build is masked_rnn:
        x[::3, 3:] = 0.0  # masked trailing steps
    y = rng.normal(size=(64, 1)).astype(np.float32)
    h = m.fit(x, y, epochs=2, verbose=0)
    assert np.isfinite(h.history["loss"]).all()
    assert m.predict(x).shape == (64, 1)


@pytest.mark.parametrize("build", [seq1d, seq2d, merged, masked_rnn])
def test_json_round_trip_and_summary(build):
    """model_from_json reads every new layer back to the same JSON and
    counts; summary() lists each layer with its output shape."""
    m = build()
    back = rtrain.models.model_from_json(m.to_json())
    assert back.to_json() == m.to_json()
    assert back.count_params() == m.count_params()
    lines = []
    m.summary(print_fn=lines.append)
    assert any("Total params: {:,}".format(m.count_params()) in ln for ln in lines)
    for n in m._nodes[1:]:
        row = [ln for ln in lines if ln.startswith(n.name + " ")]
        assert row and str(tuple([None] + list(n.out_shape))) in row[0], n.name
