/*
 * bench_layers.c - MobileNet (v1, Keras' keras.applications.mobilenet
 * layout: ZeroPadding2D, DepthwiseConv2D, BatchNormalization, ReLU(6),
 * pointwise Conv2D) through the Keras importer, against PyTorch eager
 * measured in the same run (bench/layers/torch_peer.py). Prints numbers;
 * asserts nothing.
 *
 *   import + compile of the Keras JSON at 224x224x3, 1000 classes (median
 *   of 5), and one training step at batch 32 (sparse CE from logits, Adam;
 *   median of --reps steps after one warm-up), with the per-op breakdown
 *   of the depthwise convolutions.
 *
 *     build/bench/layers/bench_layers [--reps N] [--size S] [--batch B] [--no-torch]
 *         (--reps 0: import and compile only)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_engine.h"
#include "rt_engine_impl.h"
#include "import_keras.h"

#ifndef RT_SOURCE_DIR
#define RT_SOURCE_DIR "."
#endif

#define RT_BENCH_NAME "bench_layers"
#include "../bench_util.h"
#include "../bench_plan.h"

static size_t put(char *b, size_t cap, size_t o, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#include <stdarg.h>
static size_t put(char *b, size_t cap, size_t o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b + o, cap - o, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= cap - o) die("json", "buffer too small");
    return o + (size_t)n;
}

/* MobileNet v1 (alpha 1, depth_multiplier 1) as a Keras 2 Sequential */
static char *mobilenet_json(int size, int classes)
{
    const size_t cap = 1 << 17;
    char *b = malloc(cap);
    size_t o = 0;
    o = put(b, cap, o, "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"mobilenet\", \"layers\": ["
            "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, %d, %d, 3], \"name\": \"in\"}},",
            size, size);
    o = put(b, cap, o, "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"conv1\", \"filters\": 32,"
            " \"kernel_size\": [3, 3], \"strides\": [2, 2], \"padding\": \"same\", \"use_bias\": false}},"
            "{\"class_name\": \"BatchNormalization\", \"config\": {\"name\": \"conv1_bn\", \"axis\": -1}},"
            "{\"class_name\": \"ReLU\", \"config\": {\"name\": \"conv1_relu\", \"max_value\": 6.0}},");
    static const int blocks[][2] = {{64, 1}, {128, 2}, {128, 1}, {256, 2}, {256, 1}, {512, 2},
                                    {512, 1}, {512, 1}, {512, 1}, {512, 1}, {512, 1}, {1024, 2},
                                    {1024, 1}};
    for (int i = 0; i < 13; i++) {
        const int id = i + 1, f = blocks[i][0], s = blocks[i][1];
        if (s == 2)
            o = put(b, cap, o, "{\"class_name\": \"ZeroPadding2D\", \"config\": {\"name\": \"conv_pad_%d\","
                    " \"padding\": [[0, 1], [0, 1]]}},", id);
        o = put(b, cap, o,
                "{\"class_name\": \"DepthwiseConv2D\", \"config\": {\"name\": \"conv_dw_%d\","
                " \"kernel_size\": [3, 3], \"strides\": [%d, %d], \"padding\": \"%s\","
                " \"depth_multiplier\": 1, \"use_bias\": false}},"
                "{\"class_name\": \"BatchNormalization\", \"config\": {\"name\": \"conv_dw_%d_bn\"}},"
                "{\"class_name\": \"ReLU\", \"config\": {\"name\": \"conv_dw_%d_relu\", \"max_value\": 6.0}},"
                "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"conv_pw_%d\", \"filters\": %d,"
                " \"kernel_size\": [1, 1], \"strides\": [1, 1], \"padding\": \"same\", \"use_bias\": false}},"
                "{\"class_name\": \"BatchNormalization\", \"config\": {\"name\": \"conv_pw_%d_bn\"}},"
                "{\"class_name\": \"ReLU\", \"config\": {\"name\": \"conv_pw_%d_relu\", \"max_value\": 6.0}},",
                id, s, s, s == 1 ? "same" : "valid", id, id, id, f, id, id);
    }
    o = put(b, cap, o,
            "{\"class_name\": \"GlobalAveragePooling2D\", \"config\": {\"name\": \"gap\", \"keepdims\": true}},"
            "{\"class_name\": \"Dropout\", \"config\": {\"name\": \"dropout\", \"rate\": 0.001}},"
            "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"conv_preds\", \"filters\": %d,"
            " \"kernel_size\": [1, 1], \"padding\": \"same\"}},"
            "{\"class_name\": \"Reshape\", \"config\": {\"name\": \"reshape_2\", \"target_shape\": [%d]}}"
            "]}}",
            classes, classes);
    return b;
}

