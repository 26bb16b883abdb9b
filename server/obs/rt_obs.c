/* rt_obs.c - logging and timing records. */
#include "rt_obs.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "rtrain/rt_error.h"

static int g_level = RT_LOG_INFO;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

int rt_obs_level_from_name(const char *name, rt_log_level *out)
{
    for (int i = 0; i < 4; i++)
        if (name && strcmp(name, level_names[i]) == 0) {
            *out = (rt_log_level)i;
            return 0;
        }
    return RT_EINVAL;
}

void rt_obs_set_level(rt_log_level lvl)
{
    __atomic_store_n(&g_level, (int)lvl, __ATOMIC_RELAXED);
}

rt_log_level rt_obs_level(void)
{
    return (rt_log_level)__atomic_load_n(&g_level, __ATOMIC_RELAXED);
}

void rt_obs_log(rt_log_level lvl, const char *fmt, ...)
{
    char line[1024];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ %-5s ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                     tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000,
                     level_names[(int)lvl & 3]);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof line)
        vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    /* One write per line so lines from different threads never interleave. */
    fprintf(stderr, "%s\n", line);
}

void rt_obs_timing_begin(rt_obs_timing *t, uint64_t arrival_ns)
{
    memset(t, 0, sizeof *t);
    t->arrival_ns = arrival_ns;
}

void rt_obs_timing_fill(const rt_obs_timing *t, uint64_t end_ns,
                        Rtrain__V1__Timings *pb)
{
    uint64_t total = end_ns > t->arrival_ns ? end_ns - t->arrival_ns : 0;
    uint64_t parts = t->queue_ns + t->decode_ns + t->compile_ns +
                     t->execute_ns + t->encode_ns;
    if (parts > total)
        total = parts;
    pb->queue_ns = t->queue_ns;
    pb->decode_ns = t->decode_ns;
    pb->compile_ns = t->compile_ns;
    pb->execute_ns = t->execute_ns;
    pb->encode_ns = t->encode_ns;
    pb->total_ns = total;
    pb->other_ns = total - parts;
    pb->cache_hit = t->cache_hit ? 1 : 0;
}
