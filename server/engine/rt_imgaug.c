/*
 * rt_imgaug.c - the kernels of the random image ops (op_image.c), which
 * both backends' tables name: they are the ops' definition (the sampling
 * of TensorFlow's ImageProjectiveTransformV3, which Keras' layers call),
 * in plain C99 loops with sums in double, so the CPU backend and the
 * reference run the same arithmetic and draw the same transforms.
 *
 * Not training: y = x, dx = dy. Training: sample s draws u_k =
 * rt__rng_unit(seed, RT__STREAM_DROPOUT + node, step << 36 | 4 s + k), so
 * a step's transforms are a function of (seed, step, sample) as dropout's
 * masks are: the same on every backend, across save/load and resume.
 *
 * Geometric ops: output pixel (y, x) of sample s reads the input at
 * (y', x') = the sample's affine map of (y, x) (Keras' matrices:
 * get_rotation_matrix, get_translation_matrix, get_zoom_matrix in
 * keras/layers/preprocessing/image_preprocessing.py), each coordinate
 * folded into [0, len - 1] by the fill mode as TensorFlow's MapCoordinate
 * (tensorflow/core/kernels/image/image_ops.h): reflect (d c b a | a b c d
 * | d c b a), wrap, nearest (clamped); constant leaves it, and a point
 * outside [0, len - 1] on either axis is fill_value. Bilinear weighs the
 * four pixels around the point, nearest takes round() (half away from
 * zero). The backward is the exact adjoint: dy scattered to the taps
 * with the same weights.
 *
 * RandomCrop changes the shape (H, W) -> (oH, oW) in every mode: in
 * training, with H >= oH and W >= oW, sample s's window starts at row
 * floor(u_0 (H - oH + 1)), column floor(u_1 (W - oW + 1)) (Keras 2:
 * rand % (h_diff + 1)); otherwise the smart_resize box (op_image.c) is
 * resized as TensorFlow's ResizeBilinear with half_pixel_centers: output
 * row i reads box row v = (i + 0.5) ch / oH - 0.5 as rows max(floor(v), 0)
 * and min(ceil(v), ch - 1) weighed 1 - (v - floor(v)) and v - floor(v)
 * (tensorflow/core/kernels/image/resize_bilinear_op.cc,
 * compute_interpolation_weights), columns alike. The backward scatters dy
 * to the same taps.
 */
#include <math.h>
#include <string.h>

#include "rt_engine_impl.h"

static float rt__img_u(const rt__kargs *a, int64_t s, int k)
{
    const uint64_t ctr = ((uint64_t)a->r->step << 36) | (uint64_t)(4 * s + k);
    return rt__rng_unit(a->r->seed, RT__STREAM_DROPOUT + (uint64_t)a->nd->id, ctr);
}

/* uniform in [lo, hi) from u, as TensorFlow's random_uniform(minval, maxval) */
static float rt__img_uni(double lo, double hi, float u)
{
    return (float)lo + ((float)hi - (float)lo) * u;
}

/* sample s's draws: its affine map m (input point of output (y, x)), its
 * flips, or its contrast factor / brightness delta in *f */
typedef struct rt__img_draw {
    float m[6];
    int fh, fv;
    float f;
} rt__img_draw;

static void rt__img_draw_s(const rt__kargs *a, const rt__image_params *p, int64_t s,
                           rt__img_draw *d)
{
    const float W1 = (float)(p->W - 1), H1 = (float)(p->H - 1);
    memset(d, 0, sizeof *d);
    switch (p->kind) {
    case RT__IMG_FLIP:
        /* Keras 2: tf.image.random_flip_left_right then _up_down, each
         * flips with probability 1/2; Keras 3.6+: one draw for both */
        d->fh = p->flip_h && rt__img_u(a, s, 0) < 0.5f;
        d->fv = p->flip_v && rt__img_u(a, s, p->joint ? 0 : 1) < 0.5f;
        break;
    case RT__IMG_ROTATE: {
        const float t = rt__img_uni(p->lo[0] * 6.283185307179586, p->hi[0] * 6.283185307179586,
                                    rt__img_u(a, s, 0));
        const float c = cosf(t), sn = sinf(t);
        const float m[6] = {c,  -sn, (W1 - (c * W1 - sn * H1)) / 2.0f,
                            sn, c,   (H1 - (sn * W1 + c * H1)) / 2.0f};
        memcpy(d->m, m, sizeof m);
        break;
    }
    case RT__IMG_TRANSLATE: {
        const float dy = rt__img_uni(p->lo[0], p->hi[0], rt__img_u(a, s, 0)) * (float)p->H;
        const float dx = rt__img_uni(p->lo[1], p->hi[1], rt__img_u(a, s, 1)) * (float)p->W;
        const float m[6] = {1, 0, -dx, 0, 1, -dy};
        memcpy(d->m, m, sizeof m);
        break;
    }
    case RT__IMG_ZOOM: {
        const float zy = rt__img_uni(1.0 + p->lo[0], 1.0 + p->hi[0], rt__img_u(a, s, 0));
        const float zx =
            p->same ? zy : rt__img_uni(1.0 + p->lo[1], 1.0 + p->hi[1], rt__img_u(a, s, 1));
        const float m[6] = {zx, 0, W1 / 2.0f * (1.0f - zx), 0, zy, H1 / 2.0f * (1.0f - zy)};
        memcpy(d->m, m, sizeof m);
        break;
    }
    case RT__IMG_CONTRAST:
        d->f = rt__img_uni(1.0 - p->lo[0], 1.0 + p->hi[0], rt__img_u(a, s, 0));
        break;
    default:
        d->f = rt__img_uni(p->lo[0], p->hi[0], rt__img_u(a, s, 0)) * (float)(p->v1 - p->v0);
        break;
    }
}

