"""ONNX models from PyTorch through the Python client: compile from a path,
from bytes and with rtrain.from_onnx; train; and the export back: the
initializers of model.to_onnx() loaded into the PyTorch module through its
state_dict give the predictions rtrain's predict gives, to 1e-5. Bad models
get InvalidArgument naming the problem and the daemon keeps serving.

The models and data are tests/onnx/fixtures (gen_onnx_fixtures.py)."""
import importlib.util
import os
import struct

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as onh
import pytest
import torch

import rtrain

SRC = os.environ.get("RT_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
FIX = os.path.join(SRC, "tests", "onnx", "fixtures")


def _gen():
    spec = importlib.util.spec_from_file_location(
        "gen_onnx_fixtures", os.path.join(SRC, "tests", "onnx", "gen_onnx_fixtures.py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


GEN = _gen()


def load_ref(name):
    """x (float32; 4-D x NCHW, as PyTorch holds it: the fixtures keep it
    NHWC) and y of a fixture"""
    with open(os.path.join(FIX, name + "_ref.bin"), "rb") as f:
        b = f.read()
    magic, ver, n = struct.unpack_from("<III", b, 0)
    assert magic == 0x46525452 and ver == 1
    off, out = 12, {}
    for _ in range(n):
        nm = b[off:off + 64].split(b"\0")[0].decode()
        dt, nd, *dims = struct.unpack_from("<II4I", b, off + 64)
        off += 88
        cnt = int(np.prod(dims))
        w = {1: 4, 2: 4, 3: 2, 4: 1}[dt]
        a = np.frombuffer(b, {1: "<f4", 2: "<i4", 3: "<f2", 4: "u1"}[dt], cnt, off)
        out[nm] = a.reshape(dims[:nd])
        off += cnt * w
    x = out["x"]
    if x.dtype == np.uint8:
        x = x.astype(np.float32) * np.float32(out["scale"][0])
    if x.ndim == 4:
        x = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    return x.astype(np.float32), out["y"].astype(np.int64)


def torch_predict(name, onnx_bytes, x):
    """The generator's PyTorch module with the exported initializers as its
    state_dict, in eval mode, on x"""
    m = GEN.model(name)
    sd = m.state_dict()
    # which state_dict entry each initializer is: by name, or (PyTorch
    # renames some, e.g. PReLU's reshaped slope) by the untrained values
    orig = onnx.load(os.path.join(FIX, name + ".onnx"))
    key = {}
    for t in orig.graph.initializer:
        a = onh.to_array(t)
        if t.name in sd:
            key[t.name] = t.name
        elif a.dtype == np.float32:
            hits = [k for k, v in sd.items() if v.numel() == a.size and
                    v.dtype == torch.float32 and
                    np.array_equal(v.numpy().reshape(-1), a.reshape(-1))]
            assert len(hits) == 1, (t.name, hits)
            key[t.name] = hits[0]
    proto = onnx.load_from_string(onnx_bytes)
    new = dict(sd)
    for t in proto.graph.initializer:
        if t.name in key:
            k = key[t.name]
            new[k] = torch.from_numpy(onh.to_array(t).copy()).reshape(sd[k].shape)
    assert set(key.values()) | {k for k in sd if k.endswith("num_batches_tracked")} == set(sd)
    m.load_state_dict(new)
    m.eval()
    t = torch.from_numpy(x)
    with torch.no_grad():
        return m(t).numpy()


@pytest.mark.parametrize("name", ["wa", "wb", "wd", "rb", "mx", "kx", "ln"])
def test_train_export_into_pytorch(client, tmp_path, name):
    x, y = load_ref(name)
    path = os.path.join(FIX, name + ".onnx")
    model = client.compile(path, optimizer=rtrain.optimizers.SGD(0.02, momentum=0.9),
                           loss="sparse_categorical_crossentropy",
                           from_logits=name != "wa", batch_size=len(y) // 10,
                           shuffle=False)
    assert model.input_shape == x.shape[1:]
    before = model.predict(x, batch_size=len(y) // 10)
    model.fit(x, y, batch_size=len(y) // 10, epochs=1, verbose=0, shuffle=False)
    assert model.global_step == 10
    pred = model.predict(x, batch_size=len(y) // 10)
    assert np.max(np.abs(pred - before)) > 1e-4  # it trained
    out = tmp_path / (name + "_trained.onnx")
    data = model.to_onnx(str(out))
    assert out.read_bytes() == data
    ref = torch_predict(name, data, x)
    dev = float(np.max(np.abs(ref - pred)))
    print("%s: worst |PyTorch - rtrain predict| %.2e" % (name, dev))
    np.testing.assert_allclose(pred, ref, rtol=1e-5, atol=1e-5)
    # the export is the same graph: same nodes, same initializer names
    a, b = onnx.load(path), onnx.load_from_string(data)
    assert [n.op_type for n in a.graph.node] == [n.op_type for n in b.graph.node]
    assert sorted(t.name for t in a.graph.initializer) == \
        sorted(t.name for t in b.graph.initializer)


def test_bytes_and_from_onnx(client):
    x, y = load_ref("wa")
    with open(os.path.join(FIX, "wa.onnx"), "rb") as f:
        data = f.read()
    a = client.compile(data, loss="sparse_categorical_crossentropy", batch_size=10)
    b = rtrain.from_onnx(os.path.join(FIX, "wa.onnx"), client=client, batch_size=10)
    # both start from PyTorch's initialisation, whatever the seed
    np.testing.assert_array_equal(a.predict(x), b.predict(x))
    init = {t.name: onh.to_array(t) for t in onnx.load_from_string(data).graph.initializer}
    w = dict(a._prog.get_weights()[1])
    np.testing.assert_array_equal(w["fc.0.weight"], init["fc.0.weight"].T)
    with pytest.raises(TypeError):
        a.to_json()


def model_bytes(nodes, inputs, outputs, inits=(), opset=13):
    g = oh.make_graph(nodes, "g", inputs, outputs, list(inits))
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", opset)]).SerializeToString()


def vi(name, shape):
    return oh.make_tensor_value_info(name, onnx.TensorProto.FLOAT, shape)


def test_bad_models(client):
    comp = dict(loss="sparse_categorical_crossentropy", from_logits=True, batch_size=4)
    with pytest.raises(rtrain.InvalidArgument, match="not a serialized ONNX"):
        client.compile(b"\x0a\xff\xff\xff\xff\x0f garbage", **comp)
    w = onh.from_array(np.ones((4, 3), np.float32), "w")
    bad = model_bytes([oh.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                       oh.make_node("Celu", ["h"], ["a"], name="act1"),
                       oh.make_node("Hardmax", ["a"], ["y"], name="hm")],
                      [vi("x", ["N", 4])], [vi("y", ["N", 3])], [w])
    with pytest.raises(rtrain.InvalidArgument) as e:
        client.compile(bad, **comp)
    msg = str(e.value)
    assert "Celu (node 'act1')" in msg and "Hardmax (node 'hm')" in msg and "opset 13" in msg
    # many at once: every one is named through the daemon's status
    ops = ["Celu", "Hardmax", "Round", "Sin", "Cos", "Tan", "Asin", "Acos"]
    chain = [oh.make_node("MatMul", ["x", "w"], ["v0"], name="mm")]
    for i, op in enumerate(ops):
        chain.append(oh.make_node(op, ["v%d" % i], ["v%d" % (i + 1)], name="n_%s_%d" % (op, i)))
    chain.append(oh.make_node("Identity", ["v%d" % len(ops)], ["y"]))
    with pytest.raises(rtrain.InvalidArgument) as e:
        client.compile(model_bytes(chain, [vi("x", ["N", 4])], [vi("y", ["N", 3])], [w]), **comp)
    for i, op in enumerate(ops):
        assert "%s (node 'n_%s_%d')" % (op, op, i) in str(e.value)
    assert "8 unsupported operators at opset 13" in str(e.value)
    good = [oh.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    with pytest.raises(rtrain.InvalidArgument, match="opset 9"):
        client.compile(model_bytes(good, [vi("x", ["N", 4])], [vi("y", ["N", 3])], [w],
                                   opset=9), **comp)
    with pytest.raises(rtrain.InvalidArgument, match="dimension 1 is dynamic"):
        client.compile(model_bytes(good, [vi("x", ["N", "F"])], [vi("y", ["N", 3])], [w]),
                       **comp)
    ext = onh.from_array(np.ones((4, 3), np.float32), "w")
    ext.ClearField("raw_data")
    ext.data_location = onnx.TensorProto.EXTERNAL
    e1 = ext.external_data.add()
    e1.key, e1.value = "location", "w.bin"
    with pytest.raises(rtrain.InvalidArgument, match="external data"):
        client.compile(model_bytes(good, [vi("x", ["N", 4])], [vi("y", ["N", 3])], [ext]),
                       **comp)
    # the daemon keeps serving
    m = client.compile(model_bytes(good, [vi("x", ["N", 4])], [vi("y", ["N", 3])], [w]),
                       **comp)
    assert m.output_shape == (3,)


class ConvOut(torch.nn.Module):
    """a 4-D (NCHW) output, and a flattened one beside it"""
    def __init__(self, flat):
        super().__init__()
        self.c = torch.nn.Conv2d(3, 2, 3, padding=1)
        self.flat = flat

    def forward(self, x):
        y = torch.tanh(self.c(x))
        return torch.flatten(y, 1) if self.flat else y


class Shared(torch.nn.Module):
    """one Linear applied twice: one weight, trained by both uses"""
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(torch.relu(self.fc(x)))


def export_bytes(m, x):
    import io
    f = io.BytesIO()
    m.eval()
    torch.onnx.export(m, x, f, opset_version=13, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "b"}, "y": {0: "b"}})
    return f.getvalue()


@pytest.mark.parametrize("flat", [False, True])
def test_nchw_outputs_in_pytorch_order(client, flat):
    torch.manual_seed(0)
    m = ConvOut(flat)
    x = torch.rand(6, 3, 5, 5)
    data = export_bytes(m, x)
    want = m(x).detach().numpy()
    shape = want.shape[1:]
    r = client.compile(data, loss="mse", batch_size=6, label_shape=shape)
    assert r.output_shape == shape
    assert r.input_shape == (3, 5, 5)
    got = r.predict(x.numpy(), batch_size=6)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # NHWC data only when asked for, with the same predictions
    with pytest.raises(ValueError, match="NHWC"):
        r.predict(x.permute(0, 2, 3, 1).contiguous().numpy(), batch_size=6)
    h = client.compile(data, loss="mse", batch_size=6, label_shape=shape, data_layout="NHWC")
    assert h.input_shape == (5, 5, 3)
    np.testing.assert_allclose(h.predict(x.permute(0, 2, 3, 1).contiguous().numpy(),
                                         batch_size=6), want, rtol=1e-5, atol=1e-5)
    # and it trains against labels in PyTorch's order
    r.fit(x.numpy(), np.zeros((6,) + shape, np.float32), batch_size=6, epochs=2, verbose=0)
    out = onnx.load_from_string(r.to_onnx())
    sd = {"c.weight": None, "c.bias": None}
    for t in out.graph.initializer:
        sd[t.name] = torch.from_numpy(onh.to_array(t).copy())
    m.load_state_dict(sd)
    np.testing.assert_allclose(r.predict(x.numpy(), batch_size=6), m(x).detach().numpy(),
                               rtol=1e-5, atol=1e-5)


def test_shared_weight_is_one_parameter(client):
    torch.manual_seed(0)
    m = Shared()
    x = torch.rand(8, 4)
    data = export_bytes(m, x)
    r = client.compile(data, loss="mse", batch_size=8, label_shape=(4,),
                       optimizer=rtrain.optimizers.SGD(0.1))
    names = [n for n, _ in r._prog.get_weights()[1]]
    assert len(names) == 2, names  # weight and bias, used twice each
    y = np.ones((8, 4), np.float32)
    r.fit(x.numpy(), y, batch_size=8, epochs=3, verbose=0)
    # PyTorch trains the same way: both uses' gradients add up
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        torch.nn.functional.mse_loss(m(x), torch.from_numpy(y)).backward()
        opt.step()
    np.testing.assert_allclose(r.predict(x.numpy(), batch_size=8), m(x).detach().numpy(),
                               rtol=1e-5, atol=1e-5)
    got = {t.name: onh.to_array(t) for t in onnx.load_from_string(r.to_onnx()).graph.initializer}
    w = [a for a in got.values() if a.shape == (4, 4)]
    assert len(w) == 1
    np.testing.assert_allclose(w[0], m.fc.weight.detach().numpy(), rtol=1e-5, atol=1e-6)
