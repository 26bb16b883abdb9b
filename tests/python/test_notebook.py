"""examples/iris_remote.ipynb runs top to bottom against a real rtraind
(jupyter nbconvert --execute) and produces its table and plot. Its timing
experiment runs once per variant here (a smoke run: its tables and plots
have their rows, no time is checked)."""
import json
import os
import re
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("RT_SOURCE_DIR", os.path.join(HERE, "..", ".."))
NOTEBOOK = os.path.join(SRC, "examples", "iris_remote.ipynb")


def smoke_copy(tmp_path):
    """The notebook with each timed variant run once instead of 3-5 times
    (the medians of one run), written into tmp_path."""
    nb = json.loads(open(NOTEBOOK).read())
    counts = {"REPEATS = 5": 0, "for _ in range(3)": 0}
    for c in nb["cells"]:
        if c["cell_type"] != "code":
            continue
        src = "".join(c["source"])
        for k in counts:
            counts[k] += src.count(k)
        src = src.replace("REPEATS = 5", "REPEATS = 1").replace("for _ in range(3)", "for _ in range(1)")
        c["source"] = src
    # the experiment's cells as this test knows them: change both together
    assert counts == {"REPEATS = 5": 1, "for _ in range(3)": 2}, counts
    path = tmp_path / "iris_remote.ipynb"
    path.write_text(json.dumps(nb))
    return path


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
         "--output-dir", str(tmp_path), "--output", out.name, str(smoke_copy(tmp_path))],
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
    # The story: the unshuffled split's hidden layer dies, the shuffled
    # split learns, and the HDF5 round trip is exact.
    assert re.search(r"every ReLU unit is silent from epoch \d+", text)
    m = re.search(r"validation: loss [0-9.]+, accuracy ([0-9.]+)", text)
    assert m and float(m.group(1)) >= 0.9, text[-2000:]
    # the daemon's predictions against a NumPy forward pass with the
    # weights get_weights() returned (float32 softmax outputs)
    m = re.search(r"max \|predict - numpy\| = ([0-9.e+-]+)", text)
    assert m and float(m.group(1)) <= 1e-5, m and m.group(0)
    assert "reloaded predictions identical: True" in text
    src = "".join("".join(c["source"]) for c in nb["cells"])
    assert "notes/" not in src
    assert any("image/png" in o.get("data", {}) for o in outputs)
    assert daemon.alive()


def test_kernel_interrupt_cancels_remote_fit(daemon, tmp_path):
    """Interrupt kernel (what the notebook's stop button sends: SIGINT)
    during a long fit: the cell ends with KeyboardInterrupt, the model keeps
    its trained steps, and the next cell trains on against a healthy
    daemon."""
    jc = pytest.importorskip("jupyter_client.manager")
    env = dict(os.environ)
    env.update(JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
               MPLCONFIGDIR=str(tmp_path / "mpl"))
    km, kc = jc.start_new_kernel(kernel_name="python3", env=env,
                                 startup_timeout=120)
    try:
        setup = (
            "import numpy as np, rtrain\n"
            "client = rtrain.connect(%r)\n"
            "x = np.random.RandomState(0).standard_normal((100, 4))"
            ".astype(np.float32)\n"
            "y = (x[:, 0] > 0).astype(np.int64)\n"
            "model = client.compile(rtrain.Sequential(["
            "rtrain.layers.Dense(8, activation='relu', input_shape=(4,)),"
            "rtrain.layers.Dense(2, activation='softmax')]),"
            " optimizer='adam', loss='sparse_categorical_crossentropy',"
            " metrics=['accuracy'], batch_size=10)\n" % daemon.addr)
        reply = kc.execute_interactive(setup, timeout=60)
        assert reply["content"]["status"] == "ok", reply["content"]

        # stop_on_error=False: ipykernel would otherwise abort the requests
        # that reach it just after the error, i.e. the next cell here.
        msg_id = kc.execute(
            "model.fit(x, y, batch_size=10, epochs=10**6, verbose=1)",
            stop_on_error=False)
        seen, interrupted = "", False
        while True:
            msg = kc.get_iopub_msg(timeout=60)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "stream":
                seen += msg["content"]["text"]
                if not interrupted and "Epoch 3/" in seen:
                    km.interrupt_kernel()
                    interrupted = True
            if (msg["msg_type"] == "status" and
                    msg["content"]["execution_state"] == "idle"):
                break
        reply = kc.get_shell_msg(timeout=60)
        assert reply["content"]["status"] == "error"
        assert reply["content"]["ename"] == "KeyboardInterrupt"

        out = []
        reply = kc.execute_interactive(
            "s = model.global_step; n = len(model.history['loss'])\n"
            "model.fit(x, y, batch_size=10, epochs=1, verbose=0)\n"
            "print(s, n, model.global_step, client.ping() > 0)",
            timeout=60, output_hook=lambda m: out.append(
                m["content"].get("text", "")))
        assert reply["content"]["status"] == "ok", reply["content"]
        s, n, s2, ok = "".join(out).split()
        assert int(s) >= 20 and int(n) >= 2          # kept what it trained
        assert int(s2) == int(s) + 10 and ok == "True"  # trains on
        assert int(s) < 10**6 * 10
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    assert daemon.alive()
