/* rt_ref_step.c - the reference backend's step beyond the op kernels: the
 * batch gather, Keras' losses and metrics, regularizers and constraints,
 * clipping and the optimizers, each from its definition (formulas in
 * server/kernels/cpu/rt_kern_loss.c, rt_kern_optim.c, rt_kern_regular.c
 * and server/engine/rt_metrics.c), in double. Several outputs (n_heads)
 * run each head's loss on its part of the output and labels. */
#include <math.h>
#include <string.h>

#include "ref/rt_ref.h"

#define RT_REF_EPS 1e-7

/* Stored image px (H, W, C) with draws d into x, pixel by pixel from the
 * definition (rt_engine.h): output (y, x) reads the source pixel (y + dy,
 * x' + dx), x' = W - 1 - x when flipped, 0 outside the image; each
 * channel's contrast pivots on its mean over that cropped image, pads
 * included. The float operations are rt_aug_apply's, in its order, so the
 * two agree bit for bit. */
static void rt_ref_augment(const rt_augment *a, const rt_aug_draw *d, const uint8_t *px, float *x)
{
    const int H = a->h, W = a->w, C = a->c;
    const float k = 1.0f / 255.0f;
    for (int ch = 0; ch < C; ch++) {
        uint64_t sum = 0;
        for (int y = 0; y < H; y++)
            for (int xx = 0; xx < W; xx++) {
                const int sy = y + d->dy, sx = xx + d->dx;
                if (sy >= 0 && sy < H && sx >= 0 && sx < W)
                    sum += px[((size_t)sy * W + (size_t)sx) * C + (size_t)ch];
            }
        const float m = (float)((double)sum * k / ((double)H * W));
        const float inv = a->std[ch] != 0 ? 1.0f / a->std[ch] : 1.0f;
        for (int y = 0; y < H; y++)
            for (int xx = 0; xx < W; xx++) {
                const int sy = y + d->dy, sx = (d->flip ? W - 1 - xx : xx) + d->dx;
                const int v = sy >= 0 && sy < H && sx >= 0 && sx < W
                                  ? px[((size_t)sy * W + (size_t)sx) * C + (size_t)ch]
                                  : 0;
                float f = (float)v * k;
                if (d->contrast != 1.0f)
                    f = (f - m) * d->contrast + m;
                f += d->bright;
                f = f < 0 ? 0 : f > 1 ? 1 : f;
                x[((size_t)y * W + (size_t)xx) * C + (size_t)ch] = (f - a->mean[ch]) * inv;
            }
    }
}

void rt_ref_gather(void *ctx, const rt__gather_args *g)
{
    (void)ctx;
    for (int64_t i = 0; i < g->nb; i++) {
        const int64_t r = g->idx ? g->idx[i] : g->start + i;
        for (int64_t j = 0; j < g->in; j++)
            g->xb[i * g->in + j] = g->x[r * g->in + j];
        if (g->y)
            memcpy((char *)g->yb + i * g->ln * 4, (const char *)g->y + r * g->ln * 4,
                   (size_t)(g->ln * 4));
        if (g->aug) {
            const rt_augment *a = g->aug;
            const int64_t ib = (int64_t)a->h * a->w * a->c;
            rt_ref_augment(a, &g->draw[i], a->img + r * ib, g->xb + i * g->in + a->off);
        }
    }
}

/* ------------------------------------------------------------------ losses */

static double rt_ref_lab(const rt__lossinfo *L, const void *lab, int64_t i)
{
    return L->lab_dt == RT_I32 ? (double)((const int32_t *)lab)[i] : ((const float *)lab)[i];
}

static int64_t rt_ref_argmax(const float *x, int64_t C)
{
    int64_t b = 0;
    for (int64_t j = 1; j < C; j++)
        if (x[j] > x[b])
            b = j;
    return b;
}

/* the bounds as float32 holds them (Keras clips in the model's float32:
 * 1 - 1e-7 is 1 - 2^-23 there, which a saturated BCE reads) */
static double rt_ref_clip01(double p)
{
    const double lo = (float)RT_REF_EPS, hi = 1.0f - (float)RT_REF_EPS;
    return p < lo ? lo : p > hi ? hi : p;
}

/* the argmax of softmax(z) with each probability rounded to float, as
 * Keras takes it of the probabilities: the first of equal ones counts */
static int64_t rt_ref_argmax_softmax(const float *z, int64_t C)
{
    double m = z[0], s = 0;
    for (int64_t j = 1; j < C; j++)
        m = z[j] > m ? z[j] : m;
    for (int64_t j = 0; j < C; j++)
        s += exp(z[j] - m);
    int64_t b = 0;
    float pb = (float)(exp(z[0] - m) / s);
    for (int64_t j = 1; j < C; j++) {
        const float p = (float)(exp(z[j] - m) / s);
        if (p > pb)
            b = j, pb = p;
    }
    return b;
}

