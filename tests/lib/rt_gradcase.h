/*
 * rt_gradcase.h - the harness of the ops' finite-difference gradient checks
 * (tests/conv/test_conv_gradcheck.c, tests/layers/test_layers_gradcheck.c).
 *
 * A case is x (B, dims) -> h = x + P -> the op under test -> Flatten -> MSE
 * against random f32 labels. P is a trainable per-sample parameter, so
 * dL/dP (the batch sum of dL/dx) checks the op's input gradient; the op's
 * own trainable parameters are checked directly. Analytic:
 * rt_exec_compute_grads; numeric: (L(w+h) - L(w-h)) / 2h, h = 1e-3, L in
 * double (rt_test_fd_param), tolerance |a - n| <= 3e-4 + 2e-2 max(|a|, |n|);
 * parameters of more than 150 values are checked on an evenly strided
 * subset. Each case also checks that rt_exec_compute_grads leaves every
 * parameter bit-identical (BatchNorm's moving statistics included).
 *
 *     #define GC_BATCH 4        (the batch, before the include)
 *     #include "../lib/rt_gradcase.h"
 *     gc_seed(0x9E3779B97F4A7C15ull);
 *     gc_start(3, (int64_t[]){5, 6, 2});
 *     node1("y", "Relu", "h", 0, NULL);
 *     gc_run("relu", "y", 0);
 *
 * One test program per file: the state below is the case being built.
 */
#ifndef RTRAIN_GRADCASE_H
#define RTRAIN_GRADCASE_H

#include <stdint.h>

#include "../engine/rt_test.h"

#ifndef GC_BATCH
#error "define GC_BATCH (the batch) before including rt_gradcase.h"
#endif
#define B GC_BATCH

static uint64_t gc_lcg;
static rt_graph *g;          /* the case's graph */
static int grid_input;       /* this case's x: distinct values 0.05 apart (max ties) */
static int fails_before;     /* rt_test_failures before the case */
static int gc_nd;            /* x's per-sample shape */
static int64_t gc_dims[RT_MAX_DIMS];

static void gc_seed(uint64_t s) { gc_lcg = s; }

/* about N(0, 1.7^2 / 3): a sum of four uniforms */
static float rnd(void)
{
    float s = 0;
    for (int i = 0; i < 4; i++) {
        gc_lcg = gc_lcg * 6364136223846793005ull + 1442695040888963407ull;
        s += (float)((gc_lcg >> 40) & 0xffffff) / 16777216.0f;
    }
    return (s - 2.0f) * 1.7f;
}

static uint64_t rndu(uint64_t n)
{
    gc_lcg = gc_lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (gc_lcg >> 33) % n;
}

static void gc_param(const char *name, int nd, const int64_t *d, rt_init init, int trainable,
                     const float *value)
{
    if (rt_graph_add_param(g, name, nd, d, init, trainable, value) != 0) {
        fprintf(stderr, "add_param %s: %s\n", name, rt_graph_errmsg(g));
        exit(1);
    }
}

static void node(const char *name, const char *op, int n_in, const char **in, int n_attr,
                 const rt_attr *attrs)
{
    if (rt_graph_add_node(g, name, op, n_in, in, n_attr, attrs) != 0) {
        fprintf(stderr, "add_node %s: %s\n", name, rt_graph_errmsg(g));
        exit(1);
    }
}

static void node1(const char *name, const char *op, const char *a, int n_attr,
                  const rt_attr *attrs)
{
    node(name, op, 1, &a, n_attr, attrs);
}

/* A new case: x (B, dims[0..nd)) -> h = x + P */
static void gc_start(int nd, const int64_t *dims)
{
    g = rt_graph_create();
    REQUIRE(g && nd < RT_MAX_DIMS);
    int64_t d[RT_MAX_DIMS] = {RT_BATCH};
    gc_nd = nd;
    for (int i = 0; i < nd; i++) gc_dims[i] = d[i + 1] = dims[i];
    REQUIRE(rt_graph_add_input(g, "x", RT_F32, nd + 1, d) == 0);
    gc_param("P", nd, gc_dims, RT_INIT_ZEROS, 1, NULL);
    const char *in[] = {"x", "P"};
    node("h", "Add", 2, in, 0, NULL);
}

/* gc_run's flags */
enum {
    /* random inputs at least 0.02 away from every multiple of 0.1, where
     * the case's kinks are (LeakyRelu at 0, Clip at its bounds, ...) */
    GC_OFF_TENTHS = 1,
};

