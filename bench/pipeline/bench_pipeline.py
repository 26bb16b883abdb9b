#!/usr/bin/python3
"""Pipelined calls and auto steps per call over a slow link: W-C (the
784-512-512-10 MLP, batch 128, SGD) trained from Python through
rtrain_relay at --rtt (default 10ms), as training steps per second.

usage: bench_pipeline.py RTRAIND RTRAIN_RELAY [--rtt 10ms] [--reps 3]
                         [--steps 512]

Configurations, interleaved per repetition, each on a fresh program from
the same weights (compiled and uploaded before the clock starts):
  K=1024   steps_per_execution=1024 (here: one call per epoch of --steps)
  K=1      steps_per_execution=1, 8 calls in flight (librtrain's window)
  auto     steps_per_execution="auto"
Prints medians of steps/s and each one's ratio to K=1024 measured in the
same run. A benchmark: it prints numbers, asserts nothing.
"""
import argparse
import re
import statistics
import subprocess
import sys
import time


def start(cmd, pattern):
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    for line in p.stdout:
        m = re.match(pattern, line)
        if m:
            return p, m.group(1)
    raise SystemExit(f'{cmd[0]} did not start')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('rtraind')
    ap.add_argument('relay')
    ap.add_argument('--rtt', default='10ms')
    ap.add_argument('--reps', type=int, default=3)
    ap.add_argument('--steps', type=int, default=512)
    a = ap.parse_args()
    import numpy as np
    import rtrain
    from rtrain import layers
    d, addr = start([a.rtraind, '--listen', '127.0.0.1:0', '--log-level', 'warn'],
                    r'rtraind listening on (\S+)')
    r, raddr = start([a.relay, '--target', addr, '--rtt', a.rtt], r'relay listening on (\S+)')
    try:
        c = rtrain.connect(raddr, timeout=0)
        rng = np.random.default_rng(0)
        n = 128 * a.steps
        x = rng.random((n, 784), dtype=np.float32)
        y = rng.integers(0, 10, n).astype(np.int32)
        configs = [('K=1024', 1024), ('K=1', 1), ('auto', 'auto')]
        res = {name: [] for name, _ in configs}
        for rep in range(a.reps):
            for name, k in configs:
                m = rtrain.Sequential([layers.Dense(512, activation='relu', input_shape=(784,)),
                                       layers.Dense(512, activation='relu'),
                                       layers.Dense(10, activation='softmax')])
                m.compile(optimizer='sgd', loss='sparse_categorical_crossentropy',
                          metrics=['accuracy'], batch_size=128)
                # compile, upload (once: later runs find the data stored),
                # one step: off the clock
                m.fit(x, y, batch_size=128, epochs=1, verbose=0, shuffle=False,
                      steps_per_epoch=1, steps_per_execution=1)
                t0 = time.perf_counter()
                m.fit(x, y, batch_size=128, epochs=1, verbose=0, shuffle=False,
                      steps_per_execution=k)
                dt = time.perf_counter() - t0
                res[name].append(a.steps / dt)
        print(f'W-C (784-512-512-10, batch 128, SGD), {a.steps} steps per run, through the '
              f'relay at --rtt {a.rtt}, {a.reps} reps interleaved, medians')
        base = statistics.median(res['K=1024'])
        # paired: the median over reps of each rep's ratio to that rep's
        # K=1024 run, which cancels the host's slower and faster spells
        # (the three configurations of a rep run back to back)
        print(f'{"configuration":<12} {"steps/s":>9} {"vs K=1024":>10} {"paired":>7}   runs')
        for name, _ in configs:
            med = statistics.median(res[name])
            paired = statistics.median(v / b for v, b in zip(res[name], res['K=1024']))
            print(f'{name:<12} {med:>9.1f} {med / base:>10.2f} {paired:>7.2f}   '
                  + ' '.join(f'{v:.1f}' for v in res[name]))
        c.close()
    finally:
        r.terminate()
        r.wait()
        d.terminate()
        d.wait()


if __name__ == '__main__':
    sys.exit(main())
