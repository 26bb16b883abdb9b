/*
 * test_control.c - the Control RPC against a real rtraind:
 *   - bad input: an unknown session or program (another principal's
 *     session's included) is NOT_FOUND, an empty program id, a NaN,
 *     infinite or negative rate INVALID_ARGUMENT; nothing changes;
 *   - with nothing running: a stop does nothing (running = false, the next
 *     RunSteps runs in full), a rate is kept for the next call;
 *   - inside a Fit stream: a rate change is reported at the first step
 *     that used it (StepProgress.learning_rate, after the step the Control
 *     call was made at), a stop ends the fit after a step with done,
 *     stopped and the global step (status OK, not cancelled);
 *   - a RunSteps call stopped from another connection answers OK with
 *     stopped set and fewer steps than asked; the next call runs in full;
 *   - a bystander session trains throughout.
 * Long calls (10^6 steps) are there only so a stop has something to end:
 * nothing waits on time.
 */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "itest.h"

#define FREE(p) ((p) ? protobuf_c_message_free_unpacked(&(p)->base, NULL) : (void)0)
#define N 30
#define LONG_STEPS 1000000u

static itest_conn *C, *C2;
static char S[64], S2[64], DS[64], P[64], P2[64];
static float X[N * 4];
static int32_t Y[N];

static int upload(const char *sid, char *id, itest_res *r)
{
    int64_t xs[2] = {N, 4}, ys[1] = {N};
    Rtrain__V1__DataPart px = RTRAIN__V1__DATA_PART__INIT, py = RTRAIN__V1__DATA_PART__INIT;
    px.role = RTRAIN__V1__DATA_ROLE__ROLE_FEATURES;
    px.format = py.format = RTRAIN__V1__DATA_FORMAT__FORMAT_RAW;
    px.dtype = RTRAIN__V1__DTYPE__F32;
    px.shape = xs;
    px.n_shape = 2;
    px.length = sizeof X;
    py.role = RTRAIN__V1__DATA_ROLE__ROLE_LABELS;
    py.dtype = RTRAIN__V1__DTYPE__I32;
    py.shape = ys;
    py.n_shape = 1;
    py.length = sizeof Y;
    Rtrain__V1__DataPart *pp[2] = {&px, &py};
    uint8_t buf[sizeof X + sizeof Y];
    memcpy(buf, X, sizeof X);
    memcpy(buf + sizeof X, Y, sizeof Y);
    return itest_upload(C, sid, pp, 2, buf, sizeof buf, 1 << 16, id, r);
}

static int compile(const char *sid, char *pid)
{
    static Rtrain__V1__TrainConfig cfg;
    itest_iris_config(&cfg);
    cfg.batch_size = 10;
    Rtrain__V1__CompileRequest q = RTRAIN__V1__COMPILE_REQUEST__INIT;
    q.session_id = (char *)sid;
    q.model_case = RTRAIN__V1__COMPILE_REQUEST__MODEL_GRAPH;
    q.graph = itest_iris_graph(8);
    q.config = &cfg;
    Rtrain__V1__CompileResponse *p = NULL;
    itest_res r;
    itest_unary(C, "Compile", &q.base, &rtrain__v1__compile_response__descriptor,
                (ProtobufCMessage **)&p, &r);
    CHECK(p != NULL, "compile: %d %s", r.status, r.details);
    if (p)
        snprintf(pid, 64, "%s", p->program_id);
    FREE(p);
    itest_res_free(&r);
    return p ? 0 : -1;
}

/* Control on conn c; returns the status, *running from the answer. */
static int control(itest_conn *c, const char *sid, const char *pid, float lr, int stop,
                   int *running, itest_res *r)
{
    Rtrain__V1__ControlRequest q = RTRAIN__V1__CONTROL_REQUEST__INIT;
    q.session_id = (char *)sid;
    q.program_id = (char *)pid;
    q.learning_rate = lr;
    q.stop = stop;
    Rtrain__V1__ControlResponse *p = NULL;
    int st = itest_unary(c, "Control", &q.base, &rtrain__v1__control_response__descriptor,
                         (ProtobufCMessage **)&p, r);
    if (running)
        *running = p ? p->running : -1;
    FREE(p);
    return st;
}

static Rtrain__V1__RunStepsResponse *run(itest_conn *c, const char *sid, const char *pid,
                                         uint64_t steps, itest_res *r)
{
    Rtrain__V1__RunStepsRequest q = RTRAIN__V1__RUN_STEPS_REQUEST__INIT;
    q.session_id = (char *)sid;
    q.program_id = (char *)pid;
    q.dataset_id = DS;
    q.steps = steps;
    Rtrain__V1__RunStepsResponse *p = NULL;
    itest_unary(c, "RunSteps", &q.base, &rtrain__v1__run_steps_response__descriptor,
                (ProtobufCMessage **)&p, r);
    return p;
}

static Rtrain__V1__GetWeightsResponse *weights(const char *pid)
{
    return itest_get_weights(C, S, pid);
}

