/* test_train.c - training through a real rtraind: Compile (native Graph and
 * Keras JSON), the program cache, RunSteps (seq replay, epochs, validation),
 * pipelined RunSteps (after_seq: run in order whatever order they arrive
 * in, none after a failed one, held at most --pipeline-hold-ms),
 * Fit (progress, epoch ends, cancellation), Evaluate, Predict, Get/
 * SetWeights round trips, timing invariants, and the bad-input list that
 * needs a model. Another session's weights must not change through any of
 * it. Latency figures (Ping vs RunSteps K=1, inline vs executor) are
 * printed, not asserted. */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "itest.h"

#define FREE(m) do { if (m) protobuf_c_message_free_unpacked(&(m)->base, NULL); (m) = NULL; } while (0)

static int ping_ok(itest_conn *c)
{
    Rtrain__V1__PingRequest q = RTRAIN__V1__PING_REQUEST__INIT;
    itest_res r;
    int st = itest_unary(c, "Ping", &q.base, NULL, NULL, &r);
    itest_res_free(&r);
    return st == 0;
}

static void check_timings(const Rtrain__V1__Timings *t, uint64_t rtt, const char *what)
{
    CHECK(t != NULL, "%s: no timings", what);
    if (!t)
        return;
    uint64_t sum = t->queue_ns + t->decode_ns + t->compile_ns + t->execute_ns + t->encode_ns +
                   t->other_ns;
    CHECK(sum == t->total_ns, "%s: parts %llu != total %llu", what, (unsigned long long)sum,
          (unsigned long long)t->total_ns);
    CHECK(t->total_ns <= rtt, "%s: server total %llu > client round trip %llu", what,
          (unsigned long long)t->total_ns, (unsigned long long)rtt);
}

/* ------------------------------------------------------------ the model */
static Rtrain__V1__TrainConfig *iris_config(void)
{
    static Rtrain__V1__TrainConfig c;
    itest_iris_config(&c);
    return &c;
}

static Rtrain__V1__CompileResponse *compile(itest_conn *c, const char *sid, Rtrain__V1__Graph *g,
                                            const char *keras, itest_res *r)
{
    Rtrain__V1__CompileRequest q = RTRAIN__V1__COMPILE_REQUEST__INIT;
    q.session_id = (char *)sid;
    if (g) {
        q.model_case = RTRAIN__V1__COMPILE_REQUEST__MODEL_GRAPH;
        q.graph = g;
    } else {
        q.model_case = RTRAIN__V1__COMPILE_REQUEST__MODEL_KERAS_JSON;
        q.keras_json = (char *)keras;
    }
    q.config = iris_config();
    Rtrain__V1__CompileResponse *p = NULL;
    itest_unary(c, "Compile", &q.base, &rtrain__v1__compile_response__descriptor,
                (ProtobufCMessage **)&p, r);
    return p;
}

static char *read_data(const char *name, size_t *len)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", itest_data_dir(), name);
    return (char *)itest_read_file(path, len);
}

static int upload_csv(itest_conn *c, const char *sid, const char *csv, size_t len, int header,
                      char *id)
{
    Rtrain__V1__DataPart p = RTRAIN__V1__DATA_PART__INIT;
    p.role = RTRAIN__V1__DATA_ROLE__ROLE_BOTH;
    p.format = RTRAIN__V1__DATA_FORMAT__FORMAT_CSV;
    p.length = len;
    p.label_column = -1;
    p.csv_header = header;
    Rtrain__V1__DataPart *pp[1] = {&p};
    itest_res r;
    int st = itest_upload(c, sid, pp, 1, (const uint8_t *)csv, len, 1 << 16, id, &r);
    if (st)
        fprintf(stderr, "upload: %d %s\n", st, r.details);
    itest_res_free(&r);
    return st;
}

static Rtrain__V1__RunStepsResponse *run_steps(itest_conn *c, const char *sid, const char *pid,
                                               const char *did, uint64_t steps, uint64_t seq,
                                               const char *val, int losses, itest_res *r)
{
    Rtrain__V1__RunStepsRequest q = RTRAIN__V1__RUN_STEPS_REQUEST__INIT;
    q.session_id = (char *)sid;
    q.program_id = (char *)pid;
    q.dataset_id = (char *)did;
    q.steps = steps;
    q.seq = seq;
    q.return_losses = losses;
    if (val)
        q.val_dataset_id = (char *)val;
    Rtrain__V1__RunStepsResponse *p = NULL;
    itest_unary(c, "RunSteps", &q.base, &rtrain__v1__run_steps_response__descriptor,
                (ProtobufCMessage **)&p, r);
    return p;
}

static Rtrain__V1__Metrics evaluate(itest_conn *c, const char *sid, const char *pid, const char *did)
{
    Rtrain__V1__EvaluateRequest q = RTRAIN__V1__EVALUATE_REQUEST__INIT;
    q.session_id = (char *)sid;
    q.program_id = (char *)pid;
    q.dataset_id = (char *)did;
    Rtrain__V1__EvaluateResponse *p = NULL;
    itest_res r;
    itest_unary(c, "Evaluate", &q.base, &rtrain__v1__evaluate_response__descriptor,
                (ProtobufCMessage **)&p, &r);
    Rtrain__V1__Metrics m = RTRAIN__V1__METRICS__INIT;
    m.loss = NAN;
    CHECK(p && p->metrics, "evaluate: %d %s", r.status, r.details);
    if (p && p->metrics) {
        m.loss = p->metrics->loss;
        m.accuracy = p->metrics->accuracy;
        m.samples = p->metrics->samples;
        check_timings(p->timings, r.rtt_ns, "Evaluate");
    }
    FREE(p);
    itest_res_free(&r);
    return m;
}


static uint8_t *weights_blob(itest_conn *c, const char *sid, const char *pid, size_t *len,
                             Rtrain__V1__GetWeightsResponse **keep)
{
    itest_res r;
    uint8_t *b = itest_weights_blob(c, sid, pid, len, keep, &r);
    CHECK(b != NULL, "GetWeights: %d %s", r.status, r.details);
    return b;
}

