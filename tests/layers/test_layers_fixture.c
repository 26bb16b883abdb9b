/*
 * test_layers_fixture.c - the new ops against PyTorch (float64) reference
 * values written by gen_layers_fixture.py: for each case the forward
 * output, the loss and every gradient (the op's parameters, and the input
 * gradient summed over the batch through a zero parameter P). Then the
 * structure of the train-time noise layers: a SpatialDropout mask is one
 * decision per (sample, channel), GaussianDropout keeps the mean and has
 * the variance rate / (1 - rate), and all of them are the identity in
 * inference. Last, a grouped convolution and a ConvTranspose large enough
 * to run on threads give the gradients of a serial run (the threads split
 * the samples).
 *
 * Tolerance: 1e-4 + 1e-3 |ref| on values, 1e-5 + 2e-3 |ref| on gradients
 * (float32 against float64).
 */
#include <stdint.h>

#include <omp.h>

#include "../engine/rt_fixture.h"

static rt_graph *g;

static rt_attr ints(const char *name, int n, const int64_t *v)
{
    return (rt_attr){.name = name, .kind = RT_ATTR_INTS, .n = n, .ints = v};
}
static rt_attr str(const char *name, const char *s)
{
    return (rt_attr){.name = name, .kind = RT_ATTR_STR, .s = s};
}
static rt_attr flt(const char *name, double f)
{
    return (rt_attr){.name = name, .kind = RT_ATTR_FLOAT, .f = f};
}
static rt_attr int1(const char *name, int64_t i)
{
    return (rt_attr){.name = name, .kind = RT_ATTR_INT, .i = i};
}

typedef struct tcase {
    const char *name, *op;
    int n_attr;
    rt_attr at[4];
    int n_p;
    const char *p[2];
    int tanh_after;
    int swap; /* the parameter is the op's first input */
} tcase;

static int64_t numel(const rt_ref_tensor *t)
{
    return (int64_t)t->count;
}

