/*
 * test_keras_layout.c - channels_first models (data_format, Keras 1's
 * dim_ordering "th", BatchNormalization over axis 1) against the same
 * models written channels_last.
 *
 * Keras defines channels_first by the channels_last model on transposed
 * data: the same kernels (Keras keeps (kh, kw, cin, cout) in both), the
 * per-channel weights equal, a PReLU alpha (C, H, W) transposed to
 * (H, W, C), and the kernel of a Dense after a Flatten with its rows
 * permuted from (C, H, W) order to (H, W, C) order. So each channels_first
 * model here is built with weights from its channels_last twin, mapped by
 * those rules, and fed the twin's data transposed to (C, H, W): its
 * predictions (output transposed back where it is an image), loss and the
 * weights after two SGD steps (mapped the same way) must equal the
 * twin's. Weights are read and written in Keras' own layout
 * (rt_exec_get_param), whatever order the engine keeps them in.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/rt_test.h"
#include "import_keras.h"
#include "rtrain/rt_error.h"

#define N 6

static uint64_t rs = 0x2545F4914F6CDD1Dull;
static float frand(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (float)((double)(rs >> 11) / 9007199254740992.0) * 2.0f - 1.0f;
}

static rt_exec *make(const char *js, const char *what)
{
    rt_graph *g = NULL;
    char err[4096];
    int rc = rt_keras_import(js, strlen(js), &g, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "%s: import: %s\n", what, err);
        exit(1);
    }
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_MSE;
    cfg.label_dtype = RT_F32;
    cfg.batch_size = 3;
    cfg.opt = RT_OPT_SGD;
    cfg.lr = 0.1f;
    cfg.shuffle = 0;
    cfg.metrics = 0;
    cfg.seed = 7;
    rt_plan *p = NULL;
    /* labels of the output's shape: learn it from a first compile, with
     * the cross-entropy that fits the output (from logits for a raw one,
     * from probabilities for a Sigmoid) */
    cfg.loss = RT_LOSS_CE;
    cfg.from_logits = 1;
    if ((rc = rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err)) < 0) {
        cfg.from_logits = 0;
        rc = rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err);
    }
    cfg.from_logits = 0;
    if (rc < 0) {
        fprintf(stderr, "%s: compile: %s\n", what, err);
        exit(1);
    }
    int64_t od[RT_MAX_DIMS];
    cfg.label_ndim = rt_plan_output_shape(p, od);
    memcpy(cfg.label_dims, od, sizeof od);
    rt_plan_release(p);
    cfg.loss = RT_LOSS_MSE;
    REQUIRE(rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err) == 0);
    rt_exec *e = NULL;
    REQUIRE(rt_exec_create(p, &e) == 0);
    rt_plan_release(p);
    rt_graph_destroy(g);
    return e;
}

static int param_index(rt_exec *e, const char *name, int64_t *dims, int *nd)
{
    const rt_plan *p = rt_exec_plan(e);
    for (int i = 0; i < rt_plan_n_params(p); i++) {
        const char *n;
        int64_t d[RT_MAX_DIMS];
        int k = rt_plan_param_info(p, i, &n, d, NULL);
        if (strcmp(n, name) == 0) {
            if (dims) memcpy(dims, d, sizeof d);
            if (nd) *nd = k;
            return i;
        }
    }
    fprintf(stderr, "no parameter %s\n", name);
    exit(1);
}

/* (a, b, c) -> (b, c, a) of a row-major block, times `rows` trailing
 * columns kept together: Keras' (C, H, W[, units]) order to (H, W, C[,
 * units]) when to_cl, else back */
static void cycle(const float *src, float *dst, int64_t C, int64_t H, int64_t W, int64_t u,
                  int to_cl)
{
    for (int64_t c = 0; c < C; c++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t w = 0; w < W; w++)
                for (int64_t k = 0; k < u; k++) {
                    const int64_t chw = ((c * H + h) * W + w) * u + k;
                    const int64_t hwc = ((h * W + w) * C + c) * u + k;
                    if (to_cl) dst[hwc] = src[chw];
                    else dst[chw] = src[hwc];
                }
}

/* a parameter that differs between the twins: its Keras (C, H, W, units)
 * block in the channels_first model */
