/*
 * rt_check.h - checks for the tests that link daemon modules directly:
 * CHECK counts a failure in `failures` and goes on, REQUIRE stops the test
 * (what follows cannot run). One test program per includer.
 */
#ifndef RT_CHECK_H
#define RT_CHECK_H

#include <stdio.h>
#include <stdlib.h>

static int failures;

#define CHECK(c)                                                                    \
    do {                                                                            \
        if (!(c)) {                                                                 \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c);   \
            failures++;                                                             \
        }                                                                           \
    } while (0)

/* CHECK saying what was found instead (printf arguments). */
#define CHECKF(c, ...)                                                              \
    do {                                                                            \
        if (!(c)) {                                                                 \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #c);   \
            fprintf(stderr, __VA_ARGS__);                                           \
            fputc('\n', stderr);                                                    \
            failures++;                                                             \
        }                                                                           \
    } while (0)

#define REQUIRE(c)                                                                  \
    do {                                                                            \
        if (!(c)) {                                                                 \
            fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", __FILE__, __LINE__, #c); \
            exit(1);                                                                \
        }                                                                           \
    } while (0)

#endif
