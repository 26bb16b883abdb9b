/*
 * test_layers_keras.c - the Keras layers of import_keras_layers.c.
 *
 *  - keras_seq1d.json / keras_func2d.json (gen_keras_fixture.py): every
 *    parameter has Keras' name and shape (the fixture holds one tensor per
 *    parameter, in Keras' layout); with those weights the prediction
 *    matches PyTorch's float64 forward. Then both train 40 steps on
 *    synthetic data and their loss falls.
 *  - Keras' Conv2D with groups against a direct loop; Normalization's
 *    weights and formula.
 *  - activation names (Activation layers and Dense(activation=...)) are
 *    checked against their formulas written out here.
 *  - settings the importer refuses come back as errors naming the layer.
 */
#include <math.h>
#include <stdint.h>

#include "../engine/rt_fixture.h"
#include "import_keras.h"

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    REQUIRE(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    REQUIRE(b && fread(b, 1, (size_t)n, f) == (size_t)n);
    b[n] = 0;
    fclose(f);
    return b;
}

static rt_plan *compile_json(const char *json, int batch, rt_loss_kind loss, int lab_dims,
                             char *err)
{
    rt_graph *g;
    if (rt_keras_import(json, strlen(json), &g, err, 256) < 0) return NULL;
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = loss;
    cfg.batch_size = batch;
    cfg.seed = 11;
    cfg.label_dtype = RT_F32;
    cfg.label_ndim = lab_dims > 0 ? 1 : 0;
    cfg.label_dims[0] = lab_dims;
    cfg.metrics = 0;
    cfg.opt = RT_OPT_ADAM;
    cfg.lr = 0.01f;
    rt_plan *p = NULL;
    int rc = rt_plan_compile(g, &cfg, &p, NULL, err, 256);
    rt_graph_destroy(g);
    return rc < 0 ? NULL : p;
}

static void model_case(const char *dir, const char *model)
{
    char path[512], nm[64], err[256] = "";
    snprintf(path, sizeof path, "%s/data/keras_%s.json", dir, model);
    char *js = slurp(path);
    snprintf(nm, sizeof nm, "%s/x", model);
    const rt_ref_tensor *x = rt_fixture_find(nm);
    snprintf(nm, sizeof nm, "%s/y", model);
    const rt_ref_tensor *y = rt_fixture_find(nm);
    const int64_t B = x->dims[0], N = y->dims[1];
    rt_plan *p = compile_json(js, (int)B, RT_LOSS_MSE, (int)N, err);
    if (!p) {
        fprintf(stderr, "%s: %s\n", model, err);
        rt_test_failures++;
        free(js);
        return;
    }
    rt_exec *e;
    REQUIRE(rt_exec_create(p, &e) == 0);
    /* every parameter is in the fixture under its Keras name and shape */
    for (int i = 0; i < rt_plan_n_params(p); i++) {
        const char *pname;
        int64_t d[RT_MAX_DIMS];
        int nd = rt_plan_param_info(p, i, &pname, d, NULL);
        snprintf(nm, sizeof nm, "%s/w/%s", model, pname);
        const rt_ref_tensor *t = rt_fixture_find(nm);
        int same = (int)t->ndim == nd;
        for (int k = 0; same && k < nd; k++) same = d[k] == (int64_t)t->dims[k];
        if (!same) {
            fprintf(stderr, "%s: parameter %s has another shape than Keras'\n", model, pname);
            rt_test_failures++;
            continue;
        }
        CHECK_RC(rt_exec_set_param(e, i, t->data));
    }
    float *out = malloc(sizeof(float) * (size_t)(B * N));
    REQUIRE(out);
    CHECK_RC(rt_exec_predict(e, x->data, B, out));
    snprintf(nm, sizeof nm, "%s prediction", model);
    if (rt_fixture_compare(nm, out, y->data, (size_t)(B * N), 1e-4, 1e-3)) rt_test_failures++;
    free(out);
    rt_exec_destroy(e);
    rt_plan_release(p);

    /* training: 64 samples, targets a fixed function of the input */
    p = compile_json(js, 16, RT_LOSS_MSE, (int)N, err);
    REQUIRE(p);
    REQUIRE(rt_exec_create(p, &e) == 0);
    const int64_t n = 64, in_n = (int64_t)(x->count / (size_t)B);
    float *xs = malloc(sizeof(float) * (size_t)(n * in_n)), *ys = malloc(sizeof(float) * (size_t)(n * N));
    REQUIRE(xs && ys);
    uint64_t s = 99;
    for (int64_t i = 0; i < n * in_n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        xs[i] = (float)((s >> 40) & 0xffff) / 32768.0f - 1.0f;
    }
    for (int64_t i = 0; i < n; i++) {
        double m = 0;
        for (int64_t k = 0; k < in_n; k++) m += xs[i * in_n + k] * (k % 3 == 0 ? 1.0 : -0.5);
        for (int64_t j = 0; j < N; j++) ys[i * N + j] = (float)(j == 0 ? tanh(m / 4) : 0.3 * j);
    }
    rt_data d = {.x = xs, .y = ys, .y_dtype = RT_F32, .n = n};
    rt_metrics m0, m1;
    CHECK_RC(rt_exec_evaluate(e, &d, &m0));
    rt_train_result res;
    CHECK_RC(rt_exec_train(e, &d, 40, &res, NULL, NULL, NULL));
    CHECK_RC(rt_exec_evaluate(e, &d, &m1));
    CHECK(isfinite(m1.loss) && m1.loss < 0.7 * m0.loss);
    printf("%-8s %d parameters match Keras' shapes; prediction %s; loss %.4f -> %.4f\n", model,
           rt_plan_n_params(p), rt_test_failures ? "FAILED" : "ok", m0.loss, m1.loss);
    free(xs);
    free(ys);
    rt_exec_destroy(e);
    rt_plan_release(p);
    free(js);
}

