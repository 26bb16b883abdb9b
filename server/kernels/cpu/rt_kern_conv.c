/*
 * rt_kern_conv.c - Conv2D, NHWC, as im2col + GEMM over chunks of samples.
 *
 * Why chunks: the column matrix of a whole batch (W-B: 256 x 900 rows x 27)
 * is tens of MB and would be written to and read back from memory; a chunk
 * of a few thousand rows stays in L2 between im2col and the GEMM, and the
 * bias and fused activation run on the chunk's output while it is still
 * in cache. The kernel layout (KH,KW,C,OC) is Keras' and is already the
 * (K, OC) right-hand matrix of the GEMM, so weights are never reordered.
 */
#include <string.h>

#include "cpu/rt_kern_conv.h"
#include "cpu/rt_kern_cpu.h"

/* x (B,H,W,C) -> col (rows, KH*KW*C) for samples [s0, s0+nb) */
static void rt__im2col(const int64_t *ia, const float *restrict x, int64_t s0,
                       int64_t nb, float *restrict col)
{
    const int64_t H = ia[RT_CV_H], W = ia[RT_CV_W], C = ia[RT_CV_C];
    const int64_t OH = ia[RT_CV_OH], OW = ia[RT_CV_OW];
    const int64_t KH = ia[RT_CV_KH], KW = ia[RT_CV_KW];
    const int64_t SH = ia[RT_CV_SH], SW = ia[RT_CV_SW];
    const int64_t DH = ia[RT_CV_DH], DW = ia[RT_CV_DW];
    const int64_t PT = ia[RT_CV_PT], PL = ia[RT_CV_PL];
    float *restrict o = col;
    for (int64_t b = s0; b < s0 + nb; b++) {
        const float *xb = x + b * H * W * C;
        for (int64_t oh = 0; oh < OH; oh++) {
            for (int64_t ow = 0; ow < OW; ow++) {
                for (int64_t i = 0; i < KH; i++) {
                    const int64_t ih = oh * SH - PT + i * DH;
                    for (int64_t j = 0; j < KW; j++) {
                        const int64_t iw = ow * SW - PL + j * DW;
                        if (ih < 0 || ih >= H || iw < 0 || iw >= W) {
                            for (int64_t c = 0; c < C; c++) o[c] = 0.0f;
                        } else {
                            const float *restrict src = xb + (ih * W + iw) * C;
                            for (int64_t c = 0; c < C; c++) o[c] = src[c];
                        }
                        o += C;
                    }
                }
            }
        }
    }
}

/* dx (B,H,W,C) += col (rows, KH*KW*C) for samples [s0, s0+nb) */
static void rt__col2im_add(const int64_t *ia, const float *restrict col,
                           int64_t s0, int64_t nb, float *restrict dx)
{
    const int64_t H = ia[RT_CV_H], W = ia[RT_CV_W], C = ia[RT_CV_C];
    const int64_t OH = ia[RT_CV_OH], OW = ia[RT_CV_OW];
    const int64_t KH = ia[RT_CV_KH], KW = ia[RT_CV_KW];
    const int64_t SH = ia[RT_CV_SH], SW = ia[RT_CV_SW];
    const int64_t DH = ia[RT_CV_DH], DW = ia[RT_CV_DW];
    const int64_t PT = ia[RT_CV_PT], PL = ia[RT_CV_PL];
    const float *restrict o = col;
    for (int64_t b = s0; b < s0 + nb; b++) {
        float *xb = dx + b * H * W * C;
        for (int64_t oh = 0; oh < OH; oh++) {
            for (int64_t ow = 0; ow < OW; ow++) {
                for (int64_t i = 0; i < KH; i++) {
                    const int64_t ih = oh * SH - PT + i * DH;
                    for (int64_t j = 0; j < KW; j++) {
                        const int64_t iw = ow * SW - PL + j * DW;
                        if (ih >= 0 && ih < H && iw >= 0 && iw < W) {
                            float *restrict d = xb + (ih * W + iw) * C;
                            for (int64_t c = 0; c < C; c++) d[c] += o[c];
                        }
                        o += C;
                    }
                }
            }
        }
    }
}

