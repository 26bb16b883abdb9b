/*
 * test_fixture.c - the engine against PyTorch 1.13 (tests/fixtures/
 * engine_ref.bin, written by tests/fixtures/gen_fixtures.py; torch is not
 * needed to run this test).
 *
 * For W-A (Dense(32, relu) -> Dense(3, softmax), logcosh on int labels,
 * Adam lr 0.1 eps 1e-7, added to sqrt(v) as Keras) and an MLP 8-16-16-5
 * (relu, tanh, sparse CE from logits; Adam, AdamW, SGD with Nesterov
 * momentum), with the fixture's
 * initial weights and batches in order: the first batch's output, loss and
 * every gradient, then 10 training steps' losses and all weights after each.
 *
 * Also every loss on fixed outputs (Keras semantics: torch where it has
 * the same loss, numpy for Keras' clipping of probabilities).
 *
 * Tolerances (f32 against f32; differences come from summation order):
 *   outputs, loss, gradients   |a - b| <= 2e-5 + 1e-4 |b|
 *   10-step trajectories       |a - b| <= 1e-4 + 1e-3 |b|
 */
#include <stdint.h>

#include "rt_fixture.h"

typedef rt_ref_tensor ref_tensor;

static const ref_tensor *ref(const char *fmt, const char *a, const char *b)
{
    char name[128];
    snprintf(name, sizeof name, fmt, a, b);
    return rt_fixture_find(name);
}

typedef struct model {
    const char *prefix;
    int n_params;
    const char *names[6];
    int in, batch;
    rt_loss_kind loss;
    int from_logits;
    rt_opt_kind opt;
    float lr, momentum;
    int nesterov;
    float weight_decay;
} model;

static rt_graph *build(const model *m)
{
    if (m->n_params == 4) {
        return rt_test_wa_graph(ref("%s/init/%s", m->prefix, "d1/kernel")->data,
                                ref("%s/init/%s", m->prefix, "d1/bias")->data,
                                ref("%s/init/%s", m->prefix, "d2/kernel")->data,
                                ref("%s/init/%s", m->prefix, "d2/bias")->data);
    }
    /* MLP 8-16-16-5: Dense + Relu, Dense + Tanh, Dense (logits) */
    rt_graph *g = rt_graph_create();
    int64_t in[] = {RT_BATCH, 8};
    REQUIRE(rt_graph_add_input(g, "x", RT_F32, 2, in) == 0);
    const int64_t dims[3][2] = {{8, 16}, {16, 16}, {16, 5}};
    const char *acts[] = {"Relu", "Tanh", NULL};
    const char *prev = "x";
    char nb[3][24], na[3][24];
    for (int l = 0; l < 3; l++) {
        const ref_tensor *w = ref("%s/init/%s", m->prefix, m->names[2 * l]);
        const ref_tensor *b = ref("%s/init/%s", m->prefix, m->names[2 * l + 1]);
        REQUIRE(rt_graph_add_param(g, m->names[2 * l], 2, dims[l], RT_INIT_GLOROT_UNIFORM, 1, w->data) == 0);
        REQUIRE(rt_graph_add_param(g, m->names[2 * l + 1], 1, &dims[l][1], RT_INIT_ZEROS, 1, b->data) == 0);
        snprintf(nb[l], sizeof nb[l], "dense%d", l + 1);
        const char *ins[] = {prev, m->names[2 * l], m->names[2 * l + 1]};
        REQUIRE(rt_graph_add_node(g, nb[l], "Dense", 3, ins, 0, NULL) == 0);
        prev = nb[l];
        if (acts[l]) {
            snprintf(na[l], sizeof na[l], "act%d", l + 1);
            const char *ai[] = {prev};
            REQUIRE(rt_graph_add_node(g, na[l], acts[l], 1, ai, 0, NULL) == 0);
            prev = na[l];
        }
    }
    REQUIRE(rt_graph_set_output(g, prev) == 0);
    return g;
}

