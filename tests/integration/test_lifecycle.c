/* test_lifecycle.c - rtraind start and stop: SIGTERM lets an in-flight call
 * finish and exits 0; a call still running after the grace period is
 * cancelled and the daemon still exits 0; a second daemon on a used port
 * fails loudly; flags. */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <xxhash.h>

#include "itest.h"

typedef struct bg_call {
    const char *addr;
    char sid[40], pid[40], did[40];
    uint64_t steps;
    int fit;          /* Fit instead of RunSteps */
    int status;
    char details[600];
    uint64_t global_step;
    int started;      /* atomic: the Fit's first event came, or the call ended */
} bg_call;

/* Built once: workers in several threads share it read-only. */
static pthread_once_t graph_once = PTHREAD_ONCE_INIT;
static Rtrain__V1__Graph *the_graph;
static void build_graph(void);

static Rtrain__V1__Graph *small_graph(void)
{
    pthread_once(&graph_once, build_graph);
    return the_graph;
}

static void build_graph(void)
{
    static Rtrain__V1__Graph g = RTRAIN__V1__GRAPH__INIT;
    static Rtrain__V1__ValueInfo in = RTRAIN__V1__VALUE_INFO__INIT;
    static Rtrain__V1__ValueInfo *ins[1] = {&in};
    static Rtrain__V1__Param w = RTRAIN__V1__PARAM__INIT, b = RTRAIN__V1__PARAM__INIT;
    static Rtrain__V1__Param *ps[2] = {&w, &b};
    static Rtrain__V1__Node d = RTRAIN__V1__NODE__INIT, s = RTRAIN__V1__NODE__INIT;
    static Rtrain__V1__Node *ns[2] = {&d, &s};
    static int64_t ish[2] = {-1, 4}, wsh[2] = {4, 3}, bsh[1] = {3};
    static char *din[3] = {"x", "w", "b"}, *sin[1] = {"d"};
    in.name = "x";
    in.dtype = RTRAIN__V1__DTYPE__F32;
    in.shape = ish;
    in.n_shape = 2;
    w.name = "w"; w.shape = wsh; w.n_shape = 2; w.trainable = 1;
    b.name = "b"; b.shape = bsh; b.n_shape = 1; b.trainable = 1;
    d.name = "d"; d.op = "Dense"; d.inputs = din; d.n_inputs = 3;
    s.name = "probs"; s.op = "Softmax"; s.inputs = sin; s.n_inputs = 1;
    g.inputs = ins; g.n_inputs = 1; g.params = ps; g.n_params = 2; g.nodes = ns; g.n_nodes = 2;
    g.output = "probs";
    the_graph = &g;
}

/* The iris CSV (malloc'ed, *len bytes) and its DataPart, as uploaded. */
static uint8_t *iris_csv(size_t *len, Rtrain__V1__DataPart *p)
{
    char path[512];
    snprintf(path, sizeof path, "%s/iris.csv", itest_data_dir());
    uint8_t *csv = itest_read_file(path, len);
    Rtrain__V1__DataPart init = RTRAIN__V1__DATA_PART__INIT;
    *p = init;
    p->role = RTRAIN__V1__DATA_ROLE__ROLE_BOTH;
    p->format = RTRAIN__V1__DATA_FORMAT__FORMAT_CSV;
    p->length = *len;
    p->label_column = -1;
    p->csv_header = 1;
    return csv;
}

/* RunSteps of b's program on b's dataset. */
static Rtrain__V1__RunStepsRequest steps_request(const bg_call *b, uint64_t steps)
{
    Rtrain__V1__RunStepsRequest q = RTRAIN__V1__RUN_STEPS_REQUEST__INIT;
    q.session_id = (char *)b->sid;
    q.program_id = (char *)b->pid;
    q.dataset_id = (char *)b->did;
    q.steps = steps;
    return q;
}

