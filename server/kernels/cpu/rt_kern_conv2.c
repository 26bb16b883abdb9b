/*
 * rt_kern_conv2.c - grouped Conv2D (group > 1: depthwise and
 * SeparableConv2D's first half) and ConvTranspose, NHWC, as direct loops
 * over the window. A grouped convolution has few multiply-adds per output
 * (KH*KW*C/G), so im2col + GEMM would mostly move memory. Threads take
 * whole samples; the backward pass sums each thread's weight gradient in
 * its own scratch and adds those up in thread order.
 */
#include <string.h>

#include <omp.h>

#include "cpu/rt_kern_conv.h"
#include "cpu/rt_kern_cpu.h"

/* ------------------------------------------------------------ grouped conv */

/* y[o] += sum over the group's input channels of xr[.] wr[ci * OC + o] for
 * one window cell; the depthwise case (one input channel per group) is a
 * contiguous multiply-add per multiplier */
static inline void rt__gconv_cell(const float *restrict xr, const float *restrict wr,
                                  float *restrict y, int64_t C, int64_t Cg, int64_t OC, int64_t OCg)
{
    if (Cg == 1 && OCg == 1) {
        for (int64_t o = 0; o < OC; o++)
            y[o] += xr[o] * wr[o];
    } else if (Cg == 1) {
        for (int64_t c = 0; c < C; c++) {
            const float xv = xr[c];
            float *restrict yc = y + c * OCg;
            const float *restrict wc = wr + c * OCg;
            for (int64_t m = 0; m < OCg; m++)
                yc[m] += xv * wc[m];
        }
    } else {
        for (int64_t g = 0; g < C / Cg; g++)
            for (int64_t ci = 0; ci < Cg; ci++) {
                const float xv = xr[g * Cg + ci];
                float *restrict yg = y + g * OCg;
                const float *restrict wg = wr + ci * OC + g * OCg;
                for (int64_t m = 0; m < OCg; m++)
                    yg[m] += xv * wg[m];
            }
    }
}

/* the backward of one window cell: dw (+)= x dz, dx (+)= w dz */
static inline void rt__gconv_cell_bwd(const float *restrict xr, const float *restrict wr,
                                      const float *restrict dz, float *restrict dxr,
                                      float *restrict dwr, int64_t C, int64_t Cg, int64_t OC,
                                      int64_t OCg)
{
    if (Cg == 1 && OCg == 1) {
        if (dwr)
            for (int64_t o = 0; o < OC; o++)
                dwr[o] += xr[o] * dz[o];
        if (dxr)
            for (int64_t o = 0; o < OC; o++)
                dxr[o] += wr[o] * dz[o];
        return;
    }
    for (int64_t g = 0; g < C / Cg; g++)
        for (int64_t ci = 0; ci < Cg; ci++) {
            const int64_t xc = g * Cg + ci, wo = ci * OC + g * OCg;
            const float *restrict d = dz + g * OCg;
            if (dwr) {
                const float xv = xr[xc];
                for (int64_t m = 0; m < OCg; m++)
                    dwr[wo + m] += xv * d[m];
            }
            if (dxr) {
                float acc = 0.0f;
                for (int64_t m = 0; m < OCg; m++)
                    acc += wr[wo + m] * d[m];
                dxr[xc] += acc;
            }
        }
}

static inline int rt__gconv_threads(const rt__conv_params *cv, int64_t n)
{
    const int64_t macs = n * cv->OH * cv->OW * cv->OC * cv->KH * cv->KW * (cv->C / cv->G);
    int nt = macs < (INT64_C(1) << 20) ? 1 : rt_kern_conv_threads();
    return nt > n ? (int)n : nt;
}

/* The team's per-thread dW (kw floats) and db (oc floats after it) at
 * stride ts in a->scratch, summed into dw and db in thread order; the
 * first thread's copy overwrites unless the backward accumulates
 * (a->accum bits 2 and 4). */
