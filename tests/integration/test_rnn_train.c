/* test_rnn_train.c - a Keras model with Embedding, Bidirectional GRU and
 * LSTM (data/embedding_bigru_lstm_keras2.json) imported, compiled and
 * trained by a real rtraind on token sequences uploaded as CSV; the same
 * model with dropout and recurrent_dropout (inside Bidirectional too)
 * trains, two programs of one seed train to the same loss and it differs
 * from the model without dropout; then the bad inputs: a fractional token
 * (the error names the sample), a dropout rate outside [0, 1) and an RNN
 * setting the engine does not implement (the errors name them). The
 * daemon keeps serving after each. */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "itest.h"

#define FREE(m) do { if (m) protobuf_c_message_free_unpacked(&(m)->base, NULL); (m) = NULL; } while (0)

static struct {
    itest_conn *c;
    char sid[40], data[40], bad[40];
} T;

static int ping_ok(void)
{
    Rtrain__V1__PingRequest q = RTRAIN__V1__PING_REQUEST__INIT;
    itest_res r;
    int st = itest_unary(T.c, "Ping", &q.base, NULL, NULL, &r);
    itest_res_free(&r);
    return st == 0;
}

static int upload(const char *csv, char *id)
{
    Rtrain__V1__DataPart p = RTRAIN__V1__DATA_PART__INIT;
    p.role = RTRAIN__V1__DATA_ROLE__ROLE_BOTH;
    p.format = RTRAIN__V1__DATA_FORMAT__FORMAT_CSV;
    p.length = strlen(csv);
    p.label_column = -1;
    Rtrain__V1__DataPart *pp[1] = {&p};
    itest_res r;
    int st = itest_upload(T.c, T.sid, pp, 1, (const uint8_t *)csv, p.length, 1 << 16, id, &r);
    if (st) fprintf(stderr, "upload: %d %s\n", st, r.details);
    itest_res_free(&r);
    return st;
}

static Rtrain__V1__CompileResponse *compile(const char *json, itest_res *r)
{
    Rtrain__V1__TrainConfig cfg = RTRAIN__V1__TRAIN_CONFIG__INIT;
    static char *metrics[1] = {"accuracy"};
    cfg.loss = "binary_crossentropy";
    cfg.optimizer = "adam";
    cfg.learning_rate = 0.01f;
    cfg.batch_size = 16;
    cfg.seed = 3;
    cfg.metrics = metrics;
    cfg.n_metrics = 1;
    cfg.label_dtype = RTRAIN__V1__DTYPE__F32;
    Rtrain__V1__CompileRequest q = RTRAIN__V1__COMPILE_REQUEST__INIT;
    q.session_id = T.sid;
    q.model_case = RTRAIN__V1__COMPILE_REQUEST__MODEL_KERAS_JSON;
    q.keras_json = (char *)json;
    q.config = &cfg;
    Rtrain__V1__CompileResponse *p = NULL;
    itest_unary(T.c, "Compile", &q.base, &rtrain__v1__compile_response__descriptor,
                (ProtobufCMessage **)&p, r);
    return p;
}

static Rtrain__V1__Metrics evaluate(const char *pid)
{
    Rtrain__V1__EvaluateRequest q = RTRAIN__V1__EVALUATE_REQUEST__INIT;
    q.session_id = T.sid;
    q.program_id = (char *)pid;
    q.dataset_id = T.data;
    Rtrain__V1__EvaluateResponse *p = NULL;
    itest_res r;
    itest_unary(T.c, "Evaluate", &q.base, &rtrain__v1__evaluate_response__descriptor,
                (ProtobufCMessage **)&p, &r);
    Rtrain__V1__Metrics m = RTRAIN__V1__METRICS__INIT;
    m.loss = NAN;
    CHECK(p && p->metrics, "evaluate: %d %s", r.status, r.details);
    if (p && p->metrics) {
        m.loss = p->metrics->loss;
        m.accuracy = p->metrics->accuracy;
    }
    FREE(p);
    itest_res_free(&r);
    return m;
}

static int run_steps(const char *pid, const char *did, uint64_t steps, itest_res *r)
{
    Rtrain__V1__RunStepsRequest q = RTRAIN__V1__RUN_STEPS_REQUEST__INIT;
    q.session_id = T.sid;
    q.program_id = (char *)pid;
    q.dataset_id = (char *)did;
    q.steps = steps;
    Rtrain__V1__RunStepsResponse *p = NULL;
    int st = itest_unary(T.c, "RunSteps", &q.base, &rtrain__v1__run_steps_response__descriptor,
                         (ProtobufCMessage **)&p, r);
    FREE(p);
    return st;
}

