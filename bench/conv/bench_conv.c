/*
 * bench_conv.c - the convolutional workloads against PyTorch, measured in
 * the same run (bench/conv/torch_peer.py), and against the compute limit
 * (bench_limit.h: sgemm and bf16 matmul, warm, in a tight loop, at the
 * step's thread count, measured in this run). Prints numbers; asserts
 * nothing.
 *
 *   W-B: 32x32x3 -> Conv2D(64,3x3,valid,relu) -> MaxPool 2x2 -> Flatten ->
 *        Dense(128,relu) -> Dense(10); sparse CE from logits, Adam;
 *        synthetic data; ms per training step at batch 256 (and 1024),
 *        median of --reps steps, with a per-kernel breakdown.
 *   W-D: sklearn digits (8x8): Conv(16,3x3,same) -> Conv(32,3x3,same) ->
 *        MaxPool 2x2 -> Flatten -> Dense(64,relu) -> Dense(10); Adam 1e-3,
 *        batch 32, 10 epochs on the 80% split; total seconds and test
 *        accuracy (median of 3 runs).
 *   Convolutions by direction (forward, backward-data, backward-weights),
 *   each Conv2D kernel call timed alone, GFLOP/s against the limit: W-B
 *   (batch 256), two 3x3x64 convolutions at 32x32 (batch 128) and
 *   ResNet-18 for CIFAR (batch 64, bench/onnx/models.py; needs
 *   python3-torch, else skipped with a line saying so).
 *
 *     build-conv/bench/conv/bench_conv [--reps N] [--no-torch] [--b1024] [--convs]
 *         --convs: only the limit and the convolutions by direction
 *         (--only SUBSTR: the workloads whose name has SUBSTR: W-B, 3x3x64,
 *         ResNet); RT_BENCH_CLOCK=cpu times by CPU time (bench_util.h)
 *     build-conv/bench/conv/bench_conv --plan MODEL.json BATCH
 *         the compile report of a Keras model (arena, parameter bytes), to
 *         set the daemon's peak RSS against
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include "rt_engine.h"
#include "rt_engine_impl.h"
#include "import_keras.h"
#include "import_onnx.h"
#include "../../tests/conv/conv_models.h"

#ifndef RT_SOURCE_DIR
#define RT_SOURCE_DIR "."
#endif

#define RT_BENCH_NAME "bench_conv"
#include "../bench_util.h"
#include "../bench_plan.h"
#include "cpu/rt_kern_conv.h"

static rt_bench_limit limit;
static const char *only; /* --only SUBSTR: the conv workloads whose name has it */

/* oneDNN's convolution primitives on W-B's layer (256x32x32x3 NHWC, 3x3x3x64,
 * valid), forward and backward-weights, with Keras' weight layout (hwio)
 * and with the layout oneDNN prefers (format any; its reorder excluded), to
 * set against the im2col + GEMM / microkernel kernel timed above. The
 * primitives are built once, outside the timing. Returns 0, or -1 if
 * oneDNN refuses a descriptor. */