static int same(const Rtrain__V1__GetWeightsResponse *a, const Rtrain__V1__GetWeightsResponse *b)
{
    if (!a || !b || a->n_weights != b->n_weights || a->global_step != b->global_step ||
        a->learning_rate != b->learning_rate)
        return 0;
    for (size_t i = 0; i < a->n_weights; i++)
        if (a->weights[i]->data.len != b->weights[i]->data.len ||
            memcmp(a->weights[i]->data.data, b->weights[i]->data.data, a->weights[i]->data.len))
            return 0;
    return 1;
}

static void setup(void)
{
    for (int i = 0; i < N * 4; i++) X[i] = sinf(0.37f * (float)i);
    for (int i = 0; i < N; i++) Y[i] = i % 3;
    CHECK(itest_session(C, "control", S) == 0 && itest_session(C, "bystander", S2) == 0,
          "sessions");
    itest_res r;
    CHECK(upload(S, DS, &r) == 0, "upload: %d %s", r.status, r.details);
    itest_res_free(&r);
    compile(S, P);
    compile(S2, P2);
}

static void test_bad_input(void)
{
    Rtrain__V1__GetWeightsResponse *w0 = weights(P);
    itest_res r;
    int st = control(C, "s-00000000000000000000000000000000", P, 0.1f, 1, NULL, &r);
    CHECK(st == GRPC_STATUS_NOT_FOUND && strstr(r.details, "session"), "unknown session: %d %s",
          st, r.details);
    itest_res_free(&r);
    st = control(C, S, "p-00000000000000000000000000000000", 0.1f, 1, NULL, &r);
    CHECK(st == GRPC_STATUS_NOT_FOUND && strstr(r.details, "program"), "unknown program: %d %s",
          st, r.details);
    itest_res_free(&r);
    st = control(C, S2, P, 0.1f, 1, NULL, &r); /* P lives in S, not S2 */
    CHECK(st == GRPC_STATUS_NOT_FOUND, "program of another session: %d %s", st, r.details);
    itest_res_free(&r);
    st = control(C, S, "", 0.1f, 0, NULL, &r);
    CHECK(st == GRPC_STATUS_INVALID_ARGUMENT && strstr(r.details, "program_id"),
          "empty program: %d %s", st, r.details);
    itest_res_free(&r);
    const float bad[] = {NAN, -0.5f, INFINITY, -INFINITY};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        st = control(C, S, P, bad[i], 1, NULL, &r);
        CHECK(st == GRPC_STATUS_INVALID_ARGUMENT && strstr(r.details, "learning_rate"),
              "rate %g: %d %s", (double)bad[i], st, r.details);
        itest_res_free(&r);
    }
    Rtrain__V1__GetWeightsResponse *w1 = weights(P);
    CHECK(same(w0, w1), "a refused Control changed the program");
    FREE(w0);
    FREE(w1);
}

static void test_idle(void)
{
    itest_res r;
    int running = -1;
    Rtrain__V1__GetWeightsResponse *w0 = weights(P);
    int st = control(C, S, P, 0.0f, 1, &running, &r);
    CHECK(st == 0 && running == 0, "idle stop: %d %s running %d", st, r.details, running);
    itest_res_free(&r);
    Rtrain__V1__RunStepsResponse *q = run(C, S, P, 5, &r);
    CHECK(q && !q->stopped && w0 && q->global_step == w0->global_step + 5,
          "a stop carried over: %d %s", r.status, r.details);
    FREE(q);
    itest_res_free(&r);
    st = control(C, S, P, 0.02f, 0, &running, &r);
    CHECK(st == 0 && running == 0, "idle rate: %d %s", st, r.details);
    itest_res_free(&r);
    Rtrain__V1__GetWeightsResponse *w1 = weights(P);
    CHECK(w1 && w1->learning_rate == 0.02f, "rate %g", w1 ? w1->learning_rate : -1.0);
    FREE(w0);
    FREE(w1);
}

/* The Fit stream's reader: at the first progress event a rate, once the
 * stream reports that rate, a stop; both on the second connection. */
typedef struct fit_seen {
    int events, controls_ok;
    uint64_t s0, s1, last_step;
    int saw_rate;
    int done, stopped, cancelled;
    uint64_t end_step;
    int bad_order;
} fit_seen;

static int on_fit(void *ud, const uint8_t *data, size_t len)
{
    fit_seen *f = ud;
    Rtrain__V1__FitEvent *e = rtrain__v1__fit_event__unpack(NULL, len, data);
    if (!e)
        return 1;
    f->events++;
    if (e->done) {
        f->done = 1;
        f->stopped = e->stopped;
        f->cancelled = e->cancelled;
        f->end_step = e->global_step;
    } else if (e->event_case == RTRAIN__V1__FIT_EVENT__EVENT_PROGRESS) {
        const Rtrain__V1__StepProgress *p = e->progress;
        if (p->step <= f->last_step)
            f->bad_order = 1;
        f->last_step = p->step;
        itest_res r;
        int running = 0;
        if (!f->s0) {
            f->s0 = p->step;
            f->controls_ok += control(C2, S, P, 0.004f, 0, &running, &r) == 0 && running;
            itest_res_free(&r);
        } else if (!f->saw_rate && p->learning_rate == 0.004f) {
            f->saw_rate = 1;
            f->s1 = p->step;
            f->controls_ok += control(C2, S, P, 0.0f, 1, &running, &r) == 0 && running;
            itest_res_free(&r);
        }
    }
    protobuf_c_message_free_unpacked(&e->base, NULL);
    return 0;
}

