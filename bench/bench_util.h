/*
 * bench_util.h - the few helpers every bench program uses: a monotonic clock
 * in seconds, the median of a sample, and a fatal error; with RT_SOURCE_DIR
 * defined, a PyTorch peer's run. Define RT_BENCH_NAME (the program's name,
 * for messages) before including it.
 */
#ifndef RTRAIN_BENCH_UTIL_H
#define RTRAIN_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#ifndef RT_BENCH_NAME
#error "define RT_BENCH_NAME before including bench_util.h"
#endif

/* RT_BENCH_CLOCK=cpu: the process's CPU time instead of the wall clock,
 * for comparing variants at one thread on a machine other work loads
 * (time lost waiting for a core is then not counted; at several threads
 * spinning team members would be) */
static double now_s(void)
{
    static int cpu = -1;
    if (cpu < 0) {
        const char *e = getenv("RT_BENCH_CLOCK");
        cpu = e && e[0] == 'c';
    }
    struct timespec ts;
    clock_gettime(cpu ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Sorts v in place. */
static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void die(const char *what, const char *msg)
{
    fprintf(stderr, RT_BENCH_NAME ": %s: %s\n", what, msg);
    exit(1);
}

#ifdef RT_SOURCE_DIR
#include <stdarg.h>

/* A PyTorch peer: Debian's /usr/bin/python3 runs bench/<fmt...> (the script
 * under bench/ and its arguments, printf-style) with OPENBLAS_CORETYPE
 * unset, PyTorch's best setting here. Each line it prints goes to on_line
 * with ud, and a "torch_version V" line also fills version (64 bytes) when
 * that is not NULL. 0 when the peer ran and exited 0, else -1. */
static inline int run_peer(char *version, void (*on_line)(const char *line, void *ud), void *ud,
                           const char *fmt, ...)
{
    char args[1536], cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "env -u OPENBLAS_CORETYPE /usr/bin/python3 %s/bench/%s",
             RT_SOURCE_DIR, args);
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        if (version) sscanf(line, "torch_version %63s", version);
        on_line(line, ud);
    }
    return pclose(f) == 0 ? 0 : -1;
}
#endif

#ifdef RTRAIN_ENGINE_H
/* --backend NAME (NULL: the default, or RT_BACKEND): every plan compiled
 * after this runs on it; the one in use is printed. For the benches that
 * include rt_engine.h first. */
static inline void bench_backend(const char *name)
{
    if (name && rt_backend_select(name) < 0) {
        fprintf(stderr, RT_BENCH_NAME ": no backend '%s' in this build (built: %s)\n", name,
                rt_backend_list());
        exit(2);
    }
    printf("backend: %s (%s)\n", rt_backend_name(), rt_backend_describe());
}
#endif

#endif
