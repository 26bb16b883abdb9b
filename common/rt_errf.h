/* rt_errf.h - the daemon's one error formatter for functions that report
 * through (char *err, size_t errlen): format into err (when err and errlen
 * are set) and return code, so that a failure is one line:
 *
 *     if (n < 0)
 *         return rt_errf(err, errlen, RT_EDATA, "part %d is empty", i);
 *
 * In rt_common (common/rt_error.c); free of gRPC, like the error table. */
#ifndef RTRAIN_ERRF_H
#define RTRAIN_ERRF_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

int rt_errf(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#ifdef __cplusplus
}
#endif
#endif
