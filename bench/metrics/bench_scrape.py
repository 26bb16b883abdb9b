#!/usr/bin/python3
"""What /metrics costs: the scrape itself, and K=1 RunSteps with and
without a scraper running.

usage: bench_scrape.py RTRAIND RTRAIN_CLI [--rounds 5] [--scrapes 300]
                       [--interval-ms 20] [--reps 3000]

Starts one rtraind with --metrics-listen on loopback. Scrape cost: the
client-side time of GET /metrics on a kept-alive connection (median of
--scrapes), and the daemon's own render time (rtrain_scrape_render_seconds,
median). Then `rtrain bench overhead --max-k 1` (K=1 RunSteps, --reps calls)
in --rounds rounds, alternating no scraper / a scraper every --interval-ms
(50x to 750x Prometheus' usual 1-15 s), and prints the medians
side by side as a ratio. A benchmark: it prints numbers, asserts nothing.
"""
import argparse
import http.client
import re
import statistics
import subprocess
import threading
import time


def start(rtraind):
    d = subprocess.Popen([rtraind, '--listen', '127.0.0.1:0', '--metrics-listen', '127.0.0.1:0',
                          '--log-level', 'warn'], stdout=subprocess.PIPE, text=True)
    metrics = addr = None
    for line in d.stdout:
        m = re.match(r'rtraind metrics on http://(\S+)/metrics', line)
        metrics = m.group(1) if m else metrics
        m = re.match(r'rtraind listening on (\S+)', line)
        if m:
            addr = m.group(1)
            break
    return d, addr, metrics


def scrape(conn):
    conn.request('GET', '/metrics')
    r = conn.getresponse()
    return r.read().decode()


def k1_rtt_us(cli, addr, reps):
    out = subprocess.run([cli, 'bench', 'overhead', '--server', addr, '--max-k', '1',
                          '--reps', str(reps)], capture_output=True, text=True, check=True).stdout
    row = next(l for l in out.splitlines() if re.match(r'^\s+1\s+[0-9.]+', l))
    ping = float(re.search(r'Ping floor.*?p50 ([0-9.]+) us', out).group(1))
    return float(row.split()[1]), ping


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('rtraind')
    ap.add_argument('cli')
    ap.add_argument('--rounds', type=int, default=5)
    ap.add_argument('--scrapes', type=int, default=300)
    ap.add_argument('--interval-ms', type=float, default=20)
    ap.add_argument('--reps', type=int, default=3000)
    a = ap.parse_args()
    d, addr, metrics = start(a.rtraind)
    try:
        host, port = metrics.rsplit(':', 1)
        # Traffic first, so the page has every histogram filled.
        k1_rtt_us(a.cli, addr, 50)
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        client_us, render_us, size = [], [], 0
        for _ in range(a.scrapes):
            t0 = time.perf_counter()
            page = scrape(conn)
            client_us.append((time.perf_counter() - t0) * 1e6)
            size = len(page)
            m = re.search(r'^rtrain_scrape_render_seconds ([0-9.e-]+)$', page, re.M)
            render_us.append(float(m.group(1)) * 1e6)
        conn.close()
        render_us = render_us[1:]  # each page reports the render before it

        stop = threading.Event()
        count = [0]

        def scraper():
            c = http.client.HTTPConnection(host, int(port), timeout=10)
            while not stop.wait(a.interval_ms / 1e3):
                scrape(c)
                count[0] += 1
            c.close()

        off, on, ping_off, ping_on = [], [], [], []
        for _ in range(a.rounds):
            r, p = k1_rtt_us(a.cli, addr, a.reps)
            off.append(r)
            ping_off.append(p)
            stop.clear()
            th = threading.Thread(target=scraper)
            th.start()
            r, p = k1_rtt_us(a.cli, addr, a.reps)
            stop.set()
            th.join()
            on.append(r)
            ping_on.append(p)
    finally:
        d.terminate()
        d.wait()

    med = statistics.median
    print(f'bench scrape: rtraind /metrics on {metrics}, page {size} bytes')
    print(f'{"what":44} {"p50":>10} {"p90":>10}')
    q = lambda v, p: sorted(v)[min(len(v) - 1, int(p * len(v)))]
    print(f'{"GET /metrics, client side (kept-alive)":44} {med(client_us):8.1f} us '
          f'{q(client_us, .9):8.1f} us')
    print(f'{"render on the daemon":44} {med(render_us):8.1f} us {q(render_us, .9):8.1f} us')
    print(f'\nK=1 RunSteps round trip, median of {a.reps} calls per run, {a.rounds} rounds '
          f'alternating; scraper every {a.interval_ms:g} ms ({count[0]} scrapes in all)')
    print(f'{"":24} {"no scraper":>12} {"scraper":>12} {"ratio":>8}')
    print(f'{"RunSteps K=1 p50 (us)":24} {med(off):12.1f} {med(on):12.1f} {med(on) / med(off):8.3f}')
    print(f'{"Ping p50 (us), same run":24} {med(ping_off):12.1f} {med(ping_on):12.1f} '
          f'{med(ping_on) / med(ping_off):8.3f}')
    print(f'per round, off: {" ".join(f"{x:.1f}" for x in off)}')
    print(f'per round, on:  {" ".join(f"{x:.1f}" for x in on)}')


if __name__ == '__main__':
    main()
