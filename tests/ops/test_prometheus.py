#!/usr/bin/python3
"""A real Prometheus scrapes rtraind's --metrics-listen endpoint.

usage: test_prometheus.py RTRAIND RTRAIN_CLI

Starts rtraind with --metrics-listen on a free loopback port, makes a known
number of Ping calls with the rtrain CLI, checks the page with
`promtool check metrics`, then starts Debian's prometheus with a temporary
config scraping the daemon every second, and reads the Ping counter back
through Prometheus' HTTP query API (/api/v1/query). Exit 77 (ctest SKIP)
when prometheus is not installed (scripts/deps.sh --test installs it).
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

PING = '/rtrain.v1.Trainer/Ping'
# A missing scrape is a failure, not a slow pass: the bound is for a broken
# setup, far above what a scrape every second needs.
GIVE_UP_S = 180


def free_port():
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
    s.close()
    return port


def get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.headers.get('Content-Type', ''), r.read().decode()


def metric_value(text, name, labels):
    want = ','.join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        if line.startswith(f'{name}{{{want}}} '):
            return float(line.split()[-1])
    return None


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    rtraind, cli = sys.argv[1], sys.argv[2]
    prom = shutil.which('prometheus')
    if not prom:
        print('SKIP: prometheus is not installed (scripts/deps.sh --test installs it)')
        return 77
    tmp = tempfile.mkdtemp(prefix='rtrain-prom-')
    procs = []
    fails = []

    def check(cond, what):
        print(('ok   ' if cond else 'FAIL ') + what)
        if not cond:
            fails.append(what)

    try:
        d = subprocess.Popen([rtraind, '--listen', '127.0.0.1:0', '--metrics-listen',
                              '127.0.0.1:0', '--log-level', 'warn'],
                             stdout=subprocess.PIPE, text=True)
        procs.append(d)
        metrics = addr = None
        for line in d.stdout:
            m = re.match(r'rtraind metrics on http://(\S+)/metrics', line)
            if m:
                metrics = m.group(1)
            m = re.match(r'rtraind listening on (\S+)', line)
            if m:
                addr = m.group(1)
                break
        check(metrics is not None and addr is not None, 'daemon printed both addresses')
        if fails:
            return 1

        # Known traffic: rtrain ping makes one first call plus --count.
        count = 7
        r = subprocess.run([cli, 'ping', '--server', addr, '--count', str(count)],
                           capture_output=True, text=True)
        check(r.returncode == 0, f'rtrain ping ok ({r.stderr.strip()})')

        status, ctype, page = get(f'http://{metrics}/metrics')
        check(status == 200 and ctype.startswith('text/plain; version=0.0.4'),
              f'GET /metrics is 200 text/plain version=0.0.4 ({status} {ctype})')
        pings = metric_value(page, 'rtrain_calls_total', {'method': PING, 'code': 'OK'})
        check(pings == count + 1, f'page counts {count + 1} Pings (got {pings})')
        hist = metric_value(page, 'rtrain_call_duration_seconds_count', {'method': PING})
        check(hist == count + 1, f'the Ping duration histogram has {count + 1} samples ({hist})')
        for ph in ('queue', 'decode', 'compile', 'execute', 'encode'):
            check(metric_value(page, 'rtrain_phase_duration_seconds_count', {'phase': ph})
                  == count + 1, f'phase histogram {ph} counts every call')
        check(re.search(r'^rtrain_serving 1$', page, re.M) is not None, 'serving is 1')
        check(re.search(r'^rtrain_memory_bytes\{kind="rss"\} [1-9]', page, re.M) is not None,
              'rss memory is reported')
        status, _, _ = get(f'http://{metrics}/metrics')
        try:
            get(f'http://{metrics}/nope')
            check(False, 'an unknown path is 404')
        except urllib.error.HTTPError as e:
            check(e.code == 404, f'an unknown path is 404 ({e.code})')

        promtool = shutil.which('promtool')
        if promtool:
            r = subprocess.run([promtool, 'check', 'metrics'], input=page, capture_output=True,
                               text=True)
            check(r.returncode == 0, f'promtool check metrics passes {r.stdout}{r.stderr}')

        # Prometheus, scraping every second.
        web = free_port()
        cfg = os.path.join(tmp, 'prometheus.yml')
        with open(cfg, 'w') as f:
            f.write('global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n'
                    'scrape_configs:\n  - job_name: rtraind\n'
                    f'    static_configs:\n      - targets: ["{metrics}"]\n')
        log = open(os.path.join(tmp, 'prometheus.log'), 'w')
        p = subprocess.Popen([prom, f'--config.file={cfg}',
                              f'--storage.tsdb.path={os.path.join(tmp, "data")}',
                              f'--web.listen-address=127.0.0.1:{web}'],
                             stdout=log, stderr=subprocess.STDOUT, cwd=tmp)
        procs.append(p)
        query = urllib.parse.quote(f'rtrain_calls_total{{method="{PING}",code="OK"}}')
        got = None
        up = None
        t0 = time.monotonic()
        while time.monotonic() - t0 < GIVE_UP_S and p.poll() is None:
            try:
                _, _, body = get(f'http://127.0.0.1:{web}/api/v1/query?query={query}')
                res = json.loads(body)['data']['result']
                if res:
                    got = float(res[0]['value'][1])
                    _, _, body = get(f'http://127.0.0.1:{web}/api/v1/query?query=up')
                    up = json.loads(body)['data']['result'][0]['value'][1]
                    break
            except (OSError, ValueError, KeyError, IndexError):
                pass
            time.sleep(0.5)
        if got is None:
            log.flush()
            with open(os.path.join(tmp, 'prometheus.log')) as f:
                print(f.read()[-3000:])
        check(got == count + 1, f'Prometheus query API returns {count + 1} Pings (got {got})')
        check(up == '1', f'Prometheus sees the target up (up={up})')
        return 1 if fails else 0
    finally:
        for pr in procs:
            if pr.poll() is None:
                pr.send_signal(signal.SIGTERM)
                try:
                    pr.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    pr.kill()
                    pr.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == '__main__':
    sys.exit(main())
