/*
 * rt_kern_pool.c - MaxPool2D, AvgPool2D and GlobalAvgPool, NHWC. The inner
 * loops run over channels, which are contiguous, so they vectorise.
 *
 * MaxPool's backward recomputes each window's argmax from x instead of
 * storing indices in the forward pass: the recomputation reads x once,
 * an index buffer would cost as much memory as the output and would have
 * to stay alive from forward to backward.
 *
 * The same kernels serve a mixed-bf16 plan (rt_kern_bf16.c's table): x
 * stored bf16 (node->bf16_in) is widened value by value as the loops read
 * it, y stored bf16 (node->bf16_out) is computed in float32 a block of
 * channels at a time on the stack and rounded into y. A max of bf16 values
 * is one of them (exact), an average is the float32 kernel's sum rounded
 * once. The gradients are float32; MaxPool2D's backward reads x the same
 * way. Each body is a template on (bx, by), instantiated per combination.
 */
#include <stdint.h>
#include <string.h>

#include <omp.h>

#include "cpu/rt_kern_bf16.h"
#include "cpu/rt_kern_conv.h"

/* Smaller tensors run on one thread (a parallel region's cost dominates) */
#define RT__PAR_ELEMS (INT64_C(1) << 18)

typedef rt__conv_params rt__pool;

/* MaxPool2D's backward keeps a running max and its window index per
 * channel and thread (both pools get the same plan) */
int rt_kern_pool_prepare(rt__node *nd, int64_t B, rt__arena *A)
{
    int *nt = rt__arena_alloc(A, sizeof *nt);
    if (!nt)
        return RT_ENOMEM;
    *nt = rt_kern_conv_threads();
    nd->kdata = nt;
    nd->scratch_floats = 2 * rt__conv_cp(nd)->C * *nt;
    return 0;
}

/* the window of output (oh, ow) clipped to the input: [h0,h1) x [w0,w1) */
static inline void rt__window(const rt__pool *p, int64_t oh, int64_t ow, int64_t *h0, int64_t *h1,
                              int64_t *w0, int64_t *w1)
{
    int64_t a = oh * p->SH - p->PT, b = ow * p->SW - p->PL;
    *h0 = a < 0 ? 0 : a;
    *h1 = a + p->KH > p->H ? p->H : a + p->KH;
    *w0 = b < 0 ? 0 : b;
    *w1 = b + p->KW > p->W ? p->W : b + p->KW;
}

