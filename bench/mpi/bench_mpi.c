/* MPI replicas: rtraind's all-reduce against OpenMPI's own, and a W-C
 * training step over N replicas (see README.md).
 *
 *   mpirun -n N [-x OMP_NUM_THREADS=T] bench_mpi [--reps R] [--steps S]
 *                      [--part allreduce|wc|stream|overlap|idle|link|link,allreduce]
 *                      [--model wc|wide]
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
 * call, right after the last one and after 20 ms idle (the per-call cost:
 * the command, the state check, a worker waking). Part 3 (only with
 * --part stream): W-C on 8-bit MNIST-like rows, in memory (every rank
 * holds the set) against streamed (rank 0's mapped spool: it fills each
 * batch and scatters the replicas their rows), calls of S steps
 * alternating, R reps: medians and the paired ratio. Part 4 (--part
 * overlap): the step with the reduce overlapped with backward against not,
 * for W-C and for a wide MLP whose gradient is ResNet-50's size (25.2 M
 * floats: 1024-4096-4096-1024-10, batch 32): R reps (at most 7 for the
 * wide one) of one S-step call each way, the order alternating; printed:
 * the medians of ms/step, their ratio and the median of the per-rep
 * ratios; then what --overlap-reduce auto chooses on a fresh program. At
 * N = 1 there is no reduce: the step time is the peer. Part 5 (--part
 * idle, N >= 2 on one host): a waiting worker's CPU over 5 s idle, and a
 * 1-step call after 5 ms, 50 ms and 5 s idle (its wake-up). Part 6
 * (--part link, or with allreduce: --part link,allreduce): the link
 * between ranks 0 and 1 from 4 B to 64 MiB: an MPI_Send/MPI_Recv ping-pong
 * (the median one-way time, half a round trip) and an exchange
 * (MPI_Sendrecv, both directions at once, as a ring step sends and
 * receives), R reps of L each, alternating: what cost_model.py fits the
 * model's latency and bandwidth to. Every run
 * first prints the ranks' hosts (MPI_Get_processor_name). */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

/* 1024-4096-4096-1024-10: 25,194,506 parameters (ResNet-50: 25.6 M) */
static const char *WIDE_JSON =
    "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"wide\", \"layers\": ["
    "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 1024], "
    "\"dtype\": \"float32\", \"name\": \"x\"}},"
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d0\", \"units\": 4096, "
    "\"activation\": \"relu\", \"use_bias\": true}},"
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d1\", \"units\": 4096, "
    "\"activation\": \"relu\", \"use_bias\": true}},"
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d2\", \"units\": 1024, "
    "\"activation\": \"relu\", \"use_bias\": true}},"
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d3\", \"units\": 10, "
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

/* one timed loop of L calls between ranks 0 and 1 (others wait at the
 * barrier): a ping-pong (seconds one way: half a round trip) or, both,
 * an exchange (MPI_Sendrecv: both directions at once, as in a ring step) */
