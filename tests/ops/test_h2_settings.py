#!/usr/bin/python3
"""rtraind advertises SETTINGS_MAX_CONCURRENT_STREAMS (RFC 9113 6.5.2).

usage: test_h2_settings.py RTRAIND

A raw HTTP/2 client (prior knowledge, plaintext on loopback) sends the
connection preface and an empty SETTINGS frame and reads the daemon's
SETTINGS frame: MAX_CONCURRENT_STREAMS (0x3) is 100 by default and what
--max-concurrent-streams says otherwise. Without the setting a peer may
open streams without bound on one connection.
"""
import re
import socket
import struct
import subprocess
import sys

PREFACE = b'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'
fails = []


def check(cond, what):
    print(('ok   ' if cond else 'FAIL ') + what, flush=True)
    if not cond:
        fails.append(what)


def read_exact(s, n):
    b = b''
    while len(b) < n:
        k = s.recv(n - len(b))
        if not k:
            raise EOFError('connection closed')
        b += k
    return b


def server_settings(port):
    """The daemon's first SETTINGS frame as {id: value}."""
    s = socket.create_connection(('127.0.0.1', port), timeout=20)
    try:
        s.sendall(PREFACE + struct.pack('>I', 0)[1:] + b'\x04\x00' + struct.pack('>I', 0))
        for _ in range(16):
            head = read_exact(s, 9)
            length = int.from_bytes(head[:3], 'big')
            ftype, flags = head[3], head[4]
            payload = read_exact(s, length)
            if ftype == 0x4 and not flags & 0x1:  # SETTINGS, not an ACK
                return {struct.unpack('>H', payload[i:i + 2])[0]:
                        struct.unpack('>I', payload[i + 2:i + 6])[0]
                        for i in range(0, len(payload) - 5, 6)}
        return {}
    finally:
        s.close()


def daemon(rtraind, *extra):
    d = subprocess.Popen([rtraind, '--listen', '127.0.0.1:0', '--log-level', 'warn', *extra],
                         stdout=subprocess.PIPE, text=True)
    for line in d.stdout:
        m = re.match(r'rtraind listening on 127\.0\.0\.1:(\d+)', line)
        if m:
            return d, int(m.group(1))
    d.wait()
    return d, None


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    for extra, want in (((), 100), (('--max-concurrent-streams', '7'), 7)):
        d, port = daemon(sys.argv[1], *extra)
        try:
            check(port is not None, f'rtraind {" ".join(extra)} starts')
            if port is None:
                continue
            st = server_settings(port)
            check(st.get(0x3) == want,
                  f'{" ".join(extra) or "default"}: SETTINGS_MAX_CONCURRENT_STREAMS = '
                  f'{st.get(0x3)}, want {want} (all settings {st})')
        finally:
            d.terminate()
            d.wait()
    print(f'{len(fails)} failure(s)')
    return 1 if fails else 0


if __name__ == '__main__':
    sys.exit(main())
