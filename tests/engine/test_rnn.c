/*
 * test_rnn.c - SimpleRNN, LSTM, GRU and Embedding against PyTorch and by
 * finite differences.
 *
 * Each case of tests/fixtures/rnn_ref.bin (gen_rnn_fixtures.py: Keras'
 * cell formulas in torch autograd, checked there against torch.nn's
 * modules) is built as a graph of the engine's ops with the fixture's
 * Keras-layout weights; its output (rt_exec_predict), MSE loss and every
 * weight gradient must match torch, and every gradient element must match
 * the central difference of the engine's own loss. Then Embedding's index
 * checks: a fractional or out-of-range index is RT_EDATA naming the sample.
 */
#include <stdint.h>

#include "rt_fixture.h"
#include "rt_test.h"

typedef struct rcase {
    const char *name, *op;
    int seq, backwards, aligned, reset_after;
    const char *ract;
    int vocab;
} rcase;

#define B 3
#define T 5
#define F 4
#define U 3

static void put_param(rt_graph *g, const char *pname, const rt_ref_tensor *t)
{
    int64_t d[4];
    for (uint32_t i = 0; i < t->ndim; i++) d[i] = t->dims[i];
    REQUIRE(rt_graph_add_param(g, pname, (int)t->ndim, d, RT_INIT_GLOROT_UNIFORM, 1, NULL) == 0);
}

static void run_case(const rcase *c)
{
    char nm[160];
#define REF(sfx) (snprintf(nm, sizeof nm, "%s/%s", c->name, sfx), rt_fixture_find(nm))
    rt_graph *g = rt_graph_create();
    int64_t xd[3] = {RT_BATCH, T, F};
    if (c->vocab) {
        REQUIRE(rt_graph_add_input(g, "x", RT_F32, 2, xd) == 0);
        put_param(g, "emb", REF("emb"));
        const char *in[2] = {"x", "emb"};
        REQUIRE(rt_graph_add_node(g, "e", "Embedding", 2, in, 0, NULL) == 0);
    } else {
        REQUIRE(rt_graph_add_input(g, "x", RT_F32, 3, xd) == 0);
    }
    put_param(g, "kernel", REF("kernel"));
    put_param(g, "recurrent_kernel", REF("recurrent_kernel"));
    put_param(g, "bias", REF("bias"));
    rt_attr at[6] = {
        {.name = "return_sequences", .kind = RT_ATTR_INT, .i = c->seq},
        {.name = "go_backwards", .kind = RT_ATTR_INT, .i = c->backwards},
        {.name = "reverse_output", .kind = RT_ATTR_INT, .i = c->aligned},
        {.name = "recurrent_activation", .kind = RT_ATTR_STR, .s = c->ract},
        {.name = "reset_after", .kind = RT_ATTR_INT, .i = c->reset_after},
    };
    const int nat = strcmp(c->op, "GRU") == 0 ? 5 : strcmp(c->op, "LSTM") == 0 ? 4 : 3;
    const char *in[4] = {c->vocab ? "e" : "x", "kernel", "recurrent_kernel", "bias"};
    if (rt_graph_add_node(g, "rnn", c->op, 4, in, nat, at) != 0) {
        fprintf(stderr, "%s: %s\n", c->name, rt_graph_errmsg(g));
        exit(1);
    }
    const rt_ref_tensor *out = REF("out");
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_MSE;
    cfg.batch_size = B;
    cfg.label_dtype = RT_F32;
    cfg.label_ndim = (int)out->ndim - 1;
    for (uint32_t i = 1; i < out->ndim; i++) cfg.label_dims[i - 1] = out->dims[i];
    rt_plan *p;
    char err[256];
    if (rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err) < 0) {
        fprintf(stderr, "%s: compile: %s\n", c->name, err);
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
    const rt_ref_tensor *x = REF("x"), *y = REF("y");
    float got[B * T * U];
    CHECK_RC(rt_exec_predict(e, x->data, B, got));
    snprintf(nm, sizeof nm, "%s output", c->name);
    CHECK(!rt_fixture_compare(nm, got, out->data, out->count, 1e-5, 1e-4));
    rt_data d = {.x = x->data, .y = y->data, .y_dtype = RT_F32, .n = B};
    double loss;
    CHECK_RC(rt_exec_compute_grads(e, &d, B, &loss));
    CHECK(fabs(loss - ((float *)REF("loss")->data)[0]) < 1e-5);
    int checked = 0;
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
        snprintf(nm, sizeof nm, "%s d%s", c->name, pn);
        CHECK(!rt_fixture_compare(nm, gg, gr->data, gr->count, 1e-5, 1e-3));
        free(gg);
    }
    /* after the torch comparison: the finite differences leave the last
     * gradient at a perturbed weight */
    for (int i = 0; i < np; i++) checked += rt_test_fd_param(e, &d, B, i, 0, 1e-3, c->name);
    printf("%-22s torch ok, %3d finite differences\n", c->name, checked);
    rt_exec_destroy(e);
    rt_plan_release(p);
    rt_graph_destroy(g);
