#!/usr/bin/python3
"""The remote-TPU story, rtrain beside its PyTorch eager peer, in one run.

Runs `rtrain bench story` (the story's four configurations against a
daemon: one call per step, one per epoch, one for the whole run, auto steps
per call), `rtrain bench overhead --max-k 1` (K=1 RunSteps against a bare
Ping on the same connection), the first-call peers where they can run
(bench/first_call.js on grpc-js, bench/first_call.py on grpcio: a new
channel and one empty call, as rtrain's connect + Ping) and then
bench/story_torch.py (the same W-A training, locally, eager), and prints one
table with each configuration's median wall time as a ratio to PyTorch's.

  /usr/bin/python3 bench/story.py [--rtrain build/client/cli/rtrain]
      [--server HOST:PORT | --rtraind build/server/rpc/rtraind]
      [--reps 5] [--epochs 20] [--data train.csv --val val.csv]
      [--explain] [--json story.json] [--features]

Without --server it starts the given rtraind (by default the build tree's)
on a free loopback port, waits until its start-up work is done (the upload
arena faulted in: runs meanwhile would share the CPU with it) and stops it
at the end. Data: the iris splits in
examples/iris/. --explain prints the cold run (the first, before the reps)
and a median warm run as waterfalls of phases; --json writes everything
printed as one JSON object (bench/README.md keeps one line per release).
--features explains the story once more against a second daemon started
with --tokens and --state-dir: the waterfall then shows what the token
check and the synced state cost (both are free when off).
Nothing here asserts anything about time.
"""
import argparse
import csv
import datetime
import hashlib
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def start_daemon(path, extra=()):
    """(process, address, seconds waited): the daemon, once its start-up
    work is done. A new rtraind first faults its upload arena in (256 MiB
    by default, paced, about 2 s on a 2-vCPU machine); runs measured
    meanwhile share the CPU with it, which a daemon that is already up does
    not. Its /metrics says when the arena is in (rtrain_upload_pool_bytes)."""
    p = subprocess.Popen([path, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
                          "--log-level", "warn"] + list(extra),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    metrics = None
    for line in p.stdout:
        m = re.match(r"rtraind metrics on (\S+)", line)
        if m:
            metrics = m.group(1)
        m = re.match(r"rtraind listening on (\S+)", line)
        if m:
            return p, m.group(1), wait_settled(metrics)
    p.wait()
    sys.exit("story.py: %s did not start" % path)


def wait_settled(url, limit_s=30.0):
    t0 = time.monotonic()
    while url and time.monotonic() - t0 < limit_s:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                text = r.read().decode()
        except OSError:
            break
        m = re.search(r"^rtrain_upload_pool_bytes (\S+)", text, re.M)
        if not m or float(m.group(1)) > 0:
            break
        time.sleep(0.05)
    return time.monotonic() - t0


def run_rtrain(a, server, tmp):
    csv_path = os.path.join(tmp, "story.csv")
    trace = os.path.join(tmp, "story_trace.json")
    cmd = [a.rtrain, "bench", "story", "--server", server, "--reps", str(a.reps),
           "--epochs", str(a.epochs), "--data", a.data, "--val", a.val,
           "--csv", csv_path]
    if a.explain:
        cmd += ["--explain", "--trace", trace]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        sys.exit("story.py: rtrain bench story failed (exit %d)" % r.returncode)
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    phases = None
    if a.explain:
        with open(trace) as f:
            ev = json.load(f)["traceEvents"]
        tracks = {e["tid"]: e["args"]["name"] for e in ev if e.get("name") == "thread_name"}
        phases = {}
        for e in ev:
            if e.get("cat") != "phase":
                continue
            d = dict(e["args"], name=e["name"], start_us=e["ts"], wall_us=e["dur"])
            phases.setdefault(tracks.get(e["tid"], str(e["tid"])), []).append(d)
    return r.stdout, rows, phases


def run_features(a, tmp):
    """--features: the story against a second daemon with --tokens and
    --state-dir, explained, so that what each costs is in the waterfall.
    Returns the output from the cold run's waterfall on, or a reason."""
    token = secrets.token_hex(16)
    tokens = os.path.join(tmp, "tokens")
    token_file = os.path.join(tmp, "token")
    state = os.path.join(tmp, "state")
    with open(tokens, "w") as f:
        f.write("%s bench\n" % hashlib.sha256(token.encode()).hexdigest())
    with open(token_file, "w") as f:
        f.write(token + "\n")
    os.chmod(token_file, 0o600)
    daemon, server, _ = start_daemon(a.rtraind, ["--tokens", tokens, "--state-dir", state])
    try:
        r = subprocess.run([a.rtrain, "bench", "story", "--server", server, "--reps",
                            str(a.reps), "--epochs", str(a.epochs), "--data", a.data,
                            "--val", a.val, "--explain", "--token-file", token_file],
                           capture_output=True, text=True)
    finally:
        daemon.terminate()
        daemon.wait()
    if r.returncode != 0:
        return "n/a (rtrain bench story failed: %s)" % (r.stdout + r.stderr).strip()[-300:]
    lines = r.stdout.split("\n")
    i = next((k for k, l in enumerate(lines) if l.startswith("The cold run")), None)
    j = next((k for k, l in enumerate(lines) if l.startswith("first call on a new")), None)
    p50 = next((l for l in lines if l.startswith("one call for the run")), "")
    return ("%s\n\n%s" % (p50, "\n".join(lines[i:j]).rstrip())) if i is not None else r.stdout


def run_overhead(a, server, tmp):
    """K=1 RunSteps against a bare Ping on one connection: a dict, or None
    with the reason printed."""
    path = os.path.join(tmp, "overhead.csv")
    r = subprocess.run([a.rtrain, "bench", "overhead", "--server", server, "--max-k", "1",
                        "--reps", "300", "--csv", path], capture_output=True, text=True)
    if r.returncode != 0:
        print("K=1 RunSteps vs Ping: n/a (bench overhead failed: %s)"
              % (r.stdout + r.stderr).strip()[-200:])
        return None
    with open(path) as f:
        row = list(csv.DictReader(f))[0]
    rtt, ping = float(row["rtt_p50_us"]), float(row["ping_p50_us"])
    return {"runsteps_k1_rtt_p50_us": rtt, "ping_p50_us": ping,
            "ratio": rtt / ping if ping else None,
            "overhead_vs_ping": float(row["overhead_vs_ping"]),
            "compute_per_step_us": float(row["compute_per_step_us"])}


def run_first_calls(a, server):
    """The first call on a new channel for each gRPC client found here:
    {name: {"cold_us", "p50_us", "version"}} or {name: {"na": reason}}."""
    out = {}
    node = shutil.which("node")
    mods = a.node_modules or node_modules()
    if not node:
        out["grpc-js"] = {"na": "node not installed"}
    elif not mods or not os.path.exists(os.path.join(mods, "@grpc/grpc-js/package.json")):
        out["grpc-js"] = {"na": "@grpc/grpc-js not installed (tests/interop/run.sh --install, "
                                "or --node-modules DIR)"}
    else:
        out["grpc-js"] = first_call_peer([node, os.path.join(HERE, "first_call.js"), server,
                                          str(a.first_calls)],
                                         dict(os.environ, NODE_PATH=mods))
    out["grpcio"] = first_call_peer([sys.executable, os.path.join(HERE, "first_call.py"),
                                     server, str(a.first_calls)], None)
    return out


def node_modules():
    """Where tests/interop/run.sh --install put the npm packages (one folder
    per lock file, outside the tree), or None."""
    try:
        r = subprocess.run([os.path.join(ROOT, "tests/interop/run.sh"), "--dir"],
                           capture_output=True, text=True)
    except OSError:
        return None
    d = r.stdout.strip()
    return os.path.join(d, "node_modules") if r.returncode == 0 and d else None


def first_call_peer(cmd, env):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    text = r.stdout + r.stderr
    m = re.search(r"first_call cold_us=([0-9.]+) p50_us=([0-9.]+) version=(\S+)", text)
    if r.returncode != 0 or not m:
        na = re.search(r"not installed[^\n]*", text)
        return {"na": na.group(0) if na else "failed: " + text.strip()[-160:]}
    return {"cold_us": float(m.group(1)), "p50_us": float(m.group(2)), "version": m.group(3)}


def run_torch(a):
    """(median seconds, val accuracy, val loss, note) of story_torch.py;
    None when the peer cannot run here, with the reason in note."""
    cmd = [sys.executable, os.path.join(HERE, "story_torch.py"), "--train", a.data,
           "--val", a.val, "--epochs", str(a.epochs), "--reps", str(a.reps)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    out = r.stdout + r.stderr
    if "python3-torch not installed" in out:
        return None, None, None, "n/a (python3-torch not installed)"
    m = re.search(r"torch_story median_s=([0-9.]+) val_accuracy=([0-9.na]+) "
                  r"val_loss=([0-9.na]+)", out)
    if r.returncode != 0 or not m:
        return None, None, None, "n/a (story_torch.py failed: %s)" % out.strip()[-200:]
    v = re.search(r"torch=(\S+)", out)
    return (float(m.group(1)), float(m.group(2)), float(m.group(3)),
            "torch " + (v.group(1) if v else "?"))


def git_commit():
    try:
        r = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                           capture_output=True, text=True)
        return r.stdout.strip() or None
    except OSError:
        return None


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return [float(x) for x in f.read().split()[:3]]
    except OSError:
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rtrain", default=os.path.join(ROOT, "build/client/cli/rtrain"),
                    help="the rtrain command (default: the build tree's)")
    ap.add_argument("--rtraind", default=os.path.join(ROOT, "build/server/rpc/rtraind"),
                    help="the daemon to start when no --server is given")
    ap.add_argument("--server", help="a running daemon HOST:PORT (default: start --rtraind)")
    ap.add_argument("--reps", type=int, default=5, help="repetitions of each configuration")
    ap.add_argument("--epochs", type=int, default=20, help="epochs per run")
    ap.add_argument("--data", default=os.path.join(ROOT, "examples/iris/train.csv"),
                    help="training CSV (default: examples/iris/train.csv)")
    ap.add_argument("--val", default=os.path.join(ROOT, "examples/iris/val.csv"),
                    help="validation CSV (default: examples/iris/val.csv)")
    ap.add_argument("--explain", action="store_true",
                    help="print the cold run and a median warm run as waterfalls of phases")
    ap.add_argument("--json", metavar="FILE", help="write the results as one JSON object")
    ap.add_argument("--features", action="store_true",
                    help="also explain the story on a daemon with --tokens and --state-dir "
                         "(what the token check and the synced state cost, phase by phase)")
    ap.add_argument("--first-calls", type=int, default=20,
                    help="new channels per first-call peer (default 20)")
    ap.add_argument("--node-modules",
                    help="where @grpc/grpc-js is (default: tests/interop/run.sh --install's)")
    a = ap.parse_args()
    load0 = loadavg()
    daemon, server, settle = None, a.server, None
    if not server:
        daemon, server, settle = start_daemon(a.rtraind)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out, rows, phases = run_rtrain(a, server, tmp)
            overhead = run_overhead(a, server, tmp)
            features = run_features(a, tmp) if a.features and not a.server else None
        first = run_first_calls(a, server)
        torch_s, torch_acc, torch_loss, note = run_torch(a)
    finally:
        if daemon:
            daemon.terminate()
            daemon.wait()
    lines = out.split("\n")
    print(lines[0])
    print("PyTorch eager peer: bench/story_torch.py, %s, same reps, locally\n" % note)
    hdr = "%-22s %12s %12s %7s %9s %9s %12s %20s"
    print(hdr % ("configuration", "p50", "rep 1", "calls", "val loss", "val acc", "vs PyTorch",
                 "story reported"))
    table = []
    for r in rows:
        p50 = float(r["rtrain_p50_s"])
        ratio = p50 / torch_s if torch_s else None
        print("%-22s %9.2f ms %9.2f ms %7s %9.4f %9.3f %12s %20s"
              % (r["configuration"], p50 * 1e3, float(r["rep1_s"]) * 1e3, r["calls"],
                 float(r["val_loss"]), float(r["val_accuracy"]),
                 "%.2fx" % ratio if ratio else "n/a", r["story_reported"]))
        table.append({"configuration": r["configuration"], "p50_ms": p50 * 1e3,
                      "rep1_ms": float(r["rep1_s"]) * 1e3, "calls": int(r["calls"]),
                      "val_loss": float(r["val_loss"]),
                      "val_accuracy": float(r["val_accuracy"]), "vs_pytorch": ratio})
    if torch_s:
        print("%-22s %9.2f ms %12s %7s %9.4f %9.3f %12s %20s"
              % ("PyTorch eager, here", torch_s * 1e3, "-", "-", torch_loss, torch_acc,
                 "1.00x", "-"))
    else:
        print("%-22s %s" % ("PyTorch eager, here", note))
    print(hdr % ("Keras, laptop CPU", "-", "-", "-", "-", "-", "-", "~1.3 s"))
    print("\nval loss and acc: the last rep's last epoch, each side. Both train Keras' "
          "logcosh of integer\nlabels against the softmax, which is least at the uniform "
          "output (val loss 1.0086 on this\nsplit; 1.0279 where the softmax saturated on "
          "one class): the predictions end (nearly) the\nsame for every flower and val "
          "(all class 2) is 0 or 1 by the class they favour. Compare val loss.")
    print("\nrtrain: each run includes connect, session, compile, upload and "
          "training, against the daemon\nat %s; PyTorch: model creation and "
          "training, data already in memory. Medians." % server)
    if settle is not None:
        print("The daemon was started here; the runs began once its upload arena was "
              "in, %.1f s after its start." % settle)
    if overhead:
        print("\nK=1 RunSteps vs a bare Ping (same connection, 300 calls each): round trip "
              "p50 %.1f us / %.1f us = %.3fx\n(its overhead, round trip less the step's "
              "compute of %.1f us: %.3fx the Ping)"
              % (overhead["runsteps_k1_rtt_p50_us"], overhead["ping_p50_us"],
                 overhead["ratio"], overhead["compute_per_step_us"],
                 overhead["overhead_vs_ping"]))
    fc = re.search(r"first call on a new channel \(connect \+ Ping, gRPC running\): "
                   r"p50 ([0-9.]+) us", out)
    if fc:
        first["rtrain"] = {"p50_us": float(fc.group(1)), "version": "librtrain (gRPC C core)"}
        cold = {p["name"]: p["wall_us"] for p in (phases or {}).get("phases: cold run", [])}
        if "connect" in cold and "CreateSession" in cold:
            # the cold run's first call is its CreateSession (as empty as a Ping)
            first["rtrain"]["cold_us"] = cold["connect"] + cold["CreateSession"]
    print("\nFirst call on a new channel (connect, one empty unary call; the library "
          "already loaded),\n%d channels each, p50:" % a.first_calls)
    for name in ("rtrain", "grpc-js", "grpcio"):
        f = first.get(name)
        if not f:
            print("  %-8s n/a (only with --explain)" % name)
        elif "na" in f:
            print("  %-8s n/a (%s)" % (name, f["na"]))
        else:
            cold = " (first in its process %.1f us)" % f["cold_us"] if "cold_us" in f else ""
            print("  %-8s %8.1f us%s  %s" % (name, f["p50_us"], cold, f["version"]))
    if a.explain:
        i = next((k for k, l in enumerate(lines) if l.startswith("The cold run")), None)
        if i is not None:
            print("\n" + "\n".join(lines[i:]).rstrip())
    if features:
        print("\nWith the features on (a second daemon, --tokens and --state-dir; the "
              "token and disk rows are\nwhat each costs inside the daemon's time):\n")
        print(features)
    load1 = loadavg()
    print("\nload average %s before, %s after" % (load0, load1))
    if a.json:
        rec = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(
                   timespec="seconds"),
               "commit": git_commit(), "server": server, "reps": a.reps,
               "daemon_settle_s": settle,
               "epochs": a.epochs, "loadavg_before": load0, "loadavg_after": load1,
               "configurations": table,
               "pytorch": {"p50_ms": torch_s * 1e3 if torch_s else None,
                           "val_loss": torch_loss, "val_accuracy": torch_acc, "note": note},
               "runsteps_k1_vs_ping": overhead, "first_call": first,
               "features": features,
               "explain": phases}
        with open(a.json, "w") as f:
            json.dump(rec, f, indent=1)
            f.write("\n")
        print("json: %s" % a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
