#!/usr/bin/python3
"""gen_attn_fixtures.py - references for Keras' MultiHeadAttention and Dot
that rtrain did not compute (tests/keras_import/test_keras_tfjs.c "check"
holds rtrain to them; ctest needs neither torch nor node).

  models   write the test models, Keras model JSON in Keras 2's and
           Keras 3's forms, to tests/fixtures/keras-attn/ (the Dot models
           go through TensorFlow.js: gen_tfjs_fixtures.js --attn)
  mha      for every MultiHeadAttention model there: rtrain draws the
           initial weights (test_keras_tfjs dump), this script computes
           with PyTorch (float64) the predictions, the loss and the weights
           after 3 SGD and 3 Adam steps, written as test_keras_tfjs.c's
           fixtures to tests/keras_import/attn/<model>.json

    /usr/bin/python3 tests/keras_import/attn/gen_attn_fixtures.py models .
    /usr/bin/python3 tests/keras_import/attn/gen_attn_fixtures.py mha . \\
        build/tests/keras_import/test_keras_tfjs

TensorFlow.js 4.22 has a MultiHeadAttention class in its sources, but its
npm bundle neither registers nor exports it, so the attention here is
PyTorch's. It is computed two ways, which must agree (1e-12):
  - a transcription of keras/src/layers/attention/multi_head_attention.py
    (keras-team/keras at 3422977a, 2026-08): EinsumDense projections with
    _build_proj_equation's equations, query * 1/sqrt(key_dim), the
    dot-product and combine einsums of _build_attention_equation, the
    softmax over the key attention axes with masked scores replaced by
    -1e9 (keras/src/layers/activations/softmax.py), the causal mask of
    _compute_causal_mask, the output EinsumDense;
  - torch.nn.MultiheadAttention (an independent implementation) with the
    weights mapped from Keras' layout, where its form allows (key_dim *
    num_heads == the query's dim, no output_shape, one attention axis).
The rest of each model (Dense, LayerNormalization, Add, pooling, Flatten,
Softmax, the loss, Keras' Adam) are written out below after Keras'
definitions. The data and the sampled weights follow test_keras_tfjs.c's
header comment; MultiHeadAttention's dropout is compared at rate 0 (a
"derived" copy, as test_keras_tfjs.c derives it).
"""
import json
import math
import os
import string
import struct
import subprocess
import sys
import tempfile

import numpy as np

SAMPLES = 64
N, BATCH = 12, 4


def mix(x):
    x &= 0xffffffff
    x ^= x >> 16
    x = (x * 0x7feb352d) & 0xffffffff
    x ^= x >> 15
    x = (x * 0x846ca68b) & 0xffffffff
    x ^= x >> 16
    return x


# ----------------------------------------------------------------- models

def init_cfg(name):
    if name in ("Zeros", "Ones"):
        return {}
    if name == "RandomNormal":
        return {"mean": 0.0, "stddev": 0.05, "seed": None}
    return {"seed": None}


def k2_init(name):
    return {"class_name": name, "config": init_cfg(name)}


def k3_init(name):
    return {"module": "keras.initializers", "class_name": name, "config": init_cfg(name),
            "registered_name": None}


# Biases start at RandomNormal(0, 0.05), not Keras' zeros: a key bias (and
# the bias of a Dense feeding the key) adds the same amount to every score
# of a row, so its gradient is exactly 0 and each side's value after a step
# is its own float rounding; test_keras_tfjs.c holds a weight to its
# parameter's RMS, which must not be 0.
BIAS = "RandomNormal"


def k2_input(name, shape):
    return {"class_name": "InputLayer", "name": name, "inbound_nodes": [],
            "config": {"batch_input_shape": [None] + shape, "dtype": "float32",
                       "sparse": False, "ragged": False, "name": name}}


def k2_layer(cls, name, cfg, inbound):
    c = {"name": name, "trainable": True, "dtype": "float32"}
    c.update(cfg)
    return {"class_name": cls, "name": name, "config": c, "inbound_nodes": inbound}