static void test_fit_rate_and_stop(void)
{
    Rtrain__V1__GetWeightsResponse *w0 = weights(P);
    Rtrain__V1__FitRequest q = RTRAIN__V1__FIT_REQUEST__INIT;
    q.session_id = S;
    q.program_id = P;
    q.dataset_id = DS;
    q.epochs = 2;
    q.steps_per_epoch = LONG_STEPS;
    q.progress_every = 1;
    fit_seen f;
    memset(&f, 0, sizeof f);
    itest_res r;
    int st = itest_server_stream(C, "Fit", &q.base, on_fit, &f, &r);
    CHECK(st == 0, "Fit: %d %s", st, r.details);
    itest_res_free(&r);
    uint64_t g0 = w0 ? w0->global_step : 0;
    CHECK(f.controls_ok == 2, "Control calls answered running: %d", f.controls_ok);
    CHECK(!f.bad_order, "progress steps out of order");
    /* The rate was set after the event of step s0: its first step is later. */
    CHECK(f.saw_rate && f.s1 > f.s0, "rate reported at %llu after the Control at %llu",
          (unsigned long long)f.s1, (unsigned long long)f.s0);
    CHECK(f.done && f.stopped && !f.cancelled, "done %d stopped %d cancelled %d", f.done,
          f.stopped, f.cancelled);
    CHECK(f.end_step > f.s1 - 1 && f.end_step < g0 + LONG_STEPS,
          "stopped at %llu (rate from %llu, start %llu)", (unsigned long long)f.end_step,
          (unsigned long long)f.s1, (unsigned long long)g0);
    Rtrain__V1__GetWeightsResponse *w1 = weights(P);
    CHECK(w1 && w1->global_step == f.end_step && w1->learning_rate == 0.004f,
          "after the fit: step %llu rate %g", w1 ? (unsigned long long)w1->global_step : 0ull,
          w1 ? w1->learning_rate : -1.0);
    FREE(w0);
    FREE(w1);
}

typedef struct bg_run {
    Rtrain__V1__RunStepsResponse *resp;
    itest_res r;
} bg_run;

static void *run_long(void *ud)
{
    bg_run *b = ud;
    b->resp = run(C2, S, P, LONG_STEPS, &b->r);
    return NULL;
}

static void test_run_steps_stop(void)
{
    Rtrain__V1__GetWeightsResponse *w0 = weights(P);
    bg_run b;
    memset(&b, 0, sizeof b);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, run_long, &b) == 0, "thread");
    /* Until the call runs (Control answers at once either way). */
    int running = 0, st = 0, tries = 0;
    while (!running && st == 0 && tries++ < 1000000) {
        itest_res r;
        st = control(C, S, P, 0.0f, 1, &running, &r);
        itest_res_free(&r);
    }
    CHECK(st == 0 && running, "Control saw the RunSteps running: %d", st);
    pthread_join(t, NULL);
    uint64_t g0 = w0 ? w0->global_step : 0;
    CHECK(b.resp && b.resp->stopped && b.resp->global_step > g0 &&
              b.resp->global_step < g0 + LONG_STEPS,
          "stopped RunSteps: %d %s step %llu", b.r.status, b.r.details,
          b.resp ? (unsigned long long)b.resp->global_step : 0ull);
    uint64_t g1 = b.resp ? b.resp->global_step : 0;
    FREE(b.resp);
    itest_res_free(&b.r);
    itest_res r;
    Rtrain__V1__RunStepsResponse *q = run(C, S, P, 3, &r);
    CHECK(q && !q->stopped && q->global_step == g1 + 3, "the next call: %d %s", r.status,
          r.details);
    FREE(q);
    itest_res_free(&r);
    /* the bystander trains */
    q = run(C, S2, P2, 2, &r);
    CHECK(q && !q->stopped && q->global_step == 2, "bystander: %d %s", r.status, r.details);
    FREE(q);
    itest_res_free(&r);
    FREE(w0);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s RTRAIND\n", argv[0]);
        return 2;
    }
    itest_daemon d;
    if (itest_daemon_start(&d, argv[1], NULL) < 0)
        return 1;
    C = itest_connect(d.addr);
    C2 = itest_connect(d.addr);
    RUN(setup);
    RUN(test_bad_input);
    RUN(test_idle);
    RUN(test_fit_rate_and_stop);
    RUN(test_run_steps_stop);
    itest_disconnect(C2);
    itest_disconnect(C);
    int code = itest_daemon_stop(&d, SIGTERM);
    CHECK(code == 0, "daemon exit %d", code);
    return itest_summary();
}
