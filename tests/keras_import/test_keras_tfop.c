/*
 * test_keras_tfop.c - tf.keras' recorded TensorFlow functions (TFOpLambda,
 * keras/layers/core/tf_op_layer.py; the call's other arguments in the
 * inbound node, keras/engine/node.py serialize) and Softmax's mask:
 *   - TFOpLambda math.not_equal(x, 0) passed as an LSTM's mask (how tf.keras
 *     2.x records Embedding(mask_zero)'s mask in a Functional model) gives
 *     the predictions and gradients of Embedding(mask_zero=True) itself;
 *   - element-wise add/subtract/multiply/divide/maximum of two tensors and
 *     of a tensor and a constant (a number, a list, a list with
 *     TensorFlow's leading batch 1), against the formula in double;
 *   - Softmax called with mask= (Keras 3's NotEqual, tf.keras' TFOpLambda):
 *     keras/src/layers/activations/softmax.py, softmax(where(mask, x,
 *     -1e9)), transcribed here in double;
 *   - an unsupported function is refused by name.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/rt_test.h"
#include "import_keras.h"
#include "rtrain/rt_error.h"

static char err[4096];

static rt_exec *make(const char *js, int label_values)
{
    rt_graph *g = NULL;
    int rc = rt_keras_import(js, strlen(js), &g, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "import: %s\n", err);
        rt_test_failures++;
        return NULL;
    }
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_MSE;
    cfg.label_dtype = RT_F32;
    cfg.label_ndim = 1;
    cfg.label_dims[0] = label_values;
    cfg.batch_size = 4;
    cfg.opt = RT_OPT_SGD;
    cfg.lr = 0.1f;
    cfg.shuffle = 0;
    cfg.metrics = 0;
    cfg.seed = 3;
    rt_plan *p = NULL;
    rc = rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err);
    rt_graph_destroy(g);
    if (rc < 0) {
        fprintf(stderr, "compile: %s\n", err);
        rt_test_failures++;
        return NULL;
    }
    rt_exec *e = NULL;
    REQUIRE(rt_exec_create(p, &e) == 0);
    rt_plan_release(p);
    return e;
}

static int find(rt_exec *e, const char *name, int64_t *n)
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
    REQUIRE(!"parameter not found");
    return -1;
}

/* a tf.keras 2 Functional model of one input x (batch_input_shape
 * [null, n]) whose layers (a JSON list's items) end in the output out */
static char *model(int n, const char *layers, const char *out)
{
    static char js[8192];
    snprintf(js, sizeof js,
             "{\"class_name\": \"Functional\", \"config\": {\"name\": \"m\", \"layers\": ["
             "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, %d],"
             " \"dtype\": \"float32\", \"name\": \"x\"}, \"name\": \"x\", \"inbound_nodes\": []}, %s],"
             " \"input_layers\": [[\"x\", 0, 0]], \"output_layers\": [[\"%s\", 0, 0]]},"
             " \"keras_version\": \"2.11.0\", \"backend\": \"tensorflow\"}",
             n, layers, out);
    return js;
}

/* a TFOpLambda layer as tf.keras 2.11 writes it: the first argument the
 * entry itself, the others its keyword arguments */
#define TFOP(NAME, FN, SRC, KW)                                                             \
    "{\"class_name\": \"TFOpLambda\", \"config\": {\"name\": \"" NAME "\", \"trainable\": true," \
    " \"dtype\": \"float32\", \"function\": \"" FN "\"}, \"name\": \"" NAME "\","            \
    " \"inbound_nodes\": [[\"" SRC "\", 0, 0, {" KW ", \"name\": null}]]}"

static char *mask_model(int mask_zero, int tfop)
{
    static char layers[4096];
    snprintf(layers, sizeof layers,
             "{\"class_name\": \"Embedding\", \"config\": {\"name\": \"e\", \"input_dim\": 10,"
             " \"output_dim\": 3, \"mask_zero\": %s}, \"name\": \"e\", \"inbound_nodes\":"
             " [[[\"x\", 0, 0, {}]]]}, %s{\"class_name\": \"LSTM\", \"config\": {\"name\": \"l\","
             " \"units\": 2}, \"name\": \"l\", \"inbound_nodes\": [[[\"e\", 0, 0, {%s}]]]}",
             mask_zero ? "true" : "false",
             tfop ? TFOP("tf.math.not_equal", "math.not_equal", "x", "\"y\": 0") ", " : "",
             tfop ? "\"mask\": [\"tf.math.not_equal\", 0, 0]" : "");
    return strdup(model(5, layers, "l"));
}

