/*
 * test_keras_formats.c - what the importer accepts besides a plain Keras 2
 * model, and how it refuses:
 *   - Keras 1 configs (Convolution2D nb_filter/nb_row/nb_col/border_mode/
 *     subsample, Dense output_dim, init, W_regularizer, Dropout p, Merge);
 *   - TF.js model.json and HDF5's {"model_config": ...} wrappers;
 *   - Sequential and Functional models nested as layers (Keras 2 and 3);
 *   - Rescaling, against x * scale + offset computed here;
 *   - one error listing every problem, with layer names; unsupported
 *     fields named; Lambda and custom classes named with the reason;
 *   - bad configs: INVALID_ARGUMENT-class codes naming the layer.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/rt_test.h"
#include "import_keras.h"
#include "rtrain/rt_error.h"

static char err[4096];

/* import + compile (MSE, labels of the output's shape); returns the
 * parameter count or a negative code */
static int64_t build(const char *js, int64_t *in_numel, int64_t *out_numel, rt_plan **keep)
{
    rt_graph *g = NULL;
    int rc = rt_keras_import(js, strlen(js), &g, err, sizeof err);
    if (rc < 0)
        return rc;
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_MSE;
    cfg.label_dtype = RT_F32;
    cfg.batch_size = 2;
    cfg.metrics = 0;
    rt_plan *p = NULL;
    rc = rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err);
    if (rc == 0) {
        int64_t d[RT_MAX_DIMS];
        int n = rt_plan_output_shape(p, d);
        rt_plan_release(p);
        cfg.label_ndim = n;
        memcpy(cfg.label_dims, d, sizeof d);
        rc = rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err);
    }
    rt_graph_destroy(g);
    if (rc < 0)
        return rc;
    int64_t d[RT_MAX_DIMS];
    *in_numel = *out_numel = 1;
    for (int i = 0, n = rt_plan_input_shape(p, d); i < n; i++) *in_numel *= d[i];
    for (int i = 0, n = rt_plan_output_shape(p, d); i < n; i++) *out_numel *= d[i];
    int64_t params = (int64_t)rt_plan_report(p)->param_count;
    if (keep)
        *keep = p;
    else
        rt_plan_release(p);
    return params;
}

#define EXPECT_PARAMS(js, want, win, wout)                                              \
    do {                                                                                \
        int64_t in_ = 0, out_ = 0, got_ = build(js, &in_, &out_, NULL);                 \
        if (got_ != (want) || in_ != (win) || out_ != (wout)) {                          \
            fprintf(stderr, "%s:%d: params %lld in %lld out %lld, want %lld %lld %lld: %s\n", \
                    __FILE__, __LINE__, (long long)got_, (long long)in_, (long long)out_, \
                    (long long)(want), (long long)(win), (long long)(wout), err);          \
            rt_test_failures++;                                                         \
        }                                                                               \
    } while (0)

static void expect_err(const char *js, int code, const char *const *needles)
{
    rt_graph *g = NULL;
    int rc = rt_keras_import(js, strlen(js), &g, err, sizeof err);
    int ok = rc == code && g == NULL;
    for (int i = 0; ok && needles[i]; i++)
        ok = strstr(err, needles[i]) != NULL;
    if (!ok) {
        fprintf(stderr, "want %s", rt_err_name(code));
        for (int i = 0; needles[i]; i++) fprintf(stderr, " '%s'", needles[i]);
        fprintf(stderr, ", got %s '%s'\n", rt_err_name(rc), err);
        rt_test_failures++;
    }
    rt_graph_destroy(g);
}
#define EXPECT_ERR(js, code, ...)                                                      \
    do {                                                                               \
        static const char *const n_[] = {__VA_ARGS__, NULL};                           \
        expect_err(js, code, n_);                                                      \
    } while (0)