typedef struct moved {
    const char *name;
    int64_t C, H, W, u;
} moved;

static const moved *find_moved(const moved *mv, const char *name)
{
    for (; mv && mv->name; mv++)
        if (strcmp(mv->name, name) == 0) return mv;
    return NULL;
}

/* cl's weights into cf (the twin's weights, mapped) */
static void copy_weights(rt_exec *cl, rt_exec *cf, const moved *mv)
{
    const rt_plan *p = rt_exec_plan(cl);
    for (int i = 0; i < rt_plan_n_params(p); i++) {
        const char *name;
        int64_t d[RT_MAX_DIMS], d2[RT_MAX_DIMS];
        int nd = rt_plan_param_info(p, i, &name, d, NULL), nd2;
        int64_t n = 1;
        for (int k = 0; k < nd; k++) n *= d[k];
        float *v = malloc(sizeof(float) * (size_t)n), *w = malloc(sizeof(float) * (size_t)n);
        rt_exec_get_param(cl, i, v);
        int j = param_index(cf, name, d2, &nd2);
        const moved *m = find_moved(mv, name);
        if (m) cycle(v, w, m->C, m->H, m->W, m->u, 0);
        else memcpy(w, v, sizeof(float) * (size_t)n);
        CHECK(rt_exec_set_param(cf, j, w) == 0);
        free(v);
        free(w);
    }
}

/* every weight of cf, mapped, against cl's */
static void compare_weights(rt_exec *cl, rt_exec *cf, const moved *mv, const char *what)
{
    const rt_plan *p = rt_exec_plan(cl);
    for (int i = 0; i < rt_plan_n_params(p); i++) {
        const char *name;
        int64_t d[RT_MAX_DIMS];
        int nd = rt_plan_param_info(p, i, &name, d, NULL);
        int64_t n = 1;
        for (int k = 0; k < nd; k++) n *= d[k];
        float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n),
              *c = malloc(sizeof(float) * (size_t)n);
        rt_exec_get_param(cl, i, a);
        rt_exec_get_param(cf, param_index(cf, name, NULL, NULL), b);
        const moved *m = find_moved(mv, name);
        if (m) cycle(b, c, m->C, m->H, m->W, m->u, 1);
        else memcpy(c, b, sizeof(float) * (size_t)n);
        int bad = 0;
        for (int64_t k = 0; k < n && !bad; k++)
            if (!(fabsf(a[k] - c[k]) <= 1e-5f + 1e-4f * fabsf(a[k]))) {
                fprintf(stderr, "%s: %s[%lld] channels_first %.8g, channels_last %.8g\n", what,
                        name, (long long)k, c[k], a[k]);
                bad = 1;
            }
        rt_test_failures += bad;
        free(a);
        free(b);
        free(c);
    }
}

/* cl and cf on x (N, H, W, C) and its transpose; out_img: the output is
 * an image (C', H', W') to transpose back */
