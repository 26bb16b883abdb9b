/*
 * test_keras_params.c - Keras weight settings through the importer:
 *   - initializers: the moments and bounds of each distribution against its
 *     closed form (Keras' definitions), orthogonality, identity, constants,
 *     determinism in the seed;
 *   - regularizers: the loss gains exactly l1 sum|w| + l2 sum w^2 (computed
 *     here in double from the weights), and the gradient of the total loss
 *     passes central finite differences;
 *   - constraints: one SGD step with a constraint equals the same step
 *     without it followed by Keras' formula applied here in double.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/rt_test.h"
#include "import_keras.h"
#include "rtrain/rt_error.h"

/* Sequential: input (in,), Dense(units) with the given extra settings */
static rt_graph *dense_model(int in, int units, const char *extra)
{
    char js[4096];
    snprintf(js, sizeof js,
             "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": ["
             "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, %d], \"name\": \"x\"}},"
             "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": %d%s%s}}]}}",
             in, units, extra[0] ? ", " : "", extra);
    rt_graph *g = NULL;
    char err[1024];
    int rc = rt_keras_import(js, strlen(js), &g, err, sizeof err);
    if (rc < 0)
        fprintf(stderr, "import (%s): %s\n", extra, err);
    REQUIRE(rc == 0);
    return g;
}

static rt_exec *make_exec(rt_graph *g, uint64_t seed, int label_dims)
{
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_MSE;
    cfg.label_dtype = RT_F32;
    cfg.label_ndim = 1;
    cfg.label_dims[0] = label_dims;
    cfg.batch_size = 8;
    cfg.seed = seed;
    cfg.opt = RT_OPT_SGD;
    cfg.lr = 0.5f;
    cfg.metrics = 0;
    cfg.shuffle = 0;
    rt_plan *p = NULL;
    char err[512];
    int rc = rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err);
    if (rc < 0)
        fprintf(stderr, "compile: %s\n", err);
    REQUIRE(rc == 0);
    rt_exec *e = NULL;
    REQUIRE(rt_exec_create(p, &e) == 0);
    rt_plan_release(p);
    return e;
}

typedef struct stats {
    double mean, sd, min, max;
} stats;

static stats moments(const float *w, int64_t n)
{
    stats s = {0, 0, INFINITY, -INFINITY};
    for (int64_t i = 0; i < n; i++) {
        s.mean += w[i];
        s.min = fmin(s.min, w[i]);
        s.max = fmax(s.max, w[i]);
    }
    s.mean /= (double)n;
    for (int64_t i = 0; i < n; i++) s.sd += (w[i] - s.mean) * (w[i] - s.mean);
    s.sd = sqrt(s.sd / (double)(n - 1));
    return s;
}

/* the kernel (IN, OUT) of a Dense with kernel_initializer init */
#define IN 200
#define OUT 300
static float *kernel_of(const char *init, uint64_t seed)
{
    char extra[512];
    snprintf(extra, sizeof extra, "\"kernel_initializer\": %s", init);
    rt_graph *g = dense_model(IN, OUT, extra);
    rt_exec *e = make_exec(g, seed, OUT);
    float *w = malloc(sizeof(float) * IN * OUT);
    CHECK_RC(rt_exec_get_param(e, 0, w));
    rt_exec_destroy(e);
    rt_graph_destroy(g);
    return w;
}

static int near(double a, double b, double rel)
{
    return fabs(a - b) <= rel * fabs(b) + 1e-9;
}

