/*
 * bench_util.h - the few helpers every bench program uses: a monotonic clock
 * in seconds, the median of a sample, and a fatal error. Define
 * RT_BENCH_NAME (the program's name, for messages) before including it.
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

#endif
