/*
 * test_noalloc.c - a training step allocates nothing. The engine's calls to
 * malloc/calloc/realloc/aligned_alloc are redirected here at link time
 * (-Wl,--wrap=...; see CMakeLists.txt) and counted: after the first call
 * (which allocates the epoch permutation for a new data set), training,
 * single-step calls, evaluation and prediction must not allocate.
 * W-A stays below the small-GEMM threshold, so oneDNN is not involved.
 * Then the same for a recurrent model: Embedding -> GRU -> LSTM (going
 * backwards) -> SimpleRNN -> Dense, whose states live in the workspace.
 */
#include <stddef.h>

#include "rt_test.h"

void *__real_malloc(size_t n);
void *__real_calloc(size_t a, size_t b);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t al, size_t n);
static long allocs;
void *__wrap_malloc(size_t n) { allocs++; return __real_malloc(n); }
void *__wrap_calloc(size_t a, size_t b) { allocs++; return __real_calloc(a, b); }
void *__wrap_realloc(void *p, size_t n) { allocs++; return __real_realloc(p, n); }
void *__wrap_aligned_alloc(size_t al, size_t n) { allocs++; return __real_aligned_alloc(al, n); }

static void param(rt_graph *g, const char *name, int64_t d0, int64_t d1)
{
    int64_t d[2] = {d0, d1};
    REQUIRE(rt_graph_add_param(g, name, d1 ? 2 : 1, d, RT_INIT_GLOROT_UNIFORM, 1, NULL) == 0);
}

static void node(rt_graph *g, const char *name, const char *op, int n, const char *a,
                 const char *b, const char *c, const char *d, int n_attr, const rt_attr *at)
{
    const char *in[4] = {a, b, c, d};
    REQUIRE(rt_graph_add_node(g, name, op, n, in, n_attr, at) == 0);
}

static void recurrent(void)
{
    enum { N = 40, T = 12, V = 30 };
    rt_graph *g = rt_graph_create();
    int64_t xd[2] = {RT_BATCH, T}, bd[2] = {2, 24};
    REQUIRE(rt_graph_add_input(g, "x", RT_F32, 2, xd) == 0);
    param(g, "E", V, 8);
    param(g, "gk", 8, 24); param(g, "gr", 8, 24);
    REQUIRE(rt_graph_add_param(g, "gb", 2, bd, RT_INIT_ZEROS, 1, NULL) == 0);
    param(g, "lk", 8, 32); param(g, "lr", 8, 32); param(g, "lb", 32, 0);
    param(g, "sk", 8, 8); param(g, "sr", 8, 8); param(g, "sb", 8, 0);
    param(g, "dk", 8, 1);
    const rt_attr seq = {.name = "return_sequences", .kind = RT_ATTR_INT, .i = 1};
    const rt_attr back[2] = {seq, {.name = "go_backwards", .kind = RT_ATTR_INT, .i = 1}};
    node(g, "e", "Embedding", 2, "x", "E", NULL, NULL, 0, NULL);
    node(g, "g", "GRU", 4, "e", "gk", "gr", "gb", 1, &seq);
    node(g, "l", "LSTM", 4, "g", "lk", "lr", "lb", 2, back);
    node(g, "s", "SimpleRNN", 4, "l", "sk", "sr", "sb", 0, NULL);
    node(g, "y", "Dense", 2, "s", "dk", NULL, NULL, 0, NULL);
    rt_train_config c;
    rt_train_config_init(&c);
    c.loss = RT_LOSS_MSE;
    c.label_dtype = RT_F32;
    c.batch_size = 16;
    rt_plan *p;
    char err[256];
    if (rt_plan_compile(g, &c, &p, NULL, err, sizeof err) != 0) {
        fprintf(stderr, "recurrent: %s\n", err);
        exit(1);
    }
    rt_exec *e;
    REQUIRE(rt_exec_create(p, &e) == 0);
    float x[N * T], y[N], out[N];
    for (int i = 0; i < N * T; i++) x[i] = (float)((i * 7) % V);
    for (int i = 0; i < N; i++) y[i] = (float)(i % 3);
    rt_data d = {.x = x, .y = y, .y_dtype = RT_F32, .n = N};
    CHECK_RC(rt_exec_train(e, &d, 1, NULL, NULL, NULL, NULL)); /* allocates the permutation */
    long before = allocs;
    CHECK_RC(rt_exec_train(e, &d, 30, NULL, NULL, NULL, NULL));
    rt_metrics m;
    CHECK_RC(rt_exec_evaluate(e, &d, &m));
    CHECK_RC(rt_exec_predict(e, x, N, out));
    printf("recurrent model: allocations during 30 steps, evaluate, predict: %ld\n",
           allocs - before);
    CHECK(allocs == before);
    rt_exec_destroy(e);
    rt_plan_release(p);
    rt_graph_destroy(g);
}

int main(int argc, char **argv)
{
    float x[600];
    int32_t y[150];
    REQUIRE(rt_test_load_iris(argc > 1 ? argv[1] : "tests/fixtures/iris.csv", x, y) == 150);
    rt_graph *g = rt_test_wa_graph(NULL, NULL, NULL, NULL);
    rt_train_config c;
    rt_train_config_init(&c);
    c.loss = RT_LOSS_LOGCOSH;
    c.lr = 0.1f;
    c.batch_size = 20;
    c.clip_norm = 5.0f;
    rt_plan *p;
    long before = allocs;
    REQUIRE(rt_plan_compile(g, &c, &p, NULL, NULL, 0) == 0);
    CHECK(allocs > before); /* the wrapper does see the engine's allocations */
    rt_exec *e;
    REQUIRE(rt_exec_create(p, &e) == 0);
    rt_data d = {.x = x, .y = y, .y_dtype = RT_I32, .n = 150};
    CHECK_RC(rt_exec_train(e, &d, 1, NULL, NULL, NULL, NULL)); /* allocates the permutation */
    before = allocs;
    CHECK_RC(rt_exec_train(e, &d, 500, NULL, NULL, NULL, NULL));
    for (int i = 0; i < 100; i++) CHECK_RC(rt_exec_train(e, &d, 1, NULL, NULL, NULL, NULL));
    rt_metrics m;
    CHECK_RC(rt_exec_evaluate(e, &d, &m));
    float out[150 * 3];
    CHECK_RC(rt_exec_predict(e, x, 150, out));
    double l;
    CHECK_RC(rt_exec_compute_grads(e, &d, 20, &l));
    printf("allocations during 600 steps, evaluate, predict, grads: %ld\n", allocs - before);
    CHECK(allocs == before);
    rt_exec_destroy(e);
    rt_plan_release(p);
    rt_graph_destroy(g);
    recurrent();
    return rt_test_done("test_noalloc");
}
