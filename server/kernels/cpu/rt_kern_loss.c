/*
 * rt_kern_loss.c - the CPU backend's losses (forward and gradient in one pass) and accuracy.
 *
 * Keras semantics: a per-row loss over the last axis (C classes), the mean
 * over the rows of a sample, then the mean over the batch. So
 * dy = d(per-row loss)/dy / (n * rows).
 *   sparse CE   labels one per row; from probabilities as Keras' TF backend:
 *               q = clip(p, 1e-7, 1-1e-7), loss = -log(q_l / sum q); but on
 *               a Softmax output the loss reads its logits (as Keras does;
 *               rt_compile.c sets from_logits and softmax_fused)
 *   CE          one-hot f32 labels; probabilities are normalised to sum 1,
 *               then clipped, loss = -sum y log q
 *   BCE         Keras 3 (keras/src/backend/tensorflow/nn.py): p clipped to
 *               [eps, 1-eps], -(y log p + (1-y) log(1-p)) (tf.keras 2 added
 *               eps inside both logs; tfjs agrees with Keras 3);
 *               from logits max(z,0) - z y + log1p(exp(-|z|))
 *   MSE, MAE    mean over the last axis of (p-y)^2, |p-y|
 *   logcosh     x = p - y, mean over the last axis of x + softplus(-2x) - log 2
 * Labels with one value per row (e.g. int labels (B,) against a (B,3)
 * output) are broadcast over the last axis, as Keras does after expanding
 * them to (B,1) (W-A's logcosh on int labels).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cpu/rt_kern_math.h"
#include "cpu/rt_kern_cpu.h"
#include "cpu/rt_kern_loss_row.h"

#define RT__EPS 1e-7f

/* one row: returns its loss, writes dz (scaled by s) when dz != NULL */
static double rt__row(const rt__lossinfo *L, const float *restrict z, const void *lab,
                      int64_t lab_i, float *restrict dz, float s)
{
    const int64_t C = L->classes;
    double loss = 0;
    switch (L->kind) {
    case RT_LOSS_SPARSE_CE: {
        int64_t l = rt__lab_class(L, lab, lab_i);
        if (L->from_logits) {
            float m = z[0];
            for (int64_t j = 1; j < C; j++)
                m = z[j] > m ? z[j] : m;
            float se = 0;
            for (int64_t j = 0; j < C; j++)
                se += rt_kern_exp(z[j] - m);
            float lse = m + logf(se);
            loss = lse - z[l];
            if (dz) {
                for (int64_t j = 0; j < C; j++)
                    dz[j] = s * rt_kern_exp(z[j] - lse);
                dz[l] -= s;
            }
        } else {
            float sum = 0;
            for (int64_t j = 0; j < C; j++)
                sum += fminf(fmaxf(z[j], RT__EPS), 1 - RT__EPS);
            float ql = fminf(fmaxf(z[l], RT__EPS), 1 - RT__EPS);
            loss = -log(ql) + log(sum);
            if (dz) {
                for (int64_t j = 0; j < C; j++) {
                    int in = z[j] >= RT__EPS && z[j] <= 1 - RT__EPS;
                    dz[j] = in ? s * (1.0f / sum - (j == l ? 1.0f / ql : 0.0f)) : 0.0f;
                }
            }
        }
        break;
    }
    case RT_LOSS_CE: {
        const float *restrict y = (const float *)lab + lab_i;
        if (L->from_logits) {
            float m = z[0];
            for (int64_t j = 1; j < C; j++)
                m = z[j] > m ? z[j] : m;
            float se = 0, ys = 0;
            for (int64_t j = 0; j < C; j++) {
                se += expf(z[j] - m);
                ys += y[j];
            }
            float lse = m + logf(se);
            for (int64_t j = 0; j < C; j++)
                loss += (double)y[j] * (lse - z[j]);
            if (dz)
                for (int64_t j = 0; j < C; j++)
                    dz[j] = s * (expf(z[j] - lse) * ys - y[j]);
        } else {
            float S = 0;
            for (int64_t j = 0; j < C; j++)
                S += z[j];
            float gu = 0; /* sum_k g_k u_k */
            for (int64_t j = 0; j < C; j++) {
                float u = z[j] / S, q = fminf(fmaxf(u, RT__EPS), 1 - RT__EPS);
                loss -= (double)y[j] * log(q);
                float g = (u >= RT__EPS && u <= 1 - RT__EPS) ? -y[j] / q : 0.0f;
                if (dz)
                    dz[j] = g;
                gu += g * u;
            }
            if (dz)
                for (int64_t j = 0; j < C; j++)
                    dz[j] = s * (dz[j] - gu) / S;
        }
        break;
    }
    default: break; /* element-wise losses run in rt__loss_elem */
    }
    return loss;
}

/* Element-wise losses (MSE, MAE, logcosh, BCE) over the whole batch as flat
 * arrays, so the loops vectorise: labels are first expanded to the output's
 * shape (yb), per-element losses go to fb, then summed per sample in
 * double in a fixed order. */
