/*
 * test_keras_actreg.c - Keras activity regularizers through the importer:
 *   - a layer's activity_regularizer (L1, L2, L1L2) and the
 *     ActivityRegularization layer add exactly l1 sum|y| + l2 sum y^2 of
 *     the layer's output over the batch to the loss, divided by the batch
 *     size for Keras 2 JSON (base_layer's mean_activity_loss) and undivided
 *     for Keras 3 JSON (Layer.__call__ adds regularizer(output)); the
 *     penalty is computed here in double from the model's own predictions;
 *   - the gradient of the total loss, through the regularized output into
 *     the weights before it, passes central finite differences;
 *   - a Bidirectional's wrapped layer's regularizer applies to each half's
 *     output (LSTM and CuDNNGRU halves);
 *   - evaluate reports the same total; bad settings are refused naming
 *     the layer.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/rt_test.h"
#include "import_keras.h"
#include "rtrain/rt_error.h"

#define NB 8
static float X[NB * 6], Y[NB * 5];

static void make_data(void)
{
    uint64_t s = 987654321;
    for (int i = 0; i < NB * 6; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        X[i] = (float)((s >> 40) % 2000) / 1000.0f - 1.0f;
    }
    for (int i = 0; i < NB * 5; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        Y[i] = (float)((s >> 40) % 1000) / 1000.0f;
    }
}

/* input (6,) -> Dense(4, tanh, h_extra) [-> mid layer] -> Dense(5, o_extra);
 * k3 adds Keras 3's module/registered_name to every layer */
