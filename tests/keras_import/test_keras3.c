/*
 * test_keras3.c - Keras 3 serialization wherever an object can appear, and
 * the spellings older Keras versions saved:
 *   - initializers as Keras 3 objects ({"module", "class_name", "config",
 *     "registered_name"}), OrthogonalInitializer/IdentityInitializer (Keras
 *     3.0-3.3's class names): the real Keras 3 LSTM of the corpus
 *     (keras-corpus-2/politisense_lstm_keras3.json) draws an orthogonal
 *     recurrent kernel (W W^T = I for its 32 x 128 kernel, as Keras'
 *     Orthogonal: rows orthonormal when there are fewer rows than columns);
 *   - regularizers and constraints as Keras 3 objects: the loss gains
 *     l2 sum(w^2), the norm stays under MaxNorm's bound after a step;
 *   - activations as Keras 3 objects ({"class_name": "function", "config":
 *     "relu"}) and activation layers given as the activation: the same
 *     predictions as the name; one that has no name is refused, naming it;
 *   - DTypePolicy: float32 accepted (the real Keras 3.10 TF.js model of
 *     the corpus), mixed_float16 refused with the reason;
 *   - the saved loss: Keras 3's loss object and loss function object,
 *     Keras 2.12's class-name string ("SparseCategoricalCrossentropy"),
 *     "MSE", all in the engine's names; the saved optimizer object.
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

/* a file of the second corpus, imported (the test fails where it does not) */
static char *corpus2(const char *root, const char *file, const char *what)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fixtures/keras-corpus-2/%s", root, file);
    char *js = rt_test_slurp(path, NULL);
    REQUIRE(js);
    rt_graph *g = NULL;
    int rc = rt_keras_import(js, strlen(js), &g, err, sizeof err);
    CHECK(rc == 0);
    if (rc < 0) fprintf(stderr, "%s: %s\n", what, err);
    rt_graph_destroy(g);
    return js;
}

static rt_exec *make(const char *js, rt_loss_kind loss, int label_values)
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
    cfg.loss = loss;
    cfg.label_dtype = RT_F32;
    cfg.label_ndim = label_values > 1;
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

static void expect_refused(const char *js, const char *needle)
{
    rt_graph *g = NULL;
    int rc = rt_keras_import(js, strlen(js), &g, err, sizeof err);
    CHECK(rc < 0 && g == NULL);
    CHECK(strstr(err, needle) != NULL);
    if (rc >= 0 || !strstr(err, needle))
        fprintf(stderr, "  got %s: '%s' (wanted '%s')\n", rt_err_name(rc), err, needle);
    rt_graph_destroy(g);
}

/* the corpus' Keras 3 LSTM: OrthogonalInitializer, GlorotUniform and
 * RandomUniform objects */
static void keras3_lstm(const char *root)
{
    char *js = corpus2(root, "politisense_lstm_keras3.json", "Keras 3 LSTM");
    /* the LSTM alone (the corpus model's 8.8M-parameter Embedding is
     * not needed to see its initializers) */
    const char *lstm = strstr(js, "{\"module\": \"keras.layers\", \"class_name\": \"LSTM\"");
    const char *end = strstr(js, "{\"module\": \"keras.layers\", \"class_name\": \"Dense\"");
    REQUIRE(lstm && end && end > lstm);
    char small[8192];
    snprintf(small, sizeof small,
             "{\"module\": \"keras\", \"class_name\": \"Sequential\", \"config\": {\"name\": \"s\","
             " \"layers\": [{\"module\": \"keras.layers\", \"class_name\": \"InputLayer\", \"config\":"
             " {\"batch_shape\": [null, 5, 64], \"dtype\": \"float32\", \"name\": \"in\"},"
             " \"registered_name\": null}, %.*s]}}", (int)(end - lstm - 2), lstm);
    rt_exec *e = make(small, RT_LOSS_MSE, 32);
    free(js);
    if (!e) return;
    int64_t n;
    int i = find(e, "lstm_2/recurrent_kernel", &n);
    REQUIRE(n == 32 * 128);
    float *w = malloc(sizeof(float) * (size_t)n);
    rt_exec_get_param(e, i, w);
    double worst = 0;
    for (int a = 0; a < 32; a++)
        for (int b = 0; b < 32; b++) {
            double s = 0;
            for (int k = 0; k < 128; k++) s += (double)w[a * 128 + k] * w[b * 128 + k];
            worst = fmax(worst, fabs(s - (a == b)));
        }
    CHECK(worst < 1e-5);
    printf("Keras 3 LSTM: OrthogonalInitializer kernel has |W W^T - I| < %.1e\n", worst);
    /* GlorotUniform object: within Keras' limit sqrt(6 / (64 + 128)) */
    i = find(e, "lstm_2/kernel", &n);
    float *k = malloc(sizeof(float) * (size_t)n);
    rt_exec_get_param(e, i, k);
    double lim = sqrt(6.0 / (64 + 128)), mx = 0;
    for (int64_t j = 0; j < n; j++) mx = fmax(mx, fabs(k[j]));
    CHECK(mx <= lim && mx > 0.9 * lim);
    free(w);
    free(k);
    rt_exec_destroy(e);
}

