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
 *     "MSE", all in the engine's names; the saved optimizer object;
 *   - recorded operations: Keras 3's NotEqual, and tf.keras 2's TFOpLambda
 *     (keras/layers/core/tf_op_layer.py; the call's other arguments in the
 *     inbound node, keras/engine/node.py serialize): math.not_equal(x, 0)
 *     as an LSTM's mask gives Embedding(mask_zero=True)'s predictions and
 *     gradients; element-wise add/subtract/multiply/divide/maximum of two
 *     tensors and of a tensor and a constant (a number, a list, a list
 *     with TensorFlow's leading batch 1) against the formula in double; an
 *     unsupported function is refused by name;
 *   - Softmax called with mask= (Keras 3's NotEqual, tf.keras' TFOpLambda):
 *     keras/src/layers/activations/softmax.py, softmax(where(mask, x,
 *     -1e9)), transcribed here in double.
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

/* Keras 3 records Embedding(mask_zero=True)'s mask as the keras.ops
 * NotEqual(inputs, 0) passed to a recurrent layer's `mask` (the corpus'
 * caption_keras3_2in.json). mask_zero, ne, mask: the Embedding's setting,
 * NotEqual's number (-1: no NotEqual layer), whether the LSTM gets it. */
static char *ne_model(const char *mask_zero, int ne, int mask)
{
    static char js[4096];
#define KT(NAME, SHAPE, DT)                                                                    \
    "{\"class_name\": \"__keras_tensor__\", \"config\": {\"shape\": " SHAPE ", \"dtype\": \"" DT \
    "\", \"keras_history\": [\"" NAME "\", 0, 0]}}"
    char nel[1024] = "";
    if (ne >= 0)
        snprintf(nel, sizeof nel,
                 "{\"module\": \"keras.src.ops.numpy\", \"class_name\": \"NotEqual\","
                 " \"registered_name\": \"NotEqual\", \"name\": \"ne\", \"config\": {\"name\": \"ne\"},"
                 " \"inbound_nodes\": [{\"args\": [" KT("x", "[null, 5]", "float32") ", %d],"
                 " \"kwargs\": {}}]}, ", ne);
    snprintf(js, sizeof js,
             "{\"module\": \"keras\", \"class_name\": \"Functional\", \"config\": {\"name\": \"m\","
             " \"layers\": [{\"module\": \"keras.layers\", \"class_name\": \"InputLayer\", \"config\":"
             " {\"batch_shape\": [null, 5], \"dtype\": \"float32\", \"name\": \"x\"}, \"name\": \"x\","
             " \"inbound_nodes\": []}, {\"module\": \"keras.layers\", \"class_name\": \"Embedding\","
             " \"config\": {\"name\": \"e\", \"input_dim\": 10, \"output_dim\": 3, \"mask_zero\": %s},"
             " \"name\": \"e\", \"inbound_nodes\": [{\"args\": [" KT("x", "[null, 5]", "float32") "],"
             " \"kwargs\": {}}]}, %s{\"module\": \"keras.layers\", \"class_name\": \"LSTM\","
             " \"config\": {\"name\": \"l\", \"units\": 2}, \"name\": \"l\", \"inbound_nodes\":"
             " [{\"args\": [" KT("e", "[null, 5, 3]", "float32") "], \"kwargs\": {\"training\": false%s}}]}],"
             " \"input_layers\": [[\"x\", 0, 0]], \"output_layers\": [[\"l\", 0, 0]]}}",
             mask_zero, nel, mask ? ", \"mask\": " KT("ne", "[null, 5]", "bool") : "");
#undef KT
    return js;
}

/* implicit (Embedding mask_zero) and recorded (a recorded not-equal
 * passed as the LSTM's mask) give the same predictions, loss and gradients
 * of names[0..4) on a batch with zeros; plain (no mask) differs in the
 * first row (*moves). Returns the largest prediction difference. */
static double same_as_mask_zero(rt_exec *implicit, rt_exec *recorded, rt_exec *plain,
                                const char *const *names, double *moves)
{
    float x[4 * 5] = {1, 2, 0, 3, 4, 0, 0, 5, 6, 7, 8, 9, 1, 2, 3, 4, 0, 0, 0, 0};
    float y[4 * 2] = {0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f, 0.7f, -0.8f};
    float pi[8], pr[8], pp[8];
    CHECK_RC(rt_exec_predict(implicit, x, 4, pi));
    CHECK_RC(rt_exec_predict(recorded, x, 4, pr));
    CHECK_RC(rt_exec_predict(plain, x, 4, pp));
    double diff = 0;
    *moves = 0;
    for (int i = 0; i < 8; i++) diff = fmax(diff, fabs(pi[i] - pr[i]));
    for (int i = 0; i < 2; i++) *moves = fmax(*moves, fabs(pi[i] - pp[i]));
    CHECK(diff == 0 && *moves > 1e-4);
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
    return diff;
}

static void recorded_not_equal(void)
{
    /* the same weights everywhere: e's seed-3 draw */
    rt_exec *implicit = make(ne_model("true", -1, 0), RT_LOSS_MSE, 2);
    rt_exec *recorded = make(ne_model("true", 0, 1), RT_LOSS_MSE, 2);
    rt_exec *plain = make(ne_model("false", -1, 0), RT_LOSS_MSE, 2);
    rt_exec *ne5 = make(ne_model("false", 5, 1), RT_LOSS_MSE, 2);
    if (!implicit || !recorded || !plain || !ne5)
        return;
    static const char *const names[] = {"e/embeddings", "l/kernel", "l/recurrent_kernel", "l/bias"};
    rt_exec *all[4] = {implicit, recorded, plain, ne5};
    for (int k = 0; k < 4; k++) {
        int64_t n;
        float w[64];
        int i = find(implicit, names[k], &n);
        REQUIRE(n <= 64);
        CHECK_RC(rt_exec_get_param(implicit, i, w));
        for (int j = 1; j < 4; j++) CHECK_RC(rt_exec_set_param(all[j], find(all[j], names[k], &n), w));
    }
    /* Embedding mask_zero's own mask and the recorded NotEqual(x, 0) one:
     * the same predictions and gradients (Keras' RNN.call takes either) */
    double masked_moves;
    const double diff = same_as_mask_zero(implicit, recorded, plain, names, &masked_moves);
    /* NotEqual(x, 5) on an Embedding without mask_zero: the steps holding 5
     * are skipped (the state carries over), wherever they are; without the
     * mask the 5 counts */
    float x5[4 * 5] = {1, 2, 5, 3, 4, 5, 1, 2, 3, 4, 1, 2, 3, 4, 5, 1, 5, 2, 5, 3};
    float p5[8], pplain[2];
    CHECK_RC(rt_exec_predict(ne5, x5, 4, p5));
    CHECK_RC(rt_exec_predict(plain, x5, 1, pplain));
    double spread = 0;
    for (int s = 1; s < 3; s++)
        for (int u = 0; u < 2; u++) spread = fmax(spread, fabs(p5[s * 2 + u] - p5[u]));
    CHECK(spread < 1e-6 && fabs(pplain[0] - p5[0]) > 1e-4);
    /* [1, 5, 2, 5, 3] is [1, 2, 3] too, not [1, 2, 3, 4] */
    CHECK(fabs(p5[6] - p5[0]) > 1e-4);
    printf("recorded NotEqual mask: = Embedding mask_zero's (|dp| = %g), masked steps skipped"
           " (spread %.1e)\n", diff, spread);
    for (int k = 0; k < 4; k++) rt_exec_destroy(all[k]);
    /* NotEqual of two tensors is refused by name */
    char *two = ne_model("false", 5, 1);
    char *at = strstr(two, "\"x\", 0, 0]}}, 5]");
    REQUIRE(at);
    char buf[4096];
    snprintf(buf, sizeof buf, "%.*s\"x\", 0, 0]}}, {\"class_name\": \"__keras_tensor__\","
             " \"config\": {\"shape\": [null, 5], \"dtype\": \"float32\", \"keras_history\":"
             " [\"x\", 0, 0]}}]%s", (int)(at - two), two, at + strlen("\"x\", 0, 0]}}, 5]"));
    expect_refused(buf, "NotEqual is supported between one tensor and a number");
}

/* a tf.keras 2 Functional model of one input x (batch_input_shape
 * [null, n]) whose layers (a JSON list's items) end in the output out */
static char *tfk_model(int n, const char *layers, const char *out)
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
    return strdup(tfk_model(5, layers, "l"));
}

static void not_equal_mask(void)
{
    char *a = mask_model(1, 0), *b = mask_model(0, 1), *c = mask_model(0, 0);
    rt_exec *implicit = make(a, RT_LOSS_MSE, 2), *recorded = make(b, RT_LOSS_MSE, 2),
            *plain = make(c, RT_LOSS_MSE, 2);
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
    double moves;
    const double diff = same_as_mask_zero(implicit, recorded, plain, names, &moves);
    printf("TFOpLambda math.not_equal mask = Embedding mask_zero's (|dp| = %g, the mask moves row 0 by %.3g)\n",
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
    rt_exec *e = make(tfk_model(4, layers, "d"), RT_LOSS_MSE, 4);
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
        const char *js = tfk_model(4, bad[k][0], bad[k][1]);
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
    return strdup(tfk_model(5,
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
        rt_exec *e = make(js, RT_LOSS_MSE, 2);
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

int main(int argc, char **argv)
{
    const char *root = argc > 1 ? argv[1] : ".";
    keras3_lstm(root);
    activations();
    regularizers_constraints();
    dtype_policies(root);
    saved_losses(root);
    recorded_not_equal();
    not_equal_mask();
    arithmetic();
    softmax_mask();
    return rt_test_done("test_keras3");
}