#define SEQ(layers) "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": [" layers "]}}"
#define IN4 "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 4], \"name\": \"x\"}}"
#define DENSE(name, units) "{\"class_name\": \"Dense\", \"config\": {\"name\": \"" name "\", \"units\": " #units "}}"

static void test_keras1(void)
{
    /* Keras 1.2: the layer list is the config; (8, 8, 1) images, tf order */
    const char *k1 =
        "{\"class_name\": \"Sequential\", \"keras_version\": \"1.2.2\", \"config\": ["
        "{\"class_name\": \"Convolution2D\", \"config\": {\"name\": \"c1\", \"nb_filter\": 4, \"nb_row\": 3,"
        " \"nb_col\": 3, \"border_mode\": \"same\", \"subsample\": [1, 1], \"dim_ordering\": \"tf\","
        " \"init\": \"he_normal\", \"activation\": \"relu\", \"bias\": true, \"W_regularizer\":"
        " {\"name\": \"WeightRegularizer\", \"l1\": 0.0, \"l2\": 0.01}, \"b_regularizer\": null,"
        " \"activity_regularizer\": null, \"W_constraint\": null, \"b_constraint\": null,"
        " \"batch_input_shape\": [null, 8, 8, 1], \"input_dtype\": \"float32\", \"trainable\": true}},"
        "{\"class_name\": \"MaxPooling2D\", \"config\": {\"name\": \"p1\", \"pool_size\": [2, 2],"
        " \"strides\": [2, 2], \"border_mode\": \"valid\", \"dim_ordering\": \"tf\", \"trainable\": true}},"
        "{\"class_name\": \"Dropout\", \"config\": {\"name\": \"d1\", \"p\": 0.25, \"trainable\": true}},"
        "{\"class_name\": \"Flatten\", \"config\": {\"name\": \"f\", \"trainable\": true}},"
        "{\"class_name\": \"Dense\", \"config\": {\"name\": \"out\", \"output_dim\": 3, \"init\":"
        " \"glorot_uniform\", \"activation\": \"softmax\", \"W_regularizer\": null, \"b_regularizer\": null,"
        " \"activity_regularizer\": null, \"W_constraint\": {\"name\": \"MaxNorm\", \"m\": 2, \"axis\": 0},"
        " \"b_constraint\": null, \"bias\": true, \"input_dim\": 64, \"trainable\": true}}]}";
    int64_t in = 0, out = 0;
    rt_plan *p = NULL;
    int64_t params = build(k1, &in, &out, &p);
    CHECK(params == (3 * 3 * 1 * 4 + 4) + (64 * 3 + 3));
    CHECK(in == 64 && out == 3);
    if (params > 0) {
        CHECK(rt_plan_report(p)->n_regularized == 1);
        CHECK(rt_plan_report(p)->n_constrained == 1);
        rt_plan_release(p);
    } else {
        fprintf(stderr, "keras 1: %s\n", err);
    }
    /* th ordering is channels_first: the data and the output in Keras'
     * (C, H, W) (test_keras_layout.c checks the values) */
    {
        rt_plan *p = NULL;
        int64_t in_n, out_n;
        int64_t np = build("{\"class_name\": \"Sequential\", \"config\": [{\"class_name\": "
                           "\"Convolution2D\", \"config\": {\"name\": \"c1\", \"nb_filter\": 4, "
                           "\"nb_row\": 3, \"nb_col\": 3, \"dim_ordering\": \"th\", "
                           "\"batch_input_shape\": [null, 1, 8, 8]}}, {\"class_name\": \"Flatten\", "
                           "\"config\": {\"name\": \"f\"}}]}", &in_n, &out_n, &p);
        CHECK(np == 4 * 9 + 4);
        if (np > 0) {
            int64_t d[RT_MAX_DIMS];
            CHECK(rt_plan_input_shape(p, d) == 3 && d[0] == 1 && d[1] == 8 && d[2] == 8);
            CHECK(out_n == 4 * 6 * 6);
            rt_plan_release(p);
        } else {
            fprintf(stderr, "th: %s\n", err);
        }
    }
    /* Keras 1 Functional with Merge(mode=concat) */
    const char *merge =
        "{\"class_name\": \"Model\", \"config\": {\"name\": \"m\", \"layers\": ["
        "{\"class_name\": \"InputLayer\", \"name\": \"x\", \"config\": {\"batch_input_shape\": [null, 4], \"name\": \"x\"}, \"inbound_nodes\": []},"
        "{\"class_name\": \"Dense\", \"name\": \"a\", \"config\": {\"name\": \"a\", \"output_dim\": 2, \"init\": \"uniform\"}, \"inbound_nodes\": [[[\"x\", 0, 0]]]},"
        "{\"class_name\": \"Dense\", \"name\": \"b\", \"config\": {\"name\": \"b\", \"output_dim\": 3, \"init\": \"normal\"}, \"inbound_nodes\": [[[\"x\", 0, 0]]]},"
        "{\"class_name\": \"Merge\", \"name\": \"m1\", \"config\": {\"name\": \"m1\", \"mode\": \"concat\", \"concat_axis\": -1,"
        " \"dot_axes\": -1, \"output_shape\": null, \"output_mask\": null, \"mode_type\": \"raw\", \"output_shape_type\": \"raw\","
        " \"output_mask_type\": \"raw\", \"arguments\": {}}, \"inbound_nodes\": [[[\"a\", 0, 0], [\"b\", 0, 0]]]}],"
        " \"input_layers\": [[\"x\", 0, 0]], \"output_layers\": [[\"m1\", 0, 0]]}}";
    EXPECT_PARAMS(merge, 4 * 2 + 2 + 4 * 3 + 3, 4, 5);
    /* Keras 1 "uniform"/"normal" are +-0.05 / N(0, 0.05) */
    rt_graph *g = NULL;
    CHECK(rt_keras_import(merge, strlen(merge), &g, err, sizeof err) == 0);
    rt_graph_destroy(g);
}

