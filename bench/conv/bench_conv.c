/*
 * bench_conv.c - the convolutional workloads against PyTorch, measured in
 * the same run (bench/conv/torch_peer.py), and against the compute limit
 * (oneDNN sgemm's rate measured here). Prints numbers; asserts nothing.
 *
 *   W-B: 32x32x3 -> Conv2D(64,3x3,valid,relu) -> MaxPool 2x2 -> Flatten ->
 *        Dense(128,relu) -> Dense(10); sparse CE from logits, Adam;
 *        synthetic data; ms per training step at batch 256 (and 1024),
 *        median of --reps steps, with a per-kernel breakdown.
 *   W-D: sklearn digits (8x8): Conv(16,3x3,same) -> Conv(32,3x3,same) ->
 *        MaxPool 2x2 -> Flatten -> Dense(64,relu) -> Dense(10); Adam 1e-3,
 *        batch 32, 10 epochs on the 80% split; total seconds and test
 *        accuracy (median of 3 runs).
 *
 *     build-conv/bench/conv/bench_conv [--reps N] [--no-torch] [--b1024]
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
#include "../../tests/conv/conv_models.h"

#ifndef RT_SOURCE_DIR
#define RT_SOURCE_DIR "."
#endif

#define RT_BENCH_NAME "bench_conv"
#include "../bench_util.h"

/* oneDNN sgemm GFLOP/s on a square product: the compute limit */
static double gemm_rate(void)
{
    const int n = 1024;
    float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n),
          *c = malloc(sizeof(float) * n * n);
    for (int i = 0; i < n * n; i++) a[i] = b[i] = 0.001f * (float)(i % 97);
    double t[7];
    for (int r = 0; r < 7; r++) {
        double t0 = now_s();
        dnnl_sgemm('N', 'N', n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        t[r] = now_s() - t0;
    }
    free(a);
    free(b);
    free(c);
    return 2.0 * n * n * n / median(t, 7) * 1e-9;
}

/* per kernel call: the plan's calls run one by one on buffers laid out
 * like the exec's (one arena, the parameter and gradient blocks), filled
 * with small random values; medians over reps */
static void kernel_breakdown(rt_plan *p, int64_t n, int reps)
{
    uint64_t s = 11;
    const int nc = p->n_fwd + p->n_bwd;
    unsigned char *arena = rt__aligned_alloc((size_t)p->arena_bytes);
    float *wb = rt__aligned_alloc(sizeof(float) * (size_t)(p->param_floats + p->train_floats));
    float *gs = rt__aligned_alloc(sizeof(float) * (size_t)p->gemm_scratch_floats + 64);
    for (uint64_t i = 0; i + 4 <= p->arena_bytes; i += 4) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        float v = (float)((s >> 40) & 0xffff) / 65536.0f - 0.5f;
        memcpy(arena + i, &v, 4);
    }
    for (int i = 0; i < p->n_params; i++)
        rt__init_param(&p->params[i], i, 1, wb + p->params[i].off);
    rt__run run = {.n = n, .training = 1, .seed = 1, .gemm_scratch = gs,
                   .gemm_scratch_floats = p->gemm_scratch_floats};
    rt__kargs *k = calloc((size_t)nc, sizeof *k);
#define RES(r) ((r).space == RT__SP_ARENA ? (float *)(arena + (r).off)             \
            : (r).space == RT__SP_PARAM ? wb + (r).off                          \
            : (r).space == RT__SP_GRAD ? wb + p->param_floats + (r).off : NULL)
    for (int c = 0; c < nc; c++) {
        const rt__call *cl = &p->calls[c];
        k[c].nd = cl->nd;
        k[c].r = &run;
        k[c].y = RES(cl->y);
        k[c].dy = RES(cl->dy);
        k[c].scratch = RES(cl->scratch);
        k[c].accum = cl->accum;
        for (int j = 0; j < cl->nd->n_in; j++) {
            k[c].x[j] = RES(cl->x[j]);
            k[c].dx[j] = RES(cl->dx[j]);
        }
    }
#undef RES
    double *kt = calloc((size_t)nc * (size_t)reps, sizeof(double));
    for (int i = 0; i < reps; i++)
        for (int c = 0; c < nc; c++) {
            double t0 = now_s();
            p->calls[c].fn(&k[c]);
            kt[(size_t)c * (size_t)reps + (size_t)i] = now_s() - t0;
        }
    double sum = 0;
    for (int c = 0; c < nc; c++) {
        double m = median(kt + (size_t)c * (size_t)reps, reps) * 1e3;
        sum += m;
        printf("    %-4s %-12s %-10s %7.2f ms\n", p->calls[c].bwd ? "bwd" : "fwd",
               p->calls[c].nd->name, p->calls[c].nd->op->name, m);
    }
    printf("    kernels total %.2f ms; gather, loss and Adam take the rest\n", sum);
    free(kt);
    free(k);
    free(arena);
    free(wb);
    free(gs);
}

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
    if (verbose) kernel_breakdown(p, n, reps);
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
        kernel_breakdown(p, 32, 50);
    }
    rt_exec_destroy(e);
    rt_plan_release(p);
    rt_graph_destroy(g);
    return secs;
}

int main(int argc, char **argv)
{
    int reps = 20, torch = 1, b1024 = 0;
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
        else {
            fprintf(stderr, "usage: %s [--reps N] [--no-torch] [--b1024]\n", argv[0]);
            return 2;
        }
    }
    if (reps < 3) reps = 3;
    const double rate = gemm_rate();
    printf("oneDNN sgemm 1024^3: %.0f GFLOP/s (the compute limit)\n", rate);

    uint64_t fl, arena;
    printf("  W-B per kernel at batch 256:\n");
    const double wb = bench_wb(256, reps, 1, &fl, &arena);
    const double limit_ms = (double)fl / (rate * 1e9) * 1e3;
    printf("W-B batch 256: rtrain %.2f ms/step (%.0f img/s), %.2f GFLOP/step, "
           "limit %.2f ms -> %.0f%% of the GEMM limit; arena %.1f MiB\n",
           wb, 256.0 / wb * 1e3, (double)fl * 1e-9, limit_ms, 100.0 * limit_ms / wb,
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
