/*
 * bench_mobilenet.c - MobileNet v1 (224x224x3, 1000 classes; the Keras
 * 2.2 JSON of tests/fixtures/keras-corpus/keras_mobile_net.json, or the
 * file given) against PyTorch eager measured in the same run
 * (bench/mobilenet/torch_peer.py builds the same layer sequence from the
 * same JSON; OPENBLAS_CORETYPE unset for it):
 *   - import + compile: rt_keras_import + rt_plan_compile (batch 32,
 *     sparse categorical crossentropy, Adam), median of 9; the peer's row
 *     is json.load + building the torch module from the config;
 *   - a training step at batch B (default 32): 1 warm-up step, then the
 *     median of reps single steps, on the default threads (OpenMP's team,
 *     2 here) and torch.set_num_threads(2).
 *
 *     ./build/bench/mobilenet/bench_mobilenet [reps] [batch] [model.json]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <omp.h>

#include "import_keras.h"
#include "rt_engine.h"

#define RT_BENCH_NAME "bench_mobilenet"
#include "../bench_util.h"

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = n > 0 ? malloc((size_t)n + 1) : NULL;
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) {
        b[n] = 0;
        *len = (size_t)n;
    }
    return b;
}

/* torch_peer.py prints "build_ms MS" and "step_ms MS" */
static void peer_line(const char *line, void *ud)
{
    double *ms = ud;
    sscanf(line, "build_ms %lf", &ms[0]);
    sscanf(line, "step_ms %lf", &ms[1]);
}

static void run_torch(const char *json, int reps, int batch, int threads, char *version,
                      double *build_ms, double *step_ms)
{
    double ms[2] = {-1, -1};
    if (run_peer(version, peer_line, ms, "mobilenet/torch_peer.py '%s' %d %d %d", json, reps,
                 batch, threads) < 0)
        ms[0] = ms[1] = -1;
    *build_ms = ms[0];
    *step_ms = ms[1];
}

static void config(rt_train_config *cfg, int batch)
{
    rt_train_config_init(cfg);
    cfg->loss = RT_LOSS_SPARSE_CE;
    cfg->label_dtype = RT_I32;
    cfg->batch_size = batch;
    cfg->seed = 1;
    cfg->shuffle = 0;
    cfg->metrics = 0;
}

int main(int argc, char **argv)
{
    const int reps = argc > 1 ? atoi(argv[1]) : 5;
    const int batch = argc > 2 ? atoi(argv[2]) : 32;
    char dflt[1024];
    snprintf(dflt, sizeof dflt, "%s/tests/fixtures/keras-corpus/keras_mobile_net.json",
             RT_SOURCE_DIR);
    const char *path = argc > 3 ? argv[3] : dflt;
    if (reps < 1 || batch < 1) die("usage", "bench_mobilenet [reps] [batch] [model.json]");
    size_t len = 0;
    char *js = slurp(path, &len);
    if (!js) die(path, "cannot read");
    char err[4096];
    rt_train_config cfg;
    config(&cfg, batch);

    /* import + compile, median of 9 */
    double t_ic[9], t_imp[9];
    rt_plan *p = NULL;
    rt_compile_report rep;
    for (int r = 0; r < 9; r++) {
        rt_graph *g = NULL;
        double t0 = now_s();
        if (rt_keras_import(js, len, &g, err, sizeof err) < 0) die("import", err);
        double t1 = now_s();
        if (p) rt_plan_release(p);
        if (rt_plan_compile(g, &cfg, &p, &rep, err, sizeof err) < 0) die("compile", err);
        t_imp[r] = (t1 - t0) * 1e3;
        t_ic[r] = (now_s() - t0) * 1e3;
        rt_graph_destroy(g);
    }
    const double imp_ms = median(t_imp, 9), ic_ms = median(t_ic, 9);
    int64_t in[RT_MAX_DIMS], out[RT_MAX_DIMS], xn = 1, classes = 1;
    for (int i = 0, n = rt_plan_input_shape(p, in); i < n; i++) xn *= in[i];
    for (int i = 0, n = rt_plan_output_shape(p, out); i < n; i++) classes *= out[i];
    printf("MobileNet (%s), batch %d\n  %llu params, %.2f GFLOP/step, arena %.0f MB\n", path,
           batch, (unsigned long long)rep.param_count, (double)rep.flops_per_step * 1e-9,
           (double)rep.arena_bytes / 1e6);

    /* a training step */
    rt_exec *e;
    if (rt_exec_create(p, &e) < 0) die("exec", "create");
    const int64_t n = 2 * (int64_t)batch;
    float *x = malloc(sizeof(float) * (size_t)(n * xn));
    int32_t *y = malloc(sizeof(int32_t) * (size_t)n);
    if (!x || !y) die("data", "out of memory");
    uint64_t s = 42;
    for (int64_t i = 0; i < n * xn; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((s >> 40) % 2000) / 1000.0f - 1.0f;
    }
    for (int64_t i = 0; i < n; i++) y[i] = (int32_t)(i * 37 % classes);
    rt_data d = {.x = x, .y = y, .y_dtype = RT_I32, .n = n};
    rt_train_result res;
    if (rt_exec_train(e, &d, 1, &res, NULL, NULL, NULL) < 0) die("train", rt_exec_errmsg(e));
    double *t = malloc(sizeof(double) * (size_t)reps);
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        if (rt_exec_train(e, &d, 1, &res, NULL, NULL, NULL) < 0) die("train", rt_exec_errmsg(e));
        t[r] = (now_s() - t0) * 1e3;
    }
    const double step_ms = median(t, reps);
    const int threads = omp_get_max_threads();
    rt_exec_destroy(e);
    rt_plan_release(p);
    free(x);
    free(y);
    free(t);
    free(js);

    printf("running PyTorch peer (bench/mobilenet/torch_peer.py)...\n");
    char version[64] = "?";
    double pb = -1, ps = -1;
    if (!getenv("RT_BENCH_NO_PEER")) run_torch(path, reps, batch, threads, version, &pb, &ps);
    printf("\n%-46s %12s %12s %8s\n", "median", "rtrain", "torch", "ratio");
    printf("%-46s %9.2f ms %12s\n", "import (rt_keras_import)", imp_ms, "");
    char row[96];
    snprintf(row, sizeof row, "import + compile / torch module build");
    if (pb > 0)
        printf("%-46s %9.2f ms %9.2f ms %7.2fx\n", row, ic_ms, pb, pb / ic_ms);
    else
        printf("%-46s %9.2f ms %12s\n", row, ic_ms, "(no peer)");
    snprintf(row, sizeof row, "training step, batch %d, %d thread%s", batch, threads,
             threads == 1 ? "" : "s");
    if (ps > 0)
        printf("%-46s %9.1f ms %9.1f ms %7.2fx\n", row, step_ms, ps, ps / step_ms);
    else
        printf("%-46s %9.1f ms %12s\n", row, step_ms, "(no peer)");
    printf("(torch %s; ratio = torch / rtrain, above 1: rtrain is faster)\n", version);
    return 0;
}
