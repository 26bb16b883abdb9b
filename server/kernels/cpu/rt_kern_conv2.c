/*
 * rt_kern_conv2.c - grouped Conv2D (group > 1: depthwise and
 * SeparableConv2D's first half) and ConvTranspose, NHWC, as direct loops
 * over the window. A grouped convolution has few multiply-adds per output
 * (KH*KW*C/G), so im2col + GEMM would mostly move memory; the forward pass
 * shares samples out among threads, the backward pass runs in sample order
 * (the weight gradient is one sum).
 */
#include <string.h>

#include <omp.h>

#include "cpu/rt_kern_conv.h"
#include "cpu/rt_kern_cpu.h"

/* act'(y) for the activation fused into Conv2D (from its output) */
static inline float rt__act_dy(int act, float y)
{
    switch (act) {
    case RT__ACT_RELU: return y > 0.0f ? 1.0f : 0.0f;
    case RT__ACT_SIGMOID: return y * (1.0f - y);
    case RT__ACT_TANH: return 1.0f - y * y;
    default: return 1.0f;
    }
}

/* ------------------------------------------------------------ grouped conv */

void rt_kern_gconv_fwd(const rt__kargs *a)
{
    const rt__conv_params *cv = rt__conv_cp(a->nd);
    const int64_t n = a->r->n, H = cv->H, W = cv->W, C = cv->C, OC = cv->OC;
    const int64_t Cg = C / cv->G, OCg = OC / cv->G, OH = cv->OH, OW = cv->OW;
    const float *w = a->x[1], *bias = cv->bias ? a->x[2] : NULL;
    const int nt = n * OH * OW * OC * cv->KH * cv->KW * Cg < (INT64_C(1) << 20)
                       ? 1 : rt_kern_conv_threads();
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t s = 0; s < n; s++) {
        const float *x = a->x[0] + s * H * W * C;
        for (int64_t oh = 0; oh < OH; oh++) {
            for (int64_t ow = 0; ow < OW; ow++) {
                float *restrict y = a->y + ((s * OH + oh) * OW + ow) * OC;
                if (bias) memcpy(y, bias, sizeof(float) * (size_t)OC);
                else memset(y, 0, sizeof(float) * (size_t)OC);
                for (int64_t kh = 0; kh < cv->KH; kh++) {
                    const int64_t ih = oh * cv->SH - cv->PT + kh * cv->DH;
                    if (ih < 0 || ih >= H) continue;
                    for (int64_t kw = 0; kw < cv->KW; kw++) {
                        const int64_t iw = ow * cv->SW - cv->PL + kw * cv->DW;
                        if (iw < 0 || iw >= W) continue;
                        const float *restrict xr = x + (ih * W + iw) * C;
                        const float *restrict wr = w + (kh * cv->KW + kw) * Cg * OC;
                        if (Cg == 1 && OCg == 1) {
                            for (int64_t o = 0; o < OC; o++) y[o] += xr[o] * wr[o];
                            continue;
                        }
                        for (int64_t ci = 0; ci < Cg; ci++)
                            for (int64_t o = 0; o < OC; o++)
                                y[o] += xr[(o / OCg) * Cg + ci] * wr[ci * OC + o];
                    }
                }
                rt_kern_act_fwd(cv->act, y, OC);
            }
        }
    }
}

void rt_kern_gconv_bwd(const rt__kargs *a)
{
    const rt__conv_params *cv = rt__conv_cp(a->nd);
    const int64_t n = a->r->n, H = cv->H, W = cv->W, C = cv->C, OC = cv->OC;
    const int64_t Cg = C / cv->G, OCg = OC / cv->G, OH = cv->OH, OW = cv->OW;
    const float *w = a->x[1];
    float *dx = a->dx[0], *dw = a->dx[1], *db = cv->bias ? a->dx[2] : NULL;
    if (dx && !(a->accum & 1u)) memset(dx, 0, sizeof(float) * (size_t)(n * H * W * C));
    if (dw && !(a->accum & 2u))
        memset(dw, 0, sizeof(float) * (size_t)(cv->KH * cv->KW * Cg * OC));
    if (db && !(a->accum & 4u)) memset(db, 0, sizeof(float) * (size_t)OC);
    for (int64_t s = 0; s < n; s++) {
        const float *x = a->x[0] + s * H * W * C;
        for (int64_t oh = 0; oh < OH; oh++) {
            for (int64_t ow = 0; ow < OW; ow++) {
                const int64_t yo = ((s * OH + oh) * OW + ow) * OC;
                const float *restrict dy = a->dy + yo;
                const float *restrict yv = a->y ? a->y + yo : NULL;
                float dz[256];
                for (int64_t o0 = 0; o0 < OC; o0 += 256) {
                    const int64_t o1 = o0 + 256 < OC ? o0 + 256 : OC;
                    for (int64_t o = o0; o < o1; o++)
                        dz[o - o0] = cv->act ? dy[o] * rt__act_dy(cv->act, yv[o]) : dy[o];
                    if (db)
                        for (int64_t o = o0; o < o1; o++) db[o] += dz[o - o0];
                    for (int64_t kh = 0; kh < cv->KH; kh++) {
                        const int64_t ih = oh * cv->SH - cv->PT + kh * cv->DH;
                        if (ih < 0 || ih >= H) continue;
                        for (int64_t kw = 0; kw < cv->KW; kw++) {
                            const int64_t iw = ow * cv->SW - cv->PL + kw * cv->DW;
                            if (iw < 0 || iw >= W) continue;
                            const int64_t xo = (ih * W + iw) * C;
                            const int64_t wo = (kh * cv->KW + kw) * Cg * OC;
                            for (int64_t ci = 0; ci < Cg; ci++)
                                for (int64_t o = o0; o < o1; o++) {
                                    const int64_t xc = xo + (o / OCg) * Cg + ci;
                                    if (dw) dw[wo + ci * OC + o] += x[xc] * dz[o - o0];
                                    if (dx) dx[s * H * W * C + xc] += w[wo + ci * OC + o] * dz[o - o0];
                                }
                        }
                    }
                }
            }
        }
    }
}