static void test_initializers(void)
{
    const int64_t n = IN * OUT;
    const double trunc_sd = 0.87962566103423978; /* std of N(0,1) cut at +-2 */
    struct {
        const char *init;
        double mean, sd;   /* expected moments */
        double lo, hi;     /* every value in [lo, hi] */
    } cases[] = {
        /* fan_in 200, fan_out 300 */
        {"{\"class_name\": \"VarianceScaling\", \"config\": {\"scale\": 2.0, \"mode\": \"fan_in\", \"distribution\": \"truncated_normal\", \"seed\": null}}",
         0, sqrt(2.0 / IN), -2 * sqrt(2.0 / IN) / trunc_sd, 2 * sqrt(2.0 / IN) / trunc_sd},
        {"{\"class_name\": \"VarianceScaling\", \"config\": {\"scale\": 1.0, \"mode\": \"fan_avg\", \"distribution\": \"uniform\"}}",
         0, sqrt(3.0 / 250) / sqrt(3.0), -sqrt(3.0 / 250), sqrt(3.0 / 250)},
        {"{\"class_name\": \"VarianceScaling\", \"config\": {\"scale\": 0.5, \"mode\": \"fan_out\", \"distribution\": \"untruncated_normal\"}}",
         0, sqrt(0.5 / OUT), -1, 1},
        /* Keras 2.0-2.2: "normal" was the truncated normal */
        {"{\"class_name\": \"VarianceScaling\", \"config\": {\"scale\": 1.0, \"mode\": \"fan_in\", \"distribution\": \"normal\"}}",
         0, sqrt(1.0 / IN), -2 * sqrt(1.0 / IN) / trunc_sd, 2 * sqrt(1.0 / IN) / trunc_sd},
        {"\"lecun_normal\"", 0, sqrt(1.0 / IN), -2 * sqrt(1.0 / IN) / trunc_sd, 2 * sqrt(1.0 / IN) / trunc_sd},
        {"\"lecun_uniform\"", 0, sqrt(1.0 / IN), -sqrt(3.0 / IN), sqrt(3.0 / IN)},
        {"{\"class_name\": \"HeUniform\", \"config\": {\"seed\": 7}}", 0, sqrt(2.0 / IN),
         -sqrt(6.0 / IN), sqrt(6.0 / IN)},
        {"{\"class_name\": \"GlorotNormal\"}", 0, sqrt(2.0 / 500),
         -2 * sqrt(2.0 / 500) / trunc_sd, 2 * sqrt(2.0 / 500) / trunc_sd},
        {"{\"class_name\": \"RandomUniform\", \"config\": {\"minval\": -0.3, \"maxval\": 0.1}}",
         -0.1, 0.4 / sqrt(12.0), -0.3, 0.1},
        {"\"random_uniform\"", 0, 0.1 / sqrt(12.0), -0.05, 0.05},
        {"{\"class_name\": \"RandomNormal\", \"config\": {\"mean\": 1.0, \"stddev\": 0.5}}",
         1.0, 0.5, -10, 10},
        {"{\"class_name\": \"TruncatedNormal\", \"config\": {\"mean\": 0.0, \"stddev\": 0.2}}",
         0, 0.2 * trunc_sd, -0.4, 0.4},
        {"{\"module\": \"keras.initializers\", \"class_name\": \"Constant\", \"config\": {\"value\": 0.7}, \"registered_name\": null}",
         0.7, 0, 0.7 - 1e-7, 0.7 + 1e-7},
        {"\"ones\"", 1, 0, 1, 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        float *w = kernel_of(cases[c].init, 42);
        stats s = moments(w, n);
        /* 60,000 draws: the sample mean is within 4 standard errors, the
         * sample sd within 2% */
        double se = cases[c].sd / sqrt((double)n);
        int ok = fabs(s.mean - cases[c].mean) <= 4 * se + 1e-6 &&
                 near(s.sd, cases[c].sd, 0.02) && s.min >= cases[c].lo && s.max <= cases[c].hi;
        if (!ok) {
            fprintf(stderr, "init %s: mean %g sd %g [%g, %g], want %g %g [%g, %g]\n",
                    cases[c].init, s.mean, s.sd, s.min, s.max, cases[c].mean, cases[c].sd,
                    cases[c].lo, cases[c].hi);
            rt_test_failures++;
        }
        free(w);
    }
    /* the truncated normal reaches near its bounds, the untruncated one
     * past them */
    float *t = kernel_of("\"he_normal\"", 1);
    stats st = moments(t, n);
    CHECK(st.max > 1.9 * sqrt(2.0 / IN) / trunc_sd);
    free(t);
    float *u = kernel_of("{\"class_name\": \"VarianceScaling\", \"config\": {\"scale\": 2.0, \"distribution\": \"untruncated_normal\"}}", 1);
    stats su = moments(u, n);
    CHECK(su.max > 2.5 * sqrt(2.0 / IN));
    free(u);

    /* deterministic in the seed */
    float *a = kernel_of("\"glorot_uniform\"", 5), *b = kernel_of("\"glorot_uniform\"", 5),
          *d = kernel_of("\"glorot_uniform\"", 6);
    CHECK(memcmp(a, b, sizeof(float) * (size_t)n) == 0);
    CHECK(memcmp(a, d, sizeof(float) * (size_t)n) != 0);
    free(a);
    free(b);
    free(d);

    /* Orthogonal (200, 300): rows orthonormal times gain, W W^T = gain^2 I */
    float *o = kernel_of("{\"class_name\": \"Orthogonal\", \"config\": {\"gain\": 1.5, \"seed\": null}}", 3);
    double worst = 0;
    for (int i = 0; i < IN; i++)
        for (int j = i; j < IN; j++) {
            double dot = 0;
            for (int k = 0; k < OUT; k++) dot += (double)o[i * OUT + k] * o[j * OUT + k];
            worst = fmax(worst, fabs(dot - (i == j ? 2.25 : 0)));
        }
    if (!(worst < 1e-4)) {
        fprintf(stderr, "orthogonal: |W W^T - 2.25 I| = %g\n", worst);
        rt_test_failures++;
    }
    free(o);
    /* taller than wide: columns orthonormal */
    {
        rt_graph *g = dense_model(300, 20, "\"kernel_initializer\": \"orthogonal\"");
        rt_exec *e = make_exec(g, 9, 20);
        float *w = malloc(sizeof(float) * 300 * 20);
        CHECK_RC(rt_exec_get_param(e, 0, w));
        double wt = 0;
        for (int i = 0; i < 20; i++)
            for (int j = 0; j < 20; j++) {
                double dot = 0;
                for (int k = 0; k < 300; k++) dot += (double)w[k * 20 + i] * w[k * 20 + j];
                wt = fmax(wt, fabs(dot - (i == j)));
            }
        CHECK(wt < 1e-4);
        free(w);
        rt_exec_destroy(e);
        rt_graph_destroy(g);
    }
    /* Identity(gain 2) */
    float *id = kernel_of("{\"class_name\": \"Identity\", \"config\": {\"gain\": 2.0}}", 3);
    int bad = 0;
    for (int i = 0; i < IN; i++)
        for (int j = 0; j < OUT; j++) bad += id[i * OUT + j] != (i == j ? 2.0f : 0.0f);
    CHECK(bad == 0);
    free(id);
}

/* MultiHeadAttention's kernels with Keras' Orthogonal: Keras draws each on
 * its declared shape (keras/src/initializers/random_initializers.py
 * OrthogonalInitializer: rows prod(shape[:-1]), cols shape[-1]). The query
 * kernel (8, 2, 4) is the (16, 4) matrix with Q^T Q = I; the engine holds
 * it as (8, 8), whose own orthogonal draw gives 2 I on that view. The
 * output kernel (2, 4, 8) is (8, 8) either way; with output_shape [2, 3]
 * it is (2, 4, 2, 3), the (16, 3) matrix (the engine's (8, 6)). */
static double mha_orth_worst(const float *w, int64_t rows, int64_t cols)
{
    double worst = 0;
    for (int64_t i = 0; i < cols; i++)
        for (int64_t j = 0; j < cols; j++) {
            double dot = 0;
            for (int64_t r = 0; r < rows; r++)
                dot += (double)w[r * cols + i] * w[r * cols + j];
            worst = fmax(worst, fabs(dot - (i == j)));
        }
    return worst;
}

static void test_mha_orthogonal(const char *out_shape, int64_t orows, int64_t ocols, int flat)
{
    char js[4096];
    snprintf(js, sizeof js,
             "{\"class_name\": \"Functional\", \"config\": {\"name\": \"m\", \"layers\": ["
             "{\"class_name\": \"InputLayer\", \"name\": \"x\", \"inbound_nodes\": [], \"config\": "
             "{\"batch_input_shape\": [null, 5, 8], \"name\": \"x\"}},"
             "{\"class_name\": \"MultiHeadAttention\", \"name\": \"mha\", \"config\": {\"name\": "
             "\"mha\", \"num_heads\": 2, \"key_dim\": 4, \"output_shape\": %s, "
             "\"kernel_initializer\": {\"class_name\": \"Orthogonal\", \"config\": {\"gain\": 1.0}}},"
             " \"inbound_nodes\": [[[\"x\", 0, 0, {\"value\": [\"x\", 0, 0]}]]]},"
             "{\"class_name\": \"Flatten\", \"name\": \"f\", \"config\": {\"name\": \"f\"}, "
             "\"inbound_nodes\": [[[\"mha\", 0, 0, {}]]]}],"
             " \"input_layers\": [[\"x\", 0, 0]], \"output_layers\": [[\"f\", 0, 0]]}}",
             out_shape);
    rt_graph *g = NULL;
    char err[1024];
    if (rt_keras_import(js, strlen(js), &g, err, sizeof err) < 0)
        fprintf(stderr, "import: %s\n", err);
    REQUIRE(g != NULL);
    rt_exec *e = make_exec(g, 17, flat); /* labels: the Flatten of (5, O...) */
    const rt_plan *p = rt_exec_plan(e);
    int seen = 0;
    for (int i = 0; i < rt_plan_n_params(p); i++) {
        const char *name;
        int64_t d[RT_MAX_DIMS];
        int nd = rt_plan_param_info(p, i, &name, d, NULL);
        int64_t rows = 1, cols = d[nd - 1];
        for (int k = 0; k + 1 < nd; k++)
            rows *= d[k];
        const int q = !strcmp(name, "mha/query/kernel"), o = !strcmp(name, "mha/attention_output/kernel");
        if (!q && !o)
            continue;
        seen++;
        /* the declared Keras shapes */
        CHECK(q ? nd == 3 && d[0] == 8 && d[1] == 2 && d[2] == 4 : rows == orows && cols == ocols);
        float *w = malloc(sizeof(float) * (size_t)(rows * cols));
        CHECK_RC(rt_exec_get_param(e, i, w));
        double worst = mha_orth_worst(w, rows, cols);
        if (!(worst < 1e-5)) {
            fprintf(stderr, "MHA %s (output_shape %s): |Q^T Q - I| = %g on (%lld, %lld)\n", name,
                    out_shape, worst, (long long)rows, (long long)cols);
            rt_test_failures++;
        }
        free(w);
    }
    CHECK(seen == 2);
    rt_exec_destroy(e);
    rt_graph_destroy(g);
}

/* data for the regularizer/constraint checks: 8 samples */
static float X[8 * 6], Y[8 * 5];
static void make_data(void)
{
    uint64_t s = 12345;
    for (int i = 0; i < 8 * 6; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        X[i] = (float)((s >> 40) % 2000) / 1000.0f - 1.0f;
    }
    for (int i = 0; i < 8 * 5; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        Y[i] = (float)((s >> 40) % 1000) / 1000.0f;
    }
}

static void test_regularizers(void)
{
    const char *reg = "\"kernel_regularizer\": {\"class_name\": \"L1L2\", \"config\": {\"l1\": 0.01, \"l2\": 0.02}},"
                      " \"bias_regularizer\": {\"class_name\": \"L2\", \"config\": {\"l2\": 0.05}},"
                      " \"bias_initializer\": {\"class_name\": \"Constant\", \"config\": {\"value\": 0.3}}";
    rt_graph *g0 = dense_model(6, 5, "\"bias_initializer\": {\"class_name\": \"Constant\", \"config\": {\"value\": 0.3}}");
    rt_graph *g1 = dense_model(6, 5, reg);
    rt_exec *e0 = make_exec(g0, 11, 5), *e1 = make_exec(g1, 11, 5);
    CHECK(rt_plan_report(rt_exec_plan(e1))->n_regularized == 2);
    CHECK(rt_plan_report(rt_exec_plan(e0))->n_regularized == 0);
    rt_data d = {.x = X, .y = Y, .y_dtype = RT_F32, .n = 8};
    double l0, l1;
    CHECK_RC(rt_exec_compute_grads(e0, &d, 8, &l0));
    CHECK_RC(rt_exec_compute_grads(e1, &d, 8, &l1));
    float w[30], b[5];
    CHECK_RC(rt_exec_get_param(e1, 0, w));
    CHECK_RC(rt_exec_get_param(e1, 1, b));
    double pen = 0;
    for (int i = 0; i < 30; i++) pen += 0.01 * fabs(w[i]) + 0.02 * (double)w[i] * w[i];
    for (int i = 0; i < 5; i++) pen += 0.05 * (double)b[i] * b[i];
    if (!(fabs((l1 - l0) - pen) < 1e-6)) {
        fprintf(stderr, "regularized loss - loss = %.9g, want %.9g\n", l1 - l0, pen);
        rt_test_failures++;
    }
    /* the gradient of the total, kernel and bias */
    rt_test_fd_param(e1, &d, 8, 0, 0, 1e-4, "reg kernel");
    rt_test_fd_param(e1, &d, 8, 1, 0, 1e-4, "reg bias");
    /* evaluate reports the same total */
    rt_metrics m;
    CHECK_RC(rt_exec_evaluate(e1, &d, &m));
    CHECK(fabs(m.loss - l1) < 1e-5);
    rt_exec_destroy(e0);
    rt_exec_destroy(e1);
    rt_graph_destroy(g0);
    rt_graph_destroy(g1);
    /* the string forms: Keras' 0.01 */
    rt_graph *g2 = dense_model(6, 5, "\"kernel_regularizer\": \"l2\"");
    rt_graph *g3 = dense_model(6, 5, "");
    rt_exec *e2 = make_exec(g2, 11, 5), *e3 = make_exec(g3, 11, 5);
    double l2s, l3s;
    CHECK_RC(rt_exec_compute_grads(e2, &d, 8, &l2s));
    CHECK_RC(rt_exec_compute_grads(e3, &d, 8, &l3s));
    CHECK_RC(rt_exec_get_param(e2, 0, w));
    double p2 = 0;
    for (int i = 0; i < 30; i++) p2 += 0.01 * (double)w[i] * w[i];
    CHECK(fabs((l2s - l3s) - p2) < 1e-6);
    rt_exec_destroy(e2);
    rt_exec_destroy(e3);
    rt_graph_destroy(g2);
    rt_graph_destroy(g3);
}

/* Keras' constraint on a (R, C) kernel stored row-major, norms over axis 0
 * (each column) or axis 1 (each row) */
static void keras_constrain(double *w, int R, int C, int axis, const char *kind, double lo,
                            double hi, double rate)
{
    int nslice = axis == 0 ? C : R, len = axis == 0 ? R : C;
    for (int s = 0; s < nslice; s++) {
        double ss = 0;
        for (int k = 0; k < len; k++) {
            double v = axis == 0 ? w[k * C + s] : w[s * C + k];
            ss += v * v;
        }
        double n = sqrt(ss), want;
        if (!strcmp(kind, "max")) want = fmin(n, hi);
        else if (!strcmp(kind, "unit")) want = 1;
        else want = rate * fmin(fmax(n, lo), hi) + (1 - rate) * n;
        double f = want / (1e-7 + n);
        for (int k = 0; k < len; k++) {
            if (axis == 0) w[k * C + s] *= f;
            else w[s * C + k] *= f;
        }
    }
}

static void test_constraints(void)
{
    struct {
        const char *setting, *kind;
        int axis;
        double lo, hi, rate;
    } cases[] = {
        {"{\"class_name\": \"MaxNorm\", \"config\": {\"max_value\": 0.5, \"axis\": 0}}", "max", 0, 0, 0.5, 1},
        {"{\"class_name\": \"MaxNorm\", \"config\": {\"max_value\": 0.4, \"axis\": 1}}", "max", 1, 0, 0.4, 1},
        {"{\"class_name\": \"UnitNorm\", \"config\": {\"axis\": 0}}", "unit", 0, 0, 0, 1},
        {"{\"class_name\": \"MinMaxNorm\", \"config\": {\"min_value\": 1.0, \"max_value\": 1.2, \"rate\": 0.5, \"axis\": 0}}", "minmax", 0, 1.0, 1.2, 0.5},
        {"{\"class_name\": \"NonNeg\", \"config\": {}}", "nonneg", 0, 0, 0, 1},
        /* Keras 1 */
        {"{\"name\": \"MaxNorm\", \"m\": 0.3, \"axis\": 0}", "max", 0, 0, 0.3, 1},
    };
    rt_data d = {.x = X, .y = Y, .y_dtype = RT_F32, .n = 8};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char extra[512];
        snprintf(extra, sizeof extra, "\"kernel_constraint\": %s", cases[c].setting);
        rt_graph *g0 = dense_model(6, 5, ""), *g1 = dense_model(6, 5, extra);
        rt_exec *e0 = make_exec(g0, 21, 5), *e1 = make_exec(g1, 21, 5);
        CHECK(rt_plan_report(rt_exec_plan(e1))->n_constrained == 1);
        rt_train_result r;
        CHECK_RC(rt_exec_train(e0, &d, 1, &r, NULL, NULL, NULL));
        CHECK_RC(rt_exec_train(e1, &d, 1, &r, NULL, NULL, NULL));
        float w0[30], w1[30];
        double ref[30];
        CHECK_RC(rt_exec_get_param(e0, 0, w0));
        CHECK_RC(rt_exec_get_param(e1, 0, w1));
        for (int i = 0; i < 30; i++) ref[i] = w0[i];
        if (!strcmp(cases[c].kind, "nonneg"))
            for (int i = 0; i < 30; i++) ref[i] = fmax(ref[i], 0);
        else
            keras_constrain(ref, 6, 5, cases[c].axis, cases[c].kind, cases[c].lo, cases[c].hi,
                            cases[c].rate);
        double worst = 0;
        int changed = 0;
        for (int i = 0; i < 30; i++) {
            worst = fmax(worst, fabs(ref[i] - w1[i]));
            changed |= w0[i] != w1[i];
        }
        if (!(worst < 1e-6) || !changed) {
            fprintf(stderr, "constraint %s: |w - keras| = %g, changed %d\n", cases[c].setting,
                    worst, changed);
            rt_test_failures++;
        }
        rt_exec_destroy(e0);
        rt_exec_destroy(e1);
        rt_graph_destroy(g0);
        rt_graph_destroy(g1);
    }
}

