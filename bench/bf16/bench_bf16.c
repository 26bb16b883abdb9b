/*
 * bench_bf16.c - mixed bfloat16 against float32 on the CPU backend: the
 * bf16 / float32 step-time ratio of W-B (32x32x3, batch 256), W-C (the
 * 784-512-512-10 MLP, batch 128), the Fashion-MNIST CNN (bench/conv's
 * Keras JSON, 28x28x1, batch 128), MobileNet v1 (224x224, batch 16),
 * ResNet-18 for CIFAR (batch 64) and Keras' Inception v3 (75x75 unless
 * --inception-size, batch 32), each the same graph compiled both ways,
 * timed in interleaved rounds (the machine's noise hits both), medians;
 * each plan's GFLOP/s against its precision's limit measured at the start
 * of the same run (bench_limit.h: warm sgemm, bf16 matmul), the arena
 * bytes of both plans and how many ops computed in bf16. Prints numbers,
 * asserts nothing.
 *
 *     build/bench/bf16/bench_bf16 [--reps N] [--conv-min-c C] [--col-oc C]
 *         [--col-px P] [--col-rows R] [--w-round 0|1] [--f32-k K]
 *         [--ops N] [--only wb|wc|fashion|mobilenet|resnet|inception] [--prec f32|bf16]
 *
 * --conv-min-c C: Conv2D layers with fewer than C input channels run
 * float32 (rt_kern_bf16_conv_min_c, default 1: every Conv2D in bf16; 4
 * runs the 3-channel stems float32), to measure the first layer's share.
 * --col-oc C: a Conv2D's backward-weights runs as im2col matmuls from C
 * output channels (rt_kern_bf16_col_oc, default 256; a large C runs every
 * one on oneDNN's bf16 backward-weights, as before stop 10).
 * --col-px P, --col-rows R: that path's largest output image in pixels
 * (rt_kern_bf16_col_px, default 64) and its chunks' least rows
 * (rt_kern_bf16_col_rows, default 1024), to re-tune them.
 * --w-round 0: a Conv2D's forward casts its weights with oneDNN's one
 * float32 -> bf16 reorder, as before stop 14 (rt_kern_bf16_w_round;
 * default 1: rounded in Keras' layout, then a bf16 reorder).
 * --f32-k K: a Conv2D with fewer than K products a sum multiplies its
 * bf16 values on the float32 kernels (rt_kern_bf16_f32_k, default 32;
 * 0: every one on oneDNN's bf16 primitives, as before stop 13).
 * --ops N: after a workload's row, its float32 and bf16 plans' kernel
 * calls timed one by one (bench_plan.h's bp_op_profile: N passes of each
 * plan's calls, interleaved, on an arena of small random values), a row
 * per op type and direction (depthwise and grouped Conv2D apart from
 * dense ones) with ms a step in each plan and their ratio.
 * --prec P: time only that precision's plan (its columns of the other
 * read 0), for a profiler or ONEDNN_VERBOSE=1 to see one plan alone.
 * A third plan, timed in the same rounds, is the bf16 one with every
 * activation stored float32 (rt_kern_bf16_act_store 0: the products round
 * copies of their inputs, as before bf16 storage): the "bf16 f32-stored"
 * columns.
 *
 * W-B and ResNet-18 are bench/onnx/models.py's ONNX exports (python3-torch
 * writes them to a temporary folder), read with NHWC data as the Keras
 * models take it. Numbers taken beside other work are loaded ones.
 */
#define RT_BENCH_NAME "bench_bf16"
#include <stdint.h>
#include <time.h>
#include <string.h>
#include <unistd.h>

#include "bench_limit.h"
#include "bench_util.h"
#include "import_keras.h"
#include "import_onnx.h"
#include "rt_engine.h"
#include "rt_engine_impl.h"
#include "bench_plan.h"

extern int rt_kern_bf16_conv_min_c; /* rt_kern_bf16.c */
extern int rt_kern_bf16_act_store;  /* rt_kern_bf16act.c */
extern int rt_kern_bf16_col_oc;     /* rt_kern_bf16.c */
extern int rt_kern_bf16_col_px;     /* rt_kern_bf16.c */
extern int rt_kern_bf16_col_rows;   /* rt_kern_bf16.c */
extern int rt_kern_bf16_w_round;    /* rt_kern_bf16.c */
extern int rt_kern_bf16_f32_k;      /* rt_kern_bf16.c */