/* time per op and direction (depthwise convolutions apart), one pass of
 * the plan's calls on an arena of small random values laid out as the
 * exec's (bench_plan.h) */
static void op_breakdown(rt_plan *p, int64_t n)
{
    bp_run b;
    static const char *const nm[1] = {"rtrain"};
    double tot;
    bp_open(&b, p, n);
    bp_op_profile(&b, 1, nm, 1, &tot);
    bp_close(&b);
}

static rt_plan *compile(const char *js, int batch, double *ms)
{
    char err[256];
    double t0 = now_s();
    rt_graph *g;
    if (rt_keras_import(js, strlen(js), &g, err, sizeof err) < 0) die("import", err);
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_SPARSE_CE;
    cfg.from_logits = 1;
    cfg.opt = RT_OPT_ADAM;
    cfg.lr = 1e-3f;
    cfg.batch_size = batch;
    cfg.seed = 1;
    rt_plan *p;
    if (rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err) < 0) die("compile", err);
    rt_graph_destroy(g);
    *ms = (now_s() - t0) * 1e3;
    return p;
}

int main(int argc, char **argv)
{
    int reps = 3, size = 224, batch = 32, torch = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--size") && i + 1 < argc) size = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-torch")) torch = 0;
        else die("usage", "[--reps N] [--size S] [--batch B] [--no-torch]");
    }
    if (reps < 0) reps = 0;
    char *js = mobilenet_json(size, 1000);
    double tc[5];
    rt_plan *p = NULL;
    for (int i = 0; i < 5; i++) {
        if (p) rt_plan_release(p);
        p = compile(js, batch, &tc[i]);
    }
    const double compile_ms = median(tc, 5);
    if (reps == 0) { /* import and compile only */
        printf("MobileNet v1 %dx%d, 1000 classes: import + compile %.2f ms (median of 5), "
               "%d parameters\n", size, size, compile_ms, rt_plan_n_params(p));
        rt_plan_release(p);
        free(js);
        return 0;
    }
    rt_exec *e;
    if (rt_exec_create(p, &e) < 0) die("exec", "create");
    const int64_t in_n = (int64_t)size * size * 3;
    float *x = malloc(sizeof(float) * (size_t)(batch * in_n));
    int32_t *y = malloc(sizeof(int32_t) * (size_t)batch);
    uint64_t s = 5;
    for (int64_t i = 0; i < batch * in_n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((s >> 40) & 0xffff) / 65536.0f;
    }
    for (int i = 0; i < batch; i++) y[i] = i % 1000;
    rt_data d = {.x = x, .y = y, .y_dtype = RT_I32, .n = batch};
    double *ts = malloc(sizeof(double) * (size_t)reps);
    rt_train_result res;
    if (rt_exec_train(e, &d, 1, &res, NULL, NULL, NULL) < 0) die("train", rt_exec_errmsg(e));
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        if (rt_exec_train(e, &d, 1, &res, NULL, NULL, NULL) < 0) die("train", rt_exec_errmsg(e));
        ts[r] = (now_s() - t0) * 1e3;
    }
    const double step_ms = median(ts, reps);
    op_breakdown(p, batch);
    double torch_ms = NAN;
    if (torch) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd,
                 "/usr/bin/python3 %s/bench/layers/torch_peer.py --reps %d --size %d --batch %d",
                 RT_SOURCE_DIR, reps, size, batch);
        FILE *f = popen(cmd, "r");
        char line[256];
        while (f && fgets(line, sizeof line, f))
            if (sscanf(line, "mobilenet_ms %lf", &torch_ms) == 1) break;
        if (f) pclose(f);
    }
    printf("MobileNet v1 %dx%d, 1000 classes, batch %d (medians; %d reps)\n", size, size, batch,
           reps);
    printf("| | rtrain | PyTorch eager, same run | ratio (PyTorch / rtrain) |\n");
    printf("| --- | --- | --- | --- |\n");
    printf("| import + compile, ms | %.1f | | |\n", compile_ms);
    printf("| training step, ms | %.0f | %.0f | %.2fx |\n", step_ms, torch_ms,
           torch_ms / step_ms);
    rt_exec_destroy(e);
    rt_plan_release(p);
    free(js);
    free(x);
    free(y);
    free(ts);
    return 0;
}
