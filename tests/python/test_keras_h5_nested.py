"""Keras' HDF5 weight files for layers whose weights nest (MultiHeadAttention's
query/key/value/output sublayers, Bidirectional's forward and backward
halves), written here with h5py in Keras' exact layouts:
  - Keras 2 (keras/saving/legacy/hdf5_format.py save_weights_to_hdf5_group):
    root attribute layer_names (every layer), per layer a group whose
    weight_names attribute lists its weights in order, each a dataset at
    that path inside the group (/mha/mha/query/kernel:0);
  - Keras 3 (keras/src/saving/saving_lib.py, model.save_weights to
    *.weights.h5): layers/<snake case of the class>[_k]/.../vars/<i>, with
    MultiHeadAttention's query_dense, key_dense, value_dense, output_dense
    (Keras 3.0: _query_dense, ...) and Bidirectional's
    forward_layer/cell and backward_layer/cell.
Loaded by the CLI (rtrain predict --weights W.h5) and by Python's
model.load_weights, the model must predict what the weights imply:
PyTorch float64 (the keras_attn fixtures' transcription of Keras'
MultiHeadAttention, tests/keras_import/attn/gen_attn_fixtures.py;
torch.nn.LSTM, whose gate order i, f, g, o is Keras' i, f, c, o, for
Bidirectional(LSTM)).
"""
import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest
import torch

import rtrain as keras
from rtrain import layers as L