/* value i of x: float32, or bf16 widened (exact) */
static inline float rt__pv(const void *x, int bx, int64_t i)
{
    if (!bx)
        return ((const float *)x)[i];
    const uint32_t u = (uint32_t)((const uint16_t *)x)[i] << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* channels a block when y is stored bf16 (its float32 values on the stack) */
#define RT__PB 256

/* where a block of y's float32 values goes (y itself, or tmp to round)
 * and its store */
static inline float *rt__pyc(void *y, int by, int64_t o, float *tmp)
{
    return by ? tmp : (float *)y + o;
}
static inline void rt__pyput(void *y, int by, int64_t o, const float *tmp, int64_t n)
{
    if (by)
        rt_kern_to_bf16_serial((uint16_t *)y + o, tmp, n);
}

/* the instance of body##_t for the node's (bf16_in bit 0, bf16_out) */
#define RT__POOL_DISPATCH(body, a)                    \
    do {                                              \
        const int bx_ = ((a)->nd->bf16_in & 1u) != 0; \
        if (bx_ && (a)->nd->bf16_out)                 \
            body##_t((a), 1, 1);                      \
        else if (bx_)                                 \
            body##_t((a), 1, 0);                      \
        else if ((a)->nd->bf16_out)                   \
            body##_t((a), 0, 1);                      \
        else                                          \
            body##_t((a), 0, 0);                      \
    } while (0)

#define RT__ALWAYS_INLINE static inline __attribute__((always_inline))

/* ------------------------------------------------------------------ max */

/* y (B,OH,OW,C) = max over each window of x (B,H,W,C) */
RT__ALWAYS_INLINE void rt__maxpool_fwd_t(const rt__kargs *a, int bx, int by)
{
    const rt__pool p = *rt__conv_cp(a->nd);
    const int64_t C = p.C, cb = by ? RT__PB : C;
#pragma omp parallel for schedule(static) if (a->r->n * p.H * p.W * C >= RT__PAR_ELEMS)
    for (int64_t b = 0; b < a->r->n; b++) {
        float tmp[RT__PB];
        const int64_t xo = b * p.H * p.W * C;
        for (int64_t oh = 0; oh < p.OH; oh++) {
            for (int64_t ow = 0; ow < p.OW; ow++) {
                int64_t h0, h1, w0, w1;
                rt__window(&p, oh, ow, &h0, &h1, &w0, &w1);
                for (int64_t c0 = 0; c0 < C; c0 += cb) {
                    const int64_t nc = C - c0 < cb ? C - c0 : cb;
                    const int64_t yo = ((b * p.OH + oh) * p.OW + ow) * C + c0;
                    float *restrict m = rt__pyc(a->y, by, yo, tmp);
                    const int64_t f = xo + (h0 * p.W + w0) * C + c0;
                    for (int64_t c = 0; c < nc; c++)
                        m[c] = rt__pv(a->x[0], bx, f + c);
                    for (int64_t h = h0; h < h1; h++)
                        for (int64_t w = w0; w < w1; w++) {
                            const int64_t v = xo + (h * p.W + w) * C + c0;
                            for (int64_t c = 0; c < nc; c++) {
                                const float e = rt__pv(a->x[0], bx, v + c);
                                m[c] = e > m[c] ? e : m[c];
                            }
                        }
                    rt__pyput(a->y, by, yo, tmp, nc);
                }
            }
        }
    }
}

void rt_kern_maxpool2d_fwd(const rt__kargs *a) { RT__POOL_DISPATCH(rt__maxpool_fwd, a); }

/* dx (+)= dy routed to the first maximum of each window (scan order), as
 * PyTorch and TensorFlow do for ties */
RT__ALWAYS_INLINE void rt__maxpool_bwd_t(const rt__kargs *a, int bx)
{
    const rt__pool p = *rt__conv_cp(a->nd);
    const int64_t C = p.C;
    float *dx = a->dx[0];
    if (!dx)
        return;
    const int add = (a->accum & 1u) != 0;
    int nt = *(const int *)a->nd->kdata;
#pragma omp parallel for num_threads(nt) \
    schedule(static) if (a->r->n * p.H * p.W * C >= RT__PAR_ELEMS)
    for (int64_t b = 0; b < a->r->n; b++) {
        float *restrict m = a->scratch + 2 * C * omp_get_thread_num();
        int32_t *restrict id = (int32_t *)(m + C);
        const int64_t xo = b * p.H * p.W * C;
        float *dxb = dx + b * p.H * p.W * C;
        /* windows that tile the input without overlap (the usual 2x2/2):
         * every covered cell is written once, the argmax gets dy and the
         * rest 0, so dx needs no zeroing pass except the uncovered edge */
        if (!add && p.SH == p.KH && p.SW == p.KW && p.PT == 0 && p.PL == 0 && p.OH * p.KH <= p.H &&
            p.OW * p.KW <= p.W) {
            const float *dyb = a->dy + b * p.OH * p.OW * C;
            for (int64_t oh = 0; oh < p.OH; oh++) {
                for (int64_t ow = 0; ow < p.OW; ow++) {
                    const int64_t h0 = oh * p.KH, w0 = ow * p.KW;
                    const int32_t first = (int32_t)((h0 * p.W + w0) * C);
                    for (int64_t c = 0; c < C; c++)
                        m[c] = rt__pv(a->x[0], bx, xo + first + c);
                    for (int64_t c = 0; c < C; c++)
                        id[c] = first;
                    for (int64_t h = h0; h < h0 + p.KH; h++)
                        for (int64_t w = w0; w < w0 + p.KW; w++) {
                            const int32_t off = (int32_t)((h * p.W + w) * C);
                            for (int64_t c = 0; c < C; c++) {
                                const float v = rt__pv(a->x[0], bx, xo + off + c);
                                const int gt = v > m[c];
                                m[c] = gt ? v : m[c];
                                id[c] = gt ? off : id[c];
                            }
                        }
                    const float *restrict d = dyb + (oh * p.OW + ow) * C;
                    for (int64_t h = h0; h < h0 + p.KH; h++)
                        for (int64_t w = w0; w < w0 + p.KW; w++) {
                            const int32_t off = (int32_t)((h * p.W + w) * C);
                            float *restrict o = dxb + off;
                            for (int64_t c = 0; c < C; c++)
                                o[c] = id[c] == off ? d[c] : 0.0f;
                        }
                }
                /* columns right of the last window */
                for (int64_t h = oh * p.KH; h < (oh + 1) * p.KH; h++)
                    if (p.OW * p.KW < p.W)
                        memset(dxb + (h * p.W + p.OW * p.KW) * C, 0,
                               sizeof(float) * (size_t)((p.W - p.OW * p.KW) * C));
            }
            /* rows below the last window */
            if (p.OH * p.KH < p.H)
                memset(dxb + p.OH * p.KH * p.W * C, 0,
                       sizeof(float) * (size_t)((p.H - p.OH * p.KH) * p.W * C));
            continue;
        }
        /* zeroed per sample, just before the scatter, while it is in cache */
        if (!add)
            memset(dxb, 0, sizeof(float) * (size_t)(p.H * p.W * C));
        const float *dyb = a->dy + b * p.OH * p.OW * C;
        for (int64_t oh = 0; oh < p.OH; oh++) {
            for (int64_t ow = 0; ow < p.OW; ow++) {
                int64_t h0, h1, w0, w1;
                rt__window(&p, oh, ow, &h0, &h1, &w0, &w1);
                const int32_t first = (int32_t)((h0 * p.W + w0) * C);
                for (int64_t c = 0; c < C; c++)
                    m[c] = rt__pv(a->x[0], bx, xo + first + c);
                for (int64_t c = 0; c < C; c++)
                    id[c] = first;
                for (int64_t h = h0; h < h1; h++)
                    for (int64_t w = w0; w < w1; w++) {
                        const int32_t off = (int32_t)((h * p.W + w) * C);
                        for (int64_t c = 0; c < C; c++) {
                            const float v = rt__pv(a->x[0], bx, xo + off + c);
                            const int gt = v > m[c];
                            m[c] = gt ? v : m[c];
                            id[c] = gt ? off : id[c];
                        }
                    }
                const float *restrict d = dyb + (oh * p.OW + ow) * C;
                for (int64_t c = 0; c < C; c++)
                    dxb[id[c] + c] += d[c];
            }
        }
    }
}

void rt_kern_maxpool2d_bwd(const rt__kargs *a)
{
    if (a->nd->bf16_in & 1u)
        rt__maxpool_bwd_t(a, 1);
    else
        rt__maxpool_bwd_t(a, 0);
}

/* ------------------------------------------------------------------ avg */

/* y = the mean over each window (the padding not counted), summed in
 * window order */
RT__ALWAYS_INLINE void rt__avgpool_fwd_t(const rt__kargs *a, int bx, int by)
{
    const rt__pool p = *rt__conv_cp(a->nd);
    const int64_t C = p.C, cb = by ? RT__PB : C;
#pragma omp parallel for schedule(static) if (a->r->n * p.H * p.W * C >= RT__PAR_ELEMS)
    for (int64_t b = 0; b < a->r->n; b++) {
        float tmp[RT__PB];
        const int64_t xo = b * p.H * p.W * C;
        for (int64_t oh = 0; oh < p.OH; oh++) {
            for (int64_t ow = 0; ow < p.OW; ow++) {
                int64_t h0, h1, w0, w1;
                rt__window(&p, oh, ow, &h0, &h1, &w0, &w1);
                const float inv = 1.0f / (float)((h1 - h0) * (w1 - w0));
                for (int64_t c0 = 0; c0 < C; c0 += cb) {
                    const int64_t nc = C - c0 < cb ? C - c0 : cb;
                    const int64_t yo = ((b * p.OH + oh) * p.OW + ow) * C + c0;
                    float *restrict s = rt__pyc(a->y, by, yo, tmp);
                    memset(s, 0, sizeof(float) * (size_t)nc);
                    for (int64_t h = h0; h < h1; h++)
                        for (int64_t w = w0; w < w1; w++) {
                            const int64_t v = xo + (h * p.W + w) * C + c0;
                            for (int64_t c = 0; c < nc; c++)
                                s[c] += rt__pv(a->x[0], bx, v + c);
                        }
                    for (int64_t c = 0; c < nc; c++)
                        s[c] *= inv;
                    rt__pyput(a->y, by, yo, tmp, nc);
                }
            }
        }
    }
}

void rt_kern_avgpool2d_fwd(const rt__kargs *a) { RT__POOL_DISPATCH(rt__avgpool_fwd, a); }

void rt_kern_avgpool2d_bwd(const rt__kargs *a)
{
    const rt__pool p = *rt__conv_cp(a->nd);
    const int64_t C = p.C;
    float *dx = a->dx[0];
    if (!dx)
        return;
    const int add = (a->accum & 1u) != 0;
#pragma omp parallel for schedule(static) if (a->r->n * p.H * p.W * C >= RT__PAR_ELEMS)
    for (int64_t b = 0; b < a->r->n; b++) {
        float *dxb = dx + b * p.H * p.W * C;
        if (!add)
            memset(dxb, 0, sizeof(float) * (size_t)(p.H * p.W * C));
        const float *dyb = a->dy + b * p.OH * p.OW * C;
        for (int64_t oh = 0; oh < p.OH; oh++) {
            for (int64_t ow = 0; ow < p.OW; ow++) {
                int64_t h0, h1, w0, w1;
                rt__window(&p, oh, ow, &h0, &h1, &w0, &w1);
                const float inv = 1.0f / (float)((h1 - h0) * (w1 - w0));
                const float *restrict d = dyb + (oh * p.OW + ow) * C;
                for (int64_t h = h0; h < h1; h++)
                    for (int64_t w = w0; w < w1; w++) {
                        float *restrict v = dxb + (h * p.W + w) * C;
                        for (int64_t c = 0; c < C; c++)
                            v[c] += d[c] * inv;
                    }
            }
        }
    }
}

/* --------------------------------------------------------------- global */

/* y (B,C) = mean over H*W of x (B,H,W,C) */
RT__ALWAYS_INLINE void rt__gap_fwd_t(const rt__kargs *a, int bx, int by)
{
    const int64_t HW = rt__gap_cp(a->nd)->HW, C = rt__gap_cp(a->nd)->C, cb = by ? RT__PB : C;
    const float inv = 1.0f / (float)HW;
#pragma omp parallel for schedule(static) if (a->r->n * HW * C >= RT__PAR_ELEMS)
    for (int64_t b = 0; b < a->r->n; b++) {
        float tmp[RT__PB];
        for (int64_t c0 = 0; c0 < C; c0 += cb) {
            const int64_t nc = C - c0 < cb ? C - c0 : cb;
            float *restrict s = rt__pyc(a->y, by, b * C + c0, tmp);
            memset(s, 0, sizeof(float) * (size_t)nc);
            for (int64_t i = 0; i < HW; i++) {
                const int64_t v = (b * HW + i) * C + c0;
                for (int64_t c = 0; c < nc; c++)
                    s[c] += rt__pv(a->x[0], bx, v + c);
            }
            for (int64_t c = 0; c < nc; c++)
                s[c] *= inv;
            rt__pyput(a->y, by, b * C + c0, tmp, nc);
        }
    }
}

void rt_kern_gap_fwd(const rt__kargs *a) { RT__POOL_DISPATCH(rt__gap_fwd, a); }

void rt_kern_gap_bwd(const rt__kargs *a)
{
    const int64_t HW = rt__gap_cp(a->nd)->HW, C = rt__gap_cp(a->nd)->C;
    const float inv = 1.0f / (float)HW;
    float *dx = a->dx[0];
    if (!dx)
        return;
    const int add = (a->accum & 1u) != 0;
#pragma omp parallel for schedule(static) if (a->r->n * HW * C >= RT__PAR_ELEMS)
    for (int64_t b = 0; b < a->r->n; b++) {
        const float *restrict d = a->dy + b * C;
        float *dxb = dx + b * HW * C;
        for (int64_t i = 0; i < HW; i++) {
            float *restrict v = dxb + i * C;
            if (add)
                for (int64_t c = 0; c < C; c++)
                    v[c] += d[c] * inv;
            else
                for (int64_t c = 0; c < C; c++)
                    v[c] = d[c] * inv;
        }
    }
}
