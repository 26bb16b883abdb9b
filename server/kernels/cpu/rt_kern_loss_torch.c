/*
 * rt_kern_loss_torch.c - the CPU backend: PyTorch's losses with PyTorch's semantics (torch 1.13,
 * aten/src/ATen/native/Loss*.cpp), forward and gradient in one pass.
 *
 * The batch loss is reduced as PyTorch reduces it, over the whole batch:
 *   cross_entropy, nll_loss: the class axis is the first per-sample dim
 *     (PyTorch's dim 1); a position is a (sample, inner index) pair.
 *     Class-index targets t, q = softmax(z) over the classes:
 *       l = (1-e) w[t] (-log q_t) + e/C sum_c w_c (-log q_c)
 *     (nll_loss reads log q as given, e = 0); positions whose target is
 *     ignore_index are left out; mean divides by sum w[t] over the kept
 *     positions (their count without weights), NaN when none is kept, as
 *     PyTorch. Probability targets (cross_entropy, f32 of the output's
 *     shape): t' = (1-e) t + e/C, l = -sum_c w_c t'_c log q_c, mean divides
 *     by the number of positions.
 *   bce_with_logits      l = (1-y) z + (1 + (pw-1) y) softplus(-z)
 *   binary_cross_entropy l = -(y max(log p, -100) + (1-y) max(log(1-p), -100)),
 *                        gradient (p-y) / max(p (1-p), 1e-12), PyTorch's backward
 *   mse_loss (p-y)^2, l1_loss |p-y|, smooth_l1_loss (beta), huber_loss (delta)
 *   and these mean over every element of the batch.
 * Reduction sum: the sums. The engine's loss sum gets the batch loss times
 * n (rt_exec reports loss_sum / n as the step's loss).
 * Accuracy: a class loss counts a position right when the argmax over its
 * classes is its target (ignored positions left out); the binary losses
 * count elements (logit > 0 or probability > 0.5 against label > 0.5); the
 * regression losses rows as the Keras ones (rt__loss_row_acc).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cpu/rt_kern_cpu.h"
#include "cpu/rt_kern_loss_row.h"

/* cross_entropy and nll_loss over n samples; *loss gets the batch loss */
static void rt__class_loss(const rt__lossinfo *L, const float *y, const void *lab, int64_t n,
                           float *dy, double *loss, double *acc_sum)
{
    const int64_t C = L->classes, S = L->inner, per = C * S;
    const int ce = L->kind == RT_LOSS_CROSS_ENTROPY;
    const double e = ce ? L->smoothing : 0.0;
    const float *w = L->cw;
    double wall = (double)C; /* sum of the class weights */
    if (w) {
        wall = 0;
        for (int64_t c = 0; c < C; c++)
            wall += w[c];
    }
    double total = 0, norm = 0, acc = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t right = 0, counted = 0;
        for (int64_t s = 0; s < S; s++) {
            const float *z = y + i * per + s; /* class c at z[c * S] */
            float *g = dy ? dy + i * per + s : NULL;
            int64_t am = 0;
            for (int64_t c = 1; c < C; c++)
                if (z[c * S] > z[am * S])
                    am = c;
            double lse = 0;
            if (ce) {
                const double m = z[am * S];
                double se = 0;
                for (int64_t c = 0; c < C; c++)
                    se += exp((double)z[c * S] - m);
                lse = m + log(se);
            }
            if (L->prob_target) {
                const float *t = (const float *)lab + i * per + s;
                double l = 0, tw = 0; /* tw = sum_c w_c t'_c */
                int64_t at = 0;
                for (int64_t c = 0; c < C; c++) {
                    const double tc = (1.0 - e) * t[c * S] + e / (double)C;
                    const double wc = w ? w[c] : 1.0;
                    l -= wc * tc * ((double)z[c * S] - lse);
                    tw += wc * tc;
                    if (t[c * S] > t[at * S])
                        at = c;
                }
                if (g)
                    for (int64_t c = 0; c < C; c++) {
                        const double tc = (1.0 - e) * t[c * S] + e / (double)C;
                        g[c * S] =
                            (float)(exp((double)z[c * S] - lse) * tw - (w ? w[c] : 1.0) * tc);
                    }
                total += l;
                norm += 1;
                counted++;
                right += am == at;
                continue;
            }
            const int64_t t = ((const int32_t *)lab)[i * S + s];
            if (t == L->ignore_index || t < 0 || t >= C) {
                /* out of range: rt_exec_check_data refused it; never index out */
                if (g)
                    for (int64_t c = 0; c < C; c++)
                        g[c * S] = 0.0f;
                continue;
            }
            const double wt = w ? w[t] : 1.0;
            double l;
            if (ce) {
                l = (1.0 - e) * wt * (lse - z[t * S]);
                if (e > 0) {
                    double sm = 0;
                    for (int64_t c = 0; c < C; c++)
                        sm += (w ? w[c] : 1.0) * (lse - z[c * S]);
                    l += e / (double)C * sm;
                }
                if (g)
                    for (int64_t c = 0; c < C; c++) {
                        const double q = exp((double)z[c * S] - lse);
                        g[c * S] = (float)((1.0 - e) * wt * (q - (c == t)) +
                                           e / (double)C * (q * wall - (w ? w[c] : 1.0)));
                    }
            } else {
                l = -wt * z[t * S];
                if (g) {
                    for (int64_t c = 0; c < C; c++)
                        g[c * S] = 0.0f;
                    g[t * S] = (float)-wt;
                }
            }
            total += l;
            norm += wt;
            counted++;
            right += am == t;
        }
        if (counted)
            acc += (double)right / (double)counted;
    }
    /* mean over nothing kept: NaN, gradient 0, as PyTorch */
    const double sc = L->reduction == RT_REDUCE_SUM ? 1.0 : norm > 0 ? 1.0 / norm : 0.0;
    if (dy && sc != 1.0)
        for (int64_t k = 0; k < n * per; k++)
            dy[k] = (float)(dy[k] * sc);
    *loss = L->reduction == RT_REDUCE_SUM ? total : total / norm;
    *acc_sum += acc;
}

