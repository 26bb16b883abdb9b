/*
 * test_flags.c - daemon flags against real daemons on 127.0.0.1, each
 * checked by what it changes that a client or the process table can see
 * (no timing):
 *  - --compile-threads N starts N compile workers (the daemon's threads:
 *    gRPC names its own, the daemon's keep the process name);
 *  - --checkpoint-keep K keeps the K newest checkpoints of a program;
 *  - --max-upload-bytes refuses an upload declaring more, naming the flag;
 *  - --upload-keep-s 0 keeps nothing of a broken upload;
 *  - the --quota-* defaults bind a principal the tokens file gives no
 *    quota: sessions, programs, uploads, upload-bytes, call-bytes,
 *    store-bytes, program-bytes, each refusal naming its quota.
 *
 *   itest_flags RTRAIND
 */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <xxhash.h>

#include "itest.h"

static const char *rtraind;
static char dir[64];
static uint8_t *iris;
static size_t iris_len;

#define FREE(p) do { if (p) protobuf_c_message_free_unpacked(&(p)->base, NULL); } while (0)

/* Threads of pid still named after the process: the daemon's own. */
static int own_threads(pid_t pid)
{
    char path[64], comm[64], name[64] = "";
    snprintf(path, sizeof path, "/proc/%d/comm", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f || !fgets(name, sizeof name, f)) {
        if (f)
            fclose(f);
        return -1;
    }
    fclose(f);
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        char tp[320];
        snprintf(tp, sizeof tp, "/proc/%d/task/%s/comm", (int)pid, e->d_name);
        FILE *t = fopen(tp, "r");
        if (t && fgets(comm, sizeof comm, t) && !strcmp(comm, name))
            n++;
        if (t)
            fclose(t);
    }
    if (d)
        closedir(d);
    return n;
}

/* CreateSession: id into sid, token into tok (both >= 40 bytes). */
static int session(itest_conn *c, char *sid, char *tok, itest_res *r)
{
    Rtrain__V1__CreateSessionRequest q = RTRAIN__V1__CREATE_SESSION_REQUEST__INIT;
    q.name = "flags";
    Rtrain__V1__CreateSessionResponse *p = NULL;
    int st = itest_unary(c, "CreateSession", &q.base,
                         &rtrain__v1__create_session_response__descriptor,
                         (ProtobufCMessage **)&p, r);
    snprintf(sid, 40, "%s", p ? p->session_id : "");
    if (tok)
        snprintf(tok, 40, "%s", p ? p->session_token : "");
    FREE(p);
    return st;
}

/* The iris MLP as a native graph; its program id into pid. */
static int compile_iris(itest_conn *c, const char *sid, char *pid, itest_res *r)
{
    Rtrain__V1__TrainConfig cfg;
    itest_iris_config(&cfg);
    Rtrain__V1__CompileRequest q = RTRAIN__V1__COMPILE_REQUEST__INIT;
    q.session_id = (char *)sid;
    q.model_case = RTRAIN__V1__COMPILE_REQUEST__MODEL_GRAPH;
    q.graph = itest_iris_graph(16);
    q.config = &cfg;
    Rtrain__V1__CompileResponse *p = NULL;
    int st = itest_unary(c, "Compile", &q.base, &rtrain__v1__compile_response__descriptor,
                         (ProtobufCMessage **)&p, r);
    if (pid)
        snprintf(pid, 40, "%s", p ? p->program_id : "");
    FREE(p);
    return st;
}

/* The header of an upload of `bytes` CSV bytes (with a header line). */
static Rtrain__V1__DataPart csv(uint64_t bytes)
{
    Rtrain__V1__DataPart p = RTRAIN__V1__DATA_PART__INIT;
    p.role = RTRAIN__V1__DATA_ROLE__ROLE_BOTH;
    p.format = RTRAIN__V1__DATA_FORMAT__FORMAT_CSV;
    p.length = bytes;
    p.label_column = -1;
    p.csv_header = 1;
    return p;
}

static int upload_iris(itest_conn *c, const char *sid, char *did, itest_res *r)
{
    Rtrain__V1__DataPart p = csv(iris_len);
    Rtrain__V1__DataPart *pp[1] = {&p};
    return itest_upload(c, sid, pp, 1, iris, iris_len, 1024, did, r);
}

/* An upload declaring `bytes`, left open after its header. */
static itest_stream *held_upload(itest_conn *c, const char *sid, uint64_t bytes)
{
    Rtrain__V1__DataPart p = csv(bytes);
    Rtrain__V1__DataPart *pp[1] = {&p};
    Rtrain__V1__DatasetHeader h = RTRAIN__V1__DATASET_HEADER__INIT;
    h.session_id = (char *)sid;
    h.parts = pp;
    h.n_parts = 1;
    h.total_bytes = bytes;
    Rtrain__V1__UploadChunk ch = RTRAIN__V1__UPLOAD_CHUNK__INIT;
    ch.header = &h;
    itest_stream *s = itest_stream_begin(c, "UploadDataset");
    itest_stream_send(s, &ch.base);
    return s;
}

