/* rt_clock.h - the one monotonic clock, in ns, a wait's deadline, and the
 * wall clock in ms since the Unix epoch (header-only, no library: any layer
 * may include it, the engine too). */
#ifndef RTRAIN_CLOCK_H
#define RTRAIN_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t rt_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ns from now on clock clk, as pthread_cond_timedwait takes its deadline
 * (clk: the clock its condition variable waits on) */
static inline struct timespec rt_deadline(clockid_t clk, uint64_t ns)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    uint64_t t = (uint64_t)ts.tv_nsec + ns;
    ts.tv_sec += (time_t)(t / 1000000000ull);
    ts.tv_nsec = (long)(t % 1000000000ull);
    return ts;
}

/* wall time for what people and other programs read (dashboards, the
 * metrics' last-checkpoint time); never for intervals */
static inline uint64_t rt_unix_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

#endif
