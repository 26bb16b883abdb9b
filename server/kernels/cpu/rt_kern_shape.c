/* rt_kern_shape.c - Pad/Transpose/Reduce* (one index map,
 * rt__map_params), Upsample, GlobalMaxPool and LayerNormalization. */
#include <math.h>
#include <string.h>

#include "cpu/rt_kern_bf16.h"
#include "cpu/rt_kern_cpu.h"

/* ------------------------------------------------------------ index maps */

/* Calls body(xo, yo, len, ys) for each run of landing input elements along
 * the last dim of one sample: input offset xo, output offset yo, len
 * elements, output stride ys between them. */
#define RT__MAP_RUNS(p, body)                                            \
    do {                                                                 \
        const int R_ = (p)->R > 0 ? (p)->R : 1;                          \
        int64_t d_[8], lo_[8], hi_[8], os_[8], is_[8], idx_[8];          \
        if ((p)->R > 0) {                                                \
            for (int i_ = 0; i_ < R_; i_++) {                            \
                d_[i_] = (p)->d[i_];                                     \
                lo_[i_] = (p)->lo[i_];                                   \
                hi_[i_] = (p)->hi[i_];                                   \
                os_[i_] = (p)->os[i_];                                   \
            }                                                            \
        } else {                                                         \
            d_[0] = hi_[0] = 1;                                          \
            lo_[0] = os_[0] = 0;                                         \
        }                                                                \
        int64_t st_ = 1;                                                 \
        for (int i_ = R_ - 1; i_ >= 0; i_--) {                           \
            is_[i_] = st_;                                               \
            st_ *= d_[i_];                                               \
        }                                                                \
        int empty_ = 0;                                                  \
        for (int i_ = 0; i_ < R_; i_++) {                                \
            idx_[i_] = lo_[i_];                                          \
            if (lo_[i_] >= hi_[i_])                                      \
                empty_ = 1;                                              \
        }                                                                \
        const int64_t len = hi_[R_ - 1] - lo_[R_ - 1], ys = os_[R_ - 1]; \
        while (!empty_) {                                                \
            int64_t xo = 0, yo = (p)->base;                              \
            for (int i_ = 0; i_ < R_; i_++) {                            \
                xo += idx_[i_] * is_[i_];                                \
                yo += idx_[i_] * os_[i_];                                \
            }                                                            \
            body;                                                        \
            int k_ = R_ - 2;                                             \
            for (; k_ >= 0; k_--) {                                      \
                if (++idx_[k_] < hi_[k_])                                \
                    break;                                               \
                idx_[k_] = lo_[k_];                                      \
            }                                                            \
            if (k_ < 0)                                                  \
                break;                                                   \
        }                                                                \
    } while (0)

/* ReduceMax/Min/Prod: each output the combination of its inputs */
static void rt__comb_fwd(const rt__map_params *p, const float *restrict x, float *restrict y)
{
    const float init = p->comb == RT__COMB_MAX   ? -INFINITY
                       : p->comb == RT__COMB_MIN ? INFINITY
                                                 : 1.0f;
    for (int64_t i = 0; i < p->out_numel; i++)
        y[i] = init;
    switch (p->comb) {
    case RT__COMB_MAX:
        RT__MAP_RUNS(p, {
            for (int64_t j = 0; j < len; j++)
                if (x[xo + j] > y[yo + j * ys] || isnan(x[xo + j]))
                    y[yo + j * ys] = x[xo + j];
        });
        break;
    case RT__COMB_MIN:
        RT__MAP_RUNS(p, {
            for (int64_t j = 0; j < len; j++)
                if (x[xo + j] < y[yo + j * ys] || isnan(x[xo + j]))
                    y[yo + j * ys] = x[xo + j];
        });
        break;
    default:
        RT__MAP_RUNS(p, {
            for (int64_t j = 0; j < len; j++)
                y[yo + j * ys] *= x[xo + j];
        });
        break;
    }
}

/* their gradients (TensorFlow's math_grad.py): Max/Min give dy to the
 * inputs equal to the output, split equally among ties (_MinOrMaxGrad);
 * Prod gives dy times the product of the other inputs (_ProdGrad), here
 * from the count of zeros and the product of the non-zero inputs, so an
 * input of 0 divides nothing. Scratch: the counts (Max/Min), or the zero
 * counts and products in double (Prod), one sample at a time. */
