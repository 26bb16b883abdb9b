/*
 * test_guards.c - small holes, each against a real rtraind:
 *   - upload reservations: two uploads that declare 64 MiB each and then
 *     stall hold a window each (--max-upload-bytes / (2 x --max-uploads)),
 *     not their declarations (rtrain_upload_reserved_bytes says so), and a
 *     10 MB upload from the same (single) user goes through beside them;
 *     one of the stalled ones then sends everything and completes (its
 *     reservation grows as its bytes come);
 *   - a diverging run: RunSteps and Fit report a non-finite loss
 *     (non_finite, first_non_finite_step) instead of a plain OK, and with
 *     stop_on_nan fail FAILED_PRECONDITION at that step, naming it;
 *   - a Param whose initial value holds a NaN is refused, naming the param;
 *   - a Keras inbound node index out of range (99) is refused, naming the
 *     layer;
 *   - an NPY header whose shape tuple is not closed is refused.
 * Before the fix: the 10 MB upload was RESOURCE_EXHAUSTED, the NaN run
 * answered OK, and the three bad inputs were accepted.
 */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <xxhash.h>

#include "itest.h"

#define FREE(p) ((p) ? protobuf_c_message_free_unpacked(&(p)->base, NULL) : (void)0)

static itest_daemon D;
static itest_conn *C;
static char S[64];

/* x [n,4] f32 and y [n] i32 of an iris-like set, as one buffer */
static uint8_t *xy(int64_t n, size_t *len)
{
    *len = (size_t)n * 20;
    uint8_t *b = malloc(*len);
    float *x = (float *)b;
    int32_t *y = (int32_t *)(b + (size_t)n * 16);
    for (int64_t i = 0; i < n; i++) {
        for (int j = 0; j < 4; j++)
            x[i * 4 + j] = (float)((i * 7 + j * 3) % 11) / 11.0f;
        y[i] = (int32_t)(i % 3);
    }
    return b;
}

static double metric_when(const char *name, double want)
{
    double v = -1;
    for (int i = 0; i < 3000; i++) { /* the header is read on a cq thread */
        v = itest_metric(&D, name);
        if (v == want)
            break;
        usleep(10000);
    }
    return v;
}

static void test_stalled_uploads(void)
{
    const int64_t n = (64 << 20) / 20; /* 64 MiB, declared by each */
    size_t len;
    uint8_t *big = xy(n, &len);
    int64_t xs[2] = {n, 4}, ys[1] = {n};
    Rtrain__V1__DataPart px = itest_raw_part(RTRAIN__V1__DATA_ROLE__ROLE_FEATURES,
                                             RTRAIN__V1__DTYPE__F32, xs, 2, (size_t)n * 16);
    Rtrain__V1__DataPart py = itest_raw_part(RTRAIN__V1__DATA_ROLE__ROLE_LABELS,
                                             RTRAIN__V1__DTYPE__I32, ys, 1, (size_t)n * 4);
    Rtrain__V1__DataPart *pp[2] = {&px, &py};
    Rtrain__V1__DatasetHeader h = RTRAIN__V1__DATASET_HEADER__INIT;
    h.session_id = S;
    h.name = "stalled";
    h.parts = pp;
    h.n_parts = 2;
    h.total_bytes = len;
    itest_stream *st[2];
    for (int i = 0; i < 2; i++) {
        Rtrain__V1__UploadChunk c = RTRAIN__V1__UPLOAD_CHUNK__INIT;
        c.header = &h;
        st[i] = itest_stream_begin(C, "UploadDataset");
        CHECK(itest_stream_send(st[i], &c.base), "stalled upload %d: header sent", i);
    }
    /* --max-upload-bytes 128 MiB, 16 uploads: a window is 4 MiB */
    double held = metric_when("rtrain_upload_reserved_bytes", 2.0 * (4 << 20));
    CHECK(held == 2.0 * (4 << 20), "two stalled 64 MiB declarations reserve %.0f bytes, want "
          "two 4 MiB windows", held);

    size_t slen;
    const int64_t sn = 10000000 / 20;
    uint8_t *small = xy(sn, &slen);
    int64_t sxs[2] = {sn, 4}, sys_[1] = {sn};
    Rtrain__V1__DataPart sx = itest_raw_part(RTRAIN__V1__DATA_ROLE__ROLE_FEATURES,
                                             RTRAIN__V1__DTYPE__F32, sxs, 2, (size_t)sn * 16);
    Rtrain__V1__DataPart sy = itest_raw_part(RTRAIN__V1__DATA_ROLE__ROLE_LABELS,
                                             RTRAIN__V1__DTYPE__I32, sys_, 1, (size_t)sn * 4);
    Rtrain__V1__DataPart *sp[2] = {&sx, &sy};
    itest_res r;
    char id[64];
    int rc = itest_upload(C, S, sp, 2, small, slen, 1 << 20, id, &r);
    CHECK(rc == 0, "a 10 MB upload beside two stalled 64 MiB ones: %d %s", rc, r.details);
    itest_res_free(&r);
    free(small);

    /* the first stalled one sends everything now: its reservation grows */
    const size_t chunk = 4 << 20;
    int sent = 1;
    for (size_t off = 0; off < len && sent; off += chunk) {
        Rtrain__V1__UploadChunk c = RTRAIN__V1__UPLOAD_CHUNK__INIT;
        size_t m = len - off < chunk ? len - off : chunk;
        c.offset = off;
        c.data.data = big + off;
        c.data.len = m;
        if (off + m == len) {
            c.last = 1;
            c.checksum = XXH64(big, len, 0);
        }
        sent = itest_stream_send(st[0], &c.base);
    }
    rc = itest_stream_finish(st[0], 0, &r);
    CHECK(rc == 0, "the stalled upload, resumed, completes: %d %s", rc, r.details);
    itest_res_free(&r);
    itest_stream_finish(st[1], 1, &r);
    itest_res_free(&r);
    double left = metric_when("rtrain_uploads", 0);
    CHECK(left == 0, "no upload left in flight (%.0f)", left);
    CHECK(itest_metric(&D, "rtrain_upload_reserved_bytes") == 0, "nothing reserved after them");
    free(big);
}


