"""bench/torch_users at a tiny size: the shape of its table and of its
JSON, never its speed. One thing it does check is behaviour: rtrain.torch
and PyTorch's own loop train the same module from the same weights on the
same batches in the same order (rtrain's shuffle, which the bench
reproduces for PyTorch), so their first epochs' mean losses agree to float
rounding; a different batch order or a training that differs from
PyTorch's parts them by far more."""
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, "..", "..", "bench", "torch_users", "bench_torch_users.py")


def test_tiny_run(daemon, tmp_path):
    js = tmp_path / "out.json"
    layout = os.environ.get("BENCH_LAYOUT")
    assert layout and os.access(layout, os.X_OK), "BENCH_LAYOUT must name bench_layout"
    r = subprocess.run([sys.executable, BENCH, "--server", daemon.addr, "--layout", layout,
                        "--seeds", "2", "--digits-epochs", "2", "--fmnist-epochs", "1",
                        "--fmnist-train", "640", "--fmnist-test", "256", "--size", "32",
                        "--step-batch", "2", "--reps", "1", "--layout-steps", "1", "--lr", "0.01",
                        "--json", str(js)], capture_output=True, text=True, timeout=400)
    print(r.stdout + r.stderr)
    assert r.returncode == 0
    out = r.stdout
    num = r"[0-9.]+"
    acc = r"%s \[%s, %s\]" % (num, num, num)
    assert re.search(r"^digits +1437/360 +2 \| %s +\| %s +\| [-+]%s \| +%s +%s +%sx \| "
                     % (acc, acc, num, num, num, num), out, re.M), out
    assert re.search(r"^fmnist +640/256 +1 \| ", out, re.M), out
    assert len(re.findall(r"^  seed \d: accuracy", out, re.M)) == 4
    for net in ("resnet18", "mobilenet_v2"):
        assert re.search(r"^%s +%sM \| +%s +%s +%sx \| " % (net, num, num, num, num), out,
                         re.M), out
    assert "transposing one batch" in out and "of rtrain's step" in out
    rec = json.loads(js.read_text())
    for task, n_test in (("digits", 360), ("fmnist", 256)):
        t = rec["train"][task]
        assert t["n_test"] == n_test and len(t["runs"]) == 2
        for u in t["runs"]:
            for side in ("rtrain", "torch"):
                a = u[side]["acc"]
                # whole test samples right out of n_test
                assert 0.0 <= a <= 1.0 and abs(a * n_test - round(a * n_test)) < 1e-6
                assert len(u[side]["loss"]) == t["epochs"]
            assert u["rtrain"]["epoch_s"] > 0 and min(u["torch"]["epoch_s"]) > 0
        # the same training: the first epoch's loss agrees to rounding
        assert t["first_epoch_loss_rel_dev"] <= 1e-3, t
    for net in ("resnet18", "mobilenet_v2"):
        s = rec["steps"][net]
        assert len(s["rtrain_ms"]) == len(s["torch_ms"]) == 1 and min(s["rtrain_ms"]) > 0
    assert 0 < rec["layout"]["share_pct"] < 100 and rec["layout"]["resnet18_share_pct"] > 0