static void run_case(const tcase *c)
{
    char nm[64];
    int fails = rt_test_failures;
    snprintf(nm, sizeof nm, "%s/x", c->name);
    const rt_ref_tensor *x = rt_fixture_find(nm);
    g = rt_graph_create();
    int64_t d[RT_MAX_DIMS] = {RT_BATCH}, pd[RT_MAX_DIMS];
    const int nd = (int)x->ndim - 1;
    for (int i = 0; i < nd; i++) pd[i] = d[i + 1] = x->dims[i + 1];
    const int64_t B = x->dims[0];
    REQUIRE(rt_graph_add_input(g, "x", RT_F32, nd + 1, d) == 0);
    REQUIRE(rt_graph_add_param(g, "P", nd, pd, RT_INIT_ZEROS, 1, NULL) == 0);
    const char *in2[2] = {"x", "P"};
    REQUIRE(rt_graph_add_node(g, "h", "Add", 2, in2, 0, NULL) == 0);
    const char *in[3] = {"h", c->p[0], c->p[1]};
    if (c->swap) {
        in[0] = c->p[0];
        in[1] = "h";
    }
    for (int i = 0; i < c->n_p; i++) {
        snprintf(nm, sizeof nm, "%s/p/%s", c->name, c->p[i]);
        const rt_ref_tensor *t = rt_fixture_find(nm);
        int64_t td[4];
        for (unsigned k = 0; k < t->ndim; k++) td[k] = t->dims[k];
        REQUIRE(rt_graph_add_param(g, c->p[i], (int)t->ndim, td, RT_INIT_ZEROS, 1, t->data) == 0);
    }
    if (rt_graph_add_node(g, "op", c->op, 1 + c->n_p, in, c->n_attr, c->at) != 0) {
        fprintf(stderr, "%s: %s\n", c->name, rt_graph_errmsg(g));
        exit(1);
    }
    const char *last = "op";
    if (c->tanh_after) {
        REQUIRE(rt_graph_add_node(g, "t", "Tanh", 1, &last, 0, NULL) == 0);
        last = "t";
    }
    REQUIRE(rt_graph_add_node(g, "flat", "Flatten", 1, &last, 0, NULL) == 0);
    snprintf(nm, sizeof nm, "%s/t", c->name);
    const rt_ref_tensor *t = rt_fixture_find(nm);
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_MSE;
    cfg.batch_size = B;
    cfg.label_dtype = RT_F32;
    cfg.label_ndim = 1;
    cfg.label_dims[0] = t->dims[1];
    cfg.metrics = 0;
    rt_plan *p;
    char err[256];
    if (rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err) < 0) {
        fprintf(stderr, "%s: compile: %s\n", c->name, err);
        exit(1);
    }
    rt_exec *e;
    REQUIRE(rt_exec_create(p, &e) == 0);
    /* forward output */
    snprintf(nm, sizeof nm, "%s/y", c->name);
    const rt_ref_tensor *y = rt_fixture_find(nm);
    REQUIRE(numel(y) == B * (int64_t)t->dims[1]);
    float *out = malloc(sizeof(float) * (size_t)numel(y));
    REQUIRE(out);
    CHECK_RC(rt_exec_predict(e, x->data, B, out));
    snprintf(nm, sizeof nm, "%s forward", c->name);
    if (rt_fixture_compare(nm, out, y->data, (size_t)numel(y), 1e-4, 1e-3)) rt_test_failures++;
    free(out);
    /* loss and gradients */
    rt_data dd = {.x = x->data, .y = t->data, .y_dtype = RT_F32, .n = B};
    double loss;
    CHECK_RC(rt_exec_compute_grads(e, &dd, B, &loss));
    snprintf(nm, sizeof nm, "%s/loss", c->name);
    const float want = *(const float *)rt_fixture_find(nm)->data;
    if (fabs(loss - want) > 1e-5 + 1e-4 * fabs(want)) {
        fprintf(stderr, "%s: loss %.8g, torch %.8g\n", c->name, loss, (double)want);
        rt_test_failures++;
    }
    for (int pi = 0; pi < rt_plan_n_params(p); pi++) {
        const char *pname;
        int64_t pdims[RT_MAX_DIMS];
        int pnd = rt_plan_param_info(p, pi, &pname, pdims, NULL);
        int64_t n = 1;
        for (int k = 0; k < pnd; k++) n *= pdims[k];
        snprintf(nm, sizeof nm, "%s/g/%s", c->name, pname);
        const rt_ref_tensor *gr = rt_fixture_find(nm);
        REQUIRE(numel(gr) == n);
        float *gv = malloc(sizeof(float) * (size_t)n);
        REQUIRE(gv);
        rt_exec_get_grad(e, pi, gv);
        snprintf(nm, sizeof nm, "%s d%s", c->name, pname);
        if (rt_fixture_compare(nm, gv, gr->data, (size_t)n, 1e-5, 2e-3)) rt_test_failures++;
        free(gv);
    }
    printf("%-16s %-20s %s\n", c->name, c->op, rt_test_failures == fails ? "ok" : "FAILED");
    rt_exec_destroy(e);
    rt_plan_release(p);
    rt_graph_destroy(g);
}

