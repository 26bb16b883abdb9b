/*
 * test_biggraph.c - import and compile are linear in graph size: a deep
 * Dense chain (Sequential, and the same chain as a Functional model, whose
 * layers name their inbound layers) is imported from Keras JSON and
 * compiled; the plan must have one forward call per layer (Dense+Relu
 * fused) and train a step.
 *
 * Linear is checked by counting work, not timing it (the machine may be
 * loaded): the engine's calls to the C library's string, memory and
 * allocation functions and to json-c's member lookup are redirected here at
 * link time (-Wl,--wrap=...; see CMakeLists.txt) and counted, calls and
 * bytes. Import and compile of 2n layers must make at most 2.25 times the
 * calls (and move at most 2.25 times the bytes) of n layers: a name looked
 * up by a scan over the nodes, a copy of the graph per node, or an array
 * grown by one makes that 4 times. The times are printed only.
 *
 *     test_engine_biggraph [layers]      (default 20000; n = layers / 2)
 */
#include <stdarg.h>
#include <stdint.h>
#include <time.h>

#include "import_keras.h"
#include "rt_engine_impl.h"
#include "rt_test.h"

/* ---------------------------------------------------- counted functions */
enum { W_STRCMP, W_STRLEN, W_MEMCPY, W_MEMSET, W_ALLOC, W_JSON_GET, W_MEMCPY_B, W_MEMSET_B,
       W_N };
static const char *const w_name[W_N] = {"strcmp calls", "strlen calls", "memcpy calls",
                                        "memset calls", "allocations", "json lookups",
                                        "memcpy bytes", "memset bytes"};
static uint64_t w[W_N];

int __real_strcmp(const char *a, const char *b);
size_t __real_strlen(const char *s);
void *__real_memcpy(void *d, const void *s, size_t n);
void *__real_memset(void *d, int c, size_t n);
void *__real_malloc(size_t n);
void *__real_calloc(size_t a, size_t b);
void *__real_realloc(void *p, size_t n);
struct json_object;
int __real_json_object_object_get_ex(const struct json_object *o, const char *k,
                                     struct json_object **v);
int __wrap_strcmp(const char *a, const char *b) { w[W_STRCMP]++; return __real_strcmp(a, b); }
size_t __wrap_strlen(const char *s) { w[W_STRLEN]++; return __real_strlen(s); }
void *__wrap_memcpy(void *d, const void *s, size_t n)
{
    w[W_MEMCPY]++;
    w[W_MEMCPY_B] += n;
    return __real_memcpy(d, s, n);
}
void *__wrap_memset(void *d, int c, size_t n)
{
    w[W_MEMSET]++;
    w[W_MEMSET_B] += n;
    return __real_memset(d, c, n);
}
void *__wrap_malloc(size_t n) { w[W_ALLOC]++; return __real_malloc(n); }
void *__wrap_calloc(size_t a, size_t b) { w[W_ALLOC]++; return __real_calloc(a, b); }
void *__wrap_realloc(void *p, size_t n) { w[W_ALLOC]++; return __real_realloc(p, n); }
int __wrap_json_object_object_get_ex(const struct json_object *o, const char *k,
                                     struct json_object **v)
{
    w[W_JSON_GET]++;
    return __real_json_object_object_get_ex(o, k, v);
}

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static double now_s(void) { return clock_s(CLOCK_MONOTONIC); }
/* CPU time: on a shared machine the wall time mostly measures the others */
static double cpu_s(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }

/* appends to a growing buffer; the generated JSON is a few MB */
typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;

static void sb_put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_put(sbuf *b, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        REQUIRE(k >= 0);
        if ((size_t)k < b->cap - b->n) {
            b->n += (size_t)k;
            return;
        }
        b->cap = b->cap * 2 + (size_t)k + 64;
        b->p = realloc(b->p, b->cap);
        REQUIRE(b->p);
    }
}

/* layers Dense(4) layers, every other one with a relu */
static char *make_json(int layers, int functional, size_t *len)
{
    sbuf b = {malloc(1 << 16), 0, 1 << 16};
    REQUIRE(b.p);
    if (!functional) {
        sb_put(&b, "{\"class_name\":\"Sequential\",\"config\":{\"name\":\"deep\",\"layers\":["
                   "{\"class_name\":\"InputLayer\",\"config\":{\"name\":\"x\","
                   "\"batch_input_shape\":[null,4]}}");
        for (int i = 0; i < layers; i++)
            sb_put(&b, ",{\"class_name\":\"Dense\",\"config\":{\"name\":\"d%d\",\"units\":4,"
                       "\"activation\":\"%s\"}}", i, i % 2 ? "relu" : "linear");
        sb_put(&b, "]}}");
    } else {
        sb_put(&b, "{\"class_name\":\"Functional\",\"config\":{\"name\":\"deep\",\"layers\":["
                   "{\"class_name\":\"InputLayer\",\"name\":\"x\",\"config\":{\"name\":\"x\","
                   "\"batch_input_shape\":[null,4]},\"inbound_nodes\":[]}");
        for (int i = 0; i < layers; i++) {
            char prev[32];
            snprintf(prev, sizeof prev, i ? "d%d" : "x", i - 1);
            sb_put(&b, ",{\"class_name\":\"Dense\",\"name\":\"d%d\",\"config\":{\"name\":\"d%d\","
                       "\"units\":4,\"activation\":\"%s\"},\"inbound_nodes\":[[[\"%s\",0,0,{}]]]}",
                   i, i, i % 2 ? "relu" : "linear", prev);
        }
        sb_put(&b, "],\"input_layers\":[[\"x\",0,0]],\"output_layers\":[[\"d%d\",0,0]]}}",
               layers - 1);
    }
    *len = b.n;
    return b.p;
}