/* ------------------------------------------------------------- state */
static struct {
    itest_conn *c;
    char sa[40], sb[40];      /* session A (tests) and B (bystander) */
    char iris[40], val[40];   /* datasets */
    char pa[40], pb[40];      /* programs */
    uint8_t *b_weights;
    size_t b_len;
} T;

static void bystander_unchanged(const char *after)
{
    size_t n;
    uint8_t *w = weights_blob(T.c, T.sb, T.pb, &n, NULL);
    CHECK(w && n == T.b_len && memcmp(w, T.b_weights, n) == 0,
          "session B's weights changed after %s", after);
    free(w);
    CHECK(ping_ok(T.c), "ping after %s", after);
}

static void setup(void)
{
    size_t len;
    char *csv = read_data("iris.csv", &len);
    CHECK(csv != NULL, "iris.csv");
    CHECK(itest_session(T.c, "A", T.sa) == 0 && itest_session(T.c, "B", T.sb) == 0, "sessions");
    CHECK(upload_csv(T.c, T.sa, csv, len, 1, T.iris) == 0, "iris upload");
    /* Validation: every 5th row. */
    char *val = malloc(len), *line = csv, *o = val;
    int row = 0;
    while (line && *line) {
        char *nl = strchr(line, '\n');
        size_t ll = nl ? (size_t)(nl - line + 1) : strlen(line);
        if (row > 0 && row % 5 == 0) {
            memcpy(o, line, ll);
            o += ll;
        }
        row++;
        line = nl ? nl + 1 : NULL;
    }
    CHECK(upload_csv(T.c, T.sa, val, (size_t)(o - val), 0, T.val) == 0, "val upload");
    free(val);
    free(csv);
    itest_res r;
    Rtrain__V1__CompileResponse *p = compile(T.c, T.sb, itest_iris_graph(32), NULL, &r);
    CHECK(p != NULL, "compile B: %d %s", r.status, r.details);
    if (p)
        snprintf(T.pb, sizeof T.pb, "%s", p->program_id);
    FREE(p);
    itest_res_free(&r);
    Rtrain__V1__RunStepsResponse *rs = run_steps(T.c, T.sb, T.pb, T.iris, 7, 0, NULL, 0, &r);
    CHECK(rs != NULL, "B steps: %d %s", r.status, r.details);
    FREE(rs);
    itest_res_free(&r);
    T.b_weights = weights_blob(T.c, T.sb, T.pb, &T.b_len, NULL);
}

static void test_compile_graph_and_cache(void)
{
    itest_res r1, r2;
    Rtrain__V1__CompileResponse *a = compile(T.c, T.sa, itest_iris_graph(32), NULL, &r1);
    Rtrain__V1__CompileResponse *b = compile(T.c, T.sa, itest_iris_graph(32), NULL, &r2);
    CHECK(a && b, "compile: %d %s / %d %s", r1.status, r1.details, r2.status, r2.details);
    if (a && b) {
        snprintf(T.pa, sizeof T.pa, "%s", a->program_id);
        Rtrain__V1__CompileReport *ra = a->report, *rb = b->report;
        CHECK(ra->param_count == 4 * 32 + 32 + 32 * 3 + 3, "param_count %llu",
              (unsigned long long)ra->param_count);
        CHECK(ra->trainable_param_count == ra->param_count, "trainable");
        CHECK(ra->n_params == 4 && !strcmp(ra->params[0]->name, "d1/kernel"), "param infos");
        CHECK(ra->n_input_shape == 1 && ra->input_shape[0] == 4, "input shape");
        CHECK(ra->n_output_shape == 1 && ra->output_shape[0] == 3, "output shape");
        CHECK(ra->flops_per_step > 0 && ra->compile_ns > 0, "report figures");
        /* The compile's named passes, in order, each timed, within the whole. */
        static const char *const passes[] = {"validate", "infer_shapes", "fuse", "backward",
                                             "choose_kernels", "plan_memory", "report"};
        uint64_t pass_sum = 0;
        CHECK(ra->n_passes == 7, "compile report lists 7 passes, got %zu", ra->n_passes);
        for (size_t i = 0; i < ra->n_passes && i < 7; i++) {
            CHECK(strcmp(ra->passes[i]->name, passes[i]) == 0, "pass %zu is %s", i,
                  ra->passes[i]->name);
            pass_sum += ra->passes[i]->ns;
        }
        CHECK(pass_sum > 0 && pass_sum <= ra->compile_ns, "passes %llu ns within compile %llu ns",
              (unsigned long long)pass_sum, (unsigned long long)ra->compile_ns);
        /* B's program compiled the same graph first: A's is already a hit. */
        CHECK(rb->cache_hit && b->timings->cache_hit, "second compile is a cache hit");
        CHECK(rb->compile_ns == ra->compile_ns, "the report keeps the original compile time");
        CHECK(strcmp(a->program_id, b->program_id) != 0, "each compile gets its own program");
        check_timings(a->timings, r1.rtt_ns, "Compile");
        check_timings(b->timings, r2.rtt_ns, "Compile hit");
        printf("compile: hit lookup %.1f us (report: original compile %.1f us)\n",
               b->timings->compile_ns / 1e3, rb->compile_ns / 1e3);
    }
    /* A different hidden size is a different program: a miss. */
    itest_res r3;
    Rtrain__V1__CompileResponse *m = compile(T.c, T.sa, itest_iris_graph(16), NULL, &r3);
    CHECK(m && !m->report->cache_hit && !m->timings->cache_hit && m->timings->compile_ns > 0,
          "another graph misses");
    FREE(a);
    FREE(b);
    FREE(m);
    itest_res_free(&r1);
    itest_res_free(&r2);
    itest_res_free(&r3);
}