/* The noise layers' structure, at a large enough size for the moments. */
static void noise_checks(void)
{
    const int64_t H = 16, W = 16, C = 8, Bn = 4;
    const int64_t per = H * W * C;
    const char *ops[3] = {"SpatialDropout", "GaussianDropout", "GaussianNoise"};
    for (int k = 0; k < 3; k++) {
        g = rt_graph_create();
        int64_t d[4] = {RT_BATCH, H, W, C};
        REQUIRE(rt_graph_add_input(g, "x", RT_F32, 4, d) == 0);
        int64_t pd[1] = {C};
        REQUIRE(rt_graph_add_param(g, "b", 1, pd, RT_INIT_ZEROS, 1, NULL) == 0);
        const char *in[2] = {"x", "b"};
        REQUIRE(rt_graph_add_node(g, "h", "Add", 2, in, 0, NULL) == 0);
        rt_attr a = k == 2 ? flt("stddev", 0.5) : flt("rate", 0.3);
        const char *h = "h";
        REQUIRE(rt_graph_add_node(g, "n", ops[k], 1, &h, 1, &a) == 0);
        rt_train_config cfg;
        rt_train_config_init(&cfg);
        cfg.loss = RT_LOSS_MSE;
        cfg.batch_size = Bn;
        cfg.label_dtype = RT_F32;
        cfg.label_ndim = 3;
        cfg.label_dims[0] = H;
        cfg.label_dims[1] = W;
        cfg.label_dims[2] = C;
        cfg.metrics = 0;
        rt_plan *p;
        char err[256];
        if (rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err) < 0) {
            fprintf(stderr, "%s: %s\n", ops[k], err);
            exit(1);
        }
        rt_exec *e;
        REQUIRE(rt_exec_create(p, &e) == 0);
        float *x = malloc(sizeof(float) * (size_t)(Bn * per));
        float *lab = calloc((size_t)(Bn * per), sizeof(float));
        float *out = malloc(sizeof(float) * (size_t)(Bn * per));
        float *gb = malloc(sizeof(float) * (size_t)C);
        REQUIRE(x && lab && out && gb);
        for (int64_t i = 0; i < Bn * per; i++) x[i] = 1.0f;
        /* inference: identity */
        CHECK_RC(rt_exec_predict(e, x, Bn, out));
        int ident = 1;
        for (int64_t i = 0; i < Bn * per; i++) ident &= out[i] == 1.0f;
        CHECK(ident);
        /* training, labels 0: L = mean(y^2), y = factor * 1 */
        rt_data dd = {.x = x, .y = lab, .y_dtype = RT_F32, .n = Bn};
        double loss;
        CHECK_RC(rt_exec_compute_grads(e, &dd, Bn, &loss));
        rt_exec_get_grad(e, 0, gb);
        /* E[y^2] for y = factor * 1: dropout 1/(1-r); gaussian dropout
         * 1 + r/(1-r) = 1/(1-r); noise 1 + s^2 */
        const double want = k == 2 ? 1.25 : 1.0 / 0.7;
        if (k != 0 && fabs(loss - want) > 0.08) {
            fprintf(stderr, "%s: E[y^2] %.4f, expected %.4f\n", ops[k], loss, want);
            rt_test_failures++;
        }
        if (k == 0) {
            /* One decision per (sample, channel): Bn * C = 32 of them. A kept
             * channel's cells are all 1 / 0.7, a dropped one's all 0, so
             * mean(y^2) = K / (32 * 0.49) for K kept: a whole K, and some
             * kept and some dropped (at rate 0.3, K in 32 draws is 22.4
             * +- 2.6; a no-op dropout keeps all 32 and fails). */
            const double kk = loss * 32 * 0.49;
            const long K = lround(kk);
            if (fabs(kk - (double)K) > 1e-3 || K < 14 || K > 30) {
                fprintf(stderr, "%s: E[y^2] %.6f: %.4f channels of 32 kept, expected a whole "
                        "number in 14..30\n", ops[k], loss, kk);
                rt_test_failures++;
            }
            /* dL/db[c] = sum 2 y f / N over (sample, cell); with one mask
             * per (sample, channel) it is (2 / N) * per-channel count of
             * kept samples * H*W * scale^2: a multiple of 2*H*W/(N*0.49),
             * the per-channel counts summing to K */
            const double unit = 2.0 * (double)(H * W) / ((double)(Bn * per) * 0.49);
            int whole = 1;
            long sum = 0;
            for (int64_t c = 0; c < C; c++) {
                double m = gb[c] / unit;
                whole &= fabs(m - floor(m + 0.5)) < 1e-3 && m > -0.5 && m < Bn + 0.5;
                sum += lround(m);
            }
            CHECK(whole);
            CHECK(sum == K);
        }
        printf("%-16s %-20s %s\n", "noise", ops[k], "checked");
        free(x);
        free(lab);
        free(out);
        free(gb);
        rt_exec_destroy(e);
        rt_plan_release(p);
        rt_graph_destroy(g);
    }
}

/* the input gradient (through P), dW and db of a depthwise Conv2D (x 2;
 * convt 0) or a ConvTranspose (3x3, stride 2, same; convt 1) at t threads */