#define DENSE3(NAME, EXTRA)                                                                 \
    "{\"module\": \"keras.layers\", \"class_name\": \"Dense\", \"config\": {\"name\": \"" NAME "\","\
    " \"trainable\": true, \"dtype\": {\"module\": \"keras\", \"class_name\": \"DTypePolicy\","     \
    " \"config\": {\"name\": \"float32\"}, \"registered_name\": null}, \"units\": 3,"               \
    " \"use_bias\": true, \"kernel_initializer\": {\"module\": \"keras.initializers\","             \
    " \"class_name\": \"RandomNormal\", \"config\": {\"mean\": 0.0, \"stddev\": 1.0, \"seed\": null},"\
    " \"registered_name\": null}" EXTRA "}, \"registered_name\": null,"                            \
    " \"build_config\": {\"input_shape\": [null, 4]}}"
#define MODEL3(LAYER)                                                                        \
    "{\"module\": \"keras\", \"class_name\": \"Sequential\", \"config\": {\"name\": \"s\","       \
    " \"layers\": [{\"module\": \"keras.layers\", \"class_name\": \"InputLayer\", \"config\":"    \
    " {\"batch_shape\": [null, 4], \"dtype\": \"float32\", \"name\": \"in\"},"                     \
    " \"registered_name\": null}, " LAYER "]}, \"registered_name\": null}"

static void predict4(rt_exec *e, float *out)
{
    float x[8 * 4];
    for (int i = 0; i < 32; i++) x[i] = (float)((i * 7) % 11) / 5.0f - 1.0f;
    CHECK_RC(rt_exec_predict(e, x, 8, out));
}

/* the same weights in both; predictions equal */
static void same_as(const char *a, const char *b, const char *what)
{
    rt_exec *ea = make(a, RT_LOSS_MSE, 3), *eb = make(b, RT_LOSS_MSE, 3);
    if (!ea || !eb) {
        fprintf(stderr, "%s: not built\n", what);
        rt_exec_destroy(ea);
        rt_exec_destroy(eb);
        return;
    }
    int64_t n;
    float w[12];
    rt_exec_get_param(ea, find(ea, "d/kernel", &n), w);
    rt_exec_set_param(eb, find(eb, "d/kernel", &n), w);
    float pa[24], pb[24];
    predict4(ea, pa);
    predict4(eb, pb);
    int neg = 0, diff = 0;
    for (int i = 0; i < 24; i++) {
        diff |= pa[i] != pb[i];
        neg |= pb[i] < 0;
    }
    CHECK(!diff);
    printf("%s: %s\n", what, diff ? "DIFFERS" : "same predictions");
    (void)neg;
    rt_exec_destroy(ea);
    rt_exec_destroy(eb);
}

