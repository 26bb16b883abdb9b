/*
 * test_conv_digits.c - W-D: sklearn's digits (8x8, 1,797 images, committed
 * as tests/conv/data/digits.csv.gz), stratified 80/20 split; Conv(16,3x3,
 * same, relu) -> Conv(32,3x3,same,relu) -> MaxPool 2x2 -> Flatten ->
 * Dense(64,relu) -> Dense(10); Adam lr 1e-3, batch 32, 10 epochs. The
 * test accuracy must reach 0.95 (PyTorch gets ~0.96-0.97 on this split).
 * Pixels are standardised and the ReLU layers start from he_uniform
 * (conv_models.h says why). The seed is fixed (1) and the run
 * deterministic; across seeds 1..6 the accuracy lands in 0.958-0.972 (so
 * the margin over 0.95 is several test images); argv[2] picks another
 * seed to look at that spread.
 *
 * Also: evaluation is deterministic (twice the same metrics), a second
 * exec with the same seed ends bit-identical, and the training loss falls.
 */
#include "../engine/rt_test.h"
#include "conv_models.h"

static rt_plan *compile_wd(uint64_t seed)
{
    rt_graph *g = rt_conv_wd_graph();
    REQUIRE(g);
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_SPARSE_CE;
    cfg.from_logits = 1;
    cfg.opt = RT_OPT_ADAM;
    cfg.lr = 1e-3f;
    cfg.batch_size = 32;
    cfg.seed = seed;
    rt_plan *p;
    char err[256];
    int rc = rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err);
    if (rc < 0) fprintf(stderr, "compile: %s\n", err);
    REQUIRE(rc == 0);
    rt_graph_destroy(g);
    return p;
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "tests/conv/data/digits.csv.gz";
    rt_conv_digits dg;
    REQUIRE(rt_conv_load_digits(path, &dg) == 0);
    REQUIRE(dg.ntr + dg.nte == 1797 && dg.nte == 359);
    rt_conv_standardize_digits(&dg);
    rt_data tr = {.x = dg.xtr, .y = dg.ytr, .y_dtype = RT_I32, .n = dg.ntr};
    rt_data te = {.x = dg.xte, .y = dg.yte, .y_dtype = RT_I32, .n = dg.nte};
    const int64_t steps = 10 * ((dg.ntr + 31) / 32);

    rt_plan *p = compile_wd(argc > 2 ? strtoull(argv[2], NULL, 10) : 1);
    rt_exec *e, *e2;
    REQUIRE(rt_exec_create(p, &e) == 0);
    REQUIRE(rt_exec_create(p, &e2) == 0);
    rt_metrics m0, m1, m2;
    CHECK_RC(rt_exec_evaluate(e, &tr, &m0));
    rt_train_result r;
    CHECK_RC(rt_exec_train(e, &tr, steps, &r, NULL, NULL, NULL));
    CHECK(r.steps_run == steps);
    CHECK_RC(rt_exec_evaluate(e, &tr, &m1));
    CHECK(m1.loss < m0.loss * 0.2);
    CHECK_RC(rt_exec_evaluate(e, &te, &m1));
    CHECK_RC(rt_exec_evaluate(e, &te, &m2));
    CHECK(m1.loss == m2.loss && m1.acc == m2.acc);
    printf("W-D: %lld steps, train loss %.4f, test loss %.4f, test accuracy %.4f (%.2f s)\n",
           (long long)steps, r.mean.loss, m1.loss, m1.acc, (double)r.execute_ns * 1e-9);
    CHECK(m1.acc >= 0.95);

    /* same seed, same plan: bit-identical weights */
    CHECK_RC(rt_exec_train(e2, &tr, steps, &r, NULL, NULL, NULL));
    for (int i = 0; i < rt_plan_n_params(p); i++) {
        int64_t dims[RT_MAX_DIMS];
        int nd = rt_plan_param_info(p, i, NULL, dims, NULL);
        int64_t n = 1;
        for (int k = 0; k < nd; k++) n *= dims[k];
        float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
        rt_exec_get_param(e, i, a);
        rt_exec_get_param(e2, i, b);
        CHECK(memcmp(a, b, sizeof(float) * (size_t)n) == 0);
        free(a);
        free(b);
    }
    rt_exec_destroy(e);
    rt_exec_destroy(e2);
    rt_plan_release(p);
    rt_conv_free_digits(&dg);
    return rt_test_done("test_conv_digits");
}