/* ---------------------------------------------------------- non-finite */
static char DS[64];

static Rtrain__V1__CompileResponse *compile_iris(itest_res *r)
{
    static Rtrain__V1__TrainConfig cfg;
    itest_iris_config(&cfg);
    Rtrain__V1__CompileRequest q = RTRAIN__V1__COMPILE_REQUEST__INIT;
    q.session_id = S;
    q.model_case = RTRAIN__V1__COMPILE_REQUEST__MODEL_GRAPH;
    q.graph = itest_iris_graph(8);
    q.config = &cfg;
    Rtrain__V1__CompileResponse *p = NULL;
    itest_unary(C, "Compile", &q.base, &rtrain__v1__compile_response__descriptor,
                (ProtobufCMessage **)&p, r);
    return p;
}

/* 20 steps at a learning rate that makes the weights overflow */
static Rtrain__V1__RunStepsResponse *diverge(const char *pid, int stop, itest_res *r)
{
    Rtrain__V1__RunStepsRequest q = RTRAIN__V1__RUN_STEPS_REQUEST__INIT;
    q.session_id = S;
    q.program_id = (char *)pid;
    q.dataset_id = DS;
    q.steps = 20;
    q.learning_rate = 1e30f;
    q.stop_on_nan = stop;
    Rtrain__V1__RunStepsResponse *p = NULL;
    itest_unary(C, "RunSteps", &q.base, &rtrain__v1__run_steps_response__descriptor,
                (ProtobufCMessage **)&p, r);
    return p;
}

static uint64_t step_of(const char *pid)
{
    Rtrain__V1__GetWeightsResponse *w = itest_get_weights(C, S, pid);
    uint64_t st = w ? w->global_step : 0;
    FREE(w);
    return st;
}

typedef struct fit_seen {
    int events, non_finite, done;
    uint64_t first;
} fit_seen;

static int on_fit(void *ud, const uint8_t *data, size_t len)
{
    fit_seen *f = ud;
    Rtrain__V1__FitEvent *e = rtrain__v1__fit_event__unpack(NULL, len, data);
    if (!e)
        return 1;
    f->events++;
    f->non_finite = e->non_finite;
    f->first = e->first_non_finite_step;
    f->done = e->done;
    FREE(e);
    return 0;
}

static int fit(const char *pid, int stop, fit_seen *f, itest_res *r)
{
    Rtrain__V1__FitRequest q = RTRAIN__V1__FIT_REQUEST__INIT;
    q.session_id = S;
    q.program_id = (char *)pid;
    q.dataset_id = DS;
    q.epochs = 10;
    q.learning_rate = 1e30f;
    q.stop_on_nan = stop;
    memset(f, 0, sizeof *f);
    return itest_server_stream(C, "Fit", &q.base, on_fit, f, r);
}