static inline float rt__tgt(const rt__lossinfo *L, const void *lab, int64_t i)
{
    return L->lab_dt == RT_I32 ? (float)((const int32_t *)lab)[i] : ((const float *)lab)[i];
}

/* the element-wise losses; *loss gets the batch loss */
static void rt__elem_loss(const rt__lossinfo *L, const float *p, const void *lab, int64_t n,
                          float *dy, double *loss, double *acc_sum)
{
    const int64_t E = n * L->out_numel, C = L->classes;
    const double sc = L->reduction == RT_REDUCE_SUM ? 1.0 : 1.0 / (double)E;
    const double beta = L->beta;
    double total = 0;
    for (int64_t k = 0; k < E; k++) {
        const double x = p[k], y = rt__tgt(L, lab, k);
        double l, g;
        switch (L->kind) {
        case RT_LOSS_BCE_LOGITS: {
            const double pw = L->pw ? L->pw[L->n_pw == 1 ? 0 : k % C] : 1.0;
            const double lw = 1.0 + (pw - 1.0) * y;
            const double sp = (x < 0 ? -x : 0.0) + log1p(exp(-fabs(x))); /* softplus(-x) */
            l = (1.0 - y) * x + lw * sp;
            const double sig = x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
            g = (1.0 - y) - lw * (1.0 - sig);
            break;
        }
        case RT_LOSS_BCE_TORCH: {
            const double lp = x > 0 ? fmax(log(x), -100.0) : -100.0;
            const double lq = x < 1 ? fmax(log1p(-x), -100.0) : -100.0;
            l = -(y * lp + (1.0 - y) * lq);
            g = (x - y) / fmax((1.0 - x) * x, 1e-12);
            break;
        }
        case RT_LOSS_MSE_TORCH:
            l = (x - y) * (x - y);
            g = 2.0 * (x - y);
            break;
        case RT_LOSS_L1:
            l = fabs(x - y);
            g = x > y ? 1.0 : x < y ? -1.0 : 0.0;
            break;
        case RT_LOSS_SMOOTH_L1: {
            const double d = x - y, a = fabs(d);
            if (a < beta) {
                l = 0.5 * d * d / beta;
                g = d / beta;
            } else { /* beta 0: l1_loss, as PyTorch */
                l = a - 0.5 * beta;
                g = d > 0 ? 1.0 : d < 0 ? -1.0 : 0.0;
            }
            break;
        }
        default: { /* huber */
            const double d = x - y, a = fabs(d);
            if (a < beta) {
                l = 0.5 * d * d;
                g = d;
            } else {
                l = beta * (a - 0.5 * beta);
                g = d > 0 ? beta : -beta;
            }
            break;
        }
        }
        total += l;
        if (dy)
            dy[k] = (float)(g * sc);
    }
    *loss = total * sc;
    if (!L->acc)
        return;
    const int64_t per = L->out_numel;
    if (L->kind == RT_LOSS_BCE_LOGITS || L->kind == RT_LOSS_BCE_TORCH) {
        const float thr = L->kind == RT_LOSS_BCE_LOGITS ? 0.0f : 0.5f;
        for (int64_t i = 0; i < n; i++) {
            int64_t right = 0;
            for (int64_t j = 0; j < per; j++)
                right += (p[i * per + j] > thr) == (rt__tgt(L, lab, i * per + j) > 0.5f);
            *acc_sum += (double)right / (double)per;
        }
        return;
    }
    const int64_t R = L->rows;
    for (int64_t i = 0; i < n; i++) {
        int64_t right = 0;
        for (int64_t r = 0; r < R; r++)
            right += rt__loss_row_acc(L, p + (i * R + r) * C, lab, (i * R + r) * C);
        *acc_sum += (double)right / (double)R;
    }
}

void rt__loss_torch_run(const rt__lossinfo *L, const float *y, const void *lab, int64_t n,
                        float *dy, double *loss_sum, double *acc_sum)
{
    double l = 0;
    if (L->kind == RT_LOSS_CROSS_ENTROPY || L->kind == RT_LOSS_NLL)
        rt__class_loss(L, y, lab, n, dy, &l, acc_sum);
    else
        rt__elem_loss(L, y, lab, n, dy, &l, acc_sum);
    *loss_sum += l * (double)n;
}