/* ------------------------------------------------------------ ConvTranspose */

void rt_kern_convt_fwd(const rt__kargs *a)
{
    const rt__conv_params *cv = rt__conv_cp(a->nd);
    const int64_t n = a->r->n, H = cv->H, W = cv->W, C = cv->C, OC = cv->OC;
    const int64_t OH = cv->OH, OW = cv->OW;
    const float *w = a->x[1], *bias = cv->bias ? a->x[2] : NULL;
    const int nt = n * H * W * C * cv->KH * cv->KW * OC < (INT64_C(1) << 20)
                       ? 1 : rt_kern_conv_threads();
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t s = 0; s < n; s++) {
        const float *x = a->x[0] + s * H * W * C;
        float *y = a->y + s * OH * OW * OC;
        for (int64_t p = 0; p < OH * OW; p++) {
            if (bias) memcpy(y + p * OC, bias, sizeof(float) * (size_t)OC);
            else memset(y + p * OC, 0, sizeof(float) * (size_t)OC);
        }
        for (int64_t h = 0; h < H; h++) {
            for (int64_t wi = 0; wi < W; wi++) {
                const float *restrict xr = x + (h * W + wi) * C;
                for (int64_t kh = 0; kh < cv->KH; kh++) {
                    const int64_t oh = h * cv->SH - cv->PT + kh * cv->DH;
                    if (oh < 0 || oh >= OH) continue;
                    for (int64_t kw = 0; kw < cv->KW; kw++) {
                        const int64_t ow = wi * cv->SW - cv->PL + kw * cv->DW;
                        if (ow < 0 || ow >= OW) continue;
                        float *restrict yr = y + (oh * OW + ow) * OC;
                        const float *restrict wr = w + (kh * cv->KW + kw) * OC * C;
                        for (int64_t o = 0; o < OC; o++) {
                            float acc = 0.0f;
                            for (int64_t i = 0; i < C; i++) acc += wr[o * C + i] * xr[i];
                            yr[o] += acc;
                        }
                    }
                }
            }
        }
    }
}

void rt_kern_convt_bwd(const rt__kargs *a)
{
    const rt__conv_params *cv = rt__conv_cp(a->nd);
    const int64_t n = a->r->n, H = cv->H, W = cv->W, C = cv->C, OC = cv->OC;
    const int64_t OH = cv->OH, OW = cv->OW;
    const float *w = a->x[1];
    float *dx = a->dx[0], *dw = a->dx[1], *db = cv->bias ? a->dx[2] : NULL;
    if (dw && !(a->accum & 2u))
        memset(dw, 0, sizeof(float) * (size_t)(cv->KH * cv->KW * OC * C));
    if (db) {
        if (!(a->accum & 4u)) memset(db, 0, sizeof(float) * (size_t)OC);
        for (int64_t p = 0; p < n * OH * OW; p++)
            for (int64_t o = 0; o < OC; o++) db[o] += a->dy[p * OC + o];
    }
    for (int64_t s = 0; s < n; s++) {
        const float *x = a->x[0] + s * H * W * C;
        const float *dy = a->dy + s * OH * OW * OC;
        for (int64_t h = 0; h < H; h++) {
            for (int64_t wi = 0; wi < W; wi++) {
                const float *restrict xr = x + (h * W + wi) * C;
                float *restrict dxr = dx ? dx + ((s * H + h) * W + wi) * C : NULL;
                if (dxr && !(a->accum & 1u)) memset(dxr, 0, sizeof(float) * (size_t)C);
                for (int64_t kh = 0; kh < cv->KH; kh++) {
                    const int64_t oh = h * cv->SH - cv->PT + kh * cv->DH;
                    if (oh < 0 || oh >= OH) continue;
                    for (int64_t kw = 0; kw < cv->KW; kw++) {
                        const int64_t ow = wi * cv->SW - cv->PL + kw * cv->DW;
                        if (ow < 0 || ow >= OW) continue;
                        const float *restrict g = dy + (oh * OW + ow) * OC;
                        const int64_t wo = (kh * cv->KW + kw) * OC * C;
                        for (int64_t o = 0; o < OC; o++) {
                            const float go = g[o];
                            if (dxr)
                                for (int64_t i = 0; i < C; i++) dxr[i] += w[wo + o * C + i] * go;
                            if (dw)
                                for (int64_t i = 0; i < C; i++) dw[wo + o * C + i] += xr[i] * go;
                        }
                    }
                }
            }
        }
    }
}