/* one input coordinate folded into [0, len - 1] by the fill mode
 * (constant: unchanged), TensorFlow's MapCoordinate */
static float rt__img_map(float v, int64_t len, int fill)
{
    if (fill == RT__FILL_CONSTANT)
        return v;
    const float last = (float)(len - 1);
    if (len <= 1)
        return 0.0f;
    if (fill == RT__FILL_REFLECT) {
        const int64_t sz2 = 2 * len;
        if (v < 0) {
            if (v < (float)sz2)
                v = (float)sz2 * (float)(int64_t)(-v / (float)sz2) + v;
            v = v < (float)-len ? v + (float)sz2 : -v - 1.0f;
        } else if (v > last) {
            v -= (float)sz2 * (float)(int64_t)(v / (float)sz2);
            if (v >= (float)len)
                v = (float)sz2 - v - 1.0f;
        }
    } else if (fill == RT__FILL_WRAP) {
        const int64_t sz = len - 1;
        if (v < 0)
            v += (float)len * (float)((int64_t)(-v / (float)sz) + 1);
        else if (v > last)
            v -= (float)len * (float)(int64_t)(v / (float)sz);
    }
    return v < 0 ? 0.0f : v > last ? last : v;
}

/* output pixel (y, x)'s taps: pixel indices (y * W + x) and weights; 0
 * taps: the pixel is fill_value */
static int rt__img_taps(const rt__image_params *p, const float *m, int64_t y, int64_t x,
                        int64_t idx[4], float w[4])
{
    const float fx = (float)x, fy = (float)y;
    const float ix = rt__img_map(m[0] * fx + m[1] * fy + m[2], p->W, p->fill);
    const float iy = rt__img_map(m[3] * fx + m[4] * fy + m[5], p->H, p->fill);
    if (!(ix >= 0 && ix <= (float)(p->W - 1) && iy >= 0 && iy <= (float)(p->H - 1)))
        return 0;
    if (!p->bilinear) {
        idx[0] = (int64_t)roundf(iy) * p->W + (int64_t)roundf(ix);
        w[0] = 1.0f;
        return 1;
    }
    const float x0 = floorf(ix), y0 = floorf(iy);
    const int64_t xi = (int64_t)x0, yi = (int64_t)y0;
    const float wx1 = ix - x0, wx0 = x0 + 1.0f - ix, wy1 = iy - y0, wy0 = y0 + 1.0f - iy;
    int n = 0;
    /* a tap past the last row or column has weight 0 (the point is on
     * the edge): TensorFlow reads fill_value there, times 0 */
    const int xok = xi + 1 < p->W, yok = yi + 1 < p->H;
    idx[n] = yi * p->W + xi, w[n++] = wy0 * wx0;
    if (xok)
        idx[n] = yi * p->W + xi + 1, w[n++] = wy0 * wx1;
    if (yok)
        idx[n] = (yi + 1) * p->W + xi, w[n++] = wy1 * wx0;
    if (xok && yok)
        idx[n] = (yi + 1) * p->W + xi + 1, w[n++] = wy1 * wx1;
    return n;
}

/* RandomCrop: output row (or column) i's two input rows (columns) and
 * the second's weight, for sample s; len, olen, box, start: the axis' input,
 * output and box lengths and the box's start */
typedef struct rt__crop_tap {
    int64_t lo, hi;
    float w;
} rt__crop_tap;

