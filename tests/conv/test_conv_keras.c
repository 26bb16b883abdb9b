/*
 * test_conv_keras.c - Keras JSON import of convolutional models: a
 * Sequential CNN (Keras 3 JSON) with Conv2D, BatchNormalization,
 * MaxPooling2D, Dropout, AveragePooling2D, GlobalAveragePooling2D; a
 * Functional Inception-style block (Keras 2 JSON, parallel branches joined
 * by Concatenate); transfer learning (trainable=false: frozen parameters,
 * frozen BatchNormalization in inference mode); and clear errors for what
 * is not supported.
 */
#include "../engine/rt_test.h"
#include "import_keras.h"

static const char *seq_json =
    "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"cnn\", \"layers\": ["
    "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 12, 12, 1], \"name\": \"in\"}},"
    "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c1\", \"filters\": 8, \"kernel_size\": [3, 3],"
    " \"strides\": [1, 1], \"padding\": \"same\", \"data_format\": \"channels_last\","
    " \"dilation_rate\": [1, 1], \"groups\": 1, \"activation\": \"relu\", \"use_bias\": true,"
    " \"kernel_initializer\": {\"module\": \"keras.initializers\", \"class_name\": \"GlorotUniform\", \"config\": {\"seed\": null}},"
    " \"bias_initializer\": {\"module\": \"keras.initializers\", \"class_name\": \"Zeros\", \"config\": {}}}},"
    "{\"class_name\": \"BatchNormalization\", \"config\": {\"name\": \"bn\", \"axis\": -1, \"momentum\": 0.9,"
    " \"epsilon\": 0.001, \"center\": true, \"scale\": true}},"
    "{\"class_name\": \"MaxPooling2D\", \"config\": {\"name\": \"p1\", \"pool_size\": [2, 2], \"padding\": \"valid\","
    " \"strides\": [2, 2], \"data_format\": \"channels_last\"}},"
    "{\"class_name\": \"Dropout\", \"config\": {\"name\": \"dr\", \"rate\": 0.25}},"
    "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c2\", \"filters\": 6, \"kernel_size\": 3,"
    " \"strides\": 2, \"padding\": \"same\", \"activation\": \"softmax\", \"use_bias\": false, \"trainable\": false}},"
    "{\"class_name\": \"AveragePooling2D\", \"config\": {\"name\": \"ap\", \"pool_size\": [2, 2], \"strides\": null,"
    " \"padding\": \"same\"}},"
    "{\"class_name\": \"GlobalAveragePooling2D\", \"config\": {\"name\": \"gap\", \"data_format\": \"channels_last\","
    " \"keepdims\": false}},"
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"fc\", \"units\": 5, \"activation\": \"relu\", \"trainable\": false}},"
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"out\", \"units\": 4, \"activation\": \"linear\"}}"
    "]}}";

/* Keras 2 Functional JSON: an Inception-style block with three branches */
static const char *inception_json =
    "{\"class_name\": \"Functional\", \"config\": {\"name\": \"inc\", \"layers\": ["
    "{\"class_name\": \"InputLayer\", \"name\": \"img\", \"config\": {\"batch_input_shape\": [null, 10, 10, 3], \"name\": \"img\"}, \"inbound_nodes\": []},"
    "{\"class_name\": \"Conv2D\", \"name\": \"b1\", \"config\": {\"name\": \"b1\", \"filters\": 4, \"kernel_size\": [1, 1], \"padding\": \"same\", \"activation\": \"relu\"}, \"inbound_nodes\": [[[\"img\", 0, 0, {}]]]},"
    "{\"class_name\": \"Conv2D\", \"name\": \"b3r\", \"config\": {\"name\": \"b3r\", \"filters\": 3, \"kernel_size\": [1, 1], \"activation\": \"relu\"}, \"inbound_nodes\": [[[\"img\", 0, 0, {}]]]},"
    "{\"class_name\": \"Conv2D\", \"name\": \"b3\", \"config\": {\"name\": \"b3\", \"filters\": 5, \"kernel_size\": [3, 3], \"padding\": \"same\", \"activation\": \"relu\"}, \"inbound_nodes\": [[[\"b3r\", 0, 0, {}]]]},"
    "{\"class_name\": \"MaxPooling2D\", \"name\": \"bp\", \"config\": {\"name\": \"bp\", \"pool_size\": [3, 3], \"strides\": [1, 1], \"padding\": \"same\"}, \"inbound_nodes\": [[[\"img\", 0, 0, {}]]]},"
    "{\"class_name\": \"Conv2D\", \"name\": \"bpc\", \"config\": {\"name\": \"bpc\", \"filters\": 2, \"kernel_size\": [1, 1], \"activation\": \"relu\"}, \"inbound_nodes\": [[[\"bp\", 0, 0, {}]]]},"
    "{\"class_name\": \"Concatenate\", \"name\": \"cat\", \"config\": {\"name\": \"cat\", \"axis\": -1}, \"inbound_nodes\": [[[\"b1\", 0, 0, {}], [\"b3\", 0, 0, {}], [\"bpc\", 0, 0, {}]]]},"
    "{\"class_name\": \"BatchNormalization\", \"name\": \"bn\", \"config\": {\"name\": \"bn\", \"axis\": [3], \"trainable\": false}, \"inbound_nodes\": [[[\"cat\", 0, 0, {}]]]},"
    "{\"class_name\": \"Flatten\", \"name\": \"fl\", \"config\": {\"name\": \"fl\"}, \"inbound_nodes\": [[[\"bn\", 0, 0, {}]]]},"
    "{\"class_name\": \"Dense\", \"name\": \"out\", \"config\": {\"name\": \"out\", \"units\": 3}, \"inbound_nodes\": [[[\"fl\", 0, 0, {}]]]}"
    "], \"input_layers\": [[\"img\", 0, 0]], \"output_layers\": [[\"out\", 0, 0]]}}";

