/*
 * test_keras_timedist.c - TimeDistributed(Dense) through the importer: its
 * output, per time step, is the inner Dense applied to that step (computed
 * here in double from the imported weights), its gradient passes central
 * finite differences, and other inner layers or wrapper settings are
 * refused naming the layer.
 *
 * A step mask reaching the output (Embedding(mask_zero) -> LSTM(return_
 * sequences) -> TimeDistributed(Dense), the corpus' NER tagger): Keras masks
 * the loss per step. Keras 3 keras/src/losses/loss.py (apply_mask, then
 * reduce_values "sum_over_batch_size"): mask *= total / (valid + eps),
 * loss = sum(l sw mask) / total, i.e. sum(w l m) / sum(m); Keras 2.2.4
 * keras/engine/training_utils.py weighted_masked_objective: score *= m,
 * score /= mean(m) + eps, mean over steps, * w, mean over the batch: the
 * same without sample weights. Transcribed here in double from the
 * predictions; the gradient passes finite differences, labels at masked
 * steps change nothing, accuracy and mae count the kept steps only.
 * PyTorch's mse_loss given to such a model: its mean over the kept steps'
 * values; cross_entropy (classes on dim 1) is refused.
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

/* the NER pattern, small: (5,) indices -> Embedding(mask_zero) -> LSTM(4,
 * return_sequences) -> TimeDistributed(Dense(3)) -> softmax */
static const char *ner =
    "{\"class_name\": \"Model\", \"config\": {\"name\": \"m\", \"layers\": ["
    "{\"name\": \"x\", \"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 5],"
    " \"name\": \"x\"}, \"inbound_nodes\": []},"
    "{\"name\": \"e\", \"class_name\": \"Embedding\", \"config\": {\"name\": \"e\", \"input_dim\": 7,"
    " \"output_dim\": 3, \"mask_zero\": true}, \"inbound_nodes\": [[[\"x\", 0, 0, {}]]]},"
    "{\"name\": \"l\", \"class_name\": \"LSTM\", \"config\": {\"name\": \"l\", \"units\": 4,"
    " \"return_sequences\": true}, \"inbound_nodes\": [[[\"e\", 0, 0, {}]]]},"
    "{\"name\": \"td\", \"class_name\": \"TimeDistributed\", \"config\": {\"name\": \"td\", \"layer\":"
    " {\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 3}}}, \"inbound_nodes\":"
    " [[[\"l\", 0, 0, {}]]]},"
    "{\"name\": \"a\", \"class_name\": \"Activation\", \"config\": {\"name\": \"a\", \"activation\":"
    " \"softmax\"}, \"inbound_nodes\": [[[\"td\", 0, 0, {}]]]}],"
    " \"input_layers\": [[\"x\", 0, 0]], \"output_layers\": [[\"a\", 0, 0]]}}";

static rt_exec *ner_exec(rt_loss_kind loss, uint32_t metrics)
{
    rt_graph *g = NULL;
    char err[1024];
    int rc = rt_keras_import(ner, strlen(ner), &g, err, sizeof err);
    if (rc < 0) fprintf(stderr, "ner import: %s\n", err);
    REQUIRE(rc == 0);
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = loss;
    cfg.label_dtype = RT_F32;
    cfg.label_ndim = loss == RT_LOSS_SPARSE_CE ? 1 : 2;
    cfg.label_dims[0] = 5;
    cfg.label_dims[1] = 3;
    cfg.batch_size = 4;
    cfg.metrics = metrics;
    cfg.opt = RT_OPT_SGD;
    cfg.lr = 0.1f;
    cfg.seed = 5;
    rt_plan *p = NULL;
    rc = rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err);
    if (rc < 0) fprintf(stderr, "ner compile: %s\n", err);
    REQUIRE(rc == 0);
    rt_exec *e = NULL;
    REQUIRE(rt_exec_create(p, &e) == 0);
    rt_plan_release(p);
    rt_graph_destroy(g);
    return e;
}

