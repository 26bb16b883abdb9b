/*
 * bench_rnn.c - a training step of a small IMDB-like LSTM model, imported
 * from Keras JSON (Embedding(10000, 64) -> LSTM(64) -> Dense(1, sigmoid);
 * binary crossentropy, Adam, batch 32, sequence 100), against PyTorch
 * eager (bench/rnn/torch_peer.py, OPENBLAS_CORETYPE unset for it) measured
 * in the same run, both on 2 threads (the default here: OpenMP's team of
 * the machine's 2 cores) and on 1. Both sides: 3 warm-up steps, then the
 * median over repetitions of 5 steps of the per-step time. On a loaded
 * machine the 2-thread figures of both sides suffer from team members
 * that are not scheduled; the 1-thread rows show the kernels alone.
 *
 *     ./build/bench/rnn/bench_rnn [reps]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <omp.h>

#include "import_keras.h"
#include "rt_engine.h"

#define B 32
#define T 100
#define V 10000

static const char *model_json =
    "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"imdb\", \"layers\": ["
    "{\"class_name\": \"Embedding\", \"config\": {\"name\": \"embedding\", "
    "\"batch_input_shape\": [null, 100], \"input_dim\": 10000, \"output_dim\": 64, "
    "\"mask_zero\": %s}},"
    "{\"class_name\": \"LSTM\", \"config\": {\"name\": \"lstm\", \"units\": 64, "
    "\"activation\": \"tanh\", \"recurrent_activation\": \"sigmoid\", \"use_bias\": true, "
    "\"unit_forget_bias\": true, \"dropout\": %s, \"recurrent_dropout\": %s, "
    "\"return_sequences\": false}},"
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"dense\", \"units\": 1, "
    "\"activation\": \"sigmoid\"}}]}}";

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_d);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

static void die(const char *what, const char *msg)
{
    fprintf(stderr, "%s: %s\n", what, msg);
    exit(1);
}

static void run_torch(int reps, char *version, double us[2])
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "env -u OPENBLAS_CORETYPE /usr/bin/python3 %s/bench/rnn/torch_peer.py %d",
             RT_SOURCE_DIR, reps);
    us[0] = us[1] = -1;
    FILE *f = popen(cmd, "r");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        sscanf(line, "lstm_step_us_2t %lf", &us[0]);
        sscanf(line, "lstm_step_us_1t %lf", &us[1]);
        sscanf(line, "torch_version %63s", version);
    }
    if (pclose(f) != 0) us[0] = us[1] = -1;
}

/* the median step time over reps repetitions of 5 steps */
static double measure(rt_exec *e, const rt_data *d, int reps)
{
    rt_train_result res;
    if (rt_exec_train(e, d, 3, &res, NULL, NULL, NULL) < 0) die("train", rt_exec_errmsg(e));
    double *t = malloc(sizeof(double) * (size_t)reps);
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        if (rt_exec_train(e, d, 5, &res, NULL, NULL, NULL) < 0) die("train", rt_exec_errmsg(e));
        t[r] = (now_s() - t0) / 5 * 1e6;
    }
    const double m = median(t, reps);
    free(t);
    return m;
}

/* the model with mask_zero, dropout and recurrent_dropout as given */
static rt_plan *compile_variant(const char *mask_zero, const char *drop, rt_compile_report *rep)
{
    char js[2048], err[256];
    snprintf(js, sizeof js, model_json, mask_zero, drop, drop);
    rt_graph *g;
    if (rt_keras_import(js, strlen(js), &g, err, sizeof err) < 0) die("import", err);
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_BCE;
    cfg.label_dtype = RT_F32;
    cfg.batch_size = B;
    cfg.seed = 1;
    cfg.shuffle = 0;
    cfg.metrics = 0;
    rt_plan *p;
    if (rt_plan_compile(g, &cfg, &p, rep, err, sizeof err) < 0) die("compile", err);
    rt_graph_destroy(g);
    return p;
}

