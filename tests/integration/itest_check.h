/* itest_check.h - the integration tests' checks, the one copy: CHECK(cond,
 * fmt, ...) says what it found on every failure and goes on, RUN runs one
 * test function and prints ok or FAIL, itest_summary prints the counts and
 * returns the exit code. The counters (itest_failures, itest_checks,
 * itest_tests, itest_failed_tests) come from the includer: itest.c defines
 * them for the programs that link it (itest.h), itest_unit.h statically for
 * the unit tests that link daemon modules directly. */
#ifndef RTRAIN_ITEST_CHECK_H
#define RTRAIN_ITEST_CHECK_H

#include <stdio.h>

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
/* Run one test function and report it; tests never abort the process. */
#define RUN(fn, ...)                                                            \
    do {                                                                        \
        int f0_ = itest_failures;                                               \
        fn(__VA_ARGS__);                                                        \
        printf("%s %s\n", itest_failures == f0_ ? "ok  " : "FAIL", #fn);       \
        fflush(stdout);                                                         \
        itest_tests++;                                                          \
        if (itest_failures != f0_)                                              \
            itest_failed_tests++;                                               \
    } while (0)

/* Print "N checks", "N passed, N failed" and return the exit code. */
static inline int itest_summary(void)
{
    printf("%d checks\n%d passed, %d failed\n", itest_checks, itest_tests - itest_failed_tests,
           itest_failed_tests);
    return itest_failures ? 1 : 0;
}

#endif
