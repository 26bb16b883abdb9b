/*
 * rt_test.h - helpers shared by the engine tests: the checks of
 * tests/lib/rt_check.h and CHECK_RC, the iris data, and graph builders for the
 * reference workloads.
 */
#ifndef RTRAIN_TEST_H
#define RTRAIN_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_engine.h"

/* CHECK, CHECKF and REQUIRE are the tests' one harness (tests/lib); the
 * engine tests call its failure count rt_test_failures. */
#include "../lib/rt_check.h"
#define rt_test_failures failures

/* An engine call that must succeed: a failure names its error. */
#define CHECK_RC(expr)                                                                   \
    do {                                                                                 \
        int rc_ = (expr);                                                                \
        CHECKF(rc_ >= 0, "%s returned %s", #expr, rt_err_name(rc_));                     \
    } while (0)

/* A whole file, NUL-terminated (len may be NULL); NULL if unreadable.
 * The caller frees it. */
static inline char *rt_test_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) {
        b[n] = 0;
        if (len)
            *len = (size_t)n;
    }
    return b;
}

static inline int rt_test_done(const char *name)
{
    if (rt_test_failures) {
        fprintf(stderr, "%s: %d check(s) failed\n", name, rt_test_failures);
        return 1;
    }
    printf("%s: ok\n", name);
    return 0;
}

/* Central finite differences on parameter pi against the analytic gradient
 * of rt_exec_compute_grads over the first B samples of d. max_points > 0
 * checks every ceil(n / max_points)-th element only (large conv kernels);
 * 0 checks all. An element fails when |analytic - numeric| > atol +
 * 2e-2 * max(|analytic|, |numeric|), or the analytic value is NaN; each
 * failure counts in rt_test_failures and a new worst one is printed. The
 * parameter is restored. Returns the number of elements checked. */
static inline int rt_test_fd_param(rt_exec *e, const rt_data *d, int64_t B,
                                   int pi, int64_t max_points, double atol,
                                   const char *name)
{
    int64_t dims[RT_MAX_DIMS], n = 1;
    const char *pname;
    int nd = rt_plan_param_info(rt_exec_plan(e), pi, &pname, dims, NULL);
    REQUIRE(nd >= 0);
    for (int k = 0; k < nd; k++) n *= dims[k];
    float *w = malloc((size_t)n * 4), *ga = malloc((size_t)n * 4);
    REQUIRE(w && ga);
    double l0;
    CHECK_RC(rt_exec_compute_grads(e, d, B, &l0));
    rt_exec_get_grad(e, pi, ga);
    rt_exec_get_param(e, pi, w);
    const int64_t stride =
        max_points > 0 && n > max_points ? (n + max_points - 1) / max_points : 1;
    double worst = 0;
    int checked = 0;
    for (int64_t k = 0; k < n; k += stride) {
        const float h = 1e-3f, w0 = w[k];
        double lp, lm;
        w[k] = w0 + h;
        rt_exec_set_param(e, pi, w);
        rt_exec_compute_grads(e, d, B, &lp);
        w[k] = w0 - h;
        rt_exec_set_param(e, pi, w);
        rt_exec_compute_grads(e, d, B, &lm);
        w[k] = w0;
        rt_exec_set_param(e, pi, w);
        /* the actual step: (w0+h) - (w0-h) in f32 */
        double num = (lp - lm) / ((double)(w0 + h) - (double)(w0 - h));
        double an = ga[k];
        double tol = atol + 2e-2 * fmax(fabs(an), fabs(num));
        double over = fabs(an - num) - tol;
        if (over > 0 || isnan(an)) {
            if (over > worst || isnan(an))
                fprintf(stderr, "%s: d%s[%lld] analytic %.6g numeric %.6g\n", name,
                        pname, (long long)k, an, num);
            worst = over > worst ? over : worst;
            rt_test_failures++;
        }
        checked++;
    }
    free(w);
    free(ga);
    return checked;
}

