/* rt_random.h - the one source of random bytes (ids, tokens, the boot
 * id): getrandom until n bytes came, through EINTR and short reads
 * (header-only, no library). 0, or -1 when the system has none. */
#ifndef RTRAIN_RANDOM_H
#define RTRAIN_RANDOM_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/random.h>
#include <sys/types.h>

static inline int rt_random_bytes(void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = getrandom((uint8_t *)buf + got, n - got, 0);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        got += (size_t)k;
    }
    return 0;
}

#endif
