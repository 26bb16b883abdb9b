/*
 * bench_inception.c - `rtrain bench inception`: Inception v3 (Keras'
 * InceptionV3 as examples/inception/gen_keras_inception_v3.py writes it,
 * SIZE x SIZE x 3, 10 classes) trained in rtrain's engine beside
 * torchvision's inception_v3(aux_logits=False, init_weights=True) in
 * PyTorch eager, in the same run (bench/inception/torch_peer.py, Debian's
 * /usr/bin/python3, OPENBLAS_CORETYPE unset for it). Both: Adam lr 1e-3,
 * sparse categorical crossentropy, synthetic images, the same batch and
 * threads. Prints per framework and precision:
 *   - images/s: batch / the median of STEPS single training steps after one
 *     warm-up step;
 *   - time to first step: model build (rtrain: import + compile + exec) to
 *     the end of the first training step, cold;
 *   - $ per epoch: EPOCH images at the images/s, at --price-per-hour.
 * rtrain's bf16 row is Keras' mixed_bfloat16 (rt_train_config.precision:
 * its Conv2D and Dense layers multiply in bf16, docs/usage.md); where the
 * CPU or backend has none the row says why. torch's bf16 row is
 * torch.autocast("cpu", dtype=torch.bfloat16). It asserts nothing about
 * time.
 *
 *   bench_inception [--steps N] [--batch B] [--size S] [--epoch-images N]
 *                   [--price-per-hour P] [--no-peer]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <omp.h>

#include "import_keras.h"
#include "rt_engine.h"

#define RT_BENCH_NAME "bench_inception"
#include "../bench_util.h"

/* the model JSON, from the generator (the single source of the layout) */
static char *gen_json(int size, size_t *len)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 %s/examples/inception/gen_keras_inception_v3.py /dev/stdout %d 10",
             RT_SOURCE_DIR, size);
    FILE *f = popen(cmd, "r");
    if (!f) return NULL;
    size_t cap = 1 << 20, n = 0;
    char *b = malloc(cap);
    for (size_t r; b && (r = fread(b + n, 1, cap - n - 1, f)) > 0;) {
        n += r;
        if (n + 1 == cap) b = realloc(b, cap *= 2);
    }
    if (pclose(f) != 0 || !b || n == 0) {
        free(b);
        return NULL;
    }
    b[n] = 0;
    *len = n;
    return b;
}

typedef struct {
    double ips, first_s; /* images/s; time to first step, s; < 0: none */
    char why[160];       /* rtrain: why there is no row */
} row;

/* torch_peer.py prints "fp32 IPS FIRST_S" and "bf16 IPS FIRST_S" lines */
static void peer_line(const char *line, void *ud)
{
    row *r = ud;
    sscanf(line, "fp32 %lf %lf", &r[0].ips, &r[0].first_s);
    sscanf(line, "bf16 %lf %lf", &r[1].ips, &r[1].first_s);
}

static void run_torch(int steps, int batch, int size, int threads, char *version, row *f32,
                      row *b16)
{
    row r[2] = {*f32, *b16};
    if (run_peer(version, peer_line, r, "inception/torch_peer.py %d %d %d %d", steps, batch,
                 size, threads) < 0)
        r[0].ips = r[1].ips = -1;
    *f32 = r[0];
    *b16 = r[1];
}

static double arg(int argc, char **argv, const char *name, double dflt)
{
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], name)) return atof(argv[i + 1]);
    return dflt;
}

static void print_row(const char *what, row r, double epoch, double price)
{
    if (r.ips <= 0) {
        printf("%-28s %s\n", what, r.why[0] ? r.why : "(no peer)");
        return;
    }
    double epoch_s = epoch / r.ips;
    printf("%-28s %10.2f img/s  first step %7.2f s  epoch %8.1f s  $%.4f/epoch\n", what, r.ips,
           r.first_s, epoch_s, epoch_s / 3600.0 * price);
}

/* rtrain at precision prec: images/s over steps single steps and the
 * time from the JSON to the end of the first step (import, compile,
 * exec, one step); a compile refused (no bf16 here) gives why */