static void rt__team_sum(const rt__kargs *a, int team, int64_t ts, float *dw, int64_t kw, float *db,
                         int64_t oc)
{
    for (int t = 0; t < team; t++) {
        const float *p = a->scratch + (int64_t)t * ts;
        if (dw) {
            if (t == 0 && !(a->accum & 2u))
                memcpy(dw, p, sizeof(float) * (size_t)kw);
            else
                for (int64_t i = 0; i < kw; i++)
                    dw[i] += p[i];
        }
        if (db) {
            if (t == 0 && !(a->accum & 4u))
                memcpy(db, p + kw, sizeof(float) * (size_t)oc);
            else
                for (int64_t o = 0; o < oc; o++)
                    db[o] += p[kw + o];
        }
    }
}

void rt_kern_gconv_fwd(const rt__kargs *a)
{
    const rt__conv_params *cv = rt__conv_cp(a->nd);
    const int64_t n = a->r->n, H = cv->H, W = cv->W, C = cv->C, OC = cv->OC;
    const int64_t Cg = C / cv->G, OCg = OC / cv->G, OH = cv->OH, OW = cv->OW;
    const float *w = a->x[1], *bias = cv->bias ? a->x[2] : NULL;
    const int nt = rt__gconv_threads(cv, n);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t s = 0; s < n; s++) {
        const float *x = a->x[0] + s * H * W * C;
        for (int64_t oh = 0; oh < OH; oh++) {
            for (int64_t ow = 0; ow < OW; ow++) {
                float *restrict y = a->y + ((s * OH + oh) * OW + ow) * OC;
                if (bias)
                    memcpy(y, bias, sizeof(float) * (size_t)OC);
                else
                    memset(y, 0, sizeof(float) * (size_t)OC);
                for (int64_t kh = 0; kh < cv->KH; kh++) {
                    const int64_t ih = oh * cv->SH - cv->PT + kh * cv->DH;
                    if (ih < 0 || ih >= H)
                        continue;
                    for (int64_t kw = 0; kw < cv->KW; kw++) {
                        const int64_t iw = ow * cv->SW - cv->PL + kw * cv->DW;
                        if (iw < 0 || iw >= W)
                            continue;
                        rt__gconv_cell(x + (ih * W + iw) * C, w + (kh * cv->KW + kw) * Cg * OC, y,
                                       C, Cg, OC, OCg);
                    }
                }
                rt_kern_act_fwd(cv->act, y, OC);
            }
        }
    }
}

/* Threads take whole samples; each sums its weight and bias gradients in
 * its own slice of scratch (rt_kern_conv2d_prepare sizes it), added up in
 * thread order afterwards. dz (the gradient before the activation) is
 * formed per output cell in the slice's tail. */