/* y (B,OH,OW,OC) = act(im2col(x) W + b) */
void rt_kern_conv2d_fwd(const rt__kargs *a)
{
    const rt__node *nd = a->nd;
    const int64_t *ia = nd->ia;
    const int64_t n = a->r->n;
    const int64_t in_s = ia[RT_CV_H] * ia[RT_CV_W] * ia[RT_CV_C];
    const int64_t P = ia[RT_CV_OH] * ia[RT_CV_OW], OC = ia[RT_CV_OC];
    const int64_t K = ia[RT_CV_KH] * ia[RT_CV_KW] * ia[RT_CV_C];
    const int64_t cs = ia[RT_CV_CHUNK];
    const float *w = a->x[1];
    const float *bias = ia[RT_CV_BIAS] ? a->x[2] : NULL;
    float *col = a->scratch;
    for (int64_t s0 = 0; s0 < n; s0 += cs) {
        const int64_t nb = n - s0 < cs ? n - s0 : cs;
        const int64_t rows = nb * P;
        const float *A;
        if (ia[RT_CV_DIRECT]) {
            A = a->x[0] + s0 * in_s;
        } else {
            rt__im2col(ia, a->x[0], s0, nb, col);
            A = col;
        }
        float *y = a->y + s0 * P * OC;
        rt_kern_gemm(a->r, 0, 0, rows, OC, K, A, K, w, OC, 0.0f, y, OC);
        if (bias) {
            for (int64_t r = 0; r < rows; r++) {
                float *restrict yr = y + r * OC;
                const float *restrict bb = bias;
                for (int64_t c = 0; c < OC; c++) yr[c] += bb[c];
            }
        }
        if (nd->act) rt_kern_act_fwd(nd->act, y, rows * OC);
    }
}

/* Per chunk: dz = dy * act'(y); dW (+)= col^T dz; db (+)= sum_rows dz;
 * dcol = dz W^T, scattered back into dx (col2im). */
void rt_kern_conv2d_bwd(const rt__kargs *a)
{
    const rt__node *nd = a->nd;
    const int64_t *ia = nd->ia;
    const int64_t n = a->r->n;
    const int64_t in_s = ia[RT_CV_H] * ia[RT_CV_W] * ia[RT_CV_C];
    const int64_t P = ia[RT_CV_OH] * ia[RT_CV_OW], OC = ia[RT_CV_OC];
    const int64_t K = ia[RT_CV_KH] * ia[RT_CV_KW] * ia[RT_CV_C];
    const int64_t cs = ia[RT_CV_CHUNK];
    const int direct = ia[RT_CV_DIRECT] != 0;
    float *col = a->scratch;
    float *dzbuf = a->scratch + cs * P * K;
    float *dx = a->dx[0], *dw = a->dx[1];
    float *db = ia[RT_CV_BIAS] ? a->dx[2] : NULL;
    int first_w = !(a->accum & 2u), first_b = !(a->accum & 4u);
    for (int64_t s0 = 0; s0 < n; s0 += cs) {
        const int64_t nb = n - s0 < cs ? n - s0 : cs;
        const int64_t rows = nb * P;
        const float *x = a->x[0] + s0 * in_s;
        const float *dz = a->dy + s0 * P * OC;
        if (nd->act) {
            rt_kern_act_bwd(nd->act, dzbuf, dz, a->y + s0 * P * OC, rows * OC);
            dz = dzbuf;
        }
        if (dw) {
            const float *A = x;
            if (!direct) {
                rt__im2col(ia, a->x[0], s0, nb, col);
                A = col;
            }
            rt_kern_gemm(a->r, 1, 0, K, OC, rows, A, K, dz, OC,
                         first_w ? 0.0f : 1.0f, dw, OC);
            first_w = 0;
        }
        if (db) {
            if (first_b) memset(db, 0, sizeof(float) * (size_t)OC);
            first_b = 0;
            for (int64_t r = 0; r < rows; r++) {
                const float *restrict d = dz + r * OC;
                float *restrict bb = db;
                for (int64_t c = 0; c < OC; c++) bb[c] += d[c];
            }
        }
        if (dx) {
            float *dxc = dx + s0 * in_s;
            if (direct) {
                rt_kern_gemm(a->r, 0, 1, rows, K, OC, dz, OC, a->x[1], OC,
                             (a->accum & 1u) ? 1.0f : 0.0f, dxc, K);
            } else {
                rt_kern_gemm(a->r, 0, 1, rows, K, OC, dz, OC, a->x[1], OC, 0.0f,
                             col, K);
                if (!(a->accum & 1u)) memset(dxc, 0, sizeof(float) * (size_t)(nb * in_s));
                rt__col2im_add(ia, col, s0, nb, dx);
            }
        }
    }
}