static uint8_t *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        die("open", path);
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n)
        die("read", path);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static rt_plan *compile(const rt_graph *g, rt_train_config *cfg, int prec)
{
    rt_plan *p;
    rt_compile_report rep;
    char err[256];
    cfg->precision = prec;
    if (rt_plan_compile(g, cfg, &p, &rep, err, sizeof err) < 0)
        die("compile", err);
    return p;
}

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* wall ms a step; *cpu: the process's CPU ms a step (all threads: with
 * OMP_NUM_THREADS=1 a measure of the work that a loaded machine disturbs
 * less than the wall clock) */
static double step_ms(rt_exec *e, const rt_data *d, int steps, double *cpu)
{
    rt_train_result r;
    const double t0 = now_s(), c0 = cpu_s();
    if (rt_exec_train(e, d, steps, &r, NULL, NULL, NULL) < 0)
        die("train", rt_exec_errmsg(e));
    *cpu = (cpu_s() - c0) * 1e3 / steps;
    return (now_s() - t0) * 1e3 / steps;
}

static int only_prec = -1;   /* --prec: run one precision alone (profiling) */
static int ops_reps;         /* --ops N: the per-op profile, N timed passes */
static rt_bench_limit limit; /* measured once, before the rows */

static void row(const char *name, const rt_graph *g, rt_train_config *cfg, int reps, int steps)
{
    rt_plan *p[3] = {compile(g, cfg, RT_PREC_F32), compile(g, cfg, RT_PREC_BF16), NULL};
    rt_kern_bf16_act_store = 0;
    p[2] = compile(g, cfg, RT_PREC_BF16);
    rt_kern_bf16_act_store = 1;
    int64_t dims[RT_MAX_DIMS], per = 1;
    const int nd = rt_plan_input_shape(p[0], dims);
    for (int k = 0; k < nd; k++)
        per *= dims[k];
    const int64_t n = (int64_t)cfg->batch_size * 2;
    float *x = malloc(sizeof(float) * (size_t)(n * per));
    int32_t *y = malloc(sizeof(int32_t) * (size_t)n);
    if (!x || !y)
        die("malloc", name);
    for (int64_t i = 0; i < n * per; i++)
        x[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    for (int64_t i = 0; i < n; i++)
        y[i] = (int32_t)(i % 10);
    const rt_data d = {.x = x, .y = y, .y_dtype = RT_I32, .n = n};
    rt_exec *e[3];
    for (int k = 0; k < 3; k++) {
        if (rt_exec_create(p[k], &e[k]) < 0)
            die("exec", name);
        double c;
        if (only_prec < 0 || only_prec == k)
            step_ms(e[k], &d, 2, &c); /* warm: first-touch of the arena, primitives */
    }
    double t[3][64] = {{0}}, c[3][64] = {{0}};
    if (reps > 64)
        reps = 64;
    for (int r = 0; r < reps; r++)
        for (int k = 0; k < 3; k++)
            if (only_prec < 0 || only_prec == k)
                t[k][r] = step_ms(e[k], &d, steps, &c[k][r]);
    const double m32 = median(t[0], reps), m16 = median(t[1], reps);
    const double c32 = median(c[0], reps), c16 = median(c[1], reps);
    const double m16f = median(t[2], reps), c16f = median(c[2], reps);
    const rt_compile_report *r32 = rt_plan_report(p[0]), *r16 = rt_plan_report(p[1]);
    const rt_compile_report *r16f = rt_plan_report(p[2]);
    /* achieved rates: the plan's FLOPs a step over the median step, each
     * against its own precision's limit (the bf16 plan's against the bf16
     * matmul rate) */
    const double gf = (double)r32->flops_per_step * 1e-9;
    const double g32 = m32 > 0 ? gf / m32 * 1e3 : 0, g16 = m16 > 0 ? gf / m16 * 1e3 : 0;
    printf("| %s | %d | %.2f | %.2f | **%.3f** | %.2f | %.2f | %.3f | %.0f (%.0f%%) | %.0f "
           "(**%.0f%%**) | %u of %d | %.1f | %.1f | %.2f | %.3f | %.3f | %.1f |\n",
           name, cfg->batch_size, m32, m16, m16 / m32, c32, c16, c16 / c32, g32,
           limit.f32 > 0 ? 100 * g32 / limit.f32 : 0, g16,
           limit.bf16 > 0 ? 100 * g16 / limit.bf16 : 0, r16->n_bf16, rt_plan_n_nodes(p[1]),
           r32->arena_bytes / 1048576.0, r16->arena_bytes / 1048576.0, m16f, m16f / m32,
           c16f / c32, r16f->arena_bytes / 1048576.0);
    fflush(stdout);
    if (ops_reps > 0) {
        /* the float32 and bf16 plans' kernel calls, one op type and
         * direction a row (bench_plan.h); the steps' rest is gather, loss
         * and the optimizer */
        bp_run b[2];
        static const char *const nm[2] = {"float32", "bf16"};
        double tot[2];
        for (int k = 0; k < 2; k++)
            bp_open(&b[k], p[k], cfg->batch_size);
        printf("\n%s, per op and direction, ms a step (medians of %d passes of the calls):\n",
               name, ops_reps);
        bp_op_profile(b, 2, nm, ops_reps, tot);
        printf("step wall ms beside the kernels: float32 %.2f, bf16 %.2f (the optimizer, loss "
               "and gather)\n\n",
               m32 - tot[0], m16 - tot[1]);
        for (int k = 0; k < 2; k++)
            bp_close(&b[k]);
    }
    for (int k = 0; k < 3; k++) {
        rt_exec_destroy(e[k]);
        rt_plan_release(p[k]);
    }
    free(x);
    free(y);
}

static rt_graph *onnx_graph(const char *dir, const char *file)
{
    char path[600], err[512];
    size_t len;
    snprintf(path, sizeof path, "%s/%s", dir, file);
    uint8_t *onnx = read_all(path, &len);
    rt_onnx_opts io = {.data_nhwc = 1};
    rt_graph *g;
    if (rt_onnx_import_opts(onnx, len, &io, &g, err, sizeof err) < 0)
        die("import", err);
    free(onnx);
    return g;
}

/* a Keras JSON model at path */
static rt_graph *keras_graph(const char *path)
{
    char err[512];
    size_t len;
    uint8_t *js = read_all(path, &len);
    rt_graph *g;
    if (rt_keras_import((const char *)js, len, &g, err, sizeof err) < 0)
        die("import", err);
    free(js);
    return g;
}

/* Keras' InceptionV3 at size x size, 10 classes, from
 * examples/inception/gen_keras_inception_v3.py (as bench/inception) */
static rt_graph *inception_graph(const char *dir, int size)
{
    char path[600], cmd[1400];
    snprintf(path, sizeof path, "%s/inception.json", dir);
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 %s/examples/inception/gen_keras_inception_v3.py %s %d 10",
             RT_SOURCE_DIR, path, size);
    if (system(cmd) != 0)
        die("gen_keras_inception_v3.py", cmd);
    return keras_graph(path);
}

