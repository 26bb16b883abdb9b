/* rt_obs.c - timing records (logging is rt_log.c's). */
#include "rt_obs.h"

#include "rt_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "rtrain/rt_error.h"

void rt_obs_timing_begin(rt_obs_timing *t, uint64_t arrival_ns)
{
    memset(t, 0, sizeof *t);
    t->arrival_ns = arrival_ns;
}

void rt_obs_timing_fill(const rt_obs_timing *t, uint64_t end_ns, Rtrain__V1__Timings *pb)
{
    uint64_t total = end_ns > t->arrival_ns ? end_ns - t->arrival_ns : 0;
    uint64_t parts = t->queue_ns + t->decode_ns + t->compile_ns + t->execute_ns + t->encode_ns;
    if (parts > total)
        total = parts;
    pb->queue_ns = t->queue_ns;
    pb->decode_ns = t->decode_ns;
    pb->compile_ns = t->compile_ns;
    pb->execute_ns = t->execute_ns;
    pb->encode_ns = t->encode_ns;
    pb->total_ns = total;
    pb->other_ns = total - parts;
    pb->stream_wait_ns = t->stream_wait_ns < pb->other_ns ? t->stream_wait_ns : pb->other_ns;
    pb->auth_ns = t->auth_ns < t->decode_ns ? t->auth_ns : t->decode_ns;
    pb->durable_ns = t->durable_ns < t->execute_ns ? t->durable_ns : t->execute_ns;
    pb->cache_hit = t->cache_hit ? 1 : 0;
}
