/*
 * rt_kern_pool.c - MaxPool2D, AvgPool2D and GlobalAvgPool, NHWC. The inner
 * loops run over channels, which are contiguous, so they vectorise.
 *
 * MaxPool's backward recomputes each window's argmax from x instead of
 * storing indices in the forward pass: the recomputation reads x once,
 * an index buffer would cost as much memory as the output and would have
 * to stay alive from forward to backward.
 */
#include <string.h>

#include <omp.h>

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

/* ------------------------------------------------------------------ max */

/* y (B,OH,OW,C) = max over each window of x (B,H,W,C) */
void rt_kern_maxpool2d_fwd(const rt__kargs *a)
{
    const rt__pool p = *rt__conv_cp(a->nd);
    const int64_t C = p.C;
#pragma omp parallel for schedule(static) if (a->r->n * p.H * p.W * C >= RT__PAR_ELEMS)
    for (int64_t b = 0; b < a->r->n; b++) {
        const float *xb = a->x[0] + b * p.H * p.W * C;
        float *yb = a->y + b * p.OH * p.OW * C;
        for (int64_t oh = 0; oh < p.OH; oh++) {
            for (int64_t ow = 0; ow < p.OW; ow++) {
                int64_t h0, h1, w0, w1;
                rt__window(&p, oh, ow, &h0, &h1, &w0, &w1);
                float *restrict m = yb + (oh * p.OW + ow) * C;
                memcpy(m, xb + (h0 * p.W + w0) * C, sizeof(float) * (size_t)C);
                for (int64_t h = h0; h < h1; h++)
                    for (int64_t w = w0; w < w1; w++) {
                        const float *restrict v = xb + (h * p.W + w) * C;
                        for (int64_t c = 0; c < C; c++)
                            m[c] = v[c] > m[c] ? v[c] : m[c];
                    }
            }
        }
    }
}

/* dx (+)= dy routed to the first maximum of each window (scan order), as
 * PyTorch and TensorFlow do for ties */
void rt_kern_maxpool2d_bwd(const rt__kargs *a)
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
        const float *xb = a->x[0] + b * p.H * p.W * C;
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
                    memcpy(m, xb + first, sizeof(float) * (size_t)C);
                    for (int64_t c = 0; c < C; c++)
                        id[c] = first;
                    for (int64_t h = h0; h < h0 + p.KH; h++)
                        for (int64_t w = w0; w < w0 + p.KW; w++) {
                            const int32_t off = (int32_t)((h * p.W + w) * C);
                            const float *restrict v = xb + off;
                            for (int64_t c = 0; c < C; c++) {
                                const int gt = v[c] > m[c];
                                m[c] = gt ? v[c] : m[c];
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
                memcpy(m, xb + first, sizeof(float) * (size_t)C);
                for (int64_t c = 0; c < C; c++)
                    id[c] = first;
                for (int64_t h = h0; h < h1; h++)
                    for (int64_t w = w0; w < w1; w++) {
                        const int32_t off = (int32_t)((h * p.W + w) * C);
                        const float *restrict v = xb + off;
                        for (int64_t c = 0; c < C; c++) {
                            const int gt = v[c] > m[c];
                            m[c] = gt ? v[c] : m[c];
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

/* ------------------------------------------------------------------ avg */

void rt_kern_avgpool2d_fwd(const rt__kargs *a)
{
    const rt__pool p = *rt__conv_cp(a->nd);
    const int64_t C = p.C;
#pragma omp parallel for schedule(static) if (a->r->n * p.H * p.W * C >= RT__PAR_ELEMS)
    for (int64_t b = 0; b < a->r->n; b++) {
        const float *xb = a->x[0] + b * p.H * p.W * C;
        float *yb = a->y + b * p.OH * p.OW * C;
        for (int64_t oh = 0; oh < p.OH; oh++) {
            for (int64_t ow = 0; ow < p.OW; ow++) {
                int64_t h0, h1, w0, w1;
                rt__window(&p, oh, ow, &h0, &h1, &w0, &w1);
                float *restrict s = yb + (oh * p.OW + ow) * C;
                memset(s, 0, sizeof(float) * (size_t)C);
                for (int64_t h = h0; h < h1; h++)
                    for (int64_t w = w0; w < w1; w++) {
                        const float *restrict v = xb + (h * p.W + w) * C;
                        for (int64_t c = 0; c < C; c++)
                            s[c] += v[c];
                    }
                const float inv = 1.0f / (float)((h1 - h0) * (w1 - w0));
                for (int64_t c = 0; c < C; c++)
                    s[c] *= inv;
            }
        }
    }
}

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
void rt_kern_gap_fwd(const rt__kargs *a)
{
    const int64_t HW = rt__gap_cp(a->nd)->HW, C = rt__gap_cp(a->nd)->C;
    const float inv = 1.0f / (float)HW;
#pragma omp parallel for schedule(static) if (a->r->n * HW * C >= RT__PAR_ELEMS)
    for (int64_t b = 0; b < a->r->n; b++) {
        const float *xb = a->x[0] + b * HW * C;
        float *restrict s = a->y + b * C;
        memset(s, 0, sizeof(float) * (size_t)C);
        for (int64_t i = 0; i < HW; i++) {
            const float *restrict v = xb + i * C;
            for (int64_t c = 0; c < C; c++)
                s[c] += v[c];
        }
        for (int64_t c = 0; c < C; c++)
            s[c] *= inv;
    }
}

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
