/*
 * test_embed_dropout.c - Keras 1's Embedding(dropout): whole rows of the
 * embedding matrix dropped in training, one draw per row and step shared
 * by the batch, kept rows scaled by 1 / (1 - rate); inference untouched.
 *
 * Each case of tests/fixtures/embed_dropout_ref.bin
 * (gen_embed_dropout_fixtures.py: Keras 1.x's Embedding.call transcribed
 * in torch autograd, with the row mask the engine draws) is built as
 * Embedding(dropout) -> Dense: the inference output, the training loss and
 * every gradient must match torch, the rows the mask drops must get a
 * gradient of exactly 0, and every gradient element must match the
 * central difference of the engine's own loss (at that step, so with
 * those masks). Then the mask's statistics over 4000 rows: the dropped
 * fraction is the rate, and the next step draws a new mask, independent
 * of the first. Then the Keras 1 JSON import (the attribute reaches the
 * op; inference equals the model without dropout) and the rates refused.
 */
#include <stdint.h>

#include "import_keras.h"
#include "rt_fixture.h"
#include "rt_test.h"

/* x (B, T) -> Embedding "e" (V, D, dropout) -> Dense "d" (K): the graph
 * entries x, emb, e (node 2, whose stream the generator mirrors) */
static rt_graph *graph(int64_t T, int64_t V, int64_t D, int64_t K, double rate)
{
    rt_graph *g = rt_graph_create();
    int64_t xd[2] = {RT_BATCH, T}, wd[2] = {V, D}, kd[2] = {D, K};
    REQUIRE(rt_graph_add_input(g, "x", RT_F32, 2, xd) == 0);
    REQUIRE(rt_graph_add_param(g, "emb", 2, wd, RT_INIT_GLOROT_UNIFORM, 1, NULL) == 0);
    const char *ein[2] = {"x", "emb"};
    const rt_attr da = {.name = "dropout", .kind = RT_ATTR_FLOAT, .f = rate};
    REQUIRE(rt_graph_add_node(g, "e", "Embedding", 2, ein, 1, &da) == 0);
    REQUIRE(rt_graph_add_param(g, "kernel", 2, kd, RT_INIT_GLOROT_UNIFORM, 1, NULL) == 0);
    REQUIRE(rt_graph_add_param(g, "bias", 1, &K, RT_INIT_ZEROS, 1, NULL) == 0);
    const char *din[3] = {"e", "kernel", "bias"};
    REQUIRE(rt_graph_add_node(g, "d", "Dense", 3, din, 0, NULL) == 0);
    return g;
}

static rt_plan *compile(rt_graph *g, int64_t B, int64_t T, int64_t K, char *err, size_t errlen)
{
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_MSE;
    cfg.batch_size = B;
    cfg.label_dtype = RT_F32;
    cfg.label_ndim = 2;
    cfg.label_dims[0] = T;
    cfg.label_dims[1] = K;
    rt_plan *p = NULL;
    return rt_plan_compile(g, &cfg, &p, NULL, err, errlen) < 0 ? NULL : p;
}

static void run_case(const char *name, double rate)
{
    char nm[128];
#define REF(sfx) (snprintf(nm, sizeof nm, "%s/%s", name, sfx), rt_fixture_find(nm))
    const rt_ref_tensor *x = REF("x"), *y = REF("y"), *emb = REF("emb"), *ker = REF("kernel");
    const int64_t B = x->dims[0], T = x->dims[1], V = emb->dims[0], D = emb->dims[1],
                  K = ker->dims[1];
    rt_graph *g = graph(T, V, D, K, rate);
    char err[256];
    rt_plan *p = compile(g, B, T, K, err, sizeof err);
    if (!p) {
        fprintf(stderr, "%s: compile: %s\n", name, err);
        exit(1);
    }
    rt_exec *e;
    REQUIRE(rt_exec_create(p, &e) == 0);
    const int np = rt_plan_n_params(p);
    for (int i = 0; i < np; i++) {
        const char *pn;
        int64_t d[RT_MAX_DIMS];
        REQUIRE(rt_plan_param_info(p, i, &pn, d, NULL) >= 0);
        CHECK_RC(rt_exec_set_param(e, i, REF(pn)->data));
    }
    /* inference reads W unmasked */
    const rt_ref_tensor *out = REF("out");
    float *got = malloc(out->count * 4);
    REQUIRE(got);
    CHECK_RC(rt_exec_predict(e, x->data, B, got));
    snprintf(nm, sizeof nm, "%s output", name);
    CHECK(!rt_fixture_compare(nm, got, out->data, out->count, 1e-5, 1e-4));
    free(got);
    rt_data d = {.x = x->data, .y = y->data, .y_dtype = RT_F32, .n = B};
    double loss;
    CHECK_RC(rt_exec_compute_grads(e, &d, B, &loss));
    CHECK(fabs(loss - ((float *)REF("loss")->data)[0]) < 1e-5);
    const float *mask = REF("row_mask")->data;
    int dropped_rows = 0;
    for (int i = 0; i < np; i++) {
        const char *pn;
        int64_t dd[RT_MAX_DIMS];
        REQUIRE(rt_plan_param_info(p, i, &pn, dd, NULL) >= 0);
        char gname[64];
        snprintf(gname, sizeof gname, "grad/%s", pn);
        const rt_ref_tensor *gr = REF(gname);
        float *gg = malloc(gr->count * 4);
        REQUIRE(gg);
        CHECK_RC(rt_exec_get_grad(e, i, gg));
        snprintf(nm, sizeof nm, "%s d%s", name, pn);
        CHECK(!rt_fixture_compare(nm, gg, gr->data, gr->count, 1e-6, 1e-4));
        if (!strcmp(pn, "emb"))
            for (int64_t v = 0; v < V; v++) {
                if (mask[v] != 0.0f)
                    continue;
                dropped_rows++;
                for (int64_t j = 0; j < D; j++) CHECK(gg[v * D + j] == 0.0f);
            }
        free(gg);
    }
    CHECK(dropped_rows > 0);
    int checked = 0;
    for (int i = 0; i < np; i++) checked += rt_test_fd_param(e, &d, B, i, 0, 1e-3, name);
    printf("%-16s torch ok (%d of %lld rows dropped), %3d finite differences\n", name,
           dropped_rows, (long long)V, checked);
    rt_exec_destroy(e);
    rt_plan_release(p);
    rt_graph_destroy(g);
#undef REF
}