static void rt__comb_bwd(const rt__kargs *a, const rt__map_params *p, int64_t s, float *restrict dx,
                         int accum)
{
    const float *restrict x = a->x[0] + s * p->in_numel;
    const float *restrict y = a->y + s * p->out_numel;
    const float *restrict dy = a->dy + s * p->out_numel;
    const int64_t on = p->out_numel;
    if (p->comb != RT__COMB_PROD) {
        float *restrict cnt = a->scratch;
        memset(cnt, 0, sizeof(float) * (size_t)on);
        RT__MAP_RUNS(p, {
            for (int64_t j = 0; j < len; j++)
                cnt[yo + j * ys] += x[xo + j] == y[yo + j * ys] ? 1.0f : 0.0f;
        });
        RT__MAP_RUNS(p, {
            for (int64_t j = 0; j < len; j++) {
                const int64_t o = yo + j * ys;
                const float g = x[xo + j] == y[o] ? dy[o] / cnt[o] : 0.0f;
                dx[xo + j] = accum ? dx[xo + j] + g : g;
            }
        });
        return;
    }
    double *restrict zc = (double *)a->scratch, *restrict pnz = zc + on;
    for (int64_t i = 0; i < on; i++) {
        zc[i] = 0.0;
        pnz[i] = 1.0;
    }
    RT__MAP_RUNS(p, {
        for (int64_t j = 0; j < len; j++) {
            const double v = x[xo + j];
            if (v == 0.0)
                zc[yo + j * ys] += 1.0;
            else
                pnz[yo + j * ys] *= v;
        }
    });
    RT__MAP_RUNS(p, {
        for (int64_t j = 0; j < len; j++) {
            const int64_t o = yo + j * ys;
            const double v = x[xo + j];
            const double others =
                v != 0.0 ? (zc[o] == 0.0 ? pnz[o] / v : 0.0) : (zc[o] == 1.0 ? pnz[o] : 0.0);
            const float g = (float)(dy[o] * others);
            dx[xo + j] = accum ? dx[xo + j] + g : g;
        }
    });
}

int rt_kern_map_prepare(rt__node *nd, int64_t B, rt__arena *A)
{
    (void)B;
    (void)A;
    const rt__map_params *p = rt__map_cp(nd);
    nd->scratch_floats = p->comb == RT__COMB_PROD ? 4 * p->out_numel : p->comb ? p->out_numel : 0;
    return 0;
}

void rt_kern_map_fwd(const rt__kargs *a)
{
    const rt__map_params *p = rt__map_cp(a->nd);
    const int64_t n = a->r->n;
    const float sc = p->scale;
    for (int64_t s = 0; s < n; s++) {
        const float *restrict x = a->x[0] + s * p->in_numel;
        float *restrict y = a->y + s * p->out_numel;
        if (p->comb) {
            rt__comb_fwd(p, x, y);
            continue;
        }
        if (p->reduce)
            memset(y, 0, sizeof(float) * (size_t)p->out_numel);
        else if (p->fill)
            for (int64_t i = 0; i < p->out_numel; i++)
                y[i] = p->value;
        if (p->reduce) {
            RT__MAP_RUNS(p, {
                for (int64_t j = 0; j < len; j++)
                    y[yo + j * ys] += x[xo + j];
            });
            if (sc != 1.0f)
                for (int64_t i = 0; i < p->out_numel; i++)
                    y[i] *= sc;
        } else {
            RT__MAP_RUNS(p, {
                for (int64_t j = 0; j < len; j++)
                    y[yo + j * ys] = x[xo + j];
            });
        }
    }
}

void rt_kern_map_bwd(const rt__kargs *a)
{
    float *dxa = a->dx[0];
    if (!dxa)
        return;
    const rt__map_params *p = rt__map_cp(a->nd);
    const int64_t n = a->r->n;
    const int accum = a->accum & 1u;
    const float sc = p->reduce ? p->scale : 1.0f;
    /* Pad's cropped inputs get no gradient */
    int cropped = 0;
    for (int i = 0; i < p->R; i++)
        cropped |= p->lo[i] > 0 || p->hi[i] < p->d[i];
    for (int64_t s = 0; s < n; s++) {
        float *restrict dx = dxa + s * p->in_numel;
        const float *restrict dy = a->dy + s * p->out_numel;
        if (p->comb) {
            rt__comb_bwd(a, p, s, dx, accum);
            continue;
        }
        if (cropped && !accum)
            memset(dx, 0, sizeof(float) * (size_t)p->in_numel);
        if (accum)
            RT__MAP_RUNS(p, {
                for (int64_t j = 0; j < len; j++)
                    dx[xo + j] += sc * dy[yo + j * ys];
            });
        else
            RT__MAP_RUNS(p, {
                for (int64_t j = 0; j < len; j++)
                    dx[xo + j] = sc * dy[yo + j * ys];
            });
    }
}

