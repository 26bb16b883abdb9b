/*
 * test_layers_daemon.c - the new Keras layers through a real rtraind:
 * each model in tests/layers/data (keras_seq1d, keras_func2d, keras_misc:
 * together every layer of import_keras_layers.c) is compiled from its
 * Keras JSON, trained 300 steps on a synthetic 3-class data set of the
 * model's input size (uploaded as CSV) and evaluated: the loss must fall.
 * A model with mismatched merge shapes gets INVALID_ARGUMENT naming the
 * layer, and the daemon keeps serving the session afterwards.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "itest.h"

#define FREE(m) do { if (m) protobuf_c_message_free_unpacked(&(m)->base, NULL); (m) = NULL; } while (0)

static itest_conn *C;
static char SID[40];

static char *read_model(const char *dir, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/data/%s", dir, name);
    size_t len;
    return (char *)itest_read_file(path, &len);
}

static Rtrain__V1__CompileResponse *compile(const char *keras, itest_res *r)
{
    static char *metrics[1] = {"accuracy"};
    Rtrain__V1__TrainConfig cfg = RTRAIN__V1__TRAIN_CONFIG__INIT;
    cfg.loss = "sparse_categorical_crossentropy";
    cfg.from_logits = 1;
    cfg.optimizer = "adam";
    cfg.learning_rate = 0.01f;
    cfg.batch_size = 16;
    cfg.seed = 3;
    cfg.metrics = metrics;
    cfg.n_metrics = 1;
    Rtrain__V1__CompileRequest q = RTRAIN__V1__COMPILE_REQUEST__INIT;
    q.session_id = SID;
    q.model_case = RTRAIN__V1__COMPILE_REQUEST__MODEL_KERAS_JSON;
    q.keras_json = (char *)keras;
    q.config = &cfg;
    Rtrain__V1__CompileResponse *p = NULL;
    itest_unary(C, "Compile", &q.base, &rtrain__v1__compile_response__descriptor,
                (ProtobufCMessage **)&p, r);
    return p;
}

/* n rows of nf features in [-1, 1) and a class 0..2 from their weighted sum */
static int upload(int nf, int n, char *did)
{
    size_t cap = (size_t)n * ((size_t)nf + 1) * 12 + 64, len = 0;
    char *csv = malloc(cap);
    uint64_t s = 1234567;
    for (int i = 0; i < n; i++) {
        double m = 0;
        for (int k = 0; k < nf; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            double v = (double)((s >> 40) & 0xffff) / 32768.0 - 1.0;
            m += v * (k % 2 ? 1.0 : -1.0);
            len += (size_t)snprintf(csv + len, cap - len, "%.4f,", v);
        }
        int cls = m < -0.3 * sqrt(nf) ? 0 : m > 0.3 * sqrt(nf) ? 2 : 1;
        len += (size_t)snprintf(csv + len, cap - len, "%d\n", cls);
    }
    Rtrain__V1__DataPart p = RTRAIN__V1__DATA_PART__INIT;
    p.role = RTRAIN__V1__DATA_ROLE__ROLE_BOTH;
    p.format = RTRAIN__V1__DATA_FORMAT__FORMAT_CSV;
    p.length = len;
    p.label_column = -1;
    Rtrain__V1__DataPart *pp[1] = {&p};
    itest_res r;
    int st = itest_upload(C, SID, pp, 1, (const uint8_t *)csv, len, 1 << 16, did, &r);
    if (st) fprintf(stderr, "upload: %d %s\n", st, r.details);
    itest_res_free(&r);
    free(csv);
    return st;
}

static Rtrain__V1__Metrics evaluate(const char *pid, const char *did)
{
    Rtrain__V1__EvaluateRequest q = RTRAIN__V1__EVALUATE_REQUEST__INIT;
    q.session_id = SID;
    q.program_id = (char *)pid;
    q.dataset_id = (char *)did;
    Rtrain__V1__EvaluateResponse *p = NULL;
    itest_res r;
    itest_unary(C, "Evaluate", &q.base, &rtrain__v1__evaluate_response__descriptor,
                (ProtobufCMessage **)&p, &r);
    Rtrain__V1__Metrics m = RTRAIN__V1__METRICS__INIT;
    m.loss = NAN;
    if (p && p->metrics) m = *p->metrics;
    else fprintf(stderr, "evaluate: %d %s\n", r.status, r.details);
    FREE(p);
    itest_res_free(&r);
    return m;
}

