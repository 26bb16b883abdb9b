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
 *            share: nchw and nhwc in interleaved runs, and the transpose of
 *                   one batch (the bind's loop) as a share of the NCHW step
 * The CNN: Conv2D(C->32, 3x3, same, relu), MaxPool 2, Conv2D(32->64, 3x3,
 * same, relu), MaxPool 2, Flatten, Dense(10), sparse CE from logits; SGD.
 * It prints the seconds per step, the median of 5 runs of STEPS steps (or
 * per sample for bind, the median of 5). For instruction
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

/* NCHW samples x[0..n) into NHWC t, as a bind would: a plain loop */
static void transpose(const float *x, float *t, int64_t n, int64_t C, int64_t H, int64_t W)
{
    const int64_t per = C * H * W;
    for (int64_t s = 0; s < n; s++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t w = 0; w < W; w++)
                    t[s * per + (h * W + w) * C + c] = x[s * per + (c * H + h) * W + w];
}

/* the median of 5 bind-style transposes of n samples, in seconds */
static double bind_s(const float *x, int64_t n, int64_t C, int64_t H, int64_t W)
{
    float *t = malloc(sizeof(float) * (size_t)(n * C * H * W));
    if (!t) die("malloc", "out of memory");
    double v[5];
    for (int k = 0; k < 5; k++) {
        const double t0 = now_s();
        transpose(x, t, n, C, H, W);
        v[k] = now_s() - t0;
    }
    volatile float sink = t[n * C * H * W - 1];
    (void)sink;
    free(t);
    return median(v, 5);
}

/* the CNN of the header on NCHW (a Transpose first) or NHWC input */
typedef struct cnn {
    rt_graph *g;
    rt_plan *p;
    rt_exec *e;
} cnn;

static void cnn_build(cnn *m, int nchw, int64_t C, int64_t H, int64_t W, int B)
{
    rt_graph *g = m->g = rt_graph_create();
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
    char err[256];
    if (rt_plan_compile(g, &cfg, &m->p, NULL, err, sizeof err) < 0) die("compile", err);
    if (rt_exec_create(m->p, &m->e) < 0) die("exec", "create");
}

static void cnn_free(cnn *m)
{
    rt_exec_destroy(m->e);
    rt_plan_release(m->p);
    rt_graph_destroy(m->g);
}

/* seconds per step of one run of steps steps */
static double run_s(cnn *m, const rt_data *d, int steps)
{
    rt_train_result r;
    const double t0 = now_s();
    if (rt_exec_train(m->e, d, steps, &r, NULL, NULL, NULL) < 0)
        die("train", rt_exec_errmsg(m->e));
    return (now_s() - t0) / steps;
}

int main(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: bench_layout nchw|nhwc|bind|share C H W BATCH STEPS\n");
        return 2;
    }
    const char *mode = argv[1];
    const int64_t C = atoll(argv[2]), H = atoll(argv[3]), W = atoll(argv[4]);
    const int B = atoi(argv[5]), steps = atoi(argv[6]);
    if (C < 1 || H < 4 || W < 4 || B < 1 || steps < 1)
        die("usage", "C >= 1, H and W >= 4, BATCH and STEPS >= 1");
    const int64_t per = C * H * W, n = (int64_t)B * steps;
    float *x = malloc(sizeof(float) * (size_t)(n * per));
    int32_t *y = malloc(sizeof(int32_t) * (size_t)n);
    if (!x || !y) die("malloc", "out of memory");
    for (int64_t i = 0; i < n * per; i++) x[i] = (float)(i % 251) / 251.0f;
    for (int64_t i = 0; i < n; i++) y[i] = (int32_t)(i % 10);
    if (!strcmp(mode, "bind")) {
        const double dt = bind_s(x, n, C, H, W);
        printf("bind: %lld samples of %lldx%lldx%lld transposed in %.4f s (%.3g s/sample, "
               "%.3g s per batch of %d; %lld extra bytes held; median of 5)\n", (long long)n,
               (long long)C, (long long)H, (long long)W, dt, dt / (double)n,
               dt / (double)n * B, B, (long long)(n * per * 4));
        free(x);
        free(y);
        return 0;
    }
    const int share = !strcmp(mode, "share");
    if (!share && strcmp(mode, "nchw") && strcmp(mode, "nhwc")) die("mode", mode);
    /* share: [0] NCHW, [1] NHWC, run in turn; else the one asked for */
    cnn m[2];
    const int nm = share ? 2 : 1;
    for (int k = 0; k < nm; k++)
        cnn_build(&m[k], share ? k == 0 : !strcmp(mode, "nchw"), C, H, W, B);
    rt_data d = {.x = x, .y = y, .y_dtype = RT_I32, .n = n};
    for (int k = 0; k < nm; k++) run_s(&m[k], &d, 1); /* warm-up */
    /* the median of 5 runs of STEPS steps (the machine may be shared) */
    double t[2][5];
    for (int r = 0; r < 5; r++)
        for (int k = 0; k < nm; k++) t[k][r] = run_s(&m[k], &d, steps);
    if (!share) {
        printf("%s: %d steps of %d samples %lldx%lldx%lld: %.4g s/step (median of 5)\n", mode,
               steps, B, (long long)C, (long long)H, (long long)W, median(t[0], 5));
    } else {
        const double sc = median(t[0], 5), sh = median(t[1], 5);
        const double tb = bind_s(x, n, C, H, W) / steps;
        printf("share: %d samples %lldx%lldx%lld: step NCHW %.4g s, NHWC %.4g s (medians of 5 "
               "interleaved runs of %d steps); transposing one batch %.4g s = %.2f%% of the "
               "NCHW step; per bind %.3g s per sample, once per data set, %lld bytes per "
               "sample held\n", B, (long long)C, (long long)H, (long long)W, sc, sh, steps, tb,
               100.0 * tb / sc, tb / B, (long long)(per * 4));
    }
    for (int k = 0; k < nm; k++) cnn_free(&m[k]);
    free(x);
    free(y);
    return 0;
}