/* Keras' accuracy of output row z (C values) against its labels at lab_i:
 * binary (threshold 0.5, or 0 on logits) for one output value, else
 * categorical whatever the loss: the argmax (of the probabilities when the
 * Softmax was fused) against the class (sparse, or one label per row) or
 * against the labels' argmax */
static int rt_ref_row_acc(const rt__lossinfo *L, const float *z, const void *lab, int64_t lab_i)
{
    const int64_t C = L->classes;
    const int bc = L->lab_numel != L->out_numel;
    if (C == 1) {
        const double thr = L->from_logits ? 0.0 : 0.5;
        return (z[0] > thr) == (rt_ref_lab(L, lab, lab_i) > 0.5);
    }
    const int64_t a = L->softmax_fused ? rt_ref_argmax_softmax(z, C) : rt_ref_argmax(z, C);
    if (L->kind == RT_LOSS_SPARSE_CE || bc) {
        int64_t c = (int64_t)rt_ref_lab(L, lab, lab_i);
        c = c < 0 ? 0 : c >= C ? C - 1 : c;
        return a == c;
    }
    int64_t b = 0;
    for (int64_t j = 1; j < C; j++)
        if (rt_ref_lab(L, lab, lab_i + j) > rt_ref_lab(L, lab, lab_i + b))
            b = j;
    return a == b;
}

/* One row's loss; its gradient times s into dz when dz is not NULL. */
static double rt_ref_row_loss(const rt__lossinfo *L, const float *z, const void *lab, int64_t li,
                              float *dz, double s, int hinge01)
{
    const int64_t C = L->classes;
    const int bc = L->lab_numel != L->out_numel;
    double loss = 0;
    switch (L->kind) {
    case RT_LOSS_SPARSE_CE:
    case RT_LOSS_CE: {
        /* target distribution t: one-hot of the class, or the labels */
        int64_t cls = -1;
        if (L->kind == RT_LOSS_SPARSE_CE) {
            cls = (int64_t)rt_ref_lab(L, lab, li);
            cls = cls < 0 ? 0 : cls >= C ? C - 1 : cls;
        }
#define RT_REF_T(j) (cls >= 0 ? (double)((j) == cls) : rt_ref_lab(L, lab, li + (j)))
        if (L->from_logits) {
            double m = z[0], se = 0, ts = 0;
            for (int64_t j = 1; j < C; j++)
                m = z[j] > m ? z[j] : m;
            for (int64_t j = 0; j < C; j++)
                se += exp(z[j] - m);
            const double lse = m + log(se);
            for (int64_t j = 0; j < C; j++) {
                loss += RT_REF_T(j) * (lse - z[j]);
                ts += RT_REF_T(j);
            }
            if (dz)
                for (int64_t j = 0; j < C; j++)
                    dz[j] = (float)(s * (exp(z[j] - lse) * ts - RT_REF_T(j)));
        } else {
            /* probabilities: sparse clips each then normalises by their
             * sum; dense normalises first, then clips (Keras' TF backend) */
            double S = 0;
            for (int64_t j = 0; j < C; j++)
                S += L->kind == RT_LOSS_SPARSE_CE ? rt_ref_clip01(z[j]) : z[j];
            if (L->kind == RT_LOSS_SPARSE_CE) {
                const double ql = rt_ref_clip01(z[cls]);
                loss = -log(ql / S);
                if (dz)
                    for (int64_t j = 0; j < C; j++) {
                        const int in = z[j] >= (float)RT_REF_EPS && z[j] <= (float)(1 - RT_REF_EPS);
                        dz[j] = in ? (float)(s * (1 / S - (j == cls ? 1 / ql : 0))) : 0.0f;
                    }
            } else {
                double gu = 0;
                for (int64_t j = 0; j < C; j++) {
                    const double u = z[j] / S, q = rt_ref_clip01(u);
                    loss -= RT_REF_T(j) * log(q);
                    const int in =
                        (float)u >= (float)RT_REF_EPS && (float)u <= (float)(1 - RT_REF_EPS);
                    gu += in ? -RT_REF_T(j) / q * u : 0;
                }
                if (dz)
                    for (int64_t j = 0; j < C; j++) {
                        const double u = z[j] / S, q = rt_ref_clip01(u);
                        const int in =
                            (float)u >= (float)RT_REF_EPS && (float)u <= (float)(1 - RT_REF_EPS);
                        dz[j] = (float)(s * ((in ? -RT_REF_T(j) / q : 0) - gu) / S);
                    }
            }
        }
#undef RT_REF_T
        break;
    }
    default:
        /* elementwise: the mean over the row's C values */
        for (int64_t j = 0; j < C; j++) {
            const double p = z[j], y0 = rt_ref_lab(L, lab, bc ? li : li + j);
            /* hinge losses: {0, 1} labels as -1, 1 (rt_ref_loss_batch) */
            const double y = hinge01 ? 2 * y0 - 1 : y0;
            const double delta = L->beta > 0 ? L->beta : 1.0;
            double f, d;
            switch (L->kind) {
            case RT_LOSS_MSE:
                f = (p - y) * (p - y);
                d = 2 * (p - y);
                break;
            case RT_LOSS_MAE:
                f = fabs(p - y);
                d = (p > y) - (p < y);
                break;
            case RT_LOSS_BCE:
                if (L->from_logits) {
                    f = (p > 0 ? p : 0) - p * y + log1p(exp(-fabs(p)));
                    d = 1 / (1 + exp(-p)) - y;
                } else {
                    /* Keras 3: clipped to [eps, 1-eps], no eps in the logs */
                    const double q = rt_ref_clip01(p);
                    f = -(y * log(q) + (1 - y) * log(1 - q));
                    const int in =
                        (float)p >= (float)RT_REF_EPS && (float)p <= (float)(1 - RT_REF_EPS);
                    d = in ? -(y / q - (1 - y) / (1 - q)) : 0;
                }
                break;
            case RT_LOSS_HINGE:
                f = fmax(1 - y * p, 0);
                d = 1 - y * p > 0 ? -y : 0;
                break;
            case RT_LOSS_SQUARED_HINGE: {
                const double h = fmax(1 - y * p, 0);
                f = h * h;
                d = -2 * h * y;
                break;
            }
            case RT_LOSS_POISSON:
                f = p - y * log(p + RT_REF_EPS);
                d = 1 - y / (p + RT_REF_EPS);
                break;
            case RT_LOSS_KLD: {
                /* a sum over the last axis: C times the mean */
                const double yc = fmin(fmax(y, RT_REF_EPS), 1), q = fmin(fmax(p, RT_REF_EPS), 1);
                f = (double)C * yc * log(yc / q);
                d = (float)p >= (float)RT_REF_EPS && p <= 1 ? -(double)C * yc / q : 0;
                break;
            }
            case RT_LOSS_HUBER_KERAS: {
                const double e = p - y, a = fabs(e);
                f = a <= delta ? e * e / 2 : delta * a - delta * delta / 2;
                d = a <= delta ? e : e > 0 ? delta : -delta;
                break;
            }
            default: /* logcosh */
                f = log(cosh(p - y));
                if (!isfinite(f))
                    f = fabs(p - y) - log(2.0);
                d = tanh(p - y);
                break;
            }
            loss += f / (double)C;
            if (dz)
                dz[j] = (float)(s * d);
        }
        break;
    }
    return loss;
}