/* Keras' Conv2D(groups=2): kernel (3, 3, C/2, filters), against a direct
 * loop written out here */
static void grouped_conv2d(void)
{
    const char *js =
        "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"g\", \"layers\": ["
        "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 5, 5, 4], \"name\": \"in\"}},"
        "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", \"filters\": 6, \"kernel_size\": 3,"
        " \"groups\": 2, \"use_bias\": false}}, {\"class_name\": \"Flatten\", \"config\": {\"name\": \"f\"}}]}}";
    char err[256] = "";
    rt_plan *p = compile_json(js, 1, RT_LOSS_MSE, 54, err);
    if (!p) {
        fprintf(stderr, "grouped Conv2D: %s\n", err);
        rt_test_failures++;
        return;
    }
    int64_t d[RT_MAX_DIMS];
    REQUIRE(rt_plan_param_info(p, 0, NULL, d, NULL) == 4);
    CHECK(d[0] == 3 && d[1] == 3 && d[2] == 2 && d[3] == 6);
    rt_exec *e;
    REQUIRE(rt_exec_create(p, &e) == 0);
    float x[100], w[108], y[54];
    for (int i = 0; i < 100; i++) x[i] = (float)((i * 37) % 11) / 5.0f - 1.0f;
    for (int i = 0; i < 108; i++) w[i] = (float)((i * 53) % 13) / 6.0f - 1.0f;
    CHECK_RC(rt_exec_set_param(e, 0, w));
    CHECK_RC(rt_exec_predict(e, x, 1, y));
    int bad = 0;
    for (int oh = 0; oh < 3; oh++)
        for (int ow = 0; ow < 3; ow++)
            for (int o = 0; o < 6; o++) {
                double want = 0;
                for (int kh = 0; kh < 3; kh++)
                    for (int kw = 0; kw < 3; kw++)
                        for (int ci = 0; ci < 2; ci++)
                            want += x[((oh + kh) * 5 + ow + kw) * 4 + (o / 3) * 2 + ci] *
                                    w[((kh * 3 + kw) * 2 + ci) * 6 + o];
                bad |= fabs(y[(oh * 3 + ow) * 6 + o] - want) > 1e-5 + 1e-5 * fabs(want);
            }
    CHECK(!bad);
    printf("grouped Conv2D (groups 2): %s\n", bad ? "FAILED" : "ok");
    rt_exec_destroy(e);
    rt_plan_release(p);
}

