/*
 * test_fit_state.c - the wire of per-sample weights, learning-rate changes
 * and state carried between programs, against a real rtraind:
 *   - an upload with a ROLE_SAMPLE_WEIGHTS part; bad weights (negative,
 *     wrong count, without labels) are INVALID_ARGUMENT naming the problem;
 *   - RunSteps/Fit learning_rate: GetWeights reports the rate in force; a
 *     negative or NaN rate is INVALID_ARGUMENT and changes nothing;
 *   - Compile state_from_program: the new program (another batch size)
 *     starts at the old one's weights and step; an unknown program is
 *     NOT_FOUND, one with other parameters INVALID_ARGUMENT;
 *   - a resumable Fit (fit_id) sent again after it ended: the daemon sends
 *     again, from its record, the epoch ends past epochs_received, byte for
 *     byte, and the done event, running no step; a resend that does not
 *     match the record (other epochs) is INVALID_ARGUMENT, one claiming
 *     more epochs than the daemon has, or epochs of a fit it does not know,
 *     FAILED_PRECONDITION, each naming the problem and changing nothing;
 *   - a resumable Fit the client cancelled mid-way (a broken connection)
 *     and sent again continues in memory: the weights and the epoch ends
 *     are those of a twin program's uninterrupted fit;
 *   - the daemon keeps serving a bystander session throughout.
 */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "itest.h"

#define FREE(p) ((p) ? protobuf_c_message_free_unpacked(&(p)->base, NULL) : (void)0)
#define N 30

static itest_conn *C;
static char S[64], S2[64], DS[64], P[64];
static float X[N * 4];
static int32_t Y[N];
static float W[N];

/* x, y and (when w_n > 0) w_n weights; returns the gRPC status */
static int upload(const char *sid, const float *w, int64_t w_n, int with_y, char *id, itest_res *r)
{
    int64_t xs[2] = {N, 4}, ys[1] = {N}, ws[1] = {w_n};
    Rtrain__V1__DataPart px = itest_raw_part(RTRAIN__V1__DATA_ROLE__ROLE_FEATURES,
                                             RTRAIN__V1__DTYPE__F32, xs, 2, sizeof X);
    Rtrain__V1__DataPart py = itest_raw_part(RTRAIN__V1__DATA_ROLE__ROLE_LABELS,
                                             RTRAIN__V1__DTYPE__I32, ys, 1, sizeof Y);
    Rtrain__V1__DataPart pw = itest_raw_part(RTRAIN__V1__DATA_ROLE__ROLE_SAMPLE_WEIGHTS,
                                             RTRAIN__V1__DTYPE__F32, ws, 1,
                                             sizeof(float) * (size_t)w_n);
    Rtrain__V1__DataPart *pp[3];
    int n = 0;
    uint8_t buf[sizeof X + sizeof Y + sizeof W];
    size_t len = 0;
    pp[n++] = &px;
    memcpy(buf, X, sizeof X);
    len += sizeof X;
    if (with_y) {
        pp[n++] = &py;
        memcpy(buf + len, Y, sizeof Y);
        len += sizeof Y;
    }
    if (w_n > 0) {
        pp[n++] = &pw;
        memcpy(buf + len, w, sizeof(float) * (size_t)w_n);
        len += sizeof(float) * (size_t)w_n;
    }
    return itest_upload(C, sid, pp, n, buf, len, 1 << 16, id, r);
}

static Rtrain__V1__CompileResponse *compile(const char *sid, uint32_t batch, const char *from,
                                            int hidden, itest_res *r)
{
    static Rtrain__V1__TrainConfig cfg;
    itest_iris_config(&cfg);
    cfg.batch_size = batch;
    cfg.optimizer = "adam";
    Rtrain__V1__CompileRequest q = RTRAIN__V1__COMPILE_REQUEST__INIT;
    q.session_id = (char *)sid;
    q.model_case = RTRAIN__V1__COMPILE_REQUEST__MODEL_GRAPH;
    q.graph = itest_iris_graph(hidden);
    q.config = &cfg;
    q.state_from_program = (char *)(from ? from : "");
    Rtrain__V1__CompileResponse *p = NULL;
    itest_unary(C, "Compile", &q.base, &rtrain__v1__compile_response__descriptor,
                (ProtobufCMessage **)&p, r);
    return p;
}

