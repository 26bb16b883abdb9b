/*
 * rt_testbf16.h - the bf16 kernel tests' reference conversions, from the
 * format's definition (not the kernels' code): bf() rounds a float to
 * bfloat16 (nearest even at 8 significant bits) as the float it is,
 * bits() its upper 16 bits, widen() a bf16 value back to float32.
 */
#ifndef RT_TESTBF16_H
#define RT_TESTBF16_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* bf16 of f: round to nearest even at 8 significant bits (the format's
 * definition, not the kernel's code), as the float it is */
static inline float bf(float f)
{
    if (f == 0.0f || !isfinite(f))
        return f;
    int e;
    frexp((double)f, &e);
    const double q = ldexp(1.0, e - 8);
    return (float)(nearbyint((double)f / q) * q);
}
static inline uint16_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)(u >> 16);
}
static inline float widen(uint16_t h)
{
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#endif
