/*
 * test_keras_timedist.c - TimeDistributed(Dense) through the importer: its
 * output, per time step, is the inner Dense applied to that step (computed
 * here in double from the imported weights), its gradient passes central
 * finite differences, and other inner layers or wrapper settings are
 * refused naming the layer.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/rt_test.h"
#include "import_keras.h"
#include "rtrain/rt_error.h"

#define NB 6
#define T 4
#define IN 3
#define OUT 2

static const char *fmt =
    "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": ["
    "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 4, 3], \"name\": \"x\"}},"
    "{\"class_name\": \"TimeDistributed\", \"config\": {\"name\": \"td\", \"trainable\": true, "
    "\"dtype\": \"float32\"%s, \"layer\": {\"class_name\": \"%s\", \"config\": {\"name\": \"dense_1\", "
    "\"units\": 2, \"activation\": \"tanh\", \"use_bias\": true, \"bias_initializer\": "
    "{\"class_name\": \"RandomNormal\", \"config\": {\"stddev\": 0.5}}%s}}}}]}}";

static int import(const char *extra, const char *cls, const char *inner, rt_graph **g, char *err,
                  size_t errlen)
{
    char js[2048];
    snprintf(js, sizeof js, fmt, extra, cls, inner);
    return rt_keras_import(js, strlen(js), g, err, errlen);
}

int main(void)
{
    float x[NB * T * IN], y[NB * T * OUT];
    uint64_t s = 99;
    for (int i = 0; i < NB * T * IN; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((s >> 40) % 2000) / 1000.0f - 1.0f;
    }
    for (int i = 0; i < NB * T * OUT; i++) y[i] = (float)(i % 7) / 7.0f;
    rt_graph *g = NULL;
    char err[1024];
    int rc = import("", "Dense", "", &g, err, sizeof err);
    if (rc < 0) fprintf(stderr, "import: %s\n", err);
    REQUIRE(rc == 0);
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_MSE;
    cfg.label_dtype = RT_F32;
    cfg.label_ndim = 2;
    cfg.label_dims[0] = T;
    cfg.label_dims[1] = OUT;
    cfg.batch_size = NB;
    cfg.metrics = 0;
    rt_plan *p = NULL;
    rc = rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err);
    if (rc < 0) fprintf(stderr, "compile: %s\n", err);
    REQUIRE(rc == 0);
    int64_t d[RT_MAX_DIMS];
    CHECK(rt_plan_output_shape(p, d) == 2 && d[0] == T && d[1] == OUT);
    REQUIRE(rt_plan_n_params(p) == 2);
    rt_exec *e = NULL;
    REQUIRE(rt_exec_create(p, &e) == 0);
    float w[IN * OUT], b[OUT], out[NB * T * OUT];
    CHECK_RC(rt_exec_get_param(e, 0, w));
    CHECK_RC(rt_exec_get_param(e, 1, b));
    CHECK_RC(rt_exec_predict(e, x, NB, out));
    double worst = 0;
    for (int n = 0; n < NB * T; n++)
        for (int j = 0; j < OUT; j++) {
            double a = b[j];
            for (int k = 0; k < IN; k++) a += (double)x[n * IN + k] * w[k * OUT + j];
            worst = fmax(worst, fabs(tanh(a) - out[n * OUT + j]));
        }
    if (!(worst < 1e-5)) {
        fprintf(stderr, "TimeDistributed(Dense) output off by %g\n", worst);
        rt_test_failures++;
    }
    rt_data dd = {.x = x, .y = y, .y_dtype = RT_F32, .n = NB};
    rt_test_fd_param(e, &dd, NB, 0, 0, 1e-4, "td");
    rt_test_fd_param(e, &dd, NB, 1, 0, 1e-4, "td");
    rt_exec_destroy(e);
    rt_plan_release(p);
    rt_graph_destroy(g);
    /* refused: another inner layer, a wrapper setting, an inner activity
     * regularizer */
    struct {
        const char *extra, *cls, *inner, *want;
    } bad[] = {
        {"", "Conv2D", "", "TimeDistributed over 'Conv2D'"},
        {", \"wobble\": 3", "Dense", "", "'wobble'"},
        {"", "Dense", ", \"activity_regularizer\": \"l2\"", "inside TimeDistributed"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rt_graph *gb = NULL;
        err[0] = 0;
        rc = import(bad[i].extra, bad[i].cls, bad[i].inner, &gb, err, sizeof err);
        CHECK(rc < 0);
        if (rc < 0 && (!strstr(err, bad[i].want) || !strstr(err, "'td'"))) {
            fprintf(stderr, "bad case %zu: '%s'\n", i, err);
            rt_test_failures++;
        }
        rt_graph_destroy(gb);
    }
    return rt_test_done("keras_timedist");
}
