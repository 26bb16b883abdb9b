/*
 * test_keras_mask_heads.c - a model of two outputs where one carries a step
 * mask: Keras masks that output's loss with its own mask and leaves the
 * other unmasked, then sums them times the loss weights
 * (keras/src/trainers/compile_utils.py CompileLoss; keras/src/losses/
 * loss.py apply_mask). Embedding(mask_zero) -> LSTM(return_sequences) ->
 * [TimeDistributed(Dense) softmax, masked; SimpleRNN -> Dense, not]; and
 * a model of two inputs whose two outputs carry different masks, each
 * divided by its own kept steps.
 *
 * Against tests/fixtures/keras_mask_heads_ref.bin (gen_keras_mask_heads_
 * fixtures.py: PyTorch, in double, from Keras' formulas): the loss and
 * every parameter's gradient at the fixture's weights, each head's loss,
 * and the weights after 3 SGD steps with sample weights. Then central
 * finite differences of the masked two-head loss, labels at masked steps
 * changing nothing, a batch of masked steps only, and the loss-mask
 * API's refusals (a mask count that does not fit, a mask of the wrong
 * shape). A PyTorch loss under a mask: test_keras_timedist.c.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/rt_fixture.h"
#include "../engine/rt_test.h"
#include "import_keras.h"
#include "rtrain/rt_error.h"

#define B 4
#define T 5
#define LAB (T + 1) /* per sample: 5 tag labels, then the val target */

static const char model[] =
    "{\"class_name\": \"Model\", \"config\": {\"name\": \"m\", \"layers\": ["
    "{\"name\": \"x\", \"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 5],"
    " \"name\": \"x\"}, \"inbound_nodes\": []},"
    "{\"name\": \"e\", \"class_name\": \"Embedding\", \"config\": {\"name\": \"e\", \"input_dim\": 7,"
    " \"output_dim\": 3, \"mask_zero\": true}, \"inbound_nodes\": [[[\"x\", 0, 0, {}]]]},"
    "{\"name\": \"l\", \"class_name\": \"LSTM\", \"config\": {\"name\": \"l\", \"units\": 4,"
    " \"activation\": \"tanh\", \"recurrent_activation\": \"sigmoid\","
    " \"return_sequences\": true}, \"inbound_nodes\": [[[\"e\", 0, 0, {}]]]},"
    "{\"name\": \"td\", \"class_name\": \"TimeDistributed\", \"config\": {\"name\": \"td\", \"layer\":"
    " {\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 3}}}, \"inbound_nodes\":"
    " [[[\"l\", 0, 0, {}]]]},"
    "{\"name\": \"tag\", \"class_name\": \"Activation\", \"config\": {\"name\": \"tag\","
    " \"activation\": \"softmax\"}, \"inbound_nodes\": [[[\"td\", 0, 0, {}]]]},"
    "{\"name\": \"r\", \"class_name\": \"SimpleRNN\", \"config\": {\"name\": \"r\", \"units\": 2,"
    " \"activation\": \"tanh\"}, \"inbound_nodes\": [[[\"l\", 0, 0, {}]]]},"
    "{\"name\": \"val\", \"class_name\": \"Dense\", \"config\": {\"name\": \"val\", \"units\": 1},"
    " \"inbound_nodes\": [[[\"r\", 0, 0, {}]]]}],"
    " \"input_layers\": [[\"x\", 0, 0]], \"output_layers\": [[\"tag\", 0, 0], [\"val\", 0, 0]]}}";

/* two outputs with different masks (two inputs): "a" masked by x1's
 * zeros, "b" by x2's, each divided by its own kept steps */
