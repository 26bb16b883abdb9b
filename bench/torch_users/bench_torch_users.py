#!/usr/bin/python3
"""PyTorch users as they are (issue 26's targets): rtrain.torch against
PyTorch's own eager loop, in one run, one table.

1. Digits (sklearn) and Fashion-MNIST (Debian's dataset-fashion-mnist): a
   CNN as a PyTorch user writes it (common.make_net: Conv2d, BatchNorm2d, a
   skip connection, a Linear head; nn.CrossEntropyLoss; SGD with momentum)
   trained through rtrain.torch.fit against a local rtraind, and by
   PyTorch's eager loop (torch_peer.py), from the same initial weights, on
   the same batches in the same order (rtrain's shuffle, reproduced by
   common.epoch_order), for each seed: the test accuracy after the same
   epochs (mean and spread over the seeds), the first epoch's mean loss of
   each (equal but for float rounding when the two train alike) and the
   time per epoch.
2. A training step of torchvision's resnet18 (ImageNet stem) and
   mobilenet_v2, 1000 classes, through rtrain (rtrain.torch's export in
   training mode and its compile) against PyTorch eager: one rtrain step
   (a fit of one batch), then one PyTorch step, REPS rounds, medians.
3. NCHW data: bench_layout's per-batch transpose against a per-bind copy as
   a share of a step, and the transpose of one resnet18 batch as a share of
   rtrain's resnet18 step.

PyTorch runs in its own process at its best setting here: OPENBLAS_CORETYPE
unset, OMP_NUM_THREADS=2, OPENBLAS_NUM_THREADS=1. The rtrain client (this
process) keeps the environment; rtraind computes on OpenMP's default team.
Each rtrain run is followed by the PyTorch run of the same seed (or step),
so a loaded machine weighs on both alike. Nothing here asserts anything
about time.

  /usr/bin/python3 bench/torch_users/bench_torch_users.py [--build build]
      [--server HOST:PORT | --rtraind PATH] [--seeds 3] [--json out.json]
      [--digits-epochs 5] [--fmnist-epochs 2] [--fmnist-train 12000]
      [--fmnist-test 10000] [--batch 64] [--lr 0.05] [--momentum 0.9]
      [--nets resnet18,mobilenet_v2] [--size 224] [--step-batch 16]
      [--reps 5] [--tasks digits,fmnist] [--no-layout | --layout PATH]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402

ROOT = common.ROOT
sys.path.insert(0, os.path.join(ROOT, "bench"))
from story import git_commit, loadavg, start_daemon  # noqa: E402

# what a fit's History.timings call train in (the rest upload)
TRAIN_CALLS = ("RunSteps", "Fit")


def peer_env():
    env = dict(os.environ, OMP_NUM_THREADS="2", OPENBLAS_NUM_THREADS="1")
    env.pop("OPENBLAS_CORETYPE", None)
    return env


class Peer:
    """torch_peer.py in its own process: one JSON request, one JSON answer"""

    def __init__(self):
        self.p = subprocess.Popen(["/usr/bin/python3", os.path.join(HERE, "torch_peer.py")],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  env=peer_env())
        self.info = self._read()

    def _read(self):
        line = self.p.stdout.readline()
        if not line:
            sys.exit("bench_torch_users: the PyTorch peer exited (exit %s)" % self.p.wait())
        return json.loads(line)

    def ask(self, **q):
        self.p.stdin.write(json.dumps(q) + "\n")
        self.p.stdin.flush()
        r = self._read()
        if "error" in r:
            sys.exit("bench_torch_users: peer: %s" % r["error"])
        return r

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def train_span_s(timings):
    """seconds from the start of the fit's first training call to the end
    of its last (the calls overlap when several are in flight)"""
    t = [c for c in timings if c and c.get("method") in TRAIN_CALLS]
    if not t:
        raise RuntimeError("the fit's timings hold no training call: %s"
                           % sorted({c.get("method") for c in timings if c}))
    return (max(c["start_ns"] + c["client_total_ns"] for c in t) -
            min(c["start_ns"] for c in t)) * 1e-9


def rtrain_train(a, client, task, seed, data, epochs):
    import torch
    import rtrain.torch as rt
    x, y, xt, yt = data
    m = common.make_net(task, seed)
    opt = torch.optim.SGD(m.parameters(), lr=a.lr, momentum=a.momentum)
    t0 = time.perf_counter()
    h = rt.fit(m, (x, y), loss_fn=torch.nn.CrossEntropyLoss(), optimizer=opt, epochs=epochs,
               batch_size=a.batch, shuffle=True, seed=seed, server=client, verbose=0)
    wall = time.perf_counter() - t0
    train = train_span_s(h.timings)
    # the trained module as the user has it after fit, evaluated by PyTorch
    m.eval()
    hits = 0
    with torch.no_grad():
        for s in range(0, len(yt), 1000):
            out = m(torch.from_numpy(xt[s:s + 1000]))
            hits += int((out.argmax(1).numpy() == yt[s:s + 1000]).sum())
    return {"loss": list(h["loss"]), "epoch_s": train / epochs, "setup_s": wall - train,
            "acc": hits / len(yt)}


def spread(v):
    return "%.4f [%.4f, %.4f]" % (statistics.mean(v), min(v), max(v))


def part_train(a, client, peer, out):
    print("\n1. Accuracy and time per epoch: the same CNN (Conv2d, BatchNorm2d, a skip, "
          "nn.CrossEntropyLoss,\n   SGD lr %g momentum %g, batch %d) from the same initial "
          "weights on the same batches\n   in the same order (rtrain's shuffle for each seed), "
          "seeds %s; test accuracy after the epochs"
          % (a.lr, a.momentum, a.batch, ", ".join(str(s) for s in range(a.seeds))))
    hdr = ("%-7s %11s %6s | %-24s | %-24s | %7s | %9s %9s %7s | %8s | %9s"
           % ("task", "train/test", "epochs", "accuracy rtrain", "accuracy PyTorch",
              "diff", "s/epoch r", "PyTorch", "torch/r", "ep1 loss", "r setup s"))
    print(hdr)
    for task in a.tasks:
        epochs = a.digits_epochs if task == "digits" else a.fmnist_epochs
        n_tr, n_te = (0, 0) if task == "digits" else (a.fmnist_train, a.fmnist_test)
        data = common.load(task, n_tr, n_te)
        runs = []
        for seed in range(a.seeds):
            r = rtrain_train(a, client, task, seed, data, epochs)
            p = peer.ask(cmd="train", task=task, seed=seed, epochs=epochs, batch=a.batch,
                         lr=a.lr, momentum=a.momentum, n_train=n_tr, n_test=n_te)
            runs.append({"seed": seed, "rtrain": r, "torch": p})
        ra = [u["rtrain"]["acc"] for u in runs]
        ta = [u["torch"]["acc"] for u in runs]
        re_ = statistics.median(u["rtrain"]["epoch_s"] for u in runs)
        te = statistics.median(statistics.mean(u["torch"]["epoch_s"]) for u in runs)
        dev = max(abs(u["rtrain"]["loss"][0] - u["torch"]["loss"][0]) / abs(u["torch"]["loss"][0])
                  for u in runs)
        setup = statistics.median(u["rtrain"]["setup_s"] for u in runs)
        diff = statistics.mean(ra) - statistics.mean(ta)
        print("%-7s %11s %6d | %-24s | %-24s | %+7.4f | %9.3f %9.3f %6.2fx | %8.1e | %9.2f"
              % (task, "%d/%d" % (len(data[1]), len(data[3])), epochs, spread(ra), spread(ta),
                 diff, re_, te, te / re_, dev, setup))
        for u in runs:
            print("  seed %d: accuracy %.4f / %.4f, s/epoch %.3f / %.3f, loss per epoch "
                  "rtrain %s, PyTorch %s"
                  % (u["seed"], u["rtrain"]["acc"], u["torch"]["acc"], u["rtrain"]["epoch_s"],
                     statistics.mean(u["torch"]["epoch_s"]),
                     " ".join("%.5f" % v for v in u["rtrain"]["loss"]),
                     " ".join("%.5f" % v for v in u["torch"]["loss"])))
        out.setdefault("train", {})[task] = {
            "epochs": epochs, "n_train": len(data[1]), "n_test": len(data[3]), "runs": runs,
            "acc_rtrain": ra, "acc_torch": ta, "s_per_epoch_rtrain": re_,
            "s_per_epoch_torch": te, "first_epoch_loss_rel_dev": dev}
    print("   diff: mean accuracy rtrain - PyTorch; s/epoch: rtrain's training calls / epochs "
          "(median over seeds),\n   PyTorch's loop per epoch; ep1 loss: the worst relative "
          "difference of the first epoch's mean loss;\n   r setup: rtrain.torch.fit's export, "
          "compile, upload and load-back")


def part_steps(a, client, peer, out):
    import torch
    import rtrain.torch as rt
    print("\n2. A training step: torchvision models (ImageNet stem), %dx%dx3, batch %d, "
          "1000 classes,\n   nn.CrossEntropyLoss, SGD lr 0.01 momentum 0.9; rtrain: the "
          "module exported in training mode;\n   %d rounds of one rtrain step then one "
          "PyTorch step, after 2 warm-up steps each; medians"
          % (a.size, a.size, a.step_batch, a.reps))
    print("%-13s %10s | %12s %12s %8s | %10s" % ("model", "parameters", "rtrain ms",
                                                "PyTorch ms", "torch/r", "compile s"))
    x, y = common.vision_batch(a.step_batch, a.size)
    for name in a.nets:
        m = common.make_vision(name, 0)
        sgd = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
        t0 = time.perf_counter()
        # rtrain.torch.fit's own steps up to the training: export, map, compile
        loss, lkw = rt._map_loss(torch.nn.CrossEntropyLoss())
        model, _, _ = rt._compile(m, x, loss, lkw, rt._map_optimizer(sgd, m), a.step_batch,
                                  False, 0, client, None)
        ds = client.upload(x, y)
        compile_s = time.perf_counter() - t0
        info = peer.ask(cmd="net", name=name, size=a.size, batch=a.step_batch)

        def step():
            t = time.perf_counter()
            model.fit(ds, batch_size=a.step_batch, epochs=1, shuffle=False, verbose=0)
            return (time.perf_counter() - t) * 1e3

        step()
        step()
        r, p = [], []
        for _ in range(a.reps):
            r.append(step())
            p.append(peer.ask(cmd="step")["ms"])
        rm, pm = statistics.median(r), statistics.median(p)
        print("%-13s %9.1fM | %12.1f %12.1f %7.2fx | %10.1f"
              % (name, info["params"] / 1e6, rm, pm, pm / rm, compile_s))
        out.setdefault("steps", {})[name] = {"rtrain_ms": r, "torch_ms": p,
                                              "params": info["params"],
                                              "compile_s": compile_s}
        del model, ds


def part_layout(a, out):
    exe = a.layout or os.path.join(a.build, "bench/layout/bench_layout")
    print("\n3. NCHW data (bench_layout: the importer's per-batch Transpose against a "
          "per-bind copy)")
    if not os.access(exe, os.X_OK):
        print("   n/a (%s not built)" % exe)
        return
    r = subprocess.run([exe, "share", "3", "32", "32", "64", str(a.layout_steps)],
                       capture_output=True, text=True, check=True)
    m = re.search(r"step NCHW (\S+) s, NHWC (\S+) s .*transposing one batch (\S+) s = "
                  r"(\S+)% of the NCHW step; per bind (\S+) s per sample", r.stdout)
    if not m:
        sys.exit("bench_torch_users: bench_layout share printed: %s" % r.stdout)
    sc, sh, tb, pct, ps = (float(v) for v in m.groups())
    print("   its CNN, 3x32x32, batch 64: step NCHW %.2f ms, NHWC %.2f ms (%+.1f%%, noise "
          "at this size);\n   transposing one batch %.3f ms = %.2f%% of the NCHW step; a "
          "per-bind copy: %.2f us per sample, once"
          % (sc * 1e3, sh * 1e3, 100 * (sc - sh) / sh, tb * 1e3, pct, ps * 1e6))
    out["layout"] = {"cnn_step_nchw_s": sc, "cnn_step_nhwc_s": sh, "transpose_batch_s": tb,
                     "share_pct": pct, "bind_s_per_sample": ps}
    st = out.get("steps", {}).get("resnet18")
    r = subprocess.run([exe, "bind", "3", str(a.size), str(a.size), str(a.step_batch), "4"],
                       capture_output=True, text=True, check=True)
    m = re.search(r"(\S+) s per batch of", r.stdout)
    if st and m:
        tb = float(m.group(1))
        rm = statistics.median(st["rtrain_ms"]) * 1e-3
        print("   resnet18's batch, %dx3x%dx%d: transposing it %.3g ms = %.3g%% of rtrain's "
              "step" % (a.step_batch, a.size, a.size, tb * 1e3, 100 * tb / rm))
        out["layout"]["resnet18_share_pct"] = 100 * tb / rm
    print("   digits and Fashion-MNIST (1 channel): NCHW and NHWC are the same bytes (a "
          "Reshape, no transpose)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"),
                    help="the build tree: its python/ (the rtrain package), rtraind, "
                         "bench_layout")
    ap.add_argument("--rtraind", help="the daemon to start (default: the build tree's)")
    ap.add_argument("--server", help="a running daemon HOST:PORT instead")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--tasks", default="digits,fmnist")
    ap.add_argument("--digits-epochs", type=int, default=5)
    ap.add_argument("--fmnist-epochs", type=int, default=2)
    ap.add_argument("--fmnist-train", type=int, default=12000, help="0: all 60000")
    ap.add_argument("--fmnist-test", type=int, default=10000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--nets", default="resnet18,mobilenet_v2", help="'' for none")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--step-batch", type=int, default=16)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-layout", action="store_true")
    ap.add_argument("--layout", help="the bench_layout program (default: the build tree's)")
    ap.add_argument("--layout-steps", type=int, default=10)
    ap.add_argument("--json", help="write everything printed as one JSON object")
    a = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # a table in progress shows in a log
    # torch.onnx.export's notes on BatchNorm's counters, one per layer
    warnings.filterwarnings("ignore", category=UserWarning, module="torch.onnx")
    a.build = os.path.abspath(a.build)
    a.tasks = [t for t in a.tasks.split(",") if t]
    a.nets = [n for n in a.nets.split(",") if n]
    sys.path.insert(0, os.path.join(a.build, "python"))
    import rtrain

    daemon = None
    server = a.server
    if not server:
        daemon, server, _ = start_daemon(a.rtraind or os.path.join(a.build,
                                                                   "server/rpc/rtraind"))
        # its log is read on, so that it never blocks on a full pipe
        threading.Thread(target=lambda: [None for _ in daemon.stdout], daemon=True).start()
    load0 = loadavg()
    peer = Peer()
    out = {"commit": git_commit(), "torch": peer.info, "loadavg_before": load0}
    print("rtrain.torch against PyTorch eager, same run (commit %s; rtraind %s; PyTorch %s at "
          "%d threads, OPENBLAS_CORETYPE unset,\nOpenBLAS 1 thread); load average %s"
          % (out["commit"], server, peer.info["torch"], peer.info["threads"], load0))
    client = rtrain.connect(server, timeout=0)
    try:
        if a.tasks:
            part_train(a, client, peer, out)
        if a.nets:
            part_steps(a, client, peer, out)
        if not a.no_layout:
            part_layout(a, out)
    finally:
        client.close()
        peer.close()
        if daemon:
            daemon.terminate()
            daemon.wait()
    out["loadavg_after"] = loadavg()
    print("\nload average after: %s" % out["loadavg_after"])
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
