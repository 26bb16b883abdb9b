/* MPI replicas: rtraind's all-reduce against OpenMPI's own, and a W-C
 * training step over N replicas (see README.md).
 *
 *   mpirun -n N [-x OMP_NUM_THREADS=T] bench_mpi [--reps R] [--steps S]
 *                                                [--part allreduce|wc|stream]
 *
 * Part 1, every size (669,706 floats: W-C's gradient): R reps, each three
 * timed loops of L calls after a barrier: MPI_Allreduce(MPI_IN_PLACE,
 * float sum) bare, rt_dist_allreduce (the replicas' reduce: blocking
 * MPI_Allreduce over 4 MiB buckets under the fault guard), and the bare
 * loop again as a control; the order alternates by rep. Printed: the
 * medians, their ratio, the median of the per-rep ratios (paired) and of
 * the control's (MPI/MPI: the noise floor). Part 2: W-C (784-512-512-10
 * relu MLP, sparse CE from logits, Adam, global batch 128) trained through
 * rt_dist_train as rtraind does (ranks > 0 in rt_dist_worker): the median
 * over 5 calls of S steps of the time per step, and the time of a 1-step
 * call (the per-call cost: the command, the state hash). Part 3 (only with
 * --part stream): W-C on 8-bit MNIST-like rows, in memory (every rank
 * holds the set) against streamed (rank 0's mapped spool: it fills each
 * batch and scatters the replicas their rows), calls of S steps
 * alternating, R reps: medians and the paired ratio. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "import_keras.h"
#include "rt_dist.h"
#include "rt_stream.h"
#include "rtrain.pb-c.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void die(const char *what, const char *err)
{
    fprintf(stderr, "bench_mpi: %s: %s\n", what, err);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static const char *WC_JSON =
    "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"wc\", \"layers\": ["
    "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 784], "
    "\"dtype\": \"float32\", \"name\": \"x\"}},"
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d0\", \"units\": 512, "
    "\"activation\": \"relu\", \"use_bias\": true}},"
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d1\", \"units\": 512, "
    "\"activation\": \"relu\", \"use_bias\": true}},"
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d2\", \"units\": 10, "
    "\"activation\": \"linear\", \"use_bias\": true}}]}}";

/* one timed block: L calls in a loop, seconds per call; rt: rt_dist_allreduce */
static double timed(float *buf, int64_t n, int L, int rt)
{
    char err[200];
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now_s();
    for (int i = 0; i < L; i++) {
        if (!rt)
            MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        else if (rt_dist_allreduce(buf, n, err, sizeof err) < 0)
            die("rt_dist_allreduce", err);
    }
    double t = (now_s() - t0) / L;
    /* keep the values bounded */
    for (int64_t i = 0; i < n; i += 4096) buf[i] = 1.0f;
    return t;
}

static void bench_allreduce(int rank, int size, int reps)
{
    /* 669,706: W-C's gradient */
    static const int64_t sizes[] = {256, 4096, 65536, 669706, 1 << 20, 1 << 22, 1 << 24};
    if (rank == 0) {
        printf("all-reduce, %d ranks (float sum, in place; medians of %d reps, each a loop of "
               "L calls)\n", size, reps);
        printf("%10s %4s %13s %13s %7s %8s %9s\n", "floats", "L", "MPI_Allreduce", "rt_dist",
               "ratio", "paired", "MPI/MPI");
    }
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        const int64_t n = sizes[s];
        const int r = n >= (1 << 22) ? (reps < 15 ? reps : 15) : reps;
        const int L = n >= 65536 ? 1 : (int)(65536 / n) > 64 ? 64 : (int)(65536 / n);
        float *buf = malloc(sizeof(float) * (size_t)n);
        double *ta = malloc(sizeof(double) * (size_t)r), *tb = malloc(sizeof(double) * (size_t)r);
        double *tr = malloc(sizeof(double) * (size_t)r), *tc = malloc(sizeof(double) * (size_t)r);
        for (int64_t i = 0; i < n; i++) buf[i] = 1e-3f * (float)(i % 1000);
        for (int k = -2; k < r; k++) {
            /* the order alternates; a second bare block is the control */
            double a, b, c;
            if (k & 1) {
                b = timed(buf, n, L, 1);
                a = timed(buf, n, L, 0);
                c = timed(buf, n, L, 0);
            } else {
                a = timed(buf, n, L, 0);
                c = timed(buf, n, L, 0);
                b = timed(buf, n, L, 1);
            }
            if (k >= 0) {
                ta[k] = a;
                tb[k] = b;
                tr[k] = b / a;
                tc[k] = c / a;
            }
        }
        double ma = median(ta, r), mb = median(tb, r), mr = median(tr, r), mc = median(tc, r);
        if (rank == 0)
            printf("%10lld %4d %10.1f us %10.1f us %6.2fx %7.2fx %8.2fx\n", (long long)n, L,
                   ma * 1e6, mb * 1e6, mb / ma, mr, mc);
        free(tr);
        free(tc);
        free(buf);
        free(ta);
        free(tb);
    }
}