/* which of V rows the step's mask drops: their gradient is exactly 0
 * (x holds each index once; the Dense kernel is 1, the labels far from the
 * output, so a kept row's gradient is not 0) */
static void dropped_of_step(rt_exec *e, const rt_data *d, int64_t B, int64_t V, unsigned char *out)
{
    double loss;
    CHECK_RC(rt_exec_compute_grads(e, d, B, &loss));
    float *gw = malloc((size_t)V * 4);
    REQUIRE(gw);
    CHECK_RC(rt_exec_get_grad(e, 0, gw));
    for (int64_t v = 0; v < V; v++) out[v] = gw[v] == 0.0f;
    free(gw);
}

/* the mask over many rows: the dropped fraction is the rate (binomial,
 * within 5 standard deviations) and the next step's mask is a new draw
 * (rows dropped at both steps: rate^2 of them) */
static void statistics(void)
{
    enum { B = 4, T = 1000, V = B * T };
    const double rate = 0.25;
    rt_graph *g = graph(T, V, 1, 1, rate);
    char err[256];
    rt_plan *p = compile(g, B, T, 1, err, sizeof err);
    REQUIRE(p);
    rt_exec *e;
    REQUIRE(rt_exec_create(p, &e) == 0);
    float *x = malloc(V * 4), *y = malloc(V * 4), *w = malloc(V * 4), one = 1.0f;
    REQUIRE(x && y && w);
    for (int i = 0; i < V; i++) {
        x[i] = (float)i;
        y[i] = 100.0f;
        w[i] = 0.01f;
    }
    CHECK_RC(rt_exec_set_param(e, 0, w));
    CHECK_RC(rt_exec_set_param(e, 1, &one));
    rt_data d = {.x = x, .y = y, .y_dtype = RT_F32, .n = B};
    unsigned char *s0 = malloc(V), *s1 = malloc(V);
    REQUIRE(s0 && s1);
    dropped_of_step(e, &d, B, V, s0);
    rt_train_result r;
    CHECK_RC(rt_exec_train(e, &d, 1, &r, NULL, NULL, NULL)); /* to step 1 */
    dropped_of_step(e, &d, B, V, s1);
    int n0 = 0, n1 = 0, both = 0;
    for (int v = 0; v < V; v++) {
        n0 += s0[v];
        n1 += s1[v];
        both += s0[v] && s1[v];
    }
    const double sd = sqrt(V * rate * (1 - rate)), sd2 = sqrt(V * rate * rate * (1 - rate * rate));
    printf("%-16s %d and %d of %d rows dropped at steps 0 and 1 (want %.0f +- %.0f), %d at "
           "both (want %.0f +- %.0f)\n",
           "mask statistics", n0, n1, V, V * rate, 5 * sd, both, V * rate * rate, 5 * sd2);
    CHECK(fabs(n0 - V * rate) < 5 * sd);
    CHECK(fabs(n1 - V * rate) < 5 * sd);
    CHECK(fabs(both - V * rate * rate) < 5 * sd2);
    free(s0);
    free(s1);
    free(x);
    free(y);
    free(w);
    rt_exec_destroy(e);
    rt_plan_release(p);
    rt_graph_destroy(g);
}

/* a rate outside [0, 1) is refused at compile, naming it */
static void bad_rates(void)
{
    const double bad[] = {1.0, -0.1, 2.5};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rt_graph *g = graph(2, 5, 2, 1, bad[i]);
        char err[256] = "";
        rt_plan *p = compile(g, 2, 2, 1, err, sizeof err);
        CHECK(!p && strstr(err, "dropout") && strstr(err, "outside [0, 1)"));
        if (p) rt_plan_release(p);
        rt_graph_destroy(g);
    }
    printf("%-16s ok\n", "bad rates");
}

