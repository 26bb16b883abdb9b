/*
 * test_torch_loss.c - PyTorch's losses against PyTorch 1.13, and the
 * loss-fit check.
 *
 * 1. Every case of tests/fixtures/torch_loss_ref.bin (written by
 *    gen_torch_loss_fixtures.py; torch is not needed to run this test): a
 *    fixed batch of outputs z, targets and the loss's arguments. The model
 *    is x -> Dense(W) [-> Reshape] with x the identity rows, so output i is
 *    row i of W (exactly) and dloss/dW row i is dloss/dz_i. The loss and
 *    every element of the gradient must match PyTorch's:
 *        |a - b| <= 1e-6 + 1e-5 |b|
 *    (f32 against float64 torch; a NaN loss must be NaN).
 * 2. The loss-fit check: each loss against outputs ending in Softmax,
 *    LogSoftmax, Sigmoid (also a Dense's own sigmoid), raw scores, and the
 *    same behind a Reshape; the refusals are RT_EINVAL naming the node and
 *    the loss that fits, and loss_check = 0 compiles them all.
 */
#include <math.h>
#include <stdint.h>

#include "rt_fixture.h"

static const rt_ref_tensor *find_opt(const char *name)
{
    for (int i = 0; i < rt_fixture_n; i++)
        if (strcmp(rt_fixture_refs[i].name, name) == 0) return &rt_fixture_refs[i];
    return NULL;
}

static const rt_ref_tensor *get(const char *cs, const char *what)
{
    char n[96];
    snprintf(n, sizeof n, "%s/%s", cs, what);
    return rt_fixture_find(n);
}

static void check_case(const char *cs, rt_loss_kind kind)
{
    const rt_ref_tensor *z = get(cs, "z"), *y = get(cs, "y"), *args = get(cs, "args");
    const rt_ref_tensor *want_l = get(cs, "loss"), *want_g = get(cs, "grad");
    char wn[96];
    snprintf(wn, sizeof wn, "%s/w", cs);
    const rt_ref_tensor *w = find_opt(wn);
    const int64_t B = z->dims[0], per = (int64_t)(z->count / z->dims[0]);
    const float *a = args->data;

    rt_graph *g = rt_graph_create();
    int64_t in[] = {RT_BATCH, B}, wd[] = {B, per};
    REQUIRE(rt_graph_add_input(g, "x", RT_F32, 2, in) == 0);
    REQUIRE(rt_graph_add_param(g, "W", 2, wd, RT_INIT_ZEROS, 1, z->data) == 0);
    const char *din[] = {"x", "W"};
    REQUIRE(rt_graph_add_node(g, "z", "Dense", 2, din, 0, NULL) == 0);
    if (z->ndim > 2) {
        int64_t sh[3];
        for (uint32_t i = 1; i < z->ndim; i++) sh[i - 1] = z->dims[i];
        const rt_attr rs = {.name = "shape", .kind = RT_ATTR_INTS, .n = (int)z->ndim - 1,
                            .ints = sh};
        const char *rin[] = {"z"};
        REQUIRE(rt_graph_add_node(g, "out", "Reshape", 1, rin, 1, &rs) == 0);
    }
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = kind;
    cfg.loss_check = 0; /* given values: the Dense holds log-probabilities or probabilities */
    cfg.batch_size = (int)B;
    cfg.shuffle = 0;
    cfg.reduction = a[0] != 0 ? RT_REDUCE_SUM : RT_REDUCE_MEAN;
    cfg.label_smoothing = a[1];
    cfg.ignore_index = (int64_t)a[2];
    cfg.loss_beta = a[3];
    if (w && kind == RT_LOSS_BCE_LOGITS) {
        cfg.pos_weight = w->data;
        cfg.n_pos_weight = (int)w->count;
    } else if (w) {
        cfg.class_weight = w->data;
        cfg.n_class_weight = (int)w->count;
    }
    cfg.label_dtype = y->dtype == 2 ? RT_I32 : RT_F32;
    cfg.label_ndim = (int)y->ndim - 1;
    for (uint32_t i = 1; i < y->ndim; i++) cfg.label_dims[i - 1] = y->dims[i];
    rt_plan *p;
    char err[256];
    int rc = rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err);
    if (rc) fprintf(stderr, "%s: compile: %s\n", cs, err);
    REQUIRE(rc == 0);
    rt_exec *e;
    REQUIRE(rt_exec_create(p, &e) == 0);
    float *x = calloc((size_t)(B * B), sizeof(float));
    float *gw = malloc(sizeof(float) * (size_t)(B * per));
    REQUIRE(x && gw);
    for (int64_t i = 0; i < B; i++) x[i * B + i] = 1.0f;
    rt_data d = {.x = x, .y = y->data, .y_dtype = cfg.label_dtype, .n = B};
    double loss;
    CHECK_RC(rt_exec_compute_grads(e, &d, B, &loss));
    CHECK_RC(rt_exec_get_grad(e, 0, gw));
    const float lw = *(const float *)want_l->data;
    char what[128];
    snprintf(what, sizeof what, "%s loss", cs);
    float lf = (float)loss;
    if (isnan(lw)) {
        if (!isnan(lf)) {
            fprintf(stderr, "%s: %g, torch NaN\n", what, (double)lf);
            rt_test_failures++;
        }
    } else {
        rt_test_failures += rt_fixture_compare(what, &lf, &lw, 1, 1e-6, 1e-5);
    }
    snprintf(what, sizeof what, "%s dloss/dz", cs);
    rt_test_failures += rt_fixture_compare(what, gw, want_g->data, (size_t)(B * per), 1e-6,
                                           1e-5);
    printf("%-16s %-22s loss %.7g (torch %.7g)\n", cs, rt_loss_name(kind), (double)lf,
           (double)lw);
    free(x);
    free(gw);
    rt_exec_destroy(e);
    rt_plan_release(p);
    rt_graph_destroy(g);
}