static void check_model(const model *m)
{
    rt_graph *g = build(m);
    REQUIRE(g);
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = m->loss;
    cfg.from_logits = m->from_logits;
    cfg.opt = m->opt;
    cfg.lr = m->lr;
    cfg.eps = 1e-7f;
    cfg.momentum = m->momentum;
    cfg.nesterov = m->nesterov;
    cfg.weight_decay = m->weight_decay;
    cfg.batch_size = m->batch;
    cfg.shuffle = 0; /* the fixture's batches are in order */
    cfg.seed = 7;
    rt_plan *p;
    char err[256];
    int rc = rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err);
    if (rc < 0) fprintf(stderr, "%s: %s\n", m->prefix, err);
    REQUIRE(rc == 0);
    REQUIRE(rt_plan_n_params(p) == m->n_params);
    rt_exec *e;
    REQUIRE(rt_exec_create(p, &e) == 0);

    const ref_tensor *x = ref("%s/%s", m->prefix, "x"), *y = ref("%s/%s", m->prefix, "y");
    rt_data d = {.x = x->data, .y = y->data, .y_dtype = RT_I32, .n = x->dims[0]};
    char what[160];

    /* first batch: output, loss, gradients */
    const ref_tensor *out0 = ref("%s/%s", m->prefix, "out0");
    float *out = malloc(out0->count * 4);
    CHECK_RC(rt_exec_predict(e, x->data, m->batch, out));
    snprintf(what, sizeof what, "%s output", m->prefix);
    rt_test_failures += rt_fixture_compare(what, out, out0->data, out0->count, 2e-5, 1e-4);
    free(out);
    double loss;
    CHECK_RC(rt_exec_compute_grads(e, &d, m->batch, &loss));
    float l32 = (float)loss;
    snprintf(what, sizeof what, "%s loss", m->prefix);
    rt_test_failures += rt_fixture_compare(what, &l32, ref("%s/%s", m->prefix, "loss0")->data, 1, 2e-5, 1e-4);
    for (int i = 0; i < m->n_params; i++) {
        const char *name;
        int64_t dims[RT_MAX_DIMS];
        int tr;
        rt_plan_param_info(p, i, &name, dims, &tr);
        const ref_tensor *gr = ref("%s/grad0/%s", m->prefix, name);
        float *gv = malloc(gr->count * 4);
        CHECK_RC(rt_exec_get_grad(e, i, gv));
        snprintf(what, sizeof what, "%s grad %s", m->prefix, name);
        rt_test_failures += rt_fixture_compare(what, gv, gr->data, gr->count, 2e-5, 1e-4);
        free(gv);
    }

    /* 10 steps, one call each, weights after every step */
    const ref_tensor *losses = ref("%s/%s", m->prefix, "losses");
    float sl = NAN;
    for (int s = 0; s < 10; s++) {
        rt_train_result r;
        CHECK_RC(rt_exec_train(e, &d, 1, &r, NULL, NULL, &sl));
        snprintf(what, sizeof what, "%s step %d loss", m->prefix, s + 1);
        rt_test_failures += rt_fixture_compare(what, &sl, (float *)losses->data + s, 1, 1e-4, 1e-3);
        for (int i = 0; i < m->n_params; i++) {
            const char *name;
            rt_plan_param_info(p, i, &name, NULL, NULL);
            const ref_tensor *tr = ref("%s/traj/%s", m->prefix, name);
            size_t per = tr->count / 10;
            float *w = malloc(per * 4);
            CHECK_RC(rt_exec_get_param(e, i, w));
            snprintf(what, sizeof what, "%s step %d %s", m->prefix, s + 1, name);
            rt_test_failures += rt_fixture_compare(what, w, (float *)tr->data + per * (size_t)s, per, 1e-4, 1e-3);
            free(w);
        }
    }
    printf("%s: step 10 loss %.7f (torch %.7f)\n", m->prefix, (double)sl,
           (double)((float *)losses->data)[9]);
    rt_exec_destroy(e);
    rt_plan_release(p);
    rt_graph_destroy(g);
}

/* The mean loss of fixed outputs: x (B,3) -> op (Identity, or Softmax to
 * take the Keras path that reads the logits behind it) is the output */
