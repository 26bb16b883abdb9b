/* rt_ref_conv.c - the reference kernels of Conv2D, the 2-D and global
 * pools, BatchNorm, LayerNormalization and Upsample, NHWC, one output
 * element at a time. */
#include <math.h>
#include <stdio.h>

#include "ref/rt_ref.h"

/* ----------------------------------------------------------------- Conv2D */

static double rt_ref_cact(int act, double z)
{
    if (act == RT__ACT_RELU)
        return z > 0 ? z : 0;
    if (act == RT__ACT_SIGMOID)
        return 1 / (1 + exp(-z));
    if (act == RT__ACT_TANH)
        return tanh(z);
    return z;
}

static double rt_ref_cact_dy(int act, double y)
{
    if (act == RT__ACT_RELU)
        return y > 0;
    if (act == RT__ACT_SIGMOID)
        return y * (1 - y);
    if (act == RT__ACT_TANH)
        return 1 - y * y;
    return 1;
}

/* input cell of output (oh, ow) and kernel tap (kh, kw), or 0 when it
 * falls in the padding */
static int rt_ref_tap(const rt__conv_params *p, int64_t oh, int64_t ow, int64_t kh, int64_t kw,
                      int64_t *h, int64_t *w)
{
    *h = oh * p->SH - p->PT + kh * p->DH;
    *w = ow * p->SW - p->PL + kw * p->DW;
    return *h >= 0 && *h < p->H && *w >= 0 && *w < p->W;
}

/* ---------------------------------------------------------- ConvTranspose */

/* ConvTranspose: y[h SH - PT + kh DH, w SW - PL + kw DW, o] += x[h, w, i]
 * W[kh, kw, o, i]; as a gather, the input cell whose tap lands on output
 * (oh, ow), or 0 */
static int rt_ref_convt_src(const rt__conv_params *p, int64_t oh, int64_t ow, int64_t kh,
                            int64_t kw, int64_t *h, int64_t *w)
{
    const int64_t th = oh + p->PT - kh * p->DH, tw = ow + p->PL - kw * p->DW;
    if (th < 0 || tw < 0 || th % p->SH || tw % p->SW)
        return 0;
    *h = th / p->SH;
    *w = tw / p->SW;
    return *h < p->H && *w < p->W;
}

/* Conv2D (tr 0, kernel (KH, KW, C/G, OC)) and ConvTranspose (tr 1, kernel
 * (KH, KW, OC, C/G)) as one gather: output channel o of group o / (OC/G)
 * sums, over the taps landing on its cell, its group's C/G input channels
 * times the kernel; plus the bias, then Conv2D's activation */
static int rt_ref_src(const rt__conv_params *p, int tr, int64_t oh, int64_t ow, int64_t kh,
                      int64_t kw, int64_t *h, int64_t *w)
{
    return tr ? rt_ref_convt_src(p, oh, ow, kh, kw, h, w) : rt_ref_tap(p, oh, ow, kh, kw, h, w);
}

static int64_t rt_ref_kidx(const rt__conv_params *p, int tr, int64_t kh, int64_t kw, int64_t c,
                           int64_t o, int64_t Cg)
{
    return tr ? ((kh * p->KW + kw) * p->OC + o) * Cg + c : ((kh * p->KW + kw) * Cg + c) * p->OC + o;
}

static void rt_ref_convs_fwd(const rt__kargs *a, int tr)
{
    const rt__conv_params *p = rt__conv_cp(a->nd);
    const int64_t G = p->G > 1 ? p->G : 1, Cg = p->C / G, OCg = p->OC / G;
    const float *x = a->x[0], *k = a->x[1], *b = p->bias ? a->x[2] : NULL;
    const int act = tr ? RT__ACT_NONE : p->act;
    for (int64_t s = 0; s < a->r->n; s++)
        for (int64_t oh = 0; oh < p->OH; oh++)
            for (int64_t ow = 0; ow < p->OW; ow++)
                for (int64_t o = 0; o < p->OC; o++) {
                    const int64_t g = o / OCg;
                    double acc = b ? b[o] : 0.0;
                    for (int64_t kh = 0; kh < p->KH; kh++)
                        for (int64_t kw = 0; kw < p->KW; kw++) {
                            int64_t h, w;
                            if (!rt_ref_src(p, tr, oh, ow, kh, kw, &h, &w))
                                continue;
                            for (int64_t c = 0; c < Cg; c++)
                                acc += (double)x[((s * p->H + h) * p->W + w) * p->C + g * Cg + c] *
                                       k[rt_ref_kidx(p, tr, kh, kw, c, o, Cg)];
                        }
                    a->y[((s * p->OH + oh) * p->OW + ow) * p->OC + o] =
                        (float)rt_ref_cact(act, acc);
                }
}