ROOT = os.environ.get("RT_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "keras_import", "attn"))
import gen_attn_fixtures as ref  # noqa: E402

CLI = os.environ.get("RTRAIN_CLI")
N = 6


@pytest.fixture(scope="module")
def client(daemon):
    keras.connect(daemon.addr, timeout=30)
    return daemon


def bidi_json():
    inp = keras.Input((5, 3), name="x")
    h = L.Bidirectional(L.LSTM(4, name="lstm"), name="bi")(inp)
    out = L.Dense(2, name="out")(h)
    return keras.Model(inp, out).to_json()


def model_doc(name):
    if name == "bidi":
        return json.loads(bidi_json())
    with open(os.path.join(ROOT, "tests", "fixtures", "keras-attn", name + ".json")) as f:
        return json.load(f)


def random_weights(model, seed):
    rng = np.random.default_rng(seed)
    return {n: rng.uniform(-0.5, 0.5, s).astype(np.float32) for n, s, _ in model.weight_specs()}


def torch_predict(name, doc, w, x):
    X = torch.tensor(x, dtype=torch.float64)
    if name != "bidi":
        params = [{"name": n, "v": v.ravel(), "dims": list(v.shape), "trainable": True}
                  for n, v in w.items()]
        with torch.no_grad():
            return ref.Net(torch, doc, params).forward(X).numpy()
    lstm = torch.nn.LSTM(3, 4, batch_first=True, bidirectional=True, dtype=torch.float64)
    with torch.no_grad():
        for half, sfx in (("forward", ""), ("backward", "_reverse")):
            p = "bi/%s_lstm/" % half
            getattr(lstm, "weight_ih_l0" + sfx)[:] = torch.tensor(w[p + "kernel"].T)
            getattr(lstm, "weight_hh_l0" + sfx)[:] = torch.tensor(w[p + "recurrent_kernel"].T)
            getattr(lstm, "bias_ih_l0" + sfx)[:] = torch.tensor(w[p + "bias"])
            getattr(lstm, "bias_hh_l0" + sfx)[:] = 0
        _, (h, _) = lstm(X)
        feat = torch.cat([h[0], h[1]], 1)  # Keras: the two final states, concat
        return (feat @ torch.tensor(w["out/kernel"], dtype=torch.float64) +
                torch.tensor(w["out/bias"], dtype=torch.float64)).numpy()


def keras2_names(layer, weights):
    """the names Keras 2 gives the weights in the file (the loader goes by
    their order, not their names)"""
    out = []
    for n in weights:
        sfx = n.split("/", 1)[1]
        if layer == "bi":  # TF 2.x: the cell's scope inside each half
            half, var = sfx.split("/")
            sfx = "%s/lstm_cell/%s" % (half, var)
        out.append("%s/%s:0" % (layer, sfx))
    return out


def layer_list(doc):
    lays = doc["config"]["layers"]
    return [(l.get("name") or l["config"]["name"], l["class_name"]) for l in lays]


def write_keras2(path, doc, w):
    layers = layer_list(doc)
    with h5py.File(path, "w") as f:
        f.attrs["layer_names"] = np.array([n.encode() for n, _ in layers])
        f.attrs["backend"] = b"tensorflow"
        f.attrs["keras_version"] = b"2.13.1"
        for lname, _ in sorted(layers):
            g = f.create_group(lname)
            mine = [n for n in w if n.split("/", 1)[0] == lname]
            names = keras2_names(lname, mine)
            g.attrs["weight_names"] = np.array([n.encode() for n in names]) if names \
                else np.array([])
            for n, fn in zip(mine, names):
                g.create_dataset(fn, data=w[n])


def snake(cls):
    return {"InputLayer": "input_layer", "Dense": "dense", "Flatten": "flatten",
            "MultiHeadAttention": "multi_head_attention", "Bidirectional": "bidirectional",
            "Embedding": "embedding", "GlobalAveragePooling1D": "global_average_pooling1d",
            "Softmax": "softmax"}[cls]


def write_keras3(path, doc, w, old_mha=False):
    used = {}
    with h5py.File(path, "w") as f:
        for lname, cls in layer_list(doc):
            base = snake(cls)
            p = "layers/%s" % (base if base not in used else "%s_%d" % (base, used[base] + 1))
            used[base] = used.get(base, -1) + 1
            f.create_group(p + "/vars")
            mine = {n.split("/", 1)[1]: v for n, v in w.items() if n.split("/", 1)[0] == lname}
            if cls == "MultiHeadAttention":
                for sub, part in (("query_dense", "query"), ("key_dense", "key"),
                                  ("value_dense", "value"), ("output_dense", "attention_output")):
                    g = f.create_group("%s/%s%s/vars" % (p, "_" if old_mha else "", sub))
                    for i, var in enumerate(v for v in ("kernel", "bias")
                                            if part + "/" + v in mine):
                        g.create_dataset(str(i), data=mine[part + "/" + var])
            elif cls == "Bidirectional":
                for half in ("forward", "backward"):
                    f.create_group("%s/%s_layer/vars" % (p, half))
                    g = f.create_group("%s/%s_layer/cell/vars" % (p, half))
                    for i, var in enumerate(("kernel", "recurrent_kernel", "bias")):
                        g.create_dataset(str(i), data=mine["%s_lstm/%s" % (half, var)])
            else:
                for i, var in enumerate(v for v in ("kernel", "bias", "embeddings") if v in mine):
                    f[p + "/vars"].create_dataset(str(i), data=mine[var])
        f.create_group("vars")


CASES = [("mha_self_k2", "k2"), ("mha_cross_k3", "k2"), ("bidi", "k2"),
         ("mha_self_k2", "k3"), ("mha_cross_k3", "k3"), ("mha_cross_k3", "k3old"),
         ("bidi", "k3")]


@pytest.mark.parametrize("name,layout", CASES)
def test_cli_and_python_load_keras_layouts(client, tmp_path, name, layout):
    doc = model_doc(name)
    mpath = tmp_path / "model.json"
    mpath.write_text(json.dumps(doc))
    model = keras.models.model_from_json(json.dumps(doc))
    w = random_weights(model, 7 + len(name))
    x = np.random.default_rng(3).uniform(-1, 1, (N,) + tuple(model.input_shape[1:])) \
        .astype(np.float32)
    want = torch_predict(name, doc, w, x)
    wpath = str(tmp_path / ("w.h5" if layout == "k2" else "w.weights.h5"))
    if layout == "k2":
        write_keras2(wpath, doc, w)
    else:
        write_keras3(wpath, doc, w, old_mha=layout == "k3old")
    np.save(tmp_path / "x.npy", x)
    # the CLI
    r = subprocess.run([CLI, "predict", "--server", client.addr, "--model", str(mpath),
                        "--weights", wpath, "--data", str(tmp_path / "x.npy"), "--loss", "mse",
                        "--out", str(tmp_path / "p.npy")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got = np.load(tmp_path / "p.npy")
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-5, atol=1e-6)
    # Python
    model.compile(optimizer="sgd", loss="mse")
    model.load_weights(wpath)
    np.testing.assert_allclose(model.predict(x, verbose=0), want, rtol=1e-5, atol=1e-6)
    named = model.get_named_weights()
    for n, v in w.items():
        np.testing.assert_array_equal(named[n], v, err_msg=n)


def test_round_trips_and_refusals(client, tmp_path):
    """what rtrain writes reads back in both layouts (CLI and Python);
    a file whose MHA lacks a sublayer, or Keras 2's file with a weight
    fewer, is refused with the layer named"""
    doc = model_doc("mha_self_k2")
    model = keras.models.model_from_json(json.dumps(doc))
    model.compile(optimizer="sgd", loss="mse")
    w = random_weights(model, 1)
    model.set_weights([w[n] for n, _, _ in model.weight_specs()])
    for p in ("a.h5", "a.weights.h5"):
        model.save_weights(str(tmp_path / p))
        other = keras.models.model_from_json(json.dumps(doc))
        other.compile(optimizer="sgd", loss="mse")
        other.load_weights(str(tmp_path / p))
        got = other.get_named_weights()
        for n, v in w.items():
            np.testing.assert_array_equal(got[n], v, err_msg=p + " " + n)
    # Keras 3's .keras zip: config.json's MHA call and the nested vars
    model.save(str(tmp_path / "m.keras"))
    back = keras.models.load_model(str(tmp_path / "m.keras"))
    got = back.get_named_weights()
    for n, v in w.items():
        np.testing.assert_array_equal(got[n], v, err_msg=".keras " + n)
    import zipfile
    with zipfile.ZipFile(tmp_path / "m.keras") as z:
        cfg = json.loads(z.read("config.json"))
        mha = [l for l in cfg["config"]["layers"] if l["class_name"] == "MultiHeadAttention"][0]
        node = mha["inbound_nodes"][0]
        assert [a["config"]["keras_history"][0] for a in node["args"]] == ["x", "x"]
        assert sorted(mha["build_config"]["shapes_dict"]) == ["query_shape", "value_shape"]
    with h5py.File(tmp_path / "a.h5", "r") as f:  # Keras 2's names and nesting
        assert [v.decode() if isinstance(v, bytes) else v
                for v in f["mha"].attrs["weight_names"]][:2] == \
            ["mha/query/kernel:0", "mha/query/bias:0"]
        assert f["mha/mha/attention_output/kernel:0"].shape == (2, 4, 8)
    mpath = tmp_path / "model.json"
    mpath.write_text(json.dumps(doc))
    x = np.zeros((2, 5, 8), np.float32)
    np.save(tmp_path / "x.npy", x)
    # the CLI writes Keras 2's nesting (fit at lr 1e-12 keeps the weights)
    np.save(tmp_path / "y.npy", np.zeros(2, np.int32))
    r = subprocess.run([CLI, "fit", "--server", client.addr, "--model", str(mpath),
                        "--data", str(tmp_path / "x.npy"), "--labels", str(tmp_path / "y.npy"),
                        "--loss", "sparse_categorical_crossentropy", "--optimizer", "sgd",
                        "--lr", "1e-12", "--epochs", "1", "--load-weights",
                        str(tmp_path / "a.weights.h5"), "--save-weights",
                        str(tmp_path / "cli.h5")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    with h5py.File(tmp_path / "cli.h5", "r") as f:
        names = [v.decode() if isinstance(v, bytes) else v for v in f["mha"].attrs["weight_names"]]
        assert names == ["%s:0" % n for n, _, _ in model.weight_specs() if n.startswith("mha/")]
        for n in names:
            np.testing.assert_allclose(f["mha"][n][()], w[n[:-2]], rtol=1e-6, atol=1e-9)
    bad3 = str(tmp_path / "bad.weights.h5")
    write_keras3(bad3, doc, w)
    with h5py.File(bad3, "a") as f:
        del f["layers/multi_head_attention/key_dense"]
    bad2 = str(tmp_path / "bad.h5")
    w2 = dict(w)
    del w2["mha/value/bias"]
    write_keras2(bad2, doc, w2)
    for bad, msg in ((bad3, "key_dense"), (bad2, "'mha'")):
        r = subprocess.run([CLI, "predict", "--server", client.addr, "--model", str(mpath),
                            "--weights", bad, "--data", str(tmp_path / "x.npy"), "--loss",
                            "mse", "--out", str(tmp_path / "p.npy")],
                           capture_output=True, text=True)
        assert r.returncode != 0 and msg in r.stderr, r.stderr
        with pytest.raises(ValueError, match="key_dense|mha"):
            model.load_weights(bad)