static void test_run_steps(void)
{
    Rtrain__V1__Metrics m0 = evaluate(T.c, T.sa, T.pa, T.iris);
    itest_res r;
    uint64_t step = 0;
    for (uint64_t seq = 1; seq <= 5; seq++) {
        Rtrain__V1__RunStepsResponse *p = run_steps(T.c, T.sa, T.pa, T.iris, 1, seq, NULL, 0, &r);
        CHECK(p && p->global_step == seq && !p->replayed, "K=1 call %llu: %d %s",
              (unsigned long long)seq, r.status, r.details);
        if (p) {
            step = p->global_step;
            check_timings(p->timings, r.rtt_ns, "RunSteps");
        }
        FREE(p);
        itest_res_free(&r);
    }
    /* A replayed seq is not applied twice. */
    Rtrain__V1__RunStepsResponse *p = run_steps(T.c, T.sa, T.pa, T.iris, 1, 3, NULL, 0, &r);
    CHECK(p && p->replayed && p->global_step == step, "replay of seq 3: replayed=%d step=%llu",
          p ? p->replayed : -1, p ? (unsigned long long)p->global_step : 0ull);
    FREE(p);
    itest_res_free(&r);
    /* Many steps in one call, per-step losses, epochs with validation. */
    p = run_steps(T.c, T.sa, T.pa, T.iris, 200, 6, T.val, 1, &r);
    CHECK(p != NULL, "200 steps: %d %s", r.status, r.details);
    if (p) {
        CHECK(p->global_step == step + 200, "global step %llu", (unsigned long long)p->global_step);
        CHECK(p->n_losses == 200, "losses %zu", p->n_losses);
        double first = 0, last = 0;
        for (int i = 0; i < 20; i++) {
            first += p->losses[i];
            last += p->losses[180 + i];
        }
        CHECK(last < first, "loss falls within the call (%.3f -> %.3f)", first / 20, last / 20);
        /* 150 samples / batch 16 = 10 steps per epoch. */
        CHECK(p->n_epochs >= 19 && p->n_epochs <= 21, "epochs in the call: %zu", p->n_epochs);
        int have_val = p->n_epochs > 0;
        int have_exec = p->n_epochs > 0;
        for (size_t i = 0; i < p->n_epochs; i++) {
            have_val &= p->epochs[i]->val != NULL && p->epochs[i]->val->samples == 30;
            have_exec &= p->epochs[i]->execute_ns > 0;
        }
        CHECK(have_val, "each epoch end carries validation metrics");
        CHECK(have_exec, "each epoch end carries the daemon's execute time");
        CHECK(p->mean && p->mean->samples > 0 && p->last, "mean/last metrics");
        check_timings(p->timings, r.rtt_ns, "RunSteps x200");
    }
    FREE(p);
    itest_res_free(&r);
    Rtrain__V1__Metrics m1 = evaluate(T.c, T.sa, T.pa, T.iris);
    CHECK(m1.loss < m0.loss * 0.7, "evaluate loss falls: %.4f -> %.4f", m0.loss, m1.loss);
    CHECK(m1.accuracy > m0.accuracy && m1.accuracy >= 0.8, "accuracy rises: %.3f -> %.3f",
          m0.accuracy, m1.accuracy);
    CHECK(m1.samples == 150, "evaluate samples");
    printf("iris native graph: loss %.3f -> %.3f, accuracy %.2f -> %.2f\n", m0.loss, m1.loss,
           m0.accuracy, m1.accuracy);
    bystander_unchanged("training in session A");
}

/* ------------------------------------------------- pipelined RunSteps */
typedef struct pipe_call {
    itest_conn *c;
    const char *pid;
    uint64_t steps, seq, after;
    Rtrain__V1__RunStepsResponse *p;
    itest_res r;
} pipe_call;

static void *pipe_call_main(void *a)
{
    pipe_call *k = a;
    Rtrain__V1__RunStepsRequest q = RTRAIN__V1__RUN_STEPS_REQUEST__INIT;
    q.session_id = T.sa;
    q.program_id = (char *)k->pid;
    q.dataset_id = T.iris;
    q.steps = k->steps;
    q.seq = k->seq;
    q.after_seq = k->after;
    itest_unary(k->c, "RunSteps", &q.base, &rtrain__v1__run_steps_response__descriptor,
                (ProtobufCMessage **)&k->p, &k->r);
    return NULL;
}

/* The successor first, on its own connection, and once the daemon holds
 * it (its calls_held gauge counts one more) the predecessor from here:
 * without after_seq the daemon would run the successor first and answer
 * the predecessor "replayed". */
static void pipe_pair(const itest_daemon *d, pipe_call *late, pipe_call *first)
{
    double held0 = itest_metric(d, "rtrain_calls_held");
    CHECK(held0 >= 0, "rtrain_calls_held on /metrics");
    pthread_t th;
    CHECK(pthread_create(&th, NULL, pipe_call_main, late) == 0, "thread");
    double held = held0;
    for (int i = 0; i < 10000 && held < held0 + 1; i++) { /* up to ~10 s */
        struct timespec ts = {0, 1000000L};
        nanosleep(&ts, NULL);
        held = itest_metric(d, "rtrain_calls_held");
    }
    CHECK(held >= held0 + 1, "the successor seq %llu was never held (calls_held %.0f)",
          (unsigned long long)late->seq, held);
    pipe_call_main(first);
    pthread_join(th, NULL);
}

static void pipe_free(pipe_call *k)
{
    FREE(k->p);
    itest_res_free(&k->r);
}

static uint64_t pipe_step(itest_conn *c, const char *pid, uint64_t seq)
{
    pipe_call k = {.c = c, .pid = pid, .steps = 1, .seq = seq};
    pipe_call_main(&k);
    uint64_t gs = k.p && !k.p->replayed ? k.p->global_step : 0;
    CHECK(gs, "RunSteps seq %llu alone: %d %s", (unsigned long long)seq, k.r.status,
          k.r.details);
    pipe_free(&k);
    return gs;
}