static void bench_wc(int size, int steps)
{
    rt_graph *g;
    char err[256];
    if (rt_keras_import(WC_JSON, strlen(WC_JSON), &g, err, sizeof err) < 0) die("import", err);
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_SPARSE_CE;
    cfg.from_logits = 1;
    cfg.opt = RT_OPT_ADAM;
    cfg.lr = 1e-3f;
    cfg.batch_size = 128;
    cfg.seed = 1;
    rt_plan *p;
    rt_exec *e;
    if (rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err) < 0) die("compile", err);
    rt_graph_destroy(g);
    if (rt_exec_create(p, &e) < 0) die("exec", "out of memory");
    Rtrain__V1__CompileRequest q = RTRAIN__V1__COMPILE_REQUEST__INIT;
    q.model_case = RTRAIN__V1__COMPILE_REQUEST__MODEL_KERAS_JSON;
    q.keras_json = (char *)WC_JSON;
    size_t len = rtrain__v1__compile_request__get_packed_size(&q);
    uint8_t *buf = malloc(len);
    rtrain__v1__compile_request__pack(&q, buf);
    if (rt_dist_program(e, buf, len, err, sizeof err) < 0) die("rt_dist_program", err);
    free(buf);
    const int64_t n = 1280;
    float *x = malloc(sizeof(float) * 784 * (size_t)n);
    int32_t *y = malloc(sizeof(int32_t) * (size_t)n);
    for (int64_t i = 0; i < 784 * n; i++) x[i] = (float)((i * 2654435761u) % 1000) * 1e-3f;
    for (int64_t i = 0; i < n; i++) y[i] = (int32_t)(i % 10);
    rt_data d = {.x = x, .y = y, .y_dtype = RT_I32, .n = n};
    const uint8_t key[16] = {'w', 'c'};
    rt_train_result res;
    if (rt_dist_train(e, &d, key, 3, &res, NULL, NULL, NULL, err, sizeof err) < 0)
        die("train", err);
    double per[5], one[5];
    for (int k = 0; k < 5; k++) {
        double t0 = now_s();
        if (rt_dist_train(e, &d, key, steps, &res, NULL, NULL, NULL, err, sizeof err) < 0)
            die("train", err);
        double t1 = now_s();
        if (rt_dist_train(e, &d, key, 1, &res, NULL, NULL, NULL, err, sizeof err) < 0)
            die("train", err);
        per[k] = (t1 - t0) / steps;
        one[k] = now_s() - t1;
    }
    const char *th = getenv("OMP_NUM_THREADS");
    printf("W-C, %d replica(s) x %s thread(s), global batch 128: %.3f ms/step "
           "(a 1-step call: %.3f ms); loss %.4f\n",
           size, th ? th : "default", median(per, 5) * 1e3, median(one, 5) * 1e3,
           res.mean.loss);
    rt_exec_destroy(e);
    rt_plan_release(p);
    free(x);
    free(y);
}

/* W-C compiled and registered with the replicas */
static rt_exec *wc_program(rt_plan **pp)
{
    rt_graph *g;
    char err[256];
    if (rt_keras_import(WC_JSON, strlen(WC_JSON), &g, err, sizeof err) < 0) die("import", err);
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_SPARSE_CE;
    cfg.from_logits = 1;
    cfg.opt = RT_OPT_ADAM;
    cfg.lr = 1e-3f;
    cfg.batch_size = 128;
    cfg.seed = 1;
    rt_exec *e;
    if (rt_plan_compile(g, &cfg, pp, NULL, err, sizeof err) < 0) die("compile", err);
    rt_graph_destroy(g);
    if (rt_exec_create(*pp, &e) < 0) die("exec", "out of memory");
    Rtrain__V1__CompileRequest q = RTRAIN__V1__COMPILE_REQUEST__INIT;
    q.model_case = RTRAIN__V1__COMPILE_REQUEST__MODEL_KERAS_JSON;
    q.keras_json = (char *)WC_JSON;
    size_t len = rtrain__v1__compile_request__get_packed_size(&q);
    uint8_t *buf = malloc(len);
    rtrain__v1__compile_request__pack(&q, buf);
    if (rt_dist_program(e, buf, len, err, sizeof err) < 0) die("rt_dist_program", err);
    free(buf);
    return e;
}