static const char model2[] =
    "{\"class_name\": \"Model\", \"config\": {\"name\": \"m2\", \"layers\": ["
    "{\"name\": \"x1\", \"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null,"
    " 5], \"name\": \"x1\"}, \"inbound_nodes\": []},"
    "{\"name\": \"x2\", \"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null,"
    " 5], \"name\": \"x2\"}, \"inbound_nodes\": []},"
    "{\"name\": \"e1\", \"class_name\": \"Embedding\", \"config\": {\"name\": \"e1\", \"input_dim\":"
    " 7, \"output_dim\": 3, \"mask_zero\": true}, \"inbound_nodes\": [[[\"x1\", 0, 0, {}]]]},"
    "{\"name\": \"e2\", \"class_name\": \"Embedding\", \"config\": {\"name\": \"e2\", \"input_dim\":"
    " 6, \"output_dim\": 2, \"mask_zero\": true}, \"inbound_nodes\": [[[\"x2\", 0, 0, {}]]]},"
    "{\"name\": \"r1\", \"class_name\": \"SimpleRNN\", \"config\": {\"name\": \"r1\", \"units\": 3,"
    " \"return_sequences\": true}, \"inbound_nodes\": [[[\"e1\", 0, 0, {}]]]},"
    "{\"name\": \"r2\", \"class_name\": \"SimpleRNN\", \"config\": {\"name\": \"r2\", \"units\": 3,"
    " \"return_sequences\": true}, \"inbound_nodes\": [[[\"e2\", 0, 0, {}]]]},"
    "{\"name\": \"t1\", \"class_name\": \"TimeDistributed\", \"config\": {\"name\": \"t1\", \"layer\":"
    " {\"class_name\": \"Dense\", \"config\": {\"name\": \"d1\", \"units\": 2}}}, \"inbound_nodes\":"
    " [[[\"r1\", 0, 0, {}]]]},"
    "{\"name\": \"t2\", \"class_name\": \"TimeDistributed\", \"config\": {\"name\": \"t2\", \"layer\":"
    " {\"class_name\": \"Dense\", \"config\": {\"name\": \"d2\", \"units\": 1}}}, \"inbound_nodes\":"
    " [[[\"r2\", 0, 0, {}]]]},"
    "{\"name\": \"a\", \"class_name\": \"Activation\", \"config\": {\"name\": \"a\","
    " \"activation\": \"softmax\"}, \"inbound_nodes\": [[[\"t1\", 0, 0, {}]]]}],"
    " \"input_layers\": [[\"x1\", 0, 0], [\"x2\", 0, 0]],"
    " \"output_layers\": [[\"a\", 0, 0], [\"t2\", 0, 0]]}}";

static const char *pnames2[] = {
    "e1/embeddings", "e2/embeddings",       "r1/kernel",    "r1/recurrent_kernel",
    "r1/bias",       "r2/kernel",           "r2/recurrent_kernel", "r2/bias",
    "t1/d1/kernel",  "t1/d1/bias",          "t2/d2/kernel", "t2/d2/bias"};

static const char *pnames[] = {"e/embeddings", "l/kernel",     "l/recurrent_kernel", "l/bias",
                               "td/d/kernel",  "td/d/bias",    "r/kernel",           "r/recurrent_kernel",
                               "r/bias",       "v/kernel",     "v/bias"};
#define NP ((int)(sizeof pnames / sizeof pnames[0]))

/* a fixture model: its Keras JSON, the parameters in the plan's order,
 * the fixture's prefix ("" or "2/") and the second head's loss weight */
typedef struct fx {
    const char *json, *const *pnames, *prefix;
    int np;
    float w1;
} fx;

static const fx fx1 = {model, pnames, "", NP, 0.5f};
static const fx fx2 = {model2, pnames2, "2/", (int)(sizeof pnames2 / sizeof pnames2[0]), 2.0f};

static const rt_ref_tensor *ref(const fx *f, const char *what, int i)
{
    char nm[96];
    snprintf(nm, sizeof nm, "%s%s%s", f->prefix, what, i < 0 ? "" : f->pnames[i]);
    return rt_fixture_find(nm);
}

static rt_graph *import(const fx *f)
{
    rt_graph *g = NULL;
    char err[1024];
    int rc = rt_keras_import(f->json, strlen(f->json), &g, err, sizeof err);
    if (rc < 0) fprintf(stderr, "import: %s\n", err);
    REQUIRE(rc == 0);
    return g;
}

static void config(rt_train_config *cfg, float w1)
{
    rt_train_config_init(cfg);
    cfg->batch_size = B;
    cfg->label_dtype = RT_F32;
    cfg->opt = RT_OPT_SGD;
    cfg->lr = 0.1f;
    cfg->seed = 3;
    cfg->n_heads = 2;
    cfg->heads[0].loss = RT_LOSS_SPARSE_CE;
    cfg->heads[0].weight = 1.0f;
    cfg->heads[0].metrics = RT_METRIC_ACCURACY;
    cfg->heads[1].loss = RT_LOSS_MSE;
    cfg->heads[1].weight = w1;
}

/* the fixture's initial weights */
static void set_init(rt_exec *e, const fx *f)
{
    REQUIRE(rt_plan_n_params(rt_exec_plan(e)) == f->np);
    for (int i = 0; i < f->np; i++) {
        const rt_ref_tensor *t = ref(f, "init/", i);
        int64_t dims[RT_MAX_DIMS], n = 1;
        const int nd = rt_plan_param_info(rt_exec_plan(e), i, NULL, dims, NULL);
        for (int k = 0; k < nd; k++) n *= dims[k];
        REQUIRE(n == (int64_t)t->count);
        CHECK_RC(rt_exec_set_param(e, i, t->data));
    }
}