/* ------------------------------------------------------- Pad on bf16 */

/* samples of fewer values than this in all run on one thread */
#define RT__PAD_PAR (INT64_C(1) << 16)

/* one sample of Pad with x and/or y stored bf16 (bx, by): the fill value
 * (fill16 its bf16) where the output gets one, then each landing run
 * copied: 2-byte values where both sides are bf16, else widened or
 * rounded as the float32 kernel's copy would be rounded. A Pad's runs
 * land contiguously (its output's last dim has stride 1; a sample of
 * rank 0 is one run of one value). */
static void rt__pad_smp(const rt__map_params *p, const void *xs, int bx, void *ys_, int by,
                        uint16_t fill16)
{
    RT_ASSERT(p->R == 0 || p->os[p->R - 1] == 1);
    if (!by) {
        float *restrict y = ys_;
        const uint16_t *restrict x = xs;
        if (p->fill)
            for (int64_t i = 0; i < p->out_numel; i++)
                y[i] = p->value;
        RT__MAP_RUNS(p, {
            (void)ys;
            rt_kern_from_bf16_serial(y + yo, x + xo, len);
        });
        return;
    }
    uint16_t *restrict y = ys_;
    if (p->fill)
        for (int64_t i = 0; i < p->out_numel; i++)
            y[i] = fill16;
    if (bx) {
        const uint16_t *restrict x = xs;
        RT__MAP_RUNS(p, {
            (void)ys;
            memcpy(y + yo, x + xo, sizeof(uint16_t) * (size_t)len);
        });
    } else {
        const float *restrict x = xs;
        RT__MAP_RUNS(p, {
            (void)ys;
            rt_kern_to_bf16_serial(y + yo, x + xo, len);
        });
    }
}

void rt_kern_pad_bf16_fwd(const rt__kargs *a)
{
    const rt__map_params *p = rt__map_cp(a->nd);
    const int64_t n = a->r->n;
    const int bx = (a->nd->bf16_in & 1u) != 0, by = a->nd->bf16_out != 0;
    if (!bx && !by) {
        rt_kern_map_fwd(a);
        return;
    }
    uint16_t fill16;
    rt_kern_to_bf16_serial(&fill16, &p->value, 1);
    const size_t xb = bx ? sizeof(uint16_t) : sizeof(float);
    const size_t yb = by ? sizeof(uint16_t) : sizeof(float);
#pragma omp parallel for schedule(static) if (n * p->out_numel >= RT__PAD_PAR)
    for (int64_t s = 0; s < n; s++)
        rt__pad_smp(p, (const char *)a->x[0] + (size_t)(s * p->in_numel) * xb, bx,
                    (char *)a->y + (size_t)(s * p->out_numel) * yb, by, fill16);
}

/* dx (+)= dy's landing values: the float32 kernel's per-sample loop
 * (rt_kern_map_bwd), the samples over the threads where large */
void rt_kern_pad_bf16_bwd(const rt__kargs *a)
{
    const rt__map_params *p = rt__map_cp(a->nd);
    const int64_t n = a->r->n;
    if (!a->dx[0])
        return;
    if (n * p->out_numel < RT__PAD_PAR) {
        rt_kern_map_bwd(a);
        return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t s = 0; s < n; s++) {
        rt__run r1 = *a->r;
        r1.n = 1;
        rt__kargs c = *a;
        c.r = &r1;
        c.x[0] = NULL; /* unread by Pad */
        c.dx[0] = a->dx[0] + s * p->in_numel;
        c.dy = a->dy + s * p->out_numel;
        rt_kern_map_bwd(&c);
    }
}

/* --------------------------------------------------------------- Upsample */

/* bilinear source of output cell o: lower cell, upper cell, weight of the
 * upper; half-pixel centres clamped at 0, as torch and tf.image.resize */
