/* itest_unit.h - the CHECK/RUN harness of itest.h (itest_check.h) for unit
 * tests that link daemon modules directly (no gRPC): its counters, static.
 * Header-only. */
#ifndef RTRAIN_ITEST_UNIT_H
#define RTRAIN_ITEST_UNIT_H

#include <stdint.h>
#include <stdio.h>

static int itest_failures, itest_checks, itest_tests, itest_failed_tests;

#include "itest_check.h"

static inline int64_t rt_data_numel_local(int n, const int64_t *d)
{
    int64_t p = 1;
    for (int i = 0; i < n; i++)
        p *= d[i];
    return p;
}

#endif