static rt_exec *build(rt_graph *g, const fx *f)
{
    rt_train_config cfg;
    config(&cfg, f->w1);
    rt_plan *p = NULL;
    char err[1024];
    int rc = rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err);
    if (rc < 0) fprintf(stderr, "compile: %s\n", err);
    REQUIRE(rc == 0);
    rt_exec *e = NULL;
    REQUIRE(rt_exec_create(p, &e) == 0);
    rt_plan_release(p);
    set_init(e, f);
    return e;
}

static int close_to(const char *what, double got, double want, double rtol)
{
    if (fabs(got - want) <= rtol * fabs(want) + 1e-7) return 0;
    fprintf(stderr, "%s: %.8g, Keras (PyTorch) %.8g\n", what, got, want);
    return 1;
}

/* the loss and every gradient at the fixture's weights; the loss */
static double check_grads(rt_exec *e, const fx *f, const rt_data *d)
{
    double loss;
    CHECK_RC(rt_exec_compute_grads(e, d, B, &loss));
    rt_test_failures += close_to("loss", loss, *(float *)ref(f, "loss0", -1)->data, 1e-5);
    for (int i = 0; i < f->np; i++) {
        const rt_ref_tensor *t = ref(f, "grad0/", i);
        float gv[64];
        REQUIRE(t->count <= 64);
        CHECK_RC(rt_exec_get_grad(e, i, gv));
        rt_test_failures += rt_fixture_compare(t->name, gv, t->data, t->count, 1e-6, 1e-4);
    }
    return loss;
}

/* 3 SGD steps over the full batch from the fixture's weights: the losses
 * and weights PyTorch reaches */
static void check_train(rt_exec *e, const fx *f, const rt_data *d)
{
    set_init(e, f);
    float steps[3];
    rt_train_result res;
    CHECK_RC(rt_exec_train(e, d, 3, &res, NULL, NULL, steps));
    for (int s = 0; s < 3; s++) {
        char nm[16];
        snprintf(nm, sizeof nm, "loss%d", s);
        rt_test_failures += close_to(nm, steps[s], *(float *)ref(f, nm, -1)->data, 1e-5);
    }
    for (int i = 0; i < f->np; i++) {
        const rt_ref_tensor *t = ref(f, "final/", i);
        float w[64];
        CHECK_RC(rt_exec_get_param(e, i, w));
        rt_test_failures += rt_fixture_compare(t->name, w, t->data, t->count, 1e-5, 0);
    }
}

/* the second model: loss, gradients, finite differences and 3 SGD steps */
static void two_masks(void)
{
    rt_graph *g = import(&fx2);
    rt_exec *e = build(g, &fx2);
    rt_data d = {.x = ref(&fx2, "x", -1)->data, .y = ref(&fx2, "y", -1)->data,
                 .y_dtype = RT_F32, .n = B, .sw = ref(&fx2, "sw", -1)->data};
    const double loss = check_grads(e, &fx2, &d);
    for (int i = 0; i < fx2.np; i++) rt_test_fd_param(e, &d, B, i, 0, 1e-4, "two masks");
    check_train(e, &fx2, &d);
    printf("two masks: loss %.6f (PyTorch %.6f)\n", loss,
           (double)*(float *)ref(&fx2, "loss0", -1)->data);
    rt_exec_destroy(e);
    rt_graph_destroy(g);
}