static void test_wrappers(void)
{
    const char *model = SEQ(IN4 ", " DENSE("d", 3));
    char js[2048];
    snprintf(js, sizeof js,
             "{\"format\": \"layers-model\", \"generatedBy\": \"keras v2.3.0\", \"convertedBy\":"
             " \"TensorFlow.js Converter v1.2\", \"modelTopology\": {\"keras_version\": \"2.3.0\","
             " \"backend\": \"tensorflow\", \"model_config\": %s, \"training_config\": {\"loss\": \"mse\"}},"
             " \"weightsManifest\": [{\"paths\": [\"group1-shard1of1.bin\"], \"weights\": []}]}", model);
    EXPECT_PARAMS(js, 15, 4, 3);
    /* older TF.js: the model is modelTopology itself */
    snprintf(js, sizeof js, "{\"modelTopology\": %s, \"weightsManifest\": []}", model);
    EXPECT_PARAMS(js, 15, 4, 3);
    snprintf(js, sizeof js, "{\"model_config\": %s}", model);
    EXPECT_PARAMS(js, 15, 4, 3);
    /* the same graph key as the plain model */
    rt_graph *a = NULL, *b = NULL;
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    uint8_t ka[16], kb[16];
    CHECK(rt_keras_import(model, strlen(model), &a, err, sizeof err) == 0);
    CHECK(rt_keras_import(js, strlen(js), &b, err, sizeof err) == 0);
    CHECK(a && b && rt_plan_key(a, &cfg, ka) == 0 && rt_plan_key(b, &cfg, kb) == 0 &&
          memcmp(ka, kb, 16) == 0);
    rt_graph_destroy(a);
    rt_graph_destroy(b);
}

