/*
 * test_badgraph.c - every validation failure returns its code and a short
 * message naming the node (or field); bad data and bad builder calls are
 * errors, never crashes. Run under ASan+UBSan too: nothing may leak.
 */
#include "rt_test.h"

static rt_graph *g;
static rt_train_config cfg;

static void begin(int64_t in_features)
{
    g = rt_graph_create();
    REQUIRE(g);
    int64_t in[] = {RT_BATCH, in_features};
    REQUIRE(rt_graph_add_input(g, "x", RT_F32, 2, in) == 0);
    rt_train_config_init(&cfg);
    cfg.batch_size = 8;
}

static void param(const char *name, int64_t d0, int64_t d1)
{
    int64_t d[2] = {d0, d1};
    REQUIRE(rt_graph_add_param(g, name, d1 ? 2 : 1, d, RT_INIT_DEFAULT, 1, NULL) == 0);
}

static void node(const char *name, const char *op, int n, const char *a,
                 const char *b, const char *c)
{
    const char *in[3] = {a, b, c};
    REQUIRE(rt_graph_add_node(g, name, op, n, in, 0, NULL) == 0);
}

/* compile must fail with want, and the message must contain each needle */
static void expect(const char *what, int want, const char *n1, const char *n2)
{
    rt_plan *p = (rt_plan *)1;
    char err[256];
    memset(err, 'z', sizeof err);
    int rc = rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err);
    int ok = rc == want && p == NULL && memchr(err, 0, sizeof err) != NULL &&
             strlen(err) < 200 && (!n1 || strstr(err, n1)) && (!n2 || strstr(err, n2));
    printf("%-34s %-16s \"%s\"\n", what, rt_err_name(rc), rc < 0 ? err : "");
    if (!ok) {
        fprintf(stderr, "%s: want %s with '%s' '%s'\n", what, rt_err_name(want),
                n1 ? n1 : "", n2 ? n2 : "");
        rt_test_failures++;
    }
    if (rc == 0) rt_plan_release(p);
    rt_graph_destroy(g);
    g = NULL;
}