static row rtrain_row(const char *js, size_t len, int prec, int batch, int size, int steps,
                      rt_compile_report *rep)
{
    row r = {-1, -1, ""};
    char err[4096];
    double t0 = now_s();
    rt_graph *g = NULL;
    if (rt_keras_import(js, len, &g, err, sizeof err) < 0) die("import", err);
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_SPARSE_CE;
    cfg.label_dtype = RT_I32;
    cfg.opt = RT_OPT_ADAM;
    cfg.lr = 1e-3f;
    cfg.batch_size = batch;
    cfg.seed = 1;
    cfg.shuffle = 0;
    cfg.metrics = 0;
    cfg.precision = prec;
    rt_plan *p = NULL;
    int rc = rt_plan_compile(g, &cfg, &p, rep, err, sizeof err);
    rt_graph_destroy(g);
    if (rc < 0 && prec == RT_PREC_BF16) {
        snprintf(r.why, sizeof r.why, "n/a (%.140s)", err);
        return r;
    }
    if (rc < 0) die("compile", err);
    rt_exec *e;
    if (rt_exec_create(p, &e) < 0) die("exec", "create");
    const int64_t xn = (int64_t)size * size * 3;
    float *x = malloc(sizeof(float) * (size_t)(batch * xn));
    int32_t *y = malloc(sizeof(int32_t) * (size_t)batch);
    if (!x || !y) die("data", "out of memory");
    uint64_t s = 42;
    for (int64_t i = 0; i < batch * xn; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((s >> 40) % 2000) / 1000.0f - 1.0f;
    }
    for (int i = 0; i < batch; i++) y[i] = i * 7 % 10;
    rt_data d = {.x = x, .y = y, .y_dtype = RT_I32, .n = batch};
    rt_train_result res;
    if (rt_exec_train(e, &d, 1, &res, NULL, NULL, NULL) < 0) die("train", rt_exec_errmsg(e));
    r.first_s = now_s() - t0;
    double *t = malloc(sizeof(double) * (size_t)steps);
    for (int k = 0; k < steps; k++) {
        double a = now_s();
        if (rt_exec_train(e, &d, 1, &res, NULL, NULL, NULL) < 0) die("train", rt_exec_errmsg(e));
        t[k] = now_s() - a;
    }
    r.ips = batch / median(t, steps);
    rt_exec_destroy(e);
    rt_plan_release(p);
    free(x);
    free(y);
    free(t);
    return r;
}

int main(int argc, char **argv)
{
    const int steps = (int)arg(argc, argv, "--steps", 5);
    const int batch = (int)arg(argc, argv, "--batch", 32);
    const int size = (int)arg(argc, argv, "--size", 75);
    const double epoch = arg(argc, argv, "--epoch-images", 60000);
    const double price = arg(argc, argv, "--price-per-hour", 1.0);
    int peer = 1;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--no-peer")) peer = 0;
    if (steps < 1 || batch < 1 || size < 75 || epoch < 1 || price < 0)
        die("usage", "[--steps N>=1] [--batch B>=1] [--size S>=75] [--epoch-images N] "
                     "[--price-per-hour P] [--no-peer]");

    size_t len = 0;
    char *js = gen_json(size, &len);
    if (!js) die("gen_keras_inception_v3.py", "failed");
    rt_compile_report rep;
    row r32 = rtrain_row(js, len, RT_PREC_F32, batch, size, steps, &rep);
    rt_compile_report rep16;
    row r16 = rtrain_row(js, len, RT_PREC_BF16, batch, size, steps, &rep16);
    const int threads = omp_get_max_threads();
    free(js);

    char version[64] = "?";
    row t32 = {-1, -1, ""}, t16 = {-1, -1, ""};
    if (peer) run_torch(steps, batch, size, threads, version, &t32, &t16);
    printf("Inception v3, %dx%dx3, 10 classes, batch %d, %d thread%s, Adam; %llu params "
           "(rtrain), %.2f GFLOP/step, arena %.0f MB (bf16: %.0f MB, %u ops in bf16)\n",
           size, size, batch, threads, threads == 1 ? "" : "s",
           (unsigned long long)rep.param_count, (double)rep.flops_per_step * 1e-9,
           (double)rep.arena_bytes / 1e6, r16.ips > 0 ? (double)rep16.arena_bytes / 1e6 : 0.0,
           r16.ips > 0 ? rep16.n_bf16 : 0u);
    printf("cost: $%.2f per hour, an epoch of %.0f images; median of %d steps\n", price, epoch,
           steps);
    print_row("rtrain float32", r32, epoch, price);
    print_row("rtrain bf16", r16, epoch, price);
    print_row("torchvision float32", t32, epoch, price);
    print_row("torchvision bf16 autocast", t16, epoch, price);
    if (peer) printf("(torch %s)\n", version);
    return 0;
}