static rt__crop_tap rt__crop_axis(const rt__kargs *a, const rt__image_params *p, int64_t s,
                                  int axis, int64_t i)
{
    const int64_t len = axis ? p->W : p->H, olen = axis ? p->oW : p->oH;
    rt__crop_tap t;
    if (a->r->training && p->rnd) {
        const int64_t room = len - olen;
        int64_t o = (int64_t)(rt__img_u(a, s, axis) * (float)(room + 1));
        o = o > room ? room : o;
        t.lo = t.hi = o + i;
        t.w = 0.0f;
        return t;
    }
    const int64_t box = axis ? p->cw : p->ch, start = axis ? p->w0 : p->h0;
    const float v = ((float)i + 0.5f) * ((float)box / (float)olen) - 0.5f, f = floorf(v);
    const int64_t lo = (int64_t)f, hi = (int64_t)ceilf(v);
    t.lo = start + (lo < 0 ? 0 : lo);
    t.hi = start + (hi > box - 1 ? box - 1 : hi);
    t.w = v - f;
    return t;
}

/* RandomCrop's output pixel (i, j) of sample s: its taps (input pixel
 * indices) and weights, weight-0 taps left out; the count */
static int rt__crop_taps(const rt__kargs *a, const rt__image_params *p, int64_t s,
                         const rt__crop_tap *r, int64_t j, int64_t idx[4], float w[4])
{
    const rt__crop_tap c = rt__crop_axis(a, p, s, 1, j);
    const int64_t rows[2] = {r->lo, r->hi}, cols[2] = {c.lo, c.hi};
    const float wr[2] = {1.0f - r->w, r->w}, wc[2] = {1.0f - c.w, c.w};
    int n = 0;
    for (int u = 0; u < 2; u++)
        for (int v = 0; v < 2; v++)
            if (wr[u] * wc[v] != 0.0f) {
                idx[n] = rows[u] * p->W + cols[v];
                w[n++] = wr[u] * wc[v];
            }
    return n;
}

/* RandomCrop's forward (bwd 0: y from x) or backward (bwd 1: dy added
 * into dx at the same taps, dx zeroed or accumulating before) */
static void rt__crop_run(const rt__kargs *a, const rt__image_params *p, int bwd)
{
    const int64_t C = p->C, per = p->H * p->W * C, oper = p->oH * p->oW * C;
    for (int64_t s = 0; s < a->r->n; s++) {
        const float *x = bwd ? NULL : a->x[0] + s * per;
        float *g = bwd ? a->dx[0] + s * per : NULL;
        for (int64_t i = 0; i < p->oH; i++) {
            const rt__crop_tap r = rt__crop_axis(a, p, s, 0, i);
            for (int64_t j = 0; j < p->oW; j++) {
                int64_t idx[4];
                float w[4];
                const int nt = rt__crop_taps(a, p, s, &r, j, idx, w);
                const int64_t o = s * oper + (i * p->oW + j) * C;
                for (int64_t c = 0; c < C; c++) {
                    if (bwd) {
                        for (int k = 0; k < nt; k++)
                            g[idx[k] * C + c] += w[k] * a->dy[o + c];
                        continue;
                    }
                    double v = 0;
                    for (int k = 0; k < nt; k++)
                        v += (double)w[k] * x[idx[k] * C + c];
                    a->y[o + c] = (float)v;
                }
            }
        }
    }
}

/* contrast: channel c's mean over the sample's pixels */
static double rt__img_mean(const rt__image_params *p, const float *x, int64_t c)
{
    double sum = 0;
    const int64_t HW = p->H * p->W;
    for (int64_t i = 0; i < HW; i++)
        sum += x[i * p->C + c];
    return sum / (double)HW;
}

