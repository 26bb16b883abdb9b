/*
 * test_noalloc.c - a training step allocates nothing. The engine's calls to
 * malloc/calloc/realloc/aligned_alloc are redirected here at link time
 * (-Wl,--wrap=...; see CMakeLists.txt) and counted: after the first call
 * (which allocates the epoch permutation for a new data set), training,
 * single-step calls, evaluation and prediction must not allocate.
 * W-A stays below the small-GEMM threshold, so oneDNN is not involved.
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
    return rt_test_done("test_noalloc");
}
