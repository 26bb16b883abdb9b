/*
 * rt_srv.h - the rtraind gRPC front end: completion-queue threads, the
 * method table, per-call state machines, the device executor and graceful
 * stop. main.c owns flags, signals and the libuv loop; this module owns
 * everything gRPC.
 *
 *     rt_srv_config cfg;  rt_srv_config_init(&cfg);  cfg.listen = "127.0.0.1:0";
 *     rt_srv *s;  char err[256];
 *     if (rt_srv_create(&cfg, &s, err, sizeof err) < 0) -> print err, exit 1
 *     printf("rtraind listening on %s\n", rt_srv_bound(s));
 *     rt_srv_start(s, on_drained, ud);  // cq threads + executor
 *     ...SIGTERM: rt_srv_stop(s);       // no new calls; running ones go on
 *     ...after the grace: rt_srv_cancel_all(s);
 *     ...on_drained(ud) fires (from a gRPC thread) once the shutdown is
 *        acknowledged and no call is live; then, on the main thread:
 *     rt_srv_destroy(s);
 */
#ifndef RTRAIN_SRV_H
#define RTRAIN_SRV_H

#include <stddef.h>
#include <stdint.h>

#include "rt_principal.h"

#ifdef __cplusplus
extern "C" {
#endif

#include "rt_version.h" /* RT_VERSION_STRING, from CMake */

typedef struct rt_srv_config {
    const char *listen;         /* host:port, port 0 = ephemeral */
    int threads;                /* completion-queue threads, 0 = rt_srv_default_threads() */
    uint64_t max_message_bytes; /* gRPC receive limit */
    int max_sessions;
    uint64_t max_dataset_bytes; /* one upload */
    uint64_t max_store_bytes;   /* all stored datasets; 0 = half the RAM */
    uint64_t inline_ns;         /* run device jobs estimated below this on
                                    the cq thread; 0 = always the executor */
    /* TLS (PEM file paths). cert + key turn TLS on; client_ca also makes
     * the daemon require and verify client certificates (mTLS). */
    const char *tls_cert, *tls_key, *tls_client_ca;
    /* Tokens file (rt_auth.h); NULL = single-user: every call is "local". */
    const char *tokens_path;
    /* Default quotas of a principal; 0 = the mode's default (unlimited
     * when single-user; see rt_srv_quota_defaults with tokens). */
    uint64_t quota[RT_Q__COUNT];
    /* Program memory + stored datasets + upload buffers of everyone;
     * 0 = three quarters of the RAM. */
    uint64_t max_memory_bytes;
    /* Sharing the device: a long job yields at a step boundary once it has
     * held the device for slice_ns and another key is waiting; keys are
     * served round-robin. */
    uint64_t slice_ns;
    int max_exec_threads;        /* device jobs of different keys in flight */
    int compile_threads;         /* the compile pool */
    uint64_t compile_timeout_ms; /* a compile's budget; 0 = none */
    /* Uploads in flight, server-wide: count and declared bytes reserved. */
    int max_uploads;
    uint64_t max_upload_bytes;   /* 0 = 2 x max_dataset_bytes */
    uint64_t upload_stall_ms;    /* no chunk for this long: cancelled; 0 = never */
    uint64_t upload_keep_ms;     /* a broken upload's bytes wait this long for
                                    a resume; 0 = not kept */
    uint64_t upload_pool_bytes;  /* idle upload buffers kept for reuse */
    uint64_t upload_arena_bytes; /* idle upload memory kept faulted in by a
                                    background thread (rt_bufpool_set_arena);
                                    UINT64_MAX: 256 MiB, 0 under ulimit -v */
    uint64_t pipeline_hold_ms;   /* a pipelined RunSteps waits this long for
                                    its predecessor */
    uint32_t max_inflate_ratio;  /* gzip data: inflated / compressed bytes */
    /* Connections: keepalive pings, the TLS/HTTP2 handshake, idle ones. */
    uint64_t keepalive_ms; /* 0 = no keepalive pings */
    uint64_t keepalive_timeout_ms;
    uint64_t handshake_timeout_ms;
    uint64_t conn_idle_ms;           /* 0 = never closed for idleness */
    uint32_t max_concurrent_streams; /* per connection, in SETTINGS; 0 = 100 */
    int stream_queue_max;            /* server stream: messages queued per call */
    /* Streamed datasets (server/data/rt_stream.h): where their records
     * are spooled (NULL: state_dir if set, else RT_SPOOL_DIR_DEFAULT), the decoded size above
     * which a TFRecord dataset is streamed (0: a quarter of the memory
     * budget), decode workers per dataset (0: the CPUs), batches decoded
     * ahead (0: 4), the default shuffle buffer in samples (0: 10000), the
     * bytes all spool files may hold. */
    const char *spool_dir;
    uint64_t stream_above;
    int decode_threads;
    int prefetch;
    int64_t shuffle_buffer;
    uint64_t max_spool_bytes; /* all spool files; 0 = the disk's room */
    uint64_t map_spool_below; /* spool files mapped up to this size, when */
    int map_spool_set;        /* set; else an eighth of the memory budget */
    /* Durable mode: sessions, datasets and checkpoints under state_dir
     * (NULL = state in memory only); rt_state.h has the rest. */
    const char *state_dir;
    uint32_t ckpt_every_steps, ckpt_every_s;
    int ckpt_keep;
    int ckpt_fail_continue;
    int ckpt_no_fsync;
    /* Tests only (--pause-at-step): the process stops itself with SIGSTOP
     * at the first step boundary at or past this global step, once, so a
     * test can kill it at a step it chose instead of racing a timer against
     * training. 0 = off. */
    int64_t pause_at_step;
    /* Tests only (--compile-hold N): the Nth compile taken by the pool
     * waits, before it compiles, until the call is cancelled (the budget's
     * answer, or the client gone) or the daemon stops. 0 = off. */
    int compile_hold;
} rt_srv_config;

/* the default number of completion-queue threads for this host */
int rt_srv_default_threads(void);
void rt_srv_config_init(rt_srv_config *cfg);

typedef struct rt_srv rt_srv;

/* Create the server and bind. On failure returns a negative code with a
 * message in err, e.g. "address 127.0.0.1:7070 already in use". */
int rt_srv_create(const rt_srv_config *cfg, rt_srv **out, char *err, size_t errlen);
/* "127.0.0.1:PORT" with the port actually bound. Owned by s. */
const char *rt_srv_bound(const rt_srv *s);
int rt_srv_start(rt_srv *s, void (*on_drained)(void *ud), void *ud);
/* What grpc.health.v1.Health reports: SERVING until 0 is set here (the
 * daemon draining before it stops) or rt_srv_stop. Calls keep working. */
void rt_srv_set_serving(rt_srv *s, int serving);
void rt_srv_stop(rt_srv *s);
/* Read the tokens file again (SIGHUP). On error the old tokens stay in
 * force and err says why; on success *n_tokens is how many are accepted. */
int rt_srv_reload_tokens(rt_srv *s, int *n_tokens, char *err, size_t errlen);
/* The default quotas in force (after the mode's defaults were applied). */
void rt_srv_quota_defaults(const rt_srv *s, uint64_t out[RT_Q__COUNT]);
/* Close sessions idle for longer than idle_ms (called from a timer). */
int rt_srv_expire_sessions(rt_srv *s, uint64_t idle_ms);
/* Answer uploads that received nothing for cfg.upload_stall_ms (their
 * reservations go with them) and compiles past cfg.compile_timeout_ms
 * with DEADLINE_EXCEEDED. The completion-queue threads call it a few times
 * per second. Returns how many calls it ended. */
int rt_srv_tick(rt_srv *s);
void rt_srv_cancel_all(rt_srv *s);
int rt_srv_live_calls(rt_srv *s);
void rt_srv_destroy(rt_srv *s); /* NULL is a no-op */

/* rt_metrics_collect_fn for rt_metrics_serve(..., rt_srv_metrics_collect, s):
 * sessions, programs, the store, memory, live calls, health. */
struct rt_metrics_gauges;
void rt_srv_metrics_collect(void *s, struct rt_metrics_gauges *g);

#ifdef __cplusplus
}
#endif
#endif