#undef REF
}

/* Indices must be integral and in [0, vocabulary): RT_EDATA names the
 * sample, for training and for prediction alike. */
static void embedding_checks(void)
{
    rt_graph *g = rt_graph_create();
    int64_t xd[2] = {RT_BATCH, 2}, wd[2] = {4, 3};
    REQUIRE(rt_graph_add_input(g, "x", RT_F32, 2, xd) == 0);
    REQUIRE(rt_graph_add_param(g, "W", 2, wd, RT_INIT_GLOROT_UNIFORM, 1, NULL) == 0);
    const char *in[2] = {"x", "W"};
    REQUIRE(rt_graph_add_node(g, "emb", "Embedding", 2, in, 0, NULL) == 0);
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_MSE;
    cfg.batch_size = 2;
    cfg.label_dtype = RT_F32;
    cfg.label_ndim = 2;
    cfg.label_dims[0] = 2;
    cfg.label_dims[1] = 3;
    rt_plan *p;
    char err[256];
    REQUIRE(rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err) == 0);
    rt_exec *e;
    REQUIRE(rt_exec_create(p, &e) == 0);
    float lab[3 * 6] = {0}, out[3 * 6];
    float good[6] = {0, 3, 1, 2, 3, 0};
    rt_data d = {.x = good, .y = lab, .y_dtype = RT_F32, .n = 3};
    CHECK_RC(rt_exec_check_data(e, &d));
    float w[12];
    CHECK_RC(rt_exec_get_param(e, 0, w));
    CHECK_RC(rt_exec_predict(e, good, 3, out));
    CHECK(memcmp(out + 3, w + 9, 12) == 0); /* sample 0, index 3: row 3 */
    float frac[6] = {0, 3, 1, 2.5f, 3, 0};
    d.x = frac;
    CHECK(rt_exec_check_data(e, &d) == RT_EDATA);
    CHECK(strstr(rt_exec_errmsg(e), "sample 1") && strstr(rt_exec_errmsg(e), "'emb'"));
    float big[6] = {0, 3, 1, 2, 4, 0};
    CHECK(rt_exec_predict(e, big, 3, out) == RT_EDATA);
    CHECK(strstr(rt_exec_errmsg(e), "sample 2") && strstr(rt_exec_errmsg(e), "[0, 4)"));
    float neg[6] = {-1, 3, 1, 2, 3, 0};
    d.x = neg;
    rt_train_result r;
    CHECK(rt_exec_train(e, &d, 1, &r, NULL, NULL, NULL) == RT_EDATA);
    CHECK(strstr(rt_exec_errmsg(e), "sample 0") != NULL);
    rt_exec_destroy(e);
    rt_plan_release(p);
    rt_graph_destroy(g);
    printf("%-22s ok\n", "embedding index checks");
}

int main(int argc, char **argv)
{
    REQUIRE(argc == 2);
    rt_fixture_load(argv[1]);
    /* mirrors main() of tests/fixtures/gen_rnn_fixtures.py */
    static const rcase cases[] = {
        {"lstm_seq", "LSTM", 1, 0, 0, 0, "sigmoid", 0},
        {"lstm_back_hard", "LSTM", 0, 1, 0, 0, "hard_sigmoid", 0},
        {"gru_ra_back_aligned", "GRU", 1, 1, 1, 1, "sigmoid", 0},
        {"gru_rb", "GRU", 0, 0, 0, 0, "sigmoid", 0},
        {"rnn_back_seq", "SimpleRNN", 1, 1, 0, 0, "sigmoid", 0},
        {"emb_lstm", "LSTM", 0, 0, 0, 0, "sigmoid", 7},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
    embedding_checks();
    rt_fixture_free();
    return rt_test_done("test_rnn");
}