static void gconv_grads(int convt, int t, float *out, int64_t nout)
{
    const int64_t Bn = 8, H = convt ? 16 : 32, W = H, C = convt ? 8 : 16, M = convt ? 1 : 2;
    omp_set_num_threads(t);
    g = rt_graph_create();
    int64_t d[4] = {RT_BATCH, H, W, C}, pd[3] = {H, W, C}, kd[4] = {3, 3, 1, C * M}, bd = C * M;
    if (convt) kd[2] = C;
    REQUIRE(rt_graph_add_input(g, "x", RT_F32, 4, d) == 0);
    REQUIRE(rt_graph_add_param(g, "P", 3, pd, RT_INIT_ZEROS, 1, NULL) == 0);
    REQUIRE(rt_graph_add_param(g, "w", 4, kd, RT_INIT_GLOROT_UNIFORM, 1, NULL) == 0);
    REQUIRE(rt_graph_add_param(g, "b", 1, &bd, RT_INIT_GLOROT_UNIFORM, 1, NULL) == 0);
    const char *in2[2] = {"x", "P"}, *in3[3] = {"h", "w", "b"}, *f = "c";
    REQUIRE(rt_graph_add_node(g, "h", "Add", 2, in2, 0, NULL) == 0);
    static const int64_t two[2] = {2, 2};
    rt_attr at[3] = {int1("group", C), str("padding", "same"), str("activation", "tanh")};
    rt_attr att[2] = {str("padding", "same"), ints("strides", 2, two)};
    if (convt) REQUIRE(rt_graph_add_node(g, "c", "ConvTranspose", 3, in3, 2, att) == 0);
    else REQUIRE(rt_graph_add_node(g, "c", "Conv2D", 3, in3, 3, at) == 0);
    REQUIRE(rt_graph_add_node(g, "flat", "Flatten", 1, &f, 0, NULL) == 0);
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_MSE;
    cfg.batch_size = Bn;
    cfg.label_dtype = RT_F32;
    cfg.label_ndim = 1;
    cfg.label_dims[0] = convt ? 4 * H * W * C : H * W * C * M;
    cfg.metrics = 0;
    rt_plan *p;
    char err[256];
    REQUIRE(rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err) == 0);
    rt_exec *e;
    REQUIRE(rt_exec_create(p, &e) == 0);
    const int64_t nx = Bn * H * W * C, ny = Bn * cfg.label_dims[0];
    float *x = malloc(sizeof(float) * (size_t)nx), *y = malloc(sizeof(float) * (size_t)ny);
    REQUIRE(x && y);
    for (int64_t i = 0; i < nx; i++) x[i] = (float)((i * 7919) % 101) / 50.0f - 1.0f;
    for (int64_t i = 0; i < ny; i++) y[i] = (float)((i * 104729) % 97) / 48.0f - 1.0f;
    rt_data dd = {.x = x, .y = y, .y_dtype = RT_F32, .n = Bn};
    double loss;
    CHECK_RC(rt_exec_compute_grads(e, &dd, Bn, &loss));
    int64_t o = 0;
    for (int pi = 0; pi < 3; pi++) {
        int64_t dims[RT_MAX_DIMS], n = 1;
        int nd = rt_plan_param_info(p, pi, NULL, dims, NULL);
        for (int k = 0; k < nd; k++) n *= dims[k];
        REQUIRE(o + n <= nout);
        rt_exec_get_grad(e, pi, out + o);
        o += n;
    }
    free(x);
    free(y);
    rt_exec_destroy(e);
    rt_plan_release(p);
    rt_graph_destroy(g);
}

static void threads_check(void)
{
    const int64_t n = 32 * 32 * 16 + 9 * 32 + 32;
    float *g1 = malloc(sizeof(float) * (size_t)n), *g2 = malloc(sizeof(float) * (size_t)n);
    REQUIRE(g1 && g2);
    const int max = omp_get_max_threads();
    for (int convt = 0; convt < 2; convt++) {
        const int64_t m = convt ? 16 * 16 * 8 + 9 * 64 + 8 : n;
        gconv_grads(convt, 1, g1, m);
        gconv_grads(convt, max > 1 ? max : 2, g2, m);
        omp_set_num_threads(max);
        const char *what = convt ? "ConvTranspose" : "Conv2D (grouped)";
        if (rt_fixture_compare(what, g2, g1, (size_t)m, 1e-6, 1e-4)) rt_test_failures++;
        printf("%-16s %-20s %s\n", "threads", what, "checked");
    }
    free(g1);
    free(g2);
}