static void train_model(const char *dir, const char *file, int nf)
{
    char *js = read_model(dir, file), did[40], pid[40];
    CHECK(js != NULL, "%s", file);
    if (!js) return;
    CHECK(upload(nf, 96, did) == 0, "%s: upload", file);
    itest_res r;
    Rtrain__V1__CompileResponse *p = compile(js, &r);
    CHECK(p != NULL, "compile %s: %d %s", file, r.status, r.details);
    itest_res_free(&r);
    free(js);
    if (!p) return;
    snprintf(pid, sizeof pid, "%s", p->program_id);
    FREE(p);
    Rtrain__V1__Metrics m0 = evaluate(pid, did);
    Rtrain__V1__RunStepsRequest q = RTRAIN__V1__RUN_STEPS_REQUEST__INIT;
    q.session_id = SID;
    q.program_id = pid;
    q.dataset_id = did;
    q.steps = 300;
    Rtrain__V1__RunStepsResponse *rs = NULL;
    itest_unary(C, "RunSteps", &q.base, &rtrain__v1__run_steps_response__descriptor,
                (ProtobufCMessage **)&rs, &r);
    CHECK(rs != NULL, "%s steps: %d %s", file, r.status, r.details);
    FREE(rs);
    itest_res_free(&r);
    Rtrain__V1__Metrics m1 = evaluate(pid, did);
    CHECK(isfinite(m1.loss) && m1.loss < 0.9 * m0.loss, "%s: loss %.4f -> %.4f", file, m0.loss,
          m1.loss);
    printf("%s: loss %.4f -> %.4f, accuracy %.2f -> %.2f\n", file, m0.loss, m1.loss,
           m0.accuracy, m1.accuracy);
}

static const char *D;

static void test_seq1d(void) { train_model(D, "keras_seq1d.json", 30); }
static void test_func2d(void) { train_model(D, "keras_func2d.json", 108); }
static void test_misc(void) { train_model(D, "keras_misc.json", 48); }

static void test_bad_merge(void)
{
    const char *js =
        "{\"class_name\": \"Functional\", \"config\": {\"name\": \"m\", \"layers\": ["
        "{\"class_name\": \"InputLayer\", \"name\": \"in\", \"inbound_nodes\": [],"
        " \"config\": {\"batch_input_shape\": [null, 4], \"name\": \"in\"}},"
        "{\"class_name\": \"Dense\", \"name\": \"a\", \"config\": {\"name\": \"a\", \"units\": 3},"
        " \"inbound_nodes\": [[[\"in\", 0, 0, {}]]]},"
        "{\"class_name\": \"Multiply\", \"name\": \"out\", \"config\": {\"name\": \"out\"},"
        " \"inbound_nodes\": [[[\"a\", 0, 0, {}], [\"in\", 0, 0, {}]]]}],"
        " \"input_layers\": [[\"in\", 0, 0]], \"output_layers\": [[\"out\", 0, 0]]}}";
    itest_res r;
    Rtrain__V1__CompileResponse *p = compile(js, &r);
    CHECK(!p && r.status == 3 && strstr(r.details, "(layer 'out')"), "bad merge: %d '%s'",
          r.status, r.details);
    FREE(p);
    itest_res_free(&r);
    /* the session still compiles and trains */
    test_misc();
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s RTRAIND LAYERS_DIR\n", argv[0]);
        return 2;
    }
    D = argv[2];
    itest_daemon d;
    if (itest_daemon_start(&d, argv[1], NULL) < 0) return 1;
    C = itest_connect(d.addr);
    if (itest_session(C, "layers", SID) != 0) return 1;
    RUN(test_seq1d);
    RUN(test_func2d);
    RUN(test_misc);
    RUN(test_bad_merge);
    itest_disconnect(C);
    itest_daemon_stop(&d, 15);
    return itest_summary();
}
