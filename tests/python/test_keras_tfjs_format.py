"""TF.js layers models with their weights: tests/keras_import/tfjs/saved_*
were written by TensorFlow.js 4.22 (gen_tfjs_fixtures.js --saved: its
model.save artifacts, model.json and one .bin shard) with its predictions on
fixed inputs. rtrain loads each and must predict what tfjs predicted; it
writes the format back (model.save(DIR, format="tfjs")) with the same
weight names, shapes and bytes, and loads its own folder again."""
import json
import os

import numpy as np
import pytest

import rtrain
from rtrain import models

ROOT = os.environ.get("RT_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
DIR = os.path.join(ROOT, "tests", "keras_import", "tfjs")
SAVED = sorted(d for d in os.listdir(DIR) if d.startswith("saved_"))


def _mix(x):
    x = np.asarray(x, dtype=np.uint64) & 0xffffffff
    x ^= x >> 16
    x = (x * 0x7feb352d) & 0xffffffff
    x ^= x >> 15
    x = (x * 0x846ca68b) & 0xffffffff
    return x ^ (x >> 16)


def test_fixtures_present():
    assert len(SAVED) == 2, SAVED


@pytest.mark.parametrize("name", SAVED)
def test_load_predict_save(client, name, tmp_path):
    folder = os.path.join(DIR, name)
    with open(os.path.join(folder, "predictions.json")) as f:
        want = json.load(f)
    per = int(np.prod(want["input"]))
    h = _mix(np.arange(want["rows"] * per, dtype=np.uint64) ^ 0x5eed0001)
    x = (((h >> 22).astype(np.int64) - 512) / 512.0).astype(np.float32).reshape(
        [want["rows"]] + want["input"])
    m = models.load_model(folder)
    m.compile(optimizer="sgd", loss="mse", client=client)
    p = m.predict(x)
    np.testing.assert_allclose(p.reshape(-1), want["values"], rtol=1e-5, atol=1e-6)
    out = str(tmp_path / "out")
    m.save(out, format="tfjs")
    with open(os.path.join(folder, "model.json")) as f:
        theirs = json.load(f)["weightsManifest"][0]["weights"]
    with open(os.path.join(out, "model.json")) as f:
        ours = json.load(f)
    assert ours["format"] == "layers-model"
    assert [(w["name"], w["shape"]) for w in ours["weightsManifest"][0]["weights"]] == \
        [(w["name"], w["shape"]) for w in theirs]
    with open(os.path.join(folder, "group1-shard1of1.bin"), "rb") as a, \
            open(os.path.join(out, "group1-shard1of1.bin"), "rb") as b:
        assert a.read() == b.read()
    m2 = models.load_model(os.path.join(out, "model.json"))
    m2.compile(optimizer="sgd", loss="mse", client=client)
    np.testing.assert_array_equal(m2.predict(x), p)


def test_bad_manifest(tmp_path):
    folder = os.path.join(DIR, SAVED[0])
    with open(os.path.join(folder, "model.json")) as f:
        doc = json.load(f)
    doc["weightsManifest"][0]["paths"] = ["../../etc/passwd"]
    bad = tmp_path / "model.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="leaves the model's folder"):
        models.load_model(str(bad))
    doc["weightsManifest"][0]["paths"] = ["group1-shard1of1.bin"]
    doc["weightsManifest"][0]["weights"][0]["dtype"] = "int32"
    bad.write_text(json.dumps(doc))
    (tmp_path / "group1-shard1of1.bin").write_bytes(
        open(os.path.join(folder, "group1-shard1of1.bin"), "rb").read())
    with pytest.raises(ValueError, match="only float32"):
        models.load_model(str(bad))
    # a shard the manifest names but the folder lacks: the error names it
    # and the way out
    (tmp_path / "group1-shard1of1.bin").unlink()
    with pytest.raises(ValueError, match="group1-shard1of1.bin is missing.*drop weightsManifest"):
        models.load_model(str(bad))
