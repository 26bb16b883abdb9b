#!/usr/bin/python3
"""rtraind's --metrics-listen endpoint: every documented family, with its
type and a value the test's own traffic predicts; then a real Prometheus
scrapes it.

usage: test_prometheus.py RTRAIND RTRAIN_CLI SOURCE_DIR

Starts rtraind with --metrics-listen on a free loopback port, a state
directory (checkpoints) and an upload pool and arena. Known traffic with
the rtrain CLI: Pings, a fit of known steps and batch size that checkpoints
and saves its state, and a `checkpoint push` that keeps a session and its
program open. The page must hold exactly the families of the table in
docs/operations.md, each with the table's type, and values that follow from
that traffic. `promtool check metrics` lints the page. Then Debian's
prometheus, with a temporary config scraping the daemon every second, must
read the Ping counter back through its HTTP query API (/api/v1/query).
Without prometheus that last part cannot run: exit 77 (ctest SKIP) after
the rest passed (scripts/deps.sh --test installs it).
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
        if line.startswith(f'{name}{{{want}}} ') or (not labels and line.startswith(name + ' ')):
            return float(line.split()[-1])
    return None


def families(page):
    """{family: (type, [(sample name, {label: value}, value)])} of a page."""
    fam = {}
    for line in page.splitlines():
        m = re.match(r'# TYPE (\S+) (\S+)$', line)
        if m:
            fam[m.group(1)] = (m.group(2), [])
            continue
        if not line or line.startswith('#'):
            continue
        m = re.match(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$', line)
        assert m, line
        name, labels = m.group(1), dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ''))
        base = re.sub(r'_(bucket|sum|count)$', '', name)
        key = name if name in fam else base
        fam[key][1].append((name, labels, float(m.group(3))))
    return fam


def documented(src):
    """{family: type} from the metrics table of docs/operations.md."""
    with open(os.path.join(src, 'docs', 'operations.md')) as f:
        text = f.read()
    table = text[text.index('| family | type | labels |'):]
    table = table[:table.index('\n\n')]
    out = {}
    for row in table.splitlines()[2:]:
        cells = [c.strip() for c in row.strip('|').split('|')]
        for name in re.findall(r'`(rtrain_[a-z0-9_]+)`', cells[0]):
            out[name] = cells[1]
    return out


def histogram_ok(samples):
    """Buckets cumulative by le, +Inf = _count, _sum >= 0, per label set."""
    groups = {}
    for name, labels, v in samples:
        key = tuple(sorted((k, x) for k, x in labels.items() if k != 'le'))
        groups.setdefault(key, {'b': [], 'sum': None, 'count': None})
        if name.endswith('_bucket'):
            le = float('inf') if labels['le'] == '+Inf' else float(labels['le'])
            groups[key]['b'].append((le, v))
        else:
            groups[key][name.rsplit('_', 1)[1]] = v
    for g in groups.values():
        b = sorted(g['b'])
        if not b or b[-1][0] != float('inf') or b[-1][1] != g['count'] or g['sum'] < 0:
            return False
        if any(b[i][1] > b[i + 1][1] for i in range(len(b) - 1)):
            return False
    return bool(groups)


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    rtraind, cli, src = sys.argv[1:4]
    iris = os.path.join(src, 'examples', 'iris')
    tmp = tempfile.mkdtemp(prefix='rtrain-prom-')
    procs = []
    fails = []

    def check(cond, what):
        print(('ok   ' if cond else 'FAIL ') + what)
        if not cond:
            fails.append(what)

    try:
        t_start = time.time()
        pool, arena = 16 << 20, 4 << 20
        d = subprocess.Popen([rtraind, '--listen', '127.0.0.1:0', '--metrics-listen',
                              '127.0.0.1:0', '--log-level', 'warn',
                              '--state-dir', os.path.join(tmp, 'state'),
                              '--upload-pool-bytes', str(pool),
                              '--upload-arena-bytes', str(arena)],
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
        # A fit of 3 epochs x 5 steps of 21 samples (105 rows), one Fit
        # stream checkpointing every 5 steps; its state saved, then pushed
        # back as a program whose session stays open.
        state = os.path.join(tmp, 'state.bin')
        r = subprocess.run([cli, 'fit', '--server', addr, '--model',
                            os.path.join(iris, 'model.json'), '--data',
                            os.path.join(iris, 'train_shuffled.csv'), '--loss',
                            'sparse_categorical_crossentropy', '--epochs', '3',
                            '--batch-size', '21', '--checkpoint-every-steps', '5',
                            '--save-state', state, '--no-progress'],
                           capture_output=True, text=True)
        check(r.returncode == 0 and 'steps 15' in r.stdout, f'rtrain fit ok ({r.stderr[-300:]})')
        # the CSV goes as it is
        sent = os.path.getsize(os.path.join(iris, 'train_shuffled.csv'))
        r = subprocess.run([cli, 'checkpoint', 'push', state, '--server', addr],
                           capture_output=True, text=True)
        check(r.returncode == 0 and 'program p-' in r.stdout, f'checkpoint push ({r.stderr})')

        # The CLI has its answers before the daemon has finished each
        # call's bookkeeping (the call is counted and freed after its
        # status is sent): the page is read once no call is live, within
        # 10 s, so every count below is final.
        for _ in range(1000):
            status, ctype, page = get(f'http://{metrics}/metrics')
            if status != 200 or metric_value(page, 'rtrain_live_calls', {}) == 0:
                break
            time.sleep(0.01)
        check(status == 200 and ctype.startswith('text/plain; version=0.0.4'),
              f'GET /metrics is 200 text/plain version=0.0.4 ({status} {ctype})')
        fam = families(page)
        docs = documented(src)
        check(len(docs) >= 20, f'{len(docs)} families documented')
        for name, typ in sorted(docs.items()):
            got = fam.get(name)
            check(got is not None and got[0] == typ and got[1],
                  f'{name}: {typ}, documented, on the page ({got[0] if got else "absent"})')
        extra = sorted(set(fam) - set(docs))
        check(not extra, f'every family on the page is documented (not: {extra})')
        for name, (typ, samples) in sorted(fam.items()):
            if typ == 'histogram':
                check(histogram_ok(samples), f'{name}: buckets cumulative, +Inf = count')

        def v(name, **labels):
            return metric_value(page, name, labels)

        pings = v('rtrain_calls_total', method=PING, code='OK')
        check(pings == count + 1, f'page counts {count + 1} Pings (got {pings})')
        hist = v('rtrain_call_duration_seconds_count', method=PING)
        check(hist == count + 1, f'the Ping duration histogram has {count + 1} samples ({hist})')
        calls = sum(x for n, _, x in fam['rtrain_calls_total'][1])
        for ph in ('queue', 'decode', 'compile', 'execute', 'encode'):
            check(v('rtrain_phase_duration_seconds_count', phase=ph) == calls,
                  f'phase histogram {ph} counts every call ({calls})')
        check(v('rtrain_calls_total', method='/rtrain.v1.Trainer/Fit', code='OK') == 1 and
              v('rtrain_calls_total', method='/rtrain.v1.Trainer/RestoreCheckpoint',
                code='OK') == 1, 'one Fit, one RestoreCheckpoint')
        check(v('rtrain_steps_total') == 15 and v('rtrain_samples_total') == 15 * 21,
              f'15 steps of 21 samples ({v("rtrain_steps_total")}, {v("rtrain_samples_total")})')
        sps, xps = v('rtrain_steps_per_second'), v('rtrain_samples_per_second')
        check(sps is not None and sps >= 0 and abs(xps - 21 * sps) < 1e-6 * (1 + xps),
              f'samples/s = 21 x steps/s ({xps}, {sps})')
        ok = v('rtrain_checkpoints_total', result='ok')
        check(ok is not None and ok >= 3 and v('rtrain_checkpoints_total', result='failed') == 0,
              f'every 5 of 15 steps checkpointed, none failed ({ok})')
        check(v('rtrain_checkpoint_duration_seconds_count') == ok,
              'a checkpoint duration per checkpoint')
        cb = v('rtrain_checkpoint_bytes_total')
        check(cb is not None and cb >= ok * 4 * 259, f'checkpoints hold the weights ({cb} B)')
        start = v('rtrain_process_start_time_seconds')
        last = v('rtrain_checkpoint_last_success_timestamp_seconds')
        now = time.time()
        check(start is not None and t_start - 1 <= start <= now + 1,
              f'start time {start} within the test\'s [{t_start:.0f}, {now:.0f}]')
        check(last is not None and start <= last <= now + 1, f'last checkpoint at {last}')
        up = v('rtrain_uptime_seconds')
        check(up is not None and 0 <= up <= now - t_start + 1, f'uptime {up} s')
        check(v('rtrain_upload_bytes_total') == sent, f'upload bytes = the CSV\'s {sent}')
        check(v('rtrain_upload_resumed_bytes_total') == 0 and v('rtrain_upload_kept_bytes') == 0,
              'nothing resumed or kept')
        check(v('rtrain_sessions') == 1 and v('rtrain_programs') == 1,
              'the pushed session and program are held (the fit\'s closed)')
        check(v('rtrain_plans_cached') >= 1, 'the plan is cached')
        stored = v('rtrain_stored_bytes')
        check(v('rtrain_datasets') == 1 and stored >= 105 * 5 * 4,
              f'one dataset of 105 rows stored ({stored} B)')
        check(v('rtrain_memory_bytes', kind='datasets') == stored, 'datasets memory = stored')
        params = v('rtrain_memory_bytes', kind='params')
        check(params is not None and 4 * 259 * 4 <= params < 4 * 4 * 259 * 2,
              f'params memory: 259 weights, gradients and Adam slots ({params} B)')
        act = v('rtrain_memory_bytes', kind='activations')
        check(act is not None and 0 < act < 1 << 20, f'activations memory {act} B')
        rss = v('rtrain_memory_bytes', kind='rss')
        check(rss is not None and rss > 1 << 20, f'rss {rss} B')
        check(v('rtrain_live_calls') == 0 and v('rtrain_calls_held') == 0 and
              v('rtrain_serving') == 1, 'no call in flight or held, serving')
        # The upload arena fills the pool to --upload-arena-bytes while no
        # upload runs, and the pool stays under --upload-pool-bytes.
        t0 = time.monotonic()
        idle = v('rtrain_upload_pool_bytes')
        while idle < arena and time.monotonic() - t0 < GIVE_UP_S:
            time.sleep(0.1)
            idle = metric_value(get(f'http://{metrics}/metrics')[2], 'rtrain_upload_pool_bytes',
                                {})
        check(arena <= idle <= pool, f'upload pool {idle} B in [arena {arena}, cap {pool}]')
        # each render counts, and the next page says how long this one took
        n0 = metric_value(get(f'http://{metrics}/metrics')[2], 'rtrain_scrapes_total', {})
        page2 = get(f'http://{metrics}/metrics')[2]
        n1 = metric_value(page2, 'rtrain_scrapes_total', {})
        render = metric_value(page2, 'rtrain_scrape_render_seconds', {})
        check(n1 == n0 + 1, f'scrapes_total counts each render ({n0} then {n1})')
        check(render is not None and 0 < render < 10, f'render took {render} s')
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
        prom = shutil.which('prometheus')
        if not prom:
            print('SKIP: prometheus is not installed (scripts/deps.sh --test installs it)')
            return 1 if fails else 77

        # Prometheus, scraping every second. It cannot listen on port 0 and
        # report the port, so the test picks a free one; another process may
        # take it before Prometheus binds, so a bind failure picks again.
        cfg = os.path.join(tmp, 'prometheus.yml')
        with open(cfg, 'w') as f:
            f.write('global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n'
                    'scrape_configs:\n  - job_name: rtraind\n'
                    f'    static_configs:\n      - targets: ["{metrics}"]\n')
        plog = os.path.join(tmp, 'prometheus.log')
        for _ in range(5):
            web = free_port()
            with open(plog, 'w') as log:
                p = subprocess.Popen([prom, f'--config.file={cfg}',
                                      f'--storage.tsdb.path={os.path.join(tmp, "data")}',
                                      f'--web.listen-address=127.0.0.1:{web}'],
                                     stdout=log, stderr=subprocess.STDOUT, cwd=tmp)
            procs.append(p)
            t0 = time.monotonic()
            while time.monotonic() - t0 < GIVE_UP_S and p.poll() is None:
                try:
                    get(f'http://127.0.0.1:{web}/-/ready', timeout=2)
                    break
                except OSError:
                    time.sleep(0.2)
            if p.poll() is None:
                break
            with open(plog) as f:
                if 'address already in use' not in f.read():
                    break
            print(f'note: port {web} was taken before Prometheus bound it; trying another')
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
            with open(plog) as f:
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