static inline void rt__lin_src(int64_t o, int64_t s, int64_t in, int64_t *lo, int64_t *hi, float *w)
{
    float src = ((float)o + 0.5f) / (float)s - 0.5f;
    if (src < 0.0f)
        src = 0.0f;
    int64_t l = (int64_t)src;
    if (l > in - 1)
        l = in - 1;
    *lo = l;
    *hi = l + 1 < in ? l + 1 : in - 1;
    *w = src - (float)l;
}

void rt_kern_upsample_fwd(const rt__kargs *a)
{
    const rt__upsample_params *p = rt__upsample_cp(a->nd);
    const int64_t n = a->r->n, H = p->H, W = p->W, C = p->C;
    const int64_t OH = H * p->SH, OW = W * p->SW;
    for (int64_t s = 0; s < n; s++) {
        const float *x = a->x[0] + s * H * W * C;
        float *y = a->y + s * OH * OW * C;
        for (int64_t oh = 0; oh < OH; oh++) {
            for (int64_t ow = 0; ow < OW; ow++) {
                float *restrict yc = y + (oh * OW + ow) * C;
                if (!p->bilinear) {
                    memcpy(yc, x + ((oh / p->SH) * W + ow / p->SW) * C, sizeof(float) * (size_t)C);
                    continue;
                }
                int64_t h0, h1, w0, w1;
                float fh, fw;
                rt__lin_src(oh, p->SH, H, &h0, &h1, &fh);
                rt__lin_src(ow, p->SW, W, &w0, &w1, &fw);
                const float *restrict a00 = x + (h0 * W + w0) * C, *restrict a01 =
                                                                       x + (h0 * W + w1) * C;
                const float *restrict a10 = x + (h1 * W + w0) * C, *restrict a11 =
                                                                       x + (h1 * W + w1) * C;
                for (int64_t c = 0; c < C; c++)
                    yc[c] = (1.0f - fh) * ((1.0f - fw) * a00[c] + fw * a01[c]) +
                            fh * ((1.0f - fw) * a10[c] + fw * a11[c]);
            }
        }
    }
}

void rt_kern_upsample_bwd(const rt__kargs *a)
{
    if (!a->dx[0])
        return;
    const rt__upsample_params *p = rt__upsample_cp(a->nd);
    const int64_t n = a->r->n, H = p->H, W = p->W, C = p->C;
    const int64_t OH = H * p->SH, OW = W * p->SW;
    if (!(a->accum & 1u))
        memset(a->dx[0], 0, sizeof(float) * (size_t)(n * H * W * C));
    for (int64_t s = 0; s < n; s++) {
        float *dx = a->dx[0] + s * H * W * C;
        const float *dy = a->dy + s * OH * OW * C;
        for (int64_t oh = 0; oh < OH; oh++) {
            for (int64_t ow = 0; ow < OW; ow++) {
                const float *restrict g = dy + (oh * OW + ow) * C;
                if (!p->bilinear) {
                    float *restrict d = dx + ((oh / p->SH) * W + ow / p->SW) * C;
                    for (int64_t c = 0; c < C; c++)
                        d[c] += g[c];
                    continue;
                }
                int64_t h0, h1, w0, w1;
                float fh, fw;
                rt__lin_src(oh, p->SH, H, &h0, &h1, &fh);
                rt__lin_src(ow, p->SW, W, &w0, &w1, &fw);
                const float c00 = (1.0f - fh) * (1.0f - fw), c01 = (1.0f - fh) * fw;
                const float c10 = fh * (1.0f - fw), c11 = fh * fw;
                float *d00 = dx + (h0 * W + w0) * C, *d01 = dx + (h0 * W + w1) * C;
                float *d10 = dx + (h1 * W + w0) * C, *d11 = dx + (h1 * W + w1) * C;
                for (int64_t c = 0; c < C; c++) {
                    d00[c] += c00 * g[c];
                    d01[c] += c01 * g[c];
                    d10[c] += c10 * g[c];
                    d11[c] += c11 * g[c];
                }
            }
        }
    }
}

/* ---------------------------------------------------------- GlobalMaxPool */

void rt_kern_gmp_fwd(const rt__kargs *a)
{
    const rt__gap_params *p = rt__gap_cp(a->nd);
    const int64_t n = a->r->n, HW = p->HW, C = p->C;
    for (int64_t s = 0; s < n; s++) {
        const float *x = a->x[0] + s * HW * C;
        float *restrict y = a->y + s * C;
        memcpy(y, x, sizeof(float) * (size_t)C);
        for (int64_t i = 1; i < HW; i++) {
            const float *restrict r = x + i * C;
            for (int64_t c = 0; c < C; c++)
                y[c] = r[c] > y[c] ? r[c] : y[c];
        }
    }
}