static void rt_ref_loss_batch(const rt__lossinfo *L, const float *y, const void *lab, int64_t n,
                              float *dy, double *loss_sum, double *acc_sum)
{
    const int64_t C = L->classes, R = L->rows;
    const int bc = L->lab_numel != L->out_numel;
    /* the batch mean of per-sample means over rows (elementwise losses
     * also over the row's values: their per-element gradient is 1/(n R C)) */
    const int elem = L->kind != RT_LOSS_SPARSE_CE && L->kind != RT_LOSS_CE;
    const double s = 1.0 / ((double)n * (double)R * (elem ? (double)C : 1.0));
    /* Keras' hinge losses read {0, 1} labels as -1, 1 when the whole batch
     * holds only 0 and 1 (convert_binary_labels_to_hinge) */
    int hinge01 = L->kind == RT_LOSS_HINGE || L->kind == RT_LOSS_SQUARED_HINGE;
    for (int64_t k = 0; hinge01 && k < n * L->lab_numel; k++) {
        const double v = rt_ref_lab(L, lab, k);
        hinge01 = v == 0 || v == 1;
    }
    for (int64_t i = 0; i < n; i++) {
        double sl = 0, sa = 0;
        for (int64_t r = 0; r < R; r++) {
            const int64_t row = i * R + r, li = bc ? row : row * C;
            sl += rt_ref_row_loss(L, y + row * C, lab, li, dy ? dy + row * C : NULL, s, hinge01);
            if (L->acc)
                sa += rt_ref_row_acc(L, y + row * C, lab, li);
        }
        *loss_sum += sl / (double)R;
        *acc_sum += sa / (double)R;
    }
}

/* ---------------------------------------------------------- PyTorch's losses */

/* One position of cross_entropy / nll_loss: the C class values z[c * S],
 * its target; its loss and weight (the mean's denominator share) into *l
 * and *w, its gradient (unscaled) into g[c * S]; returns whether it counts
 * (an ignored target does not: loss 0, weight 0, gradient 0) and sets *hit
 * when its argmax is the target. */
