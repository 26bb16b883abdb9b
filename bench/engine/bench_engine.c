/*
 * bench_engine.c - training-step time of the engine against PyTorch eager,
 * measured in the same run (bench/engine/torch_peer.py), plus the GEMM
 * limit for W-C and the small-GEMM threshold. Prints numbers; asserts
 * nothing. See README.md.
 *
 *     build-engine/bench/engine/bench_engine [--reps N] [--no-torch] [--backend NAME]
 */
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <oneapi/dnnl/dnnl.h>

#include "rt_engine.h"
#include "cpu/rt_kern_cpu.h"

#ifndef RT_SOURCE_DIR
#define RT_SOURCE_DIR "."
#endif

#define RT_BENCH_NAME "bench_engine"
#include "../bench_util.h"
#include "../bench_limit.h"

/* Dense layers: widths[0] inputs ... widths[n] outputs; relu between */
static rt_plan *mlp_plan(const int *widths, int n, int softmax_out, rt_loss_kind loss,
                         int from_logits, float lr, int batch)
{
    rt_graph *g = rt_graph_create();
    int64_t in[] = {RT_BATCH, widths[0]};
    rt_graph_add_input(g, "x", RT_F32, 2, in);
    char prev[32] = "x";
    for (int l = 0; l < n; l++) {
        char w[32], b[32], d[32], a[32];
        snprintf(w, sizeof w, "d%d/kernel", l);
        snprintf(b, sizeof b, "d%d/bias", l);
        snprintf(d, sizeof d, "d%d", l);
        int64_t dw[] = {widths[l], widths[l + 1]}, db[] = {widths[l + 1]};
        rt_graph_add_param(g, w, 2, dw, RT_INIT_GLOROT_UNIFORM, 1, NULL);
        rt_graph_add_param(g, b, 1, db, RT_INIT_ZEROS, 1, NULL);
        const char *ins[] = {prev, w, b};
        rt_graph_add_node(g, d, "Dense", 3, ins, 0, NULL);
        snprintf(prev, sizeof prev, "%s", d);
        if (l + 1 < n || softmax_out) {
            snprintf(a, sizeof a, "a%d", l);
            const char *ai[] = {prev};
            rt_graph_add_node(g, a, l + 1 < n ? "Relu" : "Softmax", 1, ai, 0, NULL);
            snprintf(prev, sizeof prev, "%s", a);
        }
    }
    rt_graph_set_output(g, prev);
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = loss;
    cfg.from_logits = from_logits;
    cfg.opt = RT_OPT_ADAM;
    cfg.lr = lr;
    cfg.batch_size = batch;
    cfg.seed = 1;
    rt_plan *p;
    rt_compile_report rep;
    char err[256];
    if (rt_plan_compile(g, &cfg, &p, &rep, err, sizeof err) < 0) die("compile", err);
    rt_graph_destroy(g);
    printf("  compiled: %llu params, %.3f MFLOP/step, arena %llu B (naive %llu B), "
           "%u kernels/step, compile %.1f us\n",
           (unsigned long long)rep.param_count, (double)rep.flops_per_step * 1e-6,
           (unsigned long long)rep.arena_bytes, (unsigned long long)rep.naive_bytes,
           rep.n_kernels, (double)rep.compile_ns * 1e-3);
    return p;
}

typedef struct peer { double wa_us, wc_us; int ok; char version[64]; } peer;

static peer run_torch(const char *iris, int reps)
{
    peer r = {0};
    char cmd[1024];
    /* PyTorch at its best setting here: OpenBLAS picks its own kernels
     * (OPENBLAS_CORETYPE unset), 2 OpenMP threads, OpenBLAS at one thread. */
    snprintf(cmd, sizeof cmd,
             "env -u OPENBLAS_CORETYPE OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=1 "
             "/usr/bin/python3 %s/bench/engine/torch_peer.py %s %d",
             RT_SOURCE_DIR, iris, reps);
    FILE *f = popen(cmd, "r");
    if (!f) return r;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        sscanf(line, "wa_step_us %lf", &r.wa_us);
        sscanf(line, "wc_step_us %lf", &r.wc_us);
        sscanf(line, "torch_version %63s", r.version);
    }
    r.ok = pclose(f) == 0 && r.wa_us > 0 && r.wc_us > 0;
    return r;
}

static double bench_small_gemm(int use_dnnl, int ta, int tb, int M, int N, int K)
{
    static float A[65536], Bm[65536], C[65536], scratch[RT_KERN_GEMM_SCRATCH];
    for (int i = 0; i < 65536; i++) A[i] = Bm[i] = (float)(i % 7) * 0.1f;
    rt__run r = {.gemm_scratch = scratch, .gemm_scratch_floats = RT_KERN_GEMM_SCRATCH};
    int lda = ta ? M : K, ldb = tb ? K : N;
    double t[21];
    for (int rep = 0; rep < 21; rep++) {
        const int iters = 2000;
        double t0 = now_s();
        for (int i = 0; i < iters; i++) {
            if (use_dnnl)
                dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, A, lda, Bm, ldb, 0.0f, C, N);
            else
                rt_kern_gemm(&r, ta, tb, M, N, K, A, lda, Bm, ldb, 0.0f, C, N);
        }
        t[rep] = (now_s() - t0) / iters * 1e9;
    }
    return median(t, 21);
}