static void test_nested(void)
{
    /* Keras 2: Sequential in Sequential */
    EXPECT_PARAMS(SEQ(IN4 ", {\"class_name\": \"Sequential\", \"config\": {\"name\": \"inner\", \"layers\": ["
                      "{\"class_name\": \"Dense\", \"config\": {\"name\": \"i1\", \"units\": 5, \"batch_input_shape\": [null, 4]}},"
                      DENSE("i2", 6) "]}}, " DENSE("o", 2)),
                  (4 * 5 + 5) + (5 * 6 + 6) + (6 * 2 + 2), 4, 2);
    /* the nested model's first layer gives the outer model its input */
    EXPECT_PARAMS(SEQ("{\"class_name\": \"Sequential\", \"config\": {\"name\": \"inner\", \"layers\": ["
                      "{\"class_name\": \"Dense\", \"config\": {\"name\": \"i1\", \"units\": 5, \"batch_input_shape\": [null, 4]}}]}}, "
                      DENSE("o", 2)),
                  (4 * 5 + 5) + (5 * 2 + 2), 4, 2);
    /* Keras 3: a Functional backbone in a Sequential */
    EXPECT_PARAMS(SEQ(IN4 ", {\"module\": \"keras.src.models.functional\", \"class_name\": \"Functional\", \"config\": {\"name\": \"bb\", \"trainable\": true, \"layers\": ["
                      "{\"module\": \"keras.layers\", \"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 4], \"name\": \"bin\"}, \"name\": \"bin\", \"inbound_nodes\": []},"
                      "{\"module\": \"keras.layers\", \"class_name\": \"Dense\", \"config\": {\"name\": \"b1\", \"units\": 3}, \"name\": \"b1\","
                      " \"inbound_nodes\": [{\"args\": [{\"class_name\": \"__keras_tensor__\", \"config\": {\"shape\": [null, 4], \"dtype\": \"float32\", \"keras_history\": [\"bin\", 0, 0]}}], \"kwargs\": {}}]}],"
                      " \"input_layers\": [\"bin\", 0, 0], \"output_layers\": [\"b1\", 0, 0]}}, " DENSE("o", 2)),
                  (4 * 3 + 3) + (3 * 2 + 2), 4, 2);
    /* Keras 2: a Sequential in a Functional, called on its input */
    EXPECT_PARAMS("{\"class_name\": \"Functional\", \"config\": {\"name\": \"f\", \"layers\": ["
                  "{\"class_name\": \"InputLayer\", \"name\": \"x\", \"config\": {\"batch_input_shape\": [null, 4], \"name\": \"x\"}, \"inbound_nodes\": []},"
                  "{\"class_name\": \"Sequential\", \"name\": \"seq\", \"config\": {\"name\": \"seq\", \"layers\": ["
                  "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 4], \"name\": \"seq_in\"}}, " DENSE("s1", 7) "]},"
                  " \"inbound_nodes\": [[[\"x\", 0, 0, {}]]]},"
                  "{\"class_name\": \"Dense\", \"name\": \"o\", \"config\": {\"name\": \"o\", \"units\": 1}, \"inbound_nodes\": [[[\"seq\", 1, 0, {}]]]}],"
                  " \"input_layers\": [[\"x\", 0, 0]], \"output_layers\": [[\"o\", 0, 0]]}}",
                  (4 * 7 + 7) + (7 + 1), 4, 1);
    /* Keras 2.0: a nested Sequential written as a bare layer list */
    EXPECT_PARAMS("{\"class_name\": \"Sequential\", \"config\": [{\"class_name\": \"Sequential\", \"config\": ["
                  "{\"class_name\": \"Dense\", \"config\": {\"name\": \"e\", \"units\": 3, \"batch_input_shape\": [null, 4]}}]},"
                  DENSE("o", 2) "]}",
                  (4 * 3 + 3) + (3 * 2 + 2), 4, 2);
    /* a frozen nested backbone: its weights are not trainable */
    {
        const char *js = SEQ(IN4 ", {\"class_name\": \"Sequential\", \"config\": {\"name\": \"bb\", \"trainable\": false, \"layers\": ["
                             "{\"class_name\": \"Dense\", \"config\": {\"name\": \"b1\", \"units\": 5, \"batch_input_shape\": [null, 4]}}]}}, "
                             DENSE("o", 2));
        int64_t in, out;
        rt_plan *p = NULL;
        CHECK(build(js, &in, &out, &p) == 4 * 5 + 5 + 5 * 2 + 2);
        if (p) {
            CHECK(rt_plan_report(p)->trainable_param_count == 5 * 2 + 2);
            rt_plan_release(p);
        }
    }
    /* a nested input of another shape than the value it reads */
    EXPECT_ERR(SEQ(IN4 ", {\"class_name\": \"Sequential\", \"config\": {\"name\": \"inner\", \"layers\": ["
                   "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 5], \"name\": \"ii\"}}, "
                   DENSE("i1", 2) "]}}"),
               RT_ESHAPE, "'ii'");
}