static void twins(const char *cl_js, const char *cf_js, const moved *mv, int64_t C, int64_t H,
                  int64_t W, const int64_t *out_img, const char *what)
{
    rt_exec *cl = make(cl_js, what), *cf = make(cf_js, what);
    copy_weights(cl, cf, mv);
    int64_t od[RT_MAX_DIMS], on = rt_plan_output_shape(rt_exec_plan(cl), od), outn = 1;
    for (int k = 0; k < on; k++) outn *= od[k];
    const int64_t xn = C * H * W;
    float *x = malloc(sizeof(float) * (size_t)(N * xn)), *xt = malloc(sizeof(float) * (size_t)(N * xn));
    float *y = malloc(sizeof(float) * (size_t)(N * outn)), *yt = malloc(sizeof(float) * (size_t)(N * outn));
    float *pa = malloc(sizeof(float) * (size_t)(N * outn)), *pb = malloc(sizeof(float) * (size_t)(N * outn));
    for (int64_t i = 0; i < N * xn; i++) x[i] = frand();
    for (int64_t i = 0; i < N * outn; i++) y[i] = frand();
    for (int s = 0; s < N; s++) cycle(x + s * xn, xt + s * xn, C, H, W, 1, 0);
    memcpy(yt, y, sizeof(float) * (size_t)(N * outn));
    if (out_img)
        for (int s = 0; s < N; s++)
            cycle(y + s * outn, yt + s * outn, out_img[0], out_img[1], out_img[2], 1, 0);
    CHECK_RC(rt_exec_predict(cl, x, N, pa));
    CHECK_RC(rt_exec_predict(cf, xt, N, pb));
    float *pbt = malloc(sizeof(float) * (size_t)(N * outn));
    memcpy(pbt, pb, sizeof(float) * (size_t)(N * outn));
    if (out_img)
        for (int s = 0; s < N; s++)
            cycle(pb + s * outn, pbt + s * outn, out_img[0], out_img[1], out_img[2], 1, 1);
    int bad = 0;
    for (int64_t i = 0; i < N * outn && !bad; i++)
        if (!(fabsf(pa[i] - pbt[i]) <= 1e-6f + 1e-5f * fabsf(pa[i]))) {
            fprintf(stderr, "%s: prediction %lld channels_first %.8g, channels_last %.8g\n",
                    what, (long long)i, pbt[i], pa[i]);
            bad = 1;
        }
    rt_test_failures += bad;
    rt_data da = {.x = x, .y = y, .y_dtype = RT_F32, .n = N};
    rt_data db = {.x = xt, .y = yt, .y_dtype = RT_F32, .n = N};
    rt_train_result ra, rb;
    CHECK_RC(rt_exec_train(cl, &da, 2, &ra, NULL, NULL, NULL));
    CHECK_RC(rt_exec_train(cf, &db, 2, &rb, NULL, NULL, NULL));
    CHECK(fabs(ra.mean.loss - rb.mean.loss) <= 1e-5 * fabs(ra.mean.loss));
    compare_weights(cl, cf, mv, what);
    printf("%s: predictions, loss %.6f and weights after 2 SGD steps agree\n", what,
           rb.mean.loss);
    rt_exec_destroy(cl);
    rt_exec_destroy(cf);
    free(x), free(xt), free(y), free(yt), free(pa), free(pb), free(pbt);
}

/* a Sequential CNN: Conv2D, BatchNormalization, PReLU, MaxPooling2D,
 * ZeroPadding2D, Cropping2D, UpSampling2D, Conv2D, Flatten, Dense */