static void masked_loss(void)
{
    /* 4 samples of 5 steps; index 0 is masked (sample 3 wholly) */
    float x[4 * 5] = {1, 2, 0, 3, 0, 4, 5, 6, 1, 2, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0};
    float ys[4 * 5] = {0, 1, 2, 2, 1, 1, 0, 2, 1, 0, 2, 1, 0, 1, 2, 1, 1, 0, 0, 2};
    float sw[4] = {1.0f, 0.5f, 2.0f, 3.0f};
    rt_exec *e = ner_exec(RT_LOSS_SPARSE_CE, RT_METRIC_ACCURACY);
    float p[4 * 5 * 3];
    CHECK_RC(rt_exec_predict(e, x, 4, p));
    /* Keras: sum(w l m) / sum(m), l = -log p[label] (the loss reads the
     * logits; the same to rounding); accuracy over the kept steps */
    double lw = 0, l1 = 0, msum = 0, hit = 0;
    for (int b = 0; b < 4; b++)
        for (int t = 0; t < 5; t++) {
            const int r = b * 5 + t, lab = (int)ys[r];
            if (x[r] == 0) continue;
            const double l = -log((double)p[r * 3 + lab]);
            int am = 0;
            for (int j = 1; j < 3; j++) am = p[r * 3 + j] > p[r * 3 + am] ? j : am;
            lw += sw[b] * l, l1 += l, msum += 1, hit += am == lab;
        }
    rt_data d = {.x = x, .y = ys, .y_dtype = RT_F32, .n = 4};
    double loss;
    CHECK_RC(rt_exec_compute_grads(e, &d, 4, &loss));
    CHECK(fabs(loss - l1 / msum) < 1e-5 * fabs(l1 / msum));
    rt_metrics m;
    CHECK_RC(rt_exec_evaluate(e, &d, &m));
    CHECK(fabs(m.loss - l1 / msum) < 1e-5 * fabs(l1 / msum));
    CHECK(fabs(m.acc - hit / msum) < 1e-9);
    rt_data dw = {.x = x, .y = ys, .y_dtype = RT_F32, .n = 4, .sw = sw};
    CHECK_RC(rt_exec_evaluate(e, &dw, &m));
    CHECK(fabs(m.loss - lw / msum) < 1e-5 * fabs(lw / msum));
    printf("masked loss: %.6f (Keras %.6f), weighted %.6f (Keras %.6f), accuracy %.4f over %g"
           " kept steps\n", loss, l1 / msum, m.loss, lw / msum, hit / msum, msum);
    /* the gradient of the masked loss: finite differences on every weight */
    for (int i = 0; i < rt_plan_n_params(rt_exec_plan(e)); i++)
        rt_test_fd_param(e, &d, 4, i, 0, 1e-4, "masked loss");
    /* labels at masked steps change neither the loss nor the gradient */
    float ys2[4 * 5], g1[64], g2[64];
    for (int r = 0; r < 20; r++) ys2[r] = x[r] == 0 ? (float)((int)(ys[r] + 1) % 3) : ys[r];
    rt_data d2 = {.x = x, .y = ys2, .y_dtype = RT_F32, .n = 4};
    double loss2;
    CHECK_RC(rt_exec_compute_grads(e, &d, 4, &loss));
    const int dk = rt_plan_n_params(rt_exec_plan(e)) - 2; /* td/d kernel (4, 3) */
    CHECK_RC(rt_exec_get_grad(e, dk, g1));
    CHECK_RC(rt_exec_compute_grads(e, &d2, 4, &loss2));
    CHECK_RC(rt_exec_get_grad(e, dk, g2));
    CHECK(loss == loss2);
    for (int i = 0; i < 12; i++) CHECK(g1[i] == g2[i]);
    /* a batch of masked steps only: loss 0, no gradient (Keras' 0 / eps) */
    float xz[5] = {0, 0, 0, 0, 0};
    rt_data dz = {.x = xz, .y = ys, .y_dtype = RT_F32, .n = 1};
    CHECK_RC(rt_exec_compute_grads(e, &dz, 1, &loss));
    CHECK_RC(rt_exec_get_grad(e, dk, g1));
    CHECK(loss == 0);
    for (int i = 0; i < 12; i++) CHECK(g1[i] == 0);
    rt_exec_destroy(e);
    /* mae on one-hot labels (MSE loss): over the kept steps too */
    e = ner_exec(RT_LOSS_MSE, RT_METRIC_MAE);
    CHECK_RC(rt_exec_predict(e, x, 4, p));
    float yo[4 * 5 * 3];
    double se = 0, ae = 0;
    for (int r = 0; r < 20; r++)
        for (int j = 0; j < 3; j++) {
            yo[r * 3 + j] = (float)(j == (int)ys[r]);
            if (x[r] == 0) continue;
            const double df = (double)p[r * 3 + j] - yo[r * 3 + j];
            se += df * df / 3, ae += fabs(df) / 3;
        }
    rt_data dm = {.x = x, .y = yo, .y_dtype = RT_F32, .n = 4};
    CHECK_RC(rt_exec_evaluate(e, &dm, &m));
    CHECK(fabs(m.loss - se / msum) < 1e-5 * (se / msum));
    CHECK(m.n_values == 1 && fabs(m.values[0] - ae / msum) < 1e-5 * (ae / msum));
    rt_test_fd_param(e, &dm, 4, dk, 0, 1e-4, "masked mse");
    rt_exec_destroy(e);
    /* PyTorch's mse_loss (elementwise) under the mask: its "mean" over the
     * kept steps' values, sum(d^2 m) / (sum(m) C), as torch's
     * F.mse_loss(y[m], t[m]) */
    e = ner_exec(RT_LOSS_MSE_TORCH, 0);
    CHECK_RC(rt_exec_predict(e, x, 4, p));
    se = 0;
    for (int r = 0; r < 20; r++)
        for (int j = 0; j < 3 && x[r] != 0; j++) {
            const double df = (double)p[r * 3 + j] - yo[r * 3 + j];
            se += df * df;
        }
    CHECK_RC(rt_exec_compute_grads(e, &dm, 4, &loss));
    CHECK(fabs(loss - se / (msum * 3)) < 1e-5 * (se / (msum * 3)));
    rt_test_fd_param(e, &dm, 4, dk, 0, 1e-4, "masked mse_loss");
    rt_exec_destroy(e);
    /* cross_entropy reads its classes on dim 1, not the rows a mask keeps */
    rt_graph *g = NULL;
    char err[1024];
    REQUIRE(rt_keras_import(ner, strlen(ner), &g, err, sizeof err) == 0);
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_CROSS_ENTROPY;
    cfg.label_dtype = RT_I32;
    cfg.label_ndim = 1;
    cfg.label_dims[0] = 3;
    cfg.batch_size = 4;
    cfg.loss_check = 0;
    rt_plan *pl = NULL;
    err[0] = 0;
    CHECK(rt_plan_compile(g, &cfg, &pl, NULL, err, sizeof err) == RT_EUNIMPLEMENTED && !pl);
    if (!strstr(err, "cross_entropy reads its classes on dim 1")) {
        fprintf(stderr, "cross_entropy under a mask: '%s'\n", err);
        rt_test_failures++;
    }
    rt_graph_destroy(g);
}

int main(void)
{
    masked_loss();
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
