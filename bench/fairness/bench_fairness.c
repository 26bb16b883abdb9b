/*
 * bench_fairness - how much a well-behaved client's K=1 RunSteps suffers
 * while another client abuses the daemon.
 *
 *     bench_fairness path/to/rtraind [--samples N] [--reps R] [--slice-ms S]
 *                    [--upload-gib G] [--layers L] [--conns C] [--parse-mib M]
 *                    [--fit-rows N] [--gzip-mib Z] [--gzip-chunk-mib C]
 *                    [--only fit,first-fit,upload,parsed,gzip,conns,compile]
 *
 * One rtraind on 127.0.0.1. The well-behaved client (its own session, an
 * iris MLP) times N sequential K=1 RunSteps: alone, then while another
 * session runs each of
 *   - a 10^7-step Fit (10^3 epochs of 10^4 steps, read as it streams);
 *   - the first Fit of a freshly compiled program, without progress
 *     events (10^3 x 10^4 steps, stopped with Control after the samples),
 *     on N rows of iris repeated (--fit-rows, 2,000,000): the first step
 *     of a data set first checks its labels and orders its epoch, O(N);
 *   - a G GiB upload, streamed from zeros in 1 MiB chunks (never held in
 *     memory; it ends with a wrong checksum so the daemon does not parse
 *     G GiB of features); samples are taken until the upload has sent all
 *     of it;
 *   - M MiB RAW uploads that the daemon parses (valid checksum, new
 *     content each time), one after another, until N samples and two
 *     uploads are done;
 *   - the same, Z MiB each (--gzip-mib) in C MiB chunks (--gzip-chunk-mib,
 *     16), sent by a client that compresses every message (grpc-encoding:
 *     gzip, as grpcio's compression=gzip): the daemon inflates each chunk
 *     (on its inflate threads);
 *   - C half-open TCP connections (connect, never send a byte);
 *   - an L-layer Keras Sequential compile (last: the engine cannot be
 *     interrupted, so the daemon is killed after it).
 * Each scenario runs R times (the compile once); the table shows medians
 * over the runs of p50 and p99, the ratio to the solo p99 measured in the
 * same run, and the target: p99 <= 3 x solo p99 + one slice.
 */
#define RT_BENCH_NAME "bench_fairness"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>

#include "../bench_util.h"
#include "itest.h"

static struct {
    int samples, reps, slice_ms, conns, layers, parse_mib, fit_rows, gzip_mib, gzip_chunk_mib;
    double upload_gib;
    const char *only; /* comma-separated rows to run (--only), NULL: all */
} O = {1000, 3, 20, 1000, 20000, 256, 2000000, 256, 16, 4.0, NULL};

/* Whether row key (fit, first-fit, upload, parsed, gzip, conns, compile) runs. */
static int want(const char *key)
{
    if (!O.only)
        return 1;
    size_t n = strlen(key);
    for (const char *p = O.only; (p = strstr(p, key)); p += n)
        if ((p == O.only || p[-1] == ',') && (p[n] == ',' || p[n] == 0))
            return 1;
    return 0;
}

static itest_daemon D;
static char W_sid[64], W_pid[64], A_sid[64], A_pid[64], IRIS[64], BIG[64];

/* --------------------------------------------------------- the client */
static int pct_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct lat {
    double p50, p99, max;
    int n, errors;
} lat;

/* K=1 RunSteps until at least min samples were taken and *until_done
 * (if not NULL) is set. Microseconds. */
