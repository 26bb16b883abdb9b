/*
 * rt_metrics.c - Keras' metrics, accumulated over an epoch (or an
 * evaluation) the way Keras' metric objects are: the mean-wrapper metrics
 * (accuracies, mae, mse) sum a per-sample value (the mean over the
 * sample's rows and classes) and divide by the samples; RMSE divides the
 * summed squared error by the element count before the root; AUC, precision
 * and recall keep confusion counts over every element (Keras flattens
 * multi-label outputs) and compute the ratio at the end. AUC is Keras'
 * default: ROC over 200 thresholds {-1e-7, 1/199, ..., 198/199, 1 + 1e-7},
 * a prediction above a threshold is positive, and the area is the
 * trapezoidal ("interpolation") sum over the thresholds.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "rt_engine_impl.h"

static const struct { const char *name; uint32_t bit; } rt__metric_tab[] = {
    {"accuracy", RT_METRIC_ACCURACY}, {"acc", RT_METRIC_ACCURACY},
    {"binary_accuracy", RT_METRIC_BINARY_ACCURACY},
    {"categorical_accuracy", RT_METRIC_CATEGORICAL_ACCURACY},
    {"sparse_categorical_accuracy", RT_METRIC_SPARSE_CATEGORICAL_ACCURACY},
    {"top_k_categorical_accuracy", RT_METRIC_TOP_K},
    {"sparse_top_k_categorical_accuracy", RT_METRIC_SPARSE_TOP_K},
    {"mae", RT_METRIC_MAE}, {"mean_absolute_error", RT_METRIC_MAE},
    {"mse", RT_METRIC_MSE}, {"mean_squared_error", RT_METRIC_MSE},
    {"rmse", RT_METRIC_RMSE}, {"root_mean_squared_error", RT_METRIC_RMSE},
    {"auc", RT_METRIC_AUC}, {"precision", RT_METRIC_PRECISION},
    {"recall", RT_METRIC_RECALL},
};
#define RT__N_METRIC_TAB (sizeof rt__metric_tab / sizeof rt__metric_tab[0])

int rt_metric_from_name(const char *name, uint32_t *bit)
{
    if (!name) return RT_EINVAL;
    for (size_t i = 0; i < RT__N_METRIC_TAB; i++)
        if (strcasecmp(name, rt__metric_tab[i].name) == 0) {
            *bit = rt__metric_tab[i].bit;
            return 0;
        }
    return RT_EINVAL;
}

const char *rt_metric_name(uint32_t bit)
{
    for (size_t i = 0; i < RT__N_METRIC_TAB; i++)
        if (rt__metric_tab[i].bit == bit) return rt__metric_tab[i].name;
    return NULL;
}

/* which metrics need labels of the output's shape, which one class per row */
#define RT__DENSE_LAB (RT_METRIC_BINARY_ACCURACY | RT_METRIC_CATEGORICAL_ACCURACY | \
                       RT_METRIC_TOP_K | RT_METRIC_MAE | RT_METRIC_MSE | RT_METRIC_RMSE | \
                       RT_METRIC_AUC | RT_METRIC_PRECISION | RT_METRIC_RECALL)
#define RT__SPARSE_LAB (RT_METRIC_SPARSE_CATEGORICAL_ACCURACY | RT_METRIC_SPARSE_TOP_K)

int rt__metrics_check(const rt__lossinfo *L, uint32_t metrics, char *err, size_t errlen)
{
    if ((metrics & (RT__DENSE_LAB | RT__SPARSE_LAB)) && L->classes > 4096) {
        snprintf(err, errlen, "metrics over more than 4096 classes per row are not supported");
        return RT_EUNIMPLEMENTED;
    }
    for (int b = 1; b < RT_METRIC_MAX; b++) {
        const uint32_t bit = 1u << b;
        if (!(metrics & bit)) continue;
        if ((bit & RT__DENSE_LAB) && L->lab_numel != L->out_numel) {
            snprintf(err, errlen, "metric %s needs labels of the output's shape (%lld values "
                     "per sample), not %lld", rt_metric_name(bit), (long long)L->out_numel,
                     (long long)L->lab_numel);
            return RT_ESHAPE;
        }
        if ((bit & RT__SPARSE_LAB) && L->lab_numel != L->rows) {
            snprintf(err, errlen, "metric %s needs one class label per output row",
                     rt_metric_name(bit));
            return RT_ESHAPE;
        }
    }
    return 0;
}

