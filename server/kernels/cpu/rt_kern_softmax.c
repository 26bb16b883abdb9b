/* rt_kern_softmax.c - Softmax and LogSoftmax over the last axis. */
#include <math.h>
#include <string.h>

#include "cpu/rt_kern_cpu.h"
#include "cpu/rt_kern_math.h"

/* x, y are (R,C) */
void rt_kern_softmax_fwd(const rt__kargs *a)
{
    const int64_t C = rt__softmax_cp(a->nd)->C;
    const int64_t R = rt__rows(&a->nd->out, a->r->n);
#ifdef __AVX512F__
    if (C <= 16) {
        /* one row per masked vector: W-A's 3 classes spent most of the
         * time in loop prologues of the scalar form */
        const __mmask16 m = (__mmask16)((1u << C) - 1u);
        const __m512 lo = _mm512_set1_ps(-3.0e38f);
        for (int64_t r = 0; r < R; r++) {
            const __m512 v = _mm512_mask_loadu_ps(lo, m, a->x[0] + r * C);
            const __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(v));
            const __m512 e = _mm512_maskz_mov_ps(m, rt_kern_exp16(_mm512_sub_ps(v, mx)));
            const float inv = 1.0f / _mm512_reduce_add_ps(e);
            _mm512_mask_storeu_ps(a->y + r * C, m, _mm512_mul_ps(e, _mm512_set1_ps(inv)));
        }
        return;
    }
#endif
    for (int64_t r = 0; r < R; r++) {
        const float *restrict x = a->x[0] + r * C;
        float *restrict y = a->y + r * C;
        float m = x[0];
        for (int64_t j = 1; j < C; j++)
            m = x[j] > m ? x[j] : m;
        float s = 0.0f;
        for (int64_t j = 0; j < C; j++) {
            y[j] = rt_kern_exp(x[j] - m);
            s += y[j];
        }
        const float inv = 1.0f / s;
        for (int64_t j = 0; j < C; j++)
            y[j] *= inv;
    }
}

/* dx = y * (dy - sum(dy * y)) */
void rt_kern_softmax_bwd(const rt__kargs *a)
{
    if (!a->dx[0])
        return;
    const int64_t C = rt__softmax_cp(a->nd)->C;
    const int64_t R = rt__rows(&a->nd->out, a->r->n);
    const int accum = a->accum & 1u;
    for (int64_t r = 0; r < R; r++) {
        const float *restrict y = a->y + r * C, *restrict dy = a->dy + r * C;
        float *restrict dx = a->dx[0] + r * C;
        float s = 0.0f;
        for (int64_t j = 0; j < C; j++)
            s += dy[j] * y[j];
        if (accum)
            for (int64_t j = 0; j < C; j++)
                dx[j] += y[j] * (dy[j] - s);
        else
            for (int64_t j = 0; j < C; j++)
                dx[j] = y[j] * (dy[j] - s);
    }
}

/* y = x - max - log(sum(exp(x - max))) */
void rt_kern_logsoftmax_fwd(const rt__kargs *a)
{
    const int64_t C = rt__softmax_cp(a->nd)->C;
    const int64_t R = rt__rows(&a->nd->out, a->r->n);
    for (int64_t r = 0; r < R; r++) {
        const float *restrict x = a->x[0] + r * C;
        float *restrict y = a->y + r * C;
        float m = x[0];
        for (int64_t j = 1; j < C; j++)
            m = x[j] > m ? x[j] : m;
        float s = 0.0f;
        for (int64_t j = 0; j < C; j++)
            s += rt_kern_exp(x[j] - m);
        const float lse = m + logf(s);
        for (int64_t j = 0; j < C; j++)
            y[j] = x[j] - lse;
    }
}

/* dx = dy - exp(y) * sum(dy) */
void rt_kern_logsoftmax_bwd(const rt__kargs *a)
{
    if (!a->dx[0])
        return;
    const int64_t C = rt__softmax_cp(a->nd)->C;
    const int64_t R = rt__rows(&a->nd->out, a->r->n);
    const int accum = a->accum & 1u;
    for (int64_t r = 0; r < R; r++) {
        const float *restrict y = a->y + r * C, *restrict dy = a->dy + r * C;
        float *restrict dx = a->dx[0] + r * C;
        float s = 0.0f;
        for (int64_t j = 0; j < C; j++)
            s += dy[j];
        if (accum)
            for (int64_t j = 0; j < C; j++)
                dx[j] += dy[j] - rt_kern_exp(y[j]) * s;
        else
            for (int64_t j = 0; j < C; j++)
                dx[j] = dy[j] - rt_kern_exp(y[j]) * s;
    }
}