/* dz = dy * act'(y), scattered: each output element's gradient goes to
 * the input cells and the kernel taps it read, and to its bias */
static void rt_ref_convs_bwd(const rt__kargs *a, int tr)
{
    const rt__conv_params *p = rt__conv_cp(a->nd);
    const int64_t G = p->G > 1 ? p->G : 1, Cg = p->C / G, OCg = p->OC / G;
    const float *x = a->x[0], *k = a->x[1];
    const int act = tr ? RT__ACT_NONE : p->act;
    if (a->dx[0])
        rt_ref_clear(a, 0, a->r->n * p->H * p->W * p->C);
    if (a->dx[1])
        rt_ref_clear(a, 1, p->KH * p->KW * Cg * p->OC);
    if (p->bias && a->dx[2])
        rt_ref_clear(a, 2, p->OC);
    for (int64_t s = 0; s < a->r->n; s++)
        for (int64_t oh = 0; oh < p->OH; oh++)
            for (int64_t ow = 0; ow < p->OW; ow++)
                for (int64_t o = 0; o < p->OC; o++) {
                    const int64_t yi = ((s * p->OH + oh) * p->OW + ow) * p->OC + o;
                    const double dz =
                        (double)a->dy[yi] * (act ? rt_ref_cact_dy(act, a->y[yi]) : 1.0);
                    const int64_t g = o / OCg;
                    if (p->bias && a->dx[2])
                        a->dx[2][o] = (float)(a->dx[2][o] + dz);
                    for (int64_t kh = 0; kh < p->KH; kh++)
                        for (int64_t kw = 0; kw < p->KW; kw++) {
                            int64_t h, w;
                            if (!rt_ref_src(p, tr, oh, ow, kh, kw, &h, &w))
                                continue;
                            for (int64_t c = 0; c < Cg; c++) {
                                const int64_t xi = ((s * p->H + h) * p->W + w) * p->C + g * Cg + c;
                                const int64_t ki = rt_ref_kidx(p, tr, kh, kw, c, o, Cg);
                                if (a->dx[0])
                                    a->dx[0][xi] = (float)(a->dx[0][xi] + dz * k[ki]);
                                if (a->dx[1])
                                    a->dx[1][ki] = (float)(a->dx[1][ki] + dz * x[xi]);
                            }
                        }
                }
}

void rt_ref_conv2d_fwd(const rt__kargs *a) { rt_ref_convs_fwd(a, 0); }
void rt_ref_conv2d_bwd(const rt__kargs *a) { rt_ref_convs_bwd(a, 0); }
void rt_ref_convt_fwd(const rt__kargs *a) { rt_ref_convs_fwd(a, 1); }
void rt_ref_convt_bwd(const rt__kargs *a) { rt_ref_convs_bwd(a, 1); }

/* ------------------------------------------------------------------ pools */

/* the window of output (oh, ow) clipped to the input: [h0, h1) x [w0, w1) */
static void rt_ref_window(const rt__conv_params *p, int64_t oh, int64_t ow, int64_t *h0,
                          int64_t *h1, int64_t *w0, int64_t *w1)
{
    *h0 = oh * p->SH - p->PT;
    *w0 = ow * p->SW - p->PL;
    *h1 = *h0 + p->KH < p->H ? *h0 + p->KH : p->H;
    *w1 = *w0 + p->KW < p->W ? *w0 + p->KW : p->W;
    if (*h0 < 0)
        *h0 = 0;
    if (*w0 < 0)
        *w0 = 0;
}