def k2_dense(name, units, src, act="linear"):
    return k2_layer("Dense", name, {
        "units": units, "activation": act, "use_bias": True,
        "kernel_initializer": k2_init("GlorotUniform"), "bias_initializer": k2_init(BIAS),
        "kernel_regularizer": None, "bias_regularizer": None, "activity_regularizer": None,
        "kernel_constraint": None, "bias_constraint": None}, [[[src, 0, 0, {}]]])


def k2_mha(name, heads, kd, vd, kwargs, q, shapes, dropout=0.0, axes=None, use_bias=True,
           output_shape=None):
    return k2_layer("MultiHeadAttention", name, {
        "num_heads": heads, "key_dim": kd, "value_dim": vd, "dropout": dropout,
        "use_bias": use_bias, "output_shape": output_shape, "attention_axes": axes,
        "kernel_initializer": k2_init("GlorotUniform"), "bias_initializer": k2_init(BIAS),
        "kernel_regularizer": None, "bias_regularizer": None, "activity_regularizer": None,
        "kernel_constraint": None, "bias_constraint": None,
        "query_shape": shapes[0], "key_shape": shapes[1], "value_shape": shapes[2]},
        [[[q, 0, 0, kwargs]]])


def k2_model(name, layers, inp, out):
    return {"class_name": "Functional", "keras_version": "2.13.1", "backend": "tensorflow",
            "config": {"name": name, "layers": layers, "input_layers": [[inp, 0, 0]],
                       "output_layers": [[out, 0, 0]]}}


def k3_tensor(src, shape):
    return {"class_name": "__keras_tensor__",
            "config": {"shape": shape, "dtype": "float32", "keras_history": [src, 0, 0]}}


def k3_layer(cls, name, cfg, args, kwargs=None, build=None):
    c = {"name": name, "trainable": True,
         "dtype": {"module": "keras", "class_name": "DTypePolicy",
                   "config": {"name": "float32"}, "registered_name": None}}
    c.update(cfg)
    lay = {"module": "keras.layers", "class_name": cls, "config": c, "registered_name": None,
           "name": name, "inbound_nodes": [{"args": args, "kwargs": kwargs or {}}]}
    if build:
        lay["build_config"] = build
    return lay


def k3_input(name, shape):
    return {"module": "keras.layers", "class_name": "InputLayer", "registered_name": None,
            "name": name, "inbound_nodes": [],
            "config": {"batch_shape": [None] + shape, "dtype": "float32", "sparse": False,
                       "name": name}}


def k3_dense(name, units, src, shape, act="linear"):
    return k3_layer("Dense", name, {
        "units": units, "activation": act, "use_bias": True,
        "kernel_initializer": k3_init("GlorotUniform"), "bias_initializer": k3_init(BIAS),
        "kernel_regularizer": None, "bias_regularizer": None, "kernel_constraint": None,
        "bias_constraint": None}, [k3_tensor(src, shape)])


def k3_mha(name, heads, kd, vd, args, kwargs, shapes, axes=None, use_bias=True,
           output_shape=None, window=None):
    extra = {"sliding_window": window} if window else {}
    return k3_layer("MultiHeadAttention", name, dict(extra, **{
        "num_heads": heads, "key_dim": kd, "value_dim": vd, "dropout": 0.0,
        "use_bias": use_bias, "output_shape": output_shape, "attention_axes": axes,
        "kernel_initializer": k3_init("GlorotUniform"), "bias_initializer": k3_init(BIAS),
        "kernel_regularizer": None, "bias_regularizer": None, "activity_regularizer": None,
        "kernel_constraint": None, "bias_constraint": None, "seed": None}), args, kwargs,
        {"shapes_dict": {"query_shape": shapes[0], "value_shape": shapes[2],
                         "key_shape": shapes[1]}})


def k3_model(name, layers, inp, out):
    return {"module": "keras", "class_name": "Functional", "registered_name": "Functional",
            "config": {"name": name, "trainable": True, "layers": layers,
                       "input_layers": [[inp, 0, 0]], "output_layers": [[out, 0, 0]]}}