static void test_pipeline(const itest_daemon *d)
{
    itest_res r;
    Rtrain__V1__CompileResponse *cp = compile(T.c, T.sa, itest_iris_graph(8), NULL, &r);
    CHECK(cp != NULL, "compile: %d %s", r.status, r.details);
    itest_res_free(&r);
    if (!cp)
        return;
    char pid[40];
    snprintf(pid, sizeof pid, "%s", cp->program_id);
    FREE(cp);
    itest_conn *c2 = itest_connect(d->addr);
    CHECK(pipe_step(T.c, pid, 1) == 1, "first step");

    /* In order whatever the arrival: seq 3 (2 steps) waits for seq 2. */
    pipe_call b = {.c = T.c, .pid = pid, .steps = 1, .seq = 2, .after = 1},
              l = {.c = c2, .pid = pid, .steps = 2, .seq = 3, .after = 2};
    pipe_pair(d, &l, &b);
    CHECK(b.p && !b.p->replayed && b.p->global_step == 2, "seq 2: %d %s step %llu", b.r.status,
          b.r.details, b.p ? (unsigned long long)b.p->global_step : 0ull);
    CHECK(l.p && !l.p->replayed && l.p->global_step == 4, "seq 3: %d %s step %llu", l.r.status,
          l.r.details, l.p ? (unsigned long long)l.p->global_step : 0ull);
    pipe_free(&b);
    pipe_free(&l);

    /* A failed call stops its successors: seq 5 waits for seq 4, which is
     * invalid (0 steps); seq 5 is not run. */
    b = (pipe_call){.c = T.c, .pid = pid, .steps = 0, .seq = 4, .after = 3};
    l = (pipe_call){.c = c2, .pid = pid, .steps = 1, .seq = 5, .after = 4};
    pipe_pair(d, &l, &b);
    CHECK(b.r.status == GRPC_STATUS_INVALID_ARGUMENT, "seq 4 (0 steps): %d %s", b.r.status,
          b.r.details);
    CHECK(l.r.status == GRPC_STATUS_FAILED_PRECONDITION && strstr(l.r.details, "seq 4"),
          "seq 5 after the failed seq 4: %d %s", l.r.status, l.r.details);
    pipe_free(&b);
    pipe_free(&l);
    CHECK(pipe_step(T.c, pid, 6) == 5, "seq 5 ran no step");

    /* A successor whose client gives up while it waits never runs, and
     * what follows it is refused. Its deadline (1.5 s) is short of the
     * daemon's hold (4 s) and long enough for the call to reach the daemon
     * on a loaded machine. */
    int dl = itest_deadline_ms;
    itest_deadline_ms = 1500;
    l = (pipe_call){.c = c2, .pid = pid, .steps = 1, .seq = 8, .after = 7};
    pipe_call_main(&l);
    itest_deadline_ms = dl;
    CHECK(l.r.status == GRPC_STATUS_DEADLINE_EXCEEDED || l.r.status == GRPC_STATUS_CANCELLED,
          "seq 8 held past its deadline: %d %s", l.r.status, l.r.details);
    pipe_free(&l);
    /* seq 9 waits for seq 8, so its answer comes once the daemon has
     * dropped seq 8: only then may seq 7 come. (Sent right after the
     * client gave up, seq 7 could reach the daemon before it learns of
     * that, and release seq 8 to run.) */
    l = (pipe_call){.c = T.c, .pid = pid, .steps = 1, .seq = 9, .after = 8};
    pipe_call_main(&l);
    CHECK(l.r.status == GRPC_STATUS_FAILED_PRECONDITION && strstr(l.r.details, "seq 8"),
          "seq 9 after the abandoned seq 8: %d %s", l.r.status, l.r.details);
    pipe_free(&l);
    b = (pipe_call){.c = T.c, .pid = pid, .steps = 1, .seq = 7, .after = 6};
    pipe_call_main(&b);
    CHECK(b.p && b.p->global_step == 6, "seq 7 (seq 8 never ran): %d %s step %llu", b.r.status,
          b.r.details, b.p ? (unsigned long long)b.p->global_step : 0ull);
    pipe_free(&b);

    /* A predecessor that never comes: held for --pipeline-hold-ms (this
     * daemon: 4 s), then DEADLINE_EXCEEDED naming the flag. */
    l = (pipe_call){.c = T.c, .pid = pid, .steps = 1, .seq = 12, .after = 11};
    pipe_call_main(&l);
    CHECK(l.r.status == GRPC_STATUS_DEADLINE_EXCEEDED &&
          strstr(l.r.details, "--pipeline-hold-ms"), "seq 12 waiting for seq 11: %d %s",
          l.r.status, l.r.details);
    pipe_free(&l);
    /* Bad after_seq. */
    l = (pipe_call){.c = T.c, .pid = pid, .steps = 1, .seq = 13, .after = 13};
    pipe_call_main(&l);
    CHECK(l.r.status == GRPC_STATUS_INVALID_ARGUMENT && strstr(l.r.details, "after_seq"),
          "after_seq = seq: %d %s", l.r.status, l.r.details);
    pipe_free(&l);
    CHECK(pipe_step(T.c, pid, 14) == 7, "steps run: 7");
    itest_disconnect(c2);
    bystander_unchanged("pipelined RunSteps");
}

static void test_keras(void)
{
    const char *files[] = {"iris_sequential_keras2.json", "iris_functional_keras3.json",
                           "reshape_flatten_keras2_model.json"};
    for (int i = 0; i < 3; i++) {
        size_t len;
        char *js = read_data(files[i], &len);
        CHECK(js != NULL, "%s", files[i]);
        if (!js)
            continue;
        itest_res r;
        Rtrain__V1__CompileResponse *p = compile(T.c, T.sa, NULL, js, &r);
        CHECK(p != NULL, "compile %s: %d %s", files[i], r.status, r.details);
        itest_res_free(&r);
        if (p) {
            char pid[40];
            snprintf(pid, sizeof pid, "%s", p->program_id);
            CHECK(p->report->n_output_shape == 1 && p->report->output_shape[0] == 3,
                  "%s output shape", files[i]);
            Rtrain__V1__Metrics m0 = evaluate(T.c, T.sa, pid, T.iris);
            Rtrain__V1__RunStepsResponse *rs = run_steps(T.c, T.sa, pid, T.iris, 150, 0, NULL, 0, &r);
            CHECK(rs != NULL, "%s steps: %d %s", files[i], r.status, r.details);
            FREE(rs);
            itest_res_free(&r);
            Rtrain__V1__Metrics m1 = evaluate(T.c, T.sa, pid, T.iris);
            CHECK(m1.loss < m0.loss, "%s: loss falls %.3f -> %.3f", files[i], m0.loss, m1.loss);
            printf("keras %s: loss %.3f -> %.3f, accuracy %.2f -> %.2f\n", files[i], m0.loss,
                   m1.loss, m0.accuracy, m1.accuracy);
        }
        FREE(p);
        free(js);
    }
    size_t len;
    char *js = read_data("unknown_layer.json", &len);
    itest_res r;
    Rtrain__V1__CompileResponse *p = compile(T.c, T.sa, NULL, js, &r);
    CHECK(!p && r.status == 3 && strstr(r.details, "unknown Keras layer 'Foo' (layer 'foo_1')"),
          "unknown layer: %d '%s'", r.status, r.details);
    FREE(p);
    itest_res_free(&r);
    free(js);
    p = compile(T.c, T.sa, NULL, "{\"class_name\": \"Sequential\", \"config\": {", &r);
    CHECK(!p && r.status == 3, "truncated JSON: %d '%s'", r.status, r.details);
    itest_res_free(&r);
    bystander_unchanged("Keras compiles");
}