int main(int argc, char **argv)
{
    rt_fixture_load(argc > 1 ? argv[1] : "tests/fixtures/keras_mask_heads_ref.bin");
    const float *x = rt_fixture_find("x")->data, *y = rt_fixture_find("y")->data,
                *sw = rt_fixture_find("sw")->data;
    rt_graph *g = import(&fx1);
    rt_exec *e = build(g, &fx1);
    rt_data d = {.x = x, .y = y, .y_dtype = RT_F32, .n = B, .sw = sw};

    /* the loss and gradients at the fixture's weights */
    double loss = check_grads(e, &fx1, &d);

    /* each head's loss, as Keras reports it (unweighted; the masked one
     * over the kept steps), and the tag head's accuracy over them */
    float p[B * (T * 3 + 1)];
    CHECK_RC(rt_exec_predict(e, x, B, p));
    double lt = 0, lv = 0, valid = 0, hit = 0, swm = 0;
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            if (x[b * T + t] == 0) continue;
            const float *q = p + b * (T * 3 + 1) + t * 3;
            const int lab = (int)y[b * LAB + t];
            int am = 0;
            for (int j = 1; j < 3; j++) am = q[j] > q[am] ? j : am;
            lt += sw[b] * -log((double)q[lab]), valid += 1, hit += am == lab;
        }
        const double dv = (double)p[b * (T * 3 + 1) + T * 3] - y[b * LAB + T];
        lv += sw[b] * dv * dv, swm += sw[b];
    }
    lt /= valid, lv /= B;
    rt_metrics m;
    CHECK_RC(rt_exec_evaluate(e, &d, &m));
    rt_test_failures += close_to("evaluate loss", m.loss, lt + 0.5 * lv, 1e-5);
    int seen = 0;
    for (int i = 0; i < m.n_values; i++) {
        if (m.value_bit[i] == RT_METRIC_HEAD_LOSS)
            seen++, rt_test_failures += close_to(m.value_head[i] ? "val loss" : "tag loss",
                                                 m.values[i], m.value_head[i] ? lv : lt, 1e-5);
        if (m.value_bit[i] == RT_METRIC_ACCURACY && m.value_head[i] == 0)
            seen++, rt_test_failures += close_to("tag accuracy", m.values[i], hit / valid, 1e-9);
    }
    CHECK(seen == 3);
    printf("loss %.6f (PyTorch %.6f), tag %.6f over %g kept steps, val %.6f\n", loss,
           (double)*(float *)rt_fixture_find("loss0")->data, lt, valid, lv);

    /* the gradient of the masked two-head loss: finite differences */
    for (int i = 0; i < NP; i++) rt_test_fd_param(e, &d, B, i, 0, 1e-4, "masked heads");

    /* labels at masked steps change neither the loss nor the gradient;
     * the unmasked head's target does */
    float y2[B * LAB], g1[64], g2[64];
    for (int r = 0; r < B * LAB; r++) {
        const int b = r / LAB, t = r % LAB;
        y2[r] = t < T && x[b * T + t] == 0 ? (float)((int)(y[r] + 1) % 3) : y[r];
    }
    rt_data d2 = {.x = x, .y = y2, .y_dtype = RT_F32, .n = B, .sw = sw};
    double loss2;
    CHECK_RC(rt_exec_compute_grads(e, &d, B, &loss));
    CHECK_RC(rt_exec_get_grad(e, 1, g1));
    CHECK_RC(rt_exec_compute_grads(e, &d2, B, &loss2));
    CHECK_RC(rt_exec_get_grad(e, 1, g2));
    CHECK(loss == loss2);
    for (int i = 0; i < 48; i++) CHECK(g1[i] == g2[i]);

    /* a batch of masked steps only: the tag head adds 0 (Keras' 0 / eps),
     * the val head its own loss */
    float xz[T] = {0, 0, 0, 0, 0};
    rt_data dz = {.x = xz, .y = y, .y_dtype = RT_F32, .n = 1};
    CHECK_RC(rt_exec_compute_grads(e, &dz, 1, &loss));
    CHECK_RC(rt_exec_get_grad(e, 4, g1)); /* td/d/kernel: only the tag head */
    for (int i = 0; i < 12; i++) CHECK(g1[i] == 0);
    CHECK_RC(rt_exec_predict(e, xz, 1, p));
    const double dz0 = (double)p[T * 3] - y[T];
    rt_test_failures += close_to("masked-only batch", loss, 0.5 * dz0 * dz0, 1e-5);

    /* 3 SGD steps over the full batch: the weights PyTorch reaches */
    check_train(e, &fx1, &d);
    rt_exec_destroy(e);

    /* refused: one mask for two outputs, a mask of the wrong shape, three
     * masks */
    char err[1024];
    rt_train_config cfg;
    config(&cfg, fx1.w1);
    struct {
        int n;
        const char *m0, *m1, *want;
    } bad[] = {
        {1, "e:mask", NULL, "1 loss mask for a model of 2 outputs"},
        {2, NULL, "l", "loss mask 'l' has"},
        {3, NULL, NULL, "3 loss masks for a model of 2 outputs"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rt_graph *gb = import(&fx1);
        const char *mk[3] = {bad[i].m0, bad[i].m1, NULL};
        CHECK_RC(rt_graph_set_loss_masks(gb, mk, bad[i].n));
        rt_plan *pb = NULL;
        err[0] = 0;
        const int rc = rt_plan_compile(gb, &cfg, &pb, NULL, err, sizeof err);
        CHECK(rc < 0 && pb == NULL);
        if (!strstr(err, bad[i].want)) {
            fprintf(stderr, "bad case %zu: '%s'\n", i, err);
            rt_test_failures++;
        }
        rt_graph_destroy(gb);
    }
    rt_graph_destroy(g);
    two_masks();
    rt_fixture_free();
    return rt_test_done("keras_mask_heads");
}