static int run(const char *pid, uint64_t steps, float lr, itest_res *r)
{
    Rtrain__V1__RunStepsRequest q = RTRAIN__V1__RUN_STEPS_REQUEST__INIT;
    q.session_id = S;
    q.program_id = (char *)pid;
    q.dataset_id = DS;
    q.steps = steps;
    q.learning_rate = lr;
    Rtrain__V1__RunStepsResponse *p = NULL;
    int st = itest_unary(C, "RunSteps", &q.base, &rtrain__v1__run_steps_response__descriptor,
                         (ProtobufCMessage **)&p, r);
    FREE(p);
    return st;
}

static Rtrain__V1__GetWeightsResponse *weights(const char *pid)
{
    return itest_get_weights(C, S, pid);
}

static int same_tensors(const Rtrain__V1__GetWeightsResponse *a,
                        const Rtrain__V1__GetWeightsResponse *b)
{
    if (!a || !b || a->n_weights != b->n_weights)
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
    for (int i = 0; i < N; i++) {
        Y[i] = i % 3;
        W[i] = 0.5f + 0.1f * (float)(i % 4);
    }
    CHECK(itest_session(C, "fit-state", S) == 0 && itest_session(C, "bystander", S2) == 0,
          "sessions");
    itest_res r;
    CHECK(upload(S, W, N, 1, DS, &r) == 0, "weighted upload: %d %s", r.status, r.details);
    itest_res_free(&r);
    Rtrain__V1__CompileResponse *p = compile(S, 10, NULL, 8, &r);
    CHECK(p != NULL, "compile: %d %s", r.status, r.details);
    if (p)
        snprintf(P, sizeof P, "%s", p->program_id);
    FREE(p);
    itest_res_free(&r);
}

static void test_bad_sample_weights(void)
{
    itest_res r;
    char id[64];
    float neg[N];
    memcpy(neg, W, sizeof neg);
    neg[7] = -2.0f;
    int st = upload(S, neg, N, 1, id, &r);
    CHECK(st == GRPC_STATUS_INVALID_ARGUMENT && strstr(r.details, "sample 7") &&
              strstr(r.details, ">= 0"),
          "negative weight: %d %s", st, r.details);
    itest_res_free(&r);
    st = upload(S, W, N - 1, 1, id, &r);
    CHECK(st == GRPC_STATUS_INVALID_ARGUMENT && strstr(r.details, "sample weights"),
          "short weights: %d %s", st, r.details);
    itest_res_free(&r);
    st = upload(S, W, N, 0, id, &r);
    CHECK(st == GRPC_STATUS_INVALID_ARGUMENT && strstr(r.details, "need labels"),
          "weights without labels: %d %s", st, r.details);
    itest_res_free(&r);
}

static void test_learning_rate(void)
{
    itest_res r;
    Rtrain__V1__GetWeightsResponse *w0 = weights(P);
    CHECK(w0 && fabsf(w0->learning_rate - 0.01f) < 1e-9f, "config rate %g",
          w0 ? w0->learning_rate : -1.0);
    int st = run(P, 2, -0.5f, &r);
    CHECK(st == GRPC_STATUS_INVALID_ARGUMENT && strstr(r.details, "learning_rate"),
          "negative rate: %d %s", st, r.details);
    itest_res_free(&r);
    st = run(P, 2, NAN, &r);
    CHECK(st == GRPC_STATUS_INVALID_ARGUMENT, "NaN rate: %d %s", st, r.details);
    itest_res_free(&r);
    Rtrain__V1__GetWeightsResponse *w1 = weights(P);
    CHECK(same_tensors(w0, w1) && w1 && w1->global_step == w0->global_step,
          "a refused call changed the program");
    st = run(P, 3, 0.003f, &r);
    CHECK(st == 0, "RunSteps lr 0.003: %d %s", st, r.details);
    itest_res_free(&r);
    Rtrain__V1__GetWeightsResponse *w2 = weights(P);
    CHECK(w2 && w2->learning_rate == 0.003f && w2->global_step == 3, "rate %g step %llu",
          w2 ? w2->learning_rate : -1.0, w2 ? (unsigned long long)w2->global_step : 0ull);
    /* 0 leaves the rate as set */
    st = run(P, 1, 0.0f, &r);
    CHECK(st == 0, "RunSteps: %d %s", st, r.details);
    itest_res_free(&r);
    Rtrain__V1__GetWeightsResponse *w3 = weights(P);
    CHECK(w3 && w3->learning_rate == 0.003f, "rate kept");
    FREE(w0);
    FREE(w1);
    FREE(w2);
    FREE(w3);
}

