/*
 * rt_check.h - the checks of the C test programs that report one count at
 * the end (the engine's, the data and durable modules', the client's):
 * CHECK counts a failure in `failures` and goes on, CHECKF also says what
 * was found instead (printf arguments), REQUIRE stops the test (what
 * follows cannot run). `checks` counts the checks made. One test program
 * per includer. (The integration tests' harness, one test function at a
 * time with a message on every check, is tests/integration/itest_check.h.)
 */
#ifndef RT_CHECK_H
#define RT_CHECK_H

#include <stdio.h>
#include <stdlib.h>

/* unused in a program that only REQUIREs or counts by hand */
static int failures __attribute__((unused)), checks __attribute__((unused));

#define CHECK(c)                                                                    \
    do {                                                                            \
        checks++;                                                                   \
        if (!(c)) {                                                                 \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c);   \
            failures++;                                                             \
        }                                                                           \
    } while (0)

/* CHECK saying what was found instead (printf arguments). */
#define CHECKF(c, ...)                                                              \
    do {                                                                            \
        checks++;                                                                   \
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