static void bench_stream(int size, int reps, int steps)
{
    rt_plan *pm, *ps;
    rt_exec *em = wc_program(&pm), *es = wc_program(&ps);
    const int64_t n = 6400;
    uint8_t *u8 = malloc(784 * (size_t)n);
    float *x = malloc(sizeof(float) * 784 * (size_t)n);
    int32_t *y = malloc(sizeof(int32_t) * (size_t)n);
    for (int64_t i = 0; i < 784 * n; i++) {
        u8[i] = (uint8_t)((i * 2654435761u) >> 24);
        x[i] = (float)u8[i] / 255.0f;
    }
    for (int64_t i = 0; i < n; i++) y[i] = (int32_t)(i % 10);
    char err[256];
    rt_stream_rows rows = {.per = 784, .u8_len = 784, .u8_kind = RT_ROWS_U8_UNIT};
    rt_stream *st;
    /* mapped, as rtraind maps a spool this small (--map-spool-below) */
    rt_stream_config sc = {.map_max = UINT64_C(1) << 30};
    if (rt_stream_begin(&rows, n, 0, &sc, &st, err, sizeof err) < 0 ||
        rt_stream_write(st, u8, 784 * (size_t)n, err, sizeof err) < 0 ||
        rt_stream_end(st, err, sizeof err) < 0)
        die("stream", err);
    rt_stream_use u = {.st = st, .seed = 1, .batch = 128, .shuffle = 1, .augment = 1, .y = y,
                       .lab_per = 1};
    rt_data dm = {.x = x, .y = y, .y_dtype = RT_I32, .n = n};
    rt_data ds = {.y = y, .y_dtype = RT_I32, .n = n, .fill = rt_stream_fill, .fill_ud = &u,
                  .fill_id = st};
    const uint8_t key[16] = {'w', 'c', 's'};
    rt_train_result res;
    if (rt_dist_train(em, &dm, key, 3, &res, NULL, NULL, NULL, err, sizeof err) < 0 ||
        rt_dist_train(es, &ds, key, 3, &res, NULL, NULL, NULL, err, sizeof err) < 0)
        die("train", err);
    double *tm = malloc(sizeof(double) * (size_t)reps), *ts = malloc(sizeof(double) * (size_t)reps),
           *tr = malloc(sizeof(double) * (size_t)reps);
    for (int k = 0; k < reps; k++) {
        for (int o = 0; o < 2; o++) {
            const int streamed = (o + k) % 2;
            double t0 = now_s();
            if (rt_dist_train(streamed ? es : em, streamed ? &ds : &dm, key, steps, &res, NULL,
                              NULL, NULL, err, sizeof err) < 0)
                die("train", err);
            (streamed ? ts : tm)[k] = (now_s() - t0) / steps;
        }
        tr[k] = ts[k] / tm[k];
    }
    const char *th = getenv("OMP_NUM_THREADS");
    printf("W-C on 8-bit rows (%lld), %d replica(s) x %s thread(s), global batch 128, %s "
           "spool: in memory %.3f ms/step, streamed %.3f ms/step, streamed/in memory %.2f "
           "(paired %.2f; %d reps of %d steps)\n",
           (long long)n, size, th ? th : "default", rt_stream_mapped(st) ? "mapped" : "pread",
           median(tm, reps) * 1e3, median(ts, reps) * 1e3, median(ts, reps) / median(tm, reps),
           median(tr, reps), reps, steps);
    free(tm);
    free(ts);
    free(tr);
    rt_exec_destroy(em);
    rt_exec_destroy(es);
    rt_plan_release(pm);
    rt_plan_release(ps);
    rt_stream_destroy(st);
    free(u8);
    free(x);
    free(y);
}

int main(int argc, char **argv)
{
    int reps = 51, steps = 20, part = 3; /* bit 0: all-reduce, bit 1: W-C */
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--part"))
            part = !strcmp(argv[i + 1], "allreduce") ? 1 : !strcmp(argv[i + 1], "wc") ? 2
                   : !strcmp(argv[i + 1], "stream") ? 4 : 0;
    }
    if (reps < 1 || steps < 1 || !part) {
        fprintf(stderr, "usage: mpirun -n N bench_mpi [--reps R] [--steps S] "
                        "[--part allreduce|wc|stream]\n");
        return 2;
    }
    rt_dist_opts o = {.timeout_ms = 600000};
    char err[256];
    if (rt_dist_init(&o, err, sizeof err) < 0) {
        fprintf(stderr, "bench_mpi: %s\n", err);
        return 1;
    }
    int on = 0;
    MPI_Initialized(&on);
    if (!on) {
        fprintf(stderr, "bench_mpi: run it under mpirun (mpirun -n N bench_mpi)\n");
        return 2;
    }
    const int rank = rt_dist_rank(), size = rt_dist_size();
    if (part & 1) bench_allreduce(rank, size, reps);
    if (rank > 0) return rt_dist_worker();
    if (part & 2) bench_wc(size, steps);
    if (part & 4) bench_stream(size, reps, steps);
    rt_dist_finalize();
    return 0;
}
