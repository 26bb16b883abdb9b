#!/usr/bin/python3
"""The /metrics port cannot be held by slow clients (an HTTP slowloris).

usage: test_metrics_slowloris.py RTRAIND

Starts rtraind with --metrics-listen on loopback and --grace-ms 2000, then
opens 500 sockets to the metrics port from 127.0.0.1, each sending part of
a request head and nothing more. While they are open:
  - a scrape from 127.0.0.2 (another address for the per-address limit)
    gets the page: 200 and the rtrain_ families;
  - of the 500, the daemon keeps at most its per-address limit (8,
    docs/operations.md): the others are closed (EOF or a reset);
  - a client from 127.0.0.3 that sends one byte of its request head every
    second, never idle but never done, is closed by the head deadline;
  - a request head over the size limit is refused (431, or closed).
Then SIGTERM: the daemon exits 0 within --grace-ms plus a margin for a
loaded machine (the stop must not wait on the HTTP clients; before the
limits it took 27 s), and the time is printed.

The bounds below are functional (a scrape that never comes, a stop that
hangs), set far above what the daemon needs.
"""
import http.client
import re
import selectors
import signal
import socket
import subprocess
import sys
import time

N_SLOW = 500
PER_IP = 8  # connections the daemon keeps per address
GRACE_MS = 2000
STOP_BOUND_S = GRACE_MS / 1000 + 8
fails = []


def check(cond, what):
    print(('ok   ' if cond else 'FAIL ') + what, flush=True)
    if not cond:
        fails.append(what)


def closed_by_peer(s):
    """Whether the peer closed s (EOF or reset); s is non-blocking."""
    try:
        return s.recv(4096) == b''
    except BlockingIOError:
        return False
    except OSError:
        return True


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    d = subprocess.Popen([sys.argv[1], '--listen', '127.0.0.1:0', '--metrics-listen',
                          '127.0.0.1:0', '--grace-ms', str(GRACE_MS), '--log-level', 'warn'],
                         stdout=subprocess.PIPE, text=True)
    port = None
    for line in d.stdout:
        m = re.match(r'rtraind metrics on http://127\.0\.0\.1:(\d+)/metrics', line)
        port = int(m.group(1)) if m else port
        if line.startswith('rtraind listening on'):
            break
    check(port is not None, f'the daemon serves /metrics on port {port}')
    slow = []
    try:
        for _ in range(N_SLOW):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(('127.0.0.1', port))
            slow.append(s)
        sel = selectors.DefaultSelector()
        for s in slow:
            sel.register(s, selectors.EVENT_WRITE)
        # each sends a partial head once its connect completes (or fails)
        pending = len(slow)
        t_end = time.monotonic() + 30
        while pending and time.monotonic() < t_end:
            for key, _ in sel.select(timeout=1):
                sel.unregister(key.fileobj)
                pending -= 1
                try:
                    key.fileobj.send(b'GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ')
                except OSError:
                    pass
        print(f'     {N_SLOW} slow sockets opened ({pending} still connecting)')

        # a scrape from another address
        c = http.client.HTTPConnection('127.0.0.1', port, timeout=20,
                                       source_address=('127.0.0.2', 0))
        try:
            c.request('GET', '/metrics')
            r = c.getresponse()
            body = r.read().decode()
            check(r.status == 200 and 'rtrain_calls_total' in body,
                  f'a scrape from 127.0.0.2 works beside {N_SLOW} slow sockets (HTTP {r.status})')
        except OSError as e:
            check(False, f'a scrape from 127.0.0.2 beside {N_SLOW} slow sockets: {e!r}')
        finally:
            c.close()

        # the daemon keeps few of the 500: the rest are closed
        t_end = time.monotonic() + 30
        kept = N_SLOW
        while time.monotonic() < t_end:
            kept = sum(1 for s in slow if not closed_by_peer(s))
            if kept <= PER_IP:
                break
            time.sleep(0.2)
        check(kept <= PER_IP, f'{N_SLOW - kept} of the {N_SLOW} slow sockets were closed '
              f'({kept} left open)')

        # one that is never idle and never done: closed by the head deadline
        t = socket.socket()
        t.bind(('127.0.0.3', 0))
        t.settimeout(20)
        t.connect(('127.0.0.1', port))
        t.send(b'GET /metrics HTTP/1.1\r\n')
        t0 = time.monotonic()
        closed = False
        while time.monotonic() - t0 < 60 and not closed:
            try:
                t.send(b'X')
            except OSError:
                closed = True
                break
            t.settimeout(1)
            try:
                closed = t.recv(4096) == b''
            except socket.timeout:
                pass
            except OSError:
                closed = True
        check(closed, f'a client trickling its head is closed after '
              f'{time.monotonic() - t0:.1f} s (never idle, never done)')
        t.close()

        # a head over the size limit
        b = socket.socket()
        b.bind(('127.0.0.4', 0))
        b.settimeout(20)
        b.connect(('127.0.0.1', port))
        got = b''
        try:
            b.sendall(b'GET /metrics HTTP/1.1\r\nHost: x\r\n' +
                      b''.join(b'X-%d: %s\r\n' % (i, b'y' * 100) for i in range(400)) + b'\r\n')
            got = b.recv(4096)
        except OSError:
            pass
        b.close()
        check(not got.startswith(b'HTTP/1.1 200'),
              f'a 40 KB request head is refused ({got[:12]!r})')

        # SIGTERM with the slow sockets still open
        t0 = time.monotonic()
        d.send_signal(signal.SIGTERM)
        try:
            rc = d.wait(timeout=STOP_BOUND_S)
        except subprocess.TimeoutExpired:
            rc = None
        took = time.monotonic() - t0
        print(f'     SIGTERM to exit: {took:.2f} s with {N_SLOW} slow sockets open '
              f'(--grace-ms {GRACE_MS})')
        check(rc == 0, f'the daemon stops (exit {rc}) within --grace-ms + '
              f'{STOP_BOUND_S - GRACE_MS / 1000:.0f} s')
    finally:
        for s in slow:
            s.close()
        if d.poll() is None:
            d.kill()
            d.wait()
    print(f'{len(fails)} failure(s)')
    return 1 if fails else 0


if __name__ == '__main__':
    sys.exit(main())
