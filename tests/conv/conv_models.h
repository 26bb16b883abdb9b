/*
 * conv_models.h - the convolutional reference workloads as engine graphs
 * (shared by tests/conv and bench/conv), and the sklearn digits data with
 * its stratified 80/20 split.
 *
 * Parameter names follow the Keras importer ("<layer>/kernel", "/bias",
 * "/gamma", ...); kernels are Keras-shaped (KH,KW,Cin,Cout).
 */
#ifndef RTRAIN_CONV_MODELS_H
#define RTRAIN_CONV_MODELS_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "rt_engine.h"

/* Adds params+node; returns nonzero on any builder error. vals may be NULL
 * (Keras initializers) or point at the kernel and bias values. */
static inline int rt_conv_add_conv(rt_graph *g, const char *name, const char *in,
                                   int64_t kh, int64_t kw, int64_t cin, int64_t cout,
                                   const char *padding, const char *act, rt_init kinit,
                                   const float *kval, const float *bval)
{
    char k[96], b[96];
    snprintf(k, sizeof k, "%s/kernel", name);
    snprintf(b, sizeof b, "%s/bias", name);
    int64_t kd[4] = {kh, kw, cin, cout};
    int rc = rt_graph_add_param(g, k, 4, kd, kinit, 1, kval);
    rc |= rt_graph_add_param(g, b, 1, &cout, RT_INIT_ZEROS, 1, bval);
    rt_attr at[2] = {{.name = "padding", .kind = RT_ATTR_STR, .s = padding},
                     {.name = "activation", .kind = RT_ATTR_STR, .s = act}};
    const char *ins[3] = {in, k, b};
    rc |= rt_graph_add_node(g, name, "Conv2D", 3, ins, 2, at);
    return rc;
}

static inline int rt_conv_add_dense(rt_graph *g, const char *name, const char *in,
                                    int64_t nin, int64_t nout, const char *act,
                                    rt_init kinit, const float *kval, const float *bval)
{
    char k[96], b[96];
    snprintf(k, sizeof k, "%s/kernel", name);
    snprintf(b, sizeof b, "%s/bias", name);
    int64_t kd[2] = {nin, nout};
    int rc = rt_graph_add_param(g, k, 2, kd, kinit, 1, kval);
    rc |= rt_graph_add_param(g, b, 1, &nout, RT_INIT_ZEROS, 1, bval);
    rt_attr at = {.name = "activation", .kind = RT_ATTR_STR, .s = act};
    const char *ins[3] = {in, k, b};
    rc |= rt_graph_add_node(g, name, "Dense", 3, ins, 1, &at);
    return rc;
}

static inline int rt_conv_add1(rt_graph *g, const char *name, const char *op,
                               const char *in, int n_attr, const rt_attr *at)
{
    return rt_graph_add_node(g, name, op, 1, &in, n_attr, at);
}

/* W-B: 32x32x3 -> Conv2D(64,3x3,valid,relu) -> MaxPool 2x2 -> Flatten ->
 * Dense(128,relu) -> Dense(10) (logits) */
static inline rt_graph *rt_conv_wb_graph(void)
{
    rt_graph *g = rt_graph_create();
    int64_t in[] = {RT_BATCH, 32, 32, 3};
    int rc = rt_graph_add_input(g, "x", RT_F32, 4, in);
    rc |= rt_conv_add_conv(g, "conv", "x", 3, 3, 3, 64, "valid", "relu", RT_INIT_GLOROT_UNIFORM, NULL, NULL);
    rc |= rt_conv_add1(g, "pool", "MaxPool2D", "conv", 0, NULL);
    rc |= rt_conv_add1(g, "flat", "Flatten", "pool", 0, NULL);
    rc |= rt_conv_add_dense(g, "d1", "flat", 15 * 15 * 64, 128, "relu", RT_INIT_GLOROT_UNIFORM, NULL, NULL);
    rc |= rt_conv_add_dense(g, "d2", "d1", 128, 10, "linear", RT_INIT_GLOROT_UNIFORM, NULL, NULL);
    rc |= rt_graph_set_output(g, "d2");
    if (rc) {
        rt_graph_destroy(g);
        return NULL;
    }
    return g;
}

/* W-D: 8x8x1 -> Conv(16,3x3,same,relu) -> Conv(32,3x3,same,relu) ->
 * MaxPool 2x2 -> Flatten -> Dense(64,relu) -> Dense(10) (logits). The ReLU
 * layers start from he_uniform (Keras' name; the fan-in scaling PyTorch
 * also uses for these layers): with glorot_uniform the test accuracy after
 * 10 epochs spreads over 0.93-0.975 across seeds, with he_uniform and
 * standardised pixels over 0.958-0.972. */
