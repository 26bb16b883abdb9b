/*
 * bench_rnn.c - a training step of a small IMDB-like LSTM model, imported
 * from Keras JSON (Embedding(10000, 64) -> LSTM(64) -> Dense(1, sigmoid);
 * binary crossentropy, Adam, batch 32, sequence 100), against PyTorch
 * eager (bench/rnn/torch_peer.py, 2 threads, OPENBLAS_CORETYPE unset for
 * it) measured in the same run. Both sides: 3 warm-up steps, then the
 * median over repetitions of 5 steps of the per-step time.
 *
 *     ./build/bench/rnn/bench_rnn [reps]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "import_keras.h"
#include "rt_engine.h"

#define B 32
#define T 100
#define V 10000

static const char *model_json =
    "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"imdb\", \"layers\": ["
    "{\"class_name\": \"Embedding\", \"config\": {\"name\": \"embedding\", "
    "\"batch_input_shape\": [null, 100], \"input_dim\": 10000, \"output_dim\": 64, "
    "\"mask_zero\": false}},"
    "{\"class_name\": \"LSTM\", \"config\": {\"name\": \"lstm\", \"units\": 64, "
    "\"activation\": \"tanh\", \"recurrent_activation\": \"sigmoid\", \"use_bias\": true, "
    "\"unit_forget_bias\": true, \"dropout\": 0.0, \"recurrent_dropout\": 0.0, "
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

static double run_torch(int reps, char *version)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "env -u OPENBLAS_CORETYPE /usr/bin/python3 %s/bench/rnn/torch_peer.py %d",
             RT_SOURCE_DIR, reps);
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    char line[256];
    double us = -1;
    while (fgets(line, sizeof line, f)) {
        sscanf(line, "lstm_step_us %lf", &us);
        sscanf(line, "torch_version %63s", version);
    }
    return pclose(f) == 0 ? us : -1;
}

int main(int argc, char **argv)
{
    const int reps = argc > 1 ? atoi(argv[1]) : 15;
    rt_graph *g;
    char err[256];
    if (rt_keras_import(model_json, strlen(model_json), &g, err, sizeof err) < 0)
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
    rt_train_result res;
    if (rt_exec_train(e, &d, 3, &res, NULL, NULL, NULL) < 0) die("train", rt_exec_errmsg(e));
    double *t = malloc(sizeof(double) * (size_t)reps);
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        if (rt_exec_train(e, &d, 5, &res, NULL, NULL, NULL) < 0) die("train", rt_exec_errmsg(e));
        t[r] = (now_s() - t0) / 5 * 1e6;
    }
    const double ours = median(t, reps);
    printf("running PyTorch peer (bench/rnn/torch_peer.py)...\n");
    char version[64] = "?";
    const double peer = run_torch(reps, version);
    printf("\n%-34s %12s %12s %10s\n", "median per training step", "rtrain", "torch", "ratio");
    if (peer > 0)
        printf("%-34s %9.0f us %9.0f us %9.2fx   (torch %s, 2 threads; ratio = torch / rtrain)\n",
               "IMDB-like LSTM, batch 32, seq 100", ours, peer, peer / ours, version);
    else
        printf("%-34s %9.0f us %12s\n", "IMDB-like LSTM, batch 32, seq 100", ours,
               "(peer failed)");
    free(t);
    free(x);
    free(y);
    rt_exec_destroy(e);
    rt_plan_release(p);
    return 0;
}