/* the first largest input cell of the window (a strict > scan) */
static int64_t rt_ref_pool_arg(const rt__kargs *a, int64_t s, int64_t oh, int64_t ow, int64_t c)
{
    const rt__conv_params *p = rt__conv_cp(a->nd);
    int64_t h0, h1, w0, w1, best = -1;
    rt_ref_window(p, oh, ow, &h0, &h1, &w0, &w1);
    for (int64_t h = h0; h < h1; h++)
        for (int64_t w = w0; w < w1; w++) {
            const int64_t i = ((s * p->H + h) * p->W + w) * p->C + c;
            if (best < 0 || a->x[0][i] > a->x[0][best])
                best = i;
        }
    return best;
}

void rt_ref_maxpool2d_fwd(const rt__kargs *a)
{
    const rt__conv_params *p = rt__conv_cp(a->nd);
    for (int64_t s = 0; s < a->r->n; s++)
        for (int64_t oh = 0; oh < p->OH; oh++)
            for (int64_t ow = 0; ow < p->OW; ow++)
                for (int64_t c = 0; c < p->C; c++)
                    a->y[((s * p->OH + oh) * p->OW + ow) * p->C + c] =
                        a->x[0][rt_ref_pool_arg(a, s, oh, ow, c)];
}

void rt_ref_maxpool2d_bwd(const rt__kargs *a)
{
    if (!a->dx[0])
        return;
    const rt__conv_params *p = rt__conv_cp(a->nd);
    rt_ref_clear(a, 0, a->r->n * p->H * p->W * p->C);
    for (int64_t s = 0; s < a->r->n; s++)
        for (int64_t oh = 0; oh < p->OH; oh++)
            for (int64_t ow = 0; ow < p->OW; ow++)
                for (int64_t c = 0; c < p->C; c++)
                    a->dx[0][rt_ref_pool_arg(a, s, oh, ow, c)] +=
                        a->dy[((s * p->OH + oh) * p->OW + ow) * p->C + c];
}

/* the mean over the window's cells inside the input (TensorFlow's 'same') */
void rt_ref_avgpool2d_fwd(const rt__kargs *a)
{
    const rt__conv_params *p = rt__conv_cp(a->nd);
    for (int64_t s = 0; s < a->r->n; s++)
        for (int64_t oh = 0; oh < p->OH; oh++)
            for (int64_t ow = 0; ow < p->OW; ow++) {
                int64_t h0, h1, w0, w1;
                rt_ref_window(p, oh, ow, &h0, &h1, &w0, &w1);
                for (int64_t c = 0; c < p->C; c++) {
                    double acc = 0;
                    for (int64_t h = h0; h < h1; h++)
                        for (int64_t w = w0; w < w1; w++)
                            acc += a->x[0][((s * p->H + h) * p->W + w) * p->C + c];
                    a->y[((s * p->OH + oh) * p->OW + ow) * p->C + c] =
                        (float)(acc / (double)((h1 - h0) * (w1 - w0)));
                }
            }
}

void rt_ref_avgpool2d_bwd(const rt__kargs *a)
{
    if (!a->dx[0])
        return;
    const rt__conv_params *p = rt__conv_cp(a->nd);
    rt_ref_clear(a, 0, a->r->n * p->H * p->W * p->C);
    for (int64_t s = 0; s < a->r->n; s++)
        for (int64_t oh = 0; oh < p->OH; oh++)
            for (int64_t ow = 0; ow < p->OW; ow++) {
                int64_t h0, h1, w0, w1;
                rt_ref_window(p, oh, ow, &h0, &h1, &w0, &w1);
                const double inv = 1.0 / (double)((h1 - h0) * (w1 - w0));
                for (int64_t c = 0; c < p->C; c++) {
                    const double g = a->dy[((s * p->OH + oh) * p->OW + ow) * p->C + c] * inv;
                    for (int64_t h = h0; h < h1; h++)
                        for (int64_t w = w0; w < w1; w++) {
                            float *d = &a->dx[0][((s * p->H + h) * p->W + w) * p->C + c];
                            *d = (float)(*d + g);
                        }
                }
            }
}