def models():
    m = {}
    # Keras 2 self-attention: value as a keyword argument (the form the
    # corpus' parasite_cnn_transformer.json has), attention_axes [1]
    m["mha_self_k2.json"] = k2_model("mha_self", [
        k2_input("x", [5, 8]),
        k2_mha("mha", 2, 4, 4, {"value": ["x", 0, 0]}, "x", [[None, 5, 8]] * 3, axes=[1]),
        k2_layer("GlobalAveragePooling1D", "gap", {"data_format": "channels_last",
                                                   "keepdims": False}, [[["mha", 0, 0, {}]]]),
        k2_dense("out", 3, "gap", "softmax")], "x", "out")
    # Keras 2: Embedding(mask_zero) gives the query's and the value's step
    # masks, so the attention mask (B, T, S) is q_mask & v_mask (Keras'
    # _compute_attention_mask); GlobalAveragePooling1D averages the kept
    # steps (the output keeps the query's mask)
    m["mha_mask_zero_k2.json"] = k2_model("mha_mask", [
        k2_input("x", [6]),
        k2_layer("Embedding", "emb", {
            "input_dim": 10, "output_dim": 8,
            "embeddings_initializer": {"class_name": "RandomUniform",
                                       "config": {"minval": -0.5, "maxval": 0.5, "seed": None}},
            "embeddings_regularizer": None, "activity_regularizer": None,
            "embeddings_constraint": None, "mask_zero": True, "input_length": 6},
            [[["x", 0, 0, {}]]]),
        k2_mha("mha", 2, 4, 4, {"value": ["emb", 0, 0]}, "emb", [[None, 6, 8]] * 3),
        k2_layer("GlobalAveragePooling1D", "gap", {"data_format": "channels_last",
                                                   "keepdims": False}, [[["mha", 0, 0, {}]]]),
        k2_dense("out", 3, "gap", "softmax")], "x", "out")
    # Keras 2 transformer block: causal mask, dropout (derived to 0),
    # residual, LayerNormalization, feed-forward
    m["mha_causal_block_k2.json"] = k2_model("mha_block", [
        k2_input("x", [6, 8]),
        k2_mha("mha", 2, 4, 4, {"value": ["x", 0, 0], "use_causal_mask": True}, "x",
               [[None, 6, 8]] * 3, dropout=0.2),
        k2_layer("Add", "res", {}, [[["x", 0, 0, {}], ["mha", 0, 0, {}]]]),
        k2_layer("LayerNormalization", "ln", {
            "axis": [2], "epsilon": 0.001, "center": True, "scale": True,
            "beta_initializer": k2_init("Zeros"), "gamma_initializer": k2_init("Ones"),
            "beta_regularizer": None, "gamma_regularizer": None, "beta_constraint": None,
            "gamma_constraint": None}, [[["res", 0, 0, {}]]]),
        k2_dense("ff", 8, "ln", "relu"),
        k2_layer("Flatten", "flat", {"data_format": "channels_last"}, [[["ff", 0, 0, {}]]]),
        k2_dense("out", 2, "flat", "linear")], "x", "out")
    # Keras 3 cross-attention: query, value positional, key a keyword;
    # three sizes of key_dim, value_dim and the inputs, no biases,
    # output_shape [4]
    m["mha_cross_k3.json"] = k3_model("mha_cross", [
        k3_input("x", [5, 6]),
        k3_dense("q", 6, "x", [None, 5, 6]),
        k3_dense("v", 7, "x", [None, 5, 6]),
        k3_dense("k", 5, "x", [None, 5, 6]),
        k3_mha("mha", 3, 3, 5, [k3_tensor("q", [None, 5, 6]), k3_tensor("v", [None, 5, 7])],
               {"key": k3_tensor("k", [None, 5, 5])},
               [[None, 5, 6], [None, 5, 5], [None, 5, 7]], use_bias=False, output_shape=[4]),
        k3_layer("Flatten", "flat", {"data_format": "channels_last"},
                 [k3_tensor("mha", [None, 5, 4])]),
        k3_dense("out", 3, "flat", [None, 20], "linear")], "x", "out")
    # Keras 3 (3.13+): sliding_window 3 with the causal mask (Mistral's
    # band), query and value positional, use_causal_mask a keyword
    m["mha_window_k3.json"] = k3_model("mha_window", [
        k3_input("x", [7, 6]),
        k3_mha("mha", 2, 3, 3, [k3_tensor("x", [None, 7, 6]), k3_tensor("x", [None, 7, 6])],
               {"use_causal_mask": True}, [[None, 7, 6]] * 3, window=3),
        k3_layer("Flatten", "flat", {"data_format": "channels_last"},
                 [k3_tensor("mha", [None, 7, 6])]),
        k3_dense("out", 2, "flat", [None, 42], "linear")], "x", "out")
    # Keras 3, a (B, 3, 4, 6) input: attention over axis 2 only (axis 1 a
    # batch dim of the attention), then over both axes (the default)
    for tag, axes in (("axis2", [2]), ("both", None)):
        m["mha_rank4_%s_k3.json" % tag] = k3_model("mha_r4", [
            k3_input("x", [3, 4, 6]),
            k3_mha("mha", 2, 3, 2, [k3_tensor("x", [None, 3, 4, 6]),
                                    k3_tensor("x", [None, 3, 4, 6])], {},
                   [[None, 3, 4, 6]] * 3, axes=axes),
            k3_layer("Flatten", "flat", {"data_format": "channels_last"},
                     [k3_tensor("mha", [None, 3, 4, 6])]),
            k3_dense("out", 2, "flat", [None, 72], "softmax")], "x", "out")
    # Dot (TensorFlow.js' reference, gen_tfjs_fixtures.js --attn)
    m["dot_seq_k2.json"] = k2_model("dot_seq", [
        k2_input("x", [6, 4]),
        k2_dense("a", 3, "x"), k2_dense("b", 3, "x"),
        k2_layer("Dot", "dot", {"axes": 2, "normalize": False},
                 [[["a", 0, 0, {}], ["b", 0, 0, {}]]]),
        k2_layer("Flatten", "flat", {"data_format": "channels_last"}, [[["dot", 0, 0, {}]]]),
        k2_dense("out", 3, "flat", "softmax")], "x", "out")
    m["dot_pair_normalize_k2.json"] = k2_model("dot_pair", [
        k2_input("x", [6, 4]),
        k2_dense("a", 3, "x"), k2_dense("b", 5, "x"),
        k2_layer("Dot", "dot", {"axes": [1, 1], "normalize": True},
                 [[["a", 0, 0, {}], ["b", 0, 0, {}]]]),
        k2_layer("Flatten", "flat", {"data_format": "channels_last"}, [[["dot", 0, 0, {}]]]),
        k2_dense("out", 1, "flat", "linear")], "x", "out")
    m["dot_vec_k2.json"] = k2_model("dot_vec", [
        k2_input("x", [8]),
        k2_dense("a", 4, "x", "tanh"), k2_dense("b", 4, "x"),
        k2_layer("Dot", "dot", {"axes": -1, "normalize": False},
                 [[["a", 0, 0, {}], ["b", 0, 0, {}]]]),
        k2_dense("out", 1, "dot", "sigmoid")], "x", "out")
    return m