/* the 8 GEMMs of one W-C step (forward 3, dW 3, dx 2), straight to oneDNN */
static double bench_wc_gemms(int reps)
{
    const int Bt = 128, w[] = {784, 512, 512, 10};
    float *buf[16];
    for (int i = 0; i < 16; i++) {
        buf[i] = aligned_alloc(64, sizeof(float) * 784 * 512);
        for (int j = 0; j < 784 * 512; j++) buf[i][j] = (float)(j % 13) * 0.01f;
    }
    double *t = malloc(sizeof(double) * (size_t)reps);
    for (int rep = 0; rep < reps + 3; rep++) {
        double t0 = now_s();
        for (int it = 0; it < 10; it++) {
            for (int l = 0; l < 3; l++) /* y = x W */
                dnnl_sgemm('N', 'N', Bt, w[l + 1], w[l], 1.0f, buf[l], w[l], buf[4 + l], w[l + 1],
                           0.0f, buf[8 + l], w[l + 1]);
            for (int l = 2; l >= 0; l--) {
                /* dW = x^T dy */
                dnnl_sgemm('T', 'N', w[l], w[l + 1], Bt, 1.0f, buf[l], w[l], buf[8 + l], w[l + 1],
                           0.0f, buf[12 + l], w[l + 1]);
                if (l > 0) /* dx = dy W^T */
                    dnnl_sgemm('N', 'T', Bt, w[l], w[l + 1], 1.0f, buf[8 + l], w[l + 1], buf[4 + l],
                               w[l + 1], 0.0f, buf[l], w[l]);
            }
        }
        if (rep >= 3) t[rep - 3] = (now_s() - t0) / 10;
    }
    double m = median(t, reps);
    free(t);
    for (int i = 0; i < 16; i++) free(buf[i]);
    return m;
}

