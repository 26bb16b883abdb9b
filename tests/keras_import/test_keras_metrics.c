/*
 * test_keras_metrics.c - the epoch metrics against Keras' definitions,
 * computed here from the model's predictions by a direct (slow) reading of
 * each definition: binary/categorical/sparse accuracy, top-5 (TF's
 * in_top_k), mae, mse, rmse, precision and recall at 0.5, and AUC (ROC,
 * thresholds {-1e-7, 1/199, ..., 198/199, 1+1e-7}, trapezoids). 50
 * samples in batches of 8 check the accumulation across a partial batch;
 * a training epoch with lr 0 must report what evaluate reports.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/rt_test.h"
#include "import_keras.h"
#include "rtrain/rt_error.h"

#define N 50

static uint64_t rs = 88172645463325252ull;
static double urand(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (double)(rs >> 11) / 9007199254740992.0;
}

static rt_exec *model(const char *act, int units, const char *loss, const char *const *mets,
                      int label_dims, rt_dtype ldt)
{
    char js[1024];
    snprintf(js, sizeof js,
             "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": ["
             "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 6], \"name\": \"x\"}},"
             "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": %d, \"activation\": \"%s\","
             " \"kernel_initializer\": {\"class_name\": \"RandomNormal\", \"config\": {\"stddev\": 1.0}}}}]}}",
             units, act);
    rt_graph *g = NULL;
    char err[512];
    REQUIRE(rt_keras_import(js, strlen(js), &g, err, sizeof err) == 0);
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    REQUIRE(rt_loss_from_name(loss, &cfg.loss) == 0);
    cfg.label_dtype = ldt;
    cfg.label_ndim = label_dims > 0 ? 1 : 0;
    cfg.label_dims[0] = label_dims;
    cfg.batch_size = 8;
    cfg.opt = RT_OPT_SGD;
    cfg.lr = 0;
    cfg.shuffle = 0;
    cfg.metrics = 0;
    for (int i = 0; mets[i]; i++) {
        uint32_t b;
        REQUIRE(rt_metric_from_name(mets[i], &b) == 0);
        cfg.metrics |= b;
    }
    rt_plan *p = NULL;
    int rc = rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err);
    if (rc < 0) fprintf(stderr, "compile: %s\n", err);
    REQUIRE(rc == 0);
    rt_exec *e = NULL;
    REQUIRE(rt_exec_create(p, &e) == 0);
    rt_plan_release(p);
    rt_graph_destroy(g);
    return e;
}

static double value_of(const rt_metrics *m, const char *name)
{
    uint32_t b;
    REQUIRE(rt_metric_from_name(name, &b) == 0);
    for (int i = 0; i < m->n_values; i++)
        if (m->value_bit[i] == b) return m->values[i];
    fprintf(stderr, "no value for %s\n", name);
    rt_test_failures++;
    return NAN;
}

static void expect(const rt_metrics *m, const char *name, double want)
{
    double got = value_of(m, name);
    if (!(fabs(got - want) <= 1e-6 + 1e-6 * fabs(want))) {
        fprintf(stderr, "%s: %.9g, want %.9g\n", name, got, want);
        rt_test_failures++;
    }
}

static rt_metrics train_epoch_metrics;
static int on_step(void *ud, const rt_step_info *info)
{
    (void)ud;
    if (info->epoch_end) train_epoch_metrics = info->epoch_metrics;
    return 0;
}

/* sigmoid outputs, multi-hot labels */
static void test_binary(void)
{
    static const char *const mets[] = {"binary_accuracy", "auc", "precision", "recall", "mae",
                                       "mse", "rmse", NULL};
    const int K = 4;
    rt_exec *e = model("sigmoid", K, "binary_crossentropy", mets, K, RT_F32);
    float x[N * 6], y[N * K], p[N * K];
    for (int i = 0; i < N * 6; i++) x[i] = (float)(2 * urand() - 1);
    for (int i = 0; i < N * K; i++) y[i] = urand() < 0.4 ? 1.0f : 0.0f;
    CHECK_RC(rt_exec_predict(e, x, N, p));
    double bin = 0, ae = 0, se = 0, tp = 0, fp = 0, fn = 0;
    for (int i = 0; i < N * K; i++) {
        bin += ((p[i] > 0.5f) ? 1.0f : 0.0f) == y[i];
        ae += fabs((double)p[i] - y[i]);
        se += ((double)p[i] - y[i]) * ((double)p[i] - y[i]);
        tp += p[i] > 0.5f && y[i] != 0;
        fp += p[i] > 0.5f && y[i] == 0;
        fn += !(p[i] > 0.5f) && y[i] != 0;
    }
    double tpr[200], fpr[200], pos = 0, neg = 0;
    for (int i = 0; i < N * K; i++) *(y[i] != 0 ? &pos : &neg) += 1;
    for (int k = 0; k < 200; k++) {
        double th = k == 0 ? -1e-7 : k == 199 ? 1 + 1e-7 : (double)k / 199, t = 0, f = 0;
        for (int i = 0; i < N * K; i++)
            if ((double)p[i] > th) *(y[i] != 0 ? &t : &f) += 1;
        tpr[k] = t / pos;
        fpr[k] = f / neg;
    }
    double auc = 0;
    for (int k = 0; k < 199; k++) auc += (fpr[k] - fpr[k + 1]) * (tpr[k] + tpr[k + 1]) / 2;
    rt_data d = {.x = x, .y = y, .y_dtype = RT_F32, .n = N};
    rt_metrics m;
    CHECK_RC(rt_exec_evaluate(e, &d, &m));
    expect(&m, "binary_accuracy", bin / (N * K));
    expect(&m, "mae", ae / (N * K));
    expect(&m, "mse", se / (N * K));
    expect(&m, "rmse", sqrt(se / (N * K)));
    expect(&m, "precision", tp / (tp + fp));
    expect(&m, "recall", tp / (tp + fn));
    expect(&m, "auc", auc);
    CHECK(auc > 0.2 && auc < 0.8); /* random labels: an area near 0.5 */
    /* an epoch of training (lr 0) accumulates the same */
    rt_train_result r;
    memset(&train_epoch_metrics, 0, sizeof train_epoch_metrics);
    CHECK_RC(rt_exec_train(e, &d, (N + 7) / 8, &r, on_step, NULL, NULL));
    CHECK(train_epoch_metrics.n_values == 7);
    for (int i = 0; i < 7 && i < train_epoch_metrics.n_values; i++)
        CHECK(fabs(train_epoch_metrics.values[i] - m.values[i]) < 1e-9);
    rt_exec_destroy(e);
}

