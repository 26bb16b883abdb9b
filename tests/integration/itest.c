/* itest.c - raw gRPC C-core test client and daemon launcher. */
#include "itest.h"

#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/compression.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <xxhash.h>

#include "rt_service.h"

int itest_failures, itest_checks, itest_tests, itest_failed_tests;

uint64_t itest_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

const char *itest_data_dir(void)
{
    const char *d = getenv("RT_ITEST_DATA");
#ifdef RT_ITEST_DATA_DIR
    if (!d)
        d = RT_ITEST_DATA_DIR;
#endif
    return d ? d : "tests/integration/data";
}

uint8_t *itest_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    if (b)
        b[n] = 0;
    fclose(f);
    *len = (size_t)n;
    return b;
}

/* ----------------------------------------------------------------- daemon */
static const char *log_to; /* itest_daemon_start_log */

int itest_daemon_start_log(itest_daemon *d, const char *path, const char *const *extra,
                           const char *log_path)
{
    log_to = log_path;
    int rc = itest_daemon_start(d, path, extra);
    log_to = NULL;
    return rc;
}

int itest_wait_log(const char *log_path, const char *needle, int count, int timeout_s)
{
    const uint64_t t_end = itest_now_ns() + (uint64_t)timeout_s * 1000000000ull;
    int n = 0;
    for (;;) {
        n = 0;
        size_t len = 0;
        char *text = (char *)itest_read_file(log_path, &len);
        for (const char *p = text; p && (p = strstr(p, needle)); p += strlen(needle))
            n++;
        free(text);
        if (n >= count || itest_now_ns() >= t_end)
            return n;
        usleep(10000);
    }
}

int itest_daemon_start(itest_daemon *d, const char *path, const char *const *extra)
{
    /* Tests write to raw sockets the daemon may close (half-open
     * connections, bombs it refuses): a write there must fail with EPIPE,
     * not kill the test. */
    signal(SIGPIPE, SIG_IGN);
    memset(d, 0, sizeof d[0]);
    int fds[2];
    if (pipe(fds) < 0)
        return -1;
    const char *argv[32];
    int n = 0;
    argv[n++] = path;
    argv[n++] = "--listen";
    argv[n++] = "127.0.0.1:0";
    argv[n++] = "--log-level";
    argv[n++] = getenv("RT_ITEST_LOG") ? getenv("RT_ITEST_LOG") : "warn";
    for (int i = 0; extra && extra[i] && n < 30; i++)
        argv[n++] = extra[i];
    /* RT_ITEST_DAEMON_ARGS adds flags to every daemon (experiments). */
    static char more[256];
    const char *env = getenv("RT_ITEST_DAEMON_ARGS");
    if (env) {
        snprintf(more, sizeof more, "%s", env);
        for (char *tok = strtok(more, " "); tok && n < 30; tok = strtok(NULL, " "))
            argv[n++] = tok;
    }
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        if (log_to) {
            int lf = open(log_to, O_WRONLY | O_CREAT | O_APPEND, 0600);
            if (lf >= 0)
                dup2(lf, 2);
        }
        execv(path, (char *const *)argv);
        _exit(127);
    }
    close(fds[1]);
    d->pid = pid;
    char line[128];
    const char *mpfx = "rtraind metrics on http://";
    uint64_t t_end = itest_now_ns() + 30ull * 1000000000ull;
    for (int lines = 0; lines < 2; lines++) {
        size_t got = 0;
        while (got < sizeof line - 1) {
            struct pollfd p = {.fd = fds[0], .events = POLLIN};
            int left = (int)((t_end - itest_now_ns()) / 1000000);
            if (left <= 0 || poll(&p, 1, left) <= 0)
                break;
            ssize_t k = read(fds[0], line + got, 1);
            if (k <= 0)
                break;
            got++;
            if (line[got - 1] == '\n')
                break;
        }
        line[got] = 0;
        if (strncmp(line, mpfx, strlen(mpfx)) != 0)
            break;
        snprintf(d->metrics, sizeof d->metrics, "%s", line + strlen(mpfx));
        d->metrics[strcspn(d->metrics, "/\n")] = 0;
    }
    close(fds[0]);
    const char *pfx = "rtraind listening on ";
    if (strncmp(line, pfx, strlen(pfx)) != 0) {
        fprintf(stderr, "itest: daemon did not start (read '%s')\n", line);
        itest_daemon_stop(d, SIGKILL);
        return -1;
    }
    char *nl = strchr(line, '\n');
    if (nl)
        *nl = 0;
    snprintf(d->addr, sizeof d->addr, "%s", line + strlen(pfx));
    char *colon = strrchr(d->addr, ':');
    d->port = colon ? atoi(colon + 1) : 0;
    return d->port > 0 ? 0 : -1;
}

