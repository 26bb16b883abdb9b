/* test_client_e2e.c - librtrain against a real rtraind on a loopback port.
 *
 * Starts `rtraind --listen 127.0.0.1:0` as a child, reads its address from
 * its stdout, and drives every RPC through the library: info, ping, sessions,
 * compile (Keras JSON and the native builder; cache hit), uploads (file and
 * memory, chunked, deduplicated), fit (history, accuracy), evaluate, predict,
 * run_steps (losses, replay), train_steps (the steps-per-call loop: calls,
 * events, metrics against Fit, stop, errors), weights round trip, cancellation (callback and
 * another thread), deadlines, error codes, timings consistency and the trace.
 *
 * usage: test_client_e2e RTRAIND EXAMPLES_DIR TMPDIR */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "rtrain/rtrain.h"

#include "../lib/rt_check.h"
/* a call on client c that must succeed: a failure names its error */
#define CHECK_RC(call)                                                                       \
    do {                                                                                     \
        int rc_ = (call);                                                                    \
        CHECKF(rc_ >= 0, "%s -> %s: %s", #call, rt_err_name(rc_), rt_client_errmsg(c));      \
    } while (0)

/* Progress with elapsed time, so a slow step shows in the test log. */
static struct timespec t_start;
static void step(const char *name)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    printf("[%8.3f s] %s\n", (double)(t.tv_sec - t_start.tv_sec) +
           (double)(t.tv_nsec - t_start.tv_nsec) / 1e9, name);
    fflush(stdout);
}

static pid_t daemon_pid;
static char addr[128];

/* hold_ms: --pipeline-hold-ms, or NULL for the default */
static int start_daemon(const char *bin, const char *hold_ms)
{
    int fd[2];
    if (pipe(fd) < 0)
        return -1;
    daemon_pid = fork();
    if (daemon_pid == 0) {
        dup2(fd[1], 1);
        close(fd[0]);
        close(fd[1]);
        if (hold_ms)
            execl(bin, bin, "--listen", "127.0.0.1:0", "--log-level", "warn",
                  "--pipeline-hold-ms", hold_ms, (char *)NULL);
        else
            execl(bin, bin, "--listen", "127.0.0.1:0", "--log-level", "warn", (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    FILE *f = fdopen(fd[0], "r");
    char line[256];
    int ok = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "rtraind listening on %127s", addr) == 1) {
            ok = 1;
            break;
        }
    /* Keep the pipe open in a detached reader? The daemon writes nothing
     * more to stdout after the address, so closing our end is harmless. */
    fclose(f);
    return ok ? 0 : -1;
}

static void stop_daemon(void)
{
    if (daemon_pid > 0) {
        kill(daemon_pid, SIGTERM);
        int st;
        waitpid(daemon_pid, &st, 0);
    }
}

/* Server phases sum to the server total; the server total fits in the
 * round trip; the client's own phases fit in the call. */
static void check_timings(rt_client *c, const char *method)
{
    rt_client_timings t;
    CHECK(rt_client_last_timings(c, &t) == 0);
    if (strcmp(t.method, method) != 0) {
        fprintf(stderr, "last call was %s, expected %s\n", t.method, method);
        failures++;
        return;
    }
    CHECK(t.has_server);
    uint64_t parts = t.queue_ns + t.decode_ns + t.compile_ns + t.execute_ns + t.encode_ns +
                     t.server_other_ns;
    if (parts != t.server_total_ns || t.server_total_ns > t.round_trip_ns) {
        fprintf(stderr, "%s: parts %llu total %llu rtt %llu\n", method,
                (unsigned long long)parts, (unsigned long long)t.server_total_ns,
                (unsigned long long)t.round_trip_ns);
        failures++;
    }
    checks++;
    CHECK(t.server_total_ns > 0 && t.round_trip_ns > 0);
    CHECK(t.wire_ns == t.round_trip_ns - t.server_total_ns);
    CHECK(t.client_encode_ns + t.round_trip_ns + t.client_decode_ns <= t.client_total_ns);
}

typedef struct csv_data {
    float x[200 * 4];
    int32_t y[200];
    int n;
} csv_data;

static int read_iris(const char *path, csv_data *d)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    d->n = 0;
    float a, b, cc, e, l;
    while (d->n < 200 && fscanf(f, "%f,%f,%f,%f,%f", &a, &b, &cc, &e, &l) == 5) {
        float *x = d->x + d->n * 4;
        x[0] = a, x[1] = b, x[2] = cc, x[3] = e;
        d->y[d->n++] = (int32_t)l;
    }
    fclose(f);
    return d->n;
}

typedef struct fit_log {
    int epochs, progress, done, stop_after;
    double last_val_acc, last_val_loss;
    uint64_t last_epoch;
} fit_log;

static int on_event(const rt_client_fit_event *ev, void *u)
{
    fit_log *l = u;
    if (ev->kind == RT_FIT_EPOCH_END) {
        l->epochs++;
        l->last_epoch = ev->epoch_end.epoch;
        if (ev->epoch_end.has_val) {
            l->last_val_acc = ev->epoch_end.val.accuracy;
            l->last_val_loss = ev->epoch_end.val.loss;
        }
    } else if (ev->kind == RT_FIT_PROGRESS) {
        __atomic_add_fetch(&l->progress, 1, __ATOMIC_RELEASE); /* cancel_later polls it */
    }
    if (ev->done)
        l->done = 1;
    return l->stop_after && l->progress + l->epochs >= l->stop_after;
}

/* Rows of x and y for rt_client_fit_rows that note which rows each
 * upload held (at most 64 uploads of 256 rows). */
typedef struct rec_rows {
    const float *x;
    const int32_t *y;
    int64_t d; /* values per x row */
    int n_up;
    uint64_t k[64], rows[64][256];
} rec_rows;

static int rec_upload(rt_client *c, const char *session, const char *name, const uint64_t *rows,
                      uint64_t k, rt_client_dataset *out, void *user)
{
    rec_rows *r = user;
    if (r->n_up >= 64 || k > 256)
        return RT_EINVAL;
    static float xs[256 * 8];
    static int32_t ys[256];
    for (uint64_t i = 0; i < k; i++) {
        memcpy(xs + i * (uint64_t)r->d, r->x + rows[i] * (uint64_t)r->d, (size_t)r->d * 4);
        ys[i] = r->y[rows[i]];
        r->rows[r->n_up][i] = rows[i];
    }
    r->k[r->n_up++] = k;
    rt_client_array xa = {xs, RT_DTYPE_F32, 2, {(int64_t)k, r->d}};
    rt_client_array ya = {ys, RT_DTYPE_I32, 1, {(int64_t)k}};
    return rt_client_upload(c, session, name, &xa, &ya, out);
}

/* The same compile in two sessions (in one it would be the same program). */
static void two_programs(rt_client *c, const char *json, const rt_train_opts *o, char *sa,
                         char *sb, rt_client_compile_result *pa, rt_client_compile_result *pb)
{
    CHECK_RC(rt_client_session_create(c, "a", sa));
    CHECK_RC(rt_client_session_create(c, "b", sb));
    CHECK_RC(rt_client_compile_keras(c, sa, json, o, pa));
    CHECK_RC(rt_client_compile_keras(c, sb, json, o, pb));
}

/* Whether the two programs hold the same weights, bit for bit, after
 * steps steps each. */
static int same_weights(rt_client *c, const char *sa, const char *pa, const char *sb,
                        const char *pb, uint64_t steps)
{
    rt_client_weights wa, wb;
    CHECK_RC(rt_client_get_weights(c, sa, pa, &wa));
    CHECK_RC(rt_client_get_weights(c, sb, pb, &wb));
    int same = wa.n == wb.n && wa.n > 0 && wa.global_step == steps && wb.global_step == steps;
    for (size_t i = 0; same && i < wa.n; i++)
        same = wa.t[i].nbytes == wb.t[i].nbytes &&
               !memcmp(wa.t[i].data, wb.t[i].data, wa.t[i].nbytes);
    rt_client_weights_free(&wa);
    rt_client_weights_free(&wb);
    return same;
}

/* Every event of a fit or a training loop, in order. */
typedef struct ev_log {
    int n, progress, stop_after_progress;
    struct {
        int kind, has_val, done;
        uint64_t epoch, step, step_in_epoch, steps_per_epoch, execute_ns, steps_per_call;
        double loss, acc, vloss, vacc, fixed_ns, step_ns;
        char method[24]; /* the call behind the event, "" if none */
    } ev[256];
} ev_log;

