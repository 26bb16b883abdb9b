#!/usr/bin/python3
"""Writes tfop_ref.json: recorded TensorFlow ops through the Keras importer
(tests/keras_import/test_keras_cudnn.c runs it as keras_tfop).

    /usr/bin/python3 tests/keras_import/tfop/gen_tfop_fixtures.py

Two Functional models of weightless layers, in the forms tf.keras writes:
- TF 2.2-2.3's TensorFlowOpLayer (tensorflow/python/keras/engine/
  base_layer.py: config.node_def {op, input, attr {T}} and config.constants
  {"<input index>": value}, the layer's tensors filling the other inputs);
- TF 2.4+'s TFOpLambda (keras/layers/core/tf_op_layer.py) called with a
  constant first argument, which keras/engine/node.py serializes as
  ["_CONSTANT_VALUE", -1, value, kwargs].
The expected outputs are NumPy transcriptions of the TensorFlow ops
(Mul/Sub/AddV2/RealDiv/Maximum/Minimum with broadcasting; Sigmoid, Relu,
Tanh, Softmax over the last axis as tf.nn.softmax).

A third model puts a Dense layer before the ops the importer read later
(LeakyRelu, Square, Sqrt, Rsqrt, Neg, ConcatV2, Mean and Sum with keep_dims
true and false and negative axes, Reshape), as TF 2.3 writes them
(json_format.MessageToDict: attr values {"f"}, {"b"}, {"i": "<int64>"},
{"type"}), with the semantics of tensorflow/core/ops/math_ops.cc,
array_ops.cc and nn_ops.cc; its Dense gradients are central finite
differences of the NumPy forward in float64. A fourth does the same for
Abs, Log, Max, Min and Prod (math_ops.cc), whose gradients follow
TensorFlow's math_grad.py (ties split, a product's zeros exact).
"""
import json
import os

import numpy as np

rng = np.random.default_rng(9)
B, T, F = 3, 2, 3


def inp(name):
    return {"class_name": "InputLayer", "name": name, "inbound_nodes": [],
            "config": {"batch_input_shape": [None, T, F], "dtype": "float32",
                       "sparse": False, "ragged": False, "name": name}}


def tfop(name, op, ins, consts=None, attr=None):
    # the tensors fill the inputs that are not constants, in order
    names, it = [], iter(ins)
    for k in range(len(ins) + len(consts or {})):
        names.append("%s/c%d" % (name, k) if str(k) in (consts or {})
                     else "%s/Identity" % next(it))
    return {"class_name": "TensorFlowOpLayer", "name": "tf_op_layer_" + name,
            "config": {"name": name, "trainable": True, "dtype": "float32",
                       "node_def": {"name": name, "op": op, "input": names,
                                    "attr": dict({"T": {"type": "DT_FLOAT"}},
                                                 **(attr or {}))},
                       "constants": consts or {}},
            "inbound_nodes": [[[i, 0, 0, {}] for i in ins]]}


def lam(name, fn, first, kwargs):
    return {"class_name": "TFOpLambda", "name": name,
            "config": {"name": name, "trainable": True, "dtype": "float32",
                       "function": fn},
            "inbound_nodes": [first + [kwargs]]}


def model(layers, out):
    return {"class_name": "Functional", "config": {
        "name": "m", "layers": layers, "input_layers": [["x", 0, 0]],
        "output_layers": [[out, 0, 0]]}, "keras_version": "2.3.0-tf",
        "backend": "tensorflow"}


def sigmoid(v):
    return 1 / (1 + np.exp(-v))