/* softmax outputs: one-hot and sparse labels, top-5 */
static void test_categorical(void)
{
    const int K = 7;
    static const char *const mo[] = {"categorical_accuracy", "top_k_categorical_accuracy", NULL};
    static const char *const ms[] = {"sparse_categorical_accuracy",
                                     "sparse_top_k_categorical_accuracy", NULL};
    rt_exec *eo = model("softmax", K, "categorical_crossentropy", mo, K, RT_F32);
    rt_exec *es = model("softmax", K, "sparse_categorical_crossentropy", ms, 0, RT_I32);
    float x[N * 6], yo[N * K], p[N * K];
    int32_t ys[N];
    for (int i = 0; i < N * 6; i++) x[i] = (float)(2 * urand() - 1);
    memset(yo, 0, sizeof yo);
    for (int i = 0; i < N; i++) {
        ys[i] = (int32_t)(urand() * K) % K;
        yo[i * K + ys[i]] = 1;
    }
    /* both models share the seed and the layer: the same predictions */
    CHECK_RC(rt_exec_predict(eo, x, N, p));
    double top1 = 0, top5 = 0;
    for (int i = 0; i < N; i++) {
        const float *q = p + i * K;
        int best = 0, above = 0;
        for (int j = 1; j < K; j++) best = q[j] > q[best] ? j : best;
        for (int j = 0; j < K; j++) above += q[j] > q[ys[i]];
        top1 += best == ys[i];
        top5 += above < 5;
    }
    rt_data d = {.x = x, .y = yo, .y_dtype = RT_F32, .n = N};
    rt_metrics m;
    CHECK_RC(rt_exec_evaluate(eo, &d, &m));
    expect(&m, "categorical_accuracy", top1 / N);
    expect(&m, "top_k_categorical_accuracy", top5 / N);
    rt_data ds = {.x = x, .y = ys, .y_dtype = RT_I32, .n = N};
    CHECK_RC(rt_exec_evaluate(es, &ds, &m));
    expect(&m, "sparse_categorical_accuracy", top1 / N);
    expect(&m, "sparse_top_k_categorical_accuracy", top5 / N);
    rt_exec_destroy(eo);
    rt_exec_destroy(es);
}