static void test_rescaling(void)
{
    const char *js = SEQ(IN4 ", {\"class_name\": \"Rescaling\", \"config\": {\"name\": \"r\", \"scale\": 0.5, \"offset\": [1, 2, 3, 4]}}");
    int64_t in, out;
    rt_plan *p = NULL;
    REQUIRE(build(js, &in, &out, &p) == 1 + 4);
    rt_exec *e = NULL;
    REQUIRE(rt_exec_create(p, &e) == 0);
    float x[8] = {1, -2, 3.5f, 0, 10, 20, 30, 40}, y[8];
    CHECK_RC(rt_exec_predict(e, x, 2, y));
    for (int i = 0; i < 8; i++) CHECK(y[i] == x[i] * 0.5f + (float)(i % 4 + 1));
    rt_exec_destroy(e);
    rt_plan_release(p);
}

static void test_errors(void)
{
    /* every problem at once: an unknown class, a Lambda, a bad activation,
     * an unsupported field, a custom class; each with its layer */
    EXPECT_ERR(SEQ(IN4 ", {\"class_name\": \"Foo\", \"config\": {\"name\": \"foo_1\"}},"
                   "{\"class_name\": \"Lambda\", \"config\": {\"name\": \"lam\", \"function\": \"...\"}},"
                   "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d1\", \"units\": 3, \"activation\": \"bogus\"}},"
                   "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d2\", \"units\": 3, \"wobble\": 1, \"jitter\": true}},"
                   "{\"module\": \"my_pkg\", \"class_name\": \"Attention\", \"registered_name\": \"my_pkg>Attention\", \"config\": {\"name\": \"att\"}},"
                   "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d3\", \"units\": 2, \"activity_regularizer\": {\"class_name\": \"OrthogonalRegularizer\", \"config\": {\"factor\": 0.1}}}}"),
               RT_EUNKNOWN_LAYER, "6 problems", "unknown Keras layer 'Foo' (layer 'foo_1')",
               "Lambda layer 'lam' holds Python code", "unsupported activation 'bogus' (layer 'd1')",
               "unsupported settings 'wobble', 'jitter' (layer 'd2')",
               "custom class 'Attention' (my_pkg>Attention)", "'activity_regularizer' (layer 'd3')");
    /* a layer after a failed one reports no shape problem of its own */
    EXPECT_ERR(SEQ(IN4 ", {\"class_name\": \"Foo\", \"config\": {\"name\": \"foo_1\"}},"
                   "{\"class_name\": \"Reshape\", \"config\": {\"name\": \"r\", \"target_shape\": [3]}}"),
               RT_EUNKNOWN_LAYER, "unknown Keras layer 'Foo' (layer 'foo_1')");
    CHECK(strstr(err, "problems") == NULL);
    /* more problems than fit: counted */
    {
        size_t cap = 200000, len = 0;
        char *js = malloc(cap);
        len += (size_t)snprintf(js + len, cap - len, "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": [" IN4);
        for (int i = 0; i < 400; i++)
            len += (size_t)snprintf(js + len, cap - len, ", {\"class_name\": \"Foo\", \"config\": {\"name\": \"layer_with_a_long_name_%d\"}}", i);
        snprintf(js + len, cap - len, "]}}");
        EXPECT_ERR(js, RT_EUNKNOWN_LAYER, "400 problems", "more");
        CHECK(strlen(err) < 4096);
        free(js);
    }
    /* inert fields pass; trainable=false on a layer without weights too */
    EXPECT_PARAMS(SEQ(IN4 ", {\"class_name\": \"Dropout\", \"config\": {\"name\": \"dr\", \"rate\": 0.1, \"seed\": 3, \"noise_shape\": null, \"trainable\": false,"
                      " \"dtype\": {\"module\": \"keras\", \"class_name\": \"DTypePolicy\", \"config\": {\"name\": \"float32\"}}}}, " DENSE("d", 2)),
                  10, 4, 2);
    /* an initializer's unknown field */
    EXPECT_ERR(SEQ(IN4 ", {\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 2, \"kernel_initializer\": {\"class_name\": \"RandomNormal\", \"config\": {\"stdev\": 1}}}}"),
               RT_EINVAL, "'stdev'", "(layer 'd')");
    /* bad configs name the layer */
    EXPECT_ERR(SEQ(IN4 ", {\"class_name\": \"Dense\", \"config\": {\"name\": \"neg\", \"units\": -3}}"),
               RT_EINVAL, "units", "'neg'");
    EXPECT_ERR(SEQ("{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 8, 8, 1], \"name\": \"x\"}},"
                   "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"cv\", \"filters\": 2, \"kernel_size\": 3, \"padding\": \"full\"}}"),
               RT_EINVAL, "padding 'full'", "'cv'");
    EXPECT_ERR(SEQ(IN4 ", {\"class_name\": \"Dense\", \"config\": {\"name\": \"c\", \"units\": 2, \"kernel_constraint\": {\"class_name\": \"MaxNorm\", \"config\": {\"max_value\": 2, \"axis\": 3}}}}"),
               RT_EINVAL, "axis 3", "'c'");
    const char *cyc =
        "{\"class_name\": \"Functional\", \"config\": {\"layers\": ["
        "{\"name\": \"x\", \"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 4], \"name\": \"x\"}, \"inbound_nodes\": []},"
        "{\"name\": \"a\", \"class_name\": \"Dense\", \"config\": {\"name\": \"a\", \"units\": 4}, \"inbound_nodes\": [[[\"b\", 0, 0, {}]]]},"
        "{\"name\": \"b\", \"class_name\": \"Dense\", \"config\": {\"name\": \"b\", \"units\": 4}, \"inbound_nodes\": [[[\"a\", 0, 0, {}]]]}],"
        "\"input_layers\": [[\"x\", 0, 0]], \"output_layers\": [[\"b\", 0, 0]]}}";
    EXPECT_ERR(cyc, RT_EINVAL, "cycle");
    EXPECT_ERR("{\"class_name\": \"Functional\", \"config\": {\"layers\": ["
               "{\"name\": \"x\", \"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 4], \"name\": \"x\"}, \"inbound_nodes\": []},"
               "{\"name\": \"d\", \"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 2}, \"inbound_nodes\": [[[\"ghost\", 0, 0, {}]]]}],"
               "\"input_layers\": [[\"x\", 0, 0]], \"output_layers\": [[\"d\", 0, 0]]}}",
               RT_EINVAL, "'d' reads 'ghost'");
    EXPECT_ERR("{\"class_name\": \"Functional\", \"config\": {\"layers\": ["
               "{\"name\": \"x\", \"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 4], \"name\": \"x\"}, \"inbound_nodes\": []},"
               "{\"name\": \"a\", \"class_name\": \"Dense\", \"config\": {\"name\": \"a\", \"units\": 2}, \"inbound_nodes\": [[[\"x\", 0, 0, {}]]]},"
               "{\"name\": \"r\", \"class_name\": \"Reshape\", \"config\": {\"name\": \"r\", \"target_shape\": [1, 2]}, \"inbound_nodes\": [[[\"a\", 0, 0, {}]]]},"
               "{\"name\": \"c\", \"class_name\": \"Concatenate\", \"config\": {\"name\": \"c\", \"axis\": -1}, \"inbound_nodes\": [[[\"x\", 0, 0, {}], [\"r\", 0, 0, {}]]]}],"
               "\"input_layers\": [[\"x\", 0, 0]], \"output_layers\": [[\"c\", 0, 0]]}}",
               RT_ESHAPE, "Concatenate", "'c'");
}

/* categorical crossentropy with one-hot labels and no label shape: the
 * labels take the output's shape; the loss is -sum y log p computed here */
static void test_onehot(void)
{
    const char *js = SEQ(IN4 ", {\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 3, \"activation\": \"softmax\"}}");
    rt_graph *g = NULL;
    REQUIRE(rt_keras_import(js, strlen(js), &g, err, sizeof err) == 0);
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    REQUIRE(rt_loss_from_name("categorical_crossentropy", &cfg.loss) == 0);
    cfg.label_dtype = RT_F32; /* as the RPC defaults for this loss; no shape */
    cfg.batch_size = 4;
    rt_plan *p = NULL;
    int rc = rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err);
    if (rc < 0) fprintf(stderr, "one-hot compile: %s\n", err);
    REQUIRE(rc == 0);
    int64_t ld[RT_MAX_DIMS];
    CHECK(rt_plan_label_shape(p, ld) == 1 && ld[0] == 3);
    CHECK(rt_plan_config(p)->label_dtype == RT_F32);
    rt_exec *e = NULL;
    REQUIRE(rt_exec_create(p, &e) == 0);
    float x[16], y[12] = {1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 1, 0}, out[12];
    for (int i = 0; i < 16; i++) x[i] = (float)(i % 5) * 0.3f - 0.5f;
    CHECK_RC(rt_exec_predict(e, x, 4, out));
    double want = 0;
    for (int i = 0; i < 12; i++) want -= y[i] * log(fmax(out[i], 1e-7));
    want /= 4;
    rt_data d = {.x = x, .y = y, .y_dtype = RT_F32, .n = 4};
    rt_metrics m;
    CHECK_RC(rt_exec_evaluate(e, &d, &m));
    if (!(fabs(m.loss - want) < 1e-5)) {
        fprintf(stderr, "one-hot CE %g, want %g\n", m.loss, want);
        rt_test_failures++;
    }
    rt_exec_destroy(e);
    rt_plan_release(p);
    rt_graph_destroy(g);
}

/* A null (variable) input dim: refused unbound, naming the input; bound
 * through rt_keras_import_dims (a compile request's input_dims) it
 * compiles to the bound shape and trains; a binding that contradicts a
 * fixed dim, or has another rank, is refused naming the input. */
static void test_varlen(void)
{
    const char *js = SEQ("{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": "
                         "[null, null, 3], \"name\": \"seq\"}}, "
                         "{\"class_name\": \"SimpleRNN\", \"config\": {\"name\": \"r\", \"units\": 4}}, "
                         DENSE("d", 2));
    EXPECT_ERR(js, RT_EINVAL, "input 'seq' has a variable dimension", "--input-shape",
               "input_shape=");
    rt_graph *g = NULL;
    const int64_t bad[2] = {6, 5}, rank[1] = {6}, ok[2] = {6, 0};
    CHECK(rt_keras_import_dims(js, strlen(js), bad, 2, &g, err, sizeof err, NULL, NULL) ==
          RT_EINVAL && g == NULL && strstr(err, "input 'seq'") && strstr(err, "dim 2 = 3"));
    CHECK(rt_keras_import_dims(js, strlen(js), rank, 1, &g, err, sizeof err, NULL, NULL) ==
          RT_EINVAL && g == NULL && strstr(err, "input 'seq'") && strstr(err, "2 dims"));
    REQUIRE(rt_keras_import_dims(js, strlen(js), ok, 2, &g, err, sizeof err, NULL, NULL) == 0);
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_MSE;
    cfg.label_dtype = RT_F32;
    cfg.label_ndim = 1;
    cfg.label_dims[0] = 2;
    cfg.batch_size = 2;
    rt_plan *p = NULL;
    int rc = rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err);
    if (rc < 0) fprintf(stderr, "varlen compile: %s\n", err);
    REQUIRE(rc == 0);
    int64_t d[RT_MAX_DIMS];
    CHECK(rt_plan_input_shape(p, d) == 2 && d[0] == 6 && d[1] == 3);
    rt_exec *e = NULL;
    REQUIRE(rt_exec_create(p, &e) == 0);
    float x[4 * 18], y[8];
    for (int i = 0; i < 4 * 18; i++) x[i] = (float)(i % 7) * 0.2f - 0.6f;
    for (int i = 0; i < 8; i++) y[i] = (float)(i % 3) * 0.5f;
    rt_data dd = {.x = x, .y = y, .y_dtype = RT_F32, .n = 4};
    rt_train_result r;
    memset(&r, 0, sizeof r);
    CHECK_RC(rt_exec_train(e, &dd, 4, &r, NULL, NULL, NULL));
    CHECK(r.steps_run == 4 && r.mean.loss > 0 && r.mean.loss == r.mean.loss);
    rt_exec_destroy(e);
    rt_plan_release(p);
    rt_graph_destroy(g);
}