static double link_loop(int rank, char *a, char *b, int64_t n, int L, int both)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now_s();
    const int peer = 1 - rank;
    for (int i = 0; i < L && rank < 2; i++) {
        if (both)
            MPI_Sendrecv(a, (int)n, MPI_BYTE, peer, 8, b, (int)n, MPI_BYTE, peer, 8,
                         MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        else if (rank == 0) {
            MPI_Send(a, (int)n, MPI_BYTE, 1, 7, MPI_COMM_WORLD);
            MPI_Recv(a, (int)n, MPI_BYTE, 1, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(a, (int)n, MPI_BYTE, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(a, (int)n, MPI_BYTE, 0, 7, MPI_COMM_WORLD);
        }
    }
    return (now_s() - t0) / L / (both ? 1 : 2);
}

/* the link between ranks 0 and 1 at each size: one way (ping-pong) and
 * both ways at once (exchange); medians of r reps, the two alternating */
static void bench_link(int rank, int size, int reps)
{
    static const int64_t bytes[] = {4, 64, 1024, 16384, 262144, 1 << 20, 1 << 22, 1 << 24,
                                    1 << 26};
    if (size < 2) return;
    if (rank == 0)
        printf("link, rank 0 <-> rank 1 (MPI_Send/MPI_Recv ping-pong: one-way = half the round "
               "trip; exchange: MPI_Sendrecv, both ways at once; medians of %d reps, each a "
               "loop of L)\n%10s %4s %13s %11s %13s %11s\n",
               reps, "bytes", "L", "one-way", "rate", "exchange", "rate");
    for (size_t s = 0; s < sizeof bytes / sizeof bytes[0]; s++) {
        const int64_t n = bytes[s];
        const int r = n >= (1 << 24) ? (reps < 7 ? reps : 7) : reps;
        const int L = n >= (1 << 20) ? 1 : n >= 16384 ? 8 : 64;
        char *a = calloc((size_t)n, 1), *b = calloc((size_t)n, 1);
        double *t1 = malloc(sizeof(double) * (size_t)r), *t2 = malloc(sizeof(double) * (size_t)r);
        for (int k = -2; k < r; k++) {
            double x, y;
            if (k & 1) {
                y = link_loop(rank, a, b, n, L, 1);
                x = link_loop(rank, a, b, n, L, 0);
            } else {
                x = link_loop(rank, a, b, n, L, 0);
                y = link_loop(rank, a, b, n, L, 1);
            }
            if (k >= 0) {
                t1[k] = x;
                t2[k] = y;
            }
        }
        double m1 = median(t1, r), m2 = median(t2, r);
        if (rank == 0)
            printf("%10lld %4d %10.2f us %7.3f GB/s %10.2f us %7.3f GB/s\n", (long long)n, L,
                   m1 * 1e6, (double)n / m1 / 1e9, m2 * 1e6, (double)n / m2 / 1e9);
        free(t1);
        free(t2);
        free(a);
        free(b);
    }
}

/* a program as rtraind makes one (rank 0's exec, compiled on every rank),
 * with n rows of synthetic data */
typedef struct prog {
    rt_plan *p;
    rt_exec *e;
    float *x;
    int32_t *y;
    rt_data d;
    uint8_t key[16];
} prog;

/* json compiled at batch (sparse CE from logits, Adam 1e-3, seed 1) and
 * registered with the replicas as rtraind registers a program */
static rt_exec *compiled(const char *json, int64_t batch, rt_plan **pp)
{
    rt_graph *g;
    char err[256];
    if (rt_keras_import(json, strlen(json), &g, err, sizeof err) < 0) die("import", err);
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_SPARSE_CE;
    cfg.from_logits = 1;
    cfg.opt = RT_OPT_ADAM;
    cfg.lr = 1e-3f;
    cfg.batch_size = batch;
    cfg.seed = 1;
    rt_exec *e;
    if (rt_plan_compile(g, &cfg, pp, NULL, err, sizeof err) < 0) die("compile", err);
    rt_graph_destroy(g);
    if (rt_exec_create(*pp, &e) < 0) die("exec", "out of memory");
    Rtrain__V1__CompileRequest q = RTRAIN__V1__COMPILE_REQUEST__INIT;
    q.model_case = RTRAIN__V1__COMPILE_REQUEST__MODEL_KERAS_JSON;
    q.keras_json = (char *)json;
    size_t len = rtrain__v1__compile_request__get_packed_size(&q);
    uint8_t *buf = malloc(len);
    rtrain__v1__compile_request__pack(&q, buf);
    if (rt_dist_program(e, buf, len, err, sizeof err) < 0) die("rt_dist_program", err);
    free(buf);
    return e;
}

static void prog_make(prog *pr, const char *json, int64_t in, int64_t batch, int64_t n,
                      char tag)
{
    pr->e = compiled(json, batch, &pr->p);
    pr->x = malloc(sizeof(float) * (size_t)(in * n));
    pr->y = malloc(sizeof(int32_t) * (size_t)n);
    for (int64_t i = 0; i < in * n; i++) pr->x[i] = (float)((i * 2654435761u) % 1000) * 1e-3f;
    for (int64_t i = 0; i < n; i++) pr->y[i] = (int32_t)(i % 10);
    pr->d = (rt_data){.x = pr->x, .y = pr->y, .y_dtype = RT_I32, .n = n};
    memset(pr->key, 0, sizeof pr->key);
    pr->key[0] = (uint8_t)tag;
}

static void prog_free(prog *pr)
{
    rt_exec_destroy(pr->e);
    rt_plan_release(pr->p);
    free(pr->x);
    free(pr->y);
}

/* seconds of one call of s steps */
static double train(prog *pr, int64_t s, rt_train_result *res)
{
    char err[256];
    double t0 = now_s();
    if (rt_dist_train(pr->e, &pr->d, pr->key, s, res, NULL, NULL, NULL, err, sizeof err) < 0)
        die("train", err);
    return now_s() - t0;
}

static void bench_wc(int size, int steps)
{
    prog pr;
    prog_make(&pr, WC_JSON, 784, 128, 1280, 'w');
    rt_train_result res;
    train(&pr, 3, &res);
    double per[5], one[5], idle[5];
    for (int k = 0; k < 5; k++) {
        per[k] = train(&pr, steps, &res) / steps;
        one[k] = train(&pr, 1, &res);
        /* a client's think time: the workers wait idle */
        nanosleep(&(struct timespec){0, 20000000}, NULL);
        idle[k] = train(&pr, 1, &res);
    }
    const char *th = getenv("OMP_NUM_THREADS");
    printf("W-C, %d replica(s) x %s thread(s), global batch 128: %.3f ms/step "
           "(a 1-step call: %.3f ms, after 20 ms idle: %.3f ms); loss %.4f\n",
           size, th ? th : "default", median(per, 5) * 1e3, median(one, 5) * 1e3,
           median(idle, 5) * 1e3, res.mean.loss);
    prog_free(&pr);
}


static void bench_stream(int size, int reps, int steps)
{
    rt_plan *pm, *ps;
    rt_exec *em = compiled(WC_JSON, 128, &pm), *es = compiled(WC_JSON, 128, &ps);
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

/* overlap on against off, then what auto chooses */
static void bench_overlap_one(int size, const char *name, const char *json, int64_t in,
                              int64_t batch, int steps, int reps)
{
    prog pr;
    prog_make(&pr, json, in, batch, batch * 8, name[0]);
    rt_train_result res;
    rt_dist_set_overlap(RT_DIST_OVERLAP_OFF);
    train(&pr, 2, &res); /* the state reaches the replicas; warm */
    double *on = malloc(sizeof(double) * (size_t)reps), *off = malloc(sizeof(double) * (size_t)reps);
    double *ratio = malloc(sizeof(double) * (size_t)reps);
    for (int k = 0; k < reps; k++) {
        for (int h = 0; h < 2; h++) {
            const int o = (k + h) & 1;
            rt_dist_set_overlap(o ? RT_DIST_OVERLAP_ON : RT_DIST_OVERLAP_OFF);
            (o ? on : off)[k] = train(&pr, steps, &res) / steps;
        }
        ratio[k] = on[k] / off[k];
    }
    const char *th = getenv("OMP_NUM_THREADS");
    const double mon = median(on, reps), moff = median(off, reps), mr = median(ratio, reps);
    if (size == 1)
        printf("%-5s N=1 x %s thread(s), batch %lld: %8.2f ms/step (no reduce: on and off run "
               "the same step)\n", name, th ? th : "default", (long long)batch, moff * 1e3);
    else
        printf("%-5s N=%d x %s thread(s), batch %lld: off %8.2f ms/step, on %8.2f ms/step, "
               "on/off %.2fx (paired %.2fx, %d reps of %d steps)\n", name, size,
               th ? th : "default", (long long)batch, moff * 1e3, mon * 1e3, mon / moff, mr,
               reps, steps);
    free(on);
    free(off);
    free(ratio);
    if (size > 1) {
        /* auto on a fresh program: 1 warm step, 4 each way, then its choice */
        prog pa;
        prog_make(&pa, json, in, batch, batch * 8, (char)(name[0] + 1));
        rt_dist_set_overlap(RT_DIST_OVERLAP_AUTO);
        double t = train(&pa, 12, &res);
        const int m = rt_dist_overlap_mode(pa.e);
        printf("%-5s N=%d auto: %s after 12 steps (%.2f ms/step over them)\n", name, size,
               m < 0 ? "undecided" : m ? "overlap on" : "overlap off", t / 12 * 1e3);
        prog_free(&pa);
    }
    prog_free(&pr);
}

/* CPU seconds (user + system) of process pid so far */
static double cpu_s(int pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return NAN;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')');
    unsigned long ut = 0, st = 0;
    /* after the name: state and fields 4..13, then utime and stime */
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return NAN;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* A worker waiting for the next command: its CPU over 5 s idle (rank 1,
 * same host), and the 1-step call after 5 ms, 50 ms and 5 s idle. */
static void bench_idle(int size, const int *pids)
{
    if (size < 2) return;
    prog pr;
    prog_make(&pr, WC_JSON, 784, 128, 1280, 'i');
    rt_train_result res;
    train(&pr, 3, &res);
    static const long gaps_ms[] = {5, 50};
    for (size_t g = 0; g < sizeof gaps_ms / sizeof gaps_ms[0]; g++) {
        double t[7];
        for (int k = 0; k < 7; k++) {
            nanosleep(&(struct timespec){gaps_ms[g] / 1000, (gaps_ms[g] % 1000) * 1000000}, NULL);
            t[k] = train(&pr, 1, &res);
        }
        printf("1-step call after %ld ms idle: %.3f ms (median of 7)\n", gaps_ms[g],
               median(t, 7) * 1e3);
    }
    const double c0 = cpu_s(pids[1]), w0 = now_s();
    nanosleep(&(struct timespec){5, 0}, NULL);
    const double c1 = cpu_s(pids[1]), w1 = now_s();
    const double t5 = train(&pr, 1, &res);
    printf("rank 1 waiting idle: %.2f %% of a core over %.1f s; the next 1-step call: %.3f ms\n",
           100.0 * (c1 - c0) / (w1 - w0), w1 - w0, t5 * 1e3);
    prog_free(&pr);
}

/* models: bit 0 W-C, bit 1 wide */
static void bench_overlap(int size, int steps, int reps, int models)
{
    if (models & 1) bench_overlap_one(size, "W-C", WC_JSON, 784, 128, steps, reps);
    if (models & 2)
        bench_overlap_one(size, "wide", WIDE_JSON, 1024, 32, steps < 3 ? steps : 3,
                          reps < 7 ? reps : 7);
}

int main(int argc, char **argv)
{
    /* bit 0: all-reduce, 1: W-C, 2: stream, 3: overlap, 4: idle, 5: link */
    int reps = 51, steps = 20, part = 3;
    int models = 3;                      /* --part overlap: bit 0 W-C, 1 wide */
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--model"))
            models = !strcmp(argv[i + 1], "wc") ? 1 : !strcmp(argv[i + 1], "wide") ? 2 : 0;
        else if (!strcmp(argv[i], "--part"))
            part = !strcmp(argv[i + 1], "allreduce") ? 1
                   : !strcmp(argv[i + 1], "wc")      ? 2
                   : !strcmp(argv[i + 1], "stream")  ? 4
                   : !strcmp(argv[i + 1], "overlap") ? 8
                   : !strcmp(argv[i + 1], "idle")    ? 16
                   : !strcmp(argv[i + 1], "link")    ? 32
                   : !strcmp(argv[i + 1], "link,allreduce") ? 33
                                                     : 0;
    }
    if (reps < 1 || steps < 1 || !part || !models) {
        fprintf(stderr, "usage: mpirun -n N bench_mpi [--reps R] [--steps S] "
                        "[--part allreduce|wc|stream|overlap|idle|link|link,allreduce] "
                        "[--model wc|wide]\n");
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
    int me = (int)getpid(), *pids = malloc(sizeof(int) * (size_t)size);
    MPI_Gather(&me, 1, MPI_INT, pids, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("ranks' hosts:");
        for (int i = 0; i < size; i++) printf(" %s", rt_dist_host(i));
        printf("\n");
    }
    if (part & 32) bench_link(rank, size, reps);
    if (part & 1) bench_allreduce(rank, size, reps);
    if (rank > 0) {
        free(pids);
        return rt_dist_worker();
    }
    if (part & 2) bench_wc(size, steps);
    if (part & 4) bench_stream(size, reps, steps);
    if (part & 8) bench_overlap(size, steps, reps < 15 ? reps : 15, models);
    if (part & 16) bench_idle(size, pids);
    free(pids);
    rt_dist_finalize();
    return 0;
}
