/*
 * rt_obs.h - the daemon's observability: leveled logging to stderr with
 * timestamps, and the phase-timing record every response carries.
 *
 *     rt_obs_set_level(RT_LOG_INFO);
 *     RT_LOG(RT_LOG_WARN, "session %s: %s", id, msg);
 *
 *     rt_obs_timing t;  rt_obs_timing_begin(&t, rt_now_ns()); // at arrival
 *     ... t.decode_ns += ...; t.execute_ns += ...; t.encode_ns += ...;
 *     rt_obs_timing_fill(&t, rt_now_ns(), &pb);      // fills Timings (pb)
 *
 * Logging is thread-safe (one fprintf per line); nothing is buffered.
 */
#ifndef RTRAIN_OBS_H
#define RTRAIN_OBS_H

#include <stdint.h>

#include "rtrain.pb-c.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum rt_log_level {
    RT_LOG_ERROR = 0,
    RT_LOG_WARN = 1,
    RT_LOG_INFO = 2,
    RT_LOG_DEBUG = 3
} rt_log_level;

/* Parse "error"|"warn"|"info"|"debug". Returns 0 or RT_EINVAL. */
int rt_obs_level_from_name(const char *name, rt_log_level *out);
void rt_obs_set_level(rt_log_level lvl);
rt_log_level rt_obs_level(void);
void rt_obs_log(rt_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Copy in to out (always NUL-terminated, cut at outlen) with control
 * bytes and backslashes escaped (\n, \r, \t, \\, \xNN), so a name sent by a
 * client cannot start a forged log line. Returns the length written.
 * rt_obs_log escapes the control bytes of every line it writes (not the
 * backslashes: names escaped at the call site, rt_log_esc, stay as they
 * are), so no line can carry another. */
size_t rt_obs_escape(const char *in, char *out, size_t outlen);

/* Cheap level check first, so debug lines cost nothing when off. */
#define RT_LOG(lvl, ...)                       \
    do {                                       \
        if ((int)(lvl) <= (int)rt_obs_level()) \
            rt_obs_log((lvl), __VA_ARGS__);    \
    } while (0)

/* Phase times of one call, in nanoseconds. arrival_ns is rt_now_ns() when
 * the completion-queue thread got the call's tag. */
typedef struct rt_obs_timing {
    uint64_t arrival_ns;
    uint64_t queue_ns;
    uint64_t decode_ns;
    uint64_t compile_ns;
    uint64_t execute_ns;
    uint64_t encode_ns;
    uint64_t stream_wait_ns; /* client stream: waiting for its messages */
    uint64_t auth_ns;        /* of decode: the token check (--tokens) */
    uint64_t durable_ns;     /* of execute: state written and synced (--state-dir) */
    int cache_hit;
} rt_obs_timing;

void rt_obs_timing_begin(rt_obs_timing *t, uint64_t arrival_ns);

/* Fill pb from t with total = end_ns - arrival and other = total - sum of
 * the parts. If rounding or clock granularity makes the parts exceed total,
 * total is raised to their sum so other is 0, never negative: the invariant
 * queue+decode+compile+execute+encode+other == total always holds. The
 * stream wait is a part of other (at most all of it), not a sixth part;
 * auth a part of decode and durable of execute, likewise. */
void rt_obs_timing_fill(const rt_obs_timing *t, uint64_t end_ns, Rtrain__V1__Timings *pb);

#ifdef __cplusplus
}
#endif
#endif