int main(int argc, char **argv)
{
    REQUIRE(argc == 2);
    rt_fixture_load(argv[1]);
    static const int64_t two[2] = {2, 2}, one[2] = {1, 1}, d21[2] = {2, 1}, op10[2] = {1, 0};
    static const int64_t pad[8] = {0, 1, 0, 2, 0, 2, 1, 0}, crop[8] = {0, -1, 0, 0, 0, 0, -2, 1};
    static const int64_t perm[4] = {0, 3, 1, 2}, ax12[2] = {1, 2}, ax2[1] = {2};
    static const int64_t sc[2] = {2, 3};
    const tcase cases[] = {
        {"elu", "Elu", 1, {flt("alpha", 0.7)}, 0, {0}, 0},
        {"selu", "Selu", 0, {{0}}, 0, {0}, 0},
        {"leakyrelu", "LeakyRelu", 1, {flt("alpha", 0.3)}, 0, {0}, 0},
        {"gelu", "Gelu", 0, {{0}}, 0, {0}, 0},
        {"gelu_tanh", "Gelu", 1, {str("approximate", "tanh")}, 0, {0}, 0},
        {"erf", "Erf", 0, {{0}}, 0, {0}, 0},
        {"softplus", "Softplus", 0, {{0}}, 0, {0}, 0},
        {"softsign", "Softsign", 0, {{0}}, 0, {0}, 0},
        {"hardsigmoid", "HardSigmoid", 0, {{0}}, 0, {0}, 0},
        {"swish", "Swish", 0, {{0}}, 0, {0}, 0},
        {"clip", "Clip", 2, {flt("min", 0), flt("max", 1.5)}, 0, {0}, 0},
        {"thresholdedrelu", "ThresholdedRelu", 1, {flt("alpha", 0.4)}, 0, {0}, 0},
        {"kerasrelu", "KerasRelu", 3,
         {flt("negative_slope", 0.2), flt("threshold", 0.5), flt("max_value", 2)}, 0, {0}, 0},
        {"exp", "Exp", 0, {{0}}, 0, {0}, 0},
        {"mish", "Mish", 0, {{0}}, 0, {0}, 0},
        {"hardswish", "HardSwish", 0, {{0}}, 0, {0}, 0},
        {"logsigmoid", "LogSigmoid", 0, {{0}}, 0, {0}, 0},
        {"div", "Div", 0, {{0}}, 1, {"q"}, 0},
        {"max", "Max", 0, {{0}}, 1, {"q"}, 0},
        {"min", "Min", 0, {{0}}, 1, {"q"}, 0, 1},
        {"prelu", "PRelu", 0, {{0}}, 1, {"a"}, 0},
        {"pad", "Pad", 2, {ints("pads", 8, pad), flt("value", 0.5)}, 0, {0}, 0},
        {"crop", "Pad", 1, {ints("pads", 8, crop)}, 0, {0}, 0},
        {"transpose", "Transpose", 1, {ints("perm", 4, perm)}, 0, {0}, 0},
        {"reducemean", "ReduceMean", 1, {ints("axes", 2, ax12)}, 0, {0}, 0},
        {"reducesum", "ReduceSum", 2, {ints("axes", 1, ax2), int1("keepdims", 0)}, 0, {0}, 0},
        {"up_nearest", "Upsample", 1, {ints("scales", 2, sc)}, 0, {0}, 0},
        {"up_bilinear", "Upsample", 2, {ints("scales", 2, sc), str("mode", "bilinear")}, 0,
         {0}, 0},
        {"gmp", "GlobalMaxPool", 0, {{0}}, 0, {0}, 0},
        {"layernorm", "LayerNormalization", 1, {flt("epsilon", 1e-3)}, 2, {"gamma", "beta"}, 0},
        {"depthwise", "Conv2D", 2, {int1("group", 3), str("padding", "same")}, 2, {"w", "b"}, 0},
        {"grouped", "Conv2D", 3, {int1("group", 2), str("padding", "same"), ints("strides", 2, two)},
         1, {"w"}, 1},
        {"dilated", "Conv2D", 1, {ints("dilations", 2, d21)}, 1, {"w"}, 0},
        {"convt_same", "ConvTranspose", 2, {ints("strides", 2, two), str("padding", "same")}, 2,
         {"w", "b"}, 0},
        {"convt_valid", "ConvTranspose", 2, {ints("strides", 2, two), ints("dilations", 2, one)},
         1, {"w"}, 0},
        {"convt_outpad", "ConvTranspose", 3,
         {ints("strides", 2, two), str("padding", "same"), ints("output_padding", 2, op10)}, 1,
         {"w"}, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
    noise_checks();
    threads_check();
    rt_fixture_free();
    return rt_test_done("test_layers_fixture");
}