static int64_t rt__argmax_row(const float *x, int64_t C)
{
    int64_t b = 0;
    for (int64_t j = 1; j < C; j++)
        if (x[j] > x[b]) b = j;
    return b;
}

/* TF's in_top_k: fewer than k predictions strictly above the target's */
static int rt__in_top_k(const float *p, int64_t C, int64_t t, int k)
{
    int above = 0;
    for (int64_t j = 0; j < C; j++) above += p[j] > p[t];
    return above < k;
}

void rt__metrics_update(const rt__lossinfo *L, uint32_t metrics, const float *y,
                        const void *lab, int64_t n, rt__macc *a)
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
                for (int64_t j = 1; j < C; j++) m = p[j] > m ? p[j] : m;
                for (int64_t j = 0; j < C; j++) s += row[j] = expf(p[j] - m);
                for (int64_t j = 0; j < C; j++) row[j] /= s;
                p = row;
            }
            if (L->lab_numel == L->rows) {
                int64_t t = L->lab_dt == RT_I32 ? ((const int32_t *)lab)[i * R + r]
                                                : (int64_t)((const float *)lab)[i * R + r];
                if (t < 0 || t >= C) t = 0;
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
                    if (tt) a->pos += 1; else a->neg += 1;
                    /* thresholds t_k = k / 199 for k = 1..198, and -eps /
                     * 1+eps at the ends: p > t_k for k below a bound */
                    for (int k = 0; k < RT__AUC_T; k++) {
                        const double th = k == 0 ? -1e-7
                                          : k == RT__AUC_T - 1 ? 1.0 + 1e-7
                                          : (double)k / (RT__AUC_T - 1);
                        if ((double)p[j] > th) {
                            if (tt) a->auc_tp[k] += 1; else a->auc_fp[k] += 1;
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

void rt__metrics_values(uint32_t metrics, const rt__macc *a, rt_metrics *out)
{
    out->n_values = 0;
    for (int b = 1; b < RT_METRIC_MAX; b++) {
        const uint32_t bit = 1u << b;
        if (!(metrics & bit)) continue;
        double v = NAN;
        if (b <= 7) {
            v = a->n ? a->sum[b] / (double)a->n : 0;
        } else if (bit == RT_METRIC_RMSE) {
            v = a->elems > 0 ? sqrt(a->sq / a->elems) : 0;
        } else if (bit == RT_METRIC_PRECISION) {
            v = a->tp + a->fp > 0 ? a->tp / (a->tp + a->fp) : 0;
        } else if (bit == RT_METRIC_RECALL) {
            v = a->tp + a->fn > 0 ? a->tp / (a->tp + a->fn) : 0;
        } else if (bit == RT_METRIC_AUC) {
            /* tpr/fpr per threshold (divide_no_nan), trapezoids between
             * neighbouring thresholds */
            double auc = 0;
            for (int k = 0; k + 1 < RT__AUC_T; k++) {
                const double t0 = a->pos > 0 ? a->auc_tp[k] / a->pos : 0,
                             t1 = a->pos > 0 ? a->auc_tp[k + 1] / a->pos : 0,
                             f0 = a->neg > 0 ? a->auc_fp[k] / a->neg : 0,
                             f1 = a->neg > 0 ? a->auc_fp[k + 1] / a->neg : 0;
                auc += (f0 - f1) * (t0 + t1) / 2;
            }
            v = auc;
        }
        out->value_bit[out->n_values] = bit;
        out->values[out->n_values++] = v;
    }
}