static void test_non_finite_loss(void)
{
    size_t len;
    uint8_t *b = xy(30, &len);
    int64_t xs[2] = {30, 4}, ys[1] = {30};
    Rtrain__V1__DataPart px = itest_raw_part(RTRAIN__V1__DATA_ROLE__ROLE_FEATURES,
                                             RTRAIN__V1__DTYPE__F32, xs, 2, 30 * 16);
    Rtrain__V1__DataPart py = itest_raw_part(RTRAIN__V1__DATA_ROLE__ROLE_LABELS,
                                             RTRAIN__V1__DTYPE__I32, ys, 1, 30 * 4);
    Rtrain__V1__DataPart *pp[2] = {&px, &py};
    itest_res r;
    CHECK(itest_upload(C, S, pp, 2, b, len, 1 << 16, DS, &r) == 0, "upload: %s", r.details);
    itest_res_free(&r);
    free(b);
    /* twins: the same model, seed and data diverge at the same step */
    char pid[3][64] = {"", "", ""};
    for (int i = 0; i < 3; i++) {
        Rtrain__V1__CompileResponse *cr = compile_iris(&r);
        CHECK(cr != NULL, "Compile: %d %s", r.status, r.details);
        if (cr)
            snprintf(pid[i], sizeof pid[i], "%s", cr->program_id);
        itest_res_free(&r);
        FREE(cr);
    }
    Rtrain__V1__RunStepsResponse *a = diverge(pid[0], 0, &r);
    CHECK(a && a->non_finite && a->first_non_finite_step >= 1 &&
              a->first_non_finite_step <= 20 && a->global_step == 20,
          "a diverging RunSteps reports non_finite (%d, first at step %llu): %d %s",
          a ? a->non_finite : -1, a ? (unsigned long long)a->first_non_finite_step : 0ull,
          r.status, r.details);
    CHECK(a && a->last && !isfinite(a->last->loss), "its last loss is not finite");
    uint64_t first = a ? a->first_non_finite_step : 0;
    itest_res_free(&r);
    FREE(a);

    Rtrain__V1__RunStepsResponse *b2 = diverge(pid[1], 1, &r);
    char want[64];
    snprintf(want, sizeof want, "at step %llu (stop_on_nan)", (unsigned long long)first);
    CHECK(!b2 && r.status == 9 && strstr(r.details, want),
          "stop_on_nan: FAILED_PRECONDITION naming the step: %d %s", r.status, r.details);
    itest_res_free(&r);
    FREE(b2);
    CHECK(step_of(pid[1]) == first, "stop_on_nan stopped after step %llu (at %llu)",
          (unsigned long long)first, (unsigned long long)step_of(pid[1]));

    fit_seen f;
    int rc = fit(pid[2], 0, &f, &r);
    CHECK(rc == 0 && f.done && f.non_finite && f.first == first,
          "a diverging Fit ends with non_finite, first at step %llu (%d %llu): %d %s",
          (unsigned long long)first, f.non_finite, (unsigned long long)f.first, rc, r.details);
    itest_res_free(&r);
    /* the same program, now NaN from its first step on */
    rc = fit(pid[2], 1, &f, &r);
    CHECK(rc == 9 && strstr(r.details, "stop_on_nan") && !f.done,
          "a Fit with stop_on_nan fails FAILED_PRECONDITION: %d %s", rc, r.details);
    itest_res_free(&r);
}

/* ------------------------------------------------------- bad inputs */
static void test_param_nan(void)
{
    Rtrain__V1__Graph *g = itest_iris_graph(8);
    float v[8] = {0, 0, 0, NAN, 0, 0, 0, 0};
    Rtrain__V1__Tensor t = RTRAIN__V1__TENSOR__INIT;
    t.dtype = RTRAIN__V1__DTYPE__F32;
    t.data.data = (uint8_t *)v;
    t.data.len = sizeof v;
    Rtrain__V1__Param *bias = NULL;
    for (size_t i = 0; i < g->n_params; i++)
        if (!strcmp(g->params[i]->name, "d1/bias"))
            bias = g->params[i];
    CHECK(bias != NULL, "the iris graph has d1/bias");
    if (!bias)
        return;
    bias->value = &t;
    static Rtrain__V1__TrainConfig cfg;
    itest_iris_config(&cfg);
    Rtrain__V1__CompileRequest q = RTRAIN__V1__COMPILE_REQUEST__INIT;
    q.session_id = S;
    q.model_case = RTRAIN__V1__COMPILE_REQUEST__MODEL_GRAPH;
    q.graph = g;
    q.config = &cfg;
    Rtrain__V1__CompileResponse *p = NULL;
    itest_res r;
    itest_unary(C, "Compile", &q.base, &rtrain__v1__compile_response__descriptor,
                (ProtobufCMessage **)&p, &r);
    CHECK(!p && r.status == 3 && strstr(r.details, "d1/bias") && strstr(r.details, "NaN"),
          "a NaN initial value is refused, naming the param: %d %s", r.status, r.details);
    bias->value = NULL;
    itest_res_free(&r);
    FREE(p);
}