static void test_state_from_program(void)
{
    itest_res r;
    Rtrain__V1__GetWeightsResponse *w0 = weights(P);
    Rtrain__V1__CompileResponse *p = compile(S, 15, P, 8, &r);
    CHECK(p != NULL, "compile from %s: %d %s", P, r.status, r.details);
    itest_res_free(&r);
    if (p) {
        Rtrain__V1__GetWeightsResponse *w1 = weights(p->program_id);
        CHECK(same_tensors(w0, w1), "weights carried");
        CHECK(w1 && w0 && w1->global_step == w0->global_step && w1->learning_rate == 0.003f,
              "step and rate carried");
        FREE(w1);
    }
    FREE(p);
    p = compile(S, 15, "p-00000000000000000000000000000000", 8, &r);
    CHECK(!p && r.status == GRPC_STATUS_NOT_FOUND && strstr(r.details, "state_from_program"),
          "unknown source: %d %s", r.status, r.details);
    FREE(p);
    itest_res_free(&r);
    p = compile(S, 15, P, 5, &r); /* other hidden width: other parameters */
    CHECK(!p && r.status == GRPC_STATUS_INVALID_ARGUMENT && strstr(r.details, "d1/kernel"),
          "incompatible source: %d %s", r.status, r.details);
    FREE(p);
    itest_res_free(&r);
    /* another session's program is not found */
    p = compile(S2, 15, P, 8, &r);
    CHECK(!p && r.status == GRPC_STATUS_NOT_FOUND, "other session: %d %s", r.status, r.details);
    FREE(p);
    itest_res_free(&r);
    /* the bystander still trains */
    p = compile(S2, 10, NULL, 8, &r);
    CHECK(p != NULL, "bystander compile: %d %s", r.status, r.details);
    FREE(p);
    itest_res_free(&r);
    FREE(w0);
}

/* A Fit stream's events: the epoch ends (packed, in order) and the done. */
typedef struct fit_log {
    int epochs, done, progress;
    int cut_at;               /* > 0: cancel the stream at this epoch end */
    uint64_t end_step;
    uint8_t *ep[8];           /* the first 8 epoch ends, packed */
    size_t ep_len[8];
    double loss[5000];        /* every epoch's train loss, by EpochEnd.epoch */
} fit_log;

static int on_fit_event(void *ud, const uint8_t *data, size_t len)
{
    fit_log *f = ud;
    Rtrain__V1__FitEvent *e = rtrain__v1__fit_event__unpack(NULL, len, data);
    if (!e)
        return -1;
    if (e->event_case == RTRAIN__V1__FIT_EVENT__EVENT_EPOCH_END) {
        if (f->epochs < 8) {
            size_t n = rtrain__v1__epoch_end__get_packed_size(e->epoch_end);
            f->ep[f->epochs] = malloc(n);
            f->ep_len[f->epochs] = n;
            rtrain__v1__epoch_end__pack(e->epoch_end, f->ep[f->epochs]);
        }
        f->epochs++;
        uint64_t k = e->epoch_end->epoch;
        if (k >= 1 && k <= 5000 && e->epoch_end->train)
            f->loss[k - 1] = e->epoch_end->train->loss;
    }
    f->progress += e->event_case == RTRAIN__V1__FIT_EVENT__EVENT_PROGRESS;
    if (e->done) {
        f->done = 1;
        f->end_step = e->global_step;
    }
    rtrain__v1__fit_event__free_unpacked(e, NULL);
    return f->cut_at && f->epochs == f->cut_at;
}