# ------------------------------------------------- Keras' attention, in torch

def letters(i):
    return string.ascii_lowercase[i]


def build_proj_equation(free_dims, bound_dims, output_dims):
    """_build_proj_equation"""
    inp = ker = out = bias = ""
    off = 0
    for i in range(free_dims):
        inp += letters(i + off)
        out += letters(i + off)
    off += free_dims
    for i in range(bound_dims):
        inp += letters(i + off)
        ker += letters(i + off)
    off += bound_dims
    for i in range(output_dims):
        ker += letters(i + off)
        out += letters(i + off)
        bias += letters(i + off)
    return "%s,%s->%s" % (inp, ker, out), bias, len(out)


def build_attention_equation(rank, attn_axes):
    """_build_attention_equation"""
    target = "".join(letters(i) for i in range(rank))
    batch_dims = tuple(i for i in range(rank) if i not in attn_axes + (rank - 1,))
    off = rank
    source = ""
    for i in range(rank):
        if i in batch_dims or i == rank - 1:
            source += target[i]
        else:
            source += letters(off)
            off += 1
    product = "".join([target[i] for i in batch_dims] + [target[i] for i in attn_axes] +
                      [source[i] for i in attn_axes])
    return ("%s,%s->%s" % (source, target, product), "%s,%s->%s" % (product, source, target),
            len(product))


def einsum_dense(torch, x, kernel, bias, eq):
    y = torch.einsum(eq, x, kernel)
    return y + bias if bias is not None else y