static int import(const char *h_extra, const char *mid, const char *o_extra, int k3,
                  rt_graph **g, char *err, size_t errlen)
{
    char js[4096];
    const char *m3 = k3 ? "\"module\": \"keras.layers\", \"registered_name\": null, " : "";
    snprintf(js, sizeof js,
             "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": ["
             "{%s\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 6], \"name\": \"x\"}},"
             "{%s\"class_name\": \"Dense\", \"config\": {\"name\": \"h\", \"units\": 4, \"activation\": \"tanh\"%s%s}},"
             "%s%s"
             "{%s\"class_name\": \"Dense\", \"config\": {\"name\": \"o\", \"units\": 5%s%s}}]}}",
             m3, m3, h_extra[0] ? ", " : "", h_extra, mid, mid[0] ? "," : "", m3,
             o_extra[0] ? ", " : "", o_extra);
    return rt_keras_import(js, strlen(js), g, err, errlen);
}

static rt_graph *import_ok(const char *h_extra, const char *mid, const char *o_extra, int k3)
{
    rt_graph *g = NULL;
    char err[1024];
    int rc = import(h_extra, mid, o_extra, k3, &g, err, sizeof err);
    if (rc < 0)
        fprintf(stderr, "import: %s\n", err);
    REQUIRE(rc == 0);
    return g;
}

static rt_exec *make_exec_w(rt_graph *g, int width);
static rt_exec *make_exec(rt_graph *g) { return make_exec_w(g, 5); }

static rt_exec *make_exec_w(rt_graph *g, int width)
{
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_MSE;
    cfg.label_dtype = RT_F32;
    cfg.label_ndim = 1;
    cfg.label_dims[0] = width;
    cfg.batch_size = NB;
    cfg.seed = 7;
    cfg.opt = RT_OPT_SGD;
    cfg.lr = 0.1f;
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

/* l1 sum|t| + l2 sum t^2 over n rows of width w */
static double penalty(const float *t, int n, int w, double l1, double l2)
{
    double s = 0;
    for (int i = 0; i < n * w; i++) s += l1 * fabs(t[i]) + l2 * (double)t[i] * t[i];
    return s;
}

/* the hidden layer's output, computed here from the exec's weights */
static void hidden(rt_exec *e, int n, float *hout)
{
    float w[24], b[4];
    CHECK_RC(rt_exec_get_param(e, 0, w));
    CHECK_RC(rt_exec_get_param(e, 1, b));
    for (int i = 0; i < n; i++)
        for (int j = 0; j < 4; j++) {
            double a = b[j];
            for (int k = 0; k < 6; k++) a += (double)X[i * 6 + k] * w[k * 4 + j];
            hout[i * 4 + j] = (float)tanh(a);
        }
}

/* one configuration: loss(with) - loss(without) against the penalty of the
 * hidden (on_out 0) or output (on_out 1) values, for n samples */
static void check_case(const char *name, const char *h_extra, const char *mid,
                       const char *o_extra, int k3, int on_out, double l1, double l2)
{
    rt_graph *g0 = import_ok("", "", "", k3), *g1 = import_ok(h_extra, mid, o_extra, k3);
    rt_exec *e0 = make_exec(g0), *e1 = make_exec(g1);
    /* the regularizer adds no weight: the same four, given the same values */
    REQUIRE(rt_plan_n_params(rt_exec_plan(e1)) == 4);
    for (int pi = 0; pi < 4; pi++) {
        float w[24];
        CHECK_RC(rt_exec_get_param(e1, pi, w));
        CHECK_RC(rt_exec_set_param(e0, pi, w));
    }
    rt_data d = {.x = X, .y = Y, .y_dtype = RT_F32, .n = NB};
    const int ns[2] = {NB, 5}; /* a full and a partial batch */
    for (int t = 0; t < 2; t++) {
        const int n = ns[t];
        double a, b;
        CHECK_RC(rt_exec_compute_grads(e0, &d, n, &a));
        CHECK_RC(rt_exec_compute_grads(e1, &d, n, &b));
        float v[NB * 5];
        int w = on_out ? 5 : 4;
        if (on_out)
            CHECK_RC(rt_exec_predict(e1, X, n, v));
        else
            hidden(e1, n, v);
        double want = penalty(v, n, w, l1, l2) / (k3 ? 1.0 : (double)n);
        if (!(fabs((b - a) - want) < 1e-6 * fmax(1.0, want))) {
            fprintf(stderr, "%s (n %d): loss gain %.9g, want %.9g\n", name, n, b - a, want);
            rt_test_failures++;
        }
        if (t == 0) {
            rt_metrics m;
            rt_data de = d;
            de.n = n;
            CHECK_RC(rt_exec_evaluate(e1, &de, &m));
            CHECK(fabs(m.loss - b) < 1e-5 * fmax(1.0, fabs(b)));
        }
        /* gradients of the total, before and after the regularized value */
        for (int pi = 0; pi < 4; pi++) rt_test_fd_param(e1, &d, n, pi, 0, 2e-4, name);
    }
    rt_exec_destroy(e0);
    rt_exec_destroy(e1);
    rt_graph_destroy(g0);
    rt_graph_destroy(g1);
}

/* js[0] without, js[1] with an L1L2(l1, l2) activity regularizer whose
 * penalty is that of the model's output (width values per sample), given
 * the same weights: the loss gains the penalty over the batch, and the
 * gradients pass finite differences */
static void check_pair(const char *name, const char *js0, const char *js1, int width, double l1,
                       double l2)
{
    const char *js[2] = {js0, js1};
    rt_graph *g[2];
    rt_exec *e[2];
    for (int k = 0; k < 2; k++) {
        char err[1024];
        int rc = rt_keras_import(js[k], strlen(js[k]), &g[k], err, sizeof err);
        if (rc < 0) fprintf(stderr, "%s import: %s\n", name, err);
        REQUIRE(rc == 0);
        e[k] = make_exec_w(g[k], width);
    }
    const int np = rt_plan_n_params(rt_exec_plan(e[1]));
    REQUIRE(np == rt_plan_n_params(rt_exec_plan(e[0])));
    for (int pi = 0; pi < np; pi++) {
        float w[4 * 5 * 5];
        CHECK_RC(rt_exec_get_param(e[1], pi, w));
        CHECK_RC(rt_exec_set_param(e[0], pi, w));
    }
    rt_data d = {.x = X, .y = Y, .y_dtype = RT_F32, .n = NB};
    double a, b;
    CHECK_RC(rt_exec_compute_grads(e[0], &d, NB, &a));
    CHECK_RC(rt_exec_compute_grads(e[1], &d, NB, &b));
    float v[NB * 5];
    CHECK_RC(rt_exec_predict(e[1], X, NB, v));
    const double want = penalty(v, NB, width, l1, l2) / NB;
    if (!(want > 0 && fabs((b - a) - want) < 1e-6)) {
        fprintf(stderr, "%s: loss gain %.9g, want %.9g\n", name, b - a, want);
        rt_test_failures++;
    }
    for (int pi = 0; pi < np; pi++) rt_test_fd_param(e[1], &d, NB, pi, 0, 2e-4, name);
    for (int k = 0; k < 2; k++) {
        rt_exec_destroy(e[k]);
        rt_graph_destroy(g[k]);
    }
}

/* input (2, 3) -> LSTM(5) with an L1L2 activity regularizer: the model's
 * output is the regularized value */
static void test_lstm(void)
{
    const char *fmt =
        "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": ["
        "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 2, 3], \"name\": \"x\"}},"
        "{\"class_name\": \"LSTM\", \"config\": {\"name\": \"l\", \"units\": 5%s}}]}}";
    char js[2][1024];
    snprintf(js[0], sizeof js[0], fmt, "");
    snprintf(js[1], sizeof js[1], fmt,
             ", \"activity_regularizer\": {\"class_name\": \"L1L2\", \"config\": {\"l1\": 0.03, \"l2\": 0.08}}");
    check_pair("LSTM", js[0], js[1], 5, 0.03, 0.08);
}

/* input (2, 3) -> Bidirectional(LSTM(2), concat) whose wrapped LSTM has an
 * activity regularizer: Keras' nested call adds it on each half's output
 * (keras/layers/wrappers.py Bidirectional.call calls forward_layer and
 * backward_layer; base_layer's __call__ adds each one's activity loss),
 * so the penalty is the one of the concatenated output, over the batch */
static void test_bidirectional(void)
{
    const char *fmt =
        "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": ["
        "{\"class_name\": \"Bidirectional\", \"config\": {\"name\": \"bi\", \"batch_input_shape\": [null, 2, 3], "
        "\"merge_mode\": \"concat\", \"layer\": {\"class_name\": \"%s\", \"config\": {\"name\": \"l\", \"units\": 2%s}}}}]}}";
    static const char *const cls[2] = {"LSTM", "CuDNNGRU"};
    for (int ci = 0; ci < 2; ci++) {
        char js[2][1024];
        snprintf(js[0], sizeof js[0], fmt, cls[ci], "");
        snprintf(js[1], sizeof js[1], fmt, cls[ci],
                 ", \"activity_regularizer\": {\"class_name\": \"L1L2\", \"config\": {\"l1\": 0.04, \"l2\": 0.06}}");
        check_pair(cls[ci], js[0], js[1], 4, 0.04, 0.06);
    }
}

static void test_bad(void)
{
    struct {
        const char *h, *mid, *want;
    } cases[] = {
        {"\"activity_regularizer\": {\"class_name\": \"L1L2\", \"config\": {\"l1\": -0.1, \"l2\": 0}}", "",
         "negative"},
        {"\"activity_regularizer\": {\"class_name\": \"OrthogonalRegularizer\", \"config\": {\"factor\": 0.1}}", "",
         "unsupported regularizer"},
        {"", "{\"class_name\": \"ActivityRegularization\", \"config\": {\"name\": \"ar\", \"l1\": -1.0}}",
         "l1, l2 >= 0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rt_graph *g = NULL;
        char err[1024] = "";
        int rc = import(cases[i].h, cases[i].mid, "", 0, &g, err, sizeof err);
        CHECK(rc < 0);
        if (rc < 0 && (!strstr(err, cases[i].want) || !strstr(err, i < 2 ? "'h'" : "'ar'"))) {
            fprintf(stderr, "case %zu: error '%s'\n", i, err);
            rt_test_failures++;
        }
        rt_graph_destroy(g);
    }
}

int main(void)
{
    make_data();
    check_case("L1L2 on hidden", "\"activity_regularizer\": {\"class_name\": \"L1L2\", \"config\": {\"l1\": 0.05, \"l2\": 0.1}}",
               "", "", 0, 0, 0.05, 0.1);
    check_case("L2 on output", "",
               "", "\"activity_regularizer\": {\"class_name\": \"L2\", \"config\": {\"l2\": 0.2}}", 0, 1, 0, 0.2);
    check_case("L1 string on output", "", "", "\"activity_regularizer\": \"l1\"", 0, 1, 0.01, 0);
    check_case("Keras 3 L1 on hidden",
               "\"activity_regularizer\": {\"module\": \"keras.regularizers\", \"class_name\": \"L1\", \"config\": {\"l1\": 0.03}, \"registered_name\": null}",
               "", "", 1, 0, 0.03, 0);
    check_case("ActivityRegularization",  "",
               "{\"class_name\": \"ActivityRegularization\", \"config\": {\"name\": \"ar\", \"trainable\": true, \"dtype\": \"float32\", \"l1\": 0.04, \"l2\": 0.07}}",
               "", 0, 0, 0.04, 0.07);
    check_case("Keras 3 ActivityRegularization", "",
               "{\"module\": \"keras.layers\", \"registered_name\": null, \"class_name\": \"ActivityRegularization\", \"config\": {\"name\": \"ar\", \"l1\": 0.02, \"l2\": 0.05, \"activity_regularizer\": {\"module\": \"keras.regularizers\", \"class_name\": \"L1L2\", \"config\": {\"l1\": 0.02, \"l2\": 0.05}, \"registered_name\": null}}}",
               "", 1, 0, 0.02, 0.05);
    test_lstm();
    test_bidirectional();
    test_bad();
    return rt_test_done("keras_actreg");
}