/* A session, the iris data and a compiled program on a fresh daemon. */
static int prepare(itest_conn *c, bg_call *b)
{
    size_t len;
    Rtrain__V1__DataPart p;
    uint8_t *csv = iris_csv(&len, &p);
    if (!csv || itest_session(c, "life", b->sid) != 0) {
        free(csv);
        return -1;
    }
    Rtrain__V1__DataPart *pp[1] = {&p};
    itest_res r;
    int st = itest_upload(c, b->sid, pp, 1, csv, len, 1 << 16, b->did, &r);
    itest_res_free(&r);
    free(csv);
    if (st)
        return -1;
    Rtrain__V1__CompileRequest q = RTRAIN__V1__COMPILE_REQUEST__INIT;
    Rtrain__V1__TrainConfig cfg = RTRAIN__V1__TRAIN_CONFIG__INIT;
    cfg.batch_size = 1; /* many small steps: a long call */
    q.session_id = b->sid;
    q.model_case = RTRAIN__V1__COMPILE_REQUEST__MODEL_GRAPH;
    q.graph = small_graph();
    q.config = &cfg;
    Rtrain__V1__CompileResponse *cr = NULL;
    itest_unary(c, "Compile", &q.base, &rtrain__v1__compile_response__descriptor,
                (ProtobufCMessage **)&cr, &r);
    itest_res_free(&r);
    if (!cr)
        return -1;
    snprintf(b->pid, sizeof b->pid, "%s", cr->program_id);
    protobuf_c_message_free_unpacked(&cr->base, NULL);
    return 0;
}

static int count_events(void *ud, const uint8_t *d, size_t n)
{
    bg_call *b = ud;
    __atomic_store_n(&b->started, 1, __ATOMIC_RELEASE);
    Rtrain__V1__FitEvent *e = rtrain__v1__fit_event__unpack(NULL, n, d);
    if (e && e->event_case == RTRAIN__V1__FIT_EVENT__EVENT_PROGRESS)
        b->global_step = e->progress->step;
    if (e)
        rtrain__v1__fit_event__free_unpacked(e, NULL);
    return 0;
}

static void *bg_main(void *arg)
{
    bg_call *b = arg;
    itest_conn *c = itest_connect(b->addr);
    itest_res r;
    if (b->fit) {
        Rtrain__V1__FitRequest q = RTRAIN__V1__FIT_REQUEST__INIT;
        q.session_id = b->sid;
        q.program_id = b->pid;
        q.dataset_id = b->did;
        q.epochs = 1000000;
        q.progress_every = 50;
        itest_server_stream(c, "Fit", &q.base, count_events, b, &r);
    } else {
        Rtrain__V1__RunStepsRequest q = steps_request(b, b->steps);
        Rtrain__V1__RunStepsResponse *p = NULL;
        itest_unary(c, "RunSteps", &q.base, &rtrain__v1__run_steps_response__descriptor,
                    (ProtobufCMessage **)&p, &r);
        if (p) {
            b->global_step = p->global_step;
            protobuf_c_message_free_unpacked(&p->base, NULL);
        }
    }
    b->status = r.status;
    __atomic_store_n(&b->started, 1, __ATOMIC_RELEASE); /* also when the call failed before any event */
    snprintf(b->details, sizeof b->details, "%s", r.details);
    itest_res_free(&r);
    itest_disconnect(c);
    return NULL;
}

static int start(itest_daemon *d, const char *rtraind, const char *const *extra)
{
    if (itest_daemon_start(d, rtraind, extra) < 0) {
        CHECK(0, "daemon start");
        return -1;
    }
    return 0;
}

/* A daemon prepared for b (prepare): the connection, or NULL after a
 * failed check (the daemon is gone then). */
static itest_conn *start_prepared(itest_daemon *d, const char *rtraind,
                                  const char *const *extra, bg_call *b)
{
    if (start(d, rtraind, extra) < 0)
        return NULL;
    itest_conn *c = itest_connect(d->addr);
    memset(b, 0, sizeof *b);
    b->addr = d->addr;
    if (prepare(c, b) < 0) {
        CHECK(0, "prepare");
        itest_disconnect(c);
        itest_daemon_stop(d, SIGKILL);
        return NULL;
    }
    return c;
}