static int dnnl_conv_bench(int reps, int any, double *fwd_ms, double *bww_ms,
                           const char **impl_f, const char **impl_w)
{
    const int64_t N = 256, C = 3, H = 32, W = 32, OC = 64, K = 3, OH = 30, OW = 30;
    dnnl_engine_t eng;
    dnnl_stream_t st;
    if (dnnl_engine_create(&eng, dnnl_cpu, 0) != dnnl_success) return -1;
    dnnl_stream_create(&st, eng, dnnl_stream_default_flags);
    dnnl_memory_desc_t src, wt, wt_any, bias, dst;
    dnnl_dims_t sd = {N, C, H, W}, wd = {OC, C, K, K}, bd = {OC}, dd = {N, OC, OH, OW};
    dnnl_memory_desc_init_by_tag(&src, 4, sd, dnnl_f32, dnnl_nhwc);
    dnnl_memory_desc_init_by_tag(&wt, 4, wd, dnnl_f32, dnnl_hwio);
    dnnl_memory_desc_init_by_tag(&wt_any, 4, wd, dnnl_f32, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&bias, 1, bd, dnnl_f32, dnnl_x);
    dnnl_memory_desc_init_by_tag(&dst, 4, dd, dnnl_f32, dnnl_nhwc);
    dnnl_dims_t strides = {1, 1}, pad = {0, 0};
    dnnl_convolution_desc_t fdesc, wdesc;
    dnnl_primitive_desc_t fpd, wpd;
    if (dnnl_convolution_forward_desc_init(&fdesc, dnnl_forward_training,
                                           dnnl_convolution_direct, &src,
                                           any ? &wt_any : &wt, &bias, &dst, strides,
                                           pad, pad) != dnnl_success ||
        dnnl_primitive_desc_create(&fpd, &fdesc, NULL, eng, NULL) != dnnl_success)
        return -1;
    if (dnnl_convolution_backward_weights_desc_init(&wdesc, dnnl_convolution_direct, &src,
                                                    any ? &wt_any : &wt, &bias, &dst,
                                                    strides, pad, pad) != dnnl_success ||
        dnnl_primitive_desc_create(&wpd, &wdesc, NULL, eng, fpd) != dnnl_success)
        return -1;
    dnnl_primitive_desc_query(fpd, dnnl_query_impl_info_str, 0, impl_f);
    dnnl_primitive_desc_query(wpd, dnnl_query_impl_info_str, 0, impl_w);
    const dnnl_memory_desc_t *fw = dnnl_primitive_desc_query_md(fpd, dnnl_query_weights_md, 0);
    const dnnl_memory_desc_t *ww = dnnl_primitive_desc_query_md(wpd, dnnl_query_diff_weights_md, 0);
    float *x = rt__aligned_alloc(sizeof(float) * (size_t)(N * H * W * C));
    float *y = rt__aligned_alloc(sizeof(float) * (size_t)(N * OH * OW * OC));
    float *w = rt__aligned_alloc(dnnl_memory_desc_get_size(fw) + 64);
    float *dw = rt__aligned_alloc(dnnl_memory_desc_get_size(ww) + 64);
    float *b = rt__aligned_alloc(sizeof(float) * OC), *db = rt__aligned_alloc(sizeof(float) * OC);
    for (int64_t i = 0; i < N * H * W * C; i++) x[i] = (float)(i % 13) * 0.05f;
    for (int64_t i = 0; i < N * OH * OW * OC; i++) y[i] = (float)(i % 7) * 0.01f;
    dnnl_memory_t mx, my, mw, mdw, mb, mdb;
    dnnl_memory_create(&mx, &src, eng, x);
    dnnl_memory_create(&my, &dst, eng, y);
    dnnl_memory_create(&mw, fw, eng, w);
    dnnl_memory_create(&mdw, ww, eng, dw);
    dnnl_memory_create(&mb, &bias, eng, b);
    dnnl_memory_create(&mdb, &bias, eng, db);
    dnnl_primitive_t pf, pw;
    dnnl_primitive_create(&pf, fpd);
    dnnl_primitive_create(&pw, wpd);
    dnnl_exec_arg_t fa[4] = {{DNNL_ARG_SRC, mx}, {DNNL_ARG_WEIGHTS, mw},
                             {DNNL_ARG_BIAS, mb}, {DNNL_ARG_DST, my}};
    dnnl_exec_arg_t wa[4] = {{DNNL_ARG_SRC, mx}, {DNNL_ARG_DIFF_DST, my},
                             {DNNL_ARG_DIFF_WEIGHTS, mdw}, {DNNL_ARG_DIFF_BIAS, mdb}};
    double *tf = malloc(sizeof(double) * (size_t)reps), *tw = malloc(sizeof(double) * (size_t)reps);
    for (int i = 0; i < reps + 2; i++) {
        double t0 = now_s();
        dnnl_primitive_execute(pf, st, 4, fa);
        dnnl_stream_wait(st);
        double t1 = now_s();
        dnnl_primitive_execute(pw, st, 4, wa);
        dnnl_stream_wait(st);
        double t2 = now_s();
        if (i >= 2) {
            tf[i - 2] = t1 - t0;
            tw[i - 2] = t2 - t1;
        }
    }
    *fwd_ms = median(tf, reps) * 1e3;
    *bww_ms = median(tw, reps) * 1e3;
    free(tf);
    free(tw);
    dnnl_primitive_destroy(pf);
    dnnl_primitive_destroy(pw);
    dnnl_memory_destroy(mx);
    dnnl_memory_destroy(my);
    dnnl_memory_destroy(mw);
    dnnl_memory_destroy(mdw);
    dnnl_memory_destroy(mb);
    dnnl_memory_destroy(mdb);
    free(x);
    free(y);
    free(w);
    free(dw);
    free(b);
    free(db);
    dnnl_primitive_desc_destroy(fpd);
    dnnl_primitive_desc_destroy(wpd);
    dnnl_stream_destroy(st);
    dnnl_engine_destroy(eng);
    return 0;
}