static int find_param(rt_plan *p, const char *name, int64_t *dims, int *trainable)
{
    for (int i = 0; i < rt_plan_n_params(p); i++) {
        const char *n;
        int64_t d[RT_MAX_DIMS];
        int t;
        int nd = rt_plan_param_info(p, i, &n, d, &t);
        if (strcmp(n, name) == 0) {
            if (dims) memcpy(dims, d, sizeof(int64_t) * (size_t)nd);
            if (trainable) *trainable = t;
            return i;
        }
    }
    return -1;
}

static rt_plan *import_compile(const char *json, int batch, char *err)
{
    rt_graph *g;
    int rc = rt_keras_import(json, strlen(json), &g, err, 256);
    if (rc < 0) {
        fprintf(stderr, "import: %s\n", err);
        return NULL;
    }
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_SPARSE_CE;
    cfg.from_logits = 1;
    cfg.batch_size = batch;
    cfg.seed = 4;
    rt_plan *p;
    rc = rt_plan_compile(g, &cfg, &p, NULL, err, 256);
    rt_graph_destroy(g);
    if (rc < 0) {
        fprintf(stderr, "compile: %s\n", err);
        return NULL;
    }
    return p;
}

/* train a few steps on random data; returns the exec */
static rt_exec *train_some(rt_plan *p, int64_t in_numel, int classes, int n, int steps,
                           float **xo, int32_t **yo)
{
    rt_exec *e;
    REQUIRE(rt_exec_create(p, &e) == 0);
    float *x = malloc(sizeof(float) * (size_t)(n * in_numel));
    int32_t *y = malloc(sizeof(int32_t) * (size_t)n);
    uint64_t s = 99;
    for (int64_t i = 0; i < n * in_numel; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((s >> 40) & 0xffff) / 65536.0f;
    }
    for (int i = 0; i < n; i++) y[i] = i % classes;
    rt_data d = {.x = x, .y = y, .y_dtype = RT_I32, .n = n};
    rt_metrics m0;
    CHECK_RC(rt_exec_evaluate(e, &d, &m0));
    rt_train_result r;
    CHECK_RC(rt_exec_train(e, &d, steps, &r, NULL, NULL, NULL));
    CHECK(isfinite(r.last.loss) && r.steps_run == steps);
    rt_metrics m;
    CHECK_RC(rt_exec_evaluate(e, &d, &m));
    /* the steps fit the (random) training data a little */
    CHECK(isfinite(m.loss) && m.loss < m0.loss);
    /* the accuracy is the argmax accuracy of what the model predicts */
    float *out = malloc(sizeof(float) * (size_t)(n * classes));
    REQUIRE(out);
    CHECK_RC(rt_exec_predict(e, x, n, out));
    int hit = 0;
    for (int i = 0; i < n; i++) {
        int best = 0;
        for (int k = 1; k < classes; k++)
            if (out[i * classes + k] > out[i * classes + best])
                best = k;
        hit += best == y[i];
    }
    CHECK(m.samples == n && fabs(m.acc - (double)hit / n) < 1e-9);
    free(out);
    *xo = x;
    *yo = y;
    return e;
}

static void expect_error(const char *json, int code, const char *needle)
{
    rt_graph *g = NULL;
    char err[256] = "";
    int rc = rt_keras_import(json, strlen(json), &g, err, sizeof err);
    if (rc == 0) {
        /* some errors surface at compile */
        rt_train_config cfg;
        rt_train_config_init(&cfg);
        rt_plan *p = NULL;
        rc = rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err);
        rt_plan_release(p);
        rt_graph_destroy(g);
    }
    CHECK(rc == code);
    CHECK(strstr(err, needle) != NULL);
    if (rc != code || !strstr(err, needle))
        fprintf(stderr, "  got %s: '%s' (wanted '%s')\n", rt_err_name(rc), err, needle);
}