/* Normalization: weights mean, variance, count (Keras' order and shapes);
 * values from the config, then from set_weights; invert */
static void normalization(void)
{
    static const char *cfgs[3] = {
        ", \"axis\": -1, \"mean\": [1, 2, 3, 4], \"variance\": [4, 1, 0, 9]",
        ", \"axis\": [1]", ", \"axis\": -1, \"invert\": true"};
    for (int k = 0; k < 3; k++) {
        char js[1024], err[256] = "";
        snprintf(js, sizeof js,
                 "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"n\", \"layers\": ["
                 "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 4], \"name\": \"in\"}},"
                 "{\"class_name\": \"Normalization\", \"config\": {\"name\": \"nrm\"%s}}]}}", cfgs[k]);
        rt_plan *p = compile_json(js, 2, RT_LOSS_MSE, 4, err);
        if (!p) {
            fprintf(stderr, "Normalization: %s\n", err);
            rt_test_failures++;
            continue;
        }
        static const char *names[3] = {"nrm/mean", "nrm/variance", "nrm/count"};
        float mean[4] = {1, 2, 3, 4}, var[4] = {4, 1, 0, 9};
        rt_exec *e;
        REQUIRE(rt_exec_create(p, &e) == 0);
        for (int i = 0; i < 3; i++) {
            const char *pn;
            int64_t d[RT_MAX_DIMS];
            int tr;
            int nd = rt_plan_param_info(p, i, &pn, d, &tr);
            CHECK(!strcmp(pn, names[i]) && !tr && nd == (i < 2 ? 1 : 0) && (i == 2 || d[0] == 4));
        }
        if (k > 0) { /* set_weights */
            CHECK_RC(rt_exec_set_param(e, 0, mean));
            CHECK_RC(rt_exec_set_param(e, 1, var));
        }
        float x[8] = {0, 1, 2, 3, -1, 5, 3.5f, 10}, y[8];
        CHECK_RC(rt_exec_predict(e, x, 2, y));
        int bad = 0;
        for (int i = 0; i < 8; i++) {
            const double sd = fmax(sqrt(var[i % 4]), 1e-7);
            const double want = k == 2 ? x[i] * sd + mean[i % 4] : (x[i] - mean[i % 4]) / sd;
            bad |= fabs(y[i] - want) > 1e-5 * fmax(1, fabs(want));
        }
        CHECK(!bad);
        rt_exec_destroy(e);
        rt_plan_release(p);
    }
    printf("Normalization: config values, set weights, invert checked\n");
}

/* ------------------------------------------------------------ activations */

static double sig(double x) { return 1 / (1 + exp(-x)); }

static double ref_act(const char *a, double x)
{
    if (!strcmp(a, "elu")) return x > 0 ? x : exp(x) - 1;
    if (!strcmp(a, "selu"))
        return 1.0507009873554805 * (x > 0 ? x : 1.6732632423543772 * (exp(x) - 1));
    if (!strcmp(a, "gelu")) return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    if (!strcmp(a, "swish") || !strcmp(a, "silu")) return x * sig(x);
    if (!strcmp(a, "softplus")) return log(1 + exp(x));
    if (!strcmp(a, "softsign")) return x / (1 + fabs(x));
    if (!strcmp(a, "hard_sigmoid")) return fmin(1, fmax(0, 0.2 * x + 0.5));
    if (!strcmp(a, "relu6")) return fmin(6, fmax(0, x));
    if (!strcmp(a, "exponential")) return exp(x);
    if (!strcmp(a, "leaky_relu")) return x > 0 ? x : 0.2 * x;
    if (!strcmp(a, "mish")) return x * tanh(log(1 + exp(x)));
    if (!strcmp(a, "hard_silu") || !strcmp(a, "hard_swish"))
        return x * fmin(6, fmax(0, x + 3)) / 6;
    if (!strcmp(a, "log_sigmoid")) return -log(1 + exp(-x));
    if (!strcmp(a, "linear")) return x;
    return NAN;
}