static int rt_ref_torch_pos(const rt__lossinfo *L, const float *z, int64_t S, const void *lab,
                            int64_t li, float *g, double *l, double *w, int *hit)
{
    const int64_t C = L->classes;
    const int ce = L->kind == RT_LOSS_CROSS_ENTROPY;
    const double e = ce ? L->smoothing : 0.0;
    double m = z[0], se = 0, W = 0;
    int64_t am = 0;
    for (int64_t c = 0; c < C; c++) {
        if (z[c * S] > z[am * S])
            am = c;
        m = z[c * S] > m ? z[c * S] : m;
        W += L->cw ? L->cw[c] : 1.0;
    }
    for (int64_t c = 0; c < C; c++)
        se += exp(z[c * S] - m);
    const double lse = ce ? m + log(se) : 0.0; /* nll_loss reads log q as given */
#define RT_REF_W(c) (L->cw ? (double)L->cw[c] : 1.0)
#define RT_REF_Q(c) exp(z[(c)*S] - lse)
    *l = 0;
    if (L->prob_target) {
        /* targets t' = (1 - e) t + e / C; l = -sum_c w_c t'_c log q_c */
        const float *t = (const float *)lab + li;
        double tw = 0;
        int64_t at = 0;
        for (int64_t c = 0; c < C; c++) {
            const double tc = (1 - e) * t[c * S] + e / (double)C;
            *l -= RT_REF_W(c) * tc * (z[c * S] - lse);
            tw += RT_REF_W(c) * tc;
            if (t[c * S] > t[at * S])
                at = c;
        }
        if (g)
            for (int64_t c = 0; c < C; c++)
                g[c * S] =
                    (float)(RT_REF_Q(c) * tw - RT_REF_W(c) * ((1 - e) * t[c * S] + e / (double)C));
        *w = 1;
        *hit = am == at;
        return 1;
    }
    const int64_t t = ((const int32_t *)lab)[li];
    if (t == L->ignore_index || t < 0 || t >= C) {
        if (g)
            for (int64_t c = 0; c < C; c++)
                g[c * S] = 0.0f;
        *w = 0;
        return 0;
    }
    *w = RT_REF_W(t);
    *hit = am == t;
    if (!ce) {
        *l = -*w * z[t * S];
        if (g)
            for (int64_t c = 0; c < C; c++)
                g[c * S] = c == t ? (float)-*w : 0.0f;
        return 1;
    }
    /* (1 - e) w_t (-log q_t) + e / C sum_c w_c (-log q_c) */
    for (int64_t c = 0; c < C; c++)
        *l += ((c == t ? (1 - e) * *w : 0.0) + e / (double)C * RT_REF_W(c)) * (lse - z[c * S]);
    if (g)
        for (int64_t c = 0; c < C; c++)
            g[c * S] = (float)((1 - e) * *w * (RT_REF_Q(c) - (c == t)) +
                               e / (double)C * (RT_REF_Q(c) * W - RT_REF_W(c)));
#undef RT_REF_W
#undef RT_REF_Q
    return 1;
}

/* one element of the element-wise PyTorch losses: loss into *l, d/dx */
static double rt_ref_torch_elem(const rt__lossinfo *L, double x, double y, int64_t k, double *l)
{
    const double b = L->beta, d = x - y, a = fabs(d), sg = (d > 0) - (d < 0);
    switch (L->kind) {
    case RT_LOSS_BCE_LOGITS: {
        const double pw = L->pw ? L->pw[L->n_pw == 1 ? 0 : k % L->classes] : 1.0;
        const double lw = 1 + (pw - 1) * y;
        *l = (1 - y) * x + lw * (x < 0 ? -x + log1p(exp(x)) : log1p(exp(-x)));
        return (1 - y) - lw / (1 + exp(x));
    }
    case RT_LOSS_BCE_TORCH:
        /* logs clamped at -100; the gradient PyTorch's backward computes */
        *l = -(y * (x > 0 ? fmax(log(x), -100) : -100) +
               (1 - y) * (x < 1 ? fmax(log1p(-x), -100) : -100));
        return d / fmax(x * (1 - x), 1e-12);
    case RT_LOSS_MSE_TORCH: *l = d * d; return 2 * d;
    case RT_LOSS_L1: *l = a; return sg;
    case RT_LOSS_SMOOTH_L1:
        if (a < b) {
            *l = d * d / (2 * b);
            return d / b;
        }
        *l = a - b / 2;
        return sg;
    default: /* huber */
        if (a < b) {
            *l = d * d / 2;
            return d;
        }
        *l = b * (a - b / 2);
        return b * sg;
    }
}

/* PyTorch reduces over the whole batch: mean (over positions or their
 * weights, elements) or sum; loss_sum gets that times n */
