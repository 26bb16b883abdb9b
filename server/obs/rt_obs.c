/* rt_obs.c - logging and timing records. */
#include "rt_obs.h"

#include "rt_log.h"

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

static size_t escape(const char *in, char *out, size_t outlen, int backslash)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    if (!outlen)
        return 0;
    for (const unsigned char *p = (const unsigned char *)in; *p; p++) {
        char e[5];
        size_t k = 0;
        if (*p == '\n') { e[k++] = '\\'; e[k++] = 'n'; }
        else if (*p == '\r') { e[k++] = '\\'; e[k++] = 'r'; }
        else if (*p == '\t') { e[k++] = '\\'; e[k++] = 't'; }
        else if (*p == '\\' && backslash) { e[k++] = '\\'; e[k++] = '\\'; }
        else if (*p < 0x20 || *p == 0x7f) {
            e[k++] = '\\'; e[k++] = 'x'; e[k++] = hex[*p >> 4]; e[k++] = hex[*p & 15];
        } else {
            e[k++] = (char)*p;
        }
        if (o + k >= outlen)
            break;
        memcpy(out + o, e, k);
        o += k;
    }
    out[o] = 0;
    return o;
}

size_t rt_obs_escape(const char *in, char *out, size_t outlen)
{
    return escape(in, out, outlen, 1);
}

void rt_obs_log(rt_log_level lvl, const char *fmt, ...)
{
    if (rt_log_get_format() == RT_LOG_FORMAT_JSON) {
        va_list ap;
        va_start(ap, fmt);
        rt_log_vjson(lvl, fmt, ap);
        va_end(ap);
        return;
    }
    char line[1024];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ %-5s ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                     tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000,
                     level_names[(int)lvl & 3]);
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n > 0 && (size_t)n < sizeof line)
        escape(msg, line + n, sizeof line - (size_t)n, 0);
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
    pb->stream_wait_ns = t->stream_wait_ns < pb->other_ns ? t->stream_wait_ns : pb->other_ns;
    pb->auth_ns = t->auth_ns < t->decode_ns ? t->auth_ns : t->decode_ns;
    pb->durable_ns = t->durable_ns < t->execute_ns ? t->durable_ns : t->execute_ns;
    pb->cache_hit = t->cache_hit ? 1 : 0;
}