static void activations(void)
{
    same_as(MODEL3(DENSE3("d", ", \"activation\": \"relu\"")),
            MODEL3(DENSE3("d", ", \"activation\": {\"module\": \"keras.activations\","
                               " \"class_name\": \"function\", \"config\": \"relu\","
                               " \"registered_name\": \"relu\"}")),
            "activation function object");
    same_as(MODEL3(DENSE3("d", ", \"activation\": \"leaky_relu\"")),
            MODEL3(DENSE3("d", ", \"activation\": {\"module\": \"keras.layers\", \"class_name\":"
                               " \"LeakyReLU\", \"config\": {\"name\": \"l\", \"negative_slope\": 0.2},"
                               " \"registered_name\": null}")),
            "LeakyReLU(0.2) as the activation");
    same_as(MODEL3(DENSE3("d", ", \"activation\": \"softmax\"")),
            MODEL3(DENSE3("d", ", \"activation\": {\"module\": \"keras.layers\", \"class_name\":"
                               " \"Softmax\", \"config\": {\"name\": \"sm\", \"axis\": -1},"
                               " \"registered_name\": null}")),
            "Softmax layer as the activation");
    expect_refused(MODEL3(DENSE3("d", ", \"activation\": {\"module\": \"keras.layers\", \"class_name\":"
                                      " \"LeakyReLU\", \"config\": {\"negative_slope\": 0.1},"
                                      " \"registered_name\": null}")),
                   "LeakyReLU object with negative_slope 0.1");
    expect_refused(MODEL3(DENSE3("d", ", \"activation\": {\"module\": null, \"class_name\": "
                                      "\"function\", \"config\": \"my_act\", \"registered_name\":"
                                      " \"Custom>my_act\"}")),
                   "custom function 'Custom>my_act'");
}

static void regularizers_constraints(void)
{
    /* L2 object: the evaluate loss gains 0.5 sum(w^2) */
    rt_exec *a = make(MODEL3(DENSE3("d", ", \"activation\": \"linear\"")), RT_LOSS_MSE, 3);
    rt_exec *b = make(MODEL3(DENSE3("d", ", \"activation\": \"linear\", \"kernel_regularizer\":"
                                         " {\"module\": \"keras.regularizers\", \"class_name\": \"L2\","
                                         " \"config\": {\"l2\": 0.5}, \"registered_name\": null},"
                                         " \"kernel_constraint\": {\"module\": \"keras.constraints\","
                                         " \"class_name\": \"MaxNorm\", \"config\": {\"max_value\": 0.5,"
                                         " \"axis\": 0}, \"registered_name\": null}")),
                      RT_LOSS_MSE, 3);
    if (!a || !b) {
        rt_exec_destroy(a);
        rt_exec_destroy(b);
        return;
    }
    CHECK(rt_plan_report(rt_exec_plan(b))->n_regularized == 1);
    CHECK(rt_plan_report(rt_exec_plan(b))->n_constrained == 1);
    int64_t n;
    float w[12];
    rt_exec_get_param(a, find(a, "d/kernel", &n), w);
    rt_exec_set_param(b, find(b, "d/kernel", &n), w);
    double sq = 0;
    for (int i = 0; i < 12; i++) sq += (double)w[i] * w[i];
    float x[32], y[24];
    for (int i = 0; i < 32; i++) x[i] = (float)i / 32.0f;
    for (int i = 0; i < 24; i++) y[i] = 0.5f;
    rt_data d = {.x = x, .y = y, .y_dtype = RT_F32, .n = 8};
    rt_metrics ma, mb;
    CHECK_RC(rt_exec_evaluate(a, &d, &ma));
    CHECK_RC(rt_exec_evaluate(b, &d, &mb));
    CHECK(fabs(mb.loss - ma.loss - 0.5 * sq) <= 1e-5 * (1 + mb.loss));
    /* MaxNorm over axis 0: every column's norm <= 0.5 after a step */
    CHECK_RC(rt_exec_train(b, &d, 1, &(rt_train_result){0}, NULL, NULL, NULL));
    rt_exec_get_param(b, find(b, "d/kernel", &n), w);
    for (int c = 0; c < 3; c++) {
        double s = 0;
        for (int r = 0; r < 4; r++) s += (double)w[r * 3 + c] * w[r * 3 + c];
        CHECK(sqrt(s) <= 0.5 + 1e-6);
    }
    printf("Keras 3 L2 and MaxNorm objects: loss + l2 sum(w^2), column norms <= 0.5\n");
    rt_exec_destroy(a);
    rt_exec_destroy(b);
}