static void test_sigterm_inflight(const char *rtraind)
{
    itest_daemon d;
    /* The daemon stops itself at step 1000 of the call (--pause-at-step)
     * and gets SIGTERM there: it lands while the call runs, however fast
     * or slow the machine (a call sized by a timing run could end before
     * the signal, or exceed the per-call step limit). */
    const char *extra[] = {"--grace-ms", "30000", "--pause-at-step", "1000", NULL};
    bg_call b;
    itest_conn *c = start_prepared(&d, rtraind, extra, &b);
    if (!c)
        return;
    itest_disconnect(c);
    b.steps = 200000;
    pthread_t th;
    pthread_create(&th, NULL, bg_main, &b);
    CHECK(itest_daemon_wait_paused(&d, &b.started) == 0,
          "the daemon paused inside the RunSteps call (%d '%s')", b.status, b.details);
    /* SIGCONT first: a signal sent to a stopped process goes to whichever
     * thread runs first, maybe one blocked where a sanitizer defers its
     * handler (under TSan the daemon then never stopped) */
    kill(d.pid, SIGCONT);
    kill(d.pid, SIGTERM);
    pthread_join(th, NULL);
    CHECK(b.status == 0, "the in-flight call completes: %d '%s'", b.status, b.details);
    CHECK(b.global_step == b.steps, "all of its steps ran (%llu)",
          (unsigned long long)b.global_step);
    int code = itest_daemon_stop(&d, 0);
    CHECK(code == 0, "exit code after SIGTERM: %d", code);
}

static void test_grace_expiry(const char *rtraind)
{
    itest_daemon d;
    const char *extra[] = {"--grace-ms", "300", NULL};
    bg_call b;
    itest_conn *c = start_prepared(&d, rtraind, extra, &b);
    if (!c)
        return;
    itest_disconnect(c);
    b.fit = 1;
    pthread_t th;
    pthread_create(&th, NULL, bg_main, &b);
    while (!__atomic_load_n(&b.started, __ATOMIC_ACQUIRE))
        usleep(1000);
    uint64_t t0 = itest_now_ns();
    kill(d.pid, SIGTERM);
    pthread_join(th, NULL);
    double s = (double)(itest_now_ns() - t0) / 1e9;
    CHECK(b.status != 0, "a Fit running past the grace period is cancelled (status %d)", b.status);
    CHECK(s < 20, "cancelled %.1f s after SIGTERM", s);
    int code = itest_daemon_stop(&d, 0);
    CHECK(code == 0, "exit code after a cancelled drain: %d", code);
}

/* A client whose deadline passes during a long RunSteps: the daemon stops
 * the work at a step boundary instead of running it to the end. */
static void test_deadline_stops_work(const char *rtraind)
{
    itest_daemon d;
    bg_call b;
    itest_conn *c = start_prepared(&d, rtraind, NULL, &b);
    if (!c)
        return;
    /* 10 M steps: far longer than the deadline */
    Rtrain__V1__RunStepsRequest q = steps_request(&b, 10000000);
    itest_res r;
    itest_deadline_ms = 300;
    itest_unary(c, "RunSteps", &q.base, NULL, NULL, &r);
    itest_deadline_ms = 120000;
    CHECK(r.status == 4, "deadline exceeded: %d '%s'", r.status, r.details);
    itest_res_free(&r);
    q.steps = 1;
    Rtrain__V1__RunStepsResponse *p = NULL;
    itest_unary(c, "RunSteps", &q.base, &rtrain__v1__run_steps_response__descriptor,
                (ProtobufCMessage **)&p, &r);
    CHECK(p && p->global_step < 10000000, "the abandoned call stopped early (global step %llu)",
          p ? (unsigned long long)p->global_step : 0ull);
    if (p)
        protobuf_c_message_free_unpacked(&p->base, NULL);
    itest_res_free(&r);
    itest_disconnect(c);
    CHECK(itest_daemon_stop(&d, SIGTERM) == 0, "exit code");
}

