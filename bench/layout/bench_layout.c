/*
 * bench_layout.c - what NCHW data costs: the transpose once per batch (the
 * first op of an ONNX model's graph, as the importer makes it) against
 * once per data set (a transposed copy made when a data set is bound to
 * a program). A program, not a test.
 *
 *     bench_layout MODE C H W BATCH STEPS
 *       MODE nchw: a CNN on NCHW data (a Transpose first), STEPS steps
 *            nhwc: the same CNN on NHWC data (no Transpose)
 *            bind: transpose BATCH*STEPS samples once, as a bind would
 * The CNN: Conv2D(C->32, 3x3, same, relu), MaxPool 2, Conv2D(32->64, 3x3,
 * same, relu), MaxPool 2, Flatten, Dense(10), sparse CE from logits; SGD.
 * It prints the seconds per step, the median of 5 runs of STEPS steps (or
 * per sample for bind). For instruction
 * counts, run each mode under valgrind --tool=callgrind and read
 * rt_kern_map_fwd's share (README.md).
 */
#define RT_BENCH_NAME "bench_layout"
#include <stdint.h>
#include <string.h>

#include "../bench_util.h"
#include "rt_engine.h"

static void param(rt_graph *g, const char *n, int nd, const int64_t *d)
{
    if (rt_graph_add_param(g, n, nd, d, RT_INIT_GLOROT_UNIFORM, 1, NULL) < 0)
        die("param", rt_graph_errmsg(g));
}

static void node(rt_graph *g, const char *n, const char *op, int nin, const char **in,
                 int na, const rt_attr *a)
{
    if (rt_graph_add_node(g, n, op, nin, in, na, a) < 0) die("node", rt_graph_errmsg(g));
}

int main(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: bench_layout nchw|nhwc|bind C H W BATCH STEPS\n");
        return 2;
    }
    const char *mode = argv[1];
    const int64_t C = atoll(argv[2]), H = atoll(argv[3]), W = atoll(argv[4]);
    const int B = atoi(argv[5]), steps = atoi(argv[6]);
    const int64_t per = C * H * W, n = (int64_t)B * steps;
    float *x = malloc(sizeof(float) * (size_t)(n * per));
    int32_t *y = malloc(sizeof(int32_t) * (size_t)n);
    if (!x || !y) die("malloc", "out of memory");
    for (int64_t i = 0; i < n * per; i++) x[i] = (float)(i % 251) / 251.0f;
    for (int64_t i = 0; i < n; i++) y[i] = (int32_t)(i % 10);
    if (!strcmp(mode, "bind")) {
        float *t = malloc(sizeof(float) * (size_t)(n * per));
        if (!t) die("malloc", "out of memory");
        const double t0 = now_s();
        for (int64_t s = 0; s < n; s++)
            for (int64_t c = 0; c < C; c++)
                for (int64_t h = 0; h < H; h++)
                    for (int64_t w = 0; w < W; w++)
                        t[s * per + (h * W + w) * C + c] = x[s * per + (c * H + h) * W + w];
        const double dt = now_s() - t0;
        printf("bind: %lld samples of %lldx%lldx%lld transposed in %.4f s (%.3g s/sample, "
               "%.3g s per batch of %d; %lld extra bytes held)\n", (long long)n, (long long)C,
               (long long)H, (long long)W, dt, dt / (double)n, dt / (double)n * B, B,
               (long long)(n * per * 4));
        volatile float sink = t[n * per - 1];
        (void)sink;
        free(t);
        return 0;
    }
    const int nchw = !strcmp(mode, "nchw");
    rt_graph *g = rt_graph_create();
    const int64_t in_c[] = {RT_BATCH, C, H, W}, in_h[] = {RT_BATCH, H, W, C};
    if (rt_graph_add_input(g, "x", RT_F32, 4, nchw ? in_c : in_h) < 0)
        die("input", rt_graph_errmsg(g));
    const char *prev = "x";
    static const int64_t perm[4] = {0, 2, 3, 1};
    const rt_attr pa = {.name = "perm", .kind = RT_ATTR_INTS, .n = 4, .ints = perm};
    if (nchw) {
        node(g, "to_nhwc", "Transpose", 1, &prev, 1, &pa);
        prev = "to_nhwc";
    }
    const int64_t k1[] = {3, 3, C, 32}, b1[] = {32}, k2[] = {3, 3, 32, 64}, b2[] = {64};
    const int64_t kd[] = {64 * (H / 4) * (W / 4), 10}, bd[] = {10};
    param(g, "k1", 4, k1);
    param(g, "b1", 1, b1);
    param(g, "k2", 4, k2);
    param(g, "b2", 1, b2);
    param(g, "kd", 2, kd);
    param(g, "bd", 1, bd);
    const rt_attr ca[] = {{.name = "padding", .kind = RT_ATTR_STR, .s = "same"},
                          {.name = "activation", .kind = RT_ATTR_STR, .s = "relu"}};
    const char *c1[] = {prev, "k1", "b1"}, *p1[] = {"c1"}, *c2[] = {"p1", "k2", "b2"},
               *p2[] = {"c2"}, *fl[] = {"p2"}, *de[] = {"f", "kd", "bd"};
    node(g, "c1", "Conv2D", 3, c1, 2, ca);
    node(g, "p1", "MaxPool2D", 1, p1, 0, NULL);
    node(g, "c2", "Conv2D", 3, c2, 2, ca);
    node(g, "p2", "MaxPool2D", 1, p2, 0, NULL);
    node(g, "f", "Flatten", 1, fl, 0, NULL);
    node(g, "logits", "Dense", 3, de, 0, NULL);
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_SPARSE_CE;
    cfg.from_logits = 1;
    cfg.opt = RT_OPT_SGD;
    cfg.lr = 0.01f;
    cfg.batch_size = B;
    cfg.shuffle = 0;
    rt_plan *p;
    char err[256];
    if (rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err) < 0) die("compile", err);
    rt_exec *e;
    if (rt_exec_create(p, &e) < 0) die("exec", "create");
    rt_data d = {.x = x, .y = y, .y_dtype = RT_I32, .n = n};
    rt_train_result r;
    if (rt_exec_train(e, &d, 1, &r, NULL, NULL, NULL) < 0) die("warm-up", rt_exec_errmsg(e));
    /* the median of 5 runs of STEPS steps (the machine may be shared) */
    double t[5];
    for (int k = 0; k < 5; k++) {
        const double t0 = now_s();
        if (rt_exec_train(e, &d, steps, &r, NULL, NULL, NULL) < 0)
            die("train", rt_exec_errmsg(e));
        t[k] = (now_s() - t0) / steps;
    }
    printf("%s: %d steps of %d samples %lldx%lldx%lld: %.4g s/step (median of 5)\n", mode,
           steps, B, (long long)C, (long long)H, (long long)W, median(t, 5));
    rt_exec_destroy(e);
    rt_plan_release(p);
    rt_graph_destroy(g);
    free(x);
    free(y);
    return 0;
}
