/*
 * test_conv_fixture.c - the convolutional ops against PyTorch 1.13
 * (tests/conv/conv_ref.bin, written by tests/conv/gen_conv_fixture.py; torch
 * is not needed to run this test).
 *
 * The model: x (B,9,9,3) -> Conv2D(16,3x3,same,relu) -> MaxPool 2x2 (fused
 * into the convolution by the compiler) -> BatchNorm ->
 * Conv2D(8,3x3,stride 2,same: asymmetric padding) ->
 * Flatten -> Dense(5) logits, sparse CE. With the fixture's initial values:
 *   - the inference-mode output at init (BatchNorm on moving statistics);
 *   - the first batch's loss and every gradient (training mode);
 *   - 10 Adam steps over two batches in order: each step's loss, all
 *     weights and the BatchNorm moving statistics after every step;
 *   - the inference-mode output after training.
 *
 * Tolerances (f32 against f32; differences come from summation order):
 *   outputs, loss, gradients   |a - b| <= 2e-5 + 1e-4 |b|
 *   10-step trajectories       |a - b| <= 1e-4 + 1e-3 |b|
 *   moving statistics, step 1  |a - b| <= 1e-7 + 2e-6 |b|
 */
#include <stdint.h>

#include "../engine/rt_fixture.h"

typedef rt_ref_tensor ref_tensor;

static const ref_tensor *ref(const char *fmt, const char *a)
{
    char name[128];
    snprintf(name, sizeof name, fmt, a);
    return rt_fixture_find(name);
}

static int compare(const char *what, const float *got, const float *want, size_t n,
                   double atol, double rtol)
{
    int bad = rt_fixture_compare(what, got, want, n, atol, rtol);
    rt_test_failures += bad;
    return bad;
}

static const char *names[] = {"c1/kernel", "c1/bias", "bn/gamma", "bn/beta",
                              "c2/kernel", "c2/bias", "d/kernel", "d/bias",
                              "bn/moving_mean", "bn/moving_variance"};
enum { NP = 10, NTRAIN = 8 };

static rt_graph *build(void)
{
    rt_graph *g = rt_graph_create();
    int64_t in[] = {RT_BATCH, 9, 9, 3};
    int rc = rt_graph_add_input(g, "x", RT_F32, 4, in);
    const int64_t k1[] = {3, 3, 3, 16}, k2[] = {3, 3, 16, 8}, dk[] = {32, 5};
    const int64_t c16 = 16, c8 = 8, c5 = 5;
    const struct { int nd; const int64_t *d; int trainable; } sh[NP] = {
        {4, k1, 1}, {1, &c16, 1}, {1, &c16, 1}, {1, &c16, 1}, {4, k2, 1},
        {1, &c8, 1}, {2, dk, 1}, {1, &c5, 1}, {1, &c16, 0}, {1, &c16, 0}};
    for (int i = 0; i < NP; i++)
        rc |= rt_graph_add_param(g, names[i], sh[i].nd, sh[i].d, RT_INIT_DEFAULT,
                                 sh[i].trainable, ref("cnn/init/%s", names[i])->data);
    rt_attr c1a[2] = {{.name = "padding", .kind = RT_ATTR_STR, .s = "same"},
                      {.name = "activation", .kind = RT_ATTR_STR, .s = "relu"}};
    const char *c1i[] = {"x", "c1/kernel", "c1/bias"};
    rc |= rt_graph_add_node(g, "c1", "Conv2D", 3, c1i, 2, c1a);
    rt_attr bna[2] = {{.name = "momentum", .kind = RT_ATTR_FLOAT, .f = 0.99},
                      {.name = "epsilon", .kind = RT_ATTR_FLOAT, .f = 1e-3}};
    const char *pi[] = {"c1"};
    rc |= rt_graph_add_node(g, "pool", "MaxPool2D", 1, pi, 0, NULL);
    const char *bni[] = {"pool", "bn/gamma", "bn/beta", "bn/moving_mean", "bn/moving_variance"};
    rc |= rt_graph_add_node(g, "bn", "BatchNorm", 5, bni, 2, bna);
    int64_t st[2] = {2, 2};
    rt_attr c2a[2] = {{.name = "padding", .kind = RT_ATTR_STR, .s = "same"},
                      {.name = "strides", .kind = RT_ATTR_INTS, .n = 2, .ints = st}};
    const char *c2i[] = {"bn", "c2/kernel", "c2/bias"};
    rc |= rt_graph_add_node(g, "c2", "Conv2D", 3, c2i, 2, c2a);
    const char *fi[] = {"c2"};
    rc |= rt_graph_add_node(g, "flat", "Flatten", 1, fi, 0, NULL);
    const char *di[] = {"flat", "d/kernel", "d/bias"};
    rc |= rt_graph_add_node(g, "d", "Dense", 3, di, 0, NULL);
    rc |= rt_graph_set_output(g, "d");
    REQUIRE(rc == 0);
    return g;
}

