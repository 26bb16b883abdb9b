/*
 * test_weights.c - per-sample loss weights, the learning-rate override and
 * carrying training state between programs of different batch sizes.
 *
 * Weights: for every loss kind, the weighted batch loss and gradients
 * (rt_data.sw) must equal sum_i w_i * (loss, gradient of sample i alone) /
 * n, Keras' SUM_OVER_BATCH_SIZE, with the per-sample values from
 * unweighted rt_exec_compute_grads over that one sample; all-ones weights
 * must equal no weights.
 * Learning rate: rt_exec_set_lr from step 0 trains bit-identically to a
 * plan compiled with that rate; 0 goes back to the schedule; bad rates are
 * refused. State: a program at batch 2 that takes a batch-4 program's
 * state continues exactly as the batch-4 program's replay with the same
 * Adam moments.
 */
#include <stdint.h>

#include "rt_test.h"

#define NI 5
#define NC 3
#define NS 8

static float X[NS * NI];

static rt_plan *build(rt_loss_kind loss, const char *act, int batch, rt_opt_kind opt,
                      float lr)
{
    rt_graph *g = rt_graph_create();
    int64_t in[] = {RT_BATCH, NI}, dw[] = {NI, NC}, db[] = {NC};
    float w0[NI * NC], b0[NC];
    for (int i = 0; i < NI * NC; i++) w0[i] = 0.3f * sinf(1.7f * (float)i + 0.4f);
    for (int i = 0; i < NC; i++) b0[i] = 0.05f * (float)(i - 1);
    REQUIRE(rt_graph_add_input(g, "x", RT_F32, 2, in) == 0);
    REQUIRE(rt_graph_add_param(g, "w", 2, dw, RT_INIT_ZEROS, 1, w0) == 0);
    REQUIRE(rt_graph_add_param(g, "b", 1, db, RT_INIT_ZEROS, 1, b0) == 0);
    const char *ins[] = {"x", "w", "b"};
    REQUIRE(rt_graph_add_node(g, act ? "z" : "y", "Dense", 3, ins, 0, NULL) == 0);
    if (act) {
        const char *a[] = {"z"};
        REQUIRE(rt_graph_add_node(g, "y", act, 1, a, 0, NULL) == 0);
    }
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = loss;
    cfg.opt = opt;
    cfg.lr = lr;
    cfg.batch_size = batch;
    cfg.shuffle = 0;
    cfg.label_dtype = loss == RT_LOSS_SPARSE_CE ? RT_I32 : RT_F32;
    cfg.label_ndim = loss == RT_LOSS_SPARSE_CE ? 0 : 1;
    cfg.label_dims[0] = NC;
    rt_plan *p;
    char err[256];
    int rc = rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err);
    if (rc) fprintf(stderr, "%s\n", err);
    REQUIRE(rc == 0);
    rt_graph_destroy(g);
    return p;
}

static int close_to(double a, double b) { return fabs(a - b) <= 1e-6 + 2e-5 * fabs(b); }

