/*
 * bench_onnx.c - PyTorch models through the ONNX importer, in one run:
 *
 *   1. W-B exported by PyTorch vs W-B as Keras JSON: both compile to the
 *      same program (the kernel call lists are compared function by
 *      function) and their training steps take the same time (batch 256,
 *      Adam, sparse CE from logits; medians of interleaved rounds).
 *   2. Import and compile time of the ResNet-style block
 *      (tests/onnx/fixtures/rb.onnx) and of ResNet-18 at 32x32
 *      (bench/onnx/models.py; 11.2M parameters, 44.8 MB of ONNX).
 *   3. ResNet-18 training step at batch 64 (32x32x3, SGD momentum 0.9)
 *      against PyTorch eager (torch_peer.py: 2 threads, OPENBLAS_CORETYPE
 *      unset), medians.
 *
 * Prints tables; asserts nothing. Needs python3-torch to write the models.
 *
 *     build/bench/onnx/bench_onnx [--reps N] [--warmup N] [--no-torch] [--backend NAME]
 *
 * --backend ref with --reps 1 --warmup 1 times the reference backend's
 * ResNet-18 step in a few minutes (its plain loops run at a few GFLOP/s).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "import_keras.h"
#include "import_onnx.h"
#include "rt_engine.h"
#include "rt_engine_impl.h"

#ifndef RT_SOURCE_DIR
#define RT_SOURCE_DIR "."
#endif

#define RT_BENCH_NAME "bench_onnx"
#include "../bench_util.h"
#include "../bench_limit.h"

/* W-B as Keras writes it (docs/workloads.md) */
static const char *wb_keras =
    "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"wb\", \"layers\": ["
    "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 32, 32, 3], "
    "\"dtype\": \"float32\", \"name\": \"x\"}},"
    "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"conv\", \"filters\": 64, "
    "\"kernel_size\": [3, 3], \"strides\": [1, 1], \"padding\": \"valid\", \"activation\": "
    "\"linear\", \"use_bias\": true}},"
    "{\"class_name\": \"Activation\", \"config\": {\"name\": \"relu1\", \"activation\": \"relu\"}},"
    "{\"class_name\": \"MaxPooling2D\", \"config\": {\"name\": \"pool\", \"pool_size\": [2, 2], "
    "\"strides\": [2, 2], \"padding\": \"valid\"}},"
    "{\"class_name\": \"Flatten\", \"config\": {\"name\": \"flat\"}},"
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"fc1\", \"units\": 128, "
    "\"activation\": \"linear\", \"use_bias\": true}},"
    "{\"class_name\": \"Activation\", \"config\": {\"name\": \"relu2\", \"activation\": \"relu\"}},"
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"fc2\", \"units\": 10, "
    "\"activation\": \"linear\", \"use_bias\": true}}"
    "]}, \"keras_version\": \"2.12.0\", \"backend\": \"tensorflow\"}";

static uint8_t *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) die("open", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) die("read", path);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static rt_plan *compile(rt_graph *g, rt_train_config *cfg, const char *what)
{
    char err[512];
    rt_plan *p;
    if (rt_plan_compile(g, cfg, &p, NULL, err, sizeof err) < 0) die(what, err);
    return p;
}

/* synthetic inputs and labels for n samples of p */
static rt_data make_data(rt_plan *p, int64_t n, float **x, int32_t **y)
{
    int64_t d[RT_MAX_DIMS], per = 1;
    int nd = rt_plan_input_shape(p, d);
    for (int k = 0; k < nd; k++) per *= d[k];
    *x = malloc(sizeof(float) * (size_t)(n * per));
    *y = malloc(sizeof(int32_t) * (size_t)n);
    for (int64_t i = 0; i < n * per; i++) (*x)[i] = (float)((i * 2654435761u) % 1000) / 1000.0f;
    for (int64_t i = 0; i < n; i++) (*y)[i] = (int32_t)(i % 10);
    return (rt_data){.x = *x, .y = *y, .y_dtype = RT_I32, .n = n};
}

/* steps run before the timed ones, on each program (--warmup) */
static int warmup = 2;

static double step_ms(rt_exec *e, const rt_data *d, int steps)
{
    rt_train_result r;
    double t0 = now_s();
    if (rt_exec_train(e, d, steps, &r, NULL, NULL, NULL) < 0) die("train", rt_exec_errmsg(e));
    return (now_s() - t0) * 1e3 / steps;
}

/* the kernel call lists of two plans, function by function */
static int same_program(const rt_plan *a, const rt_plan *b)
{
    if (a->n_fwd != b->n_fwd || a->n_bwd != b->n_bwd) return 0;
    for (int i = 0; i < a->n_fwd + a->n_bwd; i++)
        if (a->calls[i].fn != b->calls[i].fn) return 0;
    return a->rep.flops_per_step == b->rep.flops_per_step &&
           a->arena_bytes == b->arena_bytes && a->param_floats == b->param_floats;
}

