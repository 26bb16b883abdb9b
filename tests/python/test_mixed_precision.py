"""Keras' mixed_bfloat16 through the Python client: the
keras.mixed_precision API (the global policy a layer takes when it is
created, a layer's own dtype), the policies in the model's JSON as Keras 2
writes them, the compile report's per-op precision, compile(precision=),
and the refusal of a daemon whose oneDNN may not use bf16 instructions
(ONEDNN_MAX_CPU_ISA=AVX512_CORE, read by oneDNN itself)."""
import json
import os

import numpy as np
import pytest

import rtrain
from rtrain import layers as L
from rtrain import mixed_precision

from conftest import Daemon


@pytest.fixture
def policy_reset():
    yield
    mixed_precision.set_global_policy("float32")


def _has_bf16():
    with open("/proc/cpuinfo") as f:
        return " avx512_bf16" in f.read()


def _model():
    return rtrain.Sequential([
        L.Dense(16, activation="relu", input_shape=(4,)),
        L.Dense(3),
        L.Activation("softmax", dtype="float32")])


def test_policy_api(policy_reset):
    assert mixed_precision.global_policy().name == "float32"
    mixed_precision.set_global_policy("mixed_bfloat16")
    p = mixed_precision.global_policy()
    assert (p.name, p.compute_dtype, p.variable_dtype) == (
        "mixed_bfloat16", "bfloat16", "float32")
    assert mixed_precision.get_global_policy() == p
    with pytest.raises(ValueError, match="mixed_float16"):
        mixed_precision.set_global_policy("mixed_float16")
    with pytest.raises(ValueError, match="not supported"):
        L.Dense(3, dtype="float16")
    mixed_precision.set_global_policy(None)
    assert mixed_precision.global_policy().name == "float32"


def test_policy_in_json(policy_reset):
    mixed_precision.set_global_policy("mixed_bfloat16")
    m = _model()
    mixed_precision.set_global_policy("float32")
    later = L.Dense(2)  # created after the reset: float32, as in Keras
    assert later.dtype_policy.name == "float32"
    layers = json.loads(m.to_json())["config"]["layers"]
    dt = {l["config"]["name"]: l["config"].get("dtype") for l in layers}
    pol = {"class_name": "Policy", "config": {"name": "mixed_bfloat16"}}
    names = [l["config"]["name"] for l in layers if l["class_name"] != "InputLayer"]
    assert dt[names[0]] == pol and dt[names[1]] == pol
    assert dt[names[2]] == "float32"
    # and back: a JSON's policies make the layers' (Keras 3's DTypePolicy too)
    again = rtrain.models.model_from_json(m.to_json())
    assert [l.dtype_policy.name for l in again.layers][-3:] == [
        "mixed_bfloat16", "mixed_bfloat16", "float32"]


def _ops(model):
    return {name: (op, prec) for name, op, prec in model.compiled.report["ops"]}


def test_report_and_fit(client, iris, policy_reset):
    xtr, ytr, xte, yte = iris
    mixed_precision.set_global_policy("mixed_bfloat16")
    m = _model()
    mixed_precision.set_global_policy("float32")
    if not _has_bf16():  # a CPU without bf16: the daemon refuses
        with pytest.raises(rtrain.FailedPrecondition, match="no bf16"):
            m.compile(optimizer="adam", loss="sparse_categorical_crossentropy",
                      batch_size=16, client=client)
            m.compiled.report
        return
    m.compile(optimizer="adam", loss="sparse_categorical_crossentropy",
              metrics=["accuracy"], batch_size=16, client=client)
    ops = _ops(m)
    rep = m.compiled.report
    assert rep["bf16_ops"] == 2, ops
    # the two Dense layers multiply in bf16 (cpu fuses the first's ReLU:
    # "Dense+Relu"; ref runs it as its own float32 op); everything else,
    # the Softmax included, stays float32
    bf = sorted(n for n, (o, p) in ops.items() if p == "mixed_bfloat16")
    assert bf == ["dense", "dense_1"], ops
    assert all(ops[n][0].startswith("Dense") for n in bf), ops
    assert all(p == "float32" for n, (o, p) in ops.items() if n not in bf), ops
    assert "Softmax" in [o for o, p in ops.values() if p == "float32"], ops
    h = m.fit(xtr, ytr, epochs=40, verbose=0)
    assert np.isfinite(h.history["loss"]).all()
    loss, acc = m.evaluate(xte, yte, verbose=0)
    assert acc > 0.85, acc

    # precision= for the whole model: float32 turns the policies off
    f = _model()
    f.compile(optimizer="adam", loss="sparse_categorical_crossentropy",
              batch_size=16, client=client, precision="float32")
    assert f.compiled.report["bf16_ops"] == 0
    g = _model()
    g.compile(optimizer="adam", loss="sparse_categorical_crossentropy",
              batch_size=16, client=client, precision="bf16")
    assert g.compiled.report["bf16_ops"] == 2
    with pytest.raises(ValueError, match="not supported"):
        g.compile(optimizer="adam", loss="mse", client=client,
                  precision="mixed_float16")


def test_refused_without_bf16(iris, policy_reset):
    os.environ["ONEDNN_MAX_CPU_ISA"] = "AVX512_CORE"
    try:
        d = Daemon()
    finally:
        del os.environ["ONEDNN_MAX_CPU_ISA"]
    try:
        c = rtrain.connect(d.addr, timeout=30)
        m = _model()
        if c.info()["device"]["backend"] == "ref":
            # ref emulates bf16 in plain C: no CPU instruction (nor oneDNN's
            # cap) is involved, so it still compiles the policy
            m.compile(optimizer="adam", loss="sparse_categorical_crossentropy",
                      batch_size=16, client=c, precision="mixed_bfloat16")
            assert m.compiled.report["bf16_ops"] == 2
        else:
            with pytest.raises(rtrain.FailedPrecondition,
                               match="no bf16 instructions"):
                m.compile(optimizer="adam", loss="sparse_categorical_crossentropy",
                          batch_size=16, client=c, precision="mixed_bfloat16")
                m.compiled.report
        # the daemon keeps serving: float32 compiles and trains
        f = _model()
        f.compile(optimizer="adam", loss="sparse_categorical_crossentropy",
                  batch_size=16, client=c)
        f.fit(iris[0], iris[1], epochs=1, verbose=0)
        assert f.compiled.report["bf16_ops"] == 0
        assert d.alive()
        c.close()
    finally:
        d.stop()