static void rt_ref_torch_loss(const rt__lossinfo *L, const float *y, const void *lab, int64_t n,
                              float *dy, double *loss_sum, double *acc_sum)
{
    const int sum = L->reduction == RT_REDUCE_SUM;
    double total = 0, norm = 0;
    if (L->kind == RT_LOSS_CROSS_ENTROPY || L->kind == RT_LOSS_NLL) {
        const int64_t C = L->classes, S = L->inner, per = C * S;
        for (int64_t i = 0; i < n; i++) {
            int64_t right = 0, counted = 0;
            for (int64_t p = 0; p < S; p++) {
                double l, w;
                int hit = 0;
                const int64_t li = L->prob_target ? i * per + p : i * S + p;
                if (rt_ref_torch_pos(L, y + i * per + p, S, lab, li, dy ? dy + i * per + p : NULL,
                                     &l, &w, &hit)) {
                    total += l;
                    norm += w;
                    counted++;
                    right += hit;
                }
            }
            if (counted)
                *acc_sum += (double)right / (double)counted;
        }
        /* the mean over nothing kept is NaN, its gradient 0, as PyTorch */
        const double sc = sum ? 1.0 : norm > 0 ? 1.0 / norm : 0.0;
        if (dy)
            for (int64_t k = 0; k < n * per; k++)
                dy[k] = (float)(dy[k] * sc);
        *loss_sum += (sum ? total : total / norm) * (double)n;
        return;
    }
    const int64_t E = n * L->out_numel;
    const double sc = sum ? 1.0 : 1.0 / (double)E;
    for (int64_t k = 0; k < E; k++) {
        double l;
        const double g = rt_ref_torch_elem(L, y[k], rt_ref_lab(L, lab, k), k, &l);
        total += l;
        if (dy)
            dy[k] = (float)(g * sc);
    }
    *loss_sum += total * sc * (double)n;
    if (!L->acc)
        return;
    const int bin = L->kind == RT_LOSS_BCE_LOGITS || L->kind == RT_LOSS_BCE_TORCH;
    const int64_t per = L->out_numel, R = L->rows, C = L->classes;
    for (int64_t i = 0; i < n; i++) {
        double right = 0;
        if (bin) {
            const double thr = L->kind == RT_LOSS_BCE_LOGITS ? 0.0 : 0.5;
            for (int64_t j = 0; j < per; j++)
                right += (y[i * per + j] > thr) == (rt_ref_lab(L, lab, i * per + j) > 0.5);
            *acc_sum += right / (double)per;
        } else {
            for (int64_t r = 0; r < R; r++)
                right += rt_ref_row_acc(L, y + (i * R + r) * C, lab, (i * R + r) * C);
            *acc_sum += right / (double)R;
        }
    }
}

/* Several outputs: head k's part of each sample's output (out_off[k]) and
 * labels (f32, lab_off[k]) gathered into scratch, its loss as for one
 * output, its gradient scattered back times weight[k]. scratch holds
 * n (4 out_numel + lab_numel) floats (rt_exec_create). */
static void rt_ref_loss_heads(const rt__lossinfo *L, const float *y, const float *lab, int64_t n,
                              float *dy, double *loss_sum, float *scratch)
{
    const int64_t O = L->out_numel, LN = L->lab_numel;
    for (int k = 0; k < L->n_heads; k++) {
        const rt__lossinfo *H = &L->head[k];
        const int64_t on = H->out_numel, ln = H->lab_numel;
        float *yk = scratch, *dk = yk + n * on, *lk = dk + n * on;
        for (int64_t i = 0; i < n; i++) {
            for (int64_t j = 0; j < on; j++)
                yk[i * on + j] = y[i * O + L->out_off[k] + j];
            for (int64_t j = 0; j < ln; j++)
                lk[i * ln + j] = lab[i * LN + L->lab_off[k] + j];
        }
        double ls = 0, as = 0;
        rt_ref_loss_batch(H, yk, lk, n, dy ? dk : NULL, &ls, &as);
        *loss_sum += (double)L->weight[k] * ls;
        if (dy)
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < on; j++)
                    dy[i * O + L->out_off[k] + j] = (float)((double)L->weight[k] * dk[i * on + j]);
    }
}

static void rt_ref_loss_one(const rt__lossinfo *L, const float *y, const void *lab, int64_t n,
                            float *dy, double *loss_sum, double *acc_sum, float *scratch)
{
    if (L->n_heads)
        rt_ref_loss_heads(L, y, lab, n, dy, loss_sum, scratch);
    else
        rt_ref_loss_batch(L, y, lab, n, dy, loss_sum, acc_sum);
}

void rt_ref_loss(void *ctx, const rt__lossinfo *L, const float *y, const void *lab, int64_t n,
                 const float *sw, float *dy, double *loss_sum, double *acc_sum, float *scratch)
{
    (void)ctx;
    if (RT_LOSS_IS_TORCH(L->kind)) {
        /* sample weights: PyTorch's losses take none (rt_exec_check_data) */
        rt_ref_torch_loss(L, y, lab, n, dy, loss_sum, acc_sum);
        return;
    }
    if (!sw) {
        rt_ref_loss_one(L, y, lab, n, dy, loss_sum, acc_sum, scratch);
        return;
    }
    /* Keras' SUM_OVER_BATCH_SIZE with sample weights: sum_i w_i l_i / n */
    const int64_t on = L->out_numel, ln = L->lab_numel;
    for (int64_t i = 0; i < n; i++) {
        double l = 0;
        float *d = dy ? dy + i * on : NULL;
        rt_ref_loss_one(L, y + i * on, (const char *)lab + i * ln * 4, 1, d, &l, acc_sum, scratch);
        *loss_sum += (double)sw[i] * l;
        if (d)
            for (int64_t j = 0; j < on; j++)
                d[j] = (float)((double)d[j] * sw[i] / (double)n);
    }
}

/* ----------------------------------------------------------------- metrics */