/* Several clients at once: training in their own sessions (inline and
 * executor paths interleave on the device), an upload stream and pings.
 * Every program ends with exactly its own steps applied. */
typedef struct worker {
    const char *addr;
    int id, errors;
    uint64_t final_step;
} worker;

static void *train_worker(void *arg)
{
    worker *w = arg;
    itest_conn *c = itest_connect(w->addr);
    bg_call b;
    memset(&b, 0, sizeof b);
    if (prepare(c, &b) < 0) {
        w->errors++;
        itest_disconnect(c);
        return NULL;
    }
    for (uint64_t seq = 1; seq <= 60; seq++) {
        /* Alternate tiny (inline) and larger (executor) calls. */
        Rtrain__V1__RunStepsRequest q = steps_request(&b, seq % 3 == 0 ? 400 : 2);
        q.seq = seq;
        Rtrain__V1__RunStepsResponse *p = NULL;
        itest_res r;
        itest_unary(c, "RunSteps", &q.base, &rtrain__v1__run_steps_response__descriptor,
                    (ProtobufCMessage **)&p, &r);
        if (!p)
            w->errors++;
        else {
            w->final_step = p->global_step;
            protobuf_c_message_free_unpacked(&p->base, NULL);
        }
        itest_res_free(&r);
        if (seq == 30) { /* a replay in the middle changes nothing */
            itest_unary(c, "RunSteps", &q.base, &rtrain__v1__run_steps_response__descriptor,
                        (ProtobufCMessage **)&p, &r);
            if (!p || !p->replayed)
                w->errors++;
            if (p)
                protobuf_c_message_free_unpacked(&p->base, NULL);
            itest_res_free(&r);
        }
    }
    itest_disconnect(c);
    return NULL;
}

static void *upload_worker(void *arg)
{
    worker *w = arg;
    itest_conn *c = itest_connect(w->addr);
    char sid[40];
    if (itest_session(c, "up", sid) != 0) {
        w->errors++;
        itest_disconnect(c);
        return NULL;
    }
    size_t n = 4u << 20;
    uint8_t *b = malloc(n);
    for (int round = 0; round < 4; round++) {
        for (size_t i = 0; i < n; i++)
            b[i] = (uint8_t)(i * 7 + (size_t)round);
        Rtrain__V1__DataPart p = RTRAIN__V1__DATA_PART__INIT;
        p.role = RTRAIN__V1__DATA_ROLE__ROLE_FEATURES;
        p.format = RTRAIN__V1__DATA_FORMAT__FORMAT_RAW;
        p.length = n;
        p.dtype = RTRAIN__V1__DTYPE__U8;
        int64_t shape[2] = {(int64_t)n / 16, 16};
        p.shape = shape;
        p.n_shape = 2;
        Rtrain__V1__DataPart *pp[1] = {&p};
        itest_res r;
        if (itest_upload(c, sid, pp, 1, b, n, 256u << 10, NULL, &r) != 0)
            w->errors++;
        itest_res_free(&r);
    }
    free(b);
    for (int i = 0; i < 200; i++) {
        Rtrain__V1__PingRequest q = RTRAIN__V1__PING_REQUEST__INIT;
        itest_res r;
        if (itest_unary(c, "Ping", &q.base, NULL, NULL, &r) != 0)
            w->errors++;
        itest_res_free(&r);
    }
    itest_disconnect(c);
    return NULL;
}