void rt_ref_gap_fwd(const rt__kargs *a)
{
    const int64_t HW = rt__gap_cp(a->nd)->HW, C = rt__gap_cp(a->nd)->C;
    for (int64_t s = 0; s < a->r->n; s++)
        for (int64_t c = 0; c < C; c++) {
            double acc = 0;
            for (int64_t i = 0; i < HW; i++)
                acc += a->x[0][(s * HW + i) * C + c];
            a->y[s * C + c] = (float)(acc / (double)HW);
        }
}

void rt_ref_gap_bwd(const rt__kargs *a)
{
    if (!a->dx[0])
        return;
    const int64_t HW = rt__gap_cp(a->nd)->HW, C = rt__gap_cp(a->nd)->C;
    for (int64_t s = 0; s < a->r->n; s++)
        for (int64_t i = 0; i < HW; i++)
            for (int64_t c = 0; c < C; c++)
                rt_ref_put(a, 0, (s * HW + i) * C + c, a->dy[s * C + c] / (double)HW);
}

static int64_t rt_ref_gmp_arg(const rt__kargs *a, int64_t s, int64_t c)
{
    const int64_t HW = rt__gap_cp(a->nd)->HW, C = rt__gap_cp(a->nd)->C;
    int64_t best = s * HW * C + c;
    for (int64_t i = 1; i < HW; i++)
        if (a->x[0][(s * HW + i) * C + c] > a->x[0][best])
            best = (s * HW + i) * C + c;
    return best;
}

void rt_ref_gmp_fwd(const rt__kargs *a)
{
    const int64_t C = rt__gap_cp(a->nd)->C;
    for (int64_t s = 0; s < a->r->n; s++)
        for (int64_t c = 0; c < C; c++)
            a->y[s * C + c] = a->x[0][rt_ref_gmp_arg(a, s, c)];
}

void rt_ref_gmp_bwd(const rt__kargs *a)
{
    if (!a->dx[0])
        return;
    const int64_t HW = rt__gap_cp(a->nd)->HW, C = rt__gap_cp(a->nd)->C;
    rt_ref_clear(a, 0, a->r->n * HW * C);
    for (int64_t s = 0; s < a->r->n; s++)
        for (int64_t c = 0; c < C; c++)
            a->dx[0][rt_ref_gmp_arg(a, s, c)] += a->dy[s * C + c];
}

/* -------------------------------------------------------------- BatchNorm */

/* Keras: a training forward (not frozen) normalises with the batch's mean
 * and biased variance over all rows, and a training step moves the moving
 * statistics (moving = momentum moving + (1 - momentum) batch; the
 * variance unbiased first where the op says so); otherwise the moving
 * statistics normalise. */
static int rt_ref_bn_batch(const rt__kargs *a)
{
    return a->r->training && !rt__bn_cp(a->nd)->frozen;
}

static void rt_ref_bn_stats(const rt__kargs *a, int64_t R, int64_t c, double *mean, double *var)
{
    const int64_t C = rt__bn_cp(a->nd)->C;
    if (!rt_ref_bn_batch(a)) {
        *mean = a->x[3][c];
        *var = a->x[4][c];
        return;
    }
    double s = 0, q = 0;
    for (int64_t r = 0; r < R; r++)
        s += a->x[0][r * C + c];
    *mean = s / (double)R;
    for (int64_t r = 0; r < R; r++) {
        const double d = a->x[0][r * C + c] - *mean;
        q += d * d;
    }
    *var = q / (double)R;
}

void rt_ref_batchnorm_fwd(const rt__kargs *a)
{
    const rt__bn_params *p = rt__bn_cp(a->nd);
    const int64_t C = p->C, R = rt__rows(a->nd->in_shape[0], a->r->n);
    /* BatchNorm synchronised over MPI replicas (a single process ignores
     * it): this backend does not sum statistics across replicas, so the
     * replica step fails with this message instead of training on each
     * replica's own statistics */
    if (rt_ref_bn_batch(a) && a->r->bn_sum && (p->sync || a->r->bn_sync_all) && a->r->bn_err &&
        !a->r->bn_err[0])
        snprintf(a->r->bn_err, a->r->bn_errlen,
                 "backend ref has no synchronised BatchNorm over MPI replicas; use backend cpu");
    for (int64_t c = 0; c < C; c++) {
        double mean, var;
        rt_ref_bn_stats(a, R, c, &mean, &var);
        if (rt_ref_bn_batch(a) && a->r->update_stats) {
            const double vs = p->unbiased && R > 1 ? (double)R / (double)(R - 1) : 1.0;
            a->x[3][c] = (float)(p->momentum * a->x[3][c] + (1 - p->momentum) * mean);
            a->x[4][c] = (float)(p->momentum * a->x[4][c] + (1 - p->momentum) * var * vs);
        }
        const double inv = 1 / sqrt(var + p->eps);
        for (int64_t r = 0; r < R; r++)
            a->y[r * C + c] = (float)((a->x[0][r * C + c] - mean) * inv * a->x[1][c] + a->x[2][c]);
    }
}