typedef struct fit_seen {
    int progress, epochs, done, cancelled;
    double first_loss, last_loss;
    int val_ok;
    int exec_ok;          /* epoch ends with a daemon execute time */
    double prog_loss, prog_acc; /* the last progress event */
    int cancel_after;
    Rtrain__V1__Timings timings;
    int have_timings;
} fit_seen;

static int on_fit_event(void *ud, const uint8_t *data, size_t len)
{
    fit_seen *s = ud;
    Rtrain__V1__FitEvent *e = rtrain__v1__fit_event__unpack(NULL, len, data);
    CHECK(e != NULL, "FitEvent does not decode");
    if (!e)
        return 1;
    if (e->event_case == RTRAIN__V1__FIT_EVENT__EVENT_PROGRESS) {
        s->progress++;
        s->prog_loss = e->progress->loss;
        s->prog_acc = e->progress->accuracy;
    }
    if (e->event_case == RTRAIN__V1__FIT_EVENT__EVENT_EPOCH_END) {
        s->exec_ok += e->epoch_end->execute_ns > 0;
        if (s->epochs == 0)
            s->first_loss = e->epoch_end->train->loss;
        s->last_loss = e->epoch_end->train->loss;
        s->val_ok += e->epoch_end->val != NULL;
        s->epochs++;
    }
    if (e->done) {
        s->done = 1;
        s->cancelled = e->cancelled;
        if (e->timings) {
            s->timings = *e->timings;
            s->have_timings = 1;
        }
    }
    rtrain__v1__fit_event__free_unpacked(e, NULL);
    return s->cancel_after && s->progress + s->epochs >= s->cancel_after;
}

static void test_fit(void)
{
    itest_res r;
    Rtrain__V1__CompileResponse *p = compile(T.c, T.sa, itest_iris_graph(32), NULL, &r);
    itest_res_free(&r);
    if (!p)
        return;
    char pid[40];
    snprintf(pid, sizeof pid, "%s", p->program_id);
    FREE(p);
    Rtrain__V1__FitRequest q = RTRAIN__V1__FIT_REQUEST__INIT;
    q.session_id = T.sa;
    q.program_id = pid;
    q.dataset_id = T.iris;
    q.val_dataset_id = T.val;
    q.epochs = 8;
    q.progress_every = 3;
    fit_seen s;
    memset(&s, 0, sizeof s);
    itest_server_stream(T.c, "Fit", &q.base, on_fit_event, &s, &r);
    CHECK(r.status == 0, "Fit: %d %s", r.status, r.details);
    CHECK(s.epochs == 8 && s.val_ok == 8, "epoch ends %d (with val %d)", s.epochs, s.val_ok);
    CHECK(s.exec_ok == 8, "epoch ends with execute_ns > 0: %d of %d", s.exec_ok, s.epochs);
    CHECK(s.progress >= 1, "progress events %d", s.progress);
    CHECK(s.done && !s.cancelled, "done event");
    CHECK(s.last_loss < s.first_loss, "fit loss falls %.3f -> %.3f", s.first_loss, s.last_loss);
    if (s.have_timings)
        check_timings(&s.timings, r.rtt_ns, "Fit");
    CHECK(s.have_timings, "the done event carries timings");
    itest_res_free(&r);
    bystander_unchanged("Fit");

    /* Cancel mid-stream: the daemon stops at a step boundary and goes on. */
    q.epochs = 100000;
    q.progress_every = 1;
    q.val_dataset_id = "";
    memset(&s, 0, sizeof s);
    s.cancel_after = 5;
    size_t n0;
    uint8_t *w0 = weights_blob(T.c, T.sa, pid, &n0, NULL);
    itest_server_stream(T.c, "Fit", &q.base, on_fit_event, &s, &r);
    CHECK(r.status == 1, "cancelled Fit: status %d '%s'", r.status, r.details);
    itest_res_free(&r);
    CHECK(ping_ok(T.c), "ping after a cancelled Fit");
    /* The program is usable again right away (the device was released). */
    Rtrain__V1__RunStepsResponse *rs = run_steps(T.c, T.sa, pid, T.iris, 1, 0, NULL, 0, &r);
    CHECK(rs && rs->global_step < 100000ull * 10, "steps after cancel: %d %s", r.status, r.details);
    FREE(rs);
    itest_res_free(&r);
    free(w0);
    bystander_unchanged("a cancelled Fit");
}

/* StepProgress metrics are sample-weighted like the epoch metrics: iris
 * (150) in batches of 16 is 9 full batches and one of 6. A Fit "epoch" of
 * 11 steps with a progress event after step 10 reports the first engine
 * epoch, which must equal the sample-weighted mean of RunSteps over the
 * same 10 steps on an identical fresh program (same graph, config, seed).
 * The plain mean of the step losses would weight the batch of 6 like one
 * of 16. */