static void not_equal_mask(void)
{
    char *a = mask_model(1, 0), *b = mask_model(0, 1), *c = mask_model(0, 0);
    rt_exec *implicit = make(a, 2), *recorded = make(b, 2), *plain = make(c, 2);
    free(a), free(b), free(c);
    if (!implicit || !recorded || !plain)
        return;
    static const char *const names[] = {"e/embeddings", "l/kernel", "l/recurrent_kernel", "l/bias"};
    for (int k = 0; k < 4; k++) {
        int64_t n;
        float w[64];
        CHECK_RC(rt_exec_get_param(implicit, find(implicit, names[k], &n), w));
        /* the same weights in all three */
        CHECK_RC(rt_exec_set_param(recorded, find(recorded, names[k], &n), w));
        CHECK_RC(rt_exec_set_param(plain, find(plain, names[k], &n), w));
    }
    float x[4 * 5] = {1, 2, 0, 3, 4, 0, 0, 5, 6, 7, 8, 9, 1, 2, 3, 4, 0, 0, 0, 0};
    float y[4 * 2] = {0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f, 0.7f, -0.8f};
    float pi[8], pr[8], pp[8];
    CHECK_RC(rt_exec_predict(implicit, x, 4, pi));
    CHECK_RC(rt_exec_predict(recorded, x, 4, pr));
    CHECK_RC(rt_exec_predict(plain, x, 4, pp));
    double diff = 0, moves = 0;
    for (int i = 0; i < 8; i++) diff = fmax(diff, fabs(pi[i] - pr[i]));
    for (int i = 0; i < 2; i++) moves = fmax(moves, fabs(pi[i] - pp[i]));
    CHECK(diff == 0 && moves > 1e-4);
    rt_data d = {.x = x, .y = y, .y_dtype = RT_F32, .n = 4};
    double li, lr;
    CHECK_RC(rt_exec_compute_grads(implicit, &d, 4, &li));
    CHECK_RC(rt_exec_compute_grads(recorded, &d, 4, &lr));
    CHECK(li == lr);
    for (int k = 0; k < 4; k++) {
        int64_t n;
        float gi[64], gr[64];
        CHECK_RC(rt_exec_get_grad(implicit, find(implicit, names[k], &n), gi));
        CHECK_RC(rt_exec_get_grad(recorded, find(recorded, names[k], &n), gr));
        for (int64_t i = 0; i < n; i++) CHECK(gi[i] == gr[i]);
    }
    printf("TFOpLambda math.not_equal mask = Embedding mask_zero's (|dp| = %g, unmasked moves %.3g)\n",
           diff, moves);
    rt_exec_destroy(implicit);
    rt_exec_destroy(recorded);
    rt_exec_destroy(plain);
}

/* y = Dense(identity)(max((2.5 x + x - c) / [[2, 4, 8, 16]], 0.25)) */
static void arithmetic(void)
{
    const char *layers =
        TFOP("tf.math.multiply", "math.multiply", "x", "\"y\": 2.5") ", "
        TFOP("tf.__operators__.add", "__operators__.add", "tf.math.multiply", "\"y\": [\"x\", 0, 0]") ", "
        TFOP("tf.math.subtract", "math.subtract", "tf.__operators__.add", "\"y\": [0.5, -1.0, 1.5, 2.0]") ", "
        TFOP("tf.math.truediv", "math.truediv", "tf.math.subtract", "\"y\": [[2.0, 4.0, 8.0, 16.0]]") ", "
        TFOP("tf.math.maximum", "math.maximum", "tf.math.truediv", "\"y\": 0.25") ", "
        "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 4, \"use_bias\": false,"
        " \"kernel_initializer\": {\"class_name\": \"Identity\", \"config\": {\"gain\": 1.0}}},"
        " \"name\": \"d\", \"inbound_nodes\": [[[\"tf.math.maximum\", 0, 0, {}]]]}";
    rt_exec *e = make(model(4, layers, "d"), 4);
    if (!e)
        return;
    float x[4 * 4], p[16];
    for (int i = 0; i < 16; i++) x[i] = (float)((i * 7) % 11) - 4.0f;
    CHECK_RC(rt_exec_predict(e, x, 4, p));
    static const double c[4] = {0.5, -1.0, 1.5, 2.0}, dv[4] = {2, 4, 8, 16};
    double worst = 0;
    for (int i = 0; i < 16; i++) {
        double v = ((2.5 * x[i] + x[i]) - c[i % 4]) / dv[i % 4];
        worst = fmax(worst, fabs(p[i] - fmax(v, 0.25)));
    }
    CHECK(worst < 1e-6);
    printf("TFOpLambda arithmetic: |p - formula| = %g\n", worst);
    rt_exec_destroy(e);
    /* a function not imported, and a constant of the wrong shape */
    static const char *const bad[2][3] = {
        {TFOP("tf.math.reduce_mean", "math.reduce_mean", "x", "\"axis\": 1"), "tf.math.reduce_mean",
         "math.reduce_mean"},
        {TFOP("tf.math.add", "math.add", "x", "\"y\": [1.0, 2.0, 3.0]"), "tf.math.add", "broadcast"}};
    for (int k = 0; k < 2; k++) {
        rt_graph *g = NULL;
        const char *js = model(4, bad[k][0], bad[k][1]);
        CHECK(rt_keras_import(js, strlen(js), &g, err, sizeof err) < 0 && !g);
        CHECK(strstr(err, bad[k][2]) != NULL);
        if (!strstr(err, bad[k][2]))
            fprintf(stderr, "  got '%s' (wanted '%s')\n", err, bad[k][2]);
    }
}