void rt_kern_gconv_bwd(const rt__kargs *a)
{
    const rt__conv_params *cv = rt__conv_cp(a->nd);
    const int64_t n = a->r->n, H = cv->H, W = cv->W, C = cv->C, OC = cv->OC;
    const int64_t Cg = C / cv->G, OCg = OC / cv->G, OH = cv->OH, OW = cv->OW;
    const int64_t KW_ = cv->KH * cv->KW * Cg * OC;
    const int64_t TS = (KW_ + 2 * OC + 15) & ~(int64_t)15;
    const float *w = a->x[1];
    float *dx = a->dx[0], *dw = a->dx[1], *db = cv->bias ? a->dx[2] : NULL;
    const int nt = rt__gconv_threads(cv, n);
    int team = 1;
#pragma omp parallel num_threads(nt)
    {
        const int T = omp_get_num_threads(), t = omp_get_thread_num();
        if (t == 0)
            team = T;
        float *pdw = a->scratch + (int64_t)t * TS, *pdb = pdw + KW_, *dz = pdb + OC;
        memset(pdw, 0, sizeof(float) * (size_t)(KW_ + OC));
        const int64_t s0 = n * t / T, s1 = n * (t + 1) / T;
        for (int64_t s = s0; s < s1; s++) {
            const float *x = a->x[0] + s * H * W * C;
            float *dxs = dx ? dx + s * H * W * C : NULL;
            if (dxs && !(a->accum & 1u))
                memset(dxs, 0, sizeof(float) * (size_t)(H * W * C));
            for (int64_t oh = 0; oh < OH; oh++) {
                for (int64_t ow = 0; ow < OW; ow++) {
                    const int64_t yo = ((s * OH + oh) * OW + ow) * OC;
                    if (cv->act)
                        rt_kern_act_bwd(cv->act, dz, a->dy + yo, a->y + yo, OC);
                    else
                        memcpy(dz, a->dy + yo, sizeof(float) * (size_t)OC);
                    for (int64_t o = 0; o < OC; o++)
                        pdb[o] += dz[o];
                    for (int64_t kh = 0; kh < cv->KH; kh++) {
                        const int64_t ih = oh * cv->SH - cv->PT + kh * cv->DH;
                        if (ih < 0 || ih >= H)
                            continue;
                        for (int64_t kw = 0; kw < cv->KW; kw++) {
                            const int64_t iw = ow * cv->SW - cv->PL + kw * cv->DW;
                            if (iw < 0 || iw >= W)
                                continue;
                            const int64_t xo = (ih * W + iw) * C, wo = (kh * cv->KW + kw) * Cg * OC;
                            rt__gconv_cell_bwd(x + xo, w + wo, dz, dxs ? dxs + xo : NULL,
                                               dw ? pdw + wo : NULL, C, Cg, OC, OCg);
                        }
                    }
                }
            }
        }
    }
    rt__team_sum(a, team, TS, dw, KW_, db, OC);
}

/* ------------------------------------------------------------ ConvTranspose */

void rt_kern_convt_fwd(const rt__kargs *a)
{
    const rt__conv_params *cv = rt__conv_cp(a->nd);
    const int64_t n = a->r->n, H = cv->H, W = cv->W, C = cv->C, OC = cv->OC;
    const int64_t OH = cv->OH, OW = cv->OW;
    /* groups: output channel o reads the Cg input channels of its group */
    const int64_t G = cv->G > 0 ? cv->G : 1, Cg = C / G, OCg = OC / G;
    const float *w = a->x[1], *bias = cv->bias ? a->x[2] : NULL;
    const int nt =
        n * H * W * Cg * cv->KH * cv->KW * OC < (INT64_C(1) << 20) ? 1 : rt_kern_conv_threads();
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t s = 0; s < n; s++) {
        const float *x = a->x[0] + s * H * W * C;
        float *y = a->y + s * OH * OW * OC;
        for (int64_t p = 0; p < OH * OW; p++) {
            if (bias)
                memcpy(y + p * OC, bias, sizeof(float) * (size_t)OC);
            else
                memset(y + p * OC, 0, sizeof(float) * (size_t)OC);
        }
        for (int64_t h = 0; h < H; h++) {
            for (int64_t wi = 0; wi < W; wi++) {
                const float *restrict xr = x + (h * W + wi) * C;
                for (int64_t kh = 0; kh < cv->KH; kh++) {
                    const int64_t oh = h * cv->SH - cv->PT + kh * cv->DH;
                    if (oh < 0 || oh >= OH)
                        continue;
                    for (int64_t kw = 0; kw < cv->KW; kw++) {
                        const int64_t ow = wi * cv->SW - cv->PL + kw * cv->DW;
                        if (ow < 0 || ow >= OW)
                            continue;
                        float *restrict yr = y + (oh * OW + ow) * OC;
                        const float *restrict wr = w + (kh * cv->KW + kw) * OC * Cg;
                        for (int64_t o = 0; o < OC; o++) {
                            const float *restrict xg = xr + o / OCg * Cg;
                            float acc = 0.0f;
                            for (int64_t i = 0; i < Cg; i++)
                                acc += wr[o * Cg + i] * xg[i];
                            yr[o] += acc;
                        }
                    }
                }
            }
        }
    }
}