static void test_concurrent_clients(const char *rtraind)
{
    itest_daemon d;
    if (start(&d, rtraind, NULL) < 0)
        return;
    enum { NT = 3 };
    worker w[NT + 1];
    pthread_t th[NT + 1];
    for (int i = 0; i <= NT; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].addr = d.addr;
        w[i].id = i;
        pthread_create(&th[i], NULL, i < NT ? train_worker : upload_worker, &w[i]);
    }
    for (int i = 0; i <= NT; i++)
        pthread_join(th[i], NULL);
    /* 20 calls of 400 steps and 40 of 2, each applied once. */
    for (int i = 0; i < NT; i++)
        CHECK(w[i].errors == 0 && w[i].final_step == 20 * 400 + 40 * 2,
              "worker %d: %d errors, final step %llu", i, w[i].errors,
              (unsigned long long)w[i].final_step);
    CHECK(w[NT].errors == 0, "upload/ping worker: %d errors", w[NT].errors);
    CHECK(itest_daemon_stop(&d, SIGTERM) == 0, "exit code");
}

/* Two clients train one program at once while a third looks the dataset
 * up: the handlers of one read the program's step-time estimate on a cq
 * thread while the other's work, holding the device, updates it, and
 * FindDataset reads the dataset's byte count while the first step adds the
 * converted labels to it. Every step of both is applied exactly once. The
 * tsan configuration checks the step-time estimate here (with it read and
 * written plainly it reports rt_program.c rt_program_step_ns); the byte
 * count's race window is one label conversion, which a run may not hit. */
typedef struct shared_worker {
    const char *addr;
    const bg_call *b;
    int errors;
    uint64_t max_step;
} shared_worker;

static void *shared_worker_main(void *arg)
{
    shared_worker *w = arg;
    itest_conn *c = itest_connect(w->addr);
    for (int i = 1; i <= 30; i++) {
        /* executor and inline calls */
        Rtrain__V1__RunStepsRequest q = steps_request(w->b, i % 4 == 0 ? 300 : 3);
        Rtrain__V1__RunStepsResponse *p = NULL;
        itest_res r;
        itest_unary(c, "RunSteps", &q.base, &rtrain__v1__run_steps_response__descriptor,
                    (ProtobufCMessage **)&p, &r);
        if (!p) {
            w->errors++;
        } else {
            if (p->global_step > w->max_step)
                w->max_step = p->global_step;
            protobuf_c_message_free_unpacked(&p->base, NULL);
        }
        itest_res_free(&r);
    }
    itest_disconnect(c);
    return NULL;
}

/* 150 x 4 f32 features and 150 f32 labels; with the i32 copy a sparse
 * loss makes, 150 x 4 more. */
#define IRIS_BYTES (150 * 4 * 4 + 150 * 4)
#define IRIS_BYTES_CONVERTED (IRIS_BYTES + 150 * 4)

/* FindDataset for the iris CSV as prepare() uploaded it; 0 and its bytes
 * if found. */
static int find_iris(itest_conn *c, const bg_call *b, uint64_t *bytes)
{
    size_t len;
    Rtrain__V1__DataPart p;
    uint8_t *csv = iris_csv(&len, &p);
    if (!csv)
        return -1;
    XXH128_canonical_t h;
    XXH128_canonicalFromHash(&h, XXH3_128bits(csv, len));
    free(csv);
    Rtrain__V1__DataPart *pp[1] = {&p};
    Rtrain__V1__DatasetHeader hd = RTRAIN__V1__DATASET_HEADER__INIT;
    hd.session_id = (char *)b->sid;
    hd.parts = pp;
    hd.n_parts = 1;
    hd.total_bytes = len;
    Rtrain__V1__FindDatasetRequest fq = RTRAIN__V1__FIND_DATASET_REQUEST__INIT;
    fq.session_id = (char *)b->sid;
    fq.content_hash.data = h.digest;
    fq.content_hash.len = 16;
    fq.header = &hd;
    Rtrain__V1__FindDatasetResponse *f = NULL;
    itest_res r;
    itest_unary(c, "FindDataset", &fq.base, &rtrain__v1__find_dataset_response__descriptor,
                (ProtobufCMessage **)&f, &r);
    int rc = f && f->found && f->dataset ? 0 : -1;
    if (!rc)
        *bytes = f->dataset->bytes;
    if (f)
        protobuf_c_message_free_unpacked(&f->base, NULL);
    itest_res_free(&r);
    return rc;
}