/* W-B: median ms per step; per-kernel medians printed when verbose */
static double bench_wb(int batch, int reps, int verbose, uint64_t *flops_out,
                       uint64_t *arena_out)
{
    rt_graph *g = rt_conv_wb_graph();
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_SPARSE_CE;
    cfg.from_logits = 1;
    cfg.opt = RT_OPT_ADAM;
    cfg.batch_size = batch;
    cfg.seed = 1;
    rt_plan *p;
    rt_compile_report rep;
    char err[256];
    if (rt_plan_compile(g, &cfg, &p, &rep, err, sizeof err) < 0) die("compile W-B", err);
    *flops_out = rep.flops_per_step;
    *arena_out = rep.arena_bytes;
    rt_exec *e;
    if (rt_exec_create(p, &e) < 0) die("exec", "create");
    const int64_t n = batch;
    float *x = malloc(sizeof(float) * (size_t)(n * 32 * 32 * 3));
    int32_t *y = malloc(sizeof(int32_t) * (size_t)n);
    uint64_t s = 7;
    for (int64_t i = 0; i < n * 32 * 32 * 3; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((s >> 40) & 0xffff) / 65536.0f;
    }
    for (int64_t i = 0; i < n; i++) y[i] = (int32_t)(i % 10);
    rt_data d = {.x = x, .y = y, .y_dtype = RT_I32, .n = n};
    rt_train_result r;
    rt_exec_train(e, &d, 3, &r, NULL, NULL, NULL); /* warm up */
    double *t = malloc(sizeof(double) * (size_t)reps);
    for (int i = 0; i < reps; i++) {
        double t0 = now_s();
        rt_exec_train(e, &d, 1, &r, NULL, NULL, NULL);
        t[i] = now_s() - t0;
    }
    double ms = median(t, reps) * 1e3;
    if (verbose) {
        bp_run b;
        bp_open(&b, p, n);
        bp_breakdown(&b, reps);
        bp_close(&b);
    }
    free(t);
    free(x);
    free(y);
    rt_exec_destroy(e);
    rt_plan_release(p);
    rt_graph_destroy(g);
    return ms;
}

/* W-D: seconds for 10 epochs and the test accuracy */
static double bench_wd(const rt_conv_digits *dg, double *acc, int verbose)
{
    rt_graph *g = rt_conv_wd_graph();
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_SPARSE_CE;
    cfg.from_logits = 1;
    cfg.opt = RT_OPT_ADAM;
    cfg.lr = 1e-3f;
    cfg.batch_size = 32;
    cfg.seed = 1;
    rt_plan *p;
    char err[256];
    double t0 = now_s();
    if (rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err) < 0) die("compile W-D", err);
    rt_exec *e;
    rt_exec_create(p, &e);
    rt_data tr = {.x = dg->xtr, .y = dg->ytr, .y_dtype = RT_I32, .n = dg->ntr};
    rt_data te = {.x = dg->xte, .y = dg->yte, .y_dtype = RT_I32, .n = dg->nte};
    rt_train_result r;
    rt_exec_train(e, &tr, 10 * ((dg->ntr + 31) / 32), &r, NULL, NULL, NULL);
    double secs = now_s() - t0;
    rt_metrics m;
    rt_exec_evaluate(e, &te, &m);
    *acc = m.acc;
    if (verbose) {
        printf("  W-D per kernel at batch 32:\n");
        bp_run b;
        bp_open(&b, p, 32);
        bp_breakdown(&b, 50);
        bp_close(&b);
    }
    rt_exec_destroy(e);
    rt_plan_release(p);
    rt_graph_destroy(g);
    return secs;
}

/* two 3x3x64 convolutions at 32x32: 32x32x3 -> Conv2D(64,3x3,same,relu)
 * -> Conv2D(64,3x3,same,relu) -> GlobalAvgPool -> Dense(10) (logits) */