static int log_event(const rt_client_fit_event *ev, void *u)
{
    ev_log *l = u;
    if (l->n < 256) {
        typeof(l->ev[0]) *e = &l->ev[l->n++];
        memset(e, 0, sizeof *e);
        e->kind = ev->kind;
        e->done = ev->done;
        e->epoch = ev->epoch;
        e->step = ev->step;
        e->step_in_epoch = ev->step_in_epoch;
        e->steps_per_epoch = ev->steps_per_epoch;
        e->steps_per_call = ev->steps_per_call;
        e->fixed_ns = ev->fixed_ns;
        e->step_ns = ev->step_ns;
        if (ev->kind == RT_FIT_EPOCH_END) {
            e->epoch = ev->epoch_end.epoch;
            e->step = ev->epoch_end.steps;
            e->loss = ev->epoch_end.train.loss;
            e->acc = ev->epoch_end.train.accuracy;
            e->has_val = ev->epoch_end.has_val;
            e->vloss = ev->epoch_end.val.loss;
            e->vacc = ev->epoch_end.val.accuracy;
            e->execute_ns = ev->epoch_end.execute_ns;
        } else {
            e->loss = ev->loss;
            e->acc = ev->accuracy;
        }
        if (ev->call)
            snprintf(e->method, sizeof e->method, "%s", ev->call->method);
    }
    if (ev->kind == RT_FIT_PROGRESS)
        __atomic_add_fetch(&l->progress, 1, __ATOMIC_RELEASE); /* cancel_later polls it */
    return l->stop_after_progress && l->progress >= l->stop_after_progress;
}

static size_t trace_count(rt_client *c, size_t from, const char *method)
{
    size_t n, k = 0;
    const rt_client_timings *t = rt_client_trace_calls(c, &n);
    for (size_t i = from; i < n; i++)
        k += !strcmp(t[i].method, method);
    return k;
}

static uint64_t global_step(rt_client *c, const char *sid, const char *prog)
{
    rt_client_weights w;
    if (rt_client_get_weights(c, sid, prog, &w) < 0)
        return UINT64_MAX;
    uint64_t g = w.global_step;
    rt_client_weights_free(&w);
    return g;
}

/* rt_client_control from inside the Fit callback, on the stream's own
 * client: a rate at the first progress event, a stop once the stream
 * reports a step that used the rate. */
typedef struct ctl_log {
    rt_client *c;
    const char *sid, *prog;
    int calls_ok, calls, done, stopped, cancelled;
    uint64_t asked_at, rate_at, end_step;
} ctl_log;

static int ctl_event(const rt_client_fit_event *ev, void *u)
{
    ctl_log *l = u;
    if (ev->kind == RT_FIT_DONE) {
        l->done = ev->done;
        l->stopped = ev->stopped;
        l->cancelled = ev->cancelled;
        l->end_step = ev->step;
        return 0;
    }
    if (ev->kind != RT_FIT_PROGRESS)
        return 0;
    rt_client_control_params p = {.session = l->sid, .program = l->prog};
    int running = 0;
    if (!l->asked_at) {
        l->asked_at = ev->step;
        p.learning_rate = 0.003f;
    } else if (!l->rate_at && ev->learning_rate == 0.003f) {
        l->rate_at = ev->step;
        p.stop = 1;
    } else {
        return 0;
    }
    l->calls++;
    l->calls_ok += rt_client_control(l->c, &p, &running) == 0 && running;
    return 0;
}

/* Closes a session from a client of its own once the training loop has
 * seen its first progress event (not after a timed guess: a slow build
 * could still be starting the loop, a fast one done with it). */
typedef struct closer {
    const char *sid;
    const int *progress;
    int finished; /* atomic: the loop returned before any (a failure) */
    int rc;
} closer;

static void *close_later(void *p)
{
    closer *k = p;
    rt_client *c2;
    k->rc = rt_client_create(addr, &c2);
    if (k->rc == 0) {
        while (!__atomic_load_n(k->progress, __ATOMIC_ACQUIRE) &&
               !__atomic_load_n(&k->finished, __ATOMIC_ACQUIRE))
            usleep(1000);
        k->rc = rt_client_session_close(c2, k->sid);
        rt_client_destroy(c2);
    }
    return NULL;
}

typedef struct canceller {
    rt_client *c;
    const int *progress; /* cancel once this counts a progress event */
    int finished;       /* atomic: the call returned before any (a failure) */
} canceller;

/* Cancels mid-way without a timed guess: once the first progress event has
 * come (however slow the build, e.g. under TSan). */