/* A Keras 1.0.5 Sequential as model.to_json() writes it (the layout of
 * tests/fixtures/keras-corpus-4/dutch_lstm_keras1_0_5.json), with the
 * Embedding's dropout given by %s */
#define K1_MODEL                                                                                  \
    "{\"class_name\": \"Sequential\", \"keras_version\": \"1.0.5\", \"config\": ["                \
    "{\"class_name\": \"Embedding\", \"config\": {\"name\": \"embedding_1\", "                  \
    "\"activity_regularizer\": null, \"dropout\": %s, \"input_length\": 6, \"input_dtype\": "    \
    "\"int32\", \"output_dim\": 4, \"input_dim\": 11, \"mask_zero\": false, \"W_constraint\": " \
    "null, \"trainable\": true, \"batch_input_shape\": [null, 6], \"W_regularizer\": null, "    \
    "\"init\": \"uniform\"}}, "                                                                 \
    "{\"class_name\": \"Flatten\", \"config\": {\"name\": \"flatten_1\", \"trainable\": true}}, " \
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"dense_1\", \"activity_regularizer\": "  \
    "null, \"bias\": true, \"output_dim\": 2, \"input_dim\": null, \"b_constraint\": null, "     \
    "\"W_constraint\": null, \"trainable\": true, \"activation\": \"linear\", "                 \
    "\"b_regularizer\": null, \"W_regularizer\": null, \"init\": \"glorot_uniform\"}}]}"

static rt_exec *keras1(const char *rate, char *err, size_t errlen)
{
    char json[2048];
    snprintf(json, sizeof json, K1_MODEL, rate);
    rt_graph *g;
    if (rt_keras_import(json, strlen(json), &g, err, errlen) < 0)
        return NULL;
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_MSE;
    cfg.batch_size = 3;
    cfg.label_dtype = RT_F32;
    cfg.label_ndim = 1;
    cfg.label_dims[0] = 2;
    rt_plan *p;
    const int rc = rt_plan_compile(g, &cfg, &p, NULL, err, errlen);
    rt_graph_destroy(g);
    if (rc < 0)
        return NULL;
    rt_exec *e;
    REQUIRE(rt_exec_create(p, &e) == 0);
    rt_plan_release(p);
    return e;
}

/* the import: Keras 1's dropout reaches the op. Inference equals the
 * model without it; a training step's gradient differs and drops rows
 * of the embedding (zero gradient on a row the batch uses). */
static void keras1_import(void)
{
    char err[512];
    rt_exec *e0 = keras1("0.0", err, sizeof err), *e1 = keras1("0.5", err, sizeof err);
    if (!e0 || !e1) {
        fprintf(stderr, "keras 1 import: %s\n", err);
        exit(1);
    }
    float x[18], y[6] = {1, -1, 2, 0, 3, 1}, p0[6], p1[6];
    for (int i = 0; i < 18; i++) x[i] = (float)((i * 7) % 11);
    /* the same weights in both (same seed, same shapes) */
    CHECK_RC(rt_exec_predict(e0, x, 3, p0));
    CHECK_RC(rt_exec_predict(e1, x, 3, p1));
    CHECK(memcmp(p0, p1, sizeof p0) == 0);
    rt_data d = {.x = x, .y = y, .y_dtype = RT_F32, .n = 3};
    double l0, l1;
    float g0[44], g1[44];
    CHECK_RC(rt_exec_compute_grads(e0, &d, 3, &l0));
    CHECK_RC(rt_exec_compute_grads(e1, &d, 3, &l1));
    CHECK_RC(rt_exec_get_grad(e0, 0, g0));
    CHECK_RC(rt_exec_get_grad(e1, 0, g1));
    int used = 0, zeroed = 0;
    for (int v = 0; v < 11; v++) {
        int u = 0;
        for (int i = 0; i < 18; i++) u |= (int)x[i] == v;
        if (!u) continue;
        used++;
        zeroed += g0[v * 4] != 0.0f && g1[v * 4] == 0.0f && g1[v * 4 + 3] == 0.0f;
    }
    CHECK(l0 != l1);
    CHECK(zeroed > 0 && zeroed < used);
    rt_exec_destroy(e0);
    rt_exec_destroy(e1);
    /* refused: a rate outside [0, 1), named */
    CHECK(!keras1("1.0", err, sizeof err) && strstr(err, "Embedding dropout 1 is outside [0, 1)") &&
          strstr(err, "embedding_1"));
    CHECK(!keras1("-0.5", err, sizeof err) && strstr(err, "outside [0, 1)"));
    printf("%-16s ok (%d of %d used rows dropped at step 0)\n", "keras 1 import", zeroed, used);
}

int main(int argc, char **argv)
{
    REQUIRE(argc == 2);
    rt_fixture_load(argv[1]);
    /* mirrors main() of tests/fixtures/gen_embed_dropout_fixtures.py */
    run_case("emb_drop", 0.3);
    run_case("emb_drop_half", 0.5);
    statistics();
    bad_rates();
    keras1_import();
    rt_fixture_free();
    return rt_test_done("test_embed_dropout");
}
