/* itest_unit.h - the CHECK/RUN harness of itest.h for unit tests that link
 * daemon modules directly (no gRPC). Header-only. */
#ifndef RTRAIN_ITEST_UNIT_H
#define RTRAIN_ITEST_UNIT_H

#include <stdint.h>
#include <stdio.h>

static int itest_failures, itest_checks, itest_tests, itest_failed_tests;

#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        itest_checks++;                                                         \
        if (!(cond)) {                                                          \
            itest_failures++;                                                   \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);    \
            fprintf(stderr, __VA_ARGS__);                                       \
            fprintf(stderr, "\n");                                              \
        }                                                                       \
    } while (0)
#define RUN(fn, ...)                                                            \
    do {                                                                        \
        int f0_ = itest_failures;                                               \
        fn(__VA_ARGS__);                                                        \
        printf("%s %s\n", itest_failures == f0_ ? "ok  " : "FAIL", #fn);       \
        itest_tests++;                                                          \
        if (itest_failures != f0_)                                              \
            itest_failed_tests++;                                               \
    } while (0)

static inline int itest_summary(void)
{
    printf("%d checks\n%d passed, %d failed\n", itest_checks, itest_tests - itest_failed_tests,
           itest_failed_tests);
    return itest_failures ? 1 : 0;
}

static inline int64_t rt_data_numel_local(int n, const int64_t *d)
{
    int64_t p = 1;
    for (int i = 0; i < n; i++)
        p *= d[i];
    return p;
}

#endif