/* a conv kernel (3, 3, 2, 4) with MaxNorm over axes [0, 1, 2]: each
 * filter's norm is at most the bound after a step */
static void test_conv_constraint(void)
{
    const char *js =
        "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": ["
        "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 5, 5, 2], \"name\": \"x\"}},"
        "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", \"filters\": 4, \"kernel_size\": [3, 3],"
        " \"kernel_initializer\": {\"class_name\": \"RandomNormal\", \"config\": {\"stddev\": 1.0}},"
        " \"kernel_constraint\": {\"class_name\": \"MaxNorm\", \"config\": {\"max_value\": 0.25, \"axis\": [0, 1, 2]}}}},"
        "{\"class_name\": \"Flatten\", \"config\": {\"name\": \"f\"}}]}}";
    rt_graph *g = NULL;
    char err[512];
    REQUIRE(rt_keras_import(js, strlen(js), &g, err, sizeof err) == 0);
    rt_exec *e = make_exec(g, 3, 36);
    float x[8 * 50], y[8 * 36];
    for (int i = 0; i < 8 * 50; i++) x[i] = (float)((i * 37) % 19) / 19.0f;
    for (int i = 0; i < 8 * 36; i++) y[i] = 0.1f;
    rt_data d = {.x = x, .y = y, .y_dtype = RT_F32, .n = 8};
    rt_train_result r;
    CHECK_RC(rt_exec_train(e, &d, 1, &r, NULL, NULL, NULL));
    float w[72];
    CHECK_RC(rt_exec_get_param(e, 0, w));
    for (int f = 0; f < 4; f++) {
        double ss = 0;
        for (int k = 0; k < 18; k++) ss += (double)w[k * 4 + f] * w[k * 4 + f];
        CHECK(sqrt(ss) <= 0.25 + 1e-6 && sqrt(ss) > 0.2);
    }
    rt_exec_destroy(e);
    rt_graph_destroy(g);
}

/* an LSTM's kernel, recurrent kernel and bias regularizers: the loss gains
 * the sum over its three weights, and the recurrent kernel is Orthogonal
 * over Keras' (units, 4 units) */
static void test_lstm_regularizer(void)
{
    const char *fmt =
        "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": ["
        "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 4, 3], \"name\": \"x\"}},"
        "{\"class_name\": \"LSTM\", \"config\": {\"name\": \"l\", \"units\": 5,"
        " \"recurrent_initializer\": {\"class_name\": \"Orthogonal\", \"config\": {\"gain\": 1.0}}%s}}]}}";
    char a[2048], b[2048];
    snprintf(a, sizeof a, fmt, "");
    snprintf(b, sizeof b, fmt, ", \"kernel_regularizer\": {\"class_name\": \"L2\", \"config\": {\"l2\": 0.03}},"
             " \"recurrent_regularizer\": {\"class_name\": \"L1\", \"config\": {\"l1\": 0.02}}");
    rt_graph *g0 = NULL, *g1 = NULL;
    char err[1024];
    int rc = rt_keras_import(a, strlen(a), &g0, err, sizeof err);
    if (rc == 0) rc = rt_keras_import(b, strlen(b), &g1, err, sizeof err);
    if (rc < 0) fprintf(stderr, "lstm import: %s\n", err);
    REQUIRE(rc == 0);
    rt_exec *e0 = make_exec(g0, 4, 5), *e1 = make_exec(g1, 4, 5);
    float x[8 * 12], y[8 * 5];
    for (int i = 0; i < 8 * 12; i++) x[i] = X[i % 48];
    for (int i = 0; i < 8 * 5; i++) y[i] = Y[i];
    rt_data d = {.x = x, .y = y, .y_dtype = RT_F32, .n = 8};
    double l0, l1;
    CHECK_RC(rt_exec_compute_grads(e0, &d, 8, &l0));
    CHECK_RC(rt_exec_compute_grads(e1, &d, 8, &l1));
    float k[3 * 20], r[5 * 20];
    CHECK_RC(rt_exec_get_param(e1, 0, k));
    CHECK_RC(rt_exec_get_param(e1, 1, r));
    double pen = 0;
    for (int i = 0; i < 60; i++) pen += 0.03 * (double)k[i] * k[i];
    for (int i = 0; i < 100; i++) pen += 0.02 * fabs(r[i]);
    CHECK(fabs((l1 - l0) - pen) < 1e-6);
    /* (5, 20): rows orthonormal */
    double worst = 0;
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 5; j++) {
            double dot = 0;
            for (int c = 0; c < 20; c++) dot += (double)r[i * 20 + c] * r[j * 20 + c];
            worst = fmax(worst, fabs(dot - (i == j)));
        }
    CHECK(worst < 1e-5);
    rt_test_fd_param(e1, &d, 8, 1, 0, 1e-4, "lstm recurrent reg");
    rt_exec_destroy(e0);
    rt_exec_destroy(e1);
    rt_graph_destroy(g0);
    rt_graph_destroy(g1);
}

/* the param named name of e (its index; *n: its size) */
static int param_named(rt_exec *e, const char *name, int64_t *n)
{
    const rt_plan *p = rt_exec_plan(e);
    for (int i = 0; i < rt_plan_n_params(p); i++) {
        const char *nm;
        int64_t d[RT_MAX_DIMS];
        int nd = rt_plan_param_info(p, i, &nm, d, NULL);
        if (strcmp(nm, name) == 0) {
            *n = 1;
            for (int k = 0; k < nd; k++) *n *= d[k];
            return i;
        }
    }
    REQUIRE(0 && "param not found");
    return -1;
}

/* A file that names no initializer gets Keras' defaults (Keras 2/3
 * keras/src/layers/rnn/{simple_rnn,lstm,gru}.py: recurrent_initializer=
 * "orthogonal", keras/src/initializers/random_initializers.py Orthogonal
 * gain 1.0, whose (units, G units) matrix has orthonormal rows; Keras
 * 1.2.2 keras/layers/recurrent.py inner_init='orthogonal' with
 * keras/initializations.py orthogonal(shape, scale=1.1); Embedding's
 * embeddings_initializer="uniform", RandomUniform(-0.05, 0.05)). */
static void test_default_initializers(void)
{
    static const char *const cls[] = {"SimpleRNN", "LSTM", "GRU", "LSTM"};
    static const int gates[] = {1, 4, 3, 4};
    for (int k = 0; k < 4; k++) {
        const int k1 = k == 3, U = 6, G = gates[k];
        char js[1024];
        if (k1) /* Keras 1: output_dim, no inner_init */
            snprintf(js, sizeof js,
                     "{\"class_name\": \"Sequential\", \"config\": [{\"class_name\": \"LSTM\","
                     " \"config\": {\"name\": \"r\", \"output_dim\": %d, \"batch_input_shape\":"
                     " [null, 4, 3], \"return_sequences\": false}}]}", U);
        else
            snprintf(js, sizeof js,
                     "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": ["
                     "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 4, 3],"
                     " \"name\": \"x\"}}, {\"class_name\": \"%s\", \"config\": {\"name\": \"r\","
                     " \"units\": %d}}]}}", cls[k], U);
        rt_graph *g = NULL;
        char err[1024];
        int rc = rt_keras_import(js, strlen(js), &g, err, sizeof err);
        if (rc < 0) fprintf(stderr, "%s import: %s\n", cls[k], err);
        REQUIRE(rc == 0);
        rt_exec *e = make_exec(g, 11 + (uint64_t)k, U);
        int64_t n;
        int i = param_named(e, "r/recurrent_kernel", &n);
        REQUIRE(n == (int64_t)U * G * U);
        float *r = malloc(sizeof(float) * (size_t)n);
        CHECK_RC(rt_exec_get_param(e, i, r));
        const double gain2 = k1 ? 1.1 * 1.1 : 1.0;
        double worst = 0;
        for (int a = 0; a < U; a++)
            for (int b = 0; b < U; b++) {
                double dot = 0;
                for (int c = 0; c < G * U; c++) dot += (double)r[a * G * U + c] * r[b * G * U + c];
                worst = fmax(worst, fabs(dot - (a == b ? gain2 : 0)));
            }
        if (worst >= 1e-5) fprintf(stderr, "%s%s: |W W^T - g^2 I| = %g\n", k1 ? "Keras 1 " : "", cls[k], worst);
        CHECK(worst < 1e-5);
        /* the kernel stays glorot_uniform: within sqrt(6 / (3 + G U)) */
        i = param_named(e, "r/kernel", &n);
        float *w = malloc(sizeof(float) * (size_t)n);
        CHECK_RC(rt_exec_get_param(e, i, w));
        stats s = moments(w, n);
        const double lim = sqrt(6.0 / (3 + G * U));
        CHECK(s.max <= lim && s.min >= -lim && s.max > 0.5 * lim);
        free(w);
        free(r);
        rt_exec_destroy(e);
        rt_graph_destroy(g);
    }
    /* Embedding(1000, 50): uniform in [-0.05, 0.05), sd 0.1 / sqrt(12) */
    const char *emb =
        "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": ["
        "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 4], \"name\": \"x\"}},"
        "{\"class_name\": \"Embedding\", \"config\": {\"name\": \"m\", \"input_dim\": 1000,"
        " \"output_dim\": 50}}, {\"class_name\": \"Flatten\", \"config\": {\"name\": \"f\"}}]}}";
    rt_graph *g = NULL;
    char err[1024];
    int rc = rt_keras_import(emb, strlen(emb), &g, err, sizeof err);
    if (rc < 0) fprintf(stderr, "embedding import: %s\n", err);
    REQUIRE(rc == 0);
    rt_exec *e = make_exec(g, 5, 200);
    float *w = malloc(sizeof(float) * 50000);
    CHECK_RC(rt_exec_get_param(e, 0, w));
    stats s = moments(w, 50000);
    CHECK(s.min >= -0.05 && s.max <= 0.05 && s.max > 0.0495 && s.min < -0.0495);
    CHECK(fabs(s.mean) < 0.001 && near(s.sd, 0.1 / sqrt(12.0), 0.02));
    printf("defaults: recurrent kernels orthogonal (Keras 1: x1.1), embeddings uniform(+-0.05),"
           " sd %.5f\n", s.sd);
    free(w);
    rt_exec_destroy(e);
    rt_graph_destroy(g);
}

/* the largest norm over axis 0 of a (R, C) weight stored row-major */
static double max_col_norm(const float *w, int64_t R, int64_t C)
{
    double worst = 0;
    for (int64_t j = 0; j < C; j++) {
        double ss = 0;
        for (int64_t i = 0; i < R; i++) ss += (double)w[i * C + j] * w[i * C + j];
        worst = fmax(worst, sqrt(ss));
    }
    return worst;
}

/* Bidirectional(LSTM(4)) over (5, 3): the halves' constraints and
 * regularizers come from their own configs, as Keras builds each half from
 * its config (keras/src/layers/rnn/bidirectional.py; Keras 2's backward
 * half a copy of "layer", Keras 3's "backward_layer" as written). MaxNorm
 * (keras/src/constraints/constraints.py: each column's norm over axis 0 at
 * most max_value) binds after a step; the L2 penalty covers both halves;
 * the halves' recurrent kernels keep Keras' default Orthogonal. */
static void test_bidirectional_opts(void)
{
    const char *fmt =
        "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": ["
        "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 5, 3], \"name\": \"x\"}},"
        "{\"class_name\": \"Bidirectional\", \"config\": {\"name\": \"b\", \"layer\":"
        " {\"class_name\": \"LSTM\", \"config\": {\"name\": \"forward_l\", \"units\": 4%s}}%s}}]}}";
    const char *con = ", \"kernel_constraint\": {\"class_name\": \"MaxNorm\", \"config\": {\"max_value\": 0.3}},"
                      " \"recurrent_constraint\": {\"class_name\": \"MaxNorm\", \"config\": {\"max_value\": 0.3, \"axis\": 0}}";
    const char *reg = ", \"kernel_regularizer\": {\"class_name\": \"L2\", \"config\": {\"l2\": 0.03}}";
    /* Keras 3: the backward half bounds its kernel to 0.2, the forward's
     * recurrent kernel only */
    const char *k3 = ", \"backward_layer\": {\"class_name\": \"LSTM\", \"config\": {\"name\": \"backward_l\","
                     " \"units\": 4, \"go_backwards\": true, \"kernel_constraint\": {\"class_name\": \"MaxNorm\","
                     " \"config\": {\"max_value\": 0.2, \"axis\": 0}}}}";
    const char *k3f = ", \"recurrent_constraint\": {\"class_name\": \"MaxNorm\", \"config\": {\"max_value\": 0.3}}";
    static const char *const names[4] = {"b/forward_l/kernel", "b/forward_l/recurrent_kernel",
                                         "b/backward_l/kernel", "b/backward_l/recurrent_kernel"};
    static const int64_t rows[4] = {3, 4, 3, 4};
    char js[4][4096];
    snprintf(js[0], sizeof js[0], fmt, "", "");
    snprintf(js[1], sizeof js[1], fmt, con, "");
    snprintf(js[2], sizeof js[2], fmt, reg, "");
    snprintf(js[3], sizeof js[3], fmt, k3f, k3);
    rt_graph *g[4] = {0};
    rt_exec *e[4];
    for (int m = 0; m < 4; m++) {
        char err[1024];
        int rc = rt_keras_import(js[m], strlen(js[m]), &g[m], err, sizeof err);
        if (rc < 0) fprintf(stderr, "bidirectional %d import: %s\n", m, err);
        REQUIRE(rc == 0);
        e[m] = make_exec(g[m], 21, 8);
    }
    float x[8 * 15], y[8 * 8];
    for (int i = 0; i < 8 * 15; i++) x[i] = (float)((i * 37) % 23) / 23.0f - 0.4f;
    for (int i = 0; i < 8 * 8; i++) y[i] = (float)((i * 11) % 7) / 7.0f;
    rt_data d = {.x = x, .y = y, .y_dtype = RT_F32, .n = 8};
    float w[4][4 * 16];
    int64_t n;
    /* the same seed draws the same weights with or without the settings;
     * the recurrent kernels (4, 16) have orthonormal rows */
    for (int k = 0; k < 4; k++) {
        float v[4 * 16];
        CHECK_RC(rt_exec_get_param(e[0], param_named(e[0], names[k], &n), w[k]));
        REQUIRE(n == rows[k] * 16);
        for (int m = 1; m < 4; m++) {
            CHECK_RC(rt_exec_get_param(e[m], param_named(e[m], names[k], &n), v));
            CHECK(memcmp(v, w[k], sizeof(float) * (size_t)n) == 0);
        }
        if (rows[k] == 4) {
            double worst = 0;
            for (int a = 0; a < 4; a++)
                for (int b = 0; b < 4; b++) {
                    double dot = 0;
                    for (int c = 0; c < 16; c++) dot += (double)w[k][a * 16 + c] * w[k][b * 16 + c];
                    worst = fmax(worst, fabs(dot - (a == b)));
                }
            CHECK(worst < 1e-5);
        }
    }
    /* the L2 penalty: both halves' kernels */
    double l0, l2;
    CHECK_RC(rt_exec_compute_grads(e[0], &d, 8, &l0));
    CHECK_RC(rt_exec_compute_grads(e[2], &d, 8, &l2));
    double pen = 0;
    for (int k = 0; k < 4; k += 2)
        for (int i = 0; i < 48; i++) pen += 0.03 * (double)w[k][i] * w[k][i];
    CHECK(pen > 0.01 && fabs((l2 - l0) - pen) < 1e-6);
    /* the bounds: above before the step, held after it */
    const double bound[2][4] = {{0.3, 0.3, 0.3, 0.3}, {0, 0.3, 0.2, 0}};
    for (int k = 0; k < 4; k++) CHECK(max_col_norm(w[k], rows[k], 16) > 0.3);
    for (int m = 0; m < 2; m++) {
        rt_exec *ex = e[m == 0 ? 1 : 3];
        rt_train_result r;
        CHECK_RC(rt_exec_train(ex, &d, 1, &r, NULL, NULL, NULL));
        for (int k = 0; k < 4; k++) {
            float v[4 * 16];
            CHECK_RC(rt_exec_get_param(ex, param_named(ex, names[k], &n), v));
            const double nm = max_col_norm(v, rows[k], 16);
            if (bound[m][k] > 0)
                CHECK(nm <= bound[m][k] * (1 + 1e-6) && nm > 0.9 * bound[m][k]);
            else
                CHECK(nm > 0.3); /* unconstrained */
        }
    }
    for (int m = 0; m < 4; m++) {
        rt_exec_destroy(e[m]);
        rt_graph_destroy(g[m]);
    }
}

int main(void)
{
    make_data();
    test_default_initializers();
    test_initializers();
    test_mha_orthogonal("null", 8, 8, 5 * 8);
    test_mha_orthogonal("[2, 3]", 16, 3, 5 * 6);
    test_regularizers();
    test_constraints();
    test_conv_constraint();
    test_lstm_regularizer();
    test_bidirectional_opts();
    return rt_test_done("keras_params");
}