/* x: a random permutation of k * 0.05 per sample (grid_input), or random */
static void gc_inputs(float *x, int64_t in_n, int flags)
{
    if (grid_input) {
        for (int b = 0; b < B; b++) {
            float *xs = x + b * in_n;
            for (int64_t i = 0; i < in_n; i++) xs[i] = 0.05f * (float)(i - in_n / 2);
            for (int64_t i = in_n - 1; i > 0; i--) {
                int64_t j = (int64_t)rndu((uint64_t)i + 1);
                float t = xs[i];
                xs[i] = xs[j];
                xs[j] = t;
            }
        }
    } else if (flags & GC_OFF_TENTHS) {
        for (int64_t i = 0; i < B * in_n; i++) {
            const float v = rnd(), q = floorf(v * 10.0f) / 10.0f;
            x[i] = q + 0.02f + 0.6f * (v - q);
        }
    } else {
        for (int64_t i = 0; i < B * in_n; i++) x[i] = rnd();
    }
}

/* rt_exec_compute_grads must leave every parameter as it was */
static void gc_check_unchanged(const char *name, rt_exec *e, const rt_data *d)
{
    const rt_plan *p = rt_exec_plan(e);
    for (int pi = 0; pi < rt_plan_n_params(p); pi++) {
        int64_t dims[RT_MAX_DIMS], n = 1;
        const char *pname;
        int nd = rt_plan_param_info(p, pi, &pname, dims, NULL);
        for (int k = 0; k < nd; k++) n *= dims[k];
        float *w0 = malloc((size_t)n * 4), *w1 = malloc((size_t)n * 4);
        REQUIRE(w0 && w1);
        rt_exec_get_param(e, pi, w0);
        double l;
        CHECK_RC(rt_exec_compute_grads(e, d, B, &l));
        rt_exec_get_param(e, pi, w1);
        if (memcmp(w0, w1, (size_t)n * 4) != 0) {
            fprintf(stderr, "%s: rt_exec_compute_grads changed %s\n", name, pname);
            rt_test_failures++;
        }
        free(w0);
        free(w1);
    }
}

/* Flatten `out`, compile, check every trainable parameter; ends the case. */
static void gc_run(const char *name, const char *out, int flags)
{
    node1("flat", "Flatten", out, 0, NULL);
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_MSE;
    cfg.batch_size = B;
    cfg.seed = 5;
    cfg.label_dtype = RT_F32;
    cfg.label_ndim = 0;
    cfg.metrics = 0;
    rt_plan *p;
    char err[256];
    /* the label width is the flattened output: compile once to learn it */
    if (rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err) < 0) {
        fprintf(stderr, "%s: compile: %s\n", name, err);
        rt_test_failures++;
        fails_before = rt_test_failures;
        rt_graph_destroy(g);
        grid_input = 0;
        return;
    }
    int64_t od[RT_MAX_DIMS];
    REQUIRE(rt_plan_output_shape(p, od) == 1);
    rt_plan_release(p);
    const int64_t N = od[0];
    cfg.label_ndim = 1;
    cfg.label_dims[0] = N;
    REQUIRE(rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err) == 0);
    rt_exec *e;
    REQUIRE(rt_exec_create(p, &e) == 0);
    int64_t in_n = 1;
    for (int i = 0; i < gc_nd; i++) in_n *= gc_dims[i];
    float *x = malloc(sizeof(float) * (size_t)(B * in_n));
    float *y = malloc(sizeof(float) * (size_t)(B * N));
    REQUIRE(x && y);
    gc_inputs(x, in_n, flags);
    for (int64_t i = 0; i < B * N; i++) y[i] = rnd();
    rt_data d = {.x = x, .y = y, .y_dtype = RT_F32, .n = B};
    gc_check_unchanged(name, e, &d);
    int checked = 0;
    for (int pi = 0; pi < rt_plan_n_params(p); pi++) {
        int trainable;
        rt_plan_param_info(p, pi, NULL, NULL, &trainable);
        if (trainable)
            checked += rt_test_fd_param(e, &d, B, pi, 150, 3e-4, name);
    }
    printf("%-48s %5d gradients %s\n", name, checked,
           rt_test_failures == fails_before ? "ok" : "FAILED");
    fails_before = rt_test_failures;
    grid_input = 0;
    free(x);
    free(y);
    rt_exec_destroy(e);
    rt_plan_release(p);
    rt_graph_destroy(g);
}

#endif
