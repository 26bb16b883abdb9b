/*
 * rt_metrics.c - Keras' metrics: names, checks and the values at the end;
 * each backend accumulates them (server/kernels/cpu/rt_kern_metrics.c). Keras' metrics, accumulated over an epoch (or an
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

static const struct {
    const char *name;
    uint32_t bit;
} rt__metric_tab[] = {
    {"accuracy", RT_METRIC_ACCURACY},
    {"acc", RT_METRIC_ACCURACY},
    {"binary_accuracy", RT_METRIC_BINARY_ACCURACY},
    {"categorical_accuracy", RT_METRIC_CATEGORICAL_ACCURACY},
    {"sparse_categorical_accuracy", RT_METRIC_SPARSE_CATEGORICAL_ACCURACY},
    {"top_k_categorical_accuracy", RT_METRIC_TOP_K},
    {"sparse_top_k_categorical_accuracy", RT_METRIC_SPARSE_TOP_K},
    {"mae", RT_METRIC_MAE},
    {"mean_absolute_error", RT_METRIC_MAE},
    {"mse", RT_METRIC_MSE},
    {"mean_squared_error", RT_METRIC_MSE},
    {"rmse", RT_METRIC_RMSE},
    {"root_mean_squared_error", RT_METRIC_RMSE},
    {"auc", RT_METRIC_AUC},
    {"precision", RT_METRIC_PRECISION},
    {"recall", RT_METRIC_RECALL},
};
#define RT__N_METRIC_TAB (sizeof rt__metric_tab / sizeof rt__metric_tab[0])

int rt_metric_from_name(const char *name, uint32_t *bit)
{
    if (!name)
        return RT_EINVAL;
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
        if (rt__metric_tab[i].bit == bit)
            return rt__metric_tab[i].name;
    return NULL;
}

/* which metrics need labels of the output's shape, which one class per row */
#define RT__DENSE_LAB                                                                       \
    (RT_METRIC_BINARY_ACCURACY | RT_METRIC_CATEGORICAL_ACCURACY | RT_METRIC_TOP_K |         \
     RT_METRIC_MAE | RT_METRIC_MSE | RT_METRIC_RMSE | RT_METRIC_AUC | RT_METRIC_PRECISION | \
     RT_METRIC_RECALL)
#define RT__SPARSE_LAB (RT_METRIC_SPARSE_CATEGORICAL_ACCURACY | RT_METRIC_SPARSE_TOP_K)

int rt__metrics_check(const rt__lossinfo *L, uint32_t metrics, char *err, size_t errlen)
{
    if ((metrics & (RT__DENSE_LAB | RT__SPARSE_LAB)) && L->classes > 4096) {
        snprintf(err, errlen, "metrics over more than 4096 classes per row are not supported");
        return RT_EUNIMPLEMENTED;
    }
    for (int b = 1; b < RT_METRIC_MAX; b++) {
        const uint32_t bit = 1u << b;
        if (!(metrics & bit))
            continue;
        if ((bit & RT__DENSE_LAB) && L->lab_numel != L->out_numel) {
            snprintf(err, errlen,
                     "metric %s needs labels of the output's shape (%lld values "
                     "per sample), not %lld",
                     rt_metric_name(bit), (long long)L->out_numel, (long long)L->lab_numel);
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

/* metric values appended to out (value_head head) */
static void rt__metrics_append(uint32_t metrics, const rt__macc *a, int head, rt_metrics *out)
{
    for (int b = 1; b < RT_METRIC_MAX; b++) {
        const uint32_t bit = 1u << b;
        if (!(metrics & bit))
            continue;
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
        if (out->n_values >= RT_METRIC_VALUES)
            return; /* compile keeps within */
        out->value_bit[out->n_values] = bit;
        out->value_head[out->n_values] = (int8_t)head;
        out->values[out->n_values++] = v;
    }
}

void rt__metrics_values(uint32_t metrics, const rt__macc *a, rt_metrics *out)
{
    out->n_values = 0;
    rt__metrics_append(metrics, a, -1, out);
}

/* Keras' per-output values (compile_utils: each output's loss, unweighted,
 * then its metrics, named "<output>_<metric>"); the total loss stays
 * rt_metrics.loss */
void rt__metrics_heads(const rt_plan *p, const rt__hacc *h, int64_t n, rt_metrics *out)
{
    const rt__lossinfo *L = &p->loss;
    const double inv = n > 0 ? 1.0 / (double)n : 0;
    for (int k = 0; k < L->n_heads; k++) {
        if (out->n_values >= RT_METRIC_VALUES)
            return;
        out->value_bit[out->n_values] = RT_METRIC_HEAD_LOSS;
        out->value_head[out->n_values] = (int8_t)k;
        out->values[out->n_values++] = h->loss[k] * inv;
        if (L->head[k].acc && out->n_values < RT_METRIC_VALUES) {
            out->value_bit[out->n_values] = RT_METRIC_ACCURACY;
            out->value_head[out->n_values] = (int8_t)k;
            out->values[out->n_values++] = h->acc[k] * inv;
        }
        rt__metrics_append(p->cfg.heads[k].metrics & ~RT_METRIC_ACCURACY, &h->m[k], k, out);
    }
}

int rt_metric_value_name(const rt_plan *p, const rt_metrics *m, int i, char *out, size_t n)
{
    if (!m || i < 0 || i >= m->n_values || !out)
        return RT_EINVAL;
    const uint32_t bit = m->value_bit[i];
    const char *mn = bit == RT_METRIC_HEAD_LOSS ? "loss" : rt_metric_name(bit);
    if (!mn)
        return RT_EINVAL;
    if (m->value_head[i] < 0)
        return snprintf(out, n, "%s", mn);
    const char *hn = rt_plan_head_name(p, m->value_head[i]);
    if (!hn)
        return RT_EINVAL;
    return snprintf(out, n, "%s_%s", hn, mn);
}