static void test_fit_progress_weighted(void)
{
    itest_res r;
    char pid[2][40];
    for (int i = 0; i < 2; i++) {
        Rtrain__V1__CompileResponse *p = compile(T.c, T.sa, itest_iris_graph(32), NULL, &r);
        CHECK(p != NULL, "compile %d: %d %s", i, r.status, r.details);
        itest_res_free(&r);
        if (!p)
            return;
        snprintf(pid[i], sizeof pid[i], "%s", p->program_id);
        FREE(p);
    }
    Rtrain__V1__RunStepsResponse *rs = run_steps(T.c, T.sa, pid[0], T.iris, 10, 0, NULL, 1, &r);
    CHECK(rs && rs->mean && rs->mean->samples == 150 && rs->n_losses == 10,
          "RunSteps over one epoch: %d %s", r.status, r.details);
    itest_res_free(&r);
    if (!rs || !rs->mean || rs->n_losses != 10) {
        FREE(rs);
        return;
    }
    Rtrain__V1__FitRequest q = RTRAIN__V1__FIT_REQUEST__INIT;
    q.session_id = T.sa;
    q.program_id = pid[1];
    q.dataset_id = T.iris;
    q.epochs = 1;
    q.steps_per_epoch = 11;
    q.progress_every = 10;
    fit_seen s;
    memset(&s, 0, sizeof s);
    itest_server_stream(T.c, "Fit", &q.base, on_fit_event, &s, &r);
    CHECK(r.status == 0 && s.done && s.progress == 1 && s.epochs == 1,
          "Fit of 11 steps: %d %s, %d progress, %d epoch ends", r.status, r.details, s.progress,
          s.epochs);
    itest_res_free(&r);
    double want = rs->mean->loss, plain = 0;
    for (int i = 0; i < 10; i++)
        plain += rs->losses[i] / 10.0;
    CHECK(fabs(s.prog_loss - want) <= 1e-5 * fabs(want),
          "progress loss %.7f, sample-weighted RunSteps mean %.7f (plain mean %.7f)", s.prog_loss,
          want, plain);
    CHECK(fabs(s.prog_acc - rs->mean->accuracy) <= 1e-5,
          "progress accuracy %.6f, sample-weighted RunSteps mean %.6f", s.prog_acc,
          rs->mean->accuracy);
    FREE(rs);
}