/* the engine's parameter index of a name */
static int pidx(rt_plan *p, const char *name)
{
    for (int i = 0; i < rt_plan_n_params(p); i++) {
        const char *n;
        rt_plan_param_info(p, i, &n, NULL, NULL);
        if (!strcmp(n, name)) return i;
    }
    fprintf(stderr, "no parameter %s\n", name);
    exit(1);
}

int main(int argc, char **argv)
{
    rt_fixture_load(argc > 1 ? argv[1] : "tests/conv/conv_ref.bin");
    const float *x = ref("cnn/%s", "x")->data;
    const int32_t *y = ref("cnn/%s", "y")->data;
    rt_graph *g = build();
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_SPARSE_CE;
    cfg.from_logits = 1;
    cfg.opt = RT_OPT_ADAM;
    cfg.lr = 0.01f;
    cfg.eps = 1e-7f;
    cfg.batch_size = 8;
    cfg.shuffle = 0;
    cfg.seed = 1;
    rt_plan *p;
    char err[256];
    if (rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err) < 0) {
        fprintf(stderr, "compile: %s\n", err);
        return 1;
    }
    rt_data d = {.x = x, .y = y, .y_dtype = RT_I32, .n = 16};
    float buf[16 * 5], g_[2048];

    /* inference at init, then the first batch's gradients */
    rt_exec *e;
    REQUIRE(rt_exec_create(p, &e) == 0);
    CHECK_RC(rt_exec_predict(e, x, 16, buf));
    compare("eval0", buf, ref("cnn/%s", "eval0")->data, 16 * 5, 2e-5, 1e-4);
    double loss;
    CHECK_RC(rt_exec_compute_grads(e, &d, 8, &loss));
    float l0 = (float)loss;
    compare("loss0", &l0, ref("cnn/%s", "loss0")->data, 1, 2e-5, 1e-4);
    for (int i = 0; i < NTRAIN; i++) {
        const ref_tensor *r = ref("cnn/grad0/%s", names[i]);
        REQUIRE(r->count <= 2048);
        rt_exec_get_grad(e, pidx(p, names[i]), g_);
        char what[96];
        snprintf(what, sizeof what, "grad0 %s", names[i]);
        compare(what, g_, r->data, r->count, 2e-5, 1e-4);
    }
    rt_exec_destroy(e);

    /* 10 steps, one call each, with the weights after every step */
    REQUIRE(rt_exec_create(p, &e) == 0);
    const float *losses = ref("cnn/%s", "losses")->data;
    for (int s = 0; s < 10; s++) {
        rt_train_result res;
        float sl;
        CHECK_RC(rt_exec_train(e, &d, 1, &res, NULL, NULL, &sl));
        char what[96];
        snprintf(what, sizeof what, "step %d loss", s + 1);
        compare(what, &sl, &losses[s], 1, 1e-4, 1e-3);
        for (int i = 0; i < NP; i++) {
            const ref_tensor *r = ref("cnn/traj/%s", names[i]);
            const size_t per = r->count / 10;
            rt_exec_get_param(e, pidx(p, names[i]), g_);
            snprintf(what, sizeof what, "step %d %s", s + 1, names[i]);
            /* after the first step the moving statistics come from the
             * initial weights alone: checked tightly, so that a biased vs
             * unbiased variance (a factor 128/127 here) shows */
            const int tight = s == 0 && i >= NTRAIN;
            compare(what, g_, (const float *)r->data + (size_t)s * per, per,
                    tight ? 1e-7 : 1e-4, tight ? 2e-6 : 1e-3);
        }
    }
    CHECK_RC(rt_exec_predict(e, x, 16, buf));
    compare("eval10", buf, ref("cnn/%s", "eval10")->data, 16 * 5, 1e-4, 1e-3);
    rt_exec_destroy(e);
    rt_plan_release(p);
    rt_graph_destroy(g);
    rt_fixture_free();
    return rt_test_done("test_conv_fixture");
}