/* 192 sequences of 8 tokens in 0..19; the label: the first token is >= 10
 * (the information has to travel through the recurrences) */
static char *make_csv(int fractional_row)
{
    char *csv = malloc(192 * 64), *o = csv;
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 192; i++) {
        int first = 0;
        for (int t = 0; t < 8; t++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            int tok = (int)((s >> 33) % 20);
            if (t == 0) first = tok;
            if (i == fractional_row && t == 3)
                o += sprintf(o, "%d.5,", tok);
            else
                o += sprintf(o, "%d,", tok);
        }
        o += sprintf(o, "%d\n", first >= 10);
    }
    return csv;
}

static void test_train(void)
{
    size_t len;
    char *csv = make_csv(-1);
    CHECK(upload(csv, T.data) == 0, "upload");
    free(csv);
    char *js = (char *)itest_read_file(
        RT_ITEST_DATA_DIR "/embedding_bigru_lstm_keras2.json", &len);
    CHECK(js != NULL, "model file");
    if (!js) return;
    itest_res r;
    Rtrain__V1__CompileResponse *p = compile(js, &r);
    CHECK(p != NULL, "compile: %d %s", r.status, r.details);
    itest_res_free(&r);
    free(js);
    if (!p) return;
    /* Embedding 20x8; GRU halves 3*(8*18 + 6*18 + 2*18); LSTM 12*20 + 5*20
     * + 20; Dense 5 + 1 */
    const uint64_t want = 160 + 2 * (144 + 108 + 36) + (240 + 100 + 20) + 6;
    CHECK(p->report && p->report->param_count == want, "param count %llu, want %llu",
          p->report ? (unsigned long long)p->report->param_count : 0ull,
          (unsigned long long)want);
    char pid[40];
    snprintf(pid, sizeof pid, "%s", p->program_id);
    FREE(p);
    Rtrain__V1__Metrics m0 = evaluate(pid);
    CHECK(run_steps(pid, T.data, 120, &r) == 0, "steps: %d %s", r.status, r.details);
    itest_res_free(&r);
    Rtrain__V1__Metrics m1 = evaluate(pid);
    CHECK(m1.loss < m0.loss * 0.7, "loss falls: %.4f -> %.4f", m0.loss, m1.loss);
    CHECK(m1.accuracy > m0.accuracy, "accuracy rises: %.3f -> %.3f", m0.accuracy, m1.accuracy);
    printf("embedding+bigru+lstm: loss %.3f -> %.3f, accuracy %.2f -> %.2f\n", m0.loss,
           m1.loss, m0.accuracy, m1.accuracy);

    /* a fractional token in sample 57: the step is refused, naming it */
    csv = make_csv(57);
    CHECK(upload(csv, T.bad) == 0, "upload bad");
    free(csv);
    int st = run_steps(pid, T.bad, 1, &r);
    CHECK(st == 3 /* INVALID_ARGUMENT */ && strstr(r.details, "sample 57") &&
              strstr(r.details, "embedding"),
          "fractional token: %d %s", st, r.details);
    itest_res_free(&r);
    CHECK(ping_ok(), "ping after the bad data");
    /* and training on the good data still works */
    CHECK(run_steps(pid, T.data, 2, &r) == 0, "steps after: %d %s", r.status, r.details);
    itest_res_free(&r);
}

/* the model file with the GRU's dropout and the LSTM's dropout and
 * recurrent_dropout set (malloc'd) */
static char *with_dropout(const char *gru_drop, const char *lstm_drop, const char *lstm_rdrop)
{
    size_t len;
    char *js = (char *)itest_read_file(
        RT_ITEST_DATA_DIR "/embedding_bigru_lstm_keras2.json", &len);
    if (!js) return NULL;
    /* the values are written over "0.0" (three characters each) */
    char *g = strstr(js, "\"units\": 6"), *l = strstr(js, "\"units\": 5");
    char *gd = g ? strstr(g, "\"dropout\": 0.0") : NULL;
    char *ld = l ? strstr(l, "\"dropout\": 0.0") : NULL;
    char *lr = l ? strstr(l, "\"recurrent_dropout\": 0.0") : NULL;
    if (!gd || !ld || !lr) {
        free(js);
        return NULL;
    }
    memcpy(gd + strlen("\"dropout\": "), gru_drop, 3);
    memcpy(ld + strlen("\"dropout\": "), lstm_drop, 3);
    memcpy(lr + strlen("\"recurrent_dropout\": "), lstm_rdrop, 3);
    return js;
}