static void test_predict_and_weights(void)
{
    itest_res r;
    /* Predict from a stored dataset. */
    Rtrain__V1__PredictRequest q = RTRAIN__V1__PREDICT_REQUEST__INIT;
    q.session_id = T.sa;
    q.program_id = T.pa;
    q.input_case = RTRAIN__V1__PREDICT_REQUEST__INPUT_DATASET_ID;
    q.dataset_id = T.iris;
    Rtrain__V1__PredictResponse *p = NULL;
    itest_unary(T.c, "Predict", &q.base, &rtrain__v1__predict_response__descriptor,
                (ProtobufCMessage **)&p, &r);
    CHECK(p && p->y && p->y->n_shape == 2 && p->y->shape[0] == 150 && p->y->shape[1] == 3 &&
              p->y->data.len == 150 * 3 * 4,
          "predict dataset: %d %s", r.status, r.details);
    float first_row[3] = {0}, all_rows[150 * 3] = {0};
    if (p && p->y && p->y->data.len == 1800) {
        const float *y = (const float *)p->y->data.data;
        memcpy(all_rows, y, sizeof all_rows);
        double s = y[0] + y[1] + y[2];
        CHECK(fabs(s - 1.0) < 1e-4, "softmax row sums to %.6f", s);
        memcpy(first_row, y, sizeof first_row);
    }
    FREE(p);
    itest_res_free(&r);
    /* Predict from a tensor: the first iris row gives the same output. */
    float x[4] = {5.1f, 3.5f, 1.4f, 0.2f};
    int64_t shape[2] = {1, 4};
    Rtrain__V1__Tensor t = RTRAIN__V1__TENSOR__INIT;
    t.dtype = RTRAIN__V1__DTYPE__F32;
    t.shape = shape;
    t.n_shape = 2;
    t.data.data = (uint8_t *)x;
    t.data.len = sizeof x;
    q.input_case = RTRAIN__V1__PREDICT_REQUEST__INPUT_X;
    q.x = &t;
    itest_unary(T.c, "Predict", &q.base, &rtrain__v1__predict_response__descriptor,
                (ProtobufCMessage **)&p, &r);
    CHECK(p && p->y && p->y->data.len == 12 && memcmp(p->y->data.data, first_row, 12) == 0,
          "predict tensor equals predict dataset row 0: %d %s", r.status, r.details);
    FREE(p);
    itest_res_free(&r);
    /* NaN in x. */
    x[2] = NAN;
    itest_unary(T.c, "Predict", &q.base, &rtrain__v1__predict_response__descriptor,
                (ProtobufCMessage **)&p, &r);
    CHECK(!p && r.status == 3 && strstr(r.details, "NaN at sample 0, column 2"), "NaN x: %d '%s'",
          r.status, r.details);
    FREE(p);
    itest_res_free(&r);
    x[2] = 1.4f;
    /* Wrong width. */
    shape[1] = 2;
    t.data.len = 8;
    itest_unary(T.c, "Predict", &q.base, &rtrain__v1__predict_response__descriptor,
                (ProtobufCMessage **)&p, &r);
    CHECK(!p && r.status == 3 && strstr(r.details, "(2,)") && strstr(r.details, "(4,)"),
          "x shape mismatch: %d '%s'", r.status, r.details);
    FREE(p);
    itest_res_free(&r);
    /* The order of the failures: the lookups first, then x's own checks,
     * then x against the program (the width above stays wrong). */
    t.dtype = RTRAIN__V1__DTYPE__I32;
    q.program_id = "p-0000000000000000";
    itest_unary(T.c, "Predict", &q.base, &rtrain__v1__predict_response__descriptor,
                (ProtobufCMessage **)&p, &r);
    CHECK(!p && r.status == 5, "unknown program before x's dtype: %d '%s'", r.status, r.details);
    FREE(p);
    itest_res_free(&r);
    q.program_id = T.pa;
    itest_unary(T.c, "Predict", &q.base, &rtrain__v1__predict_response__descriptor,
                (ProtobufCMessage **)&p, &r);
    CHECK(!p && r.status == 3 && strstr(r.details, "must be F32"),
          "x's dtype before its width: %d '%s'", r.status, r.details);
    FREE(p);
    itest_res_free(&r);
    t.dtype = RTRAIN__V1__DTYPE__F32;

    /* Weights: A -> fresh program C, bit-exact, and the same predictions. */
    Rtrain__V1__GetWeightsResponse *wa = NULL;
    size_t na;
    uint8_t *ba = weights_blob(T.c, T.sa, T.pa, &na, &wa);
    Rtrain__V1__CompileResponse *cp = compile(T.c, T.sa, itest_iris_graph(32), NULL, &r);
    itest_res_free(&r);
    if (!wa || !cp) {
        free(ba);
        FREE(wa);
        FREE(cp);
        return;
    }
    char pc[40];
    snprintf(pc, sizeof pc, "%s", cp->program_id);
    FREE(cp);
    size_t nc;
    uint8_t *bc = weights_blob(T.c, T.sa, pc, &nc, NULL);
    CHECK(nc == na && memcmp(ba, bc, na) != 0, "a fresh program has other weights");
    free(bc);
    Rtrain__V1__SetWeightsRequest sq = RTRAIN__V1__SET_WEIGHTS_REQUEST__INIT;
    sq.session_id = T.sa;
    sq.program_id = pc;
    sq.weights = wa->weights;
    sq.n_weights = wa->n_weights;
    itest_unary(T.c, "SetWeights", &sq.base, NULL, NULL, &r);
    CHECK(r.status == 0, "SetWeights: %d %s", r.status, r.details);
    itest_res_free(&r);
    bc = weights_blob(T.c, T.sa, pc, &nc, NULL);
    CHECK(nc == na && memcmp(ba, bc, na) == 0, "weights round-trip bit-exactly");
    free(bc);
    Rtrain__V1__Metrics ea = evaluate(T.c, T.sa, T.pa, T.iris), ec = evaluate(T.c, T.sa, pc, T.iris);
    CHECK(ea.loss == ec.loss && ea.accuracy == ec.accuracy, "same weights, same metrics");
    /* Predict runs in chunks of 16 batches and may hand the device over
     * between them: a batch-2 program (5 chunks over 150 samples) given
     * the same weights predicts exactly what the batch-16 one (1 chunk) did. */
    {
        Rtrain__V1__TrainConfig cfg2;
        itest_iris_config(&cfg2);
        cfg2.batch_size = 2;
        Rtrain__V1__CompileRequest cq = RTRAIN__V1__COMPILE_REQUEST__INIT;
        cq.session_id = T.sa;
        cq.model_case = RTRAIN__V1__COMPILE_REQUEST__MODEL_GRAPH;
        cq.graph = itest_iris_graph(32);
        cq.config = &cfg2;
        Rtrain__V1__CompileResponse *c2 = NULL;
        itest_unary(T.c, "Compile", &cq.base, &rtrain__v1__compile_response__descriptor,
                    (ProtobufCMessage **)&c2, &r);
        CHECK(c2, "compile with batch 2: %d %s", r.status, r.details);
        itest_res_free(&r);
        if (c2) {
            sq.program_id = c2->program_id;
            itest_unary(T.c, "SetWeights", &sq.base, NULL, NULL, &r);
            CHECK(r.status == 0, "SetWeights (batch 2): %d %s", r.status, r.details);
            itest_res_free(&r);
            q.program_id = c2->program_id;
            q.input_case = RTRAIN__V1__PREDICT_REQUEST__INPUT_DATASET_ID;
            q.dataset_id = T.iris;
            itest_unary(T.c, "Predict", &q.base, &rtrain__v1__predict_response__descriptor,
                        (ProtobufCMessage **)&p, &r);
            CHECK(p && p->y && p->y->data.len == sizeof all_rows &&
                      memcmp(p->y->data.data, all_rows, sizeof all_rows) == 0,
                  "chunked Predict (batch 2) equals one chunk (batch 16): %d %s", r.status,
                  r.details);
            FREE(p);
            itest_res_free(&r);
            sq.program_id = pc;
            FREE(c2);
        }
    }
    /* Bad SetWeights: all or nothing. */
    sq.n_weights = wa->n_weights - 1;
    itest_unary(T.c, "SetWeights", &sq.base, NULL, NULL, &r);
    CHECK(r.status == 3 && strstr(r.details, "missing"), "missing weight: %d '%s'", r.status, r.details);
    itest_res_free(&r);
    sq.n_weights = wa->n_weights;
    wa->weights[0]->shape[0] = 5;
    itest_unary(T.c, "SetWeights", &sq.base, NULL, NULL, &r);
    CHECK(r.status == 3 && strstr(r.details, "shape"), "bad weight shape: %d '%s'", r.status, r.details);
    itest_res_free(&r);
    bc = weights_blob(T.c, T.sa, pc, &nc, NULL);
    CHECK(nc == na && memcmp(ba, bc, na) == 0, "a rejected SetWeights changes nothing");
    free(bc);
    free(ba);
    FREE(wa);
    bystander_unchanged("weights");
}