int main(void)
{
    char err[256];

    /* ---- Sequential CNN */
    rt_plan *p = import_compile(seq_json, 16, err);
    REQUIRE(p);
    int64_t dims[RT_MAX_DIMS];
    int64_t od[RT_MAX_DIMS];
    CHECK(rt_plan_output_shape(p, od) == 1 && od[0] == 4);
    int t = -1;
    CHECK(find_param(p, "c1/kernel", dims, &t) >= 0 && dims[0] == 3 && dims[1] == 3 &&
          dims[2] == 1 && dims[3] == 8 && t == 1);
    CHECK(find_param(p, "bn/gamma", dims, &t) >= 0 && dims[0] == 8 && t == 1);
    CHECK(find_param(p, "bn/moving_mean", dims, &t) >= 0 && t == 0);
    CHECK(find_param(p, "bn/moving_variance", dims, &t) >= 0 && t == 0);
    CHECK(find_param(p, "c2/kernel", dims, &t) >= 0 && dims[2] == 8 && dims[3] == 6 && t == 0);
    CHECK(find_param(p, "c2/bias", NULL, NULL) < 0); /* use_bias false */
    CHECK(find_param(p, "fc/kernel", dims, &t) >= 0 && dims[0] == 6 && dims[1] == 5 && t == 0);
    CHECK(find_param(p, "fc/bias", dims, &t) >= 0 && t == 0);
    CHECK(find_param(p, "out/kernel", dims, &t) >= 0 && dims[0] == 5 && t == 1);
    float *x;
    int32_t *y;
    const int c2k = find_param(p, "c2/kernel", dims, NULL);
    const int bnm = find_param(p, "bn/moving_mean", NULL, NULL);
    float before[3 * 3 * 8 * 6], after[3 * 3 * 8 * 6], mm[8];
    rt_exec *e0;
    REQUIRE(rt_exec_create(p, &e0) == 0);
    rt_exec_get_param(e0, c2k, before);
    rt_exec_destroy(e0);
    rt_exec *e = train_some(p, 12 * 12, 4, 40, 6, &x, &y);
    rt_exec_get_param(e, c2k, after);
    CHECK(memcmp(before, after, sizeof before) == 0); /* frozen conv unchanged */
    rt_exec_get_param(e, bnm, mm);
    int moved = 0;
    for (int i = 0; i < 8; i++) moved |= mm[i] != 0.0f;
    CHECK(moved); /* a trainable BatchNorm updates its moving mean */
    printf("Sequential CNN: ok\n");
    rt_exec_destroy(e);
    rt_plan_release(p);
    free(x);
    free(y);

    /* ---- Functional Inception block with a frozen BatchNorm */
    p = import_compile(inception_json, 8, err);
    REQUIRE(p);
    CHECK(find_param(p, "bn/gamma", dims, &t) >= 0 && dims[0] == 4 + 5 + 2 && t == 0);
    CHECK(find_param(p, "out/kernel", dims, &t) >= 0 && dims[0] == 10 * 10 * 11 && t == 1);
    e = train_some(p, 10 * 10 * 3, 3, 20, 5, &x, &y);
    /* frozen BatchNorm: inference mode while training, statistics kept */
    float st[11];
    rt_exec_get_param(e, find_param(p, "bn/moving_mean", NULL, NULL), st);
    for (int i = 0; i < 11; i++) CHECK(st[i] == 0.0f);
    rt_exec_get_param(e, find_param(p, "bn/moving_variance", NULL, NULL), st);
    for (int i = 0; i < 11; i++) CHECK(st[i] == 1.0f);
    printf("Functional Inception block: ok\n");
    rt_exec_destroy(e);
    rt_plan_release(p);
    free(x);
    free(y);

    /* ---- errors */
    expect_error("{\"class_name\": \"Sequential\", \"config\": {\"layers\": ["
                 "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 3, 8, 8], \"name\": \"i\"}},"
                 "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", \"filters\": 2, \"kernel_size\": 3,"
                 " \"data_format\": \"NCHW\"}}]}}",
                 RT_EUNIMPLEMENTED, "data_format 'NCHW' is not supported");
    expect_error("{\"class_name\": \"Sequential\", \"config\": {\"layers\": ["
                 "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 8], \"name\": \"i\"}},"
                 "{\"class_name\": \"MaxPooling2D\", \"config\": {\"name\": \"p\"}}]}}",
                 RT_ESHAPE, "(H, W, C)");
    expect_error("{\"class_name\": \"Sequential\", \"config\": {\"layers\": ["
                 "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 4, 4, 1], \"name\": \"i\"}},"
                 "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", \"filters\": 2, \"kernel_size\": 5}}]}}",
                 RT_ESHAPE, "smaller than the window");
    expect_error("{\"class_name\": \"Sequential\", \"config\": {\"layers\": ["
                 "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 4, 4, 2], \"name\": \"i\"}},"
                 "{\"class_name\": \"BatchNormalization\", \"config\": {\"name\": \"b\", \"axis\": 2}}]}}",
                 RT_EUNIMPLEMENTED, "only the last axis");
    expect_error("{\"class_name\": \"Sequential\", \"config\": {\"layers\": ["
                 "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 4, 4, 2], \"name\": \"i\"}},"
                 "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", \"filters\": 2, \"kernel_size\": 3, \"groups\": 3}}]}}",
                 RT_EINVAL, "groups 3 must divide 2 channels and 2 filters (layer 'c')");
    return rt_test_done("test_conv_keras");
}