def keras_mha(torch, cfg, w, q, v, k, causal, qmask=None, vmask=None):
    """MultiHeadAttention.call, training=False (dropout at rate 0); qmask,
    vmask: the inputs' step masks (B, T), (B, S)"""
    H, kd = cfg["num_heads"], cfg["key_dim"]
    vd = cfg.get("value_dim") or kd
    if k is None:
        k = v
    rq = q.dim()
    eq, _, out_rank = build_proj_equation(rq - 1, 1, 2)
    Q = einsum_dense(torch, q, w["query/kernel"], w.get("query/bias"), eq)
    eq, _, _ = build_proj_equation(k.dim() - 1, 1, 2)
    K = einsum_dense(torch, k, w["key/kernel"], w.get("key/bias"), eq)
    eq, _, out_rank = build_proj_equation(v.dim() - 1, 1, 2)
    V = einsum_dense(torch, v, w["value/kernel"], w.get("value/bias"), eq)
    axes = cfg.get("attention_axes")
    rank = out_rank
    if axes is None:
        axes = tuple(range(1, rank - 2))
    else:
        axes = tuple(a if a >= 0 else (rank - 1) + a for a in axes)
    dot_eq, comb_eq, scores_rank = build_attention_equation(rank, axes)
    norm_axes = tuple(range(scores_rank - len(axes), scores_rank))
    Q = Q * (1.0 / math.sqrt(float(kd)))
    S = torch.einsum(dot_eq, K, Q)
    # _compute_attention_mask: query mask [B, T, 1] & value mask [B, 1, S]
    # & the causal [1, T, S]; _masked_softmax expands it over the heads
    mask = None
    if qmask is not None:
        mask = qmask[:, :, None]
    if vmask is not None:
        mask = vmask[:, None, :] if mask is None else mask & vmask[:, None, :]
    T, Sk = q.shape[1], v.shape[1]
    if causal:
        m = torch.tensor([[i >= j for j in range(Sk)] for i in range(T)])[None]
        mask = m if mask is None else mask & m
    if cfg.get("sliding_window"):  # _compute_sliding_window_mask
        m = torch.tensor([[abs(i - j) < cfg["sliding_window"] for j in range(Sk)]
                          for i in range(T)])[None]
        mask = m if mask is None else mask & m
    if mask is not None:
        S = torch.where(mask[:, None], S, torch.tensor(-1e9, dtype=S.dtype))
    # softmax over the key attention axes: exp(x - logsumexp(x))
    P = torch.exp(S - torch.logsumexp(S, dim=norm_axes, keepdim=True))
    O = torch.einsum(comb_eq, P, V)
    out_shape = cfg.get("output_shape") or [q.shape[-1]]
    if isinstance(out_shape, int):
        out_shape = [out_shape]
    eq, _, _ = build_proj_equation(rq - 1, 2, len(out_shape))
    return einsum_dense(torch, O, w["attention_output/kernel"], w.get("attention_output/bias"),
                        eq)