static lat measure(itest_conn *c, int min, const int *until_done)
{
    int cap = min * 4, n = 0, errors = 0;
    double *v = malloc(sizeof *v * (size_t)cap);
    Rtrain__V1__RunStepsRequest q = RTRAIN__V1__RUN_STEPS_REQUEST__INIT;
    q.session_id = W_sid;
    q.program_id = W_pid;
    q.dataset_id = IRIS;
    q.steps = 1;
    while (n < min || (until_done && !__atomic_load_n(until_done, __ATOMIC_ACQUIRE))) {
        itest_res r;
        double t0 = now_s();
        int st = itest_unary(c, "RunSteps", &q.base, NULL, NULL, &r);
        double us = (now_s() - t0) * 1e6;
        itest_res_free(&r);
        if (st) {
            errors++;
            continue;
        }
        if (n == cap) {
            cap *= 2;
            v = realloc(v, sizeof *v * (size_t)cap);
        }
        v[n++] = us;
    }
    qsort(v, (size_t)n, sizeof *v, pct_cmp);
    lat l = {v[n / 2], v[(int)((n - 1) * 0.99)], v[n - 1], n, errors};
    free(v);
    return l;
}

/* ------------------------------------------------------------ loads */
typedef struct load {
    pthread_t th;
    int stop;      /* atomic: asked to stop */
    int active;    /* atomic: the load is running */
    int done;      /* atomic: the load finished */
    int status;
    char details[256];
    double seconds;
} load;

static int fit_msg(void *ud, const uint8_t *d, size_t n)
{
    (void)d;
    (void)n;
    load *l = ud;
    __atomic_store_n(&l->active, 1, __ATOMIC_RELEASE);
    return __atomic_load_n(&l->stop, __ATOMIC_ACQUIRE);
}

static void *fit_main(void *arg)
{
    load *l = arg;
    itest_conn *c = itest_connect(D.addr);
    Rtrain__V1__FitRequest q = RTRAIN__V1__FIT_REQUEST__INIT;
    q.session_id = A_sid;
    q.program_id = A_pid;
    q.dataset_id = IRIS;
    /* 10^3 epochs x 10^4 steps = 10^7, the per-call cap. Long epochs: the
     * Fit is paced by the device, not by how fast this thread reads. */
    q.epochs = 1000;
    q.steps_per_epoch = 10000;
    q.progress_every = 1000;
    itest_res r;
    double t0 = now_s();
    l->status = itest_server_stream(c, "Fit", &q.base, fit_msg, l, &r);
    l->seconds = now_s() - t0;
    snprintf(l->details, sizeof l->details, "%.200s", r.details);
    itest_res_free(&r);
    itest_disconnect(c);
    __atomic_store_n(&l->done, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&l->active, 1, __ATOMIC_RELEASE);
    return NULL;
}