int main(int argc, char **argv)
{
    const int reps = argc > 1 ? atoi(argv[1]) : 15;
    rt_graph *g;
    char err[256], js[2048];
    snprintf(js, sizeof js, model_json, "false", "0.0", "0.0");
    if (rt_keras_import(js, strlen(js), &g, err, sizeof err) < 0)
        die("import", err);
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_BCE;
    cfg.label_dtype = RT_F32;
    cfg.batch_size = B;
    cfg.seed = 1;
    cfg.shuffle = 0;
    cfg.metrics = 0;
    rt_plan *p;
    rt_compile_report rep;
    if (rt_plan_compile(g, &cfg, &p, &rep, err, sizeof err) < 0) die("compile", err);
    rt_graph_destroy(g);
    printf("IMDB-like LSTM: Embedding(%d, 64) -> LSTM(64) -> Dense(1, sigmoid), batch %d, "
           "sequence %d\n  compiled: %llu params, %.1f MFLOP/step, arena %.1f MB, "
           "compile %.1f us\n",
           V, B, T, (unsigned long long)rep.param_count, (double)rep.flops_per_step * 1e-6,
           (double)rep.arena_bytes / 1e6, (double)rep.compile_ns * 1e-3);
    rt_exec *e;
    if (rt_exec_create(p, &e) < 0) die("exec", "create");
    float *x = malloc(sizeof(float) * 8 * B * T), *y = malloc(sizeof(float) * 8 * B);
    uint64_t s = 42;
    for (int i = 0; i < 8 * B * T; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((s >> 33) % V);
    }
    for (int i = 0; i < 8 * B; i++) y[i] = (float)(i & 1);
    rt_data d = {.x = x, .y = y, .y_dtype = RT_F32, .n = 8 * B};
    const int threads = omp_get_max_threads();
    double ours[2];
    ours[0] = measure(e, &d, reps);
    omp_set_num_threads(1);
    ours[1] = measure(e, &d, reps);
    /* the same model with Embedding(mask_zero) on right-padded sequences
     * (every other sample's last 40 steps are index 0) and LSTM dropout
     * and recurrent_dropout 0.2, one thread, against the plain model
     * again in this run */
    rt_compile_report rep2;
    rt_plan *p2 = compile_variant("true", "0.2", &rep2);
    rt_exec *e2;
    if (rt_exec_create(p2, &e2) < 0) die("exec", "create");
    float *xm = malloc(sizeof(float) * 8 * B * T);
    memcpy(xm, x, sizeof(float) * 8 * B * T);
    for (int i = 0; i < 8 * B; i += 2)
        for (int t = T - 40; t < T; t++) xm[i * T + t] = 0.0f;
    for (int i = 0; i < 8 * B * T; i++)
        if (xm[i] == 0.0f && (i % T) < T - 40) xm[i] = 1.0f; /* only padding is 0 */
    rt_data dm = {.x = xm, .y = y, .y_dtype = RT_F32, .n = 8 * B};
    const double masked = measure(e2, &dm, reps);
    const double plain_again = measure(e, &d, reps);
    rt_exec_destroy(e2);
    rt_plan_release(p2);
    free(xm);
    omp_set_num_threads(threads);
    printf("running PyTorch peer (bench/rnn/torch_peer.py)...\n");
    char version[64] = "?";
    double peer[2] = {-1, -1};
    if (!getenv("RT_BENCH_NO_PEER")) run_torch(reps, version, peer);
    printf("\n%-40s %12s %12s %8s\n", "median per training step", "rtrain", "torch",
           "ratio");
    for (int k = 0; k < 2; k++) {
        char row[64];
        snprintf(row, sizeof row, "IMDB-like LSTM, %d thread%s", k ? 1 : threads,
                 k || threads == 1 ? "" : "s");
        if (peer[k] > 0)
            printf("%-40s %9.0f us %9.0f us %7.2fx\n", row, ours[k], peer[k], peer[k] / ours[k]);
        else
            printf("%-40s %9.0f us %12s\n", row, ours[k], "(no peer)");
    }
    printf("(torch %s; ratio = torch / rtrain, above 1: rtrain is faster)\n", version);
    printf("\n%-40s %12s %12s %8s\n", "median per training step, 1 thread", "variant",
           "plain", "ratio");
    printf("%-40s %9.0f us %9.0f us %7.2fx\n", "mask_zero + dropout 0.2 / recurrent 0.2",
           masked, plain_again, masked / plain_again);
    printf("(plain: the model without them, measured again in this run; ratio = variant / "
           "plain)\n");
    free(x);
    free(y);
    rt_exec_destroy(e);
    rt_plan_release(p);
    return 0;
}