/* Imports and compiles a chain of layers, trains one step; work gets what
 * import + compile counted. */
static void run(int layers, int functional, uint64_t work[W_N])
{
    size_t len;
    char *json = make_json(layers, functional, &len);
    char err[256];
    rt_graph *g = NULL;
    memset(w, 0, sizeof w);
    const double c0 = cpu_s(), t0 = now_s();
    int rc = rt_keras_import(json, len, &g, err, sizeof err);
    const double t1 = now_s();
    if (rc < 0) fprintf(stderr, "import: %s\n", err);
    REQUIRE(rc == 0);
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_MSE;
    cfg.opt = RT_OPT_SGD;
    cfg.lr = 1e-3f;
    cfg.batch_size = 8;
    cfg.label_dtype = RT_F32;
    cfg.label_ndim = 1;
    cfg.label_dims[0] = 4;
    cfg.metrics = 0;
    rt_plan *p = NULL;
    rt_compile_report rep;
    rc = rt_plan_compile(g, &cfg, &p, &rep, err, sizeof err);
    const double t2 = now_s(), c2 = cpu_s();
    memcpy(work, w, sizeof w);
    if (rc < 0) fprintf(stderr, "compile: %s\n", err);
    REQUIRE(rc == 0);
    /* where the backend fuses Dense+Relu (cpu), one forward call per Dense
     * and one backward each; else (ref) the Relus' too */
    const rt__backend *be = rt__backend_current();
    const int fuses = be->kernel(be->context, &rt__op_dense, &rt__op_relu) != NULL;
    CHECK(rep.n_nodes == (uint32_t)(layers + layers / 2));
    CHECK(rep.n_kernels == (uint32_t)(2 * (layers + (fuses ? 0 : layers / 2)) + 3));
    CHECK(rep.trainable_param_count == (uint64_t)layers * 20);
    /* one step runs and the loss is a number */
    rt_exec *e = NULL;
    CHECK_RC(rt_exec_create(p, &e));
    float x[8 * 4], y[8 * 4];
    for (int i = 0; i < 32; i++) {
        x[i] = (float)(i % 7) * 0.1f;
        y[i] = (float)(i % 3) * 0.1f;
    }
    rt_data d = {.x = x, .y = y, .y_dtype = RT_F32, .n = 8};
    rt_train_result res;
    CHECK_RC(rt_exec_train(e, &d, 1, &res, NULL, NULL, NULL));
    CHECK(res.steps_run == 1 && isfinite(res.last.loss));
    printf("%s %d layers (%.1f MB JSON, loss %.6g, arena %.1f MB): import %.3f s, compile %.3f s,"
           " both %.3f s of CPU", functional ? "functional" : "sequential", layers,
           (double)len / 1e6, res.last.loss, (double)rep.arena_bytes / 1e6, t1 - t0, t2 - t1,
           c2 - c0);
    for (int i = 0; i < RT_COMPILE_PASSES && rep.pass_ns[i]; i++)
        printf("%s %s %.3f", i ? "," : " (", rt_compile_pass_name(i), 1e-9 * (double)rep.pass_ns[i]);
    printf("%s\n", rep.pass_ns[0] ? " s)" : "");
    rt_exec_destroy(e);
    rt_plan_release(p);
    rt_graph_destroy(g);
    free(json);
}

int main(int argc, char **argv)
{
    int layers = argc > 1 ? atoi(argv[1]) : 20000;
    REQUIRE(layers >= 200 && layers % 4 == 0);
    for (int functional = 0; functional < 2; functional++) {
        uint64_t half[W_N], full[W_N];
        run(layers / 2, functional, half);
        run(layers, functional, full);
        for (int k = 0; k < W_N; k++) {
            const double ratio = (double)full[k] / (double)(half[k] ? half[k] : 1);
            printf("  %-14s %12llu at %d layers, %12llu at %d: x%.3f\n", w_name[k],
                   (unsigned long long)half[k], layers / 2, (unsigned long long)full[k], layers,
                   ratio);
            /* the counters see the work: each call counter is at least one per
             * layer (the arena makes allocations few) */
            if (half[k] < (k == W_ALLOC ? 1 : (uint64_t)layers / 2)) {
                fprintf(stderr, "%s: %s %llu for %d layers: not counted\n",
                        functional ? "functional" : "sequential", w_name[k],
                        (unsigned long long)half[k], layers / 2);
                rt_test_failures++;
            }
            if (ratio > 2.25) {
                fprintf(stderr, "%s: %s grow x%.3f from %d to %d layers (linear: x2)\n",
                        functional ? "functional" : "sequential", w_name[k], ratio, layers / 2,
                        layers);
                rt_test_failures++;
            }
        }
    }
    return rt_test_done("engine_biggraph");
}