static grpc_byte_buffer *pack_bb(const ProtobufCMessage *m)
{
    size_t len = protobuf_c_message_get_packed_size(m);
    grpc_slice s = grpc_slice_malloc(len);
    protobuf_c_message_pack(m, GRPC_SLICE_START_PTR(s));
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

static int pluck_ok(grpc_completion_queue *cq, void *tag)
{
    grpc_event ev = grpc_completion_queue_pluck(
        cq, tag, gpr_time_add(gpr_now(GPR_CLOCK_REALTIME), gpr_time_from_seconds(600, GPR_TIMESPAN)),
        NULL);
    return ev.type == GRPC_OP_COMPLETE && ev.success;
}

/* A G GiB RAW upload streamed from one zero chunk. */
static void *upload_main(void *arg)
{
    load *l = arg;
    grpc_channel_credentials *cr = grpc_insecure_credentials_create();
    grpc_channel *ch = grpc_channel_create(D.addr, cr, NULL);
    grpc_channel_credentials_release(cr);
    grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
    grpc_slice m = grpc_slice_from_static_string("/rtrain.v1.Trainer/UploadDataset");
    grpc_call *call = grpc_channel_create_call(
        ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, m, NULL,
        gpr_time_add(gpr_now(GPR_CLOCK_REALTIME), gpr_time_from_seconds(600, GPR_TIMESPAN)), NULL);
    uint64_t total = (uint64_t)(O.upload_gib * (double)(1ull << 30));
    grpc_metadata_array imd, tmd;
    grpc_metadata_array_init(&imd);
    grpc_metadata_array_init(&tmd);
    grpc_status_code status = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    grpc_op ops[3];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[0].data.recv_status_on_client.trailing_metadata = &tmd;
    ops[0].data.recv_status_on_client.status = &status;
    ops[0].data.recv_status_on_client.status_details = &details;
    grpc_call_start_batch(call, ops, 1, (void *)1, NULL);
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[1].data.recv_initial_metadata.recv_initial_metadata = &imd;
    grpc_call_start_batch(call, ops, 2, (void *)2, NULL);

    Rtrain__V1__DataPart part = RTRAIN__V1__DATA_PART__INIT;
    part.role = RTRAIN__V1__DATA_ROLE__ROLE_FEATURES;
    part.format = RTRAIN__V1__DATA_FORMAT__FORMAT_RAW;
    part.dtype = RTRAIN__V1__DTYPE__U8;
    part.length = total;
    int64_t shape[1] = {(int64_t)total};
    part.shape = shape;
    part.n_shape = 1;
    Rtrain__V1__DataPart *pp[1] = {&part};
    Rtrain__V1__DatasetHeader h = RTRAIN__V1__DATASET_HEADER__INIT;
    h.session_id = A_sid;
    h.name = "bench-upload";
    h.parts = pp;
    h.n_parts = 1;
    h.total_bytes = total;
    static uint8_t zero[1 << 20];
    double t0 = now_s();
    uint64_t sent = 0;
    int ok = 1;
    while (ok && sent < total && !__atomic_load_n(&l->stop, __ATOMIC_ACQUIRE)) {
        Rtrain__V1__UploadChunk c = RTRAIN__V1__UPLOAD_CHUNK__INIT;
        if (sent == 0)
            c.header = &h;
        size_t n = total - sent < sizeof zero ? (size_t)(total - sent) : sizeof zero;
        c.offset = sent;
        c.data.data = zero;
        c.data.len = n;
        c.last = sent + n == total;
        c.checksum = 1; /* wrong on purpose: no 4 GiB parse at the end */
        grpc_byte_buffer *bb = pack_bb(&c.base);
        memset(ops, 0, sizeof ops);
        ops[0].op = GRPC_OP_SEND_MESSAGE;
        ops[0].data.send_message.send_message = bb;
        grpc_call_start_batch(call, ops, 1, (void *)3, NULL);
        ok = pluck_ok(cq, (void *)3);
        grpc_byte_buffer_destroy(bb);
        sent += n;
        if (sent >= (64u << 20))
            __atomic_store_n(&l->active, 1, __ATOMIC_RELEASE);
    }
    if (sent < total)
        grpc_call_cancel(call, NULL);
    else {
        memset(ops, 0, sizeof ops);
        ops[0].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
        grpc_call_start_batch(call, ops, 1, (void *)4, NULL);
        pluck_ok(cq, (void *)4);
    }
    pluck_ok(cq, (void *)2);
    grpc_completion_queue_pluck(cq, (void *)1, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    l->seconds = now_s() - t0;
    l->status = (int)status;
    snprintf(l->details, sizeof l->details, "%.*s (%.2f GiB sent)", (int)GRPC_SLICE_LENGTH(details),
             (const char *)GRPC_SLICE_START_PTR(details), (double)sent / (double)(1ull << 30));
    grpc_slice_unref(details);
    grpc_metadata_array_destroy(&imd);
    grpc_metadata_array_destroy(&tmd);
    grpc_call_unref(call);
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_pluck(cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(cq);
    grpc_channel_destroy(ch);
    __atomic_store_n(&l->done, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&l->active, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* The first Fit of a freshly compiled program, without progress events
 * (nothing is streamed before the first epoch ends): active once sent. */
typedef struct first_fit {
    load l;
    const char *pid;
} first_fit;

static int first_fit_msg(void *ud, const uint8_t *d, size_t n)
{
    (void)d;
    (void)n;
    load *l = ud;
    return __atomic_load_n(&l->stop, __ATOMIC_ACQUIRE);
}

static void *first_fit_main(void *arg)
{
    first_fit *ff = arg;
    load *l = &ff->l;
    itest_conn *c = itest_connect(D.addr);
    Rtrain__V1__FitRequest q = RTRAIN__V1__FIT_REQUEST__INIT;
    q.session_id = A_sid;
    q.program_id = (char *)ff->pid;
    q.dataset_id = BIG;
    q.epochs = 1000;
    q.steps_per_epoch = 10000;
    itest_res r;
    __atomic_store_n(&l->active, 1, __ATOMIC_RELEASE);
    double t0 = now_s();
    l->status = itest_server_stream(c, "Fit", &q.base, first_fit_msg, l, &r);
    l->seconds = now_s() - t0;
    snprintf(l->details, sizeof l->details, "%.200s", r.details);
    itest_res_free(&r);
    itest_disconnect(c);
    __atomic_store_n(&l->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* An iris-shaped RAW set of n rows in one buffer: x [n,4] f32 (values 1:
 * iris-like values, y = i % 3; 0: zeros; 2: 256 levels drawn at random,
 * y random in 0..2, which gzip shrinks 3-4 x, as real data, where the
 * others shrink far past --max-inflate-ratio), then y [n] i32; its two
 * parts in pp. */
typedef struct raw_set {
    uint8_t *b;
    size_t len;
    int64_t xs[2], ys[1];
    Rtrain__V1__DataPart px, py;
    Rtrain__V1__DataPart *pp[2];
} raw_set;

static void raw_set_make(raw_set *r, int64_t n, int values)
{
    r->len = (size_t)n * 20;
    r->b = calloc(1, r->len);
    float *x = (float *)r->b;
    int32_t *y = (int32_t *)(r->b + (size_t)n * 16);
    uint64_t z = 88172645463325252ull;
    for (int64_t i = 0; i < n; i++) {
        for (int k = 0; values && k < 4; k++) {
            z ^= z << 13, z ^= z >> 7, z ^= z << 17; /* xorshift64 */
            x[i * 4 + k] = values == 2 ? (float)(z >> 56) / 32.0f
                                       : (float)((i * 7 + k * 3) % 50) / 10.0f;
        }
        y[i] = (int32_t)(values == 2 ? (z >> 8) % 3 : (uint64_t)(i % 3));
    }
    r->xs[0] = n;
    r->xs[1] = 4;
    r->ys[0] = n;
    r->px = itest_raw_part(RTRAIN__V1__DATA_ROLE__ROLE_FEATURES, RTRAIN__V1__DTYPE__F32, r->xs,
                           2, (size_t)n * 16);
    r->py = itest_raw_part(RTRAIN__V1__DATA_ROLE__ROLE_LABELS, RTRAIN__V1__DTYPE__I32, r->ys, 1,
                           (size_t)n * 4);
    r->pp[0] = &r->px;
    r->pp[1] = &r->py;
}

/* M MiB RAW uploads that the daemon parses (valid checksum, content made
 * new each time so none is deduplicated), one after another until asked
 * to stop; done once two have completed. */
typedef struct parsed_up {
    load l;
    int completed, failed;
    int gzip; /* the client compresses every message */
} parsed_up;

static void *parsed_upload_main(void *arg)
{
    parsed_up *pu = arg;
    load *l = &pu->l;
    itest_conn_opts o = {.gzip = pu->gzip};
    itest_conn *c = itest_connect_opts(D.addr, &o);
    raw_set rs;
    raw_set_make(&rs, ((int64_t)(pu->gzip ? O.gzip_mib : O.parse_mib) << 20) / 20,
                 pu->gzip ? 2 : 0);
    uint8_t *b = rs.b;
    __atomic_store_n(&l->active, 1, __ATOMIC_RELEASE);
    double t0 = now_s();
    for (int k = 1; !__atomic_load_n(&l->stop, __ATOMIC_ACQUIRE); k++) {
        ((float *)b)[0] = (float)k;
        char id[64];
        itest_res r;
        int st = itest_upload(c, A_sid, rs.pp, 2, b, rs.len,
                              pu->gzip ? (size_t)O.gzip_chunk_mib << 20 : 1 << 20, id, &r);
        if (st) {
            pu->failed++;
            snprintf(l->details, sizeof l->details, "%d %.200s", st, r.details);
        } else {
            pu->completed++;
        }
        itest_res_free(&r);
        if (pu->completed + pu->failed >= 2)
            __atomic_store_n(&l->done, 1, __ATOMIC_RELEASE);
    }
    l->seconds = now_s() - t0;
    free(b);
    itest_disconnect(c);
    __atomic_store_n(&l->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* A Keras Sequential: Input(4), L x Dense(4, relu), Dense(3, softmax). */
static char *deep_keras(int layers)
{
    size_t cap = (size_t)layers * 128 + 1024, o = 0;
    char *j = malloc(cap);
    o += (size_t)snprintf(j + o, cap - o,
                          "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"deep\", "
                          "\"layers\": [{\"class_name\": \"InputLayer\", \"config\": "
                          "{\"batch_input_shape\": [null, 4], \"name\": \"x\"}}");
    for (int i = 0; i < layers; i++)
        o += (size_t)snprintf(j + o, cap - o,
                              ", {\"class_name\": \"Dense\", \"config\": {\"name\": \"d%d\", "
                              "\"units\": 4, \"activation\": \"relu\"}}",
                              i);
    snprintf(j + o, cap - o,
             ", {\"class_name\": \"Dense\", \"config\": {\"name\": \"out\", \"units\": 3, "
             "\"activation\": \"softmax\"}}]}}");
    return j;
}

static void iris_config(Rtrain__V1__TrainConfig *c, uint64_t seed)
{
    Rtrain__V1__TrainConfig ci = RTRAIN__V1__TRAIN_CONFIG__INIT;
    *c = ci;
    c->loss = "sparse_categorical_crossentropy";
    c->optimizer = "adam";
    c->learning_rate = 0.01f;
    c->batch_size = 16;
    c->seed = seed;
}

static void *compile_main(void *arg)
{
    load *l = arg;
    itest_conn *c = itest_connect(D.addr);
    char *json = deep_keras(O.layers);
    Rtrain__V1__TrainConfig cfg;
    iris_config(&cfg, 99);
    Rtrain__V1__CompileRequest q = RTRAIN__V1__COMPILE_REQUEST__INIT;
    q.session_id = A_sid;
    q.model_case = RTRAIN__V1__COMPILE_REQUEST__MODEL_KERAS_JSON;
    q.keras_json = json;
    q.config = &cfg;
    itest_res r;
    __atomic_store_n(&l->active, 1, __ATOMIC_RELEASE);
    double t0 = now_s();
    l->status = itest_unary(c, "Compile", &q.base, NULL, NULL, &r);
    l->seconds = now_s() - t0;
    snprintf(l->details, sizeof l->details, "%.200s", r.details);
    itest_res_free(&r);
    free(json);
    itest_disconnect(c);
    __atomic_store_n(&l->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static int *open_conns(int n)
{
    int *fds = malloc(sizeof *fds * (size_t)n);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)D.port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int i = 0; i < n; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        if (fds[i] < 0 || connect(fds[i], (struct sockaddr *)&sa, sizeof sa) < 0)
            die("connect", "a half-open connection failed (file descriptors?)");
    }
    return fds;
}

/* ------------------------------------------------------------- setup */
static void must(int st, itest_res *r, const char *what)
{
    if (st)
        die(what, r->details);
    itest_res_free(r);
}

static void compile_iris(itest_conn *c, const char *sid, char *pid)
{
    char path[512];
    snprintf(path, sizeof path, "%s/iris_sequential_keras2.json", itest_data_dir());
    size_t len;
    char *json = (char *)itest_read_file(path, &len);
    if (!json)
        die("read", path);
    Rtrain__V1__TrainConfig cfg;
    iris_config(&cfg, 7);
    Rtrain__V1__CompileRequest q = RTRAIN__V1__COMPILE_REQUEST__INIT;
    q.session_id = (char *)sid;
    q.model_case = RTRAIN__V1__COMPILE_REQUEST__MODEL_KERAS_JSON;
    q.keras_json = json;
    q.config = &cfg;
    Rtrain__V1__CompileResponse *p = NULL;
    itest_res r;
    int st = itest_unary(c, "Compile", &q.base, &rtrain__v1__compile_response__descriptor,
                         (ProtobufCMessage **)&p, &r);
    must(st, &r, "compile");
    snprintf(pid, 64, "%s", p->program_id);
    protobuf_c_message_free_unpacked(&p->base, NULL);
    free(json);
}

typedef struct row {
    const char *name;
    double p50[16], p99[16], solo99[16];
    int runs, samples, errors;
    char note[200];
} row;

static double med(double *v, int n) { return median(v, n); }

/* Start load fn(arg) on *th and wait until it says it is active. */
static void start_load(pthread_t *th, void *(*fn)(void *), void *arg, const int *active)
{
    pthread_create(th, NULL, fn, arg);
    while (!__atomic_load_n(active, __ATOMIC_ACQUIRE))
        usleep(1000);
}

/* One run's samples of row w, against that run's solo p99. */
static void record(row *w, const lat *l, double solo99, int more_errors)
{
    w->p50[w->runs] = l->p50;
    w->p99[w->runs] = l->p99;
    w->solo99[w->runs++] = solo99;
    w->samples += l->n;
    w->errors += l->errors + more_errors;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_fairness path/to/rtraind [--samples N] [--reps R] "
                        "[--slice-ms S] [--upload-gib G] [--layers L] [--conns C] [--parse-mib M]\n"
                        "       [--fit-rows N] [--gzip-mib Z] [--gzip-chunk-mib C]\n"
                        "       [--only fit,first-fit,upload,parsed,gzip,conns,compile]\n");
        return 2;
    }
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--samples")) O.samples = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) O.reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--slice-ms")) O.slice_ms = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--upload-gib")) O.upload_gib = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--layers")) O.layers = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--conns")) O.conns = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--parse-mib")) O.parse_mib = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--only")) O.only = argv[i + 1];
        else if (!strcmp(argv[i], "--fit-rows")) O.fit_rows = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--gzip-mib")) O.gzip_mib = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--gzip-chunk-mib")) O.gzip_chunk_mib = atoi(argv[i + 1]);
        else die("usage", argv[i]);
    }
    if (O.reps > 16)
        O.reps = 16;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    char slice[16], maxdata[32];
    snprintf(slice, sizeof slice, "%d", O.slice_ms);
    snprintf(maxdata, sizeof maxdata, "%llu",
             (unsigned long long)(O.upload_gib * (double)(1ull << 30)) + (1u << 20));
    const char *extra[] = {"--slice-ms", slice, "--max-dataset-bytes", maxdata, NULL};
    if (itest_daemon_start(&D, argv[1], extra) < 0)
        die("daemon", "did not start");
    itest_conn *c = itest_connect(D.addr);
    if (itest_session(c, "well-behaved", W_sid) || itest_session(c, "abuser", A_sid))
        die("session", "CreateSession failed");
    compile_iris(c, W_sid, W_pid);
    compile_iris(c, A_sid, A_pid);
    char path[512];
    snprintf(path, sizeof path, "%s/iris.csv", itest_data_dir());
    size_t len;
    uint8_t *csv = itest_read_file(path, &len);
    Rtrain__V1__DataPart p = RTRAIN__V1__DATA_PART__INIT;
    p.role = RTRAIN__V1__DATA_ROLE__ROLE_BOTH;
    p.format = RTRAIN__V1__DATA_FORMAT__FORMAT_CSV;
    p.length = len;
    p.label_column = -1;
    p.csv_header = 1;
    Rtrain__V1__DataPart *pp[1] = {&p};
    itest_res r;
    must(itest_upload(c, W_sid, pp, 1, csv, len, 1 << 16, IRIS, &r), &r, "upload iris");
    free(csv);
    if (want("first-fit")) {
        raw_set big; /* the first Fit's rows */
        raw_set_make(&big, O.fit_rows, 1);
        must(itest_upload(c, A_sid, big.pp, 2, big.b, big.len, 1 << 20, BIG, &r), &r,
             "upload fit rows");
        free(big.b);
    }
    measure(c, 200, NULL); /* warm */

    enum { SOLO, FIT, FIRST_FIT, UPLOAD, PARSED, GZIP, CONNS, COMPILE, NROWS };
    row rows[NROWS];
    memset(rows, 0, sizeof rows);
    rows[SOLO].name = "solo";
    rows[FIT].name = "10^7-step Fit";
    rows[FIRST_FIT].name = "first Fit, no progress";
    rows[UPLOAD].name = "upload";
    rows[PARSED].name = "parsed uploads";
    rows[GZIP].name = "gzip-compressed uploads";
    rows[CONNS].name = "half-open conns";
    rows[COMPILE].name = "deep compile";
    for (int rep = 0; rep < O.reps; rep++) {
        lat solo = measure(c, O.samples, NULL);
        row *s = &rows[SOLO];
        record(s, &solo, solo.p99, 0);
        lat l;

        if (want("fit")) {
            load fit;
            memset(&fit, 0, sizeof fit);
            start_load(&fit.th, fit_main, &fit, &fit.active);
            l = measure(c, O.samples, NULL);
            int still = !__atomic_load_n(&fit.done, __ATOMIC_ACQUIRE);
            __atomic_store_n(&fit.stop, 1, __ATOMIC_RELEASE);
            pthread_join(fit.th, NULL);
            row *f = &rows[FIT];
            record(f, &l, solo.p99, !still);
            snprintf(f->note, sizeof f->note, "Fit still running at the end: %s", still ? "yes" : "NO");
        }

        if (want("first-fit")) {
            /* a program of its own per run: this Fit is its first */
            char fpid[64];
            compile_iris(c, A_sid, fpid);
            first_fit ff;
            memset(&ff, 0, sizeof ff);
            ff.pid = fpid;
            start_load(&ff.l.th, first_fit_main, &ff, &ff.l.active);
            l = measure(c, O.samples, NULL);
            int still = !__atomic_load_n(&ff.l.done, __ATOMIC_ACQUIRE);
            __atomic_store_n(&ff.l.stop, 1, __ATOMIC_RELEASE);
            if (still) { /* no event comes before the epoch ends: cancel it */
                Rtrain__V1__ControlRequest cq = RTRAIN__V1__CONTROL_REQUEST__INIT;
                cq.session_id = A_sid;
                cq.program_id = fpid;
                cq.stop = 1;
                itest_unary(c, "Control", &cq.base, NULL, NULL, &r);
                itest_res_free(&r);
            }
            pthread_join(ff.l.th, NULL);
            row *g = &rows[FIRST_FIT];
            record(g, &l, solo.p99, !still);
            snprintf(g->note, sizeof g->note, "%d rows; Fit still running at the end: %s",
                     O.fit_rows, still ? "yes" : "NO");
        }

        if (want("upload")) {
            load up;
            memset(&up, 0, sizeof up);
            start_load(&up.th, upload_main, &up, &up.active);
            l = measure(c, O.samples, &up.done);
            pthread_join(up.th, NULL);
            row *u = &rows[UPLOAD];
            record(u, &l, solo.p99, 0);
            snprintf(u->note, sizeof u->note, "%.2f GiB in %.1f s; ended %d: %.80s", O.upload_gib,
                     up.seconds, up.status, up.details);
        }

        for (int gzip = 0; gzip < 2; gzip++) {
            if (!want(gzip ? "gzip" : "parsed"))
                continue;
            parsed_up pu;
            memset(&pu, 0, sizeof pu);
            pu.gzip = gzip;
            start_load(&pu.l.th, parsed_upload_main, &pu, &pu.l.active);
            l = measure(c, O.samples, &pu.l.done);
            __atomic_store_n(&pu.l.stop, 1, __ATOMIC_RELEASE);
            pthread_join(pu.l.th, NULL);
            row *pr = &rows[gzip ? GZIP : PARSED];
            record(pr, &l, solo.p99, pu.failed > 0);
            char how[64] = "";
            if (gzip)
                snprintf(how, sizeof how, " gzip'ed in %d MiB chunks,", O.gzip_chunk_mib);
            snprintf(pr->note, sizeof pr->note, "%d x %d MiB%s parsed in %.1f s; max %.0f us%s%.80s",
                     pu.completed, gzip ? O.gzip_mib : O.parse_mib, how, pu.l.seconds, l.max,
                     pu.failed ? "; failed: " : "", pu.l.details);
        }

        if (want("conns")) {
            int *fds = open_conns(O.conns);
            l = measure(c, O.samples, NULL);
            for (int i = 0; i < O.conns; i++)
                close(fds[i]);
            free(fds);
            row *h = &rows[CONNS];
            record(h, &l, solo.p99, 0);
            snprintf(h->note, sizeof h->note, "%d connections held open", O.conns);
        }
    }
    /* The compile, once, last. */
    if (want("compile")) {
        lat solo = measure(c, O.samples, NULL);
        load cl;
        memset(&cl, 0, sizeof cl);
        start_load(&cl.th, compile_main, &cl, &cl.active);
        usleep(200000); /* the JSON has arrived and the import started */
        int before = !__atomic_load_n(&cl.done, __ATOMIC_ACQUIRE);
        lat l = measure(c, O.samples, NULL);
        int still = !__atomic_load_n(&cl.done, __ATOMIC_ACQUIRE);
        row *k = &rows[COMPILE];
        record(k, &l, solo.p99, 0);
        if (still) {
            snprintf(k->note, sizeof k->note, "%d layers; still compiling after the samples", O.layers);
        } else {
            pthread_join(cl.th, NULL);
            snprintf(k->note, sizeof k->note, "%d layers; compile %s in %.1f s (%d %.60s)%s", O.layers,
                     cl.status ? "failed" : "done", cl.seconds, cl.status, cl.details,
                     before ? "" : " before sampling");
        }
    }

    printf("\nK=1 RunSteps of a well-behaved client while another session runs a load\n");
    printf("(us; medians over %d run(s); target: p99 <= 3 x solo p99 + %d ms slice)\n\n",
           O.reps, O.slice_ms);
    printf("| load | samples | p50 us | p99 us | p99 / solo p99 | target us | within | note |\n");
    printf("| --- | ---: | ---: | ---: | ---: | ---: | --- | --- |\n");
    for (int i = 0; i < NROWS; i++) {
        row *w = &rows[i];
        if (!w->runs)
            continue;
        double p50 = med(w->p50, w->runs), p99 = med(w->p99, w->runs),
               s99 = med(w->solo99, w->runs);
        double target = 3 * s99 + O.slice_ms * 1000.0;
        printf("| %s | %d | %.0f | %.0f | %.2f | %.0f | %s | %s%s |\n", w->name, w->samples, p50,
               p99, p99 / s99, target, p99 <= target ? "yes" : "NO", w->note,
               w->errors ? " (errors!)" : "");
    }
    itest_disconnect(c);
    /* A deep compile may still run in the engine, which cannot stop it. */
    itest_daemon_stop(&D, SIGKILL);
    return 0;
}
