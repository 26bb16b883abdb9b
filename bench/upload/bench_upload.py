#!/usr/bin/python3
"""Upload throughput from Python into rtraind's store, beside a bare gRPC
client-streaming call measured in the same run.

usage: bench_upload.py RTRAIND BENCH_STREAM [--sizes 256M,1G] [--reps 5]
                       [--arena 2x]

For each size and repetition, alternately:
  * rtrain: Client._upload of a fresh float32 array (one changed value per
    repetition, so the daemon never finds it already stored): the client
    hashes it (FindDataset), streams it, the daemon places, hashes and
    checks it and the dataset adopts the buffer; timed from the call to its
    answer; the daemon's upload arena (--arena) is faulted in before the
    first upload;
  * peer: bench_stream, one bare gRPC client stream of the same bytes in
    1 MiB messages, gRPC core on both ends, no protobuf, no daemon, with
    the transport settings rtraind and librtrain use (rt_transport.h), and
    once more with gRPC's defaults ("plain").
After the repetitions, the last array is uploaded once more ("dedup ms"):
the daemon holds it, so the probe says probable, the client hashes it all
and FindDataset finds it; nothing is sent (checked: bytes_sent 0).
Prints the medians in GB/s (10^9 bytes/s) and the ratio to the first peer,
and the CPU time each spent per GB, both ends together (rtrain: the
daemon's and this process's user+system time; the peer: its own), which a
loaded machine disturbs far less than the wall time. With --resume,
also the bytes a resumed upload sent after a cancel at ~90% (the daemon's
rtrain_upload_resumed_bytes_total counter via its bytes_sent). A
benchmark: it prints numbers, asserts nothing.
"""
import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import time


def size_arg(s):
    m = re.fullmatch(r'(\d+)([KMG]?)', s.strip())
    return int(m.group(1)) << {'': 0, 'K': 10, 'M': 20, 'G': 30}[m.group(2)]


def start(rtraind, store, arena):
    # --arena 0 passes no flag: a daemon from before the arena takes none
    d = subprocess.Popen([rtraind, '--listen', '127.0.0.1:0', '--log-level', 'warn',
                          '--max-store-bytes', str(store)] +
                         (['--upload-arena-bytes', str(arena)] if arena else []),
                         stdout=subprocess.PIPE, text=True)
    for line in d.stdout:
        m = re.match(r'rtraind listening on (\S+)', line)
        if m:
            return d, m.group(1)
    raise SystemExit('rtraind did not start')


def rss(pid):
    for line in open(f'/proc/{pid}/status'):
        if line.startswith('VmRSS:'):
            return int(line.split()[1]) << 10
    return 0


def wait_arena(pid, arena):
    """Seconds until the daemon's arena thread has faulted its memory in
    (its resident size reaches the arena), at most a minute."""
    t0 = time.perf_counter()
    while rss(pid) < arena and time.perf_counter() - t0 < 60:
        time.sleep(0.05)
    return time.perf_counter() - t0


def cpu_self():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def cpu_of(pid):
    f = open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf('SC_CLK_TCK')


def peer(stream, nbytes, mode):
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([stream, str(nbytes), str(1 << 20), mode], capture_output=True,
                         text=True, check=True)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
    b, secs, _ = out.stdout.split()
    return int(b) / float(secs) / 1e9, cpu / (int(b) / 1e9)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('rtraind')
    ap.add_argument('stream')
    ap.add_argument('--sizes', default='256M,1G')
    ap.add_argument('--reps', type=int, default=5)
    ap.add_argument('--arena', default='2x',
                    help="the daemon's --upload-arena-bytes: NX (N times the size, the "
                         "default 2x: the first two uploads of a size find no freed "
                         "dataset's buffer), a byte count, or 0 (no flag: the daemon's "
                         "default)")
    a = ap.parse_args()
    import numpy as np
    import rtrain
    sizes = [size_arg(s) for s in a.sizes.split(',')]
    print(f'upload throughput, Python -> rtraind store vs a bare gRPC stream, '
          f'{a.reps} reps, medians (GB/s = 1e9 B/s)')
    print(f'{"size":>8} {"rtrain GB/s":>12} {"bare gRPC GB/s":>15} {"ratio":>7}'
          f' {"bare, plain":>12} {"CPU s/GB rtrain":>16} {"bare":>6} {"plain":>6}'
          f' {"dedup ms":>9}   rtrain runs (the first two on the arena\'s memory)')
    for n in sizes:
        # A daemon per size whose store holds one dataset of it: each upload
        # evicts the one before, whose buffer the upload after it reuses
        # (--upload-pool-bytes).
        arena = (int(float(a.arena[:-1]) * n) if a.arena.endswith('x')
                 else size_arg(a.arena))
        d, addr = start(a.rtraind, n + (64 << 20), arena)
        try:
            # The arena is faulted in at start, off the uploads' path.
            ready = wait_arena(d.pid, arena) if arena else 0.0
            c = rtrain.connect(addr, timeout=0)
            x = np.random.default_rng(n).random((n // 1024, 256), dtype=np.float32)
            ours, base, plain, c_ours, c_base, c_plain = [], [], [], [], [], []
            for r in range(a.reps):
                x[0, 0] = float(r + 1)  # new content: no dedup
                t0, u0 = time.perf_counter(), cpu_self() + cpu_of(d.pid)
                ds = c._upload(x, None, 'bench')
                dt = time.perf_counter() - t0
                c_ours.append((cpu_self() + cpu_of(d.pid) - u0) / (n / 1e9))
                if ds['deduplicated'] or ds['bytes_sent'] != n:
                    raise SystemExit(f'upload {r}: {ds}')
                ours.append(n / dt / 1e9)
                for out, cpu, mode in ((base, c_base, 'tuned'), (plain, c_plain, 'plain')):
                    g, u = peer(a.stream, n, mode)
                    out.append(g)
                    cpu.append(u)
            t0 = time.perf_counter()
            again = c._upload(x, None, 'bench')
            dedup_ms = (time.perf_counter() - t0) * 1e3
            if not again['deduplicated'] or again['bytes_sent'] != 0:
                raise SystemExit(f'the same array again: {again}')
            mo, mb = statistics.median(ours), statistics.median(base)
            print(f'{n >> 20:>6}Mi {mo:>12.2f} {mb:>15.2f} {mo / mb:>7.2f}'
                  f' {statistics.median(plain):>12.2f} {statistics.median(c_ours):>16.2f}'
                  f' {statistics.median(c_base):>6.2f} {statistics.median(c_plain):>6.2f}'
                  f' {dedup_ms:>9.1f}   '
                  + ' '.join(f'{v:.2f}' for v in ours)
                  + f'   (arena {arena >> 20} MiB, faulted in {ready:.1f} s)')
            del x
            c.close()
        finally:
            d.terminate()
            d.wait()


if __name__ == '__main__':
    sys.exit(main())