static void activations(void)
{
    static const char *acts[] = {"elu", "selu", "gelu", "swish", "silu", "softplus", "softsign",
                                 "hard_sigmoid", "relu6", "exponential", "leaky_relu", "mish",
                                 "hard_silu", "hard_swish", "log_sigmoid", "linear"};
    float x[16], out[16];
    for (int i = 0; i < 16; i++) x[i] = -4.0f + 8.0f * (float)i / 15.0f + 0.01f;
    for (size_t k = 0; k < sizeof acts / sizeof acts[0]; k++) {
        for (int dense = 0; dense < 2; dense++) {
            char js[1024], err[256] = "";
            snprintf(js, sizeof js,
                     "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"a\", \"layers\": ["
                     "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 8], \"name\": \"in\"}},"
                     "%s]}}",
                     dense ? "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 8,"
                             " \"use_bias\": false, \"activation\": \"%s\"}}"
                           : "{\"class_name\": \"Activation\", \"config\": {\"name\": \"act\","
                             " \"activation\": \"%s\"}}");
            char js2[1024];
            snprintf(js2, sizeof js2, js, acts[k]);
            rt_plan *p = compile_json(js2, 2, RT_LOSS_MSE, 8, err);
            if (!p) {
                fprintf(stderr, "%s: %s\n", acts[k], err);
                rt_test_failures++;
                continue;
            }
            rt_exec *e;
            REQUIRE(rt_exec_create(p, &e) == 0);
            if (dense) {
                float eye[64] = {0};
                for (int i = 0; i < 8; i++) eye[i * 9] = 1.0f;
                CHECK_RC(rt_exec_set_param(e, 0, eye));
            }
            CHECK_RC(rt_exec_predict(e, x, 2, out));
            double worst = 0;
            for (int i = 0; i < 16; i++) {
                double want = ref_act(acts[k], x[i]);
                worst = fmax(worst, fabs(out[i] - want) / (1e-5 + 1e-4 * fabs(want)));
            }
            if (!(worst <= 1.0)) {
                fprintf(stderr, "activation %s (%s): off by %.3g tolerances\n", acts[k],
                        dense ? "Dense" : "Activation", worst);
                rt_test_failures++;
            }
            rt_exec_destroy(e);
            rt_plan_release(p);
        }
    }
    printf("activations: %zu names through Activation and Dense checked\n",
           sizeof acts / sizeof acts[0]);
    /* Rescaling: x * scale + offset */
    const char *rs = "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"r\", \"layers\": ["
                     "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 8], \"name\": \"in\"}},"
                     "{\"class_name\": \"Rescaling\", \"config\": {\"name\": \"r\", \"scale\": 0.00392156862745098,"
                     " \"offset\": -1.0}}]}}";
    char err[256] = "";
    rt_plan *p = compile_json(rs, 2, RT_LOSS_MSE, 8, err);
    if (!p) {
        fprintf(stderr, "Rescaling: %s\n", err);
        rt_test_failures++;
        return;
    }
    rt_exec *e;
    REQUIRE(rt_exec_create(p, &e) == 0);
    CHECK_RC(rt_exec_predict(e, x, 2, out));
    int bad = 0;
    for (int i = 0; i < 16; i++) bad |= fabs(out[i] - (x[i] / 255.0 - 1.0)) > 1e-6;
    CHECK(!bad);
    rt_exec_destroy(e);
    rt_plan_release(p);
}

/* ----------------------------------------------------------------- errors */