static void rt__loss_elem(const rt__lossinfo *L, const float *restrict p, const void *lab,
                          int64_t n, float *restrict dy, double *loss_sum, float *restrict yb,
                          float *restrict fb)
{
    const int64_t C = L->classes, per = L->out_numel, E = n * per;
    const int64_t rows = n * L->rows;
    if (L->lab_numel != L->out_numel) {
        for (int64_t r = 0; r < rows; r++) {
            const float v = rt__lab(L, lab, r);
            for (int64_t j = 0; j < C; j++)
                yb[r * C + j] = v;
        }
    } else if (L->lab_dt == RT_F32) {
        memcpy(yb, lab, sizeof(float) * (size_t)E);
    } else {
        const int32_t *restrict li = lab;
        for (int64_t e = 0; e < E; e++)
            yb[e] = (float)li[e];
    }
    const float sc = (float)(1.0 / ((double)n * (double)per));
    const float ln2 = 0.69314718055994531f;
    /* Keras' hinge losses take {0, 1} labels as -1, 1 when the whole batch
     * holds only 0 and 1 (convert_binary_labels_to_hinge) */
    if (L->kind == RT_LOSS_HINGE || L->kind == RT_LOSS_SQUARED_HINGE) {
        int bin = 1;
        for (int64_t e = 0; e < E && bin; e++)
            bin = yb[e] == 0.0f || yb[e] == 1.0f;
        for (int64_t e = 0; bin && e < E; e++)
            yb[e] = 2.0f * yb[e] - 1.0f;
    }
    const float delta = L->beta > 0 ? L->beta : 1.0f, fc = (float)C;
    /* the same body with and without a gradient to write */
#define RT__ELEM_LOOP(G)                                                            \
    switch (L->kind) {                                                              \
    case RT_LOSS_MSE:                                                               \
        for (int64_t e = 0; e < E; e++) {                                           \
            const float d = p[e] - yb[e];                                           \
            fb[e] = d * d;                                                          \
            G(2.0f * d);                                                            \
        }                                                                           \
        break;                                                                      \
    case RT_LOSS_MAE:                                                               \
        for (int64_t e = 0; e < E; e++) {                                           \
            const float d = p[e] - yb[e];                                           \
            fb[e] = fabsf(d);                                                       \
            G(d > 0.0f ? 1.0f : d < 0.0f ? -1.0f : 0.0f);                           \
        }                                                                           \
        break;                                                                      \
    case RT_LOSS_BCE:                                                               \
        if (L->from_logits) {                                                       \
            for (int64_t e = 0; e < E; e++) {                                       \
                const float z = p[e], y = yb[e];                                    \
                const float t = rt_kern_exp(-fabsf(z));                             \
                fb[e] = (z > 0.0f ? z : 0.0f) - z * y + rt_kern_log1p(t);           \
                const float sg = z >= 0.0f ? 1.0f / (1.0f + t) : t / (1.0f + t);    \
                G(sg - y);                                                          \
            }                                                                       \
        } else {                                                                    \
            for (int64_t e = 0; e < E; e++) {                                       \
                const float pe = p[e], y = yb[e];                                   \
                float q = pe < RT__EPS ? RT__EPS : pe;                              \
                q = q > 1.0f - RT__EPS ? 1.0f - RT__EPS : q;                        \
                fb[e] = -(y * rt_kern_log(q) + (1.0f - y) * rt_kern_log(1.0f - q)); \
                const int in = pe >= RT__EPS && pe <= 1.0f - RT__EPS;               \
                G(in ? -(y / q - (1.0f - y) / (1.0f - q)) : 0.0f);                  \
            }                                                                       \
        }                                                                           \
        break;                                                                      \
    case RT_LOSS_HINGE:                                                             \
        for (int64_t e = 0; e < E; e++) {                                           \
            const float m = 1.0f - yb[e] * p[e];                                    \
            fb[e] = m > 0.0f ? m : 0.0f;                                            \
            G(m > 0.0f ? -yb[e] : 0.0f);                                            \
        }                                                                           \
        break;                                                                      \
    case RT_LOSS_SQUARED_HINGE:                                                     \
        for (int64_t e = 0; e < E; e++) {                                           \
            const float m = 1.0f - yb[e] * p[e], h = m > 0.0f ? m : 0.0f;           \
            fb[e] = h * h;                                                          \
            G(-2.0f * h * yb[e]);                                                   \
        }                                                                           \
        break;                                                                      \
    case RT_LOSS_POISSON:                                                           \
        for (int64_t e = 0; e < E; e++) {                                           \
            fb[e] = p[e] - yb[e] * rt_kern_log(p[e] + RT__EPS);                     \
            G(1.0f - yb[e] / (p[e] + RT__EPS));                                     \
        }                                                                           \
        break;                                                                      \
    case RT_LOSS_KLD: /* a sum over the last axis: C times the mean */              \
        for (int64_t e = 0; e < E; e++) {                                           \
            const float y = fminf(fmaxf(yb[e], RT__EPS), 1.0f);                     \
            const float q = fminf(fmaxf(p[e], RT__EPS), 1.0f);                      \
            fb[e] = fc * y * rt_kern_log(y / q);                                    \
            G(p[e] >= RT__EPS && p[e] <= 1.0f ? -fc * y / q : 0.0f);                \
        }                                                                           \
        break;                                                                      \
    case RT_LOSS_HUBER_KERAS:                                                       \
        for (int64_t e = 0; e < E; e++) {                                           \
            const float d = p[e] - yb[e], a = fabsf(d);                             \
            fb[e] = a <= delta ? 0.5f * d * d : delta * a - 0.5f * delta * delta;   \
            G(a <= delta ? d : d > 0.0f ? delta : -delta);                          \
        }                                                                           \
        break;                                                                      \
    default: /* logcosh: |x| + log1p(e^-2|x|) - log 2; d/dx = tanh x */             \
        for (int64_t e = 0; e < E; e++) {                                           \
            const float x = p[e] - yb[e], a = fabsf(x);                             \
            const float t = rt_kern_exp(-2.0f * a);                                 \
            fb[e] = a + rt_kern_log1p(t) - ln2;                                     \
            const float th = (1.0f - t) / (1.0f + t);                               \
            G(x < 0.0f ? -th : th);                                                 \
        }                                                                           \
        break;                                                                      \
    }
#define RT__G_STORE(v) dy[e] = sc * (v)
#define RT__G_NONE(v) (void)(v)
    if (dy) {
        RT__ELEM_LOOP(RT__G_STORE)
    } else {
        RT__ELEM_LOOP(RT__G_NONE)
    }
#undef RT__G_STORE
#undef RT__G_NONE
#undef RT__ELEM_LOOP
    const double inv = 1.0 / (double)per;
    double total = 0;
    for (int64_t i = 0; i < n; i++) {
        double acc = 0;
        const float *f = fb + i * per;
        for (int64_t e = 0; e < per; e++)
            acc += f[e];
        total += acc * inv;
    }
    *loss_sum += total;
}