int main(int argc, char **argv)
{
    int reps = 31, torch = 1;
    const char *backend = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-torch")) torch = 0;
        else if (!strcmp(argv[i], "--backend") && i + 1 < argc) backend = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--reps N] [--no-torch] [--backend NAME]\n", argv[0]);
            return 2;
        }
    }
    if (reps < 3) reps = 3;
    bench_backend(backend);
    /* as rtraind (server/main.c) runs: large blocks stay in the heap, so
     * oneDNN's per-call packing buffers do not mmap/munmap every GEMM */
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 64 << 20);
    char iris[512];
    snprintf(iris, sizeof iris, "%s/tests/fixtures/iris.csv", RT_SOURCE_DIR);

    /* ---- W-A data: the first 105 rows of iris, as the story */
    float x[150 * 4];
    int32_t y[150];
    FILE *f = fopen(iris, "r");
    if (!f) die(iris, "cannot open");
    char line[256];
    int n = 0;
    if (!fgets(line, sizeof line, f)) die(iris, "empty");
    while (n < 150 && fgets(line, sizeof line, f))
        if (sscanf(line, "%f,%f,%f,%f,%d", &x[n * 4], &x[n * 4 + 1], &x[n * 4 + 2],
                   &x[n * 4 + 3], &y[n]) == 5)
            n++;
    fclose(f);

    printf("W-A: Dense(32, relu, input 4) -> Dense(3, softmax), logcosh, Adam, batch 20\n");
    const int wa_w[] = {4, 32, 3};
    rt_plan *pa = mlp_plan(wa_w, 2, 1, RT_LOSS_LOGCOSH, 0, 0.1f, 20);
    rt_exec *ea;
    if (rt_exec_create(pa, &ea) < 0) die("exec", "create");
    rt_data da = {.x = x, .y = y, .y_dtype = RT_I32, .n = 105};
    rt_exec_train(ea, &da, 600, NULL, NULL, NULL, NULL); /* warm up */
    double *t = malloc(sizeof(double) * (size_t)(reps > 201 ? reps : 201));
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        rt_exec_train(ea, &da, 120, NULL, NULL, NULL, NULL); /* 20 epochs */
        t[r] = (now_s() - t0) / 120 * 1e6;
    }
    double wa_us = median(t, reps);
    for (int r = 0; r < 201; r++) {
        double t0 = now_s();
        for (int k = 0; k < 20; k++) rt_exec_train(ea, &da, 1, NULL, NULL, NULL, NULL);
        t[r] = (now_s() - t0) / 20 * 1e6;
    }
    double wa_call_us = median(t, 201);
    rt_metrics m;
    rt_exec_evaluate(ea, &da, &m);
    printf("  after %lld steps: loss %.4f\n", (long long)rt_exec_global_step(ea), m.loss);
    rt_exec_destroy(ea);
    rt_plan_release(pa);

    /* ---- W-C: synthetic data, 10 batches */
    printf("W-C: 784-512-512-10 relu MLP, sparse CE from logits, Adam, batch 128\n");
    const int wc_w[] = {784, 512, 512, 10};
    rt_plan *pc = mlp_plan(wc_w, 3, 0, RT_LOSS_SPARSE_CE, 1, 1e-3f, 128);
    rt_exec *ec;
    if (rt_exec_create(pc, &ec) < 0) die("exec", "create");
    float *xc = malloc(sizeof(float) * 1280 * 784);
    int32_t *yc = malloc(sizeof(int32_t) * 1280);
    for (int i = 0; i < 1280 * 784; i++) xc[i] = (float)((i * 2654435761u) >> 16 & 1023) / 512.0f - 1.0f;
    for (int i = 0; i < 1280; i++) yc[i] = (int32_t)((i * 7919u) % 10);
    rt_data dc = {.x = xc, .y = yc, .y_dtype = RT_I32, .n = 1280};
    rt_exec_train(ec, &dc, 10, NULL, NULL, NULL, NULL);
    int wreps = reps < 15 ? reps : 15;
    for (int r = 0; r < wreps; r++) {
        double t0 = now_s();
        rt_exec_train(ec, &dc, 10, NULL, NULL, NULL, NULL);
        t[r] = (now_s() - t0) / 10 * 1e6;
    }
    double wc_us = median(t, wreps);
    /* the report lives in the plan: keep what is needed before releasing it */
    const double wc_flops = (double)rt_plan_report(pc)->flops_per_step;
    double wc_gemm_us = bench_wc_gemms(wreps) * 1e6;
    rt_exec_destroy(ec);
    rt_plan_release(pc);
    free(xc);
    free(yc);

    /* ---- small GEMMs: hand-written kernel against oneDNN */
    printf("small GEMM, ns per call (hand-written kernel below M*N*K = %d):\n",
           RT_KERN_SMALL_GEMM);
    static const int shapes[][5] = {
        {0, 0, 20, 32, 4},  {0, 0, 20, 3, 32}, {1, 0, 4, 32, 20}, {1, 0, 32, 3, 20},
        {0, 1, 20, 32, 3},  {0, 0, 32, 32, 32}, {0, 0, 64, 64, 8}, {1, 0, 64, 64, 8},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int *s = shapes[i];
        double own = bench_small_gemm(0, s[0], s[1], s[2], s[3], s[4]);
        double dn = bench_small_gemm(1, s[0], s[1], s[2], s[3], s[4]);
        printf("  %c%c M=%-3d N=%-3d K=%-3d  own %7.1f  oneDNN %7.1f\n", s[0] ? 'T' : 'N',
               s[1] ? 'T' : 'N', s[2], s[3], s[4], own, dn);
    }

    peer pt = {0};
    if (torch) {
        printf("running PyTorch peer (bench/engine/torch_peer.py)...\n");
        fflush(stdout);
        pt = run_torch(iris, reps < 15 ? reps : 15);
        if (!pt.ok) printf("  PyTorch peer failed; ratios omitted\n");
    }

    printf("\n%-34s %12s %12s %10s   %s\n", "median per training step", "rtrain",
           pt.ok ? "torch" : "-", pt.ok ? "speedup" : "", "target");
    /* without the peer its columns stay empty rather than printing zeros */
    char wa_t[32] = "", wa_r[32] = "", wc_t[32] = "", wc_r[32] = "";
    if (pt.ok) {
        snprintf(wa_t, sizeof wa_t, "%.1f us", pt.wa_us);
        snprintf(wa_r, sizeof wa_r, "%.1fx", pt.wa_us / wa_us);
        snprintf(wc_t, sizeof wc_t, "%.3f ms", pt.wc_us * 1e-3);
        snprintf(wc_r, sizeof wc_r, "%.2fx", pt.wc_us / wc_us);
    }
    printf("%-34s %9.3f us %12s %10s   <= 3 us, >= 70x\n", "W-A (120 steps per call)", wa_us,
           wa_t, wa_r);
    printf("%-34s %9.3f us %12s %10s\n", "W-A (1 step per call)", wa_call_us, "", "");
    printf("%-34s %9.3f ms %12s %10s   <= 1.5 ms, >= 2.5x\n", "W-C (Adam)", wc_us * 1e-3,
           wc_t, wc_r);
    printf("%-34s %9.3f ms %12s %9.2fx   <= 1.5x of the limit\n", "W-C GEMMs alone (oneDNN limit)",
           wc_gemm_us * 1e-3, "", wc_us / wc_gemm_us);
    rt_bench_limit limit;
    rt_bench_limit_measure(&limit, 0);
    const double wc_gf = wc_flops / (wc_us * 1e-6) * 1e-9;
    char sh[96];
    printf("%-34s %9.1f GFLOP/s (%.3f GFLOP/step), %s\n", "W-C achieved", wc_gf,
           wc_flops * 1e-9, rt_bench_limit_share(&limit, wc_gf, sh, sizeof sh));
    rt_bench_limit_print(&limit);
    if (pt.ok) printf("torch %s, 2 threads, OpenBLAS at 1 thread, OPENBLAS_CORETYPE unset\n", pt.version);
    free(t);
    return 0;
}