static void test_bad_model_inputs(void)
{
    itest_res r;
    /* A graph that fails validation: an unknown op. */
    Rtrain__V1__Graph *g = itest_iris_graph(32);
    g->nodes[1]->op = "Frobnicate";
    Rtrain__V1__CompileResponse *p = compile(T.c, T.sa, g, NULL, &r);
    CHECK(!p && r.status == 3 && strstr(r.details, "Frobnicate"), "unknown op: %d '%s'", r.status,
          r.details);
    CHECK(strlen(r.details) < 300, "short error");
    FREE(p);
    itest_res_free(&r);
    bystander_unchanged("an invalid graph");
    /* A shape mismatch inside the graph. */
    g = itest_iris_graph(32);
    g->params[2]->shape[0] = 31;
    p = compile(T.c, T.sa, g, NULL, &r);
    CHECK(!p && r.status == 3, "inner shape mismatch: %d '%s'", r.status, r.details);
    FREE(p);
    itest_res_free(&r);
    /* Data whose shape does not match the model: 5 features. */
    char csv[2048];
    size_t o = 0;
    for (int i = 0; i < 20; i++)
        o += (size_t)snprintf(csv + o, sizeof csv - o, "1,2,3,4,5,%d\n", i % 3);
    char d5[40];
    CHECK(upload_csv(T.c, T.sa, csv, o, 0, d5) == 0, "5-feature upload");
    Rtrain__V1__RunStepsResponse *rs = run_steps(T.c, T.sa, T.pa, d5, 1, 0, NULL, 0, &r);
    CHECK(!rs && r.status == 3 && strstr(r.details, "(5,)") && strstr(r.details, "(4,)"),
          "dataset shape mismatch: %d '%s'", r.status, r.details);
    FREE(rs);
    itest_res_free(&r);
    /* Labels out of range for 3 classes. */
    o = 0;
    for (int i = 0; i < 20; i++)
        o += (size_t)snprintf(csv + o, sizeof csv - o, "1,2,3,4,%d\n", i == 9 ? 7 : i % 3);
    char dl[40];
    CHECK(upload_csv(T.c, T.sa, csv, o, 0, dl) == 0, "bad-label upload");
    rs = run_steps(T.c, T.sa, T.pa, dl, 1, 0, NULL, 0, &r);
    CHECK(!rs && r.status == 3, "label out of range: %d '%s'", r.status, r.details);
    FREE(rs);
    itest_res_free(&r);
    /* Fractional labels where the program needs integers. */
    o = 0;
    for (int i = 0; i < 20; i++)
        o += (size_t)snprintf(csv + o, sizeof csv - o, "1,2,3,4,%s\n", i == 4 ? "0.5" : "1");
    char df[40];
    CHECK(upload_csv(T.c, T.sa, csv, o, 0, df) == 0, "fractional-label upload");
    rs = run_steps(T.c, T.sa, T.pa, df, 1, 0, NULL, 0, &r);
    CHECK(!rs && r.status == 3 && strstr(r.details, "integer labels"), "fractional labels: %d '%s'",
          r.status, r.details);
    FREE(rs);
    itest_res_free(&r);
    /* Unknown dataset; zero steps. */
    rs = run_steps(T.c, T.sa, T.pa, "d-0000", 1, 0, NULL, 0, &r);
    CHECK(!rs && r.status == 5 && strstr(r.details, "d-0000"), "unknown dataset: %d '%s'", r.status,
          r.details);
    FREE(rs);
    itest_res_free(&r);
    rs = run_steps(T.c, T.sa, T.pa, T.iris, 0, 0, NULL, 0, &r);
    CHECK(!rs && r.status == 3, "zero steps: %d", r.status);
    FREE(rs);
    itest_res_free(&r);
    bystander_unchanged("bad data");
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Median round trips: Ping vs RunSteps K=1 (iris). Printed, not asserted. */
/* K=1 RunSteps beside Ping on one connection: every call answers OK with
 * one step done and its execute time reported. A smoke check of the path
 * (inline, or through the executor), not a timing: the round trips are
 * printed for a reader, never compared (bench overhead measures them). */
static void measure_latency(itest_conn *c, const char *sid, const char *pid, const char *did,
                            const char *label)
{
    enum { N = 40 };
    uint64_t ping[N], steps[N];
    int bad = 0;
    for (int i = 0; i < N; i++) {
        itest_res r;
        Rtrain__V1__PingRequest q = RTRAIN__V1__PING_REQUEST__INIT;
        itest_unary(c, "Ping", &q.base, NULL, NULL, &r);
        ping[i] = r.rtt_ns;
        bad += r.status != GRPC_STATUS_OK;
        itest_res_free(&r);
        Rtrain__V1__RunStepsResponse *p = run_steps(c, sid, pid, did, 1, 0, NULL, 0, &r);
        steps[i] = r.rtt_ns;
        bad += !p || r.status != GRPC_STATUS_OK || !p->timings || !p->timings->execute_ns ||
               p->timings->execute_ns >= r.rtt_ns;
        FREE(p);
        itest_res_free(&r);
    }
    CHECK(bad == 0, "%s: %d of %d Ping/RunSteps pairs failed or lacked an execute time", label,
          bad, N);
    qsort(ping, N, sizeof ping[0], cmp_u64);
    qsort(steps, N, sizeof steps[0], cmp_u64);
    printf("%s: Ping p50 %.1f us, RunSteps K=1 p50 %.1f us\n", label, ping[N / 2] / 1e3,
           steps[N / 2] / 1e3);
}

static void test_inline_and_executor(const char *rtraind)
{
    measure_latency(T.c, T.sa, T.pa, T.iris, "inline (default)");
    itest_daemon d;
    const char *extra[] = {"--inline-us", "0", NULL};
    int started = itest_daemon_start(&d, rtraind, extra) == 0;
    CHECK(started, "daemon with --inline-us 0");
    if (!started)
        return;
    itest_conn *c = itest_connect(d.addr);
    char sid[40], did[40], pid[40];
    size_t len;
    char *csv = read_data("iris.csv", &len);
    itest_session(c, "lat", sid);
    upload_csv(c, sid, csv, len, 1, did);
    free(csv);
    itest_res r;
    Rtrain__V1__CompileResponse *p = compile(c, sid, itest_iris_graph(32), NULL, &r);
    CHECK(p != NULL, "compile: %d %s", r.status, r.details);
    itest_res_free(&r);
    if (p) {
        snprintf(pid, sizeof pid, "%s", p->program_id);
        measure_latency(c, sid, pid, did, "executor (--inline-us 0)");
    }
    FREE(p);
    itest_disconnect(c);
    itest_daemon_stop(&d, SIGTERM);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s RTRAIND\n", argv[0]);
        return 2;
    }
    itest_daemon d;
    const char *const extra[] = {"--pipeline-hold-ms", "4000", "--metrics-listen", "127.0.0.1:0",
                                 NULL};
    if (itest_daemon_start(&d, argv[1], extra) < 0)
        return 1;
    T.c = itest_connect(d.addr);
    RUN(setup);
    RUN(test_compile_graph_and_cache);
    RUN(test_run_steps);
    RUN(test_pipeline, &d);
    RUN(test_keras);
    RUN(test_fit);
    RUN(test_fit_progress_weighted);
    RUN(test_predict_and_weights);
    RUN(test_bad_model_inputs);
    RUN(test_inline_and_executor, argv[1]);
    itest_disconnect(T.c);
    free(T.b_weights);
    int code = itest_daemon_stop(&d, SIGTERM);
    CHECK(code == 0, "daemon exit %d", code);
    return itest_summary();
}