static void test_dropout_train(void)
{
    char pid[3][40];
    /* 0, 1: dropout 0.2 in the Bidirectional GRU, 0.2 and recurrent 0.3 in
     * the LSTM; 2: no dropout */
    for (int k = 0; k < 3; k++) {
        char *js = k < 2 ? with_dropout("0.2", "0.2", "0.3") : with_dropout("0.0", "0.0", "0.0");
        CHECK(js != NULL, "model file with dropout");
        if (!js) return;
        itest_res r;
        Rtrain__V1__CompileResponse *p = compile(js, &r);
        free(js);
        CHECK(p != NULL, "compile with dropout: %d %s", r.status, r.details);
        itest_res_free(&r);
        if (!p) return;
        snprintf(pid[k], sizeof pid[k], "%s", p->program_id);
        FREE(p);
    }
    Rtrain__V1__Metrics m0 = evaluate(pid[0]);
    double loss[3];
    for (int k = 0; k < 3; k++) {
        itest_res r;
        CHECK(run_steps(pid[k], T.data, 120, &r) == 0, "steps: %d %s", r.status, r.details);
        itest_res_free(&r);
        loss[k] = evaluate(pid[k]).loss;
    }
    CHECK(loss[0] < m0.loss * 0.8, "loss falls with dropout: %.4f -> %.4f", m0.loss, loss[0]);
    CHECK(loss[0] == loss[1], "one seed, one result: %.9g vs %.9g", loss[0], loss[1]);
    CHECK(loss[0] != loss[2], "dropout changes training: %.9g vs %.9g", loss[0], loss[2]);
    printf("with dropout: loss %.3f -> %.3f (without: %.3f)\n", m0.loss, loss[0], loss[2]);
}

static void test_unsupported(void)
{
    size_t len;
    char *js = (char *)itest_read_file(
        RT_ITEST_DATA_DIR "/embedding_bigru_lstm_keras2.json", &len);
    CHECK(js != NULL, "model file");
    if (!js) return;
    /* recurrent_dropout 1.5 on the LSTM: an error naming it */
    char *at = strstr(js, "\"units\": 5");
    CHECK(at != NULL, "lstm config");
    if (at) {
        char *d = strstr(at, "\"recurrent_dropout\": 0.0");
        CHECK(d != NULL, "recurrent_dropout");
        if (d) memcpy(d + strlen("\"recurrent_dropout\": "), "1.5", 3);
        itest_res r;
        Rtrain__V1__CompileResponse *p = compile(js, &r);
        CHECK(p == NULL && r.status == 3 /* INVALID_ARGUMENT */ &&
                  strstr(r.details, "recurrent_dropout") &&
                  strstr(r.details, "'lstm'"),
              "recurrent_dropout: %d %s", r.status, r.details);
        FREE(p);
        itest_res_free(&r);
        /* stateful without a fixed batch size: refused as Keras refuses it,
         * named */
        if (d) memcpy(d + strlen("\"recurrent_dropout\": "), "0.0", 3);
        char *lc = strstr(js, "\"class_name\": \"LSTM\"");
        char *sf = lc ? strstr(lc, "\"stateful\": false") : NULL;
        CHECK(sf != NULL, "stateful");
        if (sf) memcpy(sf + strlen("\"stateful\": "), "true ", 5);
        p = compile(js, &r);
        CHECK(p == NULL && r.status == 3 /* INVALID_ARGUMENT */ &&
                  strstr(r.details, "stateful LSTM needs a fixed batch size") &&
                  strstr(r.details, "'lstm'"),
              "stateful: %d %s", r.status, r.details);
        FREE(p);
        itest_res_free(&r);
    }
    free(js);
    CHECK(ping_ok(), "ping after the unsupported setting");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s RTRAIND\n", argv[0]);
        return 2;
    }
    itest_daemon d;
    if (itest_daemon_start(&d, argv[1], NULL) < 0) return 1;
    T.c = itest_connect(d.addr);
    CHECK(itest_session(T.c, "rnn", T.sid) == 0, "session");
    RUN(test_train);
    RUN(test_dropout_train);
    RUN(test_unsupported);
    itest_disconnect(T.c);
    int code = itest_daemon_stop(&d, SIGTERM);
    CHECK(code == 0, "daemon exit %d", code);
    return itest_summary();
}