static rt_graph *net64_graph(void)
{
    rt_graph *g = rt_graph_create();
    int64_t in[] = {RT_BATCH, 32, 32, 3};
    int rc = rt_graph_add_input(g, "x", RT_F32, 4, in);
    rc |= rt_conv_add_conv(g, "c1", "x", 3, 3, 3, 64, "same", "relu", RT_INIT_HE_UNIFORM, NULL, NULL);
    rc |= rt_conv_add_conv(g, "c2", "c1", 3, 3, 64, 64, "same", "relu", RT_INIT_HE_UNIFORM, NULL, NULL);
    rc |= rt_conv_add1(g, "gap", "GlobalAvgPool", "c2", 0, NULL);
    rc |= rt_conv_add_dense(g, "d", "gap", 64, 10, "linear", RT_INIT_GLOROT_UNIFORM, NULL, NULL);
    rc |= rt_graph_set_output(g, "d");
    if (rc) die("net64", "graph");
    return g;
}

/* One workload, compiled three ways: every convolution im2col + GEMM
 * (the kernel before oneDNN's primitives were tried), every one through
 * oneDNN's primitives where they take it, and the engine's own choice by
 * shape. Median ms per training step (steps of the three interleaved), its
 * GFLOP/s and share of the limit; then the convolutions by direction.
 * Takes g. */
static void conv_workload(const char *name, rt_graph *g, int batch, int sgd, int reps)
{
    if (only && !strstr(name, only)) {
        rt_graph_destroy(g);
        return;
    }
    static const char *vn[3] = {"im2col+GEMM", "oneDNN conv", "default"};
    static const int vi[3] = {RT_KERN_CONV_IM2COL, RT_KERN_CONV_DNNL, RT_KERN_CONV_AUTO};
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_SPARSE_CE;
    cfg.from_logits = 1;
    cfg.metrics = 0;
    cfg.opt = sgd ? RT_OPT_SGD : RT_OPT_ADAM;
    if (sgd) {
        cfg.lr = 0.01f;
        cfg.momentum = 0.9f;
    }
    cfg.batch_size = batch;
    cfg.seed = 1;
    rt_plan *p[3];
    rt_exec *e[3];
    rt_compile_report rep;
    char err[256];
    for (int v = 0; v < 3; v++) {
        rt_kern_conv_impl = vi[v];
        if (rt_plan_compile(g, &cfg, &p[v], &rep, err, sizeof err) < 0) die(name, err);
        if (rt_exec_create(p[v], &e[v]) < 0) die("exec", name);
    }
    rt_kern_conv_impl = RT_KERN_CONV_AUTO;
    int64_t d[RT_MAX_DIMS], per = 1;
    const int nd = rt_plan_input_shape(p[0], d);
    for (int k = 0; k < nd; k++) per *= d[k];
    float *x = malloc(sizeof(float) * (size_t)(batch * per));
    int32_t *y = malloc(sizeof(int32_t) * (size_t)batch);
    for (int64_t i = 0; i < batch * per; i++) x[i] = (float)((i * 2654435761u) % 1000) / 1000.0f;
    for (int64_t i = 0; i < batch; i++) y[i] = (int32_t)(i % 10);
    rt_data data = {.x = x, .y = y, .y_dtype = RT_I32, .n = batch};
    rt_train_result r;
    for (int v = 0; v < 3; v++)
        if (rt_exec_train(e[v], &data, 2, &r, NULL, NULL, NULL) < 0)
            die("train", rt_exec_errmsg(e[v]));
    double *t = malloc(sizeof(double) * (size_t)reps * 3);
    for (int i = 0; i < reps; i++)
        for (int v = 0; v < 3; v++) {
            double t0 = now_s();
            rt_exec_train(e[v], &data, 1, &r, NULL, NULL, NULL);
            t[v * reps + i] = now_s() - t0;
        }
    const double gfs = (double)rep.flops_per_step * 1e-9;
    printf("%s, batch %d, %.2f GFLOP/step:\n", name, batch, gfs);
    char sh[96];
    for (int v = 0; v < 3; v++) {
        const double ms = median(t + v * reps, reps) * 1e3, gf = gfs / (ms * 1e-3);
        printf("  %-12s step %8.2f ms %7.1f GFLOP/s  %s\n", vn[v], ms, gf,
               rt_bench_limit_share(&limit, gf, sh, sizeof sh));
    }
    bp_run b[3];
    for (int v = 0; v < 3; v++) bp_open(&b[v], p[v], batch);
    double ms[3][3], fl[3];
    bp_conv_dirs(b, 3, reps, ms, fl);
    static const char *dn[3] = {"forward", "backward-data", "backward-weights"};
    for (int dir = 0; dir < 3; dir++) {
        if (fl[dir] <= 0) continue;
        for (int v = 0; v < 3; v++) {
            const double gf = fl[dir] / (ms[v][dir] * 1e-3) * 1e-9;
            printf("  %-12s %-16s %8.2f ms %7.1f GFLOP/s  %s\n", vn[v], dn[dir], ms[v][dir], gf,
                   rt_bench_limit_share(&limit, gf, sh, sizeof sh));
        }
    }
    for (int v = 0; v < 3; v++) {
        bp_close(&b[v]);
        rt_exec_destroy(e[v]);
        rt_plan_release(p[v]);
    }
    free(t);
    free(x);
    free(y);
    rt_graph_destroy(g);
}