void rt_ref_batchnorm_bwd(const rt__kargs *a)
{
    const rt__bn_params *p = rt__bn_cp(a->nd);
    const int64_t C = p->C, R = rt__rows(a->nd->in_shape[0], a->r->n);
    const int batch = rt_ref_bn_batch(a);
    for (int64_t c = 0; c < C; c++) {
        double mean, var, sdy = 0, sdyxh = 0;
        rt_ref_bn_stats(a, R, c, &mean, &var);
        const double inv = 1 / sqrt(var + p->eps);
        for (int64_t r = 0; r < R; r++) {
            sdy += a->dy[r * C + c];
            sdyxh += a->dy[r * C + c] * (a->x[0][r * C + c] - mean) * inv;
        }
        if (a->dx[1])
            rt_ref_put(a, 1, c, sdyxh);
        if (a->dx[2])
            rt_ref_put(a, 2, c, sdy);
        if (!a->dx[0])
            continue;
        for (int64_t r = 0; r < R; r++) {
            const double xh = (a->x[0][r * C + c] - mean) * inv, dy = a->dy[r * C + c];
            const double g = batch ? dy - sdy / (double)R - xh * sdyxh / (double)R : dy;
            rt_ref_put(a, 0, r * C + c, a->x[1][c] * inv * g);
        }
    }
}

/* ----------------------------------------------------- LayerNormalization */

void rt_ref_layernorm_fwd(const rt__kargs *a)
{
    const rt__ln_params *p = rt__ln_cp(a->nd);
    const int64_t C = p->C, R = rt__rows(&a->nd->out, a->r->n);
    const float *gamma = p->scale ? a->x[1] : NULL;
    const float *beta = p->center ? a->x[p->scale ? 2 : 1] : NULL;
    for (int64_t r = 0; r < R; r++) {
        const float *x = a->x[0] + r * C;
        double m = 0, v = 0;
        for (int64_t j = 0; j < C; j++)
            m += x[j];
        m /= (double)C;
        for (int64_t j = 0; j < C; j++)
            v += (x[j] - m) * (x[j] - m);
        const double inv = 1 / sqrt(v / (double)C + p->eps);
        for (int64_t j = 0; j < C; j++)
            a->y[r * C + j] =
                (float)((x[j] - m) * inv * (gamma ? gamma[j] : 1.0) + (beta ? beta[j] : 0.0));
    }
}

void rt_ref_layernorm_bwd(const rt__kargs *a)
{
    const rt__ln_params *p = rt__ln_cp(a->nd);
    const int64_t C = p->C, R = rt__rows(&a->nd->out, a->r->n);
    const float *gamma = p->scale ? a->x[1] : NULL;
    const int ig = 1, ib = p->scale ? 2 : 1;
    if (p->scale && a->dx[ig])
        rt_ref_clear(a, ig, C);
    if (p->center && a->dx[ib])
        rt_ref_clear(a, ib, C);
    for (int64_t r = 0; r < R; r++) {
        const float *x = a->x[0] + r * C, *dy = a->dy + r * C;
        double m = 0, v = 0, sg = 0, sgx = 0;
        for (int64_t j = 0; j < C; j++)
            m += x[j];
        m /= (double)C;
        for (int64_t j = 0; j < C; j++)
            v += (x[j] - m) * (x[j] - m);
        const double inv = 1 / sqrt(v / (double)C + p->eps);
        /* g = dy * gamma: the gradient of the normalised row */
        for (int64_t j = 0; j < C; j++) {
            const double xh = (x[j] - m) * inv, g = dy[j] * (gamma ? gamma[j] : 1.0);
            sg += g;
            sgx += g * xh;
            if (p->scale && a->dx[ig])
                a->dx[ig][j] = (float)(a->dx[ig][j] + dy[j] * xh);
            if (p->center && a->dx[ib])
                a->dx[ib][j] = (float)(a->dx[ib][j] + dy[j]);
        }
        if (!a->dx[0])
            continue;
        for (int64_t j = 0; j < C; j++) {
            const double xh = (x[j] - m) * inv, g = dy[j] * (gamma ? gamma[j] : 1.0);
            rt_ref_put(a, 0, r * C + j, inv * (g - sg / (double)C - xh * sgx / (double)C));
        }
    }
}