void rt__imgaug_fwd(const rt__kargs *a)
{
    const rt__image_params *p = rt__image_cp(a->nd);
    const int64_t per = p->H * p->W * p->C, n = a->r->n;
    if (p->kind == RT__IMG_CROP) {
        rt__crop_run(a, p, 0);
        return;
    }
    if (!a->r->training) {
        if (a->y != a->x[0])
            memcpy(a->y, a->x[0], sizeof(float) * (size_t)(n * per));
        return;
    }
    const int64_t H = p->H, W = p->W, C = p->C;
    for (int64_t s = 0; s < n; s++) {
        const float *x = a->x[0] + s * per;
        float *y = a->y + s * per;
        rt__img_draw d;
        rt__img_draw_s(a, p, s, &d);
        if (p->kind == RT__IMG_FLIP) {
            for (int64_t i = 0; i < H; i++)
                for (int64_t j = 0; j < W; j++)
                    memcpy(y + (i * W + j) * C,
                           x + ((d.fv ? H - 1 - i : i) * W + (d.fh ? W - 1 - j : j)) * C,
                           sizeof(float) * (size_t)C);
        } else if (p->kind == RT__IMG_CONTRAST || p->kind == RT__IMG_BRIGHT) {
            const float lo = (float)p->v0, hi = (float)p->v1;
            for (int64_t c = 0; c < C; c++) {
                const float mu = p->kind == RT__IMG_CONTRAST ? (float)rt__img_mean(p, x, c) : 0;
                for (int64_t i = c; i < per; i += C) {
                    const float t =
                        p->kind == RT__IMG_CONTRAST ? (x[i] - mu) * d.f + mu : x[i] + d.f;
                    y[i] = t < lo ? lo : t > hi ? hi : t;
                }
            }
        } else {
            const float fv = (float)p->fill_value;
            for (int64_t i = 0; i < H; i++)
                for (int64_t j = 0; j < W; j++) {
                    int64_t idx[4];
                    float w[4];
                    const int nt = rt__img_taps(p, d.m, i, j, idx, w);
                    float *o = y + (i * W + j) * C;
                    for (int64_t c = 0; c < C; c++) {
                        double v = nt ? 0.0 : fv;
                        for (int k = 0; k < nt; k++)
                            v += (double)w[k] * x[idx[k] * C + c];
                        o[c] = (float)v;
                    }
                }
        }
    }
}

void rt__imgaug_bwd(const rt__kargs *a)
{
    float *dx = a->dx[0];
    if (!dx)
        return;
    const rt__image_params *p = rt__image_cp(a->nd);
    const int64_t per = p->H * p->W * p->C, n = a->r->n;
    const int acc = a->accum & 1u;
    if (p->kind == RT__IMG_CROP) {
        if (!acc)
            memset(dx, 0, sizeof(float) * (size_t)(n * per));
        rt__crop_run(a, p, 1);
        return;
    }
    if (!a->r->training) {
        for (int64_t i = 0; i < n * per; i++)
            dx[i] = acc ? dx[i] + a->dy[i] : a->dy[i];
        return;
    }
    const int64_t H = p->H, W = p->W, C = p->C;
    for (int64_t s = 0; s < n; s++) {
        const float *dy = a->dy + s * per;
        float *g = dx + s * per;
        rt__img_draw d;
        rt__img_draw_s(a, p, s, &d);
        if (p->kind == RT__IMG_FLIP) {
            /* a permutation: its adjoint reads back the same way */
            for (int64_t i = 0; i < H; i++)
                for (int64_t j = 0; j < W; j++) {
                    const float *src =
                        dy + ((d.fv ? H - 1 - i : i) * W + (d.fh ? W - 1 - j : j)) * C;
                    float *o = g + (i * W + j) * C;
                    for (int64_t c = 0; c < C; c++)
                        o[c] = acc ? o[c] + src[c] : src[c];
                }
        } else if (p->kind == RT__IMG_CONTRAST || p->kind == RT__IMG_BRIGHT) {
            /* the clip passes the gradient where lo <= t <= hi (as
             * tf.clip_by_value); contrast: t = f x + (1 - f) mean(x), so
             * dx = f g + (1 - f) mean(g) over the channel's pixels */
            const float *x = a->x[0] + s * per;
            const float lo = (float)p->v0, hi = (float)p->v1;
            const int64_t HW = H * W;
            for (int64_t c = 0; c < C; c++) {
                const int con = p->kind == RT__IMG_CONTRAST;
                const float mu = con ? (float)rt__img_mean(p, x, c) : 0;
                double gs = 0;
                for (int64_t i = c; i < per; i += C) {
                    const float t = con ? (x[i] - mu) * d.f + mu : x[i] + d.f;
                    gs += t >= lo && t <= hi ? dy[i] : 0.0f;
                }
                const float gm = con ? (float)((1.0 - (double)d.f) * gs / (double)HW) : 0;
                for (int64_t i = c; i < per; i += C) {
                    const float t = con ? (x[i] - mu) * d.f + mu : x[i] + d.f;
                    const float gi = t >= lo && t <= hi ? dy[i] : 0.0f;
                    const float v = con ? d.f * gi + gm : gi;
                    g[i] = acc ? g[i] + v : v;
                }
            }
        } else {
            if (!acc)
                memset(g, 0, sizeof(float) * (size_t)per);
            for (int64_t i = 0; i < H; i++)
                for (int64_t j = 0; j < W; j++) {
                    int64_t idx[4];
                    float w[4];
                    const int nt = rt__img_taps(p, d.m, i, j, idx, w);
                    const float *o = dy + (i * W + j) * C;
                    for (int k = 0; k < nt; k++)
                        for (int64_t c = 0; c < C; c++)
                            g[idx[k] * C + c] += w[k] * o[c];
                }
        }
    }
}
