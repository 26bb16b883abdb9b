/*
 * rt_kern_metrics.c - the CPU backend's metric accumulation (what each
 * metric sums: server/engine/rt_metrics.c).
 */
#include <math.h>
#include <string.h>

#include "cpu/rt_kern_cpu.h"

static int64_t rt__argmax_row(const float *x, int64_t C)
{
    int64_t b = 0;
    for (int64_t j = 1; j < C; j++)
        if (x[j] > x[b])
            b = j;
    return b;
}

/* TF's in_top_k: fewer than k predictions strictly above the target's */
static int rt__in_top_k(const float *p, int64_t C, int64_t t, int k)
{
    int above = 0;
    for (int64_t j = 0; j < C; j++)
        above += p[j] > p[t];
    return above < k;
}

void rt__metrics_update(const rt__lossinfo *L, uint32_t metrics, const float *y, const void *lab,
                        int64_t n, rt__macc *a)
{
    const int64_t C = L->classes, R = L->rows, E = L->out_numel;
    float row[4096];
    const int soft = L->softmax_fused && C <= 4096;
    for (int64_t i = 0; i < n; i++) {
        double bin = 0, cat = 0, scat = 0, topk = 0, stopk = 0, ae = 0, se = 0;
        for (int64_t r = 0; r < R; r++) {
            const float *p = y + i * E + r * C;
            if (soft) {
                /* the model's Softmax, which the loss folded into itself */
                float m = p[0], s = 0;
                for (int64_t j = 1; j < C; j++)
                    m = p[j] > m ? p[j] : m;
                for (int64_t j = 0; j < C; j++)
                    s += row[j] = expf(p[j] - m);
                for (int64_t j = 0; j < C; j++)
                    row[j] /= s;
                p = row;
            }
            if (L->lab_numel == L->rows) {
                int64_t t = L->lab_dt == RT_I32 ? ((const int32_t *)lab)[i * R + r]
                                                : (int64_t)((const float *)lab)[i * R + r];
                if (t < 0 || t >= C)
                    t = 0;
                scat += rt__argmax_row(p, C) == t;
                stopk += rt__in_top_k(p, C, t, 5);
                /* one value per row (a single sigmoid or regression
                 * output) is also a label of the output's shape */
                if (L->lab_numel != L->out_numel)
                    continue;
            }
            const int64_t off = i * E + r * C;
            float tv[4096];
            for (int64_t j = 0; j < C && j < 4096; j++)
                tv[j] = L->lab_dt == RT_I32 ? (float)((const int32_t *)lab)[off + j]
                                            : ((const float *)lab)[off + j];
            const int64_t ta = rt__argmax_row(tv, C);
            cat += rt__argmax_row(p, C) == ta;
            topk += rt__in_top_k(p, C, ta, 5);
            for (int64_t j = 0; j < C; j++) {
                const double d = (double)p[j] - tv[j];
                bin += (p[j] > 0.5f ? 1.0f : 0.0f) == tv[j];
                ae += fabs(d);
                se += d * d;
                if (metrics & (RT_METRIC_PRECISION | RT_METRIC_RECALL)) {
                    const int pp = p[j] > 0.5f, tt = tv[j] != 0.0f;
                    a->tp += pp && tt;
                    a->fp += pp && !tt;
                    a->fn += !pp && tt;
                }
                if (metrics & RT_METRIC_AUC) {
                    const int tt = tv[j] != 0.0f;
                    if (tt)
                        a->pos += 1;
                    else
                        a->neg += 1;
                    /* thresholds t_k = k / 199 for k = 1..198, and -eps /
                     * 1+eps at the ends: p > t_k for k below a bound */
                    for (int k = 0; k < RT__AUC_T; k++) {
                        const double th = k == 0               ? -1e-7
                                          : k == RT__AUC_T - 1 ? 1.0 + 1e-7
                                                               : (double)k / (RT__AUC_T - 1);
                        if ((double)p[j] > th) {
                            if (tt)
                                a->auc_tp[k] += 1;
                            else
                                a->auc_fp[k] += 1;
                        } else {
                            break; /* thresholds rise: none above */
                        }
                    }
                }
            }
        }
        const double inv_r = 1.0 / (double)R, inv_e = 1.0 / (double)E;
        a->sum[1] += bin * inv_e;
        a->sum[2] += cat * inv_r;
        a->sum[3] += scat * inv_r;
        a->sum[4] += topk * inv_r;
        a->sum[5] += stopk * inv_r;
        a->sum[6] += ae * inv_e;
        a->sum[7] += se * inv_e;
        a->sq += se;
        a->elems += (double)E;
    }
    a->n += n;
}