static void bench_wb(const char *dir, int reps)
{
    char path[512], err[512];
    size_t len;
    snprintf(path, sizeof path, "%s/wb.onnx", dir);
    uint8_t *onnx = read_all(path, &len);
    rt_graph *go, *gk;
    /* NHWC data, as the Keras model takes it: the same program */
    rt_onnx_opts io = {.data_nhwc = 1};
    if (rt_onnx_import_opts(onnx, len, &io, &go, err, sizeof err) < 0)
        die("import W-B onnx", err);
    if (rt_keras_import(wb_keras, strlen(wb_keras), &gk, err, sizeof err) < 0)
        die("import W-B keras", err);
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.from_logits = 1;
    cfg.batch_size = 256;
    cfg.metrics = 0;
    rt_plan *po = compile(go, &cfg, "compile W-B onnx"), *pk = compile(gk, &cfg, "compile W-B keras");
    rt_exec *eo, *ek;
    if (rt_exec_create(po, &eo) < 0 || rt_exec_create(pk, &ek) < 0) die("exec", "W-B");
    float *x;
    int32_t *y;
    rt_data d = make_data(po, 256 * 4, &x, &y);
    step_ms(eo, &d, warmup);
    step_ms(ek, &d, warmup);
    double to[64], tk[64];
    if (reps > 64) reps = 64;
    for (int r = 0; r < reps; r++) { /* interleaved: the machine's noise hits both */
        to[r] = step_ms(eo, &d, 2);
        tk[r] = step_ms(ek, &d, 2);
    }
    const double mo = median(to, reps), mk = median(tk, reps);
    printf("\n1. W-B (32x32x3, batch 256, Adam), PyTorch's ONNX export vs Keras JSON\n");
    printf("| model | kernel calls | GFLOP/step | arena MB | ms/step (median of %d) |\n", reps);
    printf("| --- | --- | --- | --- | --- |\n");
    printf("| W-B from ONNX | %u | %.2f | %.1f | %.2f |\n", po->rep.n_kernels,
           po->rep.flops_per_step * 1e-9, po->arena_bytes / 1048576.0, mo);
    printf("| W-B from Keras JSON | %u | %.2f | %.1f | %.2f |\n", pk->rep.n_kernels,
           pk->rep.flops_per_step * 1e-9, pk->arena_bytes / 1048576.0, mk);
    printf("same program (every kernel call's function, FLOPs, arena, parameters): %s; "
           "step time ONNX / Keras = %.3f\n", same_program(po, pk) ? "yes" : "NO", mo / mk);
    free(x);
    free(y);
    rt_exec_destroy(eo);
    rt_exec_destroy(ek);
    rt_plan_release(po);
    rt_plan_release(pk);
    rt_graph_destroy(go);
    rt_graph_destroy(gk);
    free(onnx);
}

/* torch_peer.py --serve, OPENBLAS_CORETYPE unset: one step per line */
typedef struct peer {
    pid_t pid;
    FILE *to, *from;
} peer;