static int fit_ds(const char *pid, const char *ds, uint64_t id, uint32_t epochs,
                  uint32_t received, int cut_at, fit_log *f, itest_res *r)
{
    Rtrain__V1__FitRequest q = RTRAIN__V1__FIT_REQUEST__INIT;
    q.session_id = S;
    q.program_id = (char *)pid;
    q.dataset_id = (char *)ds;
    q.epochs = epochs;
    q.progress_every = 1;
    q.fit_id = id;
    q.epochs_received = received;
    memset(f, 0, sizeof *f);
    f->cut_at = cut_at;
    return itest_server_stream(C, "Fit", &q.base, on_fit_event, f, r);
}

static int fit(uint64_t id, uint32_t epochs, uint32_t received, fit_log *f, itest_res *r)
{
    return fit_ds(P, DS, id, epochs, received, 0, f, r);
}

static void fit_log_free(fit_log *f)
{
    for (int i = 0; i < f->epochs && i < 8; i++)
        free(f->ep[i]);
}

static void test_fit_resend(void)
{
    const uint64_t id = 0x5eed0f17ull;
    fit_log a, b;
    itest_res r;
    int st = fit(id, 3, 0, &a, &r);
    CHECK(st == 0 && a.done && a.epochs == 3, "Fit: %d %s, %d epochs", st, r.details, a.epochs);
    itest_res_free(&r);
    Rtrain__V1__GetWeightsResponse *w0 = weights(P);
    /* the client lost the last two epoch ends (and the done): they come
     * again as they were, and nothing runs */
    st = fit(id, 3, 1, &b, &r);
    CHECK(st == 0 && b.done && b.epochs == 2 && b.progress == 0,
          "resend: %d %s, %d epochs, %d progress", st, r.details, b.epochs, b.progress);
    itest_res_free(&r);
    for (int i = 0; i < 2 && i < b.epochs; i++)
        CHECK(b.ep_len[i] == a.ep_len[i + 1] && !memcmp(b.ep[i], a.ep[i + 1], b.ep_len[i]),
              "resent epoch end %d is the original", i + 2);
    Rtrain__V1__GetWeightsResponse *w1 = weights(P);
    CHECK(w0 && w1 && w1->global_step == w0->global_step && same_tensors(w0, w1) &&
              b.end_step == w0->global_step,
          "the resend ran no step");
    fit_log_free(&a);
    fit_log_free(&b);
    /* refused, naming the problem, nothing run */
    st = fit(id, 4, 0, &b, &r);
    CHECK(st == 3 && strstr(r.details, "was started with 3 epochs"), "other epochs: %d %s", st,
          r.details);
    itest_res_free(&r);
    fit_log_free(&b);
    st = fit(id, 3, 5, &b, &r);
    CHECK(st == 9 && strstr(r.details, "client has 5 epochs"), "more epochs: %d %s", st,
          r.details);
    itest_res_free(&r);
    fit_log_free(&b);
    st = fit(id + 1, 3, 2, &b, &r);
    CHECK(st == 9 && strstr(r.details, "unknown here"), "unknown fit: %d %s", st, r.details);
    itest_res_free(&r);
    fit_log_free(&b);
    Rtrain__V1__GetWeightsResponse *w2 = weights(P);
    CHECK(w2 && w1 && w2->global_step == w1->global_step && same_tensors(w1, w2),
          "the refusals changed nothing");
    FREE(w0);
    FREE(w1);
    FREE(w2);
    CHECK(itest_session(C, "after-fit-resend", S2) == 0, "the daemon keeps serving");
}