static void expect_err(const char *layers, const char *input, int code, const char *needle)
{
    char js[2048], err[256] = "";
    snprintf(js, sizeof js,
             "{\"class_name\": \"Functional\", \"config\": {\"name\": \"m\", \"layers\": ["
             "{\"class_name\": \"InputLayer\", \"name\": \"in\", \"inbound_nodes\": [],"
             " \"config\": {\"batch_input_shape\": [null, %s], \"name\": \"in\"}},%s],"
             " \"input_layers\": [[\"in\", 0, 0]], \"output_layers\": [[\"out\", 0, 0]]}}",
             input, layers);
    rt_graph *g = NULL;
    int rc = rt_keras_import(js, strlen(js), &g, err, sizeof err);
    if (rc == 0) { /* some problems surface at compile */
        rt_train_config cfg;
        rt_train_config_init(&cfg);
        rt_plan *p = NULL;
        rc = rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err);
        rt_plan_release(p);
        rt_graph_destroy(g);
    }
    if (rc != code || !strstr(err, needle)) {
        fprintf(stderr, "expected %d '%s', got %d '%s'\n", code, needle, rc, err);
        rt_test_failures++;
    }
}

#define LAYER(cls, name, inb, cfg)                                                         \
    "{\"class_name\": \"" cls "\", \"name\": \"" name "\", \"config\": {\"name\": \"" name \
    "\"" cfg "}, \"inbound_nodes\": [[" inb "]]}"
#define IN(x) "[\"" x "\", 0, 0, {}]"

static void errors(void)
{
    expect_err(LAYER("Dense", "a", IN("in"), ", \"units\": 3") ","
               LAYER("Dense", "b", IN("in"), ", \"units\": 4") ","
               LAYER("Add", "out", IN("a") "," IN("b"), ""), "5", RT_ESHAPE,
               "Add input 1 has dim 1 = 4, input 0 has 3 (layer 'out')");
    expect_err(LAYER("Subtract", "out", IN("in") "," IN("in") "," IN("in"), ""), "5", RT_EINVAL,
               "Subtract takes 2 input(s), got 3 (layer 'out')");
    expect_err(LAYER("Maximum", "out", IN("in"), ""), "5", RT_EINVAL,
               "Maximum needs at least 2 inputs, got 1 (layer 'out')");
    expect_err(LAYER("ZeroPadding2D", "out", IN("in"), ", \"padding\": \"lots\""), "4, 4, 2",
               RT_EINVAL, "'padding' must be an integer or two pairs (layer 'out')");
    expect_err(LAYER("Cropping2D", "out", IN("in"), ", \"cropping\": [[2, 2], [0, 0]]"),
               "4, 4, 2", RT_ESHAPE, "Cropping2D leaves dim 1 of 4 empty (layer 'out')");
    expect_err(LAYER("UpSampling2D", "out", IN("in"), ", \"interpolation\": \"bicubic\""),
               "4, 4, 2", RT_EUNIMPLEMENTED, "interpolation 'bicubic' is not supported");
    expect_err(LAYER("Conv2DTranspose", "out", IN("in"),
                     ", \"filters\": 2, \"kernel_size\": 3, \"strides\": 2, \"output_padding\": [2, 2]"),
               "4, 4, 2", RT_EINVAL, "output_padding 2 must be below the stride 2 (layer 'out')");
    expect_err(LAYER("Permute", "out", IN("in"), ", \"dims\": [1, 1]"), "4, 2", RT_EINVAL,
               "Permute dims is not a permutation of 1..2 (layer 'out')");
    expect_err(LAYER("Conv1D", "out", IN("in"), ", \"filters\": 2, \"kernel_size\": 3, \"padding\": \"full\""),
               "6, 2", RT_EINVAL, "padding 'full' is not supported (layer 'out')");
    expect_err(LAYER("DepthwiseConv2D", "out", IN("in"), ", \"kernel_size\": 3, \"depth_multiplier\": 0"),
               "6, 6, 2", RT_EINVAL, "depth_multiplier must be >= 1 (layer 'out')");
    expect_err(LAYER("Activation", "out", IN("in"), ", \"activation\": \"mish2\""), "5",
               RT_EINVAL, "unsupported activation 'mish2'");
    expect_err(LAYER("LayerNormalization", "out", IN("in"), ", \"axis\": [1]"), "4, 5",
               RT_EUNIMPLEMENTED, "only the last axis is supported (layer 'out')");
    expect_err(LAYER("RepeatVector", "out", IN("in"), ", \"n\": 0"), "5", RT_EINVAL,
               "RepeatVector needs n in 1..1048576 (layer 'out')");
    expect_err(LAYER("PReLU", "out", IN("in"), ", \"shared_axes\": [3]"), "4, 5", RT_EINVAL,
               "shared_axes entry 3 is outside 1..2 (layer 'out')");
    expect_err(LAYER("SpatialDropout2D", "out", IN("in"), ", \"rate\": 1.5"), "4, 4, 2",
               RT_EINVAL, "rate 1.5 is out of range (layer 'out')");
    printf("errors: checked\n");
}