static void cnn(void)
{
#define CNN(SHAPE, FMT, AXIS)                                                                \
    "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": ["            \
    "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": " SHAPE ", \"name\": \"x\"}},"\
    "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c1\", \"filters\": 4, \"kernel_size\": 3,"\
    " \"padding\": \"same\", \"data_format\": \"" FMT "\"}},"                                   \
    "{\"class_name\": \"BatchNormalization\", \"config\": {\"name\": \"bn\", \"axis\": " AXIS "}},"\
    "{\"class_name\": \"PReLU\", \"config\": {\"name\": \"pr\", \"alpha_initializer\": "        \
    "{\"class_name\": \"RandomUniform\", \"config\": {\"minval\": 0.1, \"maxval\": 0.5}}}},"   \
    "{\"class_name\": \"MaxPooling2D\", \"config\": {\"name\": \"mp\", \"data_format\": \"" FMT "\"}},"\
    "{\"class_name\": \"ZeroPadding2D\", \"config\": {\"name\": \"zp\", \"padding\": [1, 2],"  \
    " \"data_format\": \"" FMT "\"}},"                                                          \
    "{\"class_name\": \"Cropping2D\", \"config\": {\"name\": \"cr\", \"cropping\": [[1, 0], [0, 1]],"\
    " \"data_format\": \"" FMT "\"}},"                                                          \
    "{\"class_name\": \"UpSampling2D\", \"config\": {\"name\": \"up\", \"size\": [1, 2],"      \
    " \"data_format\": \"" FMT "\"}},"                                                          \
    "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c2\", \"filters\": 3, \"kernel_size\": 2,"\
    " \"activation\": \"tanh\", \"data_format\": \"" FMT "\"}},"                               \
    "{\"class_name\": \"Flatten\", \"config\": {\"name\": \"f\"}},"                             \
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 5, \"activation\": \"softmax\"}}]}}"
    const char *cl = CNN("[null, 7, 6, 3]", "channels_last", "-1");
    const char *cf = CNN("[null, 3, 7, 6]", "channels_first", "1");
    /* c1 (4, 7, 6), pool (4, 3, 3), pad (4, 5, 7), crop (4, 4, 6),
     * up (4, 4, 12), c2 (3, 3, 11): the Dense reads 99 rows */
    const moved mv[] = {{"pr/alpha", 4, 7, 6, 1}, {"d/kernel", 3, 3, 11, 5}, {NULL, 0, 0, 0, 0}};
    twins(cl, cf, mv, 3, 7, 6, NULL, "Sequential CNN");
}

/* Keras 1 th ordering: Convolution2D, PReLU (init), MaxPooling2D, Flatten,
 * Dense, against a Keras 2 channels_last twin */
static void keras1(void)
{
    const char *cf =
        "{\"class_name\": \"Sequential\", \"keras_version\": \"1.2.2\", \"config\": ["
        "{\"class_name\": \"Convolution2D\", \"config\": {\"name\": \"c\", \"nb_filter\": 3,"
        " \"nb_row\": 3, \"nb_col\": 3, \"border_mode\": \"valid\", \"dim_ordering\": \"th\","
        " \"init\": \"glorot_uniform\", \"activation\": \"linear\", \"subsample\": [1, 1],"
        " \"batch_input_shape\": [null, 2, 8, 7], \"bias\": true, \"trainable\": true}},"
        "{\"class_name\": \"PReLU\", \"config\": {\"name\": \"p\", \"init\": \"zero\","
        " \"trainable\": true}},"
        "{\"class_name\": \"MaxPooling2D\", \"config\": {\"name\": \"m\", \"pool_size\": [2, 2],"
        " \"strides\": [2, 2], \"border_mode\": \"valid\", \"dim_ordering\": \"th\"}},"
        "{\"class_name\": \"Flatten\", \"config\": {\"name\": \"f\"}},"
        "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"output_dim\": 4,"
        " \"init\": \"glorot_uniform\", \"activation\": \"sigmoid\", \"input_dim\": null}}]}";
    const char *cl =
        "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": ["
        "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 8, 7, 2], \"name\": \"x\"}},"
        "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", \"filters\": 3, \"kernel_size\": 3}},"
        "{\"class_name\": \"PReLU\", \"config\": {\"name\": \"p\", \"alpha_initializer\": "
        "{\"class_name\": \"RandomUniform\", \"config\": {\"minval\": 0.1, \"maxval\": 0.5}}}},"
        "{\"class_name\": \"MaxPooling2D\", \"config\": {\"name\": \"m\"}},"
        "{\"class_name\": \"Flatten\", \"config\": {\"name\": \"f\"}},"
        "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 4, \"activation\": \"sigmoid\"}}]}}";
    /* c (3, 6, 5), m (3, 3, 2) */
    const moved mv[] = {{"p/alpha", 3, 6, 5, 1}, {"d/kernel", 3, 3, 2, 4}, {NULL, 0, 0, 0, 0}};
    twins(cl, cf, mv, 2, 8, 7, NULL, "Keras 1 th CNN with PReLU");
}

/* Functional: two channels_first branches concatenated over the channels,
 * added to a third, a channels_first Flatten (no reordering: Keras moves
 * the channels last before flattening) into a Dense; and an image output
 * (Conv2D) returned in (C, H, W) */
static void functional(void)
{
#define FUN(SHAPE, FMT, AX, OUT)                                                              \
    "{\"class_name\": \"Functional\", \"config\": {\"name\": \"f\", \"layers\": ["             \
    "{\"class_name\": \"InputLayer\", \"name\": \"x\", \"config\": {\"batch_input_shape\": " SHAPE ","\
    " \"name\": \"x\"}, \"inbound_nodes\": []},"                                               \
    "{\"class_name\": \"Conv2D\", \"name\": \"a\", \"config\": {\"name\": \"a\", \"filters\": 2,"\
    " \"kernel_size\": 1, \"data_format\": \"" FMT "\"}, \"inbound_nodes\": [[[\"x\", 0, 0, {}]]]},"\
    "{\"class_name\": \"Conv2D\", \"name\": \"b\", \"config\": {\"name\": \"b\", \"filters\": 3,"\
    " \"kernel_size\": 3, \"padding\": \"same\", \"data_format\": \"" FMT "\"}, \"inbound_nodes\": [[[\"x\", 0, 0, {}]]]},"\
    "{\"class_name\": \"Concatenate\", \"name\": \"cat\", \"config\": {\"name\": \"cat\", \"axis\": " AX "},"\
    " \"inbound_nodes\": [[[\"a\", 0, 0, {}], [\"b\", 0, 0, {}]]]},"                             \
    "{\"class_name\": \"Conv2D\", \"name\": \"c\", \"config\": {\"name\": \"c\", \"filters\": 5,"\
    " \"kernel_size\": 1, \"data_format\": \"" FMT "\"}, \"inbound_nodes\": [[[\"x\", 0, 0, {}]]]},"\
    "{\"class_name\": \"Add\", \"name\": \"add\", \"config\": {\"name\": \"add\"},"              \
    " \"inbound_nodes\": [[[\"cat\", 0, 0, {}], [\"c\", 0, 0, {}]]]},"                           \
    "{\"class_name\": \"Activation\", \"name\": \"r\", \"config\": {\"name\": \"r\", \"activation\": \"relu\"},"\
    " \"inbound_nodes\": [[[\"add\", 0, 0, {}]]]},"                                              \
    OUT "], \"input_layers\": [[\"x\", 0, 0]], \"output_layers\": [[\"o\", 0, 0]]}}"
#define FLAT_OUT(FMT)                                                                          \
    "{\"class_name\": \"Flatten\", \"name\": \"fl\", \"config\": {\"name\": \"fl\", \"data_format\": \"" FMT "\"},"\
    " \"inbound_nodes\": [[[\"r\", 0, 0, {}]]]},"                                                \
    "{\"class_name\": \"Dense\", \"name\": \"o\", \"config\": {\"name\": \"o\", \"units\": 3},"  \
    " \"inbound_nodes\": [[[\"fl\", 0, 0, {}]]]}"
#define IMG_OUT(FMT)                                                                           \
    "{\"class_name\": \"Conv2D\", \"name\": \"o\", \"config\": {\"name\": \"o\", \"filters\": 2,"\
    " \"kernel_size\": 2, \"data_format\": \"" FMT "\"}, \"inbound_nodes\": [[[\"r\", 0, 0, {}]]]}"
    /* channels_first Flatten: the Dense rows are in the channels_last
     * order in both */
    twins(FUN("[null, 5, 4, 2]", "channels_last", "-1", FLAT_OUT("channels_last")),
          FUN("[null, 2, 5, 4]", "channels_first", "1", FLAT_OUT("channels_first")), NULL, 2, 5,
          4, NULL, "Functional concat/add, channels_first Flatten");
    const int64_t img[3] = {2, 4, 3};
    twins(FUN("[null, 5, 4, 2]", "channels_last", "-1", IMG_OUT("channels_last")),
          FUN("[null, 2, 5, 4]", "channels_first", "1", IMG_OUT("channels_first")), NULL, 2, 5,
          4, img, "Functional with a (C, H, W) output");
}

/* Conv1D, MaxPooling1D and GlobalAveragePooling1D over (C, T) */
static void conv1d(void)
{
#define C1(SHAPE, FMT)                                                                        \
    "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": ["            \
    "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": " SHAPE ", \"name\": \"x\"}},"\
    "{\"class_name\": \"Conv1D\", \"config\": {\"name\": \"c\", \"filters\": 4, \"kernel_size\": 3,"\
    " \"data_format\": \"" FMT "\"}},"                                                          \
    "{\"class_name\": \"MaxPooling1D\", \"config\": {\"name\": \"m\", \"data_format\": \"" FMT "\"}},"\
    "{\"class_name\": \"GlobalAveragePooling1D\", \"config\": {\"name\": \"g\", \"data_format\": \"" FMT "\"}},"\
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 2}}]}}"
    /* (T, C) = (9, 3) as (H, W, C) = (9, 1, 3) */
    twins(C1("[null, 9, 3]", "channels_last"), C1("[null, 3, 9]", "channels_first"), NULL, 3,
          9, 1, NULL, "Conv1D/pooling over (C, T)");
}

int main(void)
{
    cnn();
    keras1();
    functional();
    conv1d();
    return rt_test_done("test_keras_layout");
}