static inline rt_graph *rt_conv_wd_graph(void)
{
    rt_graph *g = rt_graph_create();
    int64_t in[] = {RT_BATCH, 8, 8, 1};
    int rc = rt_graph_add_input(g, "x", RT_F32, 4, in);
    rc |= rt_conv_add_conv(g, "c1", "x", 3, 3, 1, 16, "same", "relu", RT_INIT_HE_UNIFORM, NULL, NULL);
    rc |= rt_conv_add_conv(g, "c2", "c1", 3, 3, 16, 32, "same", "relu", RT_INIT_HE_UNIFORM, NULL, NULL);
    rc |= rt_conv_add1(g, "pool", "MaxPool2D", "c2", 0, NULL);
    rc |= rt_conv_add1(g, "flat", "Flatten", "pool", 0, NULL);
    rc |= rt_conv_add_dense(g, "d1", "flat", 4 * 4 * 32, 64, "relu", RT_INIT_HE_UNIFORM, NULL, NULL);
    rc |= rt_conv_add_dense(g, "d2", "d1", 64, 10, "linear", RT_INIT_GLOROT_UNIFORM, NULL, NULL);
    rc |= rt_graph_set_output(g, "d2");
    if (rc) {
        rt_graph_destroy(g);
        return NULL;
    }
    return g;
}

/* ------------------------------------------------------------ the digits */

typedef struct rt_conv_digits {
    float *xtr, *xte;     /* (n, 8, 8, 1), pixels / 16 */
    int32_t *ytr, *yte;
    int64_t ntr, nte;
} rt_conv_digits;

static inline void rt_conv_free_digits(rt_conv_digits *d)
{
    free(d->xtr);
    free(d->xte);
    free(d->ytr);
    free(d->yte);
    memset(d, 0, sizeof *d);
}

/* Standardise each pixel with the training set's mean and std (+1e-3:
 * border pixels are almost always 0), test set with the same numbers. */
static inline void rt_conv_standardize_digits(rt_conv_digits *d)
{
    for (int j = 0; j < 64; j++) {
        double m = 0, v = 0;
        for (int64_t i = 0; i < d->ntr; i++) m += d->xtr[i * 64 + j];
        m /= (double)d->ntr;
        for (int64_t i = 0; i < d->ntr; i++) {
            const double t = d->xtr[i * 64 + j] - m;
            v += t * t;
        }
        const double sd = sqrt(v / (double)d->ntr) + 1e-3;
        for (int64_t i = 0; i < d->ntr; i++) d->xtr[i * 64 + j] = (float)((d->xtr[i * 64 + j] - m) / sd);
        for (int64_t i = 0; i < d->nte; i++) d->xte[i * 64 + j] = (float)((d->xte[i * 64 + j] - m) / sd);
    }
}

/* sklearn's digits.csv.gz (1797 rows of 64 pixels 0..16 and the label),
 * split stratified 80/20: per class, the rows in file order are shuffled
 * by Fisher-Yates with the LCG below and the first round(0.2 n_c) go to
 * the test set (bench/conv/torch_peer.py and gen_conv_fixture.py repeat
 * this exactly). Returns 0 or -1. */
static inline int rt_conv_load_digits(const char *path, rt_conv_digits *d)
{
    memset(d, 0, sizeof *d);
    gzFile f = gzopen(path, "rb");
    if (!f) return -1;
    enum { N = 1797 };
    float *x = malloc(sizeof(float) * N * 64);
    int32_t *y = malloc(sizeof(int32_t) * N);
    char line[1024];
    int n = 0;
    while (x && y && n < N && gzgets(f, line, sizeof line)) {
        char *p = line;
        int v[65], k = 0;
        while (k < 65) {
            char *end;
            long t = strtol(p, &end, 10);
            if (end == p) break;
            v[k++] = (int)t;
            p = end;
            if (*p == ',') p++;
        }
        if (k != 65 || v[64] < 0 || v[64] > 9) break;
        for (int i = 0; i < 64; i++) x[n * 64 + i] = (float)v[i] / 16.0f;
        y[n++] = v[64];
    }
    gzclose(f);
    if (n != N) {
        free(x);
        free(y);
        return -1;
    }
    int *is_test = calloc(N, sizeof(int));
    int idx[N];
    uint64_t s = 20240607;
    for (int c = 0; c < 10; c++) {
        int m = 0;
        for (int i = 0; i < N; i++)
            if (y[i] == c) idx[m++] = i;
        for (int i = m - 1; i > 0; i--) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            int j = (int)((s >> 33) % (uint64_t)(i + 1));
            int t = idx[i];
            idx[i] = idx[j];
            idx[j] = t;
        }
        int nt = (m * 2 + 5) / 10; /* round(0.2 m) */
        for (int i = 0; i < nt; i++) is_test[idx[i]] = 1;
    }
    int nte = 0;
    for (int i = 0; i < N; i++) nte += is_test[i];
    d->nte = nte;
    d->ntr = N - nte;
    d->xtr = malloc(sizeof(float) * (size_t)d->ntr * 64);
    d->xte = malloc(sizeof(float) * (size_t)d->nte * 64);
    d->ytr = malloc(sizeof(int32_t) * (size_t)d->ntr);
    d->yte = malloc(sizeof(int32_t) * (size_t)d->nte);
    int a = 0, b = 0;
    for (int i = 0; i < N; i++) {
        if (is_test[i]) {
            memcpy(d->xte + b * 64, x + i * 64, sizeof(float) * 64);
            d->yte[b++] = y[i];
        } else {
            memcpy(d->xtr + a * 64, x + i * 64, sizeof(float) * 64);
            d->ytr[a++] = y[i];
        }
    }
    free(is_test);
    free(x);
    free(y);
    return 0;
}

#endif