static void check_weighted(const char *name, rt_loss_kind loss, const char *act)
{
    rt_plan *p = build(loss, act, NS, RT_OPT_SGD, 0.1f);
    rt_exec *e;
    REQUIRE(rt_exec_create(p, &e) == 0);
    union { int32_t i[NS]; float f[NS * NC]; } y;
    for (int s = 0; s < NS; s++) {
        if (loss == RT_LOSS_SPARSE_CE) {
            y.i[s] = (s * 7 + 1) % NC;
            continue;
        }
        for (int j = 0; j < NC; j++) {
            float v = loss == RT_LOSS_CE ? (float)(j == (s + 2) % NC)
                      : loss == RT_LOSS_BCE ? (float)((s + j) % 2)
                                            : cosf((float)(s * NC + j));
            y.f[s * NC + j] = v;
        }
    }
    const size_t lsz = loss == RT_LOSS_SPARSE_CE ? 4 : 4 * NC;
    float sw[NS], ones[NS];
    for (int s = 0; s < NS; s++) {
        sw[s] = 0.25f * (float)s + (s == 3 ? 0.0f : 0.5f);
        ones[s] = 1.0f;
    }
    /* per-sample values, unweighted */
    double li[NS], ref_loss = 0;
    float gw[NS][NI * NC], gb[NS][NC];
    for (int s = 0; s < NS; s++) {
        rt_data d1 = {.x = X + s * NI, .y = (const char *)&y + s * lsz,
                      .y_dtype = loss == RT_LOSS_SPARSE_CE ? RT_I32 : RT_F32, .n = 1};
        CHECK_RC(rt_exec_compute_grads(e, &d1, 1, &li[s]));
        CHECK_RC(rt_exec_get_grad(e, 0, gw[s]));
        CHECK_RC(rt_exec_get_grad(e, 1, gb[s]));
        ref_loss += (double)sw[s] * li[s] / NS;
    }
    rt_data d = {.x = X, .y = &y, .y_dtype = loss == RT_LOSS_SPARSE_CE ? RT_I32 : RT_F32,
                 .n = NS, .sw = sw};
    double l;
    CHECK_RC(rt_exec_compute_grads(e, &d, NS, &l));
    int bad = !close_to(l, ref_loss);
    float g[NI * NC];
    CHECK_RC(rt_exec_get_grad(e, 0, g));
    for (int k = 0; k < NI * NC; k++) {
        double r = 0;
        for (int s = 0; s < NS; s++) r += (double)sw[s] * gw[s][k] / NS;
        bad |= !close_to(g[k], r);
    }
    CHECK_RC(rt_exec_get_grad(e, 1, g));
    for (int k = 0; k < NC; k++) {
        double r = 0;
        for (int s = 0; s < NS; s++) r += (double)sw[s] * gb[s][k] / NS;
        bad |= !close_to(g[k], r);
    }
    /* all-ones weights are the unweighted batch */
    double lu, l1;
    float gu[NI * NC], g1[NI * NC];
    d.sw = NULL;
    CHECK_RC(rt_exec_compute_grads(e, &d, NS, &lu));
    CHECK_RC(rt_exec_get_grad(e, 0, gu));
    d.sw = ones;
    CHECK_RC(rt_exec_compute_grads(e, &d, NS, &l1));
    CHECK_RC(rt_exec_get_grad(e, 0, g1));
    bad |= !close_to(l1, lu);
    for (int k = 0; k < NI * NC; k++) bad |= !close_to(g1[k], gu[k]);
    /* a weighted evaluation is the same weighted mean */
    rt_metrics m;
    d.sw = sw;
    CHECK_RC(rt_exec_evaluate(e, &d, &m));
    bad |= !close_to(m.loss, ref_loss);
    /* a negative weight is bad data */
    float neg[NS];
    memcpy(neg, sw, sizeof neg);
    neg[2] = -1.0f;
    d.sw = neg;
    bad |= rt_exec_check_data(e, &d) != RT_EDATA;
    printf("%-34s loss %.6f (unweighted %.6f) %s\n", name, l, lu, bad ? "FAILED" : "ok");
    rt_test_failures += bad;
    rt_exec_destroy(e);
    rt_plan_release(p);
}

static int same_weights(rt_exec *a, rt_exec *b)
{
    float wa[NI * NC], wb[NI * NC];
    CHECK_RC(rt_exec_get_param(a, 0, wa));
    CHECK_RC(rt_exec_get_param(b, 0, wb));
    return memcmp(wa, wb, sizeof wa) == 0;
}

static void check_lr(void)
{
    int32_t y[NS];
    for (int s = 0; s < NS; s++) y[s] = s % NC;
    rt_data d = {.x = X, .y = y, .y_dtype = RT_I32, .n = NS};
    rt_plan *pa = build(RT_LOSS_SPARSE_CE, "Softmax", 4, RT_OPT_ADAM, 0.001f);
    rt_plan *pb = build(RT_LOSS_SPARSE_CE, "Softmax", 4, RT_OPT_ADAM, 0.03f);
    rt_exec *a, *b;
    REQUIRE(rt_exec_create(pa, &a) == 0 && rt_exec_create(pb, &b) == 0);
    CHECK(rt_exec_lr(a) == 0.001f);
    CHECK_RC(rt_exec_set_lr(a, 0.03f));
    CHECK(rt_exec_lr(a) == 0.03f);
    CHECK_RC(rt_exec_train(a, &d, 5, NULL, NULL, NULL, NULL));
    CHECK_RC(rt_exec_train(b, &d, 5, NULL, NULL, NULL, NULL));
    CHECK(same_weights(a, b));
    CHECK(rt_exec_set_lr(a, -1.0f) == RT_EINVAL);
    CHECK(rt_exec_set_lr(a, INFINITY) == RT_EINVAL);
    CHECK(rt_exec_set_lr(a, NAN) == RT_EINVAL);
    CHECK(rt_exec_lr(a) == 0.03f);
    CHECK_RC(rt_exec_set_lr(a, 0.0f));
    CHECK(rt_exec_lr(a) == 0.001f);
    /* the rate changes at a step boundary and the moments stay: after one
     * more step at the same rate both still agree */
    CHECK_RC(rt_exec_set_lr(a, 0.01f));
    CHECK_RC(rt_exec_set_lr(b, 0.01f));
    CHECK_RC(rt_exec_train(a, &d, 3, NULL, NULL, NULL, NULL));
    CHECK_RC(rt_exec_train(b, &d, 3, NULL, NULL, NULL, NULL));
    CHECK(same_weights(a, b));
    CHECK(rt_exec_global_step(a) == 8);
    printf("%-34s %s\n", "learning-rate override", rt_test_failures ? "FAILED" : "ok");
    rt_exec_destroy(a);
    rt_exec_destroy(b);
    rt_plan_release(pa);
    rt_plan_release(pb);
}

