#!/usr/bin/python3
"""bench/relay's rtrain_relay against an echo server on loopback.

usage: test_relay.py RTRAIN_RELAY

Checks what a benchmark relies on: bytes arrive intact and in order (also
with jitter, which must never reorder), half-close travels, a refused
target closes the client, and the link never delivers early: a round trip
is at least twice the one-way delay, and a bandwidth-capped transfer takes
at least size / rate. Only lower bounds are checked; a loaded machine can
only make things slower.
"""
import hashlib
import os
import socket
import subprocess
import sys
import threading
import time

fails = []


def check(cond, what):
    print(('ok   ' if cond else 'FAIL ') + what)
    if not cond:
        fails.append(what)


def echo_server():
    srv = socket.socket()
    srv.bind(('127.0.0.1', 0))
    srv.listen(16)

    def handle(c):
        with c:
            while True:
                d = c.recv(1 << 16)
                if not d:
                    c.shutdown(socket.SHUT_WR)
                    return
                c.sendall(d)

    def loop():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=handle, args=(c,), daemon=True).start()

    threading.Thread(target=loop, daemon=True).start()
    return srv


def start_relay(binary, target, *args):
    p = subprocess.Popen([binary, '--target', target, *args], stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line.startswith('relay listening on '), line
    host, port = line.split()[-1].rsplit(':', 1)
    return p, (host, int(port))


def stop_relay(p):
    p.terminate()
    out = p.communicate(timeout=30)[0]
    return p.returncode, out


def roundtrip(addr, payload):
    """Connect, send payload, half-close, read everything back; returns
    (data, seconds since before the connect)."""
    t0 = time.monotonic()  # before connect: the relay's accept comes later
    s = socket.create_connection(addr)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    got = bytearray()

    def reader():
        while True:
            d = s.recv(1 << 16)
            if not d:
                return
            got.extend(d)

    th = threading.Thread(target=reader)
    th.start()
    s.sendall(payload)
    s.shutdown(socket.SHUT_WR)
    th.join(120)
    dt = time.monotonic() - t0
    s.close()
    return bytes(got), dt


def main():
    binary = sys.argv[1]
    srv = echo_server()
    target = '127.0.0.1:%d' % srv.getsockname()[1]
    blob = os.urandom(3 << 20)

    p, addr = start_relay(binary, target, '--delay', '20ms')
    data, dt = roundtrip(addr, b'hello')
    check(data == b'hello', 'a small message comes back intact (and EOF follows)')
    # Connect (one round trip of handshake) + the message there and back,
    # timed from before the connect (the relay's clock starts at accept).
    check(dt >= 0.080, f'no early delivery: {dt * 1e3:.1f} ms >= 4 x 20 ms one way')
    s = socket.create_connection(addr)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(b'x')
    s.recv(1)
    t0 = time.monotonic()
    s.sendall(b'y')
    r = s.recv(1)
    dt = time.monotonic() - t0
    s.close()
    check(r == b'y' and dt >= 0.040, f'an established round trip takes >= 2 x 20 ms ({dt * 1e3:.1f})')
    data, _ = roundtrip(addr, blob)
    check(hashlib.sha256(data).digest() == hashlib.sha256(blob).digest(),
          f'3 MiB come back intact and in order ({len(data)} bytes)')
    rc, out = stop_relay(p)
    check(rc == 0 and 'connection(s)' in out, f'relay stops on SIGTERM and reports ({out.strip()})')

    p, addr = start_relay(binary, target, '--delay', '2ms', '--jitter', '2ms')
    results = []

    def one():
        results.append(roundtrip(addr, blob)[0] == blob)

    ths = [threading.Thread(target=one) for _ in range(4)]
    for t in ths:
        t.start()
    for t in ths:
        t.join(120)
    check(results == [True] * 4, 'with jitter, 4 concurrent 3 MiB streams arrive intact')
    stop_relay(p)

    rate = 8 << 20  # 8 MB/s each way
    p, addr = start_relay(binary, target, '--bandwidth', str(rate))
    data, dt = roundtrip(addr, blob[:2 << 20])
    check(data == blob[:2 << 20], 'bandwidth-capped transfer intact')
    check(dt >= (2 << 20) / rate, f'the cap holds: {dt:.3f} s >= {(2 << 20) / rate:.3f} s')
    stop_relay(p)

    # Bound but not listening: connections are refused, and no other process
    # can take the port while the test uses it.
    dead = socket.socket()
    dead.bind(('127.0.0.1', 0))
    dead_port = dead.getsockname()[1]
    p, addr = start_relay(binary, '127.0.0.1:%d' % dead_port, '--delay', '1ms')
    s = socket.create_connection(addr)
    s.settimeout(30)
    try:
        r = s.recv(10)
        closed = r == b''
    except ConnectionResetError:
        closed = True
    check(closed, 'a refused target closes the client connection')
    s.close()
    stop_relay(p)
    dead.close()

    bad = subprocess.run([binary, '--target', 'nohostport'], capture_output=True, text=True)
    check(bad.returncode == 1 and 'HOST:PORT' in bad.stderr, f'bad target: {bad.stderr.strip()}')
    bad = subprocess.run([binary, '--target', target, '--rtt', '10parsecs'], capture_output=True,
                         text=True)
    check(bad.returncode == 2, 'bad duration is a usage error')
    srv.close()
    return 1 if fails else 0


if __name__ == '__main__':
    sys.exit(main())