/* NB samples of the iris-shaped set: 6000 steps an epoch at batch 5, so the
 * 128 epoch ends the daemon keeps are ~770k steps (seconds), far more than it runs
 * before a cancel reaches it, even on a loaded machine. */
#define NB 30000

static int upload_big(char *id, itest_res *r)
{
    static float xb[NB * 4];
    static int32_t yb[NB];
    for (int i = 0; i < NB * 4; i++) xb[i] = sinf(0.37f * (float)i);
    for (int i = 0; i < NB; i++) yb[i] = i % 3;
    int64_t xs[2] = {NB, 4}, ys[1] = {NB};
    Rtrain__V1__DataPart px = itest_raw_part(RTRAIN__V1__DATA_ROLE__ROLE_FEATURES,
                                             RTRAIN__V1__DTYPE__F32, xs, 2, sizeof xb);
    Rtrain__V1__DataPart py = itest_raw_part(RTRAIN__V1__DATA_ROLE__ROLE_LABELS,
                                             RTRAIN__V1__DTYPE__I32, ys, 1, sizeof yb);
    Rtrain__V1__DataPart *pp[2] = {&px, &py};
    static uint8_t buf[sizeof xb + sizeof yb];
    memcpy(buf, xb, sizeof xb);
    memcpy(buf + sizeof xb, yb, sizeof yb);
    return itest_upload(C, S, pp, 2, buf, sizeof buf, 1 << 16, id, r);
}

static void test_fit_cut_and_resent(void)
{
    itest_res r;
    char pa[64] = "", pb[64] = "", db[64] = "";
    CHECK(upload_big(db, &r) == 0, "upload: %d %s", r.status, r.details);
    itest_res_free(&r);
    for (int i = 0; i < 2; i++) {
        Rtrain__V1__CompileResponse *p = compile(S, 5, NULL, 8, &r);
        CHECK(p != NULL, "compile: %d %s", r.status, r.details);
        if (p)
            snprintf(i ? pb : pa, 64, "%s", p->program_id);
        FREE(p);
        itest_res_free(&r);
    }
    /* the twin, uninterrupted: 20 epochs of 6000 steps */
    enum { EP = 20 };
    static fit_log ref, a, b;
    int st = fit_ds(pa, db, 0x7717ull, EP, 0, 0, &ref, &r);
    CHECK(st == 0 && ref.done && ref.epochs == EP, "reference: %d %s", st, r.details);
    itest_res_free(&r);
    /* cut at the 3rd epoch end (the daemon stops where the cancel reaches
     * it, between two steps), then sent again with the epochs that came */
    fit_ds(pb, db, 0x7718ull, EP, 0, 3, &a, &r);
    itest_res_free(&r);
    CHECK(a.epochs == 3 && !a.done, "cut: %d epochs, done %d", a.epochs, a.done);
    st = fit_ds(pb, db, 0x7718ull, EP, (uint32_t)a.epochs, 0, &b, &r);
    CHECK(st == 0 && b.done && a.epochs + b.epochs == EP, "resent: %d %s, %d + %d epochs", st,
          r.details, a.epochs, b.epochs);
    itest_res_free(&r);
    int same = 1;
    for (int k = 0; k < EP; k++)
        same &= (k < a.epochs ? a.loss[k] : b.loss[k]) == ref.loss[k];
    CHECK(same, "every epoch once, with the twin's loss");
    Rtrain__V1__GetWeightsResponse *wa = weights(pa), *wb = weights(pb);
    CHECK(same_tensors(wa, wb) && wa->global_step == wb->global_step,
          "weights as the uninterrupted twin's");
    FREE(wa);
    FREE(wb);
    fit_log_free(&ref);
    fit_log_free(&a);
    fit_log_free(&b);
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
    RUN(setup);
    RUN(test_bad_sample_weights);
    RUN(test_learning_rate);
    RUN(test_state_from_program);
    RUN(test_fit_resend);
    RUN(test_fit_cut_and_resent);
    itest_disconnect(C);
    int code = itest_daemon_stop(&d, SIGTERM);
    CHECK(code == 0, "daemon exit %d", code);
    return itest_summary();
}