int rt_kern_convt_prepare(rt__node *nd, int64_t B, rt__arena *A)
{
    (void)B;
    (void)A;
    const rt__conv_params *cv = rt__conv_cp(nd);
    const int64_t KW_ = cv->KH * cv->KW * cv->OC * (cv->C / (cv->G > 0 ? cv->G : 1));
    nd->kdata = NULL;
    nd->scratch_floats = rt_kern_conv_threads() * ((KW_ + cv->OC + 15) & ~(int64_t)15);
    return 0;
}

/* Threads take whole samples (their dx rows are disjoint) and sum dW and
 * db in their own scratch slices, added up in thread order. */
void rt_kern_convt_bwd(const rt__kargs *a)
{
    const rt__conv_params *cv = rt__conv_cp(a->nd);
    const int64_t n = a->r->n, H = cv->H, W = cv->W, C = cv->C, OC = cv->OC;
    const int64_t OH = cv->OH, OW = cv->OW;
    const int64_t G = cv->G > 0 ? cv->G : 1, Cg = C / G, OCg = OC / G;
    const int64_t KW_ = cv->KH * cv->KW * OC * Cg, TS = (KW_ + OC + 15) & ~(int64_t)15;
    const float *w = a->x[1];
    float *dx = a->dx[0], *dw = a->dx[1], *db = cv->bias ? a->dx[2] : NULL;
    int nt =
        n * H * W * Cg * cv->KH * cv->KW * OC < (INT64_C(1) << 20) ? 1 : rt_kern_conv_threads();
    if (nt > n)
        nt = (int)n;
    int team = 1;
#pragma omp parallel num_threads(nt)
    {
        const int T = omp_get_num_threads(), t = omp_get_thread_num();
        if (t == 0)
            team = T;
        float *pdw = a->scratch + (int64_t)t * TS, *pdb = pdw + KW_;
        memset(pdw, 0, sizeof(float) * (size_t)(KW_ + OC));
        const int64_t s0 = n * t / T, s1 = n * (t + 1) / T;
        for (int64_t s = s0; s < s1; s++) {
            const float *x = a->x[0] + s * H * W * C;
            const float *dy = a->dy + s * OH * OW * OC;
            if (db)
                for (int64_t p = 0; p < OH * OW; p++)
                    for (int64_t o = 0; o < OC; o++)
                        pdb[o] += dy[p * OC + o];
            for (int64_t h = 0; h < H; h++) {
                for (int64_t wi = 0; wi < W; wi++) {
                    const float *restrict xr = x + (h * W + wi) * C;
                    float *restrict dxr = dx ? dx + ((s * H + h) * W + wi) * C : NULL;
                    if (dxr && !(a->accum & 1u))
                        memset(dxr, 0, sizeof(float) * (size_t)C);
                    for (int64_t kh = 0; kh < cv->KH; kh++) {
                        const int64_t oh = h * cv->SH - cv->PT + kh * cv->DH;
                        if (oh < 0 || oh >= OH)
                            continue;
                        for (int64_t kw = 0; kw < cv->KW; kw++) {
                            const int64_t ow = wi * cv->SW - cv->PL + kw * cv->DW;
                            if (ow < 0 || ow >= OW)
                                continue;
                            const float *restrict g = dy + (oh * OW + ow) * OC;
                            const int64_t wo = (kh * cv->KW + kw) * OC * Cg;
                            for (int64_t o = 0; o < OC; o++) {
                                const float go = g[o];
                                const int64_t gi = o / OCg * Cg;
                                if (dxr)
                                    for (int64_t i = 0; i < Cg; i++)
                                        dxr[gi + i] += w[wo + o * Cg + i] * go;
                                if (dw)
                                    for (int64_t i = 0; i < Cg; i++)
                                        pdw[wo + o * Cg + i] += xr[gi + i] * go;
                            }
                        }
                    }
                }
            }
        }
    }
    rt__team_sum(a, team, TS, dw, KW_, db, OC);
}