/* Softmax()(x, mask=x != 0) -> Dense(2), in tf.keras 2's and Keras 3's form */
static char *softmax_model(int keras3)
{
#define KT(NAME, SHAPE, DT)                                                                    \
    "{\"class_name\": \"__keras_tensor__\", \"config\": {\"shape\": " SHAPE ", \"dtype\": \"" DT \
    "\", \"keras_history\": [\"" NAME "\", 0, 0]}}"
    if (keras3)
        return strdup(
            "{\"module\": \"keras\", \"class_name\": \"Functional\", \"config\": {\"name\": \"m\","
            " \"layers\": [{\"module\": \"keras.layers\", \"class_name\": \"InputLayer\", \"config\":"
            " {\"batch_shape\": [null, 5], \"dtype\": \"float32\", \"name\": \"x\"}, \"name\": \"x\","
            " \"inbound_nodes\": []}, {\"module\": \"keras.src.ops.numpy\", \"class_name\": \"NotEqual\","
            " \"registered_name\": \"NotEqual\", \"name\": \"ne\", \"config\": {\"name\": \"ne\"},"
            " \"inbound_nodes\": [{\"args\": [" KT("x", "[null, 5]", "float32") ", 0], \"kwargs\": {}}]},"
            " {\"module\": \"keras.layers\", \"class_name\": \"Softmax\", \"config\": {\"name\": \"s\","
            " \"axis\": -1}, \"name\": \"s\", \"inbound_nodes\": [{\"args\": [" KT("x", "[null, 5]", "float32")
            "], \"kwargs\": {\"mask\": " KT("ne", "[null, 5]", "bool") "}}]}, {\"module\": \"keras.layers\","
            " \"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 2}, \"name\": \"d\","
            " \"inbound_nodes\": [{\"args\": [" KT("s", "[null, 5]", "float32") "], \"kwargs\": {}}]}],"
            " \"input_layers\": [[\"x\", 0, 0]], \"output_layers\": [[\"d\", 0, 0]]}}");
#undef KT
    return strdup(model(5,
                        TFOP("tf.math.not_equal", "math.not_equal", "x", "\"y\": 0") ", "
                        "{\"class_name\": \"Softmax\", \"config\": {\"name\": \"s\", \"axis\": -1},"
                        " \"name\": \"s\", \"inbound_nodes\": [[[\"x\", 0, 0, {\"mask\":"
                        " [\"tf.math.not_equal\", 0, 0]}]]]}, {\"class_name\": \"Dense\", \"config\":"
                        " {\"name\": \"d\", \"units\": 2}, \"name\": \"d\", \"inbound_nodes\":"
                        " [[[\"s\", 0, 0, {}]]]}",
                        "d"));
}

static void softmax_mask(void)
{
    for (int k3 = 0; k3 < 2; k3++) {
        char *js = softmax_model(k3);
        rt_exec *e = make(js, 2);
        free(js);
        if (!e)
            continue;
        int64_t n;
        float w[10], b[2];
        CHECK_RC(rt_exec_get_param(e, find(e, "d/kernel", &n), w));
        CHECK_RC(rt_exec_get_param(e, find(e, "d/bias", &n), b));
        /* the last row fully masked: Keras' where gives five -1e9, uniform */
        float x[4 * 5] = {1, 2, 0, 3, -4, 0, 0, 5, 6, 0.5f, 8, 9, 1, 2, 3, 0, 0, 0, 0, 0};
        float p[8];
        CHECK_RC(rt_exec_predict(e, x, 4, p));
        double worst = 0;
        for (int r = 0; r < 4; r++) {
            double z[5], mx = -INFINITY, s = 0;
            for (int t = 0; t < 5; t++) {
                z[t] = x[r * 5 + t] != 0 ? x[r * 5 + t] : -1e9;
                mx = fmax(mx, z[t]);
            }
            for (int t = 0; t < 5; t++) s += exp(z[t] - mx);
            for (int u = 0; u < 2; u++) {
                double o = b[u];
                for (int t = 0; t < 5; t++) o += exp(z[t] - mx) / s * w[t * 2 + u];
                worst = fmax(worst, fabs(o - p[r * 2 + u]));
            }
        }
        CHECK(worst < 1e-6);
        printf("Softmax(mask=) %s: |p - Keras' formula| = %g\n", k3 ? "Keras 3" : "tf.keras", worst);
        rt_exec_destroy(e);
    }
}

int main(void)
{
    not_equal_mask();
    arithmetic();
    softmax_mask();
    return rt_test_done("keras_tfop");
}