/* ---------------------------------------------------------------- fit */

enum { RAW, SOFTMAX, LOGSOFTMAX, SIGMOID, DENSE_SIGMOID, LOGSOFTMAX_RESHAPED };
static const char *const out_name[] = {"raw", "Softmax", "LogSoftmax", "Sigmoid",
                                       "Dense(sigmoid)", "LogSoftmax+Reshape"};

/* x (4) -> Dense(3) ending as kind; returns the compile's code, err filled */
static int compile_fit(int kind, rt_loss_kind loss, int from_logits, int check, char *err)
{
    rt_graph *g = rt_graph_create();
    int64_t in[] = {RT_BATCH, 4}, wd[] = {4, 3};
    REQUIRE(rt_graph_add_input(g, "x", RT_F32, 2, in) == 0);
    REQUIRE(rt_graph_add_param(g, "W", 2, wd, RT_INIT_GLOROT_UNIFORM, 1, NULL) == 0);
    const char *din[] = {"x", "W"}, *hin[] = {"h"}, *oin[] = {"o"};
    const rt_attr sig = {.name = "activation", .kind = RT_ATTR_STR, .s = "sigmoid"};
    REQUIRE(rt_graph_add_node(g, "h", "Dense", 2, din, kind == DENSE_SIGMOID, &sig) == 0);
    static const char *const ops[] = {NULL, "Softmax", "LogSoftmax", "Sigmoid", NULL,
                                      "LogSoftmax"};
    if (ops[kind]) REQUIRE(rt_graph_add_node(g, "o", ops[kind], 1, hin, 0, NULL) == 0);
    if (kind == LOGSOFTMAX_RESHAPED) {
        const int64_t sh[] = {3};
        const rt_attr rs = {.name = "shape", .kind = RT_ATTR_INTS, .n = 1, .ints = sh};
        REQUIRE(rt_graph_add_node(g, "r", "Reshape", 1, oin, 1, &rs) == 0);
    }
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = loss;
    cfg.from_logits = from_logits;
    cfg.loss_check = check;
    cfg.batch_size = 4;
    const int idx = loss == RT_LOSS_SPARSE_CE || loss == RT_LOSS_CROSS_ENTROPY ||
                    loss == RT_LOSS_NLL;
    cfg.label_dtype = idx ? RT_I32 : RT_F32;
    rt_plan *p = NULL;
    int rc = rt_plan_compile(g, &cfg, &p, NULL, err, 256);
    rt_plan_release(p);
    rt_graph_destroy(g);
    return rc;
}

/* fit: NULL when the loss fits that output, else the loss named as fitting */
static void check_fit(int kind, rt_loss_kind loss, int from_logits, const char *fit)
{
    char err[256] = "";
    int rc = compile_fit(kind, loss, from_logits, 1, err);
    /* the output node, and the node the output ends in when another */
    const char *node = kind == RAW || kind == DENSE_SIGMOID ? "node 'h'"
                       : kind == LOGSOFTMAX_RESHAPED        ? "node 'r'" : "node 'o'";
    const int ok = fit ? rc == RT_EINVAL && strstr(err, node) && strstr(err, fit) &&
                             strstr(err, rt_loss_name(loss)) &&
                             (kind != LOGSOFTMAX_RESHAPED || strstr(err, "LogSoftmax 'o'"))
                       : rc == 0;
    printf("%-20s %-32s%s %s\n", out_name[kind], rt_loss_name(loss),
           from_logits ? " (from_logits)" : "", fit ? "refused" : "compiles");
    if (!ok) {
        fprintf(stderr, "  want %s, got %d: %s\n", fit ? fit : "ok", rc, err);
        rt_test_failures++;
    }
    if (fit) {
        /* the override compiles it */
        rc = compile_fit(kind, loss, from_logits, 0, err);
        if (rc != 0) {
            fprintf(stderr, "  loss_check 0: %d %s\n", rc, err);
            rt_test_failures++;
        }
    }
}