static int refused(const itest_res *r, int status, const char *needle)
{
    return r->status == status && strstr(r->details, needle) != NULL;
}

/* A daemon with extra flags, a connection to it (with the bearer token,
 * if any) and a session in it (its token into tok, if not NULL). */
static itest_conn *daemon_session(itest_daemon *d, const char *const *extra, const char *token,
                                  char *sid, char *tok)
{
    if (itest_daemon_start(d, rtraind, extra) != 0) {
        CHECK(0, "the daemon did not start (%s ...)", extra[0]);
        exit(1);
    }
    itest_conn_opts o = {.token = token};
    itest_conn *c = itest_connect_opts(d->addr, &o);
    itest_res r;
    CHECK(session(c, sid, tok, &r) == 0, "session: %d %s", r.status, r.details);
    itest_res_free(&r);
    return c;
}

static void done(itest_daemon *d, itest_conn *c)
{
    itest_disconnect(c);
    CHECK(itest_daemon_stop(d, SIGTERM) == 0, "the daemon's exit status");
}

/* ------------------------------------------------------------ the cases */

/* --compile-threads 3 runs two more compile workers than 1 (the daemon
 * starts them with the server; the count is read until it settles). */
static void t_compile_threads(void)
{
    itest_daemon d1, d3;
    const char *one[] = {"--compile-threads", "1", NULL}, *three[] = {"--compile-threads", "3",
                                                                       NULL};
    CHECK(itest_daemon_start(&d1, rtraind, one) == 0 && itest_daemon_start(&d3, rtraind, three) == 0,
          "daemons");
    int n1 = 0, n3 = 0;
    for (int i = 0; i < 3000 && n3 - n1 != 2; i++) {
        n1 = own_threads(d1.pid);
        n3 = own_threads(d3.pid);
        if (n3 - n1 != 2)
            usleep(10000);
    }
    printf("  daemon threads: %d with --compile-threads 1, %d with 3\n", n1, n3);
    CHECK(n1 > 0 && n3 - n1 == 2, "--compile-threads 3: %d threads, 1: %d", n3, n1);
    /* three compiles one after another all finish */
    itest_conn *c = itest_connect(d3.addr);
    itest_res r;
    char sid[40], pid[40];
    CHECK(session(c, sid, NULL, &r) == 0, "session");
    itest_res_free(&r);
    for (int i = 0; i < 3; i++) {
        CHECK(compile_iris(c, sid, pid, &r) == 0 && pid[0], "compile %d: %s", i, r.details);
        itest_res_free(&r);
    }
    itest_disconnect(c);
    CHECK(itest_daemon_stop(&d1, SIGTERM) == 0 && itest_daemon_stop(&d3, SIGTERM) == 0, "stop");
}

/* The ckpt-<n>.rtck files of a program's folder: their count, the largest n. */
static int checkpoints(const char *state, const char *sid, const char *pid, long *newest)
{
    char path[300];
    snprintf(path, sizeof path, "%s/sessions/%s/%s", state, sid, pid);
    DIR *d = opendir(path);
    int n = 0;
    *newest = -1;
    for (struct dirent *e; d && (e = readdir(d));) {
        long k;
        char ext[16];
        if (sscanf(e->d_name, "ckpt-%ld.%15s", &k, ext) == 2 && !strcmp(ext, "rtck")) {
            n++;
            *newest = k > *newest ? k : *newest;
        }
    }
    if (d)
        closedir(d);
    return n;
}

/* --checkpoint-keep 2: the compile writes the program's first checkpoint;
 * after each of five more on demand (a step between them) its folder holds
 * two, the newest the one just written. */
