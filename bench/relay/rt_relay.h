/*
 * rt_relay.h - a latency-injecting TCP relay for benchmarks: it listens on
 * a free loopback port and forwards every connection to a target, holding
 * each chunk of bytes back by a one-way delay (plus jitter) and pacing it
 * to a bandwidth cap, in each direction. It stands in for `tc netem`, which
 * these machines lack, so the client/daemon round trip can be made 2, 10 or
 * 50 ms without leaving user space.
 *
 *     rt_relay_config cfg;  rt_relay_config_init(&cfg);
 *     cfg.target = "127.0.0.1:7070";
 *     cfg.delay_us = 5000;                 // 10 ms round trip
 *     rt_relay *r;  char err[256];
 *     if (rt_relay_start(&cfg, &r, err, sizeof err) < 0) -> print err
 *     connect clients to rt_relay_address(r)   // "127.0.0.1:PORT"
 *     ...
 *     rt_relay_stop(r);                    // closes every connection
 *
 * The model of the link, per direction: bytes read from one side at time t
 * leave the link at max(t, link free) + len / bandwidth, and are written to
 * the other side delay +- jitter later. Delivery times never go backwards,
 * so jitter never reorders a stream (TCP would not either). An EOF travels
 * the same way and becomes shutdown(SHUT_WR) on the far side, so
 * half-closed streams (gRPC's client half-close) keep working.
 *
 * One thread serves all connections (epoll plus a timerfd for delivery
 * times). Queued bytes per direction are capped; past the cap the relay
 * stops reading that side, so a fast sender meets TCP back-pressure as it
 * would on a real slow link.
 */
#ifndef RTRAIN_RELAY_H
#define RTRAIN_RELAY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rt_relay_config {
    const char *target;      /* host:port to forward to (required) */
    const char *listen;      /* host:port; default "127.0.0.1:0" (a free port) */
    uint64_t delay_us;       /* one-way delay, each direction */
    uint64_t jitter_us;      /* each chunk: delay + uniform[-jitter, +jitter] */
    uint64_t bandwidth_Bps;  /* bytes per second per direction; 0 = no cap */
    uint64_t queue_bytes;    /* per direction before reading stops;
                                0 = 4 MiB + the bandwidth-delay product */
    uint64_t seed;           /* jitter's random stream */
} rt_relay_config;

void rt_relay_config_init(rt_relay_config *cfg);

typedef struct rt_relay rt_relay;

typedef struct rt_relay_stats {
    uint64_t connections;    /* accepted so far */
    uint64_t open;           /* connections open now */
    uint64_t bytes_up;       /* client -> target, delivered */
    uint64_t bytes_down;     /* target -> client, delivered */
    uint64_t chunks;         /* delivered chunks, both directions */
    uint64_t refused;        /* connections whose target connect failed */
} rt_relay_stats;

/* Bind, and start the relay thread. Returns 0, or a negative errno-style
 * code with a message in err ("cannot resolve target 'x:1'"). */
int rt_relay_start(const rt_relay_config *cfg, rt_relay **out, char *err,
                   size_t errlen);
/* "127.0.0.1:PORT" as bound. Owned by r. */
const char *rt_relay_address(const rt_relay *r);
void rt_relay_get_stats(rt_relay *r, rt_relay_stats *st);
/* Stop the thread, close every socket, free r. NULL is a no-op. */
void rt_relay_stop(rt_relay *r);

#ifdef __cplusplus
}
#endif
#endif