/* Several outputs: each head's part of the packed output and labels is
 * gathered, its loss run as for one output, and its gradient scattered
 * back times its weight. scratch holds n (4 out_numel + lab_numel) floats. */
static void rt__loss_heads(const rt__lossinfo *L, const float *y, const float *lab, int64_t n,
                           float *dy, double *loss_sum, float *scratch)
{
    const int64_t O = L->out_numel, LN = L->lab_numel;
    for (int k = 0; k < L->n_heads; k++) {
        const rt__lossinfo *H = &L->head[k];
        const int64_t on = H->out_numel, ln = H->lab_numel;
        float *yk = scratch, *dk = yk + n * on, *lk = dk + n * on, *sub = lk + n * ln;
        for (int64_t i = 0; i < n; i++) {
            memcpy(yk + i * on, y + i * O + L->out_off[k], sizeof(float) * (size_t)on);
            memcpy(lk + i * ln, lab + i * LN + L->lab_off[k], sizeof(float) * (size_t)ln);
        }
        double ls = 0, as = 0;
        rt__loss_run(H, yk, lk, n, dy ? dk : NULL, &ls, &as, sub);
        *loss_sum += (double)L->weight[k] * ls;
        if (dy)
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < on; j++)
                    dy[i * O + L->out_off[k] + j] = L->weight[k] * dk[i * on + j];
    }
}

void rt__loss_run(const rt__lossinfo *L, const float *y, const void *lab, int64_t n, float *dy,
                  double *loss_sum, double *acc_sum, float *scratch)
{
    const int64_t C = L->classes, R = L->rows;
    const int bc = L->lab_numel != L->out_numel;
    if (L->n_heads) {
        rt__loss_heads(L, y, lab, n, dy, loss_sum, scratch);
        return;
    }
    if (RT_LOSS_IS_TORCH(L->kind)) {
        rt__loss_torch_run(L, y, lab, n, dy, loss_sum, acc_sum);
        return;
    }
    if (L->kind != RT_LOSS_SPARSE_CE && L->kind != RT_LOSS_CE) {
        rt__loss_elem(L, y, lab, n, dy, loss_sum, scratch, scratch + n * L->out_numel);
        if (!L->acc)
            return;
        double as = 0;
        for (int64_t i = 0; i < n; i++) {
            int64_t correct = 0;
            for (int64_t r = 0; r < R; r++) {
                int64_t li = bc ? i * R + r : (i * R + r) * C;
                correct += rt__loss_row_acc(L, y + (i * R + r) * C, lab, li);
            }
            as += (double)correct / (double)R;
        }
        *acc_sum += as;
        return;
    }
    const float s = 1.0f / (float)((double)n * (double)R);
    double ls = 0, as = 0;
    for (int64_t i = 0; i < n; i++) {
        double sl = 0;
        int64_t correct = 0;
        for (int64_t r = 0; r < R; r++) {
            const float *z = y + (i * R + r) * C;
            int64_t li = bc ? i * R + r : (i * R + r) * C;
            sl += rt__row(L, z, lab, li, dy ? dy + (i * R + r) * C : NULL, s);
            if (L->acc)
                correct += rt__loss_row_acc(L, z, lab, li);
        }
        ls += sl / (double)R;
        as += (double)correct / (double)R;
    }
    *loss_sum += ls;
    *acc_sum += as;
}
