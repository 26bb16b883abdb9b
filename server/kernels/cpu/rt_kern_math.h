/*
 * rt_kern_math.h - exp and log the compiler can vectorise.
 *
 * libm's expf/logf/log1pf/tanhf are calls, so a loop over them runs one
 * element at a time; in W-A's loss they were 40% of a step. These are
 * inline, branch-free (selects only) and use nothing but arithmetic and
 * bit moves, so -O3 -march=native turns loops over them into AVX-512 code.
 * Accuracy: relative error below 3e-7 (a few ulp) over the ranges used:
 * rt_kern_exp on [-87, 88] (clamped outside), rt_kern_log on normal
 * positive floats. Deterministic: the same input gives the same bits.
 */
#ifndef RTRAIN_KERN_MATH_H
#define RTRAIN_KERN_MATH_H

#include <stdint.h>
#include <string.h>

static inline float rt__bits_f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint32_t rt__f_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* e^x: x = n ln2 + r, |r| <= ln2/2, Cephes' polynomial for e^r, 2^n from
 * the exponent bits */
static inline float rt_kern_exp(float x)
{
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    /* round to nearest by adding 1.5 * 2^23 (no rintf call) */
    const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const float er = p * (r * r) + r + 1.0f;
    /* NaN passes the clamps: converting it to int is undefined, and the
     * result is NaN through er anyway (a diverged step's logits) */
    const int32_t ni = (int32_t)(n == n ? n : 0.0f);
    return er * rt__bits_f((uint32_t)(ni + 127) << 23);
}

/* ln x for normal x > 0: x = m 2^e with m in [sqrt(1/2), sqrt(2)), then
 * ln m = 2 atanh(s), s = (m-1)/(m+1), |s| <= 0.172 */
static inline float rt_kern_log(float x)
{
    const uint32_t u = rt__f_bits(x);
    int32_t e = (int32_t)((u >> 23) & 0xffu) - 127;
    float m = rt__bits_f((u & 0x7fffffu) | 0x3f800000u);
    const int big = m > 1.41421356237f;
    m = big ? m * 0.5f : m;
    e += big;
    const float s = (m - 1.0f) / (m + 1.0f), s2 = s * s;
    float p = 1.0f / 11.0f;
    p = p * s2 + 1.0f / 9.0f;
    p = p * s2 + 1.0f / 7.0f;
    p = p * s2 + 1.0f / 5.0f;
    p = p * s2 + 1.0f / 3.0f;
    p = p * s2 + 1.0f;
    const float fe = (float)e;
    return fe * 0.693145751953125f + (2.0f * s * p + fe * 1.428606820309417e-6f);
}

/* ln(1 + t), t >= 0, accurate for tiny t: ln(u) * t / (u - 1), u = 1 + t */
static inline float rt_kern_log1p(float t)
{
    const float u = 1.0f + t, d = u - 1.0f;
    return d == 0.0f ? t : rt_kern_log(u) * (t / d);
}

#ifdef __AVX512F__
#include <immintrin.h>

/* rt_kern_exp on 16 lanes, the same steps (results may differ from the
 * scalar form in the last bit where the compiler contracts differently) */
static inline __m512 rt_kern_exp16(__m512 x)
{
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
    x = _mm512_min_ps(x, _mm512_set1_ps(88.0f));
    const __m512 big = _mm512_set1_ps(12582912.0f);
    const __m512 n =
        _mm512_sub_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), big), big);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    const __m512 er =
        _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    const __m512i e =
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(er, _mm512_castsi512_ps(e));
}
#endif

#endif