def torch_mha(torch, cfg, w, q, causal):
    """the same self-attention through torch.nn.MultiheadAttention"""
    H, kd, D = cfg["num_heads"], cfg["key_dim"], q.shape[-1]
    mha = torch.nn.MultiheadAttention(D, H, bias=True, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        for i, n in enumerate(("query", "key", "value")):
            mha.in_proj_weight[i * D:(i + 1) * D] = w[n + "/kernel"].reshape(D, H * kd).T
            mha.in_proj_bias[i * D:(i + 1) * D] = w[n + "/bias"].reshape(H * kd)
        mha.out_proj.weight[:] = w["attention_output/kernel"].reshape(H * kd, D).T
        mha.out_proj.bias[:] = w["attention_output/bias"]
    T = q.shape[1]
    am = torch.triu(torch.ones(T, T, dtype=torch.bool), 1) if causal else None
    return mha(q, q, q, attn_mask=am, need_weights=False)[0]


# ------------------------------------------------------------ the models run

def tensor_of(torch, ref):
    return ref


class Net:
    """a Functional model of the layers this file writes, in float64"""

    def __init__(self, torch, model, params):
        self.torch = torch
        self.layers = model["config"]["layers"]
        self.out = model["config"]["output_layers"][0][0]
        self.w = {p["name"]: torch.tensor(p["v"].reshape(p["dims"]), dtype=torch.float64,
                                          requires_grad=bool(p["trainable"]))
                  for p in params}
        self.order = [p["name"] for p in params]

    def lw(self, layer):
        pre = layer + "/"
        return {n[len(pre):]: t for n, t in self.w.items() if n.startswith(pre)}

    def sources(self, lay):
        node = lay["inbound_nodes"][0]
        kw = {}
        if isinstance(node, dict):
            args = [a["config"]["keras_history"][0] for a in node["args"]]
            for key, v in node["kwargs"].items():
                kw[key] = v["config"]["keras_history"][0] if isinstance(v, dict) else v
        else:
            args = [r[0] for r in node]
            for key, v in (node[0][3] if len(node[0]) > 3 else {}).items():
                kw[key] = v[0] if isinstance(v, list) else v
        return args, kw

    def forward(self, x, check=None):
        torch = self.torch
        vals, masks = {}, {}
        for lay in self.layers:
            cls, name, cfg = lay["class_name"], lay["name"], lay["config"]
            if cls == "InputLayer":
                vals[name] = x
                continue
            args, kw = self.sources(lay)
            ins = [vals[a] for a in args]
            w = self.lw(name)
            if cls == "Dense":
                y = ins[0] @ w["kernel"] + w["bias"]
                act = cfg["activation"]
                if act == "relu":
                    y = torch.relu(y)
                elif act == "tanh":
                    y = torch.tanh(y)
                elif act == "sigmoid":
                    y = torch.sigmoid(y)
                elif act == "softmax":
                    y = torch.softmax(y, -1)
            elif cls == "Embedding":
                y = w["embeddings"][ins[0].long()]
                if cfg.get("mask_zero"):
                    masks[name] = ins[0] != 0
            elif cls == "MultiHeadAttention":
                q = ins[0]
                vname = args[1] if len(args) > 1 else kw["value"]
                v = vals[vname]
                k = vals[kw["key"]] if "key" in kw else None
                causal = bool(kw.get("use_causal_mask", False))
                qm, vm = masks.get(args[0]), masks.get(vname)
                y = keras_mha(torch, cfg, w, q, v, k, causal, qm, vm)
                if qm is not None:
                    masks[name] = qm
                if check is not None and k is None and q is v and cfg["key_dim"] * \
                        cfg["num_heads"] == q.shape[-1] and not cfg.get("output_shape") and \
                        q.dim() == 3 and qm is None and not cfg.get("sliding_window"):
                    y2 = torch_mha(torch, cfg, w, q, causal)
                    check.append(float((y - y2).abs().max()))
            elif cls == "GlobalAveragePooling1D":
                m = masks.get(args[0])
                if m is None:
                    y = ins[0].mean(1)
                else:  # the kept steps' mean (Keras' masked pooling)
                    mf = m.to(ins[0].dtype)[:, :, None]
                    y = (ins[0] * mf).sum(1) / mf.sum(1)
            elif cls == "Add":
                y = ins[0] + ins[1]
            elif cls == "LayerNormalization":
                mu = ins[0].mean(-1, keepdim=True)
                var = ((ins[0] - mu) ** 2).mean(-1, keepdim=True)
                y = (ins[0] - mu) / torch.sqrt(var + cfg["epsilon"]) * w["gamma"] + w["beta"]
            elif cls == "Flatten":
                y = ins[0].reshape(ins[0].shape[0], -1)
            elif cls == "Dropout":
                y = ins[0]
            else:
                raise ValueError("no %s here" % cls)
            vals[name] = y
        return vals[self.out]


def read_dump(path):
    b = open(path, "rb").read()
    assert b[:4] == b"RTW1"
    o = 4
    n, = struct.unpack_from("<I", b, o)
    o += 4
    out = []
    for _ in range(n):
        nl, = struct.unpack_from("<I", b, o)
        o += 4
        name = b[o:o + nl].decode()
        o += nl
        tr, nd = struct.unpack_from("<II", b, o)
        o += 8
        dims = list(struct.unpack_from("<%di" % nd, b, o))
        o += 4 * nd
        cnt = int(np.prod(dims)) if dims else 1
        v = np.frombuffer(b, dtype="<f4", count=cnt, offset=o).copy()
        o += 4 * cnt
        out.append({"name": name, "trainable": tr, "dims": dims, "v": v})
    return out


def f32(x):
    return float(np.float32(x))


def sampled(v):
    v = np.asarray(v, dtype=np.float32).ravel()
    n = len(v)
    if n <= SAMPLES:
        return [f32(a) for a in v]
    stride = n // SAMPLES
    return [f32(v[k * n // SAMPLES + (k * 131) % stride]) for k in range(SAMPLES)]


def weights_of(net):
    out = []
    for n in net.order:
        v = net.w[n].detach().numpy().astype(np.float32).ravel()
        out.append({"name": n, "rms": f32(math.sqrt(float(np.mean(v.astype(np.float64) ** 2)))),
                    "values": sampled(v)})
    return out


def loss_of(torch, kind, p, y):
    if kind == "sparse_categorical_crossentropy":
        # Keras: from the Softmax's probabilities, clipped to [1e-7, 1 - 1e-7]
        pc = p.clamp(1e-7, 1 - 1e-7)
        return -torch.log(pc.gather(1, y.view(-1, 1))).mean()
    # mean_squared_error: the mean over the last axis, then over the batch
    return ((p - y) ** 2).mean()


def run_mha(root, tool, rel, spec):
    import torch
    torch.set_default_dtype(torch.float64)
    model_path = os.path.join(root, rel)
    model = json.load(open(model_path))
    derived = []
    for lay in model["config"]["layers"]:
        if lay["class_name"] == "MultiHeadAttention" and lay["config"].get("dropout"):
            lay["config"]["dropout"] = 0.0
            derived.append(lay["config"]["name"])
    fd, tmp = tempfile.mkstemp(suffix=".bin")
    os.close(fd)
    info = json.loads(subprocess.check_output(
        [tool, "dump", model_path, "1" if derived else "0", "0", tmp]).decode())
    params = read_dump(tmp)
    os.unlink(tmp)
    if info["derived"] != ",".join(derived) and info["derived"] != " ".join(derived):
        print("  note: rtrain derived %r" % info["derived"])
    in_shape, out_shape = info["input"], info["output"]
    per = int(np.prod(in_shape))
    if spec.get("mod"):  # token indices (test_keras_tfjs.c's "index" inputs)
        x = np.array([mix(i ^ 0x5eed0001) % spec["mod"] for i in range(N * per)],
                     dtype=np.float32).reshape([N] + in_shape)
    else:
        x = np.array([((mix(i ^ 0x5eed0001) >> 22) - 512) / 512.0 for i in range(N * per)],
                     dtype=np.float32).reshape([N] + in_shape)
    if spec["labels"] == "sparse":
        y = np.array([mix(j ^ 0x1abe1000) % spec["classes"] for j in range(N)], dtype=np.int64)
    else:
        cnt = N * int(np.prod(out_shape))
        y = np.array([(mix(j ^ 0x1abe1000) >> 22) / 1024.0 for j in range(cnt)],
                     dtype=np.float32).reshape([N] + out_shape)
    X = torch.tensor(x, dtype=torch.float64)
    Y = torch.tensor(y) if spec["labels"] == "sparse" else torch.tensor(y, dtype=torch.float64)

    def fresh():
        return Net(torch, model, params)

    net = fresh()
    check = []
    with torch.no_grad():
        pred = net.forward(X[:4], check)
        ev = float(loss_of(torch, spec["loss"], net.forward(X), Y))
    for c in check:
        if not c <= 1e-12:
            raise SystemExit("%s: Keras' transcription and torch.nn.MultiheadAttention "
                             "differ by %g" % (rel, c))
    fx = {"model": rel, "n": N, "batch": BATCH,
          "x": {"kind": "index", "mod": spec["mod"]} if spec.get("mod") else {"kind": "uniform"},
          "loss": spec["loss"], "labels": spec["labels"], "derived": ",".join(derived),
          "reference": "PyTorch %s, float64: Keras' MultiHeadAttention transcribed "
                       "(multi_head_attention.py)%s" % (
                           torch.__version__,
                           "; torch.nn.MultiheadAttention agrees within %.1e" % max(check)
                           if check else "")}
    if spec["labels"] == "sparse":
        fx["classes"] = spec["classes"]
    fx["init"] = [{"name": p["name"], "sum": float(np.sum(p["v"].astype(np.float64))),
                   "sumsq": float(np.sum(p["v"].astype(np.float64) ** 2))} for p in params]
    fx["predict"] = {"rows": 4, "values": [f32(a) for a in pred.numpy().ravel()]}
    fx["evaluate"] = {"loss": f32(ev), "metrics": {}}
    for opt in ("sgd", "adam"):
        net = fresh()
        lr = spec["lr"] if opt == "sgd" else 0.01
        b1, b2, eps = 0.9, 0.999, 1e-3
        m = {n: torch.zeros_like(t) for n, t in net.w.items()}
        v = {n: torch.zeros_like(t) for n, t in net.w.items()}
        losses = []
        for s in range(3):
            xb, yb = X[s * BATCH:(s + 1) * BATCH], Y[s * BATCH:(s + 1) * BATCH]
            loss = loss_of(torch, spec["loss"], net.forward(xb), yb)
            losses.append(f32(float(loss)))
            tr = [n for n in net.order if net.w[n].requires_grad]
            grads = torch.autograd.grad(loss, [net.w[n] for n in tr])
            with torch.no_grad():
                for n, g in zip(tr, grads):
                    if opt == "sgd":
                        net.w[n] -= lr * g
                        continue
                    # keras/src/optimizers/adam.py
                    t = s + 1
                    m[n] = b1 * m[n] + (1 - b1) * g
                    v[n] = b2 * v[n] + (1 - b2) * g * g
                    alpha = lr * math.sqrt(1 - b2 ** t) / (1 - b1 ** t)
                    net.w[n] -= alpha * m[n] / (torch.sqrt(v[n]) + eps)
        ent = {"lr": lr, "losses": losses, "weights": weights_of(net)}
        if opt == "sgd":
            ent.update({"momentum": 0, "nesterov": 0})
        else:
            ent.update({"beta_1": b1, "beta_2": b2, "epsilon": eps})
        fx[opt] = ent
    return fx


MHA_SPECS = {
    "mha_mask_zero_k2.json": {"loss": "sparse_categorical_crossentropy", "labels": "sparse",
                              "classes": 3, "lr": 0.1, "mod": 4},
    "mha_window_k3.json": {"loss": "mean_squared_error", "labels": "float", "lr": 0.05},
    "mha_self_k2.json": {"loss": "sparse_categorical_crossentropy", "labels": "sparse",
                         "classes": 3, "lr": 0.1},
    "mha_causal_block_k2.json": {"loss": "mean_squared_error", "labels": "float", "lr": 0.05},
    "mha_cross_k3.json": {"loss": "mean_squared_error", "labels": "float", "lr": 0.05},
    "mha_rank4_axis2_k3.json": {"loss": "sparse_categorical_crossentropy", "labels": "sparse",
                                "classes": 2, "lr": 0.1},
    "mha_rank4_both_k3.json": {"loss": "sparse_categorical_crossentropy", "labels": "sparse",
                               "classes": 2, "lr": 0.1},
}


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("models", "mha"):
        raise SystemExit(__doc__)
    root = sys.argv[2]
    mdir = os.path.join(root, "tests/fixtures/keras-attn")
    if sys.argv[1] == "models":
        os.makedirs(mdir, exist_ok=True)
        for f, m in sorted(models().items()):
            with open(os.path.join(mdir, f), "w") as fh:
                json.dump(m, fh, indent=1)
                fh.write("\n")
        return
    tool = sys.argv[3]
    out = os.path.join(root, "tests/keras_import/attn")
    for f, spec in sorted(MHA_SPECS.items()):
        fx = run_mha(root, tool, "tests/fixtures/keras-attn/" + f, spec)
        with open(os.path.join(out, f), "w") as fh:
            json.dump(fx, fh)
            fh.write("\n")
        print("%s: loss %.6g, SGD %s" % (f, fx["evaluate"]["loss"], fx["sgd"]["losses"]))


if __name__ == "__main__":
    main()
