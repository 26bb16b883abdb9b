#!/usr/bin/python3
"""The remote-TPU story, rtrain beside its PyTorch eager peer, in one run.

Runs `rtrain bench story` (the story's three configurations against a
daemon: one call per step, one per epoch, one for the whole run) and then
bench/story_torch.py (the same W-A training, locally, eager), and prints one
table with each configuration's median wall time as a ratio to PyTorch's.

  /usr/bin/python3 bench/story.py [--rtrain build/client/cli/rtrain]
      [--server HOST:PORT | --rtraind build/server/rpc/rtraind]
      [--reps 5] [--epochs 20] [--data train.csv --val val.csv]

Without --server it starts the given rtraind (by default the build tree's)
on a free loopback port and stops it at the end. Data: the iris splits in
examples/iris/. Nothing here asserts anything about time.
"""
import argparse
import csv
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def start_daemon(path):
    p = subprocess.Popen([path, "--listen", "127.0.0.1:0", "--log-level", "warn"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in p.stdout:
        m = re.match(r"rtraind listening on (\S+)", line)
        if m:
            return p, m.group(1)
    p.wait()
    sys.exit("story.py: %s did not start" % path)


def run_rtrain(a, server, csv_path):
    cmd = [a.rtrain, "bench", "story", "--server", server, "--reps", str(a.reps),
           "--epochs", str(a.epochs), "--data", a.data, "--val", a.val,
           "--csv", csv_path]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        sys.exit("story.py: rtrain bench story failed (exit %d)" % r.returncode)
    with open(csv_path) as f:
        return r.stdout, list(csv.DictReader(f))


def run_torch(a):
    """(median seconds, val accuracy, note) of story_torch.py; None when the
    peer cannot run here, with the reason in note."""
    cmd = [sys.executable, os.path.join(HERE, "story_torch.py"), "--train", a.data,
           "--val", a.val, "--epochs", str(a.epochs), "--reps", str(a.reps)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    out = r.stdout + r.stderr
    if "python3-torch not installed" in out:
        return None, None, "n/a (python3-torch not installed)"
    m = re.search(r"torch_story median_s=([0-9.]+) val_accuracy=([0-9.na]+)", out)
    if r.returncode != 0 or not m:
        return None, None, "n/a (story_torch.py failed: %s)" % out.strip()[-200:]
    v = re.search(r"torch=(\S+)", out)
    return float(m.group(1)), float(m.group(2)), "torch " + (v.group(1) if v else "?")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rtrain", default=os.path.join(ROOT, "build/client/cli/rtrain"))
    ap.add_argument("--rtraind", default=os.path.join(ROOT, "build/server/rpc/rtraind"))
    ap.add_argument("--server")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--data", default=os.path.join(ROOT, "examples/iris/train.csv"))
    ap.add_argument("--val", default=os.path.join(ROOT, "examples/iris/val.csv"))
    a = ap.parse_args()
    daemon, server = None, a.server
    if not server:
        daemon, server = start_daemon(a.rtraind)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out, rows = run_rtrain(a, server, os.path.join(tmp, "story.csv"))
        torch_s, torch_acc, note = run_torch(a)
    finally:
        if daemon:
            daemon.terminate()
            daemon.wait()
    print(out.split("\n")[0])
    print("PyTorch eager peer: bench/story_torch.py, %s, same reps, locally\n" % note)
    hdr = "%-22s %12s %12s %7s %9s %12s %20s"
    print(hdr % ("configuration", "p50", "rep 1", "calls", "val acc", "vs PyTorch",
                 "story reported"))
    for r in rows:
        p50 = float(r["rtrain_p50_s"])
        ratio = "%.2fx" % (p50 / torch_s) if torch_s else "n/a"
        print("%-22s %9.2f ms %9.2f ms %7s %9.3f %12s %20s"
              % (r["configuration"], p50 * 1e3, float(r["rep1_s"]) * 1e3, r["calls"],
                 float(r["val_accuracy"]), ratio, r["story_reported"]))
    if torch_s:
        print("%-22s %9.2f ms %12s %7s %9.3f %12s %20s"
              % ("PyTorch eager, here", torch_s * 1e3, "-", "-", torch_acc, "1.00x", "-"))
    else:
        print("%-22s %s" % ("PyTorch eager, here", note))
    print("%-22s %12s %12s %7s %9s %12s %20s"
          % ("Keras, laptop CPU", "-", "-", "-", "-", "-", "~1.3 s"))
    print("\nrtrain: each run includes connect, session, compile, upload and "
          "training, against the daemon\nat %s; PyTorch: model creation and "
          "training, data already in memory. Medians." % server)
    return 0


if __name__ == "__main__":
    sys.exit(main())