/* MobileNet v1 at 224x224 (the Keras corpus' JSON, as bench/mobilenet) */
static rt_graph *mobilenet_graph(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fixtures/keras-corpus/keras_mobile_net.json",
             RT_SOURCE_DIR);
    return keras_graph(path);
}

/* W-C: 784-512-512-10, relu, logits */
static rt_graph *wc_graph(void)
{
    rt_graph *g = rt_graph_create();
    const int64_t in[2] = {RT_BATCH, 784};
    if (!g || rt_graph_add_input(g, "x", RT_F32, 2, in) < 0)
        die("graph", "W-C");
    const int64_t w[3][2] = {{784, 512}, {512, 512}, {512, 10}};
    const char *prev = "x";
    static char names[3][3][16];
    for (int l = 0; l < 3; l++) {
        snprintf(names[l][0], 16, "d%d", l);
        snprintf(names[l][1], 16, "d%d/w", l);
        snprintf(names[l][2], 16, "d%d/b", l);
        const int64_t b = w[l][1];
        const rt_attr relu = {.name = "activation", .kind = RT_ATTR_STR, .s = "relu"};
        const char *ins[3] = {prev, names[l][1], names[l][2]};
        if (rt_graph_add_param(g, names[l][1], 2, w[l], RT_INIT_GLOROT_UNIFORM, 1, NULL) < 0 ||
            rt_graph_add_param(g, names[l][2], 1, &b, RT_INIT_ZEROS, 1, NULL) < 0 ||
            rt_graph_add_node(g, names[l][0], "Dense", 3, ins, l < 2, &relu) < 0)
            die("graph", rt_graph_errmsg(g));
        prev = names[l][0];
    }
    return g;
}