static void peer_start(peer *p)
{
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0) die("pipe", "peer");
    p->pid = fork();
    if (p->pid < 0) die("fork", "peer");
    if (p->pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[1]);
        close(out[0]);
        unsetenv("OPENBLAS_CORETYPE");
        char script[512];
        snprintf(script, sizeof script, "%s/bench/onnx/torch_peer.py", RT_SOURCE_DIR);
        execl("/usr/bin/python3", "python3", script, "--serve", (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    p->to = fdopen(in[1], "w");
    p->from = fdopen(out[0], "r");
    char line[64];
    if (!fgets(line, sizeof line, p->from) || strncmp(line, "ready", 5) != 0) {
        fprintf(stderr, "bench_onnx: the PyTorch peer did not start (python3-torch?)\n");
        fclose(p->to);
        fclose(p->from);
        waitpid(p->pid, NULL, 0);
        p->pid = 0;
    }
}

static double peer_step(peer *p)
{
    char line[64];
    double ms = NAN;
    fputs("step\n", p->to);
    fflush(p->to);
    if (fgets(line, sizeof line, p->from)) ms = atof(line);
    return ms;
}

static void peer_stop(peer *p)
{
    fclose(p->to);
    fclose(p->from);
    waitpid(p->pid, NULL, 0);
}

/* import and compile times (median of reps); the plan of the last */
static rt_plan *import_compile(const char *name, const char *path, int batch, int reps,
                               rt_train_config *cfg)
{
    size_t len;
    uint8_t *onnx = read_all(path, &len);
    double ti[16], tc[16];
    rt_plan *p = NULL;
    char err[512];
    if (reps > 16) reps = 16;
    cfg->batch_size = batch;
    for (int r = 0; r < reps; r++) {
        rt_graph *g;
        double t0 = now_s();
        if (rt_onnx_import(onnx, len, NULL, &g, err, sizeof err) < 0) die("import", err);
        double t1 = now_s();
        rt_plan_release(p);
        p = compile(g, cfg, name);
        double t2 = now_s();
        ti[r] = (t1 - t0) * 1e3;
        tc[r] = (t2 - t1) * 1e3;
        rt_graph_destroy(g);
    }
    printf("| %s | %.1f KB | %llu | %d | %.2f | %.2f |\n", name, len / 1e3,
           (unsigned long long)p->rep.param_count, p->n_nodes, median(ti, reps),
           median(tc, reps));
    free(onnx);
    return p;
}

int main(int argc, char **argv)
{
    int reps = 7, torch = 1;
    const char *backend = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) warmup = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-torch")) torch = 0;
        else if (!strcmp(argv[i], "--backend") && i + 1 < argc) backend = argv[++i];
        else die("usage", "bench_onnx [--reps N] [--warmup N] [--no-torch] [--backend NAME]");
    }
    if (reps < 1) reps = 1;
    if (warmup < 1) warmup = 1;
    bench_backend(backend);
    rt_bench_limit limit;
    rt_bench_limit_measure(&limit, 0);
    rt_bench_limit_print(&limit);
    char dir[] = "/tmp/bench_onnx.XXXXXX", cmd[2048];
    if (!mkdtemp(dir)) die("mkdtemp", dir);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/bench/onnx/models.py %s 2>/dev/null",
             RT_SOURCE_DIR, dir);
    if (system(cmd) != 0) die("models.py (needs python3-torch)", cmd);

    bench_wb(dir, reps);

    printf("\n2. import and compile (median of 5; compile at the batch of section 3)\n");
    printf("| model | ONNX | parameters | nodes | import ms | compile ms |\n");
    printf("| --- | --- | --- | --- | --- | --- |\n");
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.from_logits = 1;
    cfg.metrics = 0;
    cfg.opt = RT_OPT_SGD;
    cfg.lr = 0.01f;
    cfg.momentum = 0.9f;
    char path[512];
    snprintf(path, sizeof path, "%s/tests/onnx/fixtures/rb.onnx", RT_SOURCE_DIR);
    rt_plan_release(import_compile("ResNet-style block (rb)", path, 64, 5, &cfg));
    snprintf(path, sizeof path, "%s/resnet18.onnx", dir);
    rt_plan *p = import_compile("ResNet-18, 32x32", path, 64, 5, &cfg);

    rt_exec *e;
    if (rt_exec_create(p, &e) < 0) die("exec", "ResNet-18");
    float *x;
    int32_t *y;
    rt_data d = make_data(p, 64 * 2, &x, &y);
    step_ms(e, &d, warmup);
    double t[64], tt[64];
    const int rr = reps > 64 ? 64 : reps;
    peer pr = {0};
    if (torch) peer_start(&pr);
    for (int r = 0; r < rr; r++) { /* interleaved with the peer's steps */
        t[r] = step_ms(e, &d, 1);
        if (pr.pid > 0) tt[r] = peer_step(&pr);
    }
    const double mr = median(t, rr);
    double mt = NAN;
    if (pr.pid > 0) {
        mt = median(tt, rr);
        peer_stop(&pr);
    }
    printf("\n3. ResNet-18 training step, batch 64, 32x32x3, SGD momentum (median of %d, "
           "interleaved with the peer's)\n", rr);
    printf("| | ms/step | images/s | GFLOP/step | GFLOP/s | share of the limit |\n"
           "| --- | --- | --- | --- | --- | --- |\n");
    const double gf = p->rep.flops_per_step / (mr * 1e-3) * 1e-9;
    char sh[96];
    printf("| rtrain (ONNX import) | %.1f | %.0f | %.1f | %.0f | %s |\n", mr, 64e3 / mr,
           p->rep.flops_per_step * 1e-9, gf, rt_bench_limit_share(&limit, gf, sh, sizeof sh));
    if (!isnan(mt))
        printf("| PyTorch eager (2 threads, OPENBLAS_CORETYPE unset) | %.1f | %.0f | |\n", mt,
               64e3 / mt);
    printf("ratio: rtrain %.2fx PyTorch's speed\n", isnan(mt) ? NAN : mt / mr);
    free(x);
    free(y);
    rt_exec_destroy(e);
    rt_plan_release(p);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "bench_onnx: could not remove %s\n", dir);
    return 0;
}