static void t_checkpoint_keep(void)
{
    char state[128];
    snprintf(state, sizeof state, "%s/state", dir);
    itest_daemon d;
    const char *extra[] = {"--state-dir", state, "--checkpoint-keep", "2", "--checkpoint-every-s",
                           "0", NULL};
    char sid[40], tok[40], pid[40], did[40];
    itest_conn *c = daemon_session(&d, extra, NULL, sid, tok);
    itest_res r;
    CHECK(compile_iris(c, sid, pid, &r) == 0, "compile: %s", r.details);
    itest_res_free(&r);
    CHECK(upload_iris(c, sid, did, &r) == 0, "upload: %s", r.details);
    itest_res_free(&r);
    long prev = -1;
    for (int i = 0; i < 5; i++) {
        Rtrain__V1__RunStepsRequest q = RTRAIN__V1__RUN_STEPS_REQUEST__INIT;
        q.session_id = sid;
        q.program_id = pid;
        q.dataset_id = did;
        q.steps = 1;
        CHECK(itest_unary(c, "RunSteps", &q.base, NULL, NULL, &r) == 0, "step: %s", r.details);
        itest_res_free(&r);
        Rtrain__V1__CheckpointRequest k = RTRAIN__V1__CHECKPOINT_REQUEST__INIT;
        k.session_id = sid;
        k.program_id = pid;
        k.session_token = tok;
        k.save = 1;
        Rtrain__V1__CheckpointResponse *kr = NULL;
        itest_unary(c, "Checkpoint", &k.base, &rtrain__v1__checkpoint_response__descriptor,
                    (ProtobufCMessage **)&kr, &r);
        CHECK(kr && kr->saved && kr->durable, "checkpoint %d: %d %s", i, r.status, r.details);
        FREE(kr);
        itest_res_free(&r);
        long newest;
        int n = checkpoints(state, sid, pid, &newest);
        CHECK(n == 2 && newest > prev, "after checkpoint %d: %d files, newest %ld", i, n, newest);
        prev = newest;
    }
    done(&d, c);
}

/* --max-upload-bytes 8000: a header declaring 9000 bytes is refused,
 * naming the flag; iris (2758) fits. --upload-keep-s 0: an upload cut
 * short after its content hash keeps nothing for a resume. */
static void t_upload_limits(void)
{
    itest_daemon d;
    const char *extra[] = {"--max-upload-bytes", "8000", "--upload-keep-s", "0", NULL};
    char sid[40], did[40];
    itest_conn *c = daemon_session(&d, extra, NULL, sid, NULL);
    itest_res r;
    itest_stream *s = held_upload(c, sid, 9000);
    itest_stream_finish(s, 0, &r);
    CHECK(refused(&r, 8, "(--max-upload-bytes)"), "9000 declared bytes: %d %s", r.status,
          r.details);
    itest_res_free(&r);
    CHECK(upload_iris(c, sid, did, &r) == 0, "iris fits: %d %s", r.status, r.details);
    itest_res_free(&r);

    /* iris again under another hash (its label column named): two of
     * three chunks, then the stream ends */
    XXH128_canonical_t hc;
    XXH128_canonicalFromHash(&hc, XXH3_128bits(iris, iris_len));
    Rtrain__V1__DataPart p = csv(iris_len);
    p.label_column = 4;
    Rtrain__V1__DataPart *pp[1] = {&p};
    Rtrain__V1__DatasetHeader h = RTRAIN__V1__DATASET_HEADER__INIT;
    h.session_id = sid;
    h.parts = pp;
    h.n_parts = 1;
    h.total_bytes = iris_len;
    h.content_hash.data = hc.digest;
    h.content_hash.len = 16;
    h.no_checksum = 1;
    Rtrain__V1__UploadChunk ch[2];
    ProtobufCMessage *m[2];
    for (int i = 0; i < 2; i++) {
        Rtrain__V1__UploadChunk init = RTRAIN__V1__UPLOAD_CHUNK__INIT;
        ch[i] = init;
        ch[i].offset = (uint64_t)i * 1000;
        ch[i].data.data = iris + i * 1000;
        ch[i].data.len = 1000;
        m[i] = &ch[i].base;
    }
    ch[0].header = &h;
    itest_client_stream(c, "UploadDataset", m, 2, -1, &r);
    CHECK(r.status == GRPC_STATUS_DATA_LOSS, "cut short: %d %s", r.status, r.details);
    itest_res_free(&r);
    Rtrain__V1__FindDatasetRequest q = RTRAIN__V1__FIND_DATASET_REQUEST__INIT;
    q.session_id = sid;
    q.content_hash = h.content_hash;
    q.header = &h;
    Rtrain__V1__FindDatasetResponse *f = NULL;
    itest_unary(c, "FindDataset", &q.base, &rtrain__v1__find_dataset_response__descriptor,
                (ProtobufCMessage **)&f, &r);
    CHECK(f && !f->found && f->resume_offset == 0,
          "--upload-keep-s 0: a broken upload keeps %llu bytes",
          f ? (unsigned long long)f->resume_offset : 0ull);
    FREE(f);
    itest_res_free(&r);
    done(&d, c);
}

/* A tokens file with one principal and no quotas of its own; the token
 * into tok (>= 80 bytes). */
static void tokens_file(const char *path, char *tok)
{
    char cmd[600], tf[200];
    snprintf(tf, sizeof tf, "%s/token", dir);
    snprintf(cmd, sizeof cmd, "'%s' --new-token flags >'%s' 2>'%s'", rtraind, path, tf);
    CHECK(system(cmd) == 0, "%s", cmd);
    size_t n;
    char *e = (char *)itest_read_file(tf, &n);
    tok[0] = 0;
    if (e) {
        e[strcspn(e, "\n")] = 0;
        const char *sp = strrchr(e, ' ');
        snprintf(tok, 80, "%s", sp ? sp + 1 : e);
        free(e);
    }
    CHECK(strlen(tok) == 64, "token '%s'", tok);
}