static void test_keras_node_index(void)
{
    static Rtrain__V1__TrainConfig cfg;
    itest_iris_config(&cfg);
    Rtrain__V1__CompileRequest q = RTRAIN__V1__COMPILE_REQUEST__INIT;
    q.session_id = S;
    q.model_case = RTRAIN__V1__COMPILE_REQUEST__MODEL_KERAS_JSON;
    q.config = &cfg;
    const char *fmt =
        "{\"class_name\": \"Functional\", \"config\": {\"name\": \"f\", \"layers\": ["
        "{\"class_name\": \"InputLayer\", \"name\": \"x\", \"config\": {\"batch_input_shape\": "
        "[null, 4], \"name\": \"x\"}, \"inbound_nodes\": []},"
        "{\"class_name\": \"Dense\", \"name\": \"h\", \"config\": {\"name\": \"h\", \"units\": 8, "
        "\"activation\": \"relu\"}, \"inbound_nodes\": [[[\"x\", 0, 0, {}]]]},"
        "{\"class_name\": \"Dense\", \"name\": \"out\", \"config\": {\"name\": \"out\", \"units\": 3,"
        " \"activation\": \"softmax\"}, \"inbound_nodes\": [[[\"h\", %d, %d, {}]]]}],"
        " \"input_layers\": [[\"x\", 0, 0]], \"output_layers\": [[\"out\", 0, 0]]}}";
    int cases[3][2] = {{0, 0}, {99, 0}, {0, 5}};
    for (int i = 0; i < 3; i++) {
        char js[2048];
        snprintf(js, sizeof js, fmt, cases[i][0], cases[i][1]);
        q.keras_json = js;
        Rtrain__V1__CompileResponse *p = NULL;
        itest_res r;
        itest_unary(C, "Compile", &q.base, &rtrain__v1__compile_response__descriptor,
                    (ProtobufCMessage **)&p, &r);
        if (i == 0)
            CHECK(p != NULL, "the model with node 0 compiles: %d %s", r.status, r.details);
        else
            CHECK(!p && r.status == 3 && strstr(r.details, "layer 'out'") &&
                      strstr(r.details, i == 1 ? "node 99" : "output 5"),
                  "an inbound %s index of %d is refused, naming the layer: %d %s",
                  i == 1 ? "node" : "tensor", i == 1 ? 99 : 5, r.status, r.details);
        itest_res_free(&r);
        FREE(p);
    }
}

/* An NPY part whose header is given verbatim (no padding). */
static void npy_refused(const char *hdr, const char *want)
{
    float x[30 * 4] = {0};
    size_t hl = strlen(hdr), len = 10 + hl + sizeof x;
    uint8_t *b = malloc(len);
    memcpy(b, "\x93NUMPY\x01\x00", 8);
    b[8] = (uint8_t)(hl & 0xff);
    b[9] = (uint8_t)(hl >> 8);
    memcpy(b + 10, hdr, hl);
    memcpy(b + 10 + hl, x, sizeof x);
    Rtrain__V1__DataPart px = RTRAIN__V1__DATA_PART__INIT;
    px.role = RTRAIN__V1__DATA_ROLE__ROLE_FEATURES;
    px.format = RTRAIN__V1__DATA_FORMAT__FORMAT_NPY;
    px.length = len;
    Rtrain__V1__DataPart *pp[1] = {&px};
    itest_res r;
    int rc = itest_upload(C, S, pp, 1, b, len, 1 << 16, NULL, &r);
    CHECK(rc == 3 && strstr(r.details, want), "NPY header \"%s\": %d %s", hdr, rc, r.details);
    itest_res_free(&r);
    free(b);
}

static void test_npy_strict(void)
{
    npy_refused("{'descr': '<f4', 'fortran_order': False, 'shape': (30, 4",
                "the shape tuple is not closed");
    npy_refused("{'descr': '<f4', 'fortran_order': False, 'shape': (30, 4), ",
                "the dict is not closed");
    npy_refused("{'descr': '<f4', 'fortran_order': False, 'shape': (30, 4), 'shape': (30, 4)}\n",
                "repeated key 'shape'");
    npy_refused("{'descr': '<f4', 'fortran_order': False, 'shape': (30, 4)} x\n",
                "something follows the dict");
    npy_refused("{'descr': '<f4x', 'fortran_order': False, 'shape': (30, 4)}\n",
                "dtype '<f4x' is not supported");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s RTRAIND\n", argv[0]);
        return 2;
    }
    const char *extra[] = {"--metrics-listen", "127.0.0.1:0", "--max-dataset-bytes", "67108864",
                           "--max-upload-bytes", "134217728", NULL};
    if (itest_daemon_start(&D, argv[1], extra) < 0)
        return 1;
    C = itest_connect(D.addr);
    CHECK(itest_session(C, "guards", S) == 0, "CreateSession");
    RUN(test_stalled_uploads);
    RUN(test_non_finite_loss);
    RUN(test_param_nan);
    RUN(test_keras_node_index);
    RUN(test_npy_strict);
    itest_disconnect(C);
    int code = itest_daemon_stop(&D, SIGTERM);
    CHECK(code == 0, "daemon exit %d", code);
    return itest_summary();
}
