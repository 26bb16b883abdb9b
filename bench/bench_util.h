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

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
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
