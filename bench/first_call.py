#!/usr/bin/python3
"""grpcio's first call on a new channel against rtraind, the peer of
rtrain's (bench/story.py): a channel, one empty Ping, closed; the first in
this process (grpcio imported already), then N more, each on a new channel
with its own connection (a local subchannel pool: nothing is shared).

  /usr/bin/python3 bench/first_call.py HOST:PORT [N]

Prints "first_call cold_us=... p50_us=... version=grpcio-X". The request
and the response go as raw bytes (an empty PingRequest is zero bytes), so
no generated code is needed. Asserts nothing about time.
"""
import math
import sys
import time

try:
    import grpc
except ImportError:
    print("python3-grpcio not installed (scripts/deps.sh --bench installs it)")
    sys.exit(1)


def one(target):
    t0 = time.perf_counter_ns()
    ch = grpc.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])
    ping = ch.unary_unary("/rtrain.v1.Trainer/Ping")
    ping(b"", timeout=30)
    us = (time.perf_counter_ns() - t0) / 1e3
    ch.close()
    return us


def main():
    target = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    cold = one(target)
    v = sorted(one(target) for _ in range(n))
    p50 = v[max(1, math.ceil(0.5 * n)) - 1]  # nearest rank, as rtrain's
    print("first_call cold_us=%.1f p50_us=%.1f version=grpcio-%s" % (cold, p50, grpc.__version__))


if __name__ == "__main__":
    main()