/* FindDataset in a loop while others train on the dataset: the daemon
 * reads its byte count on a cq thread while a program's first step adds
 * the converted labels to it on another. */
typedef struct finder {
    const char *addr;
    const bg_call *b;
    int stop; /* atomic */
    int calls, errors;
} finder;

static void *finder_main(void *arg)
{
    finder *f = arg;
    itest_conn *c = itest_connect(f->addr);
    while (!__atomic_load_n(&f->stop, __ATOMIC_ACQUIRE)) {
        uint64_t bytes = 0;
        f->calls++;
        if (find_iris(c, f->b, &bytes) < 0 ||
            (bytes != IRIS_BYTES && bytes != IRIS_BYTES_CONVERTED))
            f->errors++;
    }
    itest_disconnect(c);
    return NULL;
}

static void test_shared_program(const char *rtraind)
{
    itest_daemon d;
    bg_call b;
    itest_conn *c = start_prepared(&d, rtraind, NULL, &b);
    if (!c)
        return;
    itest_disconnect(c);
    shared_worker w[2];
    pthread_t th[2], fth;
    finder f = {.addr = d.addr, .b = &b};
    pthread_create(&fth, NULL, finder_main, &f);
    for (int i = 0; i < 2; i++) {
        w[i] = (shared_worker){.addr = d.addr, .b = &b};
        pthread_create(&th[i], NULL, shared_worker_main, &w[i]);
    }
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    __atomic_store_n(&f.stop, 1, __ATOMIC_RELEASE);
    pthread_join(fth, NULL);
    /* Each worker: 7 calls of 300 steps and 23 of 3. */
    uint64_t want = 2 * (7 * 300 + 23 * 3);
    uint64_t got = w[0].max_step > w[1].max_step ? w[0].max_step : w[1].max_step;
    CHECK(w[0].errors == 0 && w[1].errors == 0, "errors %d %d", w[0].errors, w[1].errors);
    CHECK(got == want, "global step %llu, want %llu", (unsigned long long)got,
          (unsigned long long)want);
    /* The program converted the CSV's f32 labels to i32 on the device
     * thread; FindDataset reports the bytes with the converted copy. */
    c = itest_connect(d.addr);
    uint64_t bytes = 0;
    CHECK(find_iris(c, &b, &bytes) == 0 && bytes == IRIS_BYTES_CONVERTED,
          "dataset bytes with converted labels: %llu", (unsigned long long)bytes);
    itest_disconnect(c);
    CHECK(f.errors == 0 && f.calls > 0, "FindDataset during training: %d errors in %d calls",
          f.errors, f.calls);
    CHECK(itest_daemon_stop(&d, SIGTERM) == 0, "exit code");
}

/* --session-idle-s: an unused session is closed, a used one stays. */
static void test_session_idle(const char *rtraind)
{
    itest_daemon d;
    const char *extra[] = {"--session-idle-s", "2", NULL};
    if (start(&d, rtraind, extra) < 0)
        return;
    itest_conn *c = itest_connect(d.addr);
    char idle[40], busy[40];
    CHECK(itest_session(c, "idle", idle) == 0 && itest_session(c, "busy", busy) == 0, "sessions");
    /* Touch the busy session for 4 s (any call that names it counts). */
    for (int i = 0; i < 20; i++) {
        Rtrain__V1__GetWeightsRequest q = RTRAIN__V1__GET_WEIGHTS_REQUEST__INIT;
        q.session_id = busy;
        q.program_id = "p-none";
        itest_res r;
        itest_unary(c, "GetWeights", &q.base, NULL, NULL, &r);
        CHECK(r.status == 5 && strstr(r.details, "p-none"), "busy session is alive: %d '%s'",
              r.status, r.details);
        itest_res_free(&r);
        usleep(200000);
    }
    Rtrain__V1__CloseSessionRequest q = RTRAIN__V1__CLOSE_SESSION_REQUEST__INIT;
    itest_res r;
    q.session_id = idle;
    itest_unary(c, "CloseSession", &q.base, NULL, NULL, &r);
    CHECK(r.status == 5, "the idle session was closed by the daemon: %d", r.status);
    itest_res_free(&r);
    q.session_id = busy;
    itest_unary(c, "CloseSession", &q.base, NULL, NULL, &r);
    CHECK(r.status == 0, "the busy session stayed open: %d '%s'", r.status, r.details);
    itest_res_free(&r);
    itest_disconnect(c);
    CHECK(itest_daemon_stop(&d, SIGTERM) == 0, "exit code");
}