int main(void)
{
    begin(4); param("W", 4, 3);
    node("dense_1", "Dense", 2, "x", "W", NULL);
    node("mystery", "Frobnicate", 1, "dense_1", NULL, NULL);
    expect("unknown op", RT_EUNKNOWN_OP, "mystery", "Frobnicate");

    begin(4); param("W", 4, 4);
    node("a", "Dense", 2, "b", "W", NULL);
    node("b", "Relu", 1, "a", NULL, NULL);
    expect("cycle", RT_ECYCLE, "'a'", "'b'");

    begin(4);
    node("self", "Relu", 1, "self", NULL, NULL);
    expect("self loop", RT_ECYCLE, "self", NULL);

    begin(4); param("W1", 4, 32); param("W2", 16, 3);
    node("dense_1", "Dense", 2, "x", "W1", NULL);
    node("dense_2", "Dense", 2, "dense_1", "W2", NULL);
    expect("shape mismatch", RT_ESHAPE, "node 'dense_2': input 'dense_1' has 32 features, W expects 16", NULL);

    begin(4); param("W", 4, 3);
    node("d", "Dense", 2, "x", "nowhere", NULL);
    expect("dangling input", RT_EGRAPH, "'d'", "nowhere");

    begin(4); param("W", 4, 3); param("W", 4, 3);
    node("d", "Dense", 2, "x", "W", NULL);
    expect("duplicate name", RT_EGRAPH, "duplicate", "'W'");

    begin(4); param("W", 4, 3);
    node("x", "Dense", 2, "x", "W", NULL);
    expect("node named like the input", RT_EGRAPH, "'x'", NULL);

    {
        g = rt_graph_create();
        int64_t in[] = {RT_BATCH, 4};
        REQUIRE(rt_graph_add_input(g, "ids", RT_I32, 2, in) == 0);
        rt_train_config_init(&cfg);
        param("W", 4, 3);
        node("emb", "Dense", 2, "ids", "W", NULL);
        expect("dtype mismatch (i32 input)", RT_EDTYPE, "ids", "i32");
    }

    begin(4); param("W", 4, 3);
    node("d", "Dense", 2, "x", "W", NULL);
    cfg.loss = RT_LOSS_CE;
    cfg.from_logits = 1; /* the output is logits */
    cfg.label_dtype = RT_I32;
    expect("dtype mismatch (CE labels)", RT_EDTYPE, "one-hot", NULL);

    begin(4); param("W", 4, 3);
    node("d", "Dense", 2, "x", "W", NULL);
    cfg.loss = RT_LOSS_MSE;
    cfg.label_dtype = RT_F32;
    cfg.label_ndim = 1;
    cfg.label_dims[0] = 2;
    expect("label shape mismatch", RT_ESHAPE, "labels", NULL);

    begin(4); param("W", 4, 3);
    node("d", "Dense", 2, "x", "W", NULL);
    cfg.loss = RT_LOSS_MSE;
    cfg.label_dtype = RT_F32;
    cfg.label_ndim = 3;
    cfg.label_dims[0] = cfg.label_dims[1] = cfg.label_dims[2] = INT64_C(1) << 30;
    expect("label size overflow", RT_EOVERFLOW, "labels have more than", NULL);

    {
        /* Reshape to 2^31 x 2^31 x 2: each dim is fine, the product is not */
        begin(4);
        int64_t shp[3] = {INT64_C(1) << 31, INT64_C(1) << 31, 2};
        rt_attr a = {.name = "shape", .kind = RT_ATTR_INTS, .n = 3, .ints = shp};
        const char *in[1] = {"x"};
        REQUIRE(rt_graph_add_node(g, "r", "Reshape", 1, in, 1, &a) == 0);
        expect("shape product overflow", RT_ESHAPE, "node 'r'", NULL);
    }

    {
        g = rt_graph_create();
        int64_t in[] = {RT_BATCH, -5};
        REQUIRE(rt_graph_add_input(g, "x", RT_F32, 2, in) == 0);
        rt_train_config_init(&cfg);
        node("r", "Relu", 1, "x", NULL, NULL);
        expect("absurd dim", RT_ESHAPE, "'x'", "-5");
    }
    {
        g = rt_graph_create();
        int64_t in[] = {RT_BATCH, 1 << 20, 1 << 20};
        REQUIRE(rt_graph_add_input(g, "x", RT_F32, 3, in) == 0);
        rt_train_config_init(&cfg);
        node("r", "Relu", 1, "x", NULL, NULL);
        expect("size overflow (input)", RT_EOVERFLOW, "'x'", NULL);
    }
    {
        begin(4);
        int64_t big[] = {INT64_C(1) << 40};
        rt_attr shape = {.name = "shape", .kind = RT_ATTR_INTS, .n = 1, .ints = big};
        const char *in[] = {"x"};
        /* a reshape to a huge size must fail the element count check */
        REQUIRE(rt_graph_add_node(g, "huge", "Reshape", 1, in, 1, &shape) == 0);
        expect("absurd reshape", RT_ESHAPE, "huge", NULL);
    }
    {
        begin(4);
        int64_t bad[] = {4, -2};
        REQUIRE(rt_graph_add_param(g, "W", 2, bad, RT_INIT_ZEROS, 1, NULL) == 0);
        node("d", "Dense", 2, "x", "W", NULL);
        expect("absurd param dim", RT_ESHAPE, "'W'", "-2");
    }
    {
        begin(4);
        int64_t huge[] = {1 << 20, 1 << 20, 1 << 20};
        REQUIRE(rt_graph_add_param(g, "T", 3, huge, RT_INIT_ZEROS, 1, NULL) == 0);
        node("r", "Relu", 1, "x", NULL, NULL);
        expect("size overflow (param)", RT_EOVERFLOW, "'T'", NULL);
    }
    {
        begin(4);
        int64_t wd[] = {4, 1 << 30};
        /* 4 * 2^30 floats per sample times the batch overflows the limit */
        REQUIRE(rt_graph_add_param(g, "W", 2, wd, RT_INIT_ZEROS, 1, NULL) == 0);
        node("wide", "Dense", 2, "x", "W", NULL);
        expect("size overflow (node)", RT_EOVERFLOW, "wide", NULL);
    }

    begin(4);
    node("d", "Dense", 1, "x", NULL, NULL);
    expect("arity", RT_EGRAPH, "'d'", "Dense");

    {
        begin(4);
        rt_attr rate = {.name = "rate", .kind = RT_ATTR_STR, .s = "half"};
        const char *in[] = {"x"};
        REQUIRE(rt_graph_add_node(g, "drop", "Dropout", 1, in, 1, &rate) == 0);
        expect("attribute kind", RT_EINVAL, "drop", "rate");
    }
    {
        begin(4);
        rt_attr rate = {.name = "rate", .kind = RT_ATTR_FLOAT, .f = 1.5};
        const char *in[] = {"x"};
        REQUIRE(rt_graph_add_node(g, "drop", "Dropout", 1, in, 1, &rate) == 0);
        expect("attribute range", RT_EINVAL, "drop", "1.5");
    }

    begin(3); param("P", 4, 0);
    node("sum", "Add", 2, "x", "P", NULL);
    expect("broadcast mismatch", RT_ESHAPE, "sum", "cannot broadcast");

    begin(4); param("W", 4, 3);
    node("d", "Dense", 2, "x", "W", NULL);
    REQUIRE(rt_graph_set_output(g, "ghost") == 0);
    expect("undefined output", RT_EGRAPH, "ghost", NULL);

    begin(4); param("P", 4, 3); param("Q", 3, 2);
    node("d", "Dense", 2, "x", "P", NULL);
    node("pq", "MatMul", 2, "P", "Q", NULL);
    REQUIRE(rt_graph_set_output(g, "pq") == 0);
    expect("output without batch", RT_ESHAPE, "pq", "batch");

    {
        begin(4);
        int64_t in2[] = {RT_BATCH, 2};
        REQUIRE(rt_graph_add_input(g, "x2", RT_F32, 2, in2) == 0);
        node("r", "Relu", 1, "x", NULL, NULL);
        expect("two inputs", RT_EGRAPH, "inputs", NULL);
    }

    begin(4); param("W", 4, 3);
    node("d", "Dense", 2, "x", "W", NULL);
    cfg.batch_size = 0;
    expect("batch size 0", RT_EINVAL, "batch_size", NULL);

    begin(4); param("W", 4, 3);
    node("d", "Dense", 2, "x", "W", NULL);
    cfg.opt = (rt_opt_kind)99;
    expect("unknown optimizer", RT_EINVAL, "optimizer", NULL);

    begin(4); param("W", 4, 3);
    node("d", "Dense", 2, "x", "W", NULL);
    cfg.sched = RT_SCHED_COSINE;
    expect("cosine without total", RT_EINVAL, "total_steps", NULL);

    g = rt_graph_create();
    rt_train_config_init(&cfg);
    expect("empty graph", RT_EGRAPH, "empty", NULL);

    /* builder rejects what it cannot record */
    g = rt_graph_create();
    int64_t d9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    CHECK(rt_graph_add_input(g, NULL, RT_F32, 1, d9) == RT_EINVAL);
    CHECK(rt_graph_add_input(g, "x", RT_F32, 9, d9) == RT_EINVAL);
    CHECK(strstr(rt_graph_errmsg(g), "rank 9") != NULL);
    int64_t d0[] = {0};
    float v0 = 0;
    CHECK(rt_graph_add_param(g, "p", 1, d0, RT_INIT_ZEROS, 1, &v0) == RT_EINVAL);
    CHECK(rt_graph_add_node(g, "n", "Relu", -1, NULL, 0, NULL) == RT_EINVAL);
    CHECK(rt_graph_add_node(g, "n", "", 0, NULL, 0, NULL) == RT_EINVAL);
    rt_attr bad = {.name = NULL};
    const char *in1[] = {"x"};
    CHECK(rt_graph_add_node(g, "n", "Relu", 1, in1, 1, &bad) == RT_EINVAL);
    rt_graph_destroy(g);
    CHECK(rt_plan_compile(NULL, &cfg, &(rt_plan *){0}, NULL, NULL, 0) == RT_EINVAL);

    /* NULL is a no-op for destructors */
    rt_graph_destroy(NULL);
    rt_plan_release(NULL);
    rt_exec_destroy(NULL);

    /* a cancelled compile stops at a pass boundary and keeps nothing */
    {
        begin(4); param("W", 4, 3);
        node("d", "Dense", 2, "x", "W", NULL);
        cfg.from_logits = 1;
        rt_plan *p = (rt_plan *)&cfg;
        char err[256];
        int cancel = 1;
        CHECK(rt_plan_compile_cancellable(g, &cfg, &cancel, &p, NULL, err, sizeof err) ==
              RT_ECANCELLED);
        CHECK(p == NULL && strstr(err, "after pass validate") != NULL);
        cancel = 0;
        CHECK(rt_plan_compile_cancellable(g, &cfg, &cancel, &p, NULL, err, sizeof err) == 0);
        rt_plan_release(p);
        rt_graph_destroy(g);
        g = NULL;
    }

    /* bad data is an error with a message */
    {
        begin(4); param("W", 4, 3);
        node("d", "Dense", 2, "x", "W", NULL);
        cfg.from_logits = 1;
        rt_plan *p;
        char err[256];
        REQUIRE(rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err) == 0);
        rt_exec *e;
        REQUIRE(rt_exec_create(p, &e) == 0);
        float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        int32_t y[2] = {1, 3};
        rt_data d = {.x = x, .y = y, .y_dtype = RT_I32, .n = 2};
        CHECK(rt_exec_train(e, &d, 1, NULL, NULL, NULL, NULL) == RT_EDATA);
        CHECK(strstr(rt_exec_errmsg(e), "label 3") != NULL);
        y[1] = -1;
        CHECK(rt_exec_check_data(e, &d) == RT_EDATA);
        y[1] = 2;
        d.y_dtype = RT_F32;
        CHECK(rt_exec_check_data(e, &d) == RT_EDTYPE);
        d.y_dtype = RT_I32;
        d.n = 0;
        CHECK(rt_exec_check_data(e, &d) == RT_EDATA);
        d.n = 2;
        d.y = NULL;
        CHECK(rt_exec_evaluate(e, &d, NULL) == RT_EDATA);
        d.y = y;
        CHECK(rt_exec_train(e, &d, -1, NULL, NULL, NULL, NULL) == RT_EINVAL);
        CHECK(rt_exec_train(e, &d, 3, NULL, NULL, NULL, NULL) == 0);
        CHECK(rt_exec_predict(e, NULL, 2, x) == RT_EDATA);
        CHECK(rt_exec_get_param(e, 7, x) == RT_EINVAL);
        CHECK(rt_plan_param_info(p, -1, NULL, NULL, NULL) == RT_EINVAL);
        CHECK(rt_exec_compute_grads(e, &d, 9, NULL) == RT_EINVAL);
        rt_exec_destroy(e);
        rt_plan_release(p);
        rt_graph_destroy(g);
    }
    return rt_test_done("test_badgraph");
}