/* TF's in_top_k: fewer than k values strictly above the target's */
static int rt_ref_top_k(const double *p, int64_t C, int64_t t, int k)
{
    int above = 0;
    for (int64_t j = 0; j < C; j++)
        above += p[j] > p[t];
    return above < k;
}

void rt_ref_metrics(void *ctx, const rt__lossinfo *L, uint32_t metrics, const float *y,
                    const void *lab, int64_t n, rt__macc *a)
{
    (void)ctx;
    const int64_t C = L->classes, R = L->rows, E = L->out_numel;
    double p[4096], t[4096];
    for (int64_t i = 0; i < n; i++) {
        double bin = 0, cat = 0, scat = 0, topk = 0, stopk = 0, ae = 0, se = 0;
        for (int64_t r = 0; r < R; r++) {
            const float *z = y + i * E + r * C;
            /* the Softmax the loss folded into itself (logits arrive) */
            double m = z[0], s = 0;
            for (int64_t j = 1; j < C; j++)
                m = z[j] > m ? z[j] : m;
            for (int64_t j = 0; j < C && j < 4096; j++) {
                p[j] = L->softmax_fused ? exp(z[j] - m) : z[j];
                s += p[j];
            }
            if (L->softmax_fused)
                for (int64_t j = 0; j < C && j < 4096; j++)
                    p[j] = (float)(p[j] / s);
            int64_t pa = 0;
            for (int64_t j = 1; j < C; j++)
                if (p[j] > p[pa])
                    pa = j;
            if (L->lab_numel == L->rows) {
                int64_t c = (int64_t)rt_ref_lab(L, lab, i * R + r);
                if (c < 0 || c >= C)
                    c = 0;
                scat += pa == c;
                stopk += rt_ref_top_k(p, C, c, 5);
                /* one value per row (a single sigmoid or regression
                 * output) is also a label of the output's shape */
                if (L->lab_numel != L->out_numel)
                    continue;
            }
            int64_t ta = 0;
            for (int64_t j = 0; j < C && j < 4096; j++) {
                t[j] = (float)rt_ref_lab(L, lab, i * E + r * C + j);
                if (t[j] > t[ta])
                    ta = j;
            }
            cat += pa == ta;
            topk += rt_ref_top_k(p, C, ta, 5);
            for (int64_t j = 0; j < C; j++) {
                const double d = p[j] - t[j];
                bin += (p[j] > 0.5 ? 1.0 : 0.0) == t[j];
                ae += fabs(d);
                se += d * d;
                const int pp = p[j] > 0.5, tt = t[j] != 0;
                if (metrics & (RT_METRIC_PRECISION | RT_METRIC_RECALL)) {
                    a->tp += pp && tt;
                    a->fp += pp && !tt;
                    a->fn += !pp && tt;
                }
                if (metrics & RT_METRIC_AUC) {
                    if (tt)
                        a->pos += 1;
                    else
                        a->neg += 1;
                    for (int k = 0; k < RT__AUC_T; k++) {
                        const double th = k == 0               ? -1e-7
                                          : k == RT__AUC_T - 1 ? 1 + 1e-7
                                                               : (double)k / (RT__AUC_T - 1);
                        if (p[j] > th) {
                            if (tt)
                                a->auc_tp[k] += 1;
                            else
                                a->auc_fp[k] += 1;
                        }
                    }
                }
            }
        }
        a->sum[1] += bin / (double)E;
        a->sum[2] += cat / (double)R;
        a->sum[3] += scat / (double)R;
        a->sum[4] += topk / (double)R;
        a->sum[5] += stopk / (double)R;
        a->sum[6] += ae / (double)E;
        a->sum[7] += se / (double)E;
        a->sq += se;
        a->elems += (double)E;
    }
    a->n += n;
}

/* Several outputs: each output's part copied out, its loss (no gradient),
 * accuracy and metrics as for one output, in double */
void rt_ref_heads(void *ctx, const rt__lossinfo *L, const uint32_t *mets, const float *y,
                  const void *lab, int64_t n, const float *sw, rt__hacc *h, float *scratch)
{
    const int64_t O = L->out_numel, LN = L->lab_numel;
    const float *lf = lab;
    for (int k = 0; k < L->n_heads; k++) {
        const rt__lossinfo *H = &L->head[k];
        const int64_t on = H->out_numel, ln = H->lab_numel;
        float *yk = scratch, *lk = yk + n * on;
        for (int64_t i = 0; i < n; i++) {
            for (int64_t j = 0; j < on; j++)
                yk[i * on + j] = y[i * O + L->out_off[k] + j];
            for (int64_t j = 0; j < ln; j++)
                lk[i * ln + j] = lf[i * LN + L->lab_off[k] + j];
        }
        /* as the loss: the batch at once, or sample by sample under weights */
        if (!sw)
            rt_ref_loss_batch(H, yk, lk, n, NULL, &h->loss[k], &h->acc[k]);
        for (int64_t i = 0; sw && i < n; i++) {
            double l = 0;
            rt_ref_loss_batch(H, yk + i * on, lk + i * ln, 1, NULL, &l, &h->acc[k]);
            h->loss[k] += (double)sw[i] * l;
        }
        if (mets[k] & ~RT_METRIC_ACCURACY)
            rt_ref_metrics(ctx, H, mets[k], yk, lk, n, &h->m[k]);
    }
}