def softmax(v):
    e = np.exp(v - v.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


x = rng.uniform(-1, 1, (B, T, F)).astype(np.float64)
row = [0.5, 1.5, 2.5]

# TensorFlowOpLayer: the forms of skull_inpaint_tfoplayer_2_3.json (Mul by a
# constant at input 1, Softmax, Sigmoid) and the other ops
m1 = model([
    inp("x"),
    tfop("Mul_1", "Mul", ["x"], {"1": 3.0}),
    tfop("Sigmoid_1", "Sigmoid", ["tf_op_layer_Mul_1"]),
    tfop("Sub_1", "Sub", ["tf_op_layer_Sigmoid_1"], {"0": 1.0}),
    tfop("AddV2_1", "AddV2", ["tf_op_layer_Sub_1", "x"]),
    tfop("Softmax_1", "Softmax", ["tf_op_layer_AddV2_1"]),
    tfop("RealDiv_1", "RealDiv", ["tf_op_layer_Softmax_1"], {"1": [row]}),
    tfop("Maximum_1", "Maximum", ["tf_op_layer_RealDiv_1", "tf_op_layer_Sub_1"]),
    tfop("Tanh_1", "Tanh", ["tf_op_layer_Maximum_1"]),
    tfop("Relu_1", "Relu", ["x"]),
    tfop("Minimum_1", "Minimum", ["tf_op_layer_Tanh_1", "tf_op_layer_Relu_1"]),
], "tf_op_layer_Minimum_1")
s1 = 1.0 - sigmoid(3.0 * x)
y1 = np.minimum(np.tanh(np.maximum(softmax(s1 + x) / np.array(row), s1)),
                np.maximum(x, 0))

# TFOpLambda with a constant first argument: 1 - x, 2 * a, 3 / (b + 5),
# maximum([0.3, 0.35, 0.4], c)
C = "_CONSTANT_VALUE"
m2 = model([
    inp("x"),
    lam("tf.math.subtract", "math.subtract", [C, -1, 1.0], {"y": ["x", 0, 0], "name": None}),
    lam("tf.math.multiply", "math.multiply", [C, -1, 2.0],
        {"y": ["tf.math.subtract", 0, 0], "name": None}),
    lam("tf.__operators__.add", "__operators__.add", ["tf.math.multiply", 0, 0],
        {"y": 5.0, "name": None}),
    lam("tf.math.truediv", "math.truediv", [C, -1, 3.0],
        {"y": ["tf.__operators__.add", 0, 0], "name": None}),
    lam("tf.math.maximum", "math.maximum", [C, -1, [0.3, 0.35, 0.4]],
        {"y": ["tf.math.truediv", 0, 0], "name": None}),
], "tf.math.maximum")
y2 = np.maximum(np.array([0.3, 0.35, 0.4]), 3.0 / (2.0 * (1.0 - x) + 5.0))


# TensorFlowOpLayer ops read later, after a Dense layer "d" (4 units)
U = 4
idx = {"Tidx": {"type": "DT_INT32"}}
d_layer = {"class_name": "Dense", "name": "d", "inbound_nodes": [[["x", 0, 0, {}]]],
           "config": {"name": "d", "trainable": True, "dtype": "float32", "units": U,
                      "activation": "linear", "use_bias": True,
                      "kernel_initializer": {"class_name": "GlorotUniform",
                                             "config": {"seed": None}},
                      "bias_initializer": {"class_name": "Zeros", "config": {}},
                      "kernel_regularizer": None, "bias_regularizer": None,
                      "activity_regularizer": None, "kernel_constraint": None,
                      "bias_constraint": None}}
P = "tf_op_layer_"
m3 = model([
    inp("x"), d_layer,
    tfop("LeakyRelu_1", "LeakyRelu", ["d"], attr={"alpha": {"f": 0.1}}),
    tfop("Square_1", "Square", ["d"]),
    tfop("AddV2_1", "AddV2", [P + "Square_1"], {"1": 0.5}),
    tfop("Sqrt_1", "Sqrt", [P + "AddV2_1"]),
    tfop("Rsqrt_1", "Rsqrt", [P + "AddV2_1"]),
    tfop("Neg_1", "Neg", [P + "LeakyRelu_1"]),
    tfop("concat_1", "ConcatV2", [P + "Sqrt_1", P + "Rsqrt_1", P + "Neg_1"], {"3": -1},
         attr=dict(idx, N={"i": "3"})),
    tfop("Mean_1", "Mean", [P + "concat_1"], {"1": [1]}, attr=dict(idx, keep_dims={"b": True})),
    tfop("Sum_1", "Sum", [P + "concat_1"], {"1": -2}, attr=dict(idx, keep_dims={"b": False})),
    tfop("Reshape_1", "Reshape", [P + "Mean_1"], {"1": [-1, 3, 4]},
         attr={"Tshape": {"type": "DT_INT32"}}),
    tfop("Reshape_2", "Reshape", [P + "Sum_1"], {"1": [-1, 3, 4]},
         attr={"Tshape": {"type": "DT_INT32"}}),
    tfop("Mul_1", "Mul", [P + "Reshape_1", P + "Reshape_2"]),
    tfop("Mean_2", "Mean", [P + "Mul_1"], {"1": [-1, 1]}, attr=dict(idx, keep_dims={"b": True})),
    tfop("Sum_2", "Sum", [P + "Mul_1"], {"1": [2]}, attr=dict(idx, keep_dims={"b": False})),
    tfop("Reshape_3", "Reshape", [P + "Sum_2"], {"1": [-1, 3, 1]},
         attr={"Tshape": {"type": "DT_INT32"}}),
    tfop("AddV2_2", "AddV2", [P + "Mul_1", P + "Mean_2"]),
    tfop("Sub_1", "Sub", [P + "AddV2_2", P + "Reshape_3"]),
], P + "Sub_1")
rng3 = np.random.default_rng(11)  # its own: the first cases keep their draws
kernel = rng3.uniform(-0.8, 0.8, (F, U))
bias = rng3.uniform(-0.3, 0.3, (U,))


def f3(k, b):
    h = x @ k + b
    lr = np.where(h >= 0, h, 0.1 * h)  # nn_ops.cc LeakyRelu
    a = h * h + 0.5
    cat = np.concatenate([np.sqrt(a), 1 / np.sqrt(a), -lr], axis=-1)  # (B, T, 3U)
    r1 = cat.mean(axis=1, keepdims=True).reshape(-1, 3, 4)
    r2 = cat.sum(axis=-2).reshape(-1, 3, 4)
    mul = r1 * r2
    mean2 = mul.mean(axis=(2, 1), keepdims=True)
    r3 = mul.sum(axis=2).reshape(-1, 3, 1)
    return mul + mean2 - r3


y3 = f3(kernel, bias)
lab3 = rng3.uniform(-1, 1, y3.shape)


def fd_grads(f, ws, lab):
    """central differences of the MSE loss over each weight, in float64"""
    out = []
    for i, w in enumerate(ws):
        g = np.zeros_like(w)
        for j in np.ndindex(w.shape):
            e = 1e-6
            up = [v.copy() for v in ws]
            dn = [v.copy() for v in ws]
            up[i][j] += e
            dn[i][j] -= e
            g[j] = (((f(*up) - lab) ** 2).mean() - ((f(*dn) - lab) ** 2).mean()) / (2 * e)
        out.append(g)
    return out


def case(name, m, y, lab=None, weights=None, grads=None):
    lab = rng.uniform(-1, 1, y.shape) if lab is None else lab
    fl = lambda a: [float(v) for v in np.asarray(a, np.float32).ravel()]
    y32 = np.asarray(y, np.float32)
    return {"name": name, "model": json.dumps(m), "batch": B,
            "out_dims": list(y.shape[1:]), "x": fl(x), "labels": fl(lab),
            "output": fl(y), "loss": float(((y32 - lab.astype(np.float32)) ** 2).mean()),
            "weights": {k: fl(v) for k, v in (weights or {}).items()},
            "grads": {k: fl(v) for k, v in (grads or {}).items()}}


# Abs, Log, Max, Min and Prod after the Dense layer. Max over (d, d)
# along time and Min over (d, d) along the last axis: every extreme is a
# tie of two, whose gradient TensorFlow splits in halves (math_grad.py
# _MinOrMaxGrad), so d's gradient is dy once, as the finite differences of
# max(d, d) = d say. Prod of Relu(d) along time meets exact zeros, whose
# gradients must be the product of the others (_ProdGrad), not 0 / 0.
m4 = model([
    inp("x"), d_layer,
    tfop("Abs_1", "Abs", ["d"]),
    tfop("AddV2_1", "AddV2", [P + "Abs_1"], {"1": 0.5}),
    tfop("Log_1", "Log", [P + "AddV2_1"]),
    tfop("concat_t", "ConcatV2", ["d", "d"], {"2": 1}, attr=dict(idx, N={"i": "2"})),
    tfop("Max_1", "Max", [P + "concat_t"], {"1": [1]}, attr=dict(idx, keep_dims={"b": True})),
    tfop("concat_f", "ConcatV2", ["d", "d"], {"2": -1}, attr=dict(idx, N={"i": "2"})),
    tfop("Min_1", "Min", [P + "concat_f"], {"1": -1}, attr=dict(idx, keep_dims={"b": False})),
    tfop("Reshape_1", "Reshape", [P + "Min_1"], {"1": [-1, T, 1]},
         attr={"Tshape": {"type": "DT_INT32"}}),
    tfop("Prod_1", "Prod", [P + "Log_1"], {"1": [-1]}, attr=dict(idx, keep_dims={"b": True})),
    tfop("Relu_1", "Relu", ["d"]),
    tfop("Prod_2", "Prod", [P + "Relu_1"], {"1": [1]}, attr=dict(idx, keep_dims={"b": True})),
    tfop("AddV2_2", "AddV2", [P + "Log_1", P + "Max_1"]),
    tfop("AddV2_3", "AddV2", [P + "AddV2_2", P + "Reshape_1"]),
    tfop("AddV2_4", "AddV2", [P + "AddV2_3", P + "Prod_1"]),
    tfop("AddV2_5", "AddV2", [P + "AddV2_4", P + "Prod_2"]),
], P + "AddV2_5")
rng4 = np.random.default_rng(13)
kernel4 = rng4.uniform(-0.8, 0.8, (F, U))
bias4 = rng4.uniform(-0.3, 0.3, (U,))


def f4(k, b):
    h = x @ k + b  # (B, T, U)
    lg = np.log(np.abs(h) + 0.5)
    mx = np.concatenate([h, h], axis=1).max(axis=1, keepdims=True)  # (B, 1, U)
    mn = np.concatenate([h, h], axis=-1).min(axis=-1).reshape(-1, T, 1)
    p1 = lg.prod(axis=-1, keepdims=True)  # (B, T, 1)
    p2 = np.maximum(h, 0).prod(axis=1, keepdims=True)  # (B, 1, U)
    return lg + mx + mn + p1 + p2


y4 = f4(kernel4, bias4)
lab4 = rng4.uniform(-1, 1, y4.shape)
assert (np.maximum(x @ kernel4 + bias4, 0) == 0).any(), "Prod_2 should meet zeros"

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tfop_ref.json")
with open(out, "w") as f:
    json.dump({"generator": "gen_tfop_fixtures.py (NumPy %s)" % np.__version__,
               "cases": [case("TensorFlowOpLayer ops", m1, y1),
                         case("TFOpLambda constant first", m2, y2),
                         case("TensorFlowOpLayer reductions and shapes", m3, y3, lab3,
                              {"d/kernel": kernel, "d/bias": bias},
                              dict(zip(("d/kernel", "d/bias"),
                                       fd_grads(f3, [kernel, bias], lab3)))),
                         case("TensorFlowOpLayer Abs, Log, Max, Min, Prod", m4, y4, lab4,
                              {"d/kernel": kernel4, "d/bias": bias4},
                              dict(zip(("d/kernel", "d/bias"),
                                       fd_grads(f4, [kernel4, bias4], lab4))))]},
              f, separators=(",", ":"))
    f.write("\n")
print(out, os.path.getsize(out), "bytes")