static void check_copy_state(void)
{
    int32_t y[NS];
    for (int s = 0; s < NS; s++) y[s] = (s * 5) % NC;
    rt_data d = {.x = X, .y = y, .y_dtype = RT_I32, .n = NS};
    /* a: batch 4 for 4 steps (two epochs), then batch 2 in c for 4 more
     * steps (one epoch). r replays the same 8 steps at batch 4 and 2 with
     * one exec per batch size, moments copied by hand through the state
     * blobs (the blob layout is the same for both plans). */
    rt_plan *p4 = build(RT_LOSS_SPARSE_CE, "Softmax", 4, RT_OPT_ADAM, 0.02f);
    rt_plan *p2 = build(RT_LOSS_SPARSE_CE, "Softmax", 2, RT_OPT_ADAM, 0.02f);
    rt_exec *a, *c, *r4, *r2;
    REQUIRE(rt_exec_create(p4, &a) == 0 && rt_exec_create(p2, &c) == 0);
    REQUIRE(rt_exec_create(p4, &r4) == 0 && rt_exec_create(p2, &r2) == 0);
    CHECK_RC(rt_exec_train(a, &d, 4, NULL, NULL, NULL, NULL));
    CHECK_RC(rt_exec_set_lr(a, 0.05f));
    CHECK_RC(rt_exec_copy_state(c, a));
    CHECK(rt_exec_global_step(c) == 4);
    CHECK(rt_exec_lr(c) == 0.05f);
    CHECK_RC(rt_exec_train(c, &d, 4, NULL, NULL, NULL, NULL));

    CHECK_RC(rt_exec_train(r4, &d, 4, NULL, NULL, NULL, NULL));
    size_t n = rt_exec_state_size(r4);
    REQUIRE(n == rt_exec_state_size(r2));
    void *blob = malloc(n);
    REQUIRE(blob);
    CHECK_RC(rt_exec_save_state(r4, blob, n));
    CHECK_RC(rt_exec_load_state(r2, blob, n));
    CHECK(rt_exec_lr(r2) == 0.02f); /* r4 had no override */
    CHECK_RC(rt_exec_set_lr(r2, 0.05f));
    /* the blob kept r4's cursor at a finished epoch: position 0 */
    CHECK_RC(rt_exec_train(r2, &d, 4, NULL, NULL, NULL, NULL));
    CHECK(same_weights(c, r2));
    CHECK(rt_exec_global_step(c) == 8);
    /* the blob keeps an override */
    CHECK_RC(rt_exec_save_state(r2, blob, n));
    CHECK_RC(rt_exec_set_lr(r4, 0.0f));
    CHECK_RC(rt_exec_load_state(r4, blob, n));
    CHECK(rt_exec_lr(r4) == 0.05f);
    /* a program with other parameters is refused, naming one */
    rt_graph *g = rt_graph_create();
    int64_t in[] = {RT_BATCH, NI}, dw[] = {NI, 2};
    REQUIRE(rt_graph_add_input(g, "x", RT_F32, 2, in) == 0);
    REQUIRE(rt_graph_add_param(g, "w", 2, dw, RT_INIT_ZEROS, 1, NULL) == 0);
    REQUIRE(rt_graph_add_param(g, "b", 1, (int64_t[]){2}, RT_INIT_ZEROS, 1, NULL) == 0);
    const char *ins[] = {"x", "w", "b"};
    REQUIRE(rt_graph_add_node(g, "y", "Dense", 3, ins, 0, NULL) == 0);
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_MSE;
    cfg.label_dtype = RT_F32;
    cfg.label_ndim = 1;
    cfg.label_dims[0] = 2;
    rt_plan *po;
    char err[256];
    REQUIRE(rt_plan_compile(g, &cfg, &po, NULL, err, sizeof err) == 0);
    rt_exec *o;
    REQUIRE(rt_exec_create(po, &o) == 0);
    CHECK(rt_exec_copy_state(o, a) == RT_ESHAPE);
    CHECK(strstr(rt_exec_errmsg(o), "'w'") != NULL);
    printf("%-34s %s\n", "state between batch sizes", rt_test_failures ? "FAILED" : "ok");
    free(blob);
    rt_exec_destroy(o);
    rt_plan_release(po);
    rt_graph_destroy(g);
    rt_exec_destroy(a);
    rt_exec_destroy(c);
    rt_exec_destroy(r4);
    rt_exec_destroy(r2);
    rt_plan_release(p4);
    rt_plan_release(p2);
}

int main(void)
{
    for (int i = 0; i < NS * NI; i++) X[i] = sinf(0.9f * (float)i) + 0.1f * (float)(i % 3);
    check_weighted("sparse CE (softmax)", RT_LOSS_SPARSE_CE, "Softmax");
    check_weighted("categorical CE (softmax)", RT_LOSS_CE, "Softmax");
    check_weighted("binary CE (sigmoid)", RT_LOSS_BCE, "Sigmoid");
    check_weighted("mse", RT_LOSS_MSE, NULL);
    check_weighted("mae", RT_LOSS_MAE, NULL);
    check_weighted("logcosh", RT_LOSS_LOGCOSH, NULL);
    check_lr();
    check_copy_state();
    return rt_test_done("test_weights");
}