static void dtype_policies(const char *root)
{
    char *js = corpus2(root, "detector_ia_keras3_tfjs.json", "Keras 3.10 TF.js model");
    /* its training_config: the loss object, the Adam object */
    rt_keras_compile k;
    CHECK(rt_keras_compile_config(js, strlen(js), &k) == 1);
    rt_loss_kind lk;
    rt_opt_kind ok;
    CHECK(rt_loss_from_name(k.loss, &lk) == 0 && lk == RT_LOSS_SPARSE_CE && !k.from_logits);
    CHECK(rt_opt_from_name(k.optimizer, &ok) == 0 && ok == RT_OPT_ADAM);
    CHECK(fabs(k.lr - 0.001) < 1e-9 && fabs(k.eps - 1e-7) < 1e-12);
    free(js);
    expect_refused(MODEL3("{\"module\": \"keras.layers\", \"class_name\": \"Dense\", \"config\":"
                          " {\"name\": \"d\", \"units\": 3, \"dtype\": {\"module\": \"keras\","
                          " \"class_name\": \"DTypePolicy\", \"config\": {\"name\": \"mixed_float16\"},"
                          " \"registered_name\": null}}, \"registered_name\": null}"),
                   "dtype policy 'mixed_float16' is not supported");
    printf("DTypePolicy: float32 accepted, mixed_float16 refused\n");
}

static void saved_losses(const char *root)
{
    static const struct {
        const char *loss;
        rt_loss_kind want;
        int logits;
    } cases[] = {
        /* Keras 2.12 saves the class name as a string */
        {"\"SparseCategoricalCrossentropy\"", RT_LOSS_SPARSE_CE, 0},
        {"\"MSE\"", RT_LOSS_MSE, 0},
        {"\"LogCosh\"", RT_LOSS_LOGCOSH, 0},
        {"{\"module\": \"keras.losses\", \"class_name\": \"CategoricalCrossentropy\", \"config\":"
         " {\"name\": \"categorical_crossentropy\", \"reduction\": \"sum_over_batch_size\","
         " \"from_logits\": true, \"label_smoothing\": 0.0, \"axis\": -1}, \"registered_name\": null}",
         RT_LOSS_CE, 1},
        /* Keras 3 saves a loss function as a function object */
        {"{\"module\": \"builtins\", \"class_name\": \"function\", \"config\": \"binary_crossentropy\","
         " \"registered_name\": \"function\"}", RT_LOSS_BCE, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char js[2048];
        snprintf(js, sizeof js, "{\"class_name\": \"Sequential\", \"config\": {\"layers\": []},"
                 " \"compile_config\": {\"loss\": %s, \"optimizer\": {\"module\": \"keras.optimizers\","
                 " \"class_name\": \"RMSprop\", \"config\": {\"learning_rate\": 0.01, \"rho\": 0.8},"
                 " \"registered_name\": null}}}", cases[i].loss);
        rt_keras_compile k;
        rt_loss_kind lk = 0;
        rt_opt_kind ok = 0;
        CHECK(rt_keras_compile_config(js, strlen(js), &k) == 1);
        int got = rt_loss_from_name(k.loss, &lk);
        CHECK(got == 0 && lk == cases[i].want && k.from_logits == cases[i].logits);
        if (got < 0 || lk != cases[i].want)
            fprintf(stderr, "  saved loss %s read as '%s'\n", cases[i].loss, k.loss);
        CHECK(rt_opt_from_name(k.optimizer, &ok) == 0 && ok == RT_OPT_RMSPROP);
        CHECK(fabs(k.lr - 0.01) < 1e-12 && fabs(k.rho - 0.8) < 1e-12);
    }
    /* the corpus' Keras 3 model saves its loss as a function object */
    char *js = corpus2(root, "politisense_lstm_keras3.json", "Keras 3 LSTM");
    rt_keras_compile k;
    rt_loss_kind lk = 0;
    CHECK(rt_keras_compile_config(js, strlen(js), &k) == 1);
    CHECK(rt_loss_from_name(k.loss, &lk) == 0 && lk == RT_LOSS_BCE);
    CHECK(strcmp(k.optimizer, "RMSprop") == 0 && k.n_metrics == 1);
    free(js);
    printf("saved losses: class names, objects and function objects read\n");
}

int main(int argc, char **argv)
{
    const char *root = argc > 1 ? argv[1] : ".";
    keras3_lstm(root);
    activations();
    regularizers_constraints();
    dtype_policies(root);
    saved_losses(root);
    return rt_test_done("test_keras3");
}