/* W-B, the 3x3x64 net and ResNet-18 (CIFAR stem) */
static void conv_workloads(int reps)
{
    printf("\nConvolutions by direction (each Conv2D call alone, medians of %d; the "
           "backward-data and -weights rows run the backward kernel with one gradient "
           "asked for):\n", reps);
    conv_workload("W-B", rt_conv_wb_graph(), 256, 0, reps);
    conv_workload("two 3x3x64 convs at 32x32", net64_graph(), 128, 0, reps);
    if (only && !strstr("ResNet-18", only)) return;
    char dir[] = "/tmp/bench_conv.XXXXXX", cmd[2048];
    if (!mkdtemp(dir)) die("mkdtemp", dir);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/bench/onnx/models.py %s 2>/dev/null",
             RT_SOURCE_DIR, dir);
    char path[1100];
    snprintf(path, sizeof path, "%s/resnet18.onnx", dir);
    FILE *f = system(cmd) == 0 ? fopen(path, "rb") : NULL;
    if (!f) {
        printf("ResNet-18: bench/onnx/models.py failed (needs python3-torch); skipped\n");
    } else {
        fseek(f, 0, SEEK_END);
        const long len = ftell(f);
        fseek(f, 0, SEEK_SET);
        void *buf = malloc((size_t)len);
        if (fread(buf, 1, (size_t)len, f) != (size_t)len) die("read", path);
        fclose(f);
        rt_graph *g;
        char err[256];
        if (rt_onnx_import(buf, (size_t)len, NULL, &g, err, sizeof err) < 0) die("import", err);
        free(buf);
        conv_workload("ResNet-18 (CIFAR stem)", g, 64, 1, reps);
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "bench_conv: could not remove %s\n", dir);
}