static void *cancel_later(void *p)
{
    canceller *k = p;
    while (!__atomic_load_n(k->progress, __ATOMIC_ACQUIRE) &&
           !__atomic_load_n(&k->finished, __ATOMIC_ACQUIRE))
        usleep(1000);
    rt_client_cancel(k->c);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s RTRAIND EXAMPLES_DIR TMPDIR\n", argv[0]);
        return 2;
    }
    const char *ex = argv[2], *tmp = argv[3];
    char p_model[1024], p_train[1024], p_val[1024], p_trace[1024], p_w[1024];
    snprintf(p_model, sizeof p_model, "%s/model.json", ex);
    snprintf(p_train, sizeof p_train, "%s/train_shuffled.csv", ex);
    snprintf(p_val, sizeof p_val, "%s/val_shuffled.csv", ex);
    snprintf(p_trace, sizeof p_trace, "%s/trace.json", tmp);
    snprintf(p_w, sizeof p_w, "%s/w.bin", tmp);
    clock_gettime(CLOCK_MONOTONIC, &t_start);
    if (start_daemon(argv[1], NULL) < 0) {
        fprintf(stderr, "cannot start %s\n", argv[1]);
        stop_daemon();
        return 1;
    }
    printf("daemon at %s\n", addr);

    rt_client *c = NULL;
    int rc_loop;

    step("connect");
    /* The set-up and the connection apart; gRPC's process-wide state starts
     * with the first client and, held, outlives it. */
    {
        rt_client *a;
        rt_client_connect_times ct;
        CHECK(rt_client_create(addr, &a) == 0);
        CHECK(rt_client_connect_timings(a, &ct) == 0);
        CHECK(ct.library_started && ct.ready_ns == 0);
        c = a;
        CHECK_RC(rt_client_wait_ready(a, 30000));
        rt_client_connect_timings(a, &ct);
        CHECK(ct.ready_ns > 0);
        rt_client_library_hold();
        rt_client_destroy(a);
        CHECK(rt_client_create(addr, &a) == 0);
        c = a;
        rt_client_connect_timings(a, &ct);
        CHECK(!ct.library_started); /* held: nothing to start */
        CHECK_RC(rt_client_ping(a, 0, NULL));
        rt_client_destroy(a);
        rt_client_library_release();
        /* Released: the next client starts gRPC again. gRPC's own clean-up
         * of the channels just destroyed can hold its init count a moment
         * longer (on its threads, whatever our release did), so the state
         * is waited for, within 10 s, not read once. */
        int restarted = 0;
        for (int i = 0; i < 1000 && !restarted; i++) {
            CHECK(rt_client_create(addr, &a) == 0);
            rt_client_connect_timings(a, &ct);
            restarted = ct.library_started;
            rt_client_destroy(a);
            if (!restarted)
                usleep(10000);
        }
        CHECK(restarted);
        /* Nobody listens on port 1: wait_ready says so, naming it. */
        CHECK(rt_client_create("127.0.0.1:1", &a) == 0);
        CHECK(rt_client_wait_ready(a, 30000) == RT_EUNAVAILABLE);
        CHECK(strstr(rt_client_errmsg(a), "127.0.0.1:1") != NULL);
        rt_client_destroy(a);
    }

    CHECK(rt_client_create(addr, &c) == 0);
    rt_client_trace_enable(c, 1);

    step("info");
    /* info, ping */
    rt_client_info info;
    CHECK_RC(rt_client_info_get(c, &info));
    CHECK(info.version && *info.version);
    int has_dense = 0;
    for (size_t i = 0; i < info.n_ops; i++)
        has_dense |= !strcmp(info.ops[i], "Dense");
    CHECK(has_dense);
    rt_client_info_free(&info);
    check_timings(c, "GetInfo");
    uint64_t rtt;
    CHECK_RC(rt_client_ping(c, 65536, &rtt));
    CHECK(rtt > 0);
    check_timings(c, "Ping");
    rt_client_timings pt;
    rt_client_last_timings(c, &pt);
    CHECK(pt.bytes_sent >= 65536 && pt.bytes_received >= 65536);

    step("compile");
    /* session, compile, cache hit */
    char sid[RT_ID_MAX];
    CHECK_RC(rt_client_session_create(c, "e2e", sid));
    FILE *mf = fopen(p_model, "r");
    char json[8192] = {0};
    CHECK(mf && fread(json, 1, sizeof json - 1, mf) > 0);
    if (mf)
        fclose(mf);
    rt_train_opts o;
    rt_train_opts_init(&o);
    o.loss = "sparse_categorical_crossentropy";
    o.optimizer = "adam";
    o.lr = 0.02f;
    o.batch_size = 20;
    o.seed = 1;
    rt_client_compile_result prog, prog2;
    CHECK_RC(rt_client_compile_keras(c, sid, json, &o, &prog));
    check_timings(c, "Compile");
    CHECK(prog.param_count == 4 * 32 + 32 + 32 * 3 + 3);
    CHECK(prog.n_params == 4);
    CHECK(prog.input_ndim == 1 && prog.input_shape[0] == 4);
    CHECK(prog.output_ndim == 1 && prog.output_shape[0] == 3);
    CHECK_RC(rt_client_compile_keras(c, sid, json, &o, &prog2));
    CHECK(prog2.cache_hit);
    rt_client_timings ct;
    rt_client_last_timings(c, &ct);
    CHECK(ct.cache_hit);
    CHECK(strcmp(prog.program_id, prog2.program_id) != 0); /* fresh weights each */

    step("variable-length input bound at compile");
    {
        /* a null sequence length: refused unbound, naming the input; bound
         * by input_shape or input_values; a binding contradicting a fixed
         * dim is refused */
        static const char vl[] =
            "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": ["
            "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, null, 3], "
            "\"name\": \"seq\"}}, {\"class_name\": \"SimpleRNN\", \"config\": {\"name\": \"r\", "
            "\"units\": 4}}, {\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 3, "
            "\"activation\": \"softmax\"}}]}}";
        rt_train_opts vo = o;
        rt_client_compile_result pv;
        CHECK(rt_client_compile_keras(c, sid, vl, &vo, &pv) == RT_EINVAL);
        CHECK(strstr(rt_client_errmsg(c), "input 'seq' has a variable dimension") &&
              strstr(rt_client_errmsg(c), "--input-shape"));
        vo.input_ndim = 2;
        vo.input_shape[0] = 7;
        vo.input_shape[1] = 4;
        CHECK(rt_client_compile_keras(c, sid, vl, &vo, &pv) == RT_EINVAL);
        CHECK(strstr(rt_client_errmsg(c), "input 'seq'") &&
              strstr(rt_client_errmsg(c), "dim 2 = 3"));
        vo.input_shape[1] = 0;
        CHECK_RC(rt_client_compile_keras(c, sid, vl, &vo, &pv));
        CHECK(pv.input_ndim == 2 && pv.input_shape[0] == 7 && pv.input_shape[1] == 3);
        CHECK(pv.param_count == 3 * 4 + 4 * 4 + 4 + 4 * 3 + 3);
        rt_client_compile_result_free(&pv);
        /* the data's values per sample (a CSV row) bind the one null dim
         * over the fixed 3; a count they do not divide is refused */
        vo.input_ndim = 0;
        vo.input_values = 15;
        CHECK_RC(rt_client_compile_keras(c, sid, vl, &vo, &pv));
        CHECK(pv.input_ndim == 2 && pv.input_shape[0] == 5 && pv.input_shape[1] == 3);
        rt_client_compile_result_free(&pv);
        vo.input_values = 14;
        CHECK(rt_client_compile_keras(c, sid, vl, &vo, &pv) == RT_EINVAL);
        CHECK(strstr(rt_client_errmsg(c), "input 'seq': the data's 14 values per sample"));
    }

    step("uploads");
    /* uploads: a CSV file, again (deduplicated in one round trip), memory */
    rt_client_dataset tr, tr2, va;
    CHECK_RC(rt_client_upload_csv(c, sid, "train", p_train, -1, 0, &tr));
    CHECK(tr.samples == 105 && tr.x_ndim == 1 && tr.x_shape[0] == 4 && tr.bytes_sent > 0);
    check_timings(c, "UploadDataset");
    CHECK_RC(rt_client_upload_csv(c, sid, "train", p_train, -1, 0, &tr2));
    CHECK(tr2.deduplicated && tr2.bytes_sent == 0 && !strcmp(tr.id, tr2.id));
    check_timings(c, "FindDataset");
    csv_data vd;
    CHECK(read_iris(p_val, &vd) == 45);
    rt_client_array vx = {vd.x, RT_DTYPE_F32, 2, {45, 4}};
    rt_client_array vy = {vd.y, RT_DTYPE_I32, 1, {45}};
    CHECK_RC(rt_client_upload(c, sid, "val", &vx, &vy, &va));
    CHECK(va.samples == 45);

    step("big upload");
    /* A data set bigger than one chunk and than gRPC's default message,
     * and over 8 MiB: the stream starts at once and a thread hashes (two
     * parts); the same again is found by the probe and the content hash
     * before anything is sent. */
    size_t bn = 450000;
    float *bx = malloc(bn * 4 * sizeof(float));
    int32_t *by = malloc(bn * sizeof(int32_t));
    for (size_t i = 0; i < bn * 4; i++)
        bx[i] = (float)(i % 97) * 0.01f;
    for (size_t i = 0; i < bn; i++)
        by[i] = (int32_t)(i % 3);
    rt_client_array bxa = {bx, RT_DTYPE_F32, 2, {(int64_t)bn, 4}};
    rt_client_array bya = {by, RT_DTYPE_I32, 1, {(int64_t)bn}};
    rt_client_dataset big, big2;
    CHECK_RC(rt_client_upload(c, sid, "big", &bxa, &bya, &big));
    CHECK(big.samples == bn && !big.deduplicated && big.bytes_sent == bn * 20);
    CHECK_RC(rt_client_upload(c, sid, "big", &bxa, &bya, &big2));
    CHECK(big2.deduplicated && !strcmp(big.id, big2.id) && big2.bytes_sent == 0);
    free(bx);
    free(by);

    step("fit");
    /* fit: history and accuracy */
    fit_log fl = {0};
    rt_client_fit_params fp = {.session = sid, .program = prog.program_id, .dataset = tr.id,
                               .val_dataset = va.id, .epochs = 60, .progress_every = 3};
    CHECK_RC(rt_client_fit(c, &fp, on_event, &fl));
    check_timings(c, "Fit");
    CHECK(fl.epochs == 60 && fl.done && fl.last_epoch == 60 && fl.progress > 0);
    printf("fit: val_accuracy %.4f val_loss %.4f\n", fl.last_val_acc, fl.last_val_loss);
    CHECK(fl.last_val_acc >= 0.9);

    /* 200 one-step epochs outrun the stream: the epoch ends queued behind
     * the one being sent go out joined (FitRequest.merge_events, the
     * daemon's merge_out) and still arrive each once, in order, each with
     * its validation, before the done event */
    {
        rt_client_compile_result pm;
        CHECK_RC(rt_client_compile_keras(c, sid, json, &o, &pm));
        ev_log ml = {0};
        rt_client_fit_params mp = {.session = sid, .program = pm.program_id,
                                   .dataset = tr.id, .val_dataset = va.id, .epochs = 200,
                                   .steps_per_epoch = 1};
        CHECK_RC(rt_client_fit(c, &mp, log_event, &ml));
        int ok = ml.n == 201 && ml.ev[200].kind == RT_FIT_DONE && ml.ev[200].done;
        for (int i = 0; ok && i < 200; i++)
            ok &= ml.ev[i].kind == RT_FIT_EPOCH_END && ml.ev[i].epoch == (uint64_t)i + 1 &&
                  ml.ev[i].has_val && !ml.ev[i].done && isfinite(ml.ev[i].vloss);
        if (!ok)
            fprintf(stderr, "merged fit: %d events, the first epoch %llu, the last kind %d\n",
                    ml.n, (unsigned long long)ml.ev[0].epoch, ml.ev[ml.n ? ml.n - 1 : 0].kind);
        CHECK(ok);
        rt_client_compile_result_free(&pm);
    }

    rt_client_metrics m;
    CHECK_RC(rt_client_evaluate(c, sid, prog.program_id, va.id, &m));
    check_timings(c, "Evaluate");
    CHECK(m.samples == 45 && fabs(m.accuracy - fl.last_val_acc) < 1e-6);
    CHECK(fabs(m.loss - fl.last_val_loss) < 1e-4);

    rt_client_tensor y;
    CHECK_RC(rt_client_predict(c, sid, prog.program_id, &vx, &y));
    check_timings(c, "Predict");
    CHECK(y.dtype == RT_DTYPE_F32 && y.ndim == 2 && y.shape[0] == 45 && y.shape[1] == 3);
    int correct = 0, sums_ok = 1;
    if (y.ndim == 2 && y.shape[0] == 45) {
        const float *p = y.data;
        for (int i = 0; i < 45; i++) {
            int am = 0;
            for (int j = 1; j < 3; j++)
                if (p[i * 3 + j] > p[i * 3 + am])
                    am = j;
            correct += am == vd.y[i];
            if (fabsf(p[i * 3] + p[i * 3 + 1] + p[i * 3 + 2] - 1) > 1e-4f)
                sums_ok = 0;
        }
    }
    CHECK(sums_ok);
    CHECK(fabs(correct / 45.0 - m.accuracy) < 1e-6);
    rt_client_tensor yd;
    CHECK_RC(rt_client_predict_dataset(c, sid, prog.program_id, va.id, &yd));
    CHECK(y.nbytes > 0 && yd.nbytes == y.nbytes && !memcmp(yd.data, y.data, y.nbytes));
    rt_client_tensor_free(&yd);

    step("weights");
    /* weights: get, file round trip, set into the second program */
    rt_client_weights w, wl;
    CHECK_RC(rt_client_get_weights(c, sid, prog.program_id, &w));
    check_timings(c, "GetWeights");
    CHECK(w.n == 4 && w.global_step == 60 * 6);
    char err[256];
    CHECK(rt_client_weights_save(&w, p_w, err, sizeof err) == 0);
    CHECK(rt_client_weights_load(&wl, p_w, err, sizeof err) == 0);
    CHECK_RC(rt_client_set_weights(c, sid, prog2.program_id, wl.t, wl.n));
    check_timings(c, "SetWeights");
    rt_client_tensor y2;
    CHECK_RC(rt_client_predict(c, sid, prog2.program_id, &vx, &y2));
    CHECK(y.nbytes > 0 && y2.nbytes == y.nbytes && !memcmp(y2.data, y.data, y.nbytes));
    rt_client_tensor_free(&y2);
    /* A missing tensor is rejected by the daemon. */
    CHECK(rt_client_set_weights(c, sid, prog2.program_id, wl.t, 3) < 0);
    rt_client_weights_free(&w);
    rt_client_weights_free(&wl);
    rt_client_tensor_free(&y);

    step("run_steps");
    /* run_steps: losses, epochs inside the call, replay by seq */
    rt_client_steps_result sr;
    rt_client_steps_params sp = {.session = sid, .program = prog2.program_id,
                                 .dataset = tr.id, .val_dataset = va.id, .steps = 7,
                                 .seq = 1000, .return_losses = 1};
    CHECK_RC(rt_client_run_steps(c, &sp, &sr));
    check_timings(c, "RunSteps");
    CHECK(sr.n_losses == 7 && !sr.replayed && sr.n_epochs == 1 && sr.epochs[0].has_val);
    uint64_t gs = sr.global_step;
    rt_client_steps_result_free(&sr);
    CHECK_RC(rt_client_run_steps(c, &sp, &sr));
    CHECK(sr.replayed && sr.global_step == gs);
    rt_client_steps_result_free(&sr);

    step("train_steps");
    /* The steps-per-call loop: K = 4 over 6-step epochs is calls of 4 and 2
     * steps, validation inside each epoch's last call, epochs numbered from 1; the same
     * training as one Fit stream from the same initial weights. One call at
     * a time, then pipelined (calls in flight, answers in order), then with
     * auto K: the same figures each time. */
    {
        rt_client_compile_result pa, pb;
        CHECK_RC(rt_client_compile_keras(c, sid, json, &o, &pa));
        ev_log fa = {0};
        rt_client_fit_params ff = {.session = sid, .program = pa.program_id,
                                   .dataset = tr.id, .val_dataset = va.id, .epochs = 3};
        CHECK_RC(rt_client_fit(c, &ff, log_event, &fa));
        rt_client_weights wa;
        CHECK_RC(rt_client_get_weights(c, sid, pa.program_id, &wa));
        static const struct { uint64_t k; uint32_t window; int across; } runs[] = {
            {4, 1, 0}, {4, 0, 0}, {1, 8, 0}, {0, 0, 0}, {1, 8, 1}, {0, 0, 1}};
        for (size_t ri = 0; ri < sizeof runs / sizeof runs[0]; ri++) {
            uint64_t K = runs[ri].k;
            printf("  K=%llu window=%u across=%d\n", (unsigned long long)K, runs[ri].window,
                   runs[ri].across);
            CHECK_RC(rt_client_compile_keras(c, sid, json, &o, &pb));
            ev_log lb = {0};
            size_t t0;
            rt_client_trace_calls(c, &t0);
            rt_client_train_params tp = {.session = sid, .program = pb.program_id,
                                         .dataset = tr.id, .val_dataset = va.id,
                                         .epochs = 3, .steps_per_epoch = 6,
                                         .steps_per_call = K, .window = runs[ri].window,
                                         .across_epochs = runs[ri].across};
            CHECK_RC(rt_client_train_steps(c, &tp, log_event, &lb));
            size_t runsteps = trace_count(c, t0, "RunSteps");
            /* Exactly: the daemon runs pipelined calls in order (after_seq),
             * so none is replayed and sent again. */
            if (K)
                CHECK(runsteps == 3 * ((6 + K - 1) / K));
            else
                CHECK(runsteps >= 3);
            /* Validation rides in each epoch's last RunSteps (val_at_end). */
            CHECK(trace_count(c, t0, "Evaluate") == 0);
            /* In order: per epoch its RunSteps answers with step_in_epoch and
             * the global step rising, then its end after an Evaluate. */
            int ok = lb.n > 0 && lb.ev[lb.n - 1].kind == RT_FIT_DONE && lb.ev[lb.n - 1].done;
            uint64_t epoch = 1, in_epoch = 0, gstep = 0;
            int fe = 0;
            for (int i = 0; ok && i + 1 < lb.n; i++) {
                const typeof(lb.ev[0]) *e = &lb.ev[i];
                if (e->kind == RT_FIT_PROGRESS) {
                    ok &= e->epoch == epoch && e->step_in_epoch > in_epoch &&
                          e->step_in_epoch <= 6 && e->steps_per_epoch == 6 &&
                          e->step == (epoch - 1) * 6 + e->step_in_epoch &&
                          e->step > gstep && !strcmp(e->method, "RunSteps");
                    /* Calls of K steps and the epoch's rest, in order,
                     * pipelined or not. */
                    if (K)
                        ok &= e->step_in_epoch - in_epoch == (K < 6 - in_epoch ? K : 6 - in_epoch);
                    in_epoch = e->step_in_epoch;
                    gstep = e->step;
                } else {
                    ok &= e->kind == RT_FIT_EPOCH_END && e->epoch == epoch &&
                          in_epoch == 6 && e->step == epoch * 6 && e->has_val &&
                          e->execute_ns > 0 && !e->method[0]; /* reported with its progress */
                    /* The epoch's running mean after its last call is its mean. */
                    ok &= fabs(lb.ev[i - 1].loss - e->loss) < 1e-6 * (1 + fabs(e->loss));
                    while (fe < fa.n && fa.ev[fe].kind != RT_FIT_EPOCH_END)
                        fe++;
                    if (fe < fa.n) {
                        const typeof(fa.ev[0]) *f = &fa.ev[fe++];
                        if (fabs(f->loss - e->loss) > 1e-5 * (1 + fabs(f->loss)) ||
                            fabs(f->acc - e->acc) > 1e-6 || fabs(f->vloss - e->vloss) > 1e-5 ||
                            fabs(f->vacc - e->vacc) > 1e-6) {
                            fprintf(stderr, "epoch %llu: Fit %.7f/%.4f/%.7f/%.4f, loop "
                                    "%.7f/%.4f/%.7f/%.4f\n", (unsigned long long)epoch,
                                    f->loss, f->acc, f->vloss, f->vacc, e->loss, e->acc,
                                    e->vloss, e->vacc);
                            ok = 0;
                        }
                    } else {
                        ok = 0;
                    }
                    epoch++;
                    in_epoch = 0;
                }
            }
            CHECK(ok && epoch == 4);
            if (!ok || epoch != 4)
                for (int i = 0; i < lb.n; i++)
                    fprintf(stderr, "  ev %d: kind %d epoch %llu step %llu in_epoch %llu "
                            "%s loss %.7f\n", i, lb.ev[i].kind,
                            (unsigned long long)lb.ev[i].epoch,
                            (unsigned long long)lb.ev[i].step,
                            (unsigned long long)lb.ev[i].step_in_epoch, lb.ev[i].method,
                            lb.ev[i].loss);
            if (!K) { /* auto: the K in force and what it was chosen from */
                int kk = 1;
                for (int i = 0; i < lb.n; i++)
                    if (lb.ev[i].kind == RT_FIT_PROGRESS)
                        kk &= lb.ev[i].steps_per_call >= 1 && lb.ev[i].steps_per_call <= 6 &&
                              lb.ev[i].step_ns > 0;
                CHECK(kk);
            }
            CHECK(global_step(c, sid, pb.program_id) == 18);
            rt_client_weights wb;
            CHECK_RC(rt_client_get_weights(c, sid, pb.program_id, &wb));
            int same = wb.n == wa.n;
            for (size_t t = 0; same && t < wb.n; t++) {
                const float *x = wa.t[t].data, *y2 = wb.t[t].data;
                same &= wb.t[t].nbytes == wa.t[t].nbytes;
                for (size_t q = 0; same && q < wb.t[t].nbytes / 4; q++)
                    same &= fabsf(x[q] - y2[q]) <= 1e-5f * (1 + fabsf(x[q]));
            }
            CHECK(same);
            rt_client_weights_free(&wb);
            if (ri + 1 < sizeof runs / sizeof runs[0])
                rt_client_compile_result_free(&pb);
        }
        rt_client_weights_free(&wa);

        /* Stopped by the callback after 3 one-step calls, one at a time:
         * nothing more runs. */
        ev_log st = {.stop_after_progress = 3};
        rt_client_train_params tp = {.session = sid, .program = pb.program_id,
                                     .dataset = tr.id, .epochs = 3, .steps_per_epoch = 6,
                                     .steps_per_call = 1, .window = 1};
        size_t t0;
        rt_client_trace_calls(c, &t0);
        rc_loop = rt_client_train_steps(c, &tp, log_event, &st);
        CHECK(rc_loop == RT_ECANCELLED && strstr(rt_client_errmsg(c), "callback"));
        CHECK(trace_count(c, t0, "RunSteps") == 3 && st.n == 3);
        CHECK(global_step(c, sid, pb.program_id) == 18 + 3);
        /* Pipelined: the calls in flight are cancelled; at most the window's
         * worth of steps ran after the stop, and the program trains on. */
        ev_log st8 = {.stop_after_progress = 3};
        tp.window = 8;
        rc_loop = rt_client_train_steps(c, &tp, log_event, &st8);
        CHECK(rc_loop == RT_ECANCELLED && st8.n == 3);
        uint64_t g = global_step(c, sid, pb.program_id);
        CHECK(g >= 21 + 3 && g <= 21 + 3 + 8);
        tp.epochs = 1;
        CHECK_RC(rt_client_train_steps(c, &tp, NULL, NULL));
        CHECK(global_step(c, sid, pb.program_id) == g + 6);

        /* A failing call ends the run: the first call goes alone, so one
         * call and no event. */
        ev_log bad = {0};
        tp.dataset = "d-nope";
        rt_client_trace_calls(c, &t0);
        rc_loop = rt_client_train_steps(c, &tp, log_event, &bad);
        CHECK(rc_loop == RT_ENOTFOUND && bad.n == 0);
        CHECK(strstr(rt_client_errmsg(c), "d-nope") != NULL);
        CHECK(trace_count(c, t0, "RunSteps") == 1);
        tp.dataset = tr.id;
        tp.window = RT_TRAIN_MAX_WINDOW + 1;
        rt_client_trace_calls(c, &t0);
        CHECK(rt_client_train_steps(c, &tp, log_event, &bad) == RT_EINVAL);
        CHECK(strstr(rt_client_errmsg(c), "window") != NULL);
        size_t t1;
        rt_client_trace_calls(c, &t1);
        CHECK(t1 == t0 && bad.n == 0);
        tp.window = 8;

        /* The program's sequence numbers are ahead of this client's
         * (another client used it): RT_ESTATE, after one call that ran
         * nothing. */
        rt_client_steps_params far = {.session = sid, .program = pb.program_id,
                                      .dataset = tr.id, .steps = 1, .seq = 1ull << 40};
        rt_client_steps_result fr;
        CHECK_RC(rt_client_run_steps(c, &far, &fr));
        rt_client_steps_result_free(&fr);
        g = global_step(c, sid, pb.program_id);
        rt_client_trace_calls(c, &t0);
        CHECK(rt_client_train_steps(c, &tp, NULL, NULL) == RT_ESTATE);
        CHECK(strstr(rt_client_errmsg(c), "replayed") != NULL);
        CHECK(trace_count(c, t0, "RunSteps") == 1 && global_step(c, sid, pb.program_id) == g);

        /* rt_client_cancel from another thread, during or between calls. */
        rt_client_compile_result pc;
        CHECK_RC(rt_client_compile_keras(c, sid, json, &o, &pc));
        tp.program = pc.program_id;
        tp.epochs = 1000000;
        ev_log lc = {0};
        canceller k = {c, &lc.progress, 0};
        pthread_t th;
        pthread_create(&th, NULL, cancel_later, &k);
        rc_loop = rt_client_train_steps(c, &tp, log_event, &lc);
        __atomic_store_n(&k.finished, 1, __ATOMIC_RELEASE);
        pthread_join(th, NULL);
        CHECK(rc_loop == RT_ECANCELLED && lc.progress > 0);
        CHECK(strstr(rt_client_errmsg(c), "cancel") != NULL);
        CHECK(lc.n > 0 && lc.ev[lc.n - 1].kind != RT_FIT_DONE);

        /* The session closed by another client mid-run: the failing call
         * ends the pipeline; only calls already in flight are answered
         * after it, and the error is the failed call's. */
        char sid2[RT_ID_MAX];
        rt_client_compile_result pd;
        CHECK_RC(rt_client_session_create(c, "e2e-2", sid2));
        rt_client_dataset tr3;
        CHECK_RC(rt_client_upload_csv(c, sid2, "train", p_train, -1, 0, &tr3));
        CHECK_RC(rt_client_compile_keras(c, sid2, json, &o, &pd));
        ev_log le = {0};
        closer cl = {.sid = sid2, .progress = &le.progress};
        pthread_create(&th, NULL, close_later, &cl);
        rt_client_trace_calls(c, &t0);
        tp.session = sid2;
        tp.program = pd.program_id;
        tp.dataset = tr3.id;
        rc_loop = rt_client_train_steps(c, &tp, log_event, &le);
        __atomic_store_n(&cl.finished, 1, __ATOMIC_RELEASE);
        pthread_join(th, NULL);
        CHECK(cl.rc == 0);
        CHECK(rc_loop < 0 && rc_loop != RT_ECANCELLED && le.progress > 0);
        CHECK(strstr(rt_client_errmsg(c), sid2) != NULL);
        size_t n_tr;
        const rt_client_timings *tt = rt_client_trace_calls(c, &n_tr);
        size_t first_bad = n_tr;
        rt_client_timings lt;
        rt_client_last_timings(c, &lt);
        for (size_t i = t0; i < n_tr && first_bad == n_tr; i++)
            if (!strcmp(tt[i].method, "RunSteps") && tt[i].start_ns == lt.start_ns)
                first_bad = i;
        CHECK(first_bad < n_tr && n_tr - first_bad - 1 <= 8 - 1);
        rt_client_compile_result_free(&pa);
        rt_client_compile_result_free(&pb);
        rt_client_compile_result_free(&pc);
        rt_client_compile_result_free(&pd);
    }

    step("keras fit state");
    {
        /* Sample weights uploaded with the data weigh the loss (all zeros:
         * loss 0); learning_rate on Fit and on the RunSteps loop reaches
         * the program (GetWeights reports it); state_from carries weights,
         * step and rate into a program of another batch size. */
        float zw[45] = {0}, hw[45];
        for (int i = 0; i < 45; i++)
            hw[i] = 0.5f;
        rt_client_array zwa = {zw, RT_DTYPE_F32, 1, {45}}, hwa = {hw, RT_DTYPE_F32, 1, {45}};
        rt_client_dataset zd, hd;
        CHECK_RC(rt_client_upload_weighted(c, sid, "val0", &vx, &vy, &zwa, &zd));
        CHECK_RC(rt_client_upload_weighted(c, sid, "valh", &vx, &vy, &hwa, &hd));
        CHECK(strcmp(zd.id, va.id) != 0 && strcmp(zd.id, hd.id) != 0);
        rt_client_metrics m1, m0, mh;
        CHECK_RC(rt_client_evaluate(c, sid, prog.program_id, va.id, &m1));
        CHECK_RC(rt_client_evaluate(c, sid, prog.program_id, zd.id, &m0));
        CHECK_RC(rt_client_evaluate(c, sid, prog.program_id, hd.id, &mh));
        CHECK(m1.loss > 0 && m0.loss == 0.0 && fabs(mh.loss - 0.5 * m1.loss) <= 1e-6 * m1.loss);
        CHECK(m0.accuracy == m1.accuracy); /* accuracy is not weighted */
        CHECK(rt_client_upload_weighted(c, sid, "bad", &vx, NULL, &hwa, &hd) == RT_EINVAL);

        rt_client_compile_result pl;
        CHECK_RC(rt_client_compile_keras(c, sid, json, &o, &pl));
        rt_client_fit_params lp = {.session = sid, .program = pl.program_id, .dataset = tr.id,
                                   .epochs = 1, .learning_rate = 0.004f};
        CHECK_RC(rt_client_fit(c, &lp, NULL, NULL));
        rt_client_weights lw;
        CHECK_RC(rt_client_get_weights(c, sid, pl.program_id, &lw));
        CHECK(lw.learning_rate == 0.004f && lw.global_step == 6);
        rt_client_weights_free(&lw);
        rt_client_train_params ltp = {.session = sid, .program = pl.program_id,
                                      .dataset = tr.id, .epochs = 1, .steps_per_epoch = 6,
                                      .steps_per_call = 2, .learning_rate = 0.007f};
        CHECK_RC(rt_client_train_steps(c, &ltp, NULL, NULL));
        rt_client_weights lw2;
        CHECK_RC(rt_client_get_weights(c, sid, pl.program_id, &lw2));
        CHECK(lw2.learning_rate == 0.007f && lw2.global_step == 12);

        rt_train_opts o2 = o;
        o2.batch_size = 7;
        o2.state_from = pl.program_id;
        rt_client_compile_result ps;
        CHECK_RC(rt_client_compile_keras(c, sid, json, &o2, &ps));
        rt_client_weights sw2;
        CHECK_RC(rt_client_get_weights(c, sid, ps.program_id, &sw2));
        CHECK(sw2.global_step == 12 && sw2.learning_rate == 0.007f && sw2.n == lw2.n);
        for (size_t i = 0; i < sw2.n && i < lw2.n; i++)
            CHECK(sw2.t[i].nbytes == lw2.t[i].nbytes &&
                  !memcmp(sw2.t[i].data, lw2.t[i].data, sw2.t[i].nbytes));
        rt_client_weights_free(&sw2);
        rt_client_weights_free(&lw2);
        o2.state_from = "p-00000000000000000000000000000000";
        rt_client_compile_result pn;
        CHECK(rt_client_compile_keras(c, sid, json, &o2, &pn) == RT_ENOTFOUND);
        rt_client_compile_result_free(&pl);
        rt_client_compile_result_free(&ps);
    }

    step("cancel");
    /* cancellation: by the callback, then by another thread */
    fit_log stop = {.stop_after = 5};
    rt_client_fit_params lf = {.session = sid, .program = prog2.program_id, .dataset = tr.id,
                               .epochs = 1000000, .progress_every = 1};
    rt_client_set_timeout_ms(c, 120000);
    int rc = rt_client_fit(c, &lf, on_event, &stop);
    CHECK(rc == RT_ECANCELLED);
    CHECK(!stop.done);
    step("cancel thread");
    fit_log quiet = {0};
    canceller k = {c, &quiet.progress, 0};
    pthread_t th;
    pthread_create(&th, NULL, cancel_later, &k);
    rc = rt_client_fit(c, &lf, on_event, &quiet);
    __atomic_store_n(&k.finished, 1, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
    CHECK(rc == RT_ECANCELLED);
    CHECK(!quiet.done && quiet.progress > 0); /* stopped mid-way, not at the end */
    CHECK(strstr(rt_client_errmsg(c), "cancel") != NULL);
    /* The session still works after a cancelled call. */
    CHECK_RC(rt_client_evaluate(c, sid, prog2.program_id, va.id, &m));

    step("control");
    {
        /* A rate and a stop from the callback: the fit ends without an
         * error, stopped, at the step the daemon reports. */
        uint64_t g0 = global_step(c, sid, prog2.program_id);
        ctl_log cl = {.c = c, .sid = sid, .prog = prog2.program_id};
        rc = rt_client_fit(c, &lf, ctl_event, &cl);
        CHECK_RC(rc);
        CHECK(cl.calls == 2 && cl.calls_ok == 2);
        CHECK(cl.done && cl.stopped && !cl.cancelled);
        CHECK(cl.rate_at > cl.asked_at && cl.end_step >= cl.rate_at);
        check_timings(c, "Fit"); /* the Control calls kept the stream's account */
        rt_client_weights cw;
        CHECK_RC(rt_client_get_weights(c, sid, prog2.program_id, &cw));
        CHECK(cw.global_step == cl.end_step && cw.global_step > g0 &&
              cw.learning_rate == 0.003f);
        rt_client_weights_free(&cw);
        /* Outside a fit: nothing running; bad input named. */
        int running = -1;
        rt_client_control_params cp = {.session = sid, .program = prog2.program_id,
                                       .stop = 1};
        CHECK_RC(rt_client_control(c, &cp, &running));
        CHECK(running == 0);
        cp.learning_rate = NAN;
        CHECK(rt_client_control(c, &cp, NULL) == RT_EINVAL &&
              strstr(rt_client_errmsg(c), "learning_rate"));
        cp.learning_rate = 0.0f;
        cp.program = "p-00000000000000000000000000000000";
        CHECK(rt_client_control(c, &cp, NULL) == RT_ENOTFOUND &&
              rt_client_grpc_status(c) == 5);
    }

    step("deadline");
    /* deadline */
    rt_client_next_timeout_ms(c, 50);
    rc = rt_client_fit(c, &lf, NULL, NULL);
    CHECK(rc == RT_ETIMEDOUT);
    /* the client's own deadline (gRPC's text): the generic hint */
    CHECK(strstr(rt_client_errmsg(c), "DEADLINE") != NULL &&
          strstr(rt_client_errmsg(c), "did not finish in time") != NULL);

    step("errors");
    /* errors the daemon reports */
    rc = rt_client_evaluate(c, sid, prog.program_id, "d-nope", &m);
    CHECK(rc == RT_ENOTFOUND && rt_client_grpc_status(c) == 5);
    CHECK(strstr(rt_client_errmsg(c), "NOT_FOUND") != NULL);
    rt_client_compile_result_free(&prog2); /* results are outputs: free before reuse */
    rc = rt_client_compile_keras(c, sid, "{not json", &o, &prog2);
    CHECK(rc < 0 && rc != RT_EUNAVAILABLE && *rt_client_errmsg(c));
    rt_client_compile_result_free(&prog2);
    rt_train_opts bad = o;
    bad.loss = "no_such_loss";
    rc = rt_client_compile_keras(c, sid, json, &bad, &prog2);
    CHECK(rc < 0 && strstr(rt_client_errmsg(c), "no_such_loss") != NULL);

    step("native");
    /* The native builder compiles the same model. */
    rt_model *nm = rt_model_create();
    int64_t in[2] = {-1, 4};
    const char *h, *out;
    rt_model_add_input(nm, "x", RT_DTYPE_F32, 2, in);
    rt_model_dense(nm, "dense", "x", 4, 32, "relu", &h);
    rt_model_dense(nm, "dense_1", h, 32, 3, "softmax", &out);
    rt_model_set_output(nm, out);
    rt_client_compile_result np;
    CHECK_RC(rt_client_compile(c, sid, nm, &o, &np));
    CHECK(np.param_count == prog.param_count);
    /* dropped (issue 29): gone for the calls after it, a second drop too */
    CHECK_RC(rt_client_drop_program(c, sid, np.program_id));
    rc = rt_client_evaluate(c, sid, np.program_id, va.id, &m);
    CHECK(rc == RT_ENOTFOUND && rt_client_grpc_status(c) == 5);
    rc = rt_client_drop_program(c, sid, np.program_id);
    CHECK(rc == RT_ENOTFOUND && strstr(rt_client_errmsg(c), np.program_id) != NULL);
    CHECK_RC(rt_client_evaluate(c, sid, prog.program_id, va.id, &m));
    rt_client_compile_result_free(&np);
    rt_model_destroy(nm);

    step("an ONNX model takes NCHW data");
    {
        /* tests/onnx/fixtures/rb.onnx: a PyTorch ResNet block, input
         * (N, 3, 8, 8); int64 labels; PyTorch's cross_entropy */
        char p_rb[1100];
        snprintf(p_rb, sizeof p_rb, "%s/../../tests/onnx/fixtures/rb.onnx", ex);
        FILE *f = fopen(p_rb, "rb");
        static char onnx[1 << 16];
        size_t on = f ? fread(onnx, 1, sizeof onnx, f) : 0;
        if (f)
            fclose(f);
        CHECK(on > 0 && on < sizeof onnx);
        rt_train_opts to;
        rt_train_opts_init(&to);
        to.loss = "cross_entropy";
        to.optimizer = "sgd";
        to.lr = 0.05f;
        to.batch_size = 8;
        rt_client_compile_result pc, ph;
        CHECK_RC(rt_client_compile_onnx(c, sid, onnx, on, NULL, &to, &pc));
        CHECK(!strcmp(pc.data_layout, "NCHW"));
        CHECK(pc.input_ndim == 3 && pc.input_shape[0] == 3 && pc.input_shape[1] == 8 &&
              pc.input_shape[2] == 8);
        to.data_layout = "NHWC";
        CHECK_RC(rt_client_compile_onnx(c, sid, onnx, on, NULL, &to, &ph));
        CHECK(!ph.data_layout[0] && ph.input_ndim == 3 && ph.input_shape[2] == 3);
        enum { N = 16 };
        static float xc[N * 3 * 64], xh[N * 64 * 3];
        int64_t yl[N];
        for (int i = 0; i < N; i++) {
            yl[i] = i % 10;
            for (int ch = 0; ch < 3; ch++)
                for (int k = 0; k < 64; k++) {
                    const float v = (float)((i * 131 + ch * 17 + k * 7) % 101) / 101.0f;
                    xc[(i * 3 + ch) * 64 + k] = v;
                    xh[(i * 64 + k) * 3 + ch] = v;
                }
        }
        rt_client_array xca = {xc, RT_DTYPE_F32, 4, {N, 3, 8, 8}};
        rt_client_array xha = {xh, RT_DTYPE_F32, 4, {N, 8, 8, 3}};
        rt_client_array ya = {yl, RT_DTYPE_I64, 1, {N}};
        /* the same predictions from NCHW data and, asked for, NHWC data */
        rt_client_tensor yc, yh;
        CHECK_RC(rt_client_predict(c, sid, pc.program_id, &xca, &yc));
        CHECK_RC(rt_client_predict(c, sid, ph.program_id, &xha, &yh));
        CHECK(yc.ndim == 2 && yc.shape[0] == N && yc.shape[1] == 10 && yh.nbytes == yc.nbytes);
        float dev = 0;
        for (size_t i = 0; yh.nbytes == yc.nbytes && i < yc.nbytes / 4; i++)
            dev = fmaxf(dev, fabsf(((float *)yc.data)[i] - ((float *)yh.data)[i]));
        CHECK(dev <= 1e-6f);
        rt_client_tensor_free(&yc);
        rt_client_tensor_free(&yh);
        /* NHWC data for the NCHW program: refused, the layout named */
        CHECK(rt_client_predict(c, sid, pc.program_id, &xha, &yc) == RT_EINVAL);
        CHECK(strstr(rt_client_errmsg(c), "the data is NHWC and the model takes NCHW"));
        /* trains on NCHW data with int64 labels */
        rt_client_dataset dc;
        CHECK_RC(rt_client_upload(c, sid, "nchw", &xca, &ya, &dc));
        rt_client_steps_result nr;
        rt_client_steps_params np2 = {.session = sid, .program = pc.program_id,
                                      .dataset = dc.id, .steps = 2, .return_losses = 1};
        CHECK_RC(rt_client_run_steps(c, &np2, &nr));
        CHECK(nr.n_losses == 2 && isfinite(nr.losses[0]) && nr.losses[0] > 0);
        rt_client_steps_result_free(&nr);
        rt_client_compile_result_free(&pc);
        rt_client_compile_result_free(&ph);
    }

    step("fit on arrays over one upload");
    /* rt_client_fit_arrays told the daemon takes 2000 bytes an upload: the
     * 105 rows (20 bytes each) go in chunks of whole batches of at most
     * 1000 bytes (40 rows), and the unshuffled fit ends on the weights of
     * the same fit as one upload (GetInfo's limit), bit for bit; its epoch
     * ends merge the chunks' 40 + 40 + 25 samples. Two sessions: the same
     * compile in one would be the same program. */
    {
        csv_data td;
        CHECK(read_iris(p_train, &td) == 105);
        rt_client_array tx = {td.x, RT_DTYPE_F32, 2, {105, 4}};
        rt_client_array ty = {td.y, RT_DTYPE_I32, 1, {105}};
        rt_train_opts uo = o;
        uo.no_shuffle = 1;
        char sa[RT_ID_MAX], sb[RT_ID_MAX];
        rt_client_compile_result pa, pb;
        two_programs(c, json, &uo, sa, sb, &pa, &pb);
        fit_log la = {0}, lb = {0};
        rt_client_fit_arrays_params ap = {
            .fit = {.session = sa, .program = pa.program_id, .val_dataset = NULL, .epochs = 3,
                    .progress_every = 1},
            .name = "iris",
            .x = &tx,
            .y = &ty,
            .batch_size = 20,
            .max_upload_bytes = 2000};
        size_t t0 = trace_count(c, 0, "UploadDataset") + trace_count(c, 0, "FindDataset");
        CHECK_RC(rt_client_fit_arrays(c, &ap, on_event, &la));
        /* 3 chunks: uploaded in epoch 1, found again in epochs 2 and 3 */
        CHECK(trace_count(c, 0, "UploadDataset") + trace_count(c, 0, "FindDataset") - t0 >= 9);
        ap.fit.session = sb;
        ap.fit.program = pb.program_id;
        ap.max_upload_bytes = 0;
        CHECK_RC(rt_client_fit_arrays(c, &ap, on_event, &lb));
        CHECK(la.epochs == 3 && lb.epochs == 3 && la.done == 1 && lb.done == 1);
        CHECK(same_weights(c, sa, pa.program_id, sb, pb.program_id, 18));
        /* a batch over half the limit cannot go in chunks: said so */
        ap.max_upload_bytes = 600;
        CHECK(rt_client_fit_arrays(c, &ap, NULL, NULL) == RT_ETOOBIG);
        CHECK(strstr(rt_client_errmsg(c), "one batch of 20 rows is up to 400 bytes"));
        rt_client_compile_result_free(&pa);
        rt_client_compile_result_free(&pb);
        CHECK_RC(rt_client_session_close(c, sa));
        CHECK_RC(rt_client_session_close(c, sb));
    }


    step("a shuffled fit over one upload: a permutation of all rows per epoch; evaluate and "
         "predict rows in chunks");
    /* rt_client_fit_rows told the daemon takes 2000 bytes an upload: the
     * 105 training rows (20 bytes each) go in chunks of 40, 40 and 25. With
     * shuffle each epoch's chunks are slices of one permutation of all 105
     * rows, drawn from (seed, epoch): the first chunk holds rows of all
     * three row-order chunks (a shuffle inside each chunk would hold rows
     * 0..39 only), every row comes once an epoch, epochs differ, and the
     * same seed gives the same orders and the same weights. The 45
     * validation rows with a limit of 800 go in chunks of 20, 20 and 5: the epoch
     * ends' val metrics are Evaluate's over all 45 rows, combined by rows,
     * as one Evaluate of the whole set gives them. */
    {
        csv_data td, vd;
        CHECK(read_iris(p_train, &td) == 105);
        CHECK(read_iris(p_val, &vd) == 45);
        static rec_rows ra, rb, rv;
        ra = (rec_rows){.x = td.x, .y = td.y, .d = 4};
        rb = ra;
        rv = (rec_rows){.x = vd.x, .y = vd.y, .d = 4};
        char sa[RT_ID_MAX], sb[RT_ID_MAX];
        rt_client_compile_result pa, pb;
        two_programs(c, json, &o, sa, sb, &pa, &pb);
        fit_log la = {0}, lb = {0};
        rt_client_fit_rows_params rp = {
            .fit = {.session = sa, .program = pa.program_id, .epochs = 3, .progress_every = 1},
            .name = "iris",
            .train = {.n = 105, .bytes = 2100, .row_bytes = 20, .upload = rec_upload, .user = &ra},
            .batch_size = 20,
            .shuffle = 1,
            .seed = 5,
            .max_upload_bytes = 2000};
        CHECK_RC(rt_client_fit_rows(c, &rp, on_event, &la));
        CHECK(la.epochs == 3 && la.done == 1 && ra.n_up == 9);
        int whole = ra.n_up == 9, spread[3] = {0, 0, 0};
        for (int e = 0; whole && e < 3; e++) {
            int seen[105] = {0};
            for (int u = 3 * e; u < 3 * e + 3; u++)
                for (uint64_t i = 0; i < ra.k[u]; i++)
                    seen[ra.rows[u][i] < 105 ? ra.rows[u][i] : 0]++;
            whole &= ra.k[3 * e] == 40 && ra.k[3 * e + 1] == 40 && ra.k[3 * e + 2] == 25;
            for (int i = 0; i < 105; i++)
                whole &= seen[i] == 1;
        }
        CHECK(whole);
        for (uint64_t i = 0; i < ra.k[0]; i++)
            spread[ra.rows[0][i] / 40]++;
        CHECK(spread[0] > 0 && spread[1] > 0 && spread[2] > 0);
        CHECK(memcmp(ra.rows[0], ra.rows[3], 40 * sizeof ra.rows[0][0]) != 0);
        /* the same seed: the same orders, the same weights */
        rp.fit.session = sb;
        rp.fit.program = pb.program_id;
        rp.train.user = &rb;
        rp.val = (rt_client_rows){.n = 45, .bytes = 900, .row_bytes = 20, .upload = rec_upload,
                                  .user = &rv};
        rp.max_upload_bytes = 2000;
        CHECK_RC(rt_client_fit_rows(c, &rp, on_event, &lb));
        CHECK(rb.n_up == 9 && !memcmp(ra.rows, rb.rows, sizeof ra.rows) &&
              !memcmp(ra.k, rb.k, sizeof ra.k));
        CHECK(same_weights(c, sa, pa.program_id, sb, pb.program_id, 18)); /* 3 x 6 steps */
        /* val under 2000 bytes: one upload, evaluated whole each epoch */
        CHECK(rv.n_up == 1 && rv.k[0] == 45 && lb.epochs == 3);
        /* val in chunks of 20, 20 and 5 rows (limit 800): one more epoch
         * on b, its val metrics against one Evaluate of all 45 rows (a
         * mean of the chunks' means would weigh the last 5 rows as 20) */
        rv.n_up = 0;
        rb.n_up = 0;
        rp.fit.epochs = 1;
        rp.max_upload_bytes = 800;
        rp.train.bytes = 400; /* one upload here */
        rp.train.n = 20;
        fit_log lc = {0};
        CHECK_RC(rt_client_fit_rows(c, &rp, on_event, &lc));
        CHECK(lc.epochs == 1 && rv.n_up == 3 && rv.k[0] == 20 && rv.k[2] == 5);
        rt_client_array vx = {vd.x, RT_DTYPE_F32, 2, {45, 4}};
        rt_client_array vy = {vd.y, RT_DTYPE_I32, 1, {45}};
        rt_client_dataset vds;
        rt_client_metrics vm;
        CHECK_RC(rt_client_upload(c, sb, "val whole", &vx, &vy, &vds));
        CHECK_RC(rt_client_evaluate(c, sb, pb.program_id, vds.id, &vm));
        CHECK(vm.samples == 45);
        CHECK(fabs(lc.last_val_loss - vm.loss) <= 1e-6 * fabs(vm.loss));
        CHECK(fabs(lc.last_val_acc - vm.accuracy) <= 1e-9);
        /* rt_client_evaluate_rows and rt_client_predict_rows on the 45 rows
         * with the limit 800: chunks of whole batches of 5 (20, 20, 5 rows),
         * the metrics of one Evaluate of all rows, the outputs of one
         * Predict in row order */
        rv.n_up = 0;
        rt_client_metrics em;
        CHECK_RC(rt_client_evaluate_rows(c, sb, pb.program_id, "val rows", &rp.val, 5, 800, &em));
        CHECK(rv.n_up == 3 && rv.k[0] == 20 && rv.k[1] == 20 && rv.k[2] == 5 &&
              rv.rows[1][0] == 20);
        CHECK(em.samples == 45 && fabs(em.loss - vm.loss) <= 1e-6 * fabs(vm.loss) &&
              fabs(em.accuracy - vm.accuracy) <= 1e-9);
        rt_client_tensor pw, pc;
        CHECK_RC(rt_client_predict_dataset(c, sb, pb.program_id, vds.id, &pw));
        rv.n_up = 0;
        CHECK_RC(rt_client_predict_rows(c, sb, pb.program_id, "val rows", &rp.val, 5, 800, &pc));
        CHECK(rv.n_up == 3 && pc.ndim == pw.ndim && pc.shape[0] == 45 && pw.shape[0] == 45 &&
              pc.nbytes == pw.nbytes && !memcmp(pc.data, pw.data, pw.nbytes));
        rt_client_tensor_free(&pw);
        rt_client_tensor_free(&pc);
        rt_client_compile_result_free(&pa);
        rt_client_compile_result_free(&pb);
        CHECK_RC(rt_client_session_close(c, sa));
        CHECK_RC(rt_client_session_close(c, sb));
    }

    step("trace");
    /* trace */
    size_t ncalls;
    rt_client_trace_calls(c, &ncalls);
    CHECK(ncalls > 20);
    CHECK(rt_client_trace_write(c, p_trace) == 0);
    json_object *root = json_object_from_file(p_trace), *evs;
    CHECK(root && json_object_object_get_ex(root, "traceEvents", &evs) &&
          json_object_array_length(evs) > ncalls * 4);
    json_object_put(root);

    step("close");
    /* close: then the session is gone */
    CHECK_RC(rt_client_session_close(c, sid));
    rc = rt_client_evaluate(c, sid, prog.program_id, va.id, &m);
    CHECK(rc == RT_ENOTFOUND);
    rt_client_compile_result_free(&prog);
    rt_client_destroy(c);
    step("stop");
    stop_daemon();

    step("the daemon's deadline");
    /* A pipelined RunSteps whose predecessor never comes is held for
     * --pipeline-hold-ms, then answered DEADLINE_EXCEEDED with the cause:
     * the client keeps the daemon's message (its own deadline did not
     * pass, so "raise the timeout" would mislead). */
    CHECK(start_daemon(argv[1], "100") == 0);
    CHECK(rt_client_create(addr, &c) == 0);
    CHECK_RC(rt_client_session_create(c, "hold", sid));
    CHECK_RC(rt_client_compile_keras(c, sid, json, &o, &prog));
    CHECK_RC(rt_client_upload_csv(c, sid, "train", p_train, -1, 0, &tr));
    rt_client_steps_params hp = {.session = sid, .program = prog.program_id, .dataset = tr.id,
                                 .steps = 1, .seq = 5, .after_seq = 4};
    CHECK(rt_client_run_steps(c, &hp, &sr) == RT_ETIMEDOUT);
    CHECK(strstr(rt_client_errmsg(c), "DEADLINE_EXCEEDED") &&
          strstr(rt_client_errmsg(c), "waited") &&
          strstr(rt_client_errmsg(c), "--pipeline-hold-ms") &&
          !strstr(rt_client_errmsg(c), "did not finish in time"));
    rt_client_compile_result_free(&prog);
    rt_client_destroy(c);
    stop_daemon();
    printf("%d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