static int quota(const itest_res *r, const char *name)
{
    char want[64];
    snprintf(want, sizeof want, "quota %s of principal flags", name);
    return refused(r, 8, want);
}

/* The --quota-* flags set the quotas of a principal whose tokens line
 * names none. */
static void t_quota_defaults(void)
{
    char tokens[128], tok[80];
    snprintf(tokens, sizeof tokens, "%s/tokens.txt", dir);
    tokens_file(tokens, tok);
    itest_daemon d;
    const char *a[] = {"--tokens", tokens, "--quota-sessions", "2", "--quota-programs", "1",
                       "--quota-uploads", "1", "--quota-upload-bytes", "64K",
                       "--quota-call-bytes", "256K", NULL};
    char s1[40], s2[40], s3[40], pid[40];
    itest_conn *c = daemon_session(&d, a, tok, s1, NULL);
    itest_res r;
    CHECK(session(c, s2, NULL, &r) == 0, "a second session: %s", r.details);
    itest_res_free(&r);
    session(c, s3, NULL, &r);
    CHECK(quota(&r, "sessions"), "a third session: %d %s", r.status, r.details);
    itest_res_free(&r);
    CHECK(compile_iris(c, s1, pid, &r) == 0, "a program: %s", r.details);
    itest_res_free(&r);
    compile_iris(c, s2, NULL, &r);
    CHECK(quota(&r, "programs"), "a second program: %d %s", r.status, r.details);
    itest_res_free(&r);
    /* uploads 1: while one is held open (its header reaches the daemon on
     * the daemon's time: ask until it has), another is refused */
    itest_stream *held = held_upload(c, s1, 1000);
    char did[40];
    for (int i = 0; i < 3000; i++) {
        itest_res_free(&r);
        upload_iris(c, s1, did, &r);
        if (quota(&r, "uploads"))
            break;
        usleep(10000);
    }
    CHECK(quota(&r, "uploads"), "a second upload in flight: %d %s", r.status, r.details);
    itest_res_free(&r);
    itest_stream_finish(held, 1, &r);
    itest_res_free(&r);
    held = held_upload(c, s2, 100000);
    for (int i = 0; i < 3000; i++) { /* the cancelled one's slot comes back on its time */
        itest_stream_finish(held, 0, &r);
        if (!quota(&r, "uploads"))
            break;
        itest_res_free(&r);
        usleep(10000);
        held = held_upload(c, s2, 100000);
    }
    CHECK(quota(&r, "upload-bytes"), "100000 declared bytes: %d %s", r.status, r.details);
    itest_res_free(&r);
    Rtrain__V1__PingRequest pq = RTRAIN__V1__PING_REQUEST__INIT;
    pq.response_bytes = 1 << 20;
    itest_unary(c, "Ping", &pq.base, NULL, NULL, &r);
    CHECK(quota(&r, "call-bytes"), "a 1 MiB answer: %d %s", r.status, r.details);
    itest_res_free(&r);
    pq.response_bytes = 100 << 10;
    CHECK(itest_unary(c, "Ping", &pq.base, NULL, NULL, &r) == 0, "a 100 KiB answer: %s",
          r.details);
    itest_res_free(&r);
    done(&d, c);

    const char *b[] = {"--tokens", tokens, "--quota-store-bytes", "1K", "--quota-program-bytes",
                       "1K", NULL};
    c = daemon_session(&d, b, tok, s1, NULL);
    upload_iris(c, s1, did, &r);
    CHECK(quota(&r, "store-bytes"), "iris over 1K of store: %d %s", r.status, r.details);
    itest_res_free(&r);
    compile_iris(c, s1, pid, &r);
    CHECK(quota(&r, "program-bytes"), "the iris program over 1K: %d %s", r.status, r.details);
    itest_res_free(&r);
    done(&d, c);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s RTRAIND\n", argv[0]);
        return 2;
    }
    rtraind = argv[1];
    snprintf(dir, sizeof dir, "/tmp/rt-flags-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char path[512];
    snprintf(path, sizeof path, "%s/iris.csv", itest_data_dir());
    iris = itest_read_file(path, &iris_len);
    if (!iris) {
        fprintf(stderr, "cannot read %s\n", path);
        return 1;
    }
    RUN(t_compile_threads);
    RUN(t_checkpoint_keep);
    RUN(t_upload_limits);
    RUN(t_quota_defaults);
    free(iris);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return itest_summary();
}