/* ------------------------------------------- regularizers and constraints */

double rt_ref_regularize(void *ctx, const rt_plan *p, const float *w, float *g)
{
    (void)ctx;
    double pen = 0;
    for (int i = 0; i < p->n_params; i++) {
        const rt__param *pr = &p->params[i];
        const double l1 = pr->opts.l1 > 0 ? pr->opts.l1 : 0, l2 = pr->opts.l2 > 0 ? pr->opts.l2 : 0;
        if (l1 == 0 && l2 == 0)
            continue;
        for (int64_t j = 0; j < pr->numel; j++) {
            const double x = w[pr->off + j];
            pen += l1 * fabs(x) + l2 * x * x;
            if (g && pr->trainable) {
                const double d = l1 * ((x > 0) - (x < 0)) + 2 * l2 * x;
                g[pr->goff + j] = (float)(g[pr->goff + j] + d);
            }
        }
    }
    return pen;
}

/* element j of slice k of a parameter whose slices run along the axes in
 * mask (Keras' constraint axes) */
static int64_t rt_ref_slice_at(const rt__shape *s, unsigned mask, int64_t k, int64_t j)
{
    int64_t off = 0, stride = 1;
    for (int d = s->ndim - 1; d >= 0; d--) {
        int64_t c;
        if (mask >> d & 1) {
            c = j % s->d[d];
            j /= s->d[d];
        } else {
            c = k % s->d[d];
            k /= s->d[d];
        }
        off += c * stride;
        stride *= s->d[d];
    }
    return off;
}

void rt_ref_constrain(void *ctx, const rt_plan *p, float *w)
{
    (void)ctx;
    for (int i = 0; i < p->n_params; i++) {
        const rt__param *pr = &p->params[i];
        const rt_param_opts *o = &pr->opts;
        if (!pr->trainable || o->constraint == RT_CONSTRAINT_NONE)
            continue;
        float *x = w + pr->off;
        if (o->constraint == RT_CONSTRAINT_NON_NEG) {
            for (int64_t j = 0; j < pr->numel; j++)
                if (x[j] < 0)
                    x[j] = 0;
            continue;
        }
        int64_t per = 1;
        for (int d = 0; d < pr->shape.ndim; d++)
            if (o->c_axes >> d & 1)
                per *= pr->shape.d[d];
        for (int64_t k = 0; k < pr->numel / per; k++) {
            double ss = 0;
            for (int64_t j = 0; j < per; j++) {
                const double v = x[rt_ref_slice_at(&pr->shape, o->c_axes, k, j)];
                ss += v * v;
            }
            const double nrm = sqrt(ss);
            double want = nrm;
            if (o->constraint == RT_CONSTRAINT_MAX_NORM)
                want = fmin(nrm, o->c_max);
            else if (o->constraint == RT_CONSTRAINT_UNIT_NORM)
                want = 1;
            else if (o->constraint == RT_CONSTRAINT_MIN_MAX_NORM)
                want = o->c_rate * fmin(fmax(nrm, o->c_min), o->c_max) + (1 - o->c_rate) * nrm;
            for (int64_t j = 0; j < per; j++) {
                float *v = &x[rt_ref_slice_at(&pr->shape, o->c_axes, k, j)];
                *v = (float)(*v * (want / (1e-7 + nrm)));
            }
        }
    }
}

/* ---------------------------------------------------- clipping, optimizers */

double rt_ref_clip(void *ctx, float *g, int64_t count, float clip)
{
    (void)ctx;
    double s = 0;
    for (int64_t i = 0; i < count; i++)
        s += (double)g[i] * g[i];
    const double norm = sqrt(s);
    if (clip > 0 && norm > clip)
        for (int64_t i = 0; i < count; i++)
            g[i] = (float)(g[i] * (clip / norm));
    return norm;
}