/* A nested model whose InputLayer has null dims reads a bound value of any
 * size there (Keras' InputSpec leaves a None axis unchecked; pix2pix's
 * nested Sequentials are [null, null, null, C]); a fixed dim must match. */
static void test_varlen_nested(void)
{
#define NEST(inner_shape)                                                                     \
    SEQ("{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": "               \
        "[null, null, 3], \"name\": \"seq\"}}, "                                                \
        "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"inner\", \"layers\": ["        \
        "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": " inner_shape      \
        ", \"name\": \"ii\"}}, "                                                                 \
        "{\"class_name\": \"SimpleRNN\", \"config\": {\"name\": \"r\", \"units\": 4}}]}}, "        \
        DENSE("d", 2))
    const int64_t dims[2] = {6, 3};
    static const char *const take[] = {NEST("[null, null, 3]"), NEST("[null, 6, 3]")};
    for (int i = 0; i < 2; i++) {
        rt_graph *g = NULL;
        int rc = rt_keras_import_dims(take[i], strlen(take[i]), dims, 2, &g, err, sizeof err,
                                      NULL, NULL);
        if (rc < 0) fprintf(stderr, "nested varlen %d: %s\n", i, err);
        CHECK(rc == 0 && g != NULL);
        rt_graph_destroy(g);
    }
    static const char *const refuse[] = {NEST("[null, 5, 3]"), NEST("[null, null, 4]"),
                                         NEST("[null, 3]")};
    for (int i = 0; i < 3; i++) {
        rt_graph *g = NULL;
        CHECK(rt_keras_import_dims(refuse[i], strlen(refuse[i]), dims, 2, &g, err, sizeof err,
                                   NULL, NULL) == RT_ESHAPE &&
              g == NULL && strstr(err, "'ii'"));
    }
#undef NEST
}

int main(void)
{
    test_varlen();
    test_onehot();
    test_keras1();
    test_wrappers();
    test_nested();
    test_varlen_nested();
    test_rescaling();
    test_errors();
    return rt_test_done("keras_formats");
}