int main(int argc, char **argv)
{
    int reps = 20, torch = 1, b1024 = 0, convs = 0;
    if (argc == 4 && !strcmp(argv[1], "--plan")) {
        FILE *f = fopen(argv[2], "rb");
        if (!f) die(argv[2], "cannot open");
        static char json[1 << 20];
        size_t len = fread(json, 1, sizeof json, f);
        fclose(f);
        rt_graph *g;
        char err[256];
        if (rt_keras_import(json, len, &g, err, sizeof err) < 0) die("import", err);
        rt_train_config cfg;
        rt_train_config_init(&cfg);
        cfg.batch_size = atoi(argv[3]);
        rt_plan *p;
        rt_compile_report rep;
        if (rt_plan_compile(g, &cfg, &p, &rep, err, sizeof err) < 0) die("compile", err);
        printf("%s at batch %d: %llu params, arena %.1f MiB (without reuse %.1f MiB), "
               "parameters+gradients+Adam %.2f MiB, %.2f GFLOP/step, %u kernels/step\n",
               argv[2], cfg.batch_size, (unsigned long long)rep.param_count,
               (double)rep.arena_bytes / (1 << 20), (double)rep.naive_bytes / (1 << 20),
               (double)rep.param_bytes / (1 << 20), (double)rep.flops_per_step * 1e-9,
               rep.n_kernels);
        rt_plan_release(p);
        rt_graph_destroy(g);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-torch")) torch = 0;
        else if (!strcmp(argv[i], "--b1024")) b1024 = 1;
        else if (!strcmp(argv[i], "--convs")) convs = 1;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--layers")) bp_layers = 1;
        else if (!strcmp(argv[i], "--chunk") && i + 1 < argc)
            rt_kern_conv_chunk_floats = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--reps N] [--no-torch] [--b1024] [--convs [--only NAME] [--layers]]\n", argv[0]);
            return 2;
        }
    }
    if (reps < 3) reps = 3;
    rt_bench_limit_measure(&limit, 0);
    rt_bench_limit_print(&limit);
    if (convs) {
        conv_workloads(reps);
        return 0;
    }

    uint64_t fl, arena;
    printf("  W-B per kernel at batch 256:\n");
    const double wb = bench_wb(256, reps, 1, &fl, &arena);
    char sh[96];
    printf("W-B batch 256: rtrain %.2f ms/step (%.0f img/s), %.2f GFLOP/step, %.1f GFLOP/s, "
           "%s; arena %.1f MiB\n",
           wb, 256.0 / wb * 1e3, (double)fl * 1e-9, (double)fl / (wb * 1e-3) * 1e-9,
           rt_bench_limit_share(&limit, (double)fl / (wb * 1e-3) * 1e-9, sh, sizeof sh),
           (double)arena / (1 << 20));
    for (int any = 0; any < 2; any++) {
        double f, w;
        const char *fi = "?", *wi = "?";
        if (dnnl_conv_bench(reps, any, &f, &w, &fi, &wi) == 0)
            printf("  oneDNN convolution primitives on W-B's layer, weights %s: forward %.2f ms "
                   "(%s), backward-weights %.2f ms (%s)\n",
                   any ? "in oneDNN's preferred layout" : "hwio (Keras')", f, fi, w, wi);
        else
            printf("  oneDNN refused the convolution descriptors (weights %s)\n",
                   any ? "any" : "hwio");
    }
    double wb1k = 0;
    if (b1024) {
        wb1k = bench_wb(1024, reps / 2 > 3 ? reps / 2 : 3, 0, &fl, &arena);
        printf("W-B batch 1024: rtrain %.2f ms/step (%.0f img/s)\n", wb1k, 1024.0 / wb1k * 1e3);
    }

    conv_workloads(reps);

    rt_conv_digits dg;
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/conv/data/digits.csv.gz", RT_SOURCE_DIR);
    double wd = NAN, wd_acc = NAN, wd1 = NAN;
    if (rt_conv_load_digits(path, &dg) == 0) {
        rt_conv_standardize_digits(&dg);
        double t[3], a[3];
        for (int i = 0; i < 3; i++) t[i] = bench_wd(&dg, &a[i], i == 0);
        wd = median(t, 3);
        wd_acc = a[0];
        printf("W-D 10 epochs: rtrain %.3f s, test accuracy %.4f\n", wd, wd_acc);
        /* the same on one thread: W-D's GEMMs are small, and every one
         * that starts an OpenMP team pays for it (a whole scheduler slice
         * when the machine is loaded) */
        const int nt = omp_get_max_threads();
        omp_set_num_threads(1);
        for (int i = 0; i < 3; i++) t[i] = bench_wd(&dg, &a[i], 0);
        omp_set_num_threads(nt);
        wd1 = median(t, 3);
        printf("W-D 10 epochs on 1 thread: rtrain %.3f s, test accuracy %.4f\n", wd1, a[0]);
        rt_conv_free_digits(&dg);
    } else {
        printf("W-D: %s not readable, skipped\n", path);
    }

    if (torch) {
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/bench/conv/torch_peer.py --reps %d%s",
                 RT_SOURCE_DIR, reps, b1024 ? " --b1024" : "");
        FILE *f = popen(cmd, "r");
        double t_wb = NAN, t_wb1k = NAN, t_wd = NAN, t_wd_acc = NAN;
        char line[512];
        while (f && fgets(line, sizeof line, f)) {
            sscanf(line, "wb256_ms %lf", &t_wb);
            sscanf(line, "wb1024_ms %lf", &t_wb1k);
            sscanf(line, "wd_s %lf %lf", &t_wd, &t_wd_acc);
        }
        if (f) pclose(f);
        printf("PyTorch (same run, 2 threads): W-B %.2f ms/step; W-D %.3f s, acc %.4f\n",
               t_wb, t_wd, t_wd_acc);
        printf("ratios: W-B rtrain %.2fx faster than PyTorch", t_wb / wb);
        if (b1024) printf(" (batch 1024: %.2fx)", t_wb1k / wb1k);
        printf("; W-D %.2fx (1 thread: %.2fx)\n", t_wd / wd, t_wd / wd1);
    }
    return 0;
}