void rt_kern_gmp_bwd(const rt__kargs *a)
{
    if (!a->dx[0])
        return;
    const rt__gap_params *p = rt__gap_cp(a->nd);
    const int64_t n = a->r->n, HW = p->HW, C = p->C;
    if (!(a->accum & 1u))
        memset(a->dx[0], 0, sizeof(float) * (size_t)(n * HW * C));
    for (int64_t s = 0; s < n; s++) {
        const float *x = a->x[0] + s * HW * C;
        float *dx = a->dx[0] + s * HW * C;
        for (int64_t c = 0; c < C; c++) {
            int64_t best = 0;
            for (int64_t i = 1; i < HW; i++)
                if (x[i * C + c] > x[best * C + c])
                    best = i;
            dx[best * C + c] += a->dy[s * C + c];
        }
    }
}

/* ----------------------------------------------------- LayerNormalization */

/* mean and 1/sqrt(var + eps) of one row, in double */
static inline void rt__ln_stats(const float *x, int64_t C, double eps, double *mu, double *rs)
{
    double m = 0, v = 0;
    for (int64_t c = 0; c < C; c++)
        m += x[c];
    m /= (double)C;
    for (int64_t c = 0; c < C; c++)
        v += ((double)x[c] - m) * ((double)x[c] - m);
    v /= (double)C;
    *mu = m;
    *rs = 1.0 / sqrt(v + eps);
}

void rt_kern_layernorm_fwd(const rt__kargs *a)
{
    const rt__ln_params *p = rt__ln_cp(a->nd);
    const int64_t C = p->C, rows = rt__rows(&a->nd->out, a->r->n);
    const float *gamma = p->scale ? a->x[1] : NULL;
    const float *beta = p->center ? a->x[1 + p->scale] : NULL;
    for (int64_t r = 0; r < rows; r++) {
        const float *restrict x = a->x[0] + r * C;
        float *restrict y = a->y + r * C;
        double mu, rs;
        rt__ln_stats(x, C, p->eps, &mu, &rs);
        for (int64_t c = 0; c < C; c++) {
            float v = (float)(((double)x[c] - mu) * rs);
            if (gamma)
                v *= gamma[c];
            if (beta)
                v += beta[c];
            y[c] = v;
        }
    }
}

void rt_kern_layernorm_bwd(const rt__kargs *a)
{
    const rt__ln_params *p = rt__ln_cp(a->nd);
    const int64_t C = p->C, rows = rt__rows(&a->nd->out, a->r->n);
    const float *gamma = p->scale ? a->x[1] : NULL;
    float *dx = a->dx[0];
    float *dg = p->scale ? a->dx[1] : NULL;
    float *db = p->center ? a->dx[1 + p->scale] : NULL;
    const int bg = 1, bb = 1 + p->scale;
    if (dg && !((a->accum >> bg) & 1u))
        memset(dg, 0, sizeof(float) * (size_t)C);
    if (db && !((a->accum >> bb) & 1u))
        memset(db, 0, sizeof(float) * (size_t)C);
    for (int64_t r = 0; r < rows; r++) {
        const float *restrict x = a->x[0] + r * C;
        const float *restrict dy = a->dy + r * C;
        double mu, rs, s1 = 0, s2 = 0;
        rt__ln_stats(x, C, p->eps, &mu, &rs);
        for (int64_t c = 0; c < C; c++) {
            const double xh = ((double)x[c] - mu) * rs;
            const double g = (double)dy[c] * (gamma ? gamma[c] : 1.0f);
            s1 += g;
            s2 += g * xh;
            if (dg)
                dg[c] += (float)((double)dy[c] * xh);
            if (db)
                db[c] += dy[c];
        }
        if (!dx)
            continue;
        s1 /= (double)C;
        s2 /= (double)C;
        float *restrict d = dx + r * C;
        for (int64_t c = 0; c < C; c++) {
            const double xh = ((double)x[c] - mu) * rs;
            const double g = (double)dy[c] * (gamma ? gamma[c] : 1.0f);
            const float v = (float)(rs * (g - s1 - xh * s2));
            d[c] = (a->accum & 1u) ? d[c] + v : v;
        }
    }
}