static void test_port_in_use(const char *rtraind)
{
    itest_daemon d;
    if (start(&d, rtraind, NULL) < 0)
        return;
    char listen[64], err[4096];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", d.port);
    const char *args[] = {rtraind, "--listen", listen, NULL};
    int code = itest_run_capture(rtraind, args, err, sizeof err);
    char want[96];
    snprintf(want, sizeof want, "address %s already in use", listen);
    CHECK(code == 1, "second daemon exit code %d", code);
    CHECK(strstr(err, want) != NULL, "second daemon says '%s'; got '%s'", want, err);
    /* The first daemon is unaffected. */
    itest_conn *c = itest_connect(d.addr);
    Rtrain__V1__PingRequest q = RTRAIN__V1__PING_REQUEST__INIT;
    itest_res r;
    itest_unary(c, "Ping", &q.base, NULL, NULL, &r);
    CHECK(r.status == 0, "first daemon still serves");
    itest_res_free(&r);
    itest_disconnect(c);
    CHECK(itest_daemon_stop(&d, SIGINT) == 0, "SIGINT exit code");
}

static void test_flags(const char *rtraind)
{
    char out[4096];
    const char *v[] = {rtraind, "--version", NULL};
    CHECK(itest_run_capture(rtraind, v, out, sizeof out) == 0, "--version");
    const char *h[] = {rtraind, "--help", NULL};
    CHECK(itest_run_capture(rtraind, h, out, sizeof out) == 0, "--help");
    const char *bad[] = {rtraind, "--threads", "zero", NULL};
    CHECK(itest_run_capture(rtraind, bad, out, sizeof out) == 2 && strstr(out, "threads"),
          "bad --threads: '%s'", out);
    const char *unk[] = {rtraind, "--frobnicate", NULL};
    CHECK(itest_run_capture(rtraind, unk, out, sizeof out) == 2, "unknown flag");
    const char *lvl[] = {rtraind, "--log-level", "chatty", NULL};
    CHECK(itest_run_capture(rtraind, lvl, out, sizeof out) == 2, "bad --log-level");
    const char *addr[] = {rtraind, "--listen", "localhost:nope", NULL};
    CHECK(itest_run_capture(rtraind, addr, out, sizeof out) == 1 && strstr(out, "cannot listen"),
          "bad address: '%s'", out);
    const char *big_port[] = {rtraind, "--listen", "127.0.0.1:99999", NULL};
    CHECK(itest_run_capture(rtraind, big_port, out, sizeof out) == 2 && strstr(out, "0..65535"),
          "port out of range: '%s'", out);
    /* Not loopback and no tokens: refused before anything is bound. */
    const char *open_addr[] = {rtraind, "--listen", "256.1.1.1:80", NULL};
    CHECK(itest_run_capture(rtraind, open_addr, out, sizeof out) == 2 && strstr(out, "loopback"),
          "non-loopback address without tokens: '%s'", out);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s RTRAIND\n", argv[0]);
        return 2;
    }
    RUN(test_sigterm_inflight, argv[1]);
    RUN(test_grace_expiry, argv[1]);
    RUN(test_deadline_stops_work, argv[1]);
    RUN(test_concurrent_clients, argv[1]);
    RUN(test_shared_program, argv[1]);
    RUN(test_session_idle, argv[1]);
    RUN(test_port_in_use, argv[1]);
    RUN(test_flags, argv[1]);
    return itest_summary();
}