double itest_metric(const itest_daemon *d, const char *name)
{
    char host[128];
    snprintf(host, sizeof host, "%s", d->metrics);
    char *colon = strrchr(host, ':');
    if (!colon)
        return -1;
    *colon = 0;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || inet_pton(AF_INET, host, &sa.sin_addr) != 1 ||
        connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    const char *rq = "GET /metrics HTTP/1.0\r\n\r\n";
    double v = -1;
    size_t cap = 1 << 20, got = 0;
    char *page = malloc(cap);
    if (page && write(fd, rq, strlen(rq)) == (ssize_t)strlen(rq)) {
        ssize_t k;
        while (got + 1 < cap && (k = read(fd, page + got, cap - 1 - got)) > 0)
            got += (size_t)k;
        page[got] = 0;
        char key[160];
        snprintf(key, sizeof key, "\n%s ", name);
        char *at = strstr(page, key);
        if (at)
            v = strtod(at + strlen(key), NULL);
    }
    free(page);
    close(fd);
    return v;
}

int itest_daemon_stop(itest_daemon *d, int sig)
{
    if (d->pid <= 0)
        return -1;
    if (sig)
        kill(d->pid, sig);
    int st = 0;
    /* Bounded wait: a daemon that hangs on stop is a failure, not a hang. */
    for (int i = 0; i < 3000; i++) {
        pid_t w = waitpid(d->pid, &st, WNOHANG);
        if (w == d->pid) {
            d->pid = 0;
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        usleep(10000);
    }
    fprintf(stderr, "itest: daemon %d did not exit in 30 s; killing it\n", (int)d->pid);
    kill(d->pid, SIGKILL);
    waitpid(d->pid, &st, 0);
    d->pid = 0;
    return 255;
}

int itest_daemon_wait_paused(itest_daemon *d, const int *give_up)
{
    while (d->pid > 0) {
        int st = 0;
        pid_t w = waitpid(d->pid, &st, WUNTRACED | WNOHANG);
        if (w == d->pid && WIFSTOPPED(st))
            return 0;
        if (w == d->pid || (w < 0 && errno != EINTR)) {
            d->pid = 0;
            return -1;
        }
        if (give_up && __atomic_load_n(give_up, __ATOMIC_ACQUIRE))
            return -1;
        usleep(1000);
    }
    return -1;
}

int itest_run_capture(const char *path, const char *const *args, char *err, size_t len)
{
    int fds[2];
    if (pipe(fds) < 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0)
            dup2(devnull, 1);
        close(fds[0]);
        close(fds[1]);
        execv(path, (char *const *)args);
        _exit(127);
    }
    close(fds[1]);
    size_t got = 0;
    ssize_t k;
    while (got + 1 < len && (k = read(fds[0], err + got, len - 1 - got)) > 0)
        got += (size_t)k;
    err[got] = 0;
    close(fds[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* ------------------------------------------------------------------ calls */
struct itest_conn {
    grpc_channel *ch;
    grpc_completion_queue *cq;
    grpc_metadata md[1]; /* the bearer token, if any */
    size_t n_md;
};

static int grpc_inited;

static void md_op(itest_conn *c, grpc_op *op)
{
    op->op = GRPC_OP_SEND_INITIAL_METADATA;
    op->data.send_initial_metadata.count = c->n_md;
    op->data.send_initial_metadata.metadata = c->n_md ? c->md : NULL;
}

itest_conn *itest_connect(const char *addr) { return itest_connect_opts(addr, NULL); }

static char *pem(const char *path)
{
    size_t n;
    return path ? (char *)itest_read_file(path, &n) : NULL;
}

itest_conn *itest_connect_opts(const char *addr, const itest_conn_opts *o)
{
    if (!grpc_inited) {
        grpc_init();
        grpc_inited = 1;
    }
    itest_conn *c = calloc(1, sizeof *c);
    grpc_arg args[3];
    memset(args, 0, sizeof args);
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[0].value.integer = -1;
    grpc_channel_args ca = {1, args};
    if (o && o->gzip) {
        args[ca.num_args].type = GRPC_ARG_INTEGER;
        args[ca.num_args].key = (char *)GRPC_COMPRESSION_CHANNEL_DEFAULT_ALGORITHM;
        args[ca.num_args++].value.integer = GRPC_COMPRESS_GZIP;
    }
    grpc_channel_credentials *cr;
    if (o && (o->ca || o->cert)) {
        char *ca_pem = pem(o->ca), *cert = pem(o->cert), *key = pem(o->key);
        grpc_ssl_pem_key_cert_pair pair = {key, cert};
        cr = grpc_ssl_credentials_create(ca_pem, cert && key ? &pair : NULL, NULL, NULL);
        free(ca_pem);
        free(cert);
        free(key);
        if (o->server_name) {
            args[ca.num_args].type = GRPC_ARG_STRING;
            args[ca.num_args].key = (char *)GRPC_SSL_TARGET_NAME_OVERRIDE_ARG;
            args[ca.num_args++].value.string = (char *)o->server_name;
        }
    } else {
        cr = grpc_insecure_credentials_create();
    }
    if (o && o->token) {
        char v[512];
        snprintf(v, sizeof v, "Bearer %s", o->token);
        c->md[0].key = grpc_slice_from_static_string("authorization");
        c->md[0].value = grpc_slice_from_copied_string(v);
        c->n_md = 1;
    }
    c->ch = grpc_channel_create(addr, cr, &ca);
    grpc_channel_credentials_release(cr);
    c->cq = grpc_completion_queue_create_for_pluck(NULL);
    return c;
}

void itest_disconnect(itest_conn *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n_md; i++) {
        grpc_slice_unref(c->md[i].key);
        grpc_slice_unref(c->md[i].value);
    }
    grpc_channel_destroy(c->ch);
    grpc_completion_queue_shutdown(c->cq);
    while (grpc_completion_queue_pluck(c->cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL)
               .type != GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(c->cq);
    free(c);
}

void itest_res_free(itest_res *r)
{
    free(r->data);
    r->data = NULL;
    r->len = 0;
}

int itest_deadline_ms = 120000;

static gpr_timespec deadline_ms(int ms)
{
    return gpr_time_add(gpr_now(GPR_CLOCK_REALTIME), gpr_time_from_millis(ms, GPR_TIMESPAN));
}

static gpr_timespec deadline_s(int s)
{
    return gpr_time_add(gpr_now(GPR_CLOCK_REALTIME), gpr_time_from_seconds(s, GPR_TIMESPAN));
}

static grpc_call *make_call(itest_conn *c, const char *method)
{
    char path[256];
    if (method[0] == '/')
        snprintf(path, sizeof path, "%s", method);
    else
        snprintf(path, sizeof path, "/%s/%s", rt_service()->name, method);
    grpc_slice m = grpc_slice_from_copied_string(path);
    grpc_call *call = grpc_channel_create_call(c->ch, NULL, GRPC_PROPAGATE_DEFAULTS, c->cq, m,
                                               NULL, deadline_ms(itest_deadline_ms), NULL);
    grpc_slice_unref(m);
    return call;
}

static int batch(itest_conn *c, grpc_call *call, grpc_op *ops, size_t n, void *tag)
{
    if (grpc_call_start_batch(call, ops, n, tag, NULL) != GRPC_CALL_OK)
        return 0;
    grpc_event ev = grpc_completion_queue_pluck(c->cq, tag, deadline_s(180), NULL);
    return ev.type == GRPC_OP_COMPLETE && ev.success;
}

static grpc_byte_buffer *bb_from(const void *data, size_t len)
{
    grpc_slice s = grpc_slice_from_copied_buffer((const char *)data, len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

static void bb_take(grpc_byte_buffer *bb, itest_res *r)
{
    if (!bb)
        return;
    grpc_byte_buffer_reader rd;
    grpc_byte_buffer_reader_init(&rd, bb);
    grpc_slice s = grpc_byte_buffer_reader_readall(&rd);
    grpc_byte_buffer_reader_destroy(&rd);
    r->len = GRPC_SLICE_LENGTH(s);
    r->data = malloc(r->len ? r->len : 1);
    memcpy(r->data, GRPC_SLICE_START_PTR(s), r->len);
    grpc_slice_unref(s);
    grpc_byte_buffer_destroy(bb);
}

typedef struct status_box {
    grpc_metadata_array trailing;
    grpc_status_code status;
    grpc_slice details;
    const char *error_string;
} status_box;

static void status_op(grpc_op *op, status_box *b)
{
    memset(b, 0, sizeof *b);
    grpc_metadata_array_init(&b->trailing);
    op->op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    op->data.recv_status_on_client.trailing_metadata = &b->trailing;
    op->data.recv_status_on_client.status = &b->status;
    op->data.recv_status_on_client.status_details = &b->details;
    op->data.recv_status_on_client.error_string = &b->error_string;
}

static void status_take(status_box *b, itest_res *r, int ok)
{
    r->status = ok ? (int)b->status : -1;
    size_t n = GRPC_SLICE_LENGTH(b->details);
    if (n >= sizeof r->details)
        n = sizeof r->details - 1;
    memcpy(r->details, GRPC_SLICE_START_PTR(b->details), n);
    r->details[n] = 0;
    grpc_slice_unref(b->details);
    if (b->error_string)
        gpr_free((void *)b->error_string);
    grpc_metadata_array_destroy(&b->trailing);
}

int itest_unary_raw(itest_conn *c, const char *method, const void *req, size_t len,
                    itest_res *r)
{
    memset(r, 0, sizeof *r);
    grpc_call *call = make_call(c, method);
    grpc_byte_buffer *send = bb_from(req, len), *recv = NULL;
    grpc_metadata_array imd;
    grpc_metadata_array_init(&imd);
    status_box sb;
    grpc_op ops[6];
    memset(ops, 0, sizeof ops);
    md_op(c, &ops[0]);
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &imd;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &recv;
    status_op(&ops[5], &sb);
    uint64_t t0 = itest_now_ns();
    int ok = batch(c, call, ops, 6, (void *)1);
    r->rtt_ns = itest_now_ns() - t0;
    grpc_byte_buffer_destroy(send);
    status_take(&sb, r, ok);
    bb_take(recv, r);
    grpc_metadata_array_destroy(&imd);
    grpc_call_unref(call);
    return r->status;
}

int itest_unary(itest_conn *c, const char *method, const ProtobufCMessage *req,
                const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
                itest_res *r)
{
    size_t n = protobuf_c_message_get_packed_size(req);
    uint8_t *buf = malloc(n ? n : 1);
    protobuf_c_message_pack(req, buf);
    itest_unary_raw(c, method, buf, n, r);
    free(buf);
    if (resp) {
        *resp = NULL;
        if (r->status == 0)
            *resp = protobuf_c_message_unpack(resp_desc, NULL, r->len, r->data);
    }
    return r->status;
}

int itest_client_stream(itest_conn *c, const char *method, ProtobufCMessage *const *msgs,
                        int n, int cancel_after, itest_res *r)
{
    memset(r, 0, sizeof *r);
    grpc_call *call = make_call(c, method);
    status_box sb;
    grpc_op sop;
    memset(&sop, 0, sizeof sop);
    status_op(&sop, &sb);
    /* Status first, so a server abort is seen while still sending. */
    grpc_call_start_batch(call, &sop, 1, (void *)9, NULL);
    grpc_op op;
    memset(&op, 0, sizeof op);
    md_op(c, &op);
    int ok = batch(c, call, &op, 1, (void *)1);
    uint64_t t0 = itest_now_ns();
    for (int i = 0; ok && i < n; i++) {
        if (cancel_after >= 0 && i == cancel_after)
            break;
        size_t len = protobuf_c_message_get_packed_size(msgs[i]);
        uint8_t *buf = malloc(len ? len : 1);
        protobuf_c_message_pack(msgs[i], buf);
        grpc_byte_buffer *bb = bb_from(buf, len);
        free(buf);
        memset(&op, 0, sizeof op);
        op.op = GRPC_OP_SEND_MESSAGE;
        op.data.send_message.send_message = bb;
        ok = batch(c, call, &op, 1, (void *)2);
        grpc_byte_buffer_destroy(bb);
    }
    grpc_byte_buffer *recv = NULL;
    grpc_metadata_array imd;
    grpc_metadata_array_init(&imd);
    if (cancel_after >= 0) {
        grpc_call_cancel(call, NULL);
    } else if (ok) {
        grpc_op ops[3];
        memset(ops, 0, sizeof ops);
        ops[0].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
        ops[1].op = GRPC_OP_RECV_INITIAL_METADATA;
        ops[1].data.recv_initial_metadata.recv_initial_metadata = &imd;
        ops[2].op = GRPC_OP_RECV_MESSAGE;
        ops[2].data.recv_message.recv_message = &recv;
        batch(c, call, ops, 3, (void *)3);
    } else {
        /* a send failed: the server ended the call, maybe with an answer
         * before the end of the stream */
        grpc_op ops[2];
        memset(ops, 0, sizeof ops);
        ops[0].op = GRPC_OP_RECV_INITIAL_METADATA;
        ops[0].data.recv_initial_metadata.recv_initial_metadata = &imd;
        ops[1].op = GRPC_OP_RECV_MESSAGE;
        ops[1].data.recv_message.recv_message = &recv;
        batch(c, call, ops, 2, (void *)3);
    }
    grpc_event ev = grpc_completion_queue_pluck(c->cq, (void *)9, deadline_s(180), NULL);
    r->rtt_ns = itest_now_ns() - t0;
    status_take(&sb, r, ev.type == GRPC_OP_COMPLETE);
    bb_take(recv, r);
    grpc_metadata_array_destroy(&imd);
    grpc_call_unref(call);
    return r->status;
}

struct itest_stream {
    itest_conn *c;
    grpc_call *call;
    status_box sb;
    int ok;
};

itest_stream *itest_stream_begin(itest_conn *c, const char *method)
{
    itest_stream *s = calloc(1, sizeof *s);
    s->c = c;
    s->call = make_call(c, method);
    grpc_op sop;
    memset(&sop, 0, sizeof sop);
    status_op(&sop, &s->sb);
    grpc_call_start_batch(s->call, &sop, 1, (void *)s, NULL);
    grpc_op op;
    memset(&op, 0, sizeof op);
    md_op(c, &op);
    s->ok = batch(c, s->call, &op, 1, (void *)1);
    return s;
}

int itest_stream_send(itest_stream *s, const ProtobufCMessage *msg)
{
    if (!s->ok)
        return 0;
    size_t len = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = malloc(len ? len : 1);
    protobuf_c_message_pack(msg, buf);
    grpc_byte_buffer *bb = bb_from(buf, len);
    free(buf);
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_SEND_MESSAGE;
    op.data.send_message.send_message = bb;
    s->ok = batch(s->c, s->call, &op, 1, (void *)2);
    grpc_byte_buffer_destroy(bb);
    return s->ok;
}

int itest_stream_finish(itest_stream *s, int cancel, itest_res *r)
{
    memset(r, 0, sizeof *r);
    grpc_byte_buffer *recv = NULL;
    grpc_metadata_array imd;
    grpc_metadata_array_init(&imd);
    if (cancel == 1) {
        grpc_call_cancel(s->call, NULL);
    } else if (s->ok || cancel == 2) {
        /* half-close, or (2: the daemon ends the call, a stalled stream)
         * only read the reply side as a client does, so its early status
         * is taken in */
        grpc_op ops[3];
        memset(ops, 0, sizeof ops);
        int n = 0;
        if (cancel != 2)
            ops[n++].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
        ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
        ops[n++].data.recv_initial_metadata.recv_initial_metadata = &imd;
        ops[n].op = GRPC_OP_RECV_MESSAGE;
        ops[n++].data.recv_message.recv_message = &recv;
        batch(s->c, s->call, ops, n, (void *)3);
    }
    grpc_event ev = grpc_completion_queue_pluck(s->c->cq, (void *)s, deadline_s(180), NULL);
    status_take(&s->sb, r, ev.type == GRPC_OP_COMPLETE);
    bb_take(recv, r);
    grpc_metadata_array_destroy(&imd);
    grpc_call_unref(s->call);
    free(s);
    return r->status;
}

int itest_server_stream(itest_conn *c, const char *method, const ProtobufCMessage *req,
                        itest_msg_fn on_msg, void *ud, itest_res *r)
{
    memset(r, 0, sizeof *r);
    grpc_call *call = make_call(c, method);
    status_box sb;
    grpc_op sop;
    memset(&sop, 0, sizeof sop);
    status_op(&sop, &sb);
    grpc_call_start_batch(call, &sop, 1, (void *)9, NULL);
    size_t len = protobuf_c_message_get_packed_size(req);
    uint8_t *buf = malloc(len ? len : 1);
    protobuf_c_message_pack(req, buf);
    grpc_byte_buffer *bb = bb_from(buf, len);
    free(buf);
    grpc_metadata_array imd;
    grpc_metadata_array_init(&imd);
    grpc_op ops[4];
    memset(ops, 0, sizeof ops);
    md_op(c, &ops[0]);
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = bb;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &imd;
    uint64_t t0 = itest_now_ns();
    int ok = batch(c, call, ops, 4, (void *)1);
    grpc_byte_buffer_destroy(bb);
    while (ok) {
        grpc_byte_buffer *recv = NULL;
        grpc_op op;
        memset(&op, 0, sizeof op);
        op.op = GRPC_OP_RECV_MESSAGE;
        op.data.recv_message.recv_message = &recv;
        if (!batch(c, call, &op, 1, (void *)2) || !recv)
            break;
        itest_res tmp;
        memset(&tmp, 0, sizeof tmp);
        bb_take(recv, &tmp);
        int stop = on_msg ? on_msg(ud, tmp.data, tmp.len) : 0;
        free(r->data); /* keep the last message */
        r->data = tmp.data;
        r->len = tmp.len;
        if (stop) {
            grpc_call_cancel(call, NULL);
            break;
        }
    }
    grpc_event ev = grpc_completion_queue_pluck(c->cq, (void *)9, deadline_s(180), NULL);
    r->rtt_ns = itest_now_ns() - t0;
    status_take(&sb, r, ev.type == GRPC_OP_COMPLETE);
    grpc_metadata_array_destroy(&imd);
    grpc_call_unref(call);
    return r->status;
}

/* ---------------------------------------------------------------- helpers */
int itest_ping(itest_conn *c)
{
    Rtrain__V1__PingRequest q = RTRAIN__V1__PING_REQUEST__INIT;
    itest_res r;
    int st = itest_unary(c, "Ping", &q.base, NULL, NULL, &r);
    itest_res_free(&r);
    return st;
}

void itest_csv_part(Rtrain__V1__DataPart *p, uint64_t len)
{
    rtrain__v1__data_part__init(p);
    p->role = RTRAIN__V1__DATA_ROLE__ROLE_BOTH;
    p->format = RTRAIN__V1__DATA_FORMAT__FORMAT_CSV;
    p->length = len;
    p->label_column = -1;
    p->csv_header = 1;
}

int itest_upload_iris(itest_conn *c, const char *session, char *id, itest_res *r)
{
    char path[512];
    snprintf(path, sizeof path, "%s/iris.csv", itest_data_dir());
    size_t len;
    uint8_t *csv = itest_read_file(path, &len);
    if (!csv) {
        memset(r, 0, sizeof *r);
        r->status = -1;
        snprintf(r->details, sizeof r->details, "cannot read %.400s", path);
        return -1;
    }
    Rtrain__V1__DataPart p;
    itest_csv_part(&p, len);
    Rtrain__V1__DataPart *pp[1] = {&p};
    int st = itest_upload(c, session, pp, 1, csv, len, 1 << 16, id, r);
    free(csv);
    return st;
}

Rtrain__V1__DataPart itest_raw_part(Rtrain__V1__DataRole role, Rtrain__V1__DType dt,
                                    int64_t *shape, size_t nd, size_t len)
{
    Rtrain__V1__DataPart p = RTRAIN__V1__DATA_PART__INIT;
    p.role = role;
    p.format = RTRAIN__V1__DATA_FORMAT__FORMAT_RAW;
    p.dtype = dt;
    p.shape = shape;
    p.n_shape = nd;
    p.length = len;
    return p;
}

int itest_session(itest_conn *c, const char *name, char *id)
{
    Rtrain__V1__CreateSessionRequest q = RTRAIN__V1__CREATE_SESSION_REQUEST__INIT;
    q.name = (char *)name;
    Rtrain__V1__CreateSessionResponse *resp = NULL;
    itest_res r;
    itest_unary(c, "CreateSession", &q.base, &rtrain__v1__create_session_response__descriptor,
                (ProtobufCMessage **)&resp, &r);
    id[0] = 0;
    if (resp) {
        snprintf(id, 40, "%s", resp->session_id);
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    }
    itest_res_free(&r);
    return r.status;
}

int itest_upload(itest_conn *c, const char *session, Rtrain__V1__DataPart **parts, int n_parts,
                 const uint8_t *data, size_t len, size_t chunk, char *id, itest_res *r)
{
    int n = (int)(len / chunk) + 2;
    Rtrain__V1__UploadChunk *ch = calloc((size_t)n, sizeof *ch);
    ProtobufCMessage **msgs = calloc((size_t)n, sizeof *msgs);
    Rtrain__V1__DatasetHeader h = RTRAIN__V1__DATASET_HEADER__INIT;
    h.session_id = (char *)session;
    h.name = "itest";
    h.parts = parts;
    h.n_parts = (size_t)n_parts;
    h.total_bytes = len;
    int k = 0;
    size_t off = 0;
    do {
        Rtrain__V1__UploadChunk init = RTRAIN__V1__UPLOAD_CHUNK__INIT;
        ch[k] = init;
        if (k == 0)
            ch[k].header = &h;
        size_t m = len - off < chunk ? len - off : chunk;
        ch[k].offset = off;
        ch[k].data.data = (uint8_t *)data + off;
        ch[k].data.len = m;
        off += m;
        if (off == len) {
            ch[k].last = 1;
            ch[k].checksum = XXH64(data, len, 0);
        }
        msgs[k] = &ch[k].base;
        k++;
    } while (off < len);
    itest_client_stream(c, "UploadDataset", msgs, k, -1, r);
    if (id)
        id[0] = 0;
    if (r->status == 0 && id) {
        Rtrain__V1__UploadResponse *u = rtrain__v1__upload_response__unpack(NULL, r->len, r->data);
        if (u && u->dataset)
            snprintf(id, 40, "%s", u->dataset->dataset_id);
        if (u)
            rtrain__v1__upload_response__free_unpacked(u, NULL);
    }
    free(ch);
    free(msgs);
    return r->status;
}

/* ---------------------------------------------- the iris model (W-A) */
Rtrain__V1__Graph *itest_iris_graph(int hidden)
{
    static Rtrain__V1__Graph g;
    static Rtrain__V1__ValueInfo in;
    static Rtrain__V1__ValueInfo *ins[1];
    static Rtrain__V1__Param p[4];
    static Rtrain__V1__Param *pp[4];
    static Rtrain__V1__Node n[4];
    static Rtrain__V1__Node *np[4];
    static int64_t in_shape[2] = {-1, 4}, s0[2], s1[1], s2[2], s3[1];
    static char *d1_in[3] = {"x", "d1/kernel", "d1/bias"}, *r1_in[1] = {"d1"},
                *d2_in[3] = {"r1", "d2/kernel", "d2/bias"}, *pr_in[1] = {"d2"};
    Rtrain__V1__Graph gi = RTRAIN__V1__GRAPH__INIT;
    Rtrain__V1__ValueInfo vi = RTRAIN__V1__VALUE_INFO__INIT;
    g = gi;
    in = vi;
    in.name = "x";
    in.dtype = RTRAIN__V1__DTYPE__F32;
    in.shape = in_shape;
    in.n_shape = 2;
    ins[0] = &in;
    s0[0] = 4; s0[1] = hidden; s1[0] = hidden; s2[0] = hidden; s2[1] = 3; s3[0] = 3;
    const char *pn[4] = {"d1/kernel", "d1/bias", "d2/kernel", "d2/bias"};
    int64_t *ps[4] = {s0, s1, s2, s3};
    size_t pnd[4] = {2, 1, 2, 1};
    for (int i = 0; i < 4; i++) {
        Rtrain__V1__Param pi = RTRAIN__V1__PARAM__INIT;
        p[i] = pi;
        p[i].name = (char *)pn[i];
        p[i].shape = ps[i];
        p[i].n_shape = pnd[i];
        p[i].init = i % 2 ? RTRAIN__V1__INITIALIZER__INIT_ZEROS : RTRAIN__V1__INITIALIZER__INIT_GLOROT_UNIFORM;
        p[i].trainable = 1;
        pp[i] = &p[i];
    }
    const char *nn[4] = {"d1", "r1", "d2", "probs"}, *ops[4] = {"Dense", "Relu", "Dense", "Softmax"};
    char **nin[4] = {d1_in, r1_in, d2_in, pr_in};
    size_t nni[4] = {3, 1, 3, 1};
    for (int i = 0; i < 4; i++) {
        Rtrain__V1__Node ni = RTRAIN__V1__NODE__INIT;
        n[i] = ni;
        n[i].name = (char *)nn[i];
        n[i].op = (char *)ops[i];
        n[i].inputs = nin[i];
        n[i].n_inputs = nni[i];
        np[i] = &n[i];
    }
    g.inputs = ins;
    g.n_inputs = 1;
    g.params = pp;
    g.n_params = 4;
    g.nodes = np;
    g.n_nodes = 4;
    g.output = "probs";
    return &g;
}

void itest_iris_config(Rtrain__V1__TrainConfig *c)
{
    static char *metrics[1] = {"accuracy"};
    Rtrain__V1__TrainConfig ci = RTRAIN__V1__TRAIN_CONFIG__INIT;
    *c = ci;
    c->loss = "sparse_categorical_crossentropy";
    c->optimizer = "adam";
    c->learning_rate = 0.01f;
    c->batch_size = 16;
    c->seed = 7;
    c->metrics = metrics;
    c->n_metrics = 1;
}

/* All of a program's weights' bytes, concatenated, for bit-exact
 * comparisons: malloc'ed, *len bytes; NULL when GetWeights fails (its
 * status and details in r, when r is not NULL). With keep, the response is
 * the caller's too (free it); otherwise it is freed here. */
Rtrain__V1__GetWeightsResponse *itest_get_weights(itest_conn *c, const char *sid,
                                                  const char *pid)
{
    Rtrain__V1__GetWeightsRequest q = RTRAIN__V1__GET_WEIGHTS_REQUEST__INIT;
    q.session_id = (char *)sid;
    q.program_id = (char *)pid;
    Rtrain__V1__GetWeightsResponse *p = NULL;
    itest_res r;
    itest_unary(c, "GetWeights", &q.base, &rtrain__v1__get_weights_response__descriptor,
                (ProtobufCMessage **)&p, &r);
    CHECK(p != NULL, "GetWeights: %d %s", r.status, r.details);
    itest_res_free(&r);
    return p;
}

uint8_t *itest_weights_blob(itest_conn *c, const char *sid, const char *pid, size_t *len,
                            Rtrain__V1__GetWeightsResponse **keep, itest_res *r)
{
    Rtrain__V1__GetWeightsRequest q = RTRAIN__V1__GET_WEIGHTS_REQUEST__INIT;
    q.session_id = (char *)sid;
    q.program_id = (char *)pid;
    Rtrain__V1__GetWeightsResponse *p = NULL;
    itest_res own;
    if (!r)
        r = &own;
    itest_unary(c, "GetWeights", &q.base, &rtrain__v1__get_weights_response__descriptor,
                (ProtobufCMessage **)&p, r);
    itest_res_free(r);
    *len = 0;
    if (keep)
        *keep = p;
    if (!p)
        return NULL;
    for (size_t i = 0; i < p->n_weights; i++)
        *len += p->weights[i]->data.len;
    uint8_t *b = malloc(*len + 1), *o = b;
    for (size_t i = 0; i < p->n_weights; i++) {
        memcpy(o, p->weights[i]->data.data, p->weights[i]->data.len);
        o += p->weights[i]->data.len;
    }
    if (!keep)
        protobuf_c_message_free_unpacked(&p->base, NULL);
    return b;
}
