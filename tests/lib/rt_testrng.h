/*
 * rt_testrng.h - the C tests' seeded draws: unif() uniform in [0, 1) from
 * a 64-bit xorshift (53 bits), normal() a standard normal (Box-Muller).
 * The stream is a pure function of its seed, so a failing check reruns
 * the same. An includer may define RT_TESTRNG_SEED before including (each
 * test keeps the stream its checks were written against). One stream per
 * test program.
 */
#ifndef RT_TESTRNG_H
#define RT_TESTRNG_H

#include <math.h>
#include <stdint.h>

#ifndef RT_TESTRNG_SEED
#define RT_TESTRNG_SEED 0x9e3779b97f4a7c15ull
#endif

static uint64_t rt_testrng_s = RT_TESTRNG_SEED;

static inline double unif(void)
{
    rt_testrng_s ^= rt_testrng_s << 13;
    rt_testrng_s ^= rt_testrng_s >> 7;
    rt_testrng_s ^= rt_testrng_s << 17;
    return (double)(rt_testrng_s >> 11) / 9007199254740992.0;
}

static inline float normal(void)
{
    const double u1 = 1.0 - unif(), u2 = unif();
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

#endif