/* MultiHeadAttention, Dot and Dropout noise_shape: what is refused, and
 * how (import_keras_attn.c, import_keras.c's k_dropout, op_eltwise.c) */
#define MHA ", \"num_heads\": 2, \"key_dim\": 3"
#define SELF(extra) "[\"in\", 0, 0, {\"value\": [\"in\", 0, 0]" extra "}]"
static void attn_errors(void)
{
    expect_err(LAYER("MultiHeadAttention", "out", SELF(""), MHA ", \"use_gate\": true"), "5, 4",
               RT_EUNIMPLEMENTED, "MultiHeadAttention use_gate is not supported (layer 'out')");
    expect_err(LAYER("MultiHeadAttention", "out", SELF(", \"return_attention_scores\": true"),
                     MHA),
               "5, 4", RT_EUNIMPLEMENTED, "return_attention_scores=True (a second output)");
    expect_err(LAYER("MultiHeadAttention", "out", SELF(", \"use_causal_mask\": true"), MHA),
               "3, 5, 4", RT_EUNIMPLEMENTED,
               "attention masks are supported for (B, T, dim) inputs only");
    expect_err(LAYER("MultiHeadAttention", "out", IN("in"), MHA), "5, 4", RT_EINVAL,
               "MultiHeadAttention needs a query and a value (layer 'out')");
    expect_err(LAYER("MultiHeadAttention", "out",
                     "[\"in\", 0, 0, {\"value\": [\"in\", 0, 0], \"bias\": [\"in\", 0, 0]}]",
                     MHA),
               "5, 4", RT_EINVAL, "MultiHeadAttention has no tensor argument 'bias'");
    expect_err(LAYER("MultiHeadAttention", "out", SELF(""), MHA ", \"attention_axes\": [2]"),
               "5, 4", RT_EINVAL, "attention axis 2 is not a dim of the query");
    expect_err(LAYER("Dense", "a", IN("in"), ", \"units\": 3") ","
               LAYER("Dense", "b", IN("in"), ", \"units\": 4") ","
               LAYER("Dot", "out", IN("a") "," IN("b"), ", \"axes\": 1"), "5", RT_ESHAPE,
               "Dot axes hold 3 and 4 values (layer 'out')");
    expect_err(LAYER("Dot", "out", IN("in") "," IN("in"), ", \"axes\": [0, 1]"), "5, 4",
               RT_EINVAL, "Dot axes (0, 1) must name non-batch dims");
    expect_err(LAYER("Dropout", "out", IN("in"), ", \"rate\": 0.5, \"noise_shape\": [null, 1]"),
               "5, 4", RT_EINVAL, "noise_shape must be a list of 3 entries (layer 'out')");
    expect_err(LAYER("Dropout", "out", IN("in"),
                     ", \"rate\": 0.5, \"noise_shape\": [null, 1, 3]"),
               "5, 4", RT_ESHAPE, "noise_shape entry 2 is 3: it must be null, 1 or 4");
    expect_err(LAYER("Dropout", "out", IN("in"),
                     ", \"rate\": 0.5, \"noise_shape\": [8, 1, 4]"),
               "5, 4", RT_EINVAL, "noise_shape's batch entry must be null or 1");
}

int main(int argc, char **argv)
{
    REQUIRE(argc == 2);
    char path[512];
    snprintf(path, sizeof path, "%s/keras_ref.bin", argv[1]);
    rt_fixture_load(path);
    model_case(argv[1], "seq1d");
    model_case(argv[1], "func2d");
    grouped_conv2d();
    normalization();
    activations();
    errors();
    attn_errors();
    rt_fixture_free();
    return rt_test_done("test_layers_keras");
}