int main(int argc, char **argv)
{
    rt_fixture_load(argc > 1 ? argv[1] : "tests/fixtures/torch_loss_ref.bin");
    static const struct { const char *name; rt_loss_kind kind; } cases[] = {
        {"ce", RT_LOSS_CROSS_ENTROPY}, {"ce_w_ls_ign", RT_LOSS_CROSS_ENTROPY},
        {"ce_sum_ls", RT_LOSS_CROSS_ENTROPY}, {"ce_prob", RT_LOSS_CROSS_ENTROPY},
        {"ce_prob_sum", RT_LOSS_CROSS_ENTROPY}, {"ce_ncd", RT_LOSS_CROSS_ENTROPY},
        {"ce_ncd_prob", RT_LOSS_CROSS_ENTROPY}, {"ce_all_ignored", RT_LOSS_CROSS_ENTROPY},
        {"nll", RT_LOSS_NLL}, {"nll_sum", RT_LOSS_NLL},
        {"bcel", RT_LOSS_BCE_LOGITS}, {"bcel_pw", RT_LOSS_BCE_LOGITS},
        {"bcel_pw1_sum", RT_LOSS_BCE_LOGITS}, {"bce", RT_LOSS_BCE_TORCH},
        {"bce_sum", RT_LOSS_BCE_TORCH}, {"mse", RT_LOSS_MSE_TORCH},
        {"mse_sum", RT_LOSS_MSE_TORCH}, {"l1", RT_LOSS_L1},
        {"smooth_l1", RT_LOSS_SMOOTH_L1}, {"smooth_l1_b0", RT_LOSS_SMOOTH_L1},
        {"huber", RT_LOSS_HUBER}, {"huber_sum", RT_LOSS_HUBER},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_case(cases[i].name, cases[i].kind);
    rt_fixture_free();

    /* probability losses */
    check_fit(SOFTMAX, RT_LOSS_SPARSE_CE, 0, NULL);
    check_fit(SIGMOID, RT_LOSS_SPARSE_CE, 0, NULL);
    check_fit(LOGSOFTMAX, RT_LOSS_SPARSE_CE, 0, "nll_loss");
    check_fit(LOGSOFTMAX_RESHAPED, RT_LOSS_SPARSE_CE, 0, "nll_loss");
    check_fit(RAW, RT_LOSS_SPARSE_CE, 0, "cross_entropy");
    check_fit(RAW, RT_LOSS_CE, 0, "from_logits");
    check_fit(DENSE_SIGMOID, RT_LOSS_BCE, 0, NULL);
    check_fit(RAW, RT_LOSS_BCE, 0, "bce_with_logits");
    check_fit(SIGMOID, RT_LOSS_BCE_TORCH, 0, NULL);
    check_fit(RAW, RT_LOSS_BCE_TORCH, 0, "bce_with_logits");
    check_fit(LOGSOFTMAX, RT_LOSS_NLL, 0, NULL);
    check_fit(LOGSOFTMAX_RESHAPED, RT_LOSS_NLL, 0, NULL);
    check_fit(RAW, RT_LOSS_NLL, 0, "cross_entropy");
    check_fit(SOFTMAX, RT_LOSS_NLL, 0, "sparse_categorical_crossentropy");
    /* logits losses */
    check_fit(RAW, RT_LOSS_SPARSE_CE, 1, NULL);
    check_fit(LOGSOFTMAX, RT_LOSS_SPARSE_CE, 1, NULL); /* log-probabilities are logits */
    check_fit(SOFTMAX, RT_LOSS_SPARSE_CE, 1, "without from_logits");
    check_fit(SIGMOID, RT_LOSS_BCE, 1, "without from_logits");
    check_fit(RAW, RT_LOSS_CROSS_ENTROPY, 0, NULL);
    check_fit(LOGSOFTMAX, RT_LOSS_CROSS_ENTROPY, 0, NULL);
    check_fit(SOFTMAX, RT_LOSS_CROSS_ENTROPY, 0, "sparse_categorical_crossentropy");
    check_fit(RAW, RT_LOSS_BCE_LOGITS, 0, NULL);
    check_fit(SIGMOID, RT_LOSS_BCE_LOGITS, 0, "binary_cross_entropy");
    check_fit(DENSE_SIGMOID, RT_LOSS_BCE_LOGITS, 0, "binary_cross_entropy");
    /* regression losses read anything */
    check_fit(SOFTMAX, RT_LOSS_MSE_TORCH, 0, NULL);
    check_fit(LOGSOFTMAX, RT_LOSS_HUBER, 0, NULL);
    check_fit(RAW, RT_LOSS_MSE, 0, NULL);
    return rt_test_done("test_torch_loss");
}
