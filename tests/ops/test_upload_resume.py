#!/usr/bin/python3
"""A Python upload killed mid-stream, then resumed by the next upload of
the same array: only the rest is sent.

usage: test_upload_resume.py RTRAIND RTRAIN_RELAY PYTHONPATH

A child process uploads a 64 MiB array through rtrain_relay capped at
32 MB/s (so the stream lasts about two seconds), and is killed (SIGKILL)
once the daemon's /metrics shows a quarter of it arrived. The upload is
new to the daemon, so the client streams at once and sends the content
hash in a chunk once its thread has it (hash_later), well within that
quarter; the daemon keeps what it received (rtrain_upload_kept_bytes).
This process then uploads the same array straight to the daemon: the
probe finds the kept upload by its sample, FindDataset (content hash)
reports the kept bytes, the stream sends the rest, and both ends count
it: bytes_sent (client) + the
daemon's bytes_resumed = the whole, and the daemon's
rtrain_upload_resumed_bytes_total says the same. The dataset is the
array's: a third upload finds it by its content hash (deduplicated, same
id), and its shape is right.
"""
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

fails = []
N = 64 << 20


def check(cond, what):
    print(('ok   ' if cond else 'FAIL ') + what)
    if not cond:
        fails.append(what)


def metric(url, name):
    page = urllib.request.urlopen(url, timeout=10).read().decode()
    m = re.search(r'^' + re.escape(name) + r' (\S+)$', page, re.M)
    return float(m.group(1)) if m else -1.0


CHILD = r'''
import sys
import numpy as np
import rtrain
c = rtrain.connect(sys.argv[1], timeout=0)
x = np.random.default_rng(7).random((%d, 256), dtype=np.float32)
print("uploading", flush=True)
c._upload(x, None, "resume")
print("finished", flush=True)
''' % (N // 1024)


def main():
    rtraind, relay_bin, pypath = sys.argv[1:4]
    env = dict(os.environ, PYTHONPATH=pypath)
    d = subprocess.Popen([rtraind, '--listen', '127.0.0.1:0', '--metrics-listen',
                          '127.0.0.1:0', '--log-level', 'warn'], stdout=subprocess.PIPE,
                         text=True)
    addr = murl = None
    for line in d.stdout:
        m = re.match(r'rtraind metrics on (http://\S+/metrics)', line)
        murl = m.group(1) if m else murl
        m = re.match(r'rtraind listening on (\S+)', line)
        if m:
            addr = m.group(1)
            break
    relay = subprocess.Popen([relay_bin, '--target', addr, '--bandwidth', '32MB'],
                             stdout=subprocess.PIPE, text=True)
    raddr = None
    for line in relay.stdout:
        m = re.match(r'relay listening on (\S+)', line)
        if m:
            raddr = m.group(1)
            break
    child = None
    try:
        child = subprocess.Popen([sys.executable, '-c', CHILD, raddr], env=env,
                                 stdout=subprocess.PIPE, text=True)
        check(child.stdout.readline().strip() == 'uploading', 'the child started its upload')
        # Kill it once a quarter reached the daemon (a condition, not a
        # time: the relay's cap leaves the stream seconds to run). A stream
        # broken before its content hash came is not kept; the hash takes
        # the client milliseconds, the first quarter 0.5 s through the relay.
        deadline = time.monotonic() + 60
        while (metric(murl, 'rtrain_upload_bytes_total') < N // 4 and
               time.monotonic() < deadline):
            time.sleep(0.005)
        child.send_signal(signal.SIGKILL)
        child.wait()
        got = metric(murl, 'rtrain_upload_bytes_total')
        check(N // 4 <= got < N, f'killed mid-stream: the daemon had {got:.0f} of {N} bytes')
        # The daemon notices the broken stream and keeps what it read.
        while metric(murl, 'rtrain_upload_kept_bytes') <= 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        kept = metric(murl, 'rtrain_upload_kept_bytes')
        check(kept > 0, f'the daemon kept {kept:.0f} bytes for a resume')

        sys.path.insert(0, pypath)
        import numpy as np
        import rtrain
        c = rtrain.connect(addr, timeout=0)
        x = np.random.default_rng(7).random((N // 1024, 256), dtype=np.float32)
        ds = c._upload(x, None, 'resume')
        check(not ds['deduplicated'] and ds['samples'] == N // 1024 and
              ds['x_shape'] == (256,), f'resumed upload made the dataset: {ds}')
        check(ds['bytes_resumed'] > 0 and ds['bytes_sent'] + ds['bytes_resumed'] == N,
              f"sent only the rest: sent {ds['bytes_sent']} + resumed {ds['bytes_resumed']}"
              f' = {N}')
        check(ds['bytes_resumed'] >= got - (1 << 20),
              f"resumed from what the daemon had ({ds['bytes_resumed']} >= {got:.0f} - 1 chunk)")
        check(metric(murl, 'rtrain_upload_resumed_bytes_total') == ds['bytes_resumed'],
              'the daemon counted the resumed bytes')
        check(metric(murl, 'rtrain_upload_kept_bytes') == 0, 'nothing kept after the resume')
        again = c._upload(x, None, 'resume')
        check(again['deduplicated'] and again['id'] == ds['id'] and again['bytes_sent'] == 0,
              'the same array is found by its content hash: same dataset')
        c.close()
    finally:
        if child and child.poll() is None:
            child.kill()
        relay.terminate()
        relay.wait()
        d.terminate()
        d.wait()
    print(f'{len(fails)} failed' if fails else 'all passed')
    return 1 if fails else 0


if __name__ == '__main__':
    sys.exit(main())