/* The iris data: 150 rows of 4 floats and a class 0..2. The header line is
 * "150,4,setosa,versicolor,virginica". Returns the row count or -1. */
static inline int rt_test_load_iris(const char *path, float x[150 * 4], int32_t y[150])
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[256];
    int n = 0;
    if (!fgets(line, sizeof line, f)) {
        fclose(f);
        return -1;
    }
    while (n < 150 && fgets(line, sizeof line, f)) {
        float a, b, c, d;
        int k;
        if (sscanf(line, "%f,%f,%f,%f,%d", &a, &b, &c, &d, &k) != 5) break;
        x[n * 4 + 0] = a;
        x[n * 4 + 1] = b;
        x[n * 4 + 2] = c;
        x[n * 4 + 3] = d;
        y[n] = k;
        n++;
    }
    fclose(f);
    return n;
}

/* W-A: Dense(32, relu, input 4) -> Dense(3, softmax). Values may be NULL
 * (Keras initializers). Parameter order: d1/kernel, d1/bias, d2/kernel,
 * d2/bias. */
static inline rt_graph *rt_test_wa_graph(const float *w1, const float *b1,
                                         const float *w2, const float *b2)
{
    rt_graph *g = rt_graph_create();
    if (!g) return NULL;
    int64_t in[] = {RT_BATCH, 4}, dw1[] = {4, 32}, db1[] = {32}, dw2[] = {32, 3}, db2[] = {3};
    int rc = 0;
    rc |= rt_graph_add_input(g, "x", RT_F32, 2, in);
    rc |= rt_graph_add_param(g, "d1/kernel", 2, dw1, RT_INIT_GLOROT_UNIFORM, 1, w1);
    rc |= rt_graph_add_param(g, "d1/bias", 1, db1, RT_INIT_ZEROS, 1, b1);
    rc |= rt_graph_add_param(g, "d2/kernel", 2, dw2, RT_INIT_GLOROT_UNIFORM, 1, w2);
    rc |= rt_graph_add_param(g, "d2/bias", 1, db2, RT_INIT_ZEROS, 1, b2);
    const char *i1[] = {"x", "d1/kernel", "d1/bias"};
    rc |= rt_graph_add_node(g, "d1", "Dense", 3, i1, 0, NULL);
    const char *i2[] = {"d1"};
    rc |= rt_graph_add_node(g, "relu1", "Relu", 1, i2, 0, NULL);
    const char *i3[] = {"relu1", "d2/kernel", "d2/bias"};
    rc |= rt_graph_add_node(g, "d2", "Dense", 3, i3, 0, NULL);
    const char *i4[] = {"d2"};
    rc |= rt_graph_add_node(g, "probs", "Softmax", 1, i4, 0, NULL);
    rc |= rt_graph_set_output(g, "probs");
    if (rc) {
        rt_graph_destroy(g);
        return NULL;
    }
    return g;
}

/* A stratified shuffled split of iris (seeded LCG, fixed): n_val samples
 * of each class go to validation (n_val of 50), the rest to training. */
static inline void rt_test_split_iris(const float *x, const int32_t *y, int n_val,
                                      float *xt, int32_t *yt, int *nt,
                                      float *xv, int32_t *yv, int *nv)
{
    int idx[150];
    for (int i = 0; i < 150; i++) idx[i] = i;
    uint64_t s = 12345;
    for (int i = 149; i > 0; i--) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        int j = (int)((s >> 33) % (uint64_t)(i + 1));
        int t = idx[i];
        idx[i] = idx[j];
        idx[j] = t;
    }
    int taken[3] = {0, 0, 0};
    *nt = *nv = 0;
    for (int k = 0; k < 150; k++) {
        int i = idx[k], c = y[i];
        if (taken[c] < n_val) {
            taken[c]++;
            memcpy(xv + *nv * 4, x + i * 4, sizeof(float) * 4);
            yv[(*nv)++] = c;
        } else {
            memcpy(xt + *nt * 4, x + i * 4, sizeof(float) * 4);
            yt[(*nt)++] = c;
        }
    }
}

#endif
