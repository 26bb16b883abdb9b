/*
 * rt_metrics.h - the daemon's Prometheus metrics: counters and histograms
 * fed by the call path, gauges read at scrape time, and an HTTP endpoint
 * (libmicrohttpd) serving GET /metrics in the text exposition format 0.0.4.
 *
 *     static const char *const names[] = {"/rtrain.v1.Trainer/Ping", ...};
 *     rt_metrics_init(names, n);                       // once, before calls
 *     ...at each call's end (any thread):
 *     rt_metrics_call(method_index, grpc_status, &timing, rt_now_ns());
 *     rt_metrics_steps(steps, samples);                // after training work
 *
 *     rt_metrics_server *ms;  char err[256];
 *     if (rt_metrics_serve("127.0.0.1:9464", collect, srv, &ms, err, sizeof err) < 0) ...
 *     printf("metrics on %s\n", rt_metrics_bound(ms));
 *     ...
 *     rt_metrics_server_stop(ms);                       // NULL is a no-op
 *
 * Every other URL on the port is the dashboard's (rt_dash.h).
 *
 * Recording is lock-free (relaxed atomics on fixed arrays): a call pays a
 * few dozen nanoseconds and allocates nothing. Rendering walks the arrays
 * and calls collect() for the gauges the server owns (sessions, programs,
 * stored bytes, memory) on the HTTP thread.
 *
 * Exposed families (all prefixed rtrain_):
 *   calls_total{method,code}                 counter
 *   call_duration_seconds{method}            histogram, arrival to status
 *   phase_duration_seconds{phase}            histogram, phase in
 *                                            queue|decode|compile|execute|encode
 *   steps_total, samples_total               counters (samples = steps x batch)
 *   steps_per_second, samples_per_second     gauges over the last 10-20 s
 *   sessions, programs, plans_cached, datasets, stored_bytes, live_calls,
 *   calls_held,
 *   serving                                  gauges
 *   memory_bytes{kind}                       gauge, kind in
 *                                            params|activations|datasets|rss
 *   checkpoints_total{result}                counter, result in ok|failed
 *   checkpoint_bytes_total                   counter, bytes of written checkpoints
 *   checkpoint_duration_seconds              histogram, every checkpoint
 *   checkpoint_last_success_timestamp_seconds gauge, 0 before the first
 *   upload_kept_bytes, upload_pool_bytes     gauges: broken uploads kept for a
 *                                            resume; idle buffers kept for reuse
 *   upload_bytes_total, upload_resumed_bytes_total
 *                                            counters: dataset bytes received
 *                                            on upload streams; bytes a resumed
 *                                            upload did not send again
 *   process_start_time_seconds, uptime_seconds, scrapes_total
 */
#ifndef RTRAIN_METRICS_H
#define RTRAIN_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "rt_obs.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RT_METRICS_MAX_METHODS 32

/* What the server reports at scrape time. */
typedef struct rt_metrics_gauges {
    uint64_t sessions, programs, plans_cached, datasets, stored_bytes;
    uint64_t mem_params, mem_activations, mem_datasets;
    uint64_t live_calls;
    uint64_t calls_held;            /* RunSteps waiting for their predecessor */
    uint64_t uploads;               /* uploads in flight */
    uint64_t upload_reserved_bytes; /* what they reserve (--max-upload-bytes) */
    uint64_t upload_kept_bytes;     /* broken uploads kept for a resume */
    uint64_t upload_pool_bytes;     /* idle upload buffers kept for reuse */
    uint64_t charged_bytes;         /* charged to the memory budget, all principals */
    int serving;
} rt_metrics_gauges;

typedef void (*rt_metrics_collect_fn)(void *ud, rt_metrics_gauges *g);

/* Method names (not copied: they must outlive the process's metrics). At
 * most RT_METRICS_MAX_METHODS; the rest are not recorded. */
void rt_metrics_init(const char *const *method_names, int n);
/* The backend every program runs on (rtrain_backend_info); not copied. */
void rt_metrics_backend(const char *name, const char *describe);
/* One finished call: code is its gRPC status (0..16), t its phase times,
 * end_ns rt_now_ns() at the status. Out-of-range method/code are ignored. */
void rt_metrics_call(int method, int code, const rt_obs_timing *t, uint64_t end_ns);
void rt_metrics_steps(uint64_t steps, uint64_t samples);
/* One checkpoint written (ok = 1) or failed (ok = 0): ns its duration,
 * bytes what it wrote (counted only when ok). Any thread, lock-free. */
void rt_metrics_checkpoint(uint64_t ns, uint64_t bytes, int ok);
/* What rt_metrics_checkpoint counted (the dashboard): written, failed,
 * bytes written, the last success in Unix ms (0: none). */
void rt_metrics_checkpoint_stats(uint64_t *ok, uint64_t *failed, uint64_t *bytes,
                                 uint64_t *last_unix_ms);
/* Upload stream bytes: received now, and held from a broken stream that
 * this upload resumed instead of receiving again. */
void rt_metrics_upload(uint64_t received, uint64_t resumed);

/* Render the exposition text into a malloc'ed buffer (*out, NUL-terminated,
 * *len bytes); the caller frees it. collect may be NULL (no gauges).
 * Returns 0 or RT_ENOMEM. */
int rt_metrics_render(rt_metrics_collect_fn collect, void *ud, char **out, size_t *len);

typedef struct rt_metrics_server rt_metrics_server;

/* Listen on addr (host:port; port 0 = a free port) on its own thread.
 * Returns 0 or a negative code with err set ("cannot listen on ..."). */
int rt_metrics_serve(const char *addr, rt_metrics_collect_fn collect, void *ud,
                     rt_metrics_server **out, char *err, size_t errlen);
/* "HOST:PORT" actually bound. Owned by ms. */
const char *rt_metrics_bound(const rt_metrics_server *ms);
void rt_metrics_server_stop(rt_metrics_server *ms);

#ifdef __cplusplus
}
#endif
#endif
