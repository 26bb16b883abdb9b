"""examples/iris_remote.ipynb runs top to bottom against a real rtraind
(jupyter nbconvert --execute) and produces its table and plot."""
import json
import os
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("RT_SOURCE_DIR", os.path.join(HERE, "..", ".."))
NOTEBOOK = os.path.join(SRC, "examples", "iris_remote.ipynb")


def test_notebook_executes(daemon, tmp_path):
    jupyter = os.environ.get("RT_JUPYTER", "jupyter")
    env = dict(os.environ)
    env.update(RTRAIN_SERVER=daemon.addr,
               MPLCONFIGDIR=str(tmp_path / "mpl"),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
               MPLBACKEND="module://matplotlib_inline.backend_inline")
    out = tmp_path / "executed.ipynb"
    r = subprocess.run(
        [jupyter, "nbconvert", "--to", "notebook", "--execute",
         "--ExecutePreprocessor.timeout=240",
         "--ExecutePreprocessor.kernel_name=python3",
         "--output-dir", str(tmp_path), "--output", out.name, NOTEBOOK],
        env=env, capture_output=True, text=True, timeout=280)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    nb = json.loads(out.read_text())
    outputs = [o for c in nb["cells"] if c["cell_type"] == "code"
               for o in c.get("outputs", [])]
    assert not [o for o in outputs if o["output_type"] == "error"]
    text = "".join("".join(o.get("text", "")) for o in outputs
                   if o["output_type"] == "stream")
    for variant in ("per step", "per epoch", "one call"):
        assert variant in text
    assert "Epoch 20/20" in text  # the progress display
    assert any("image/png" in o.get("data", {}) for o in outputs)
    assert daemon.alive()