void rt_ref_update(void *ctx, const rt_train_config *c, float lr, int64_t t, float *w, float *g,
                   float *s1, float *s2, int64_t count)
{
    (void)ctx;
    const double b1 = c->beta1, b2 = c->beta2, eps = c->eps, mu = c->momentum, rho = c->rho;
    const double bc1 = 1 - pow(b1, (double)t), bc2 = 1 - pow(b2, (double)t);
    /* Nadam's momentum schedule u_t = b1 (1 - 0.5 0.96^t) and the product
     * of u_1..u_t (past t = 1000, 0.96^t < 1e-17: the factors are b1) */
    double nd_prod = 1, nd_ut = 0, nd_ut1 = 0;
    if (c->opt == RT_OPT_NADAM) {
        const int64_t kk = t < 1000 ? t : 1000;
        nd_prod = pow(b1, (double)(t - kk));
        for (int64_t k = 1; k <= kk; k++)
            nd_prod *= b1 * (1 - 0.5 * pow(0.96, (double)k));
        nd_ut = b1 * (1 - 0.5 * pow(0.96, (double)t));
        nd_ut1 = b1 * (1 - 0.5 * pow(0.96, (double)(t + 1)));
    }
    for (int64_t i = 0; i < count; i++) {
        double wi = w[i], gi = g[i];
        if (c->l2_decay > 0)
            gi += (double)c->l2_decay * wi; /* torch's weight_decay */
        switch (c->opt) {
        case RT_OPT_SGD:
            if (mu != 0 && c->dampening > 0) {
                /* torch.optim.SGD: buf = g at step 1, then mu buf + (1-d) g */
                const double b = t == 1 ? gi : mu * s1[i] + (1 - (double)c->dampening) * gi;
                s1[i] = (float)b;
                wi -= lr * (c->nesterov ? gi + mu * b : b);
            } else if (mu != 0) {
                /* Keras: v = mu v - lr g; w += v, or w += mu v - lr g */
                const double v = mu * s1[i] - lr * gi;
                s1[i] = (float)v;
                wi += c->nesterov ? mu * v - lr * gi : v;
            } else {
                wi -= lr * gi;
            }
            break;
        case RT_OPT_ADAM:
        case RT_OPT_ADAMW: {
            if (c->opt == RT_OPT_ADAMW && c->weight_decay > 0)
                wi *= 1 - (double)lr * c->weight_decay; /* decoupled, first */
            const double m = b1 * s1[i] + (1 - b1) * gi, v = b2 * s2[i] + (1 - b2) * gi * gi;
            s1[i] = (float)m;
            s2[i] = (float)v;
            /* Keras: eps added to sqrt(v), w -= lr sqrt(bc2)/bc1 m / (sqrt(v) + eps);
             * adam_eps_vhat: torch's, to sqrt(v / bc2) */
            if (c->adam_eps_vhat)
                wi -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps);
            else
                wi -= lr * sqrt(bc2) / bc1 * m / (sqrt(v) + eps);
            break;
        }
        case RT_OPT_ADAGRAD: {
            /* Keras: acc starts at 0.1; acc += g^2; w -= lr g / sqrt(acc + eps) */
            const double acc = (t == 1 ? 0.1 : (double)s1[i]) + gi * gi;
            s1[i] = (float)acc;
            wi -= lr * gi / sqrt(acc + eps);
            break;
        }
        case RT_OPT_ADADELTA: {
            const double ag = rho * s1[i] + (1 - rho) * gi * gi;
            const double d = -sqrt(s2[i] + eps) * gi / sqrt(ag + eps);
            s1[i] = (float)ag;
            s2[i] = (float)(rho * s2[i] + (1 - rho) * d * d);
            wi += lr * d;
            break;
        }
        case RT_OPT_ADAMAX: {
            const double m = b1 * s1[i] + (1 - b1) * gi, u = fmax(b2 * s2[i], fabs(gi));
            s1[i] = (float)m;
            s2[i] = (float)u;
            wi -= lr * m / (bc1 * (u + eps));
            break;
        }
        case RT_OPT_NADAM: {
            const double m = b1 * s1[i] + (1 - b1) * gi, v = b2 * s2[i] + (1 - b2) * gi * gi;
            s1[i] = (float)m;
            s2[i] = (float)v;
            const double mh =
                nd_ut1 * m / (1 - nd_prod * nd_ut1) + (1 - nd_ut) * gi / (1 - nd_prod);
            wi -= lr * mh / (sqrt(v / bc2) + eps);
            break;
        }
        case RT_OPT_FTRL: {
            /* keras/src/optimizers/ftrl.py, in double */
            const double n = t == 1 ? c->ftrl_init : s1[i], nn = n + gi * gi, q = -c->ftrl_power;
            const double pn = pow(nn, q), po = pow(n, q);
            const double l2 = c->ftrl_l2 + c->ftrl_beta / (2.0 * lr), l1 = c->ftrl_l1;
            const double z = s2[i] + gi + 2.0 * c->ftrl_shrink * wi - (pn - po) / lr * wi;
            const double zc = z < -l1 ? -l1 : z > l1 ? l1 : z;
            wi = (zc - z) / (pn / lr + 2.0 * l2);
            s1[i] = (float)nn;
            s2[i] = (float)z;
            break;
        }
        case RT_OPT_RMSPROP: {
            const double v = c->rho * s1[i] + (1 - c->rho) * gi * gi;
            s1[i] = (float)v;
            wi -= lr * gi / sqrt(v + eps);
            break;
        }
        }
        w[i] = (float)wi;
        if (c->l2_decay > 0)
            g[i] = (float)gi;
    }
}

void rt_ref_scale(void *ctx, float *dst, const float *src, int64_t count, float s)
{
    (void)ctx;
    for (int64_t i = 0; i < count; i++)
        dst[i] = src[i] * s;
}