/* A state saved in mid-epoch carries the epoch's metric sums (AUC's
 * histograms, precision's counts, ...): the exec it is loaded into reports
 * the epoch's metrics bit for bit as one that ran the epoch in one go. */
static void test_resume_mid_epoch(void)
{
    static const char *const mets[] = {"auc", "precision", "recall", "rmse", "mae", NULL};
    const int K = 3;
    float x[N * 6], y[N * K];
    for (int i = 0; i < N * 6; i++) x[i] = (float)(2 * urand() - 1);
    for (int i = 0; i < N * K; i++) y[i] = urand() < 0.5 ? 1.0f : 0.0f;
    rt_data d = {.x = x, .y = y, .y_dtype = RT_F32, .n = N};
    const int64_t spe = (N + 7) / 8, first = 3;
    rt_train_result r;
    rt_exec *whole = model("sigmoid", K, "binary_crossentropy", mets, K, RT_F32);
    memset(&train_epoch_metrics, 0, sizeof train_epoch_metrics);
    CHECK_RC(rt_exec_train(whole, &d, spe, &r, on_step, NULL, NULL));
    rt_metrics want = train_epoch_metrics;
    CHECK(want.n_values == 5);
    rt_exec *a = model("sigmoid", K, "binary_crossentropy", mets, K, RT_F32);
    CHECK_RC(rt_exec_train(a, &d, first, &r, NULL, NULL, NULL));
    size_t n = rt_exec_state_size(a);
    void *blob = malloc(n);
    REQUIRE(blob);
    CHECK_RC(rt_exec_save_state(a, blob, n));
    rt_exec_destroy(a);
    rt_exec *b = model("sigmoid", K, "binary_crossentropy", mets, K, RT_F32);
    CHECK_RC(rt_exec_load_state(b, blob, n));
    memset(&train_epoch_metrics, 0, sizeof train_epoch_metrics);
    CHECK_RC(rt_exec_train(b, &d, spe - first, &r, on_step, NULL, NULL));
    CHECK(train_epoch_metrics.n_values == want.n_values);
    for (int i = 0; i < want.n_values && i < train_epoch_metrics.n_values; i++)
        if (memcmp(&train_epoch_metrics.values[i], &want.values[i], sizeof(double))) {
            fprintf(stderr, "metric %d: %.17g after the resume, %.17g in one go\n", i,
                    train_epoch_metrics.values[i], want.values[i]);
            rt_test_failures++;
        }
    free(blob);
    rt_exec_destroy(b);
    rt_exec_destroy(whole);
}

/* a metric the labels cannot serve is a compile error */
static void test_bad(void)
{
    rt_graph *g = NULL;
    char err[512];
    const char *js = "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": ["
                     "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 6], \"name\": \"x\"}},"
                     "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 3}}]}}";
    REQUIRE(rt_keras_import(js, strlen(js), &g, err, sizeof err) == 0);
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.metrics = RT_METRIC_AUC; /* sparse labels by default */
    cfg.from_logits = 1;         /* the Dense output is logits */
    rt_plan *p = NULL;
    CHECK(rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err) == RT_ESHAPE && strstr(err, "auc"));
    uint32_t b;
    CHECK(rt_metric_from_name("f1_macro_bogus", &b) == RT_EINVAL);
    CHECK(rt_metric_from_name("AUC", &b) == 0 && b == RT_METRIC_AUC);
    rt_graph_destroy(g);
}

int main(void)
{
    test_binary();
    test_categorical();
    test_resume_mid_epoch();
    test_bad();
    return rt_test_done("keras_metrics");
}