/* --------------------------------------------------------------- Upsample */

/* output cell o's source along a dim of `in` cells scaled by s: nearest
 * (o / s), or bilinear with half-pixel centres clamped at 0 (lower cell,
 * upper cell, the upper's weight) */
static void rt_ref_up_src(const rt__upsample_params *p, int64_t o, int64_t s, int64_t in,
                          int64_t *lo, int64_t *hi, double *w)
{
    if (!p->bilinear) {
        *lo = *hi = o / s;
        *w = 0;
        return;
    }
    float src = ((float)o + 0.5f) / (float)s - 0.5f; /* the coordinate, as TF, in float */
    if (src < 0)
        src = 0;
    *lo = (int64_t)src < in - 1 ? (int64_t)src : in - 1;
    *hi = *lo + 1 < in ? *lo + 1 : in - 1;
    *w = src - (float)*lo;
}

void rt_ref_upsample_fwd(const rt__kargs *a)
{
    const rt__upsample_params *p = rt__upsample_cp(a->nd);
    const int64_t OH = p->H * p->SH, OW = p->W * p->SW, C = p->C;
    for (int64_t s = 0; s < a->r->n; s++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t h0, h1, w0, w1;
                double wh, ww;
                rt_ref_up_src(p, oh, p->SH, p->H, &h0, &h1, &wh);
                rt_ref_up_src(p, ow, p->SW, p->W, &w0, &w1, &ww);
                for (int64_t c = 0; c < C; c++) {
#define RT_REF_X(h, w) ((double)a->x[0][((s * p->H + (h)) * p->W + (w)) * C + c])
                    const double v =
                        (1 - wh) * ((1 - ww) * RT_REF_X(h0, w0) + ww * RT_REF_X(h0, w1)) +
                        wh * ((1 - ww) * RT_REF_X(h1, w0) + ww * RT_REF_X(h1, w1));
#undef RT_REF_X
                    a->y[((s * OH + oh) * OW + ow) * C + c] = (float)v;
                }
            }
}

void rt_ref_upsample_bwd(const rt__kargs *a)
{
    if (!a->dx[0])
        return;
    const rt__upsample_params *p = rt__upsample_cp(a->nd);
    const int64_t OH = p->H * p->SH, OW = p->W * p->SW, C = p->C;
    rt_ref_clear(a, 0, a->r->n * p->H * p->W * C);
    for (int64_t s = 0; s < a->r->n; s++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t h0, h1, w0, w1;
                double wh, ww;
                rt_ref_up_src(p, oh, p->SH, p->H, &h0, &h1, &wh);
                rt_ref_up_src(p, ow, p->SW, p->W, &w0, &w1, &ww);
                for (int64_t c = 0; c < C; c++) {
                    const double g = a->dy[((s * OH + oh) * OW + ow) * C + c];
#define RT_REF_DX(h, w, f)                                              \
    do {                                                                \
        float *d_ = &a->dx[0][((s * p->H + (h)) * p->W + (w)) * C + c]; \
        *d_ = (float)(*d_ + g * (f));                                   \
    } while (0)
                    RT_REF_DX(h0, w0, (1 - wh) * (1 - ww));
                    RT_REF_DX(h0, w1, (1 - wh) * ww);
                    RT_REF_DX(h1, w0, wh * (1 - ww));
                    RT_REF_DX(h1, w1, wh * ww);
#undef RT_REF_DX
                }
            }
}