static void check_loss_op(const char *name, const char *op, const char *out,
                          const char *lab, rt_loss_kind kind, int from_logits)
{
    rt_graph *g = rt_graph_create();
    int64_t in[] = {RT_BATCH, 3};
    REQUIRE(rt_graph_add_input(g, "x", RT_F32, 2, in) == 0);
    const char *ins[] = {"x"};
    REQUIRE(rt_graph_add_node(g, "y", op, 1, ins, 0, NULL) == 0);
    const ref_tensor *x = ref("loss/%s%s", out, ""), *y = ref("loss/%s%s", lab, "");
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = kind;
    cfg.from_logits = from_logits;
    /* the loss of given values: an Identity output holds probabilities */
    cfg.loss_check = 0;
    cfg.batch_size = 5; /* 12 samples: batches of 5, 5, 2 */
    cfg.label_dtype = y->dtype == 2 ? RT_I32 : RT_F32;
    cfg.label_ndim = y->ndim - 1;
    cfg.label_dims[0] = y->dims[1];
    rt_plan *p;
    char err[256];
    int rc = rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err);
    if (rc) fprintf(stderr, "%s: %s\n", name, err);
    REQUIRE(rc == 0);
    rt_exec *e;
    REQUIRE(rt_exec_create(p, &e) == 0);
    rt_data d = {.x = x->data, .y = y->data, .y_dtype = cfg.label_dtype, .n = x->dims[0]};
    rt_metrics m;
    CHECK_RC(rt_exec_evaluate(e, &d, &m));
    float got = (float)m.loss;
    char what[96];
    snprintf(what, sizeof what, "loss %s", name);
    int bad = rt_fixture_compare(what, &got, ref("loss/%s%s", name, "")->data, 1, 2e-6, 1e-5);
    rt_test_failures += bad;
    printf("%-18s %.7f (reference %.7f)\n", name, (double)got,
           (double)*(float *)ref("loss/%s%s", name, "")->data);
    rt_exec_destroy(e);
    rt_plan_release(p);
    rt_graph_destroy(g);
}

static void check_loss(const char *name, const char *out, const char *lab,
                       rt_loss_kind kind, int from_logits)
{
    check_loss_op(name, "Identity", out, lab, kind, from_logits);
}

int main(int argc, char **argv)
{
    rt_fixture_load(argc > 1 ? argv[1] : "tests/fixtures/engine_ref.bin");
    const model wa = {"wa", 4, {"d1/kernel", "d1/bias", "d2/kernel", "d2/bias"},
                      4, 20, RT_LOSS_LOGCOSH, 0, RT_OPT_ADAM, 0.1f, 0, 0, 0};
    check_model(&wa);
    model mlp = {"mlp", 6, {"l1/kernel", "l1/bias", "l2/kernel", "l2/bias", "l3/kernel", "l3/bias"},
                 8, 16, RT_LOSS_SPARSE_CE, 1, RT_OPT_ADAM, 0.01f, 0, 0, 0};
    check_model(&mlp);
    mlp.prefix = "mlp_adamw";
    mlp.opt = RT_OPT_ADAMW;
    mlp.weight_decay = 0.004f;
    check_model(&mlp);
    mlp.prefix = "mlp_nesterov";
    mlp.opt = RT_OPT_SGD;
    mlp.lr = 0.05f;
    mlp.momentum = 0.9f;
    mlp.nesterov = 1;
    mlp.weight_decay = 0;
    check_model(&mlp);
    /* every loss on fixed outputs: mean over 12 samples in 3 batches;
     * tolerance |a - b| <= 2e-6 + 1e-5 |b| */
    check_loss("sparse_ce_logits", "logits", "y_int", RT_LOSS_SPARSE_CE, 1);
    check_loss("sparse_ce_probs", "probs", "y_int", RT_LOSS_SPARSE_CE, 0);
    check_loss("ce_logits", "logits", "y_onehot", RT_LOSS_CE, 1);
    check_loss("ce_probs", "probs", "y_onehot", RT_LOSS_CE, 0);
    check_loss("bce_logits", "logits", "y_binary", RT_LOSS_BCE, 1);
    check_loss("bce_probs", "sigmoid", "y_binary", RT_LOSS_BCE, 0);
    check_loss("mse", "logits", "y_float", RT_LOSS_MSE, 0);
    check_loss("mae", "logits", "y_float", RT_LOSS_MAE, 0);
    check_loss("logcosh_int", "probs", "y_int", RT_LOSS_LOGCOSH, 0);
    /* CE from probabilities on a Softmax output reads the logits: the
     * reference is the loss from logits */
    check_loss_op("sparse_ce_logits", "Softmax", "logits", "y_int", RT_LOSS_SPARSE_CE, 0);
    check_loss_op("ce_logits", "Softmax", "logits", "y_onehot", RT_LOSS_CE, 0);
    rt_fixture_free();
    return rt_test_done("test_fixture");
}