int main(int argc, char **argv)
{
    int reps = 7, inc_size = 75;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--conv-min-c") && i + 1 < argc)
            rt_kern_bf16_conv_min_c = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--f32-k") && i + 1 < argc)
            rt_kern_bf16_f32_k = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--col-oc") && i + 1 < argc)
            rt_kern_bf16_col_oc = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--col-px") && i + 1 < argc)
            rt_kern_bf16_col_px = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--col-rows") && i + 1 < argc)
            rt_kern_bf16_col_rows = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--w-round") && i + 1 < argc)
            rt_kern_bf16_w_round = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else if (!strcmp(argv[i], "--prec") && i + 1 < argc)
            only_prec = !strcmp(argv[++i], "bf16");
        else if (!strcmp(argv[i], "--ops") && i + 1 < argc)
            ops_reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--inception-size") && i + 1 < argc)
            inc_size = atoi(argv[++i]);
        else
            die("usage", "bench_bf16 [--reps N] [--conv-min-c C] [--col-oc C] [--col-px P] [--col-rows R] "
                         "[--w-round 0|1] [--f32-k K] "
                         "[--only wb|wc|fashion|mobilenet|resnet|inception] [--prec f32|bf16] "
                         "[--inception-size S] [--ops N]");
    }
#define RUN(key) (!only || !strcmp(only, key))
    if (reps < 1)
        reps = 1;
    if (rt_backend_select("cpu") < 0)
        die("backend", "this build has no cpu backend");
    char dir[] = "/tmp/bench_bf16.XXXXXX", cmd[1024];
    if (!mkdtemp(dir))
        die("mkdtemp", dir);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/bench/onnx/models.py %s 2>/dev/null",
             RT_SOURCE_DIR, dir);
    if (system(cmd) != 0)
        die("models.py (needs python3-torch)", cmd);
    printf("bf16 (mixed_bfloat16) against float32, same graph, interleaved rounds, medians "
           "of %d\n",
           reps);
    rt_bench_limit_measure(&limit, 0);
    rt_bench_limit_print(&limit);
    printf("\n| workload | batch | float32 ms/step | bf16 ms/step | bf16/f32 | f32 CPU ms | "
           "bf16 CPU ms | CPU bf16/f32 | f32 GFLOP/s (of f32 limit) | bf16 GFLOP/s (of bf16 "
           "limit) | bf16 ops | arena MiB f32 | arena MiB bf16 | bf16 f32-stored ms/step | "
           "bf16 f32-stored/f32 | CPU bf16 f32-stored/f32 | arena MiB bf16 f32-stored |\n| --- "
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- "
           "| --- | --- |\n");
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.from_logits = 1;
    cfg.metrics = 0;
    cfg.batch_size = 256;
    rt_graph *g;
    if (RUN("wb")) {
        g = onnx_graph(dir, "wb.onnx");
        row("W-B (Adam)", g, &cfg, reps, 4);
        rt_graph_destroy(g);
    }
    if (RUN("wc")) {
        cfg.batch_size = 128;
        g = wc_graph();
        row("W-C (Adam)", g, &cfg, reps, 20);
        rt_graph_destroy(g);
    }
    if (RUN("fashion")) {
        /* as bench/bf16/accuracy.py: batch 128, Adam 1e-3, softmax output */
        char path[1024];
        snprintf(path, sizeof path, "%s/bench/conv/fashion_cnn.json", RT_SOURCE_DIR);
        cfg.batch_size = 128;
        cfg.from_logits = 0;
        g = keras_graph(path);
        row("Fashion CNN (Adam)", g, &cfg, reps, 10);
        rt_graph_destroy(g);
        cfg.from_logits = 1;
    }
    if (RUN("mobilenet")) {
        cfg.batch_size = 16;
        cfg.from_logits = 0; /* its last layer is a Softmax */
        g = mobilenet_graph();
        row("MobileNet v1 224 (Adam)", g, &cfg, reps, 1);
        rt_graph_destroy(g);
        cfg.from_logits = 1;
    }
    if (RUN("resnet")) {
        cfg.batch_size = 64;
        cfg.opt = RT_OPT_SGD;
        cfg.lr = 0.01f;
        cfg.momentum = 0.9f;
        g = onnx_graph(dir, "resnet18.onnx");
        row("ResNet-18 CIFAR (SGD)", g, &cfg, reps, 1);
        rt_graph_destroy(g);
    }
    if (RUN("inception")) {
        /* as bench/inception: batch 32, Adam 1e-3, softmax output */
        char name[64];
        cfg.batch_size = 32;
        cfg.opt = RT_OPT_ADAM;
        cfg.lr = 1e-3f;
        cfg.momentum = 0.0f;
        cfg.from_logits = 0;
        g = inception_graph(dir, inc_size);
        snprintf(name, sizeof name, "Inception v3 %d (Adam)", inc_size);
        row(name, g, &cfg, reps, 1);
        rt_graph_destroy(g);
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_bf16: could not remove %s\n", dir);
    return 0;
}
