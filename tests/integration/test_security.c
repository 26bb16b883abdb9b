/* test_security.c - TLS, bearer tokens, isolation between principals and
 * quotas, against real daemons on 127.0.0.1. The CA and the certificates
 * are made here with the openssl CLI; the tokens with rtraind --new-token.
 *
 *     itest_security RTRAIND
 */
#include "itest.h"

#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <xxhash.h>

#define FREE(p) ((p) ? protobuf_c_message_free_unpacked(&(p)->base, NULL) : (void)0)

static char dir[256];
static const char *rtraind;

static char ca[300], srv_pem[300], srv_key[300], cli_pem[300], cli_key[300], evil_ca[300],
    evil_pem[300], evil_key[300];

/* ---------------------------------------------------------------- setup */
static int sh(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    CHECK(rc == 0, "command failed (%d): %s", rc, cmd);
    return rc;
}

#define EC "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"

static int make_pki(void)
{
    snprintf(ca, sizeof ca, "%s/ca.pem", dir);
    snprintf(srv_pem, sizeof srv_pem, "%s/srv.pem", dir);
    snprintf(srv_key, sizeof srv_key, "%s/srv.key", dir);
    snprintf(cli_pem, sizeof cli_pem, "%s/cli.pem", dir);
    snprintf(cli_key, sizeof cli_key, "%s/cli.key", dir);
    snprintf(evil_ca, sizeof evil_ca, "%s/evil-ca.pem", dir);
    snprintf(evil_pem, sizeof evil_pem, "%s/evil.pem", dir);
    snprintf(evil_key, sizeof evil_key, "%s/evil.key", dir);
    return sh("cd %s && exec >openssl.log 2>&1 && "
              "printf 'subjectAltName=IP:127.0.0.1\\n' > san.ext && "
              "openssl req -x509 " EC " -keyout ca.key -out ca.pem -days 2 -subj /CN=rtrain-test-ca && "
              "openssl req " EC " -keyout srv.key -out srv.csr -subj /CN=rtraind && "
              "openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
              "  -out srv.pem -days 2 -extfile san.ext && "
              "openssl req " EC " -keyout cli.key -out cli.csr -subj /CN=alice && "
              "openssl x509 -req -in cli.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
              "  -out cli.pem -days 2 && "
              "openssl req -x509 " EC " -keyout evil-ca.key -out evil-ca.pem -days 2 -subj /CN=evil-ca && "
              "openssl req " EC " -keyout evil.key -out evil.csr -subj /CN=mallory && "
              "openssl x509 -req -in evil.csr -CA evil-ca.pem -CAkey evil-ca.key -CAcreateserial "
              "  -out evil.pem -days 2 -extfile san.ext",
              dir);
}

/* A new token for principal: its tokens-file line goes to line (with
 * quotas appended), the token to tok. */
static void new_token(const char *principal, const char *quotas, char *line, size_t ll,
                      char *tok, size_t tl)
{
    char cmd[1024], errf[300];
    snprintf(errf, sizeof errf, "%s/tok.err", dir);
    snprintf(cmd, sizeof cmd, "%s --new-token %s 2>%s", rtraind, principal, errf);
    FILE *p = popen(cmd, "r");
    char out[256] = "";
    if (p) {
        if (!fgets(out, sizeof out, p))
            out[0] = 0;
        pclose(p);
    }
    out[strcspn(out, "\n")] = 0;
    snprintf(line, ll, "%s %s", out, quotas ? quotas : "");
    size_t n;
    char *e = (char *)itest_read_file(errf, &n);
    tok[0] = 0;
    if (e) {
        e[strcspn(e, "\n")] = 0;
        const char *sp = strrchr(e, ' ');
        snprintf(tok, tl, "%s", sp ? sp + 1 : "");
        free(e);
    }
    CHECK(strlen(out) > 64 && strlen(tok) == 64, "--new-token %s: '%s'", principal, out);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s", path);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static itest_conn *conn(const itest_daemon *d, const char *cafile, const char *cert,
                        const char *key, const char *token)
{
    itest_conn_opts o = {cafile, cert, key, token, NULL};
    return itest_connect_opts(d->addr, &o);
}

/* ---------------------------------------------------------------- calls */
static int ping(itest_conn *c, itest_res *r)
{
    Rtrain__V1__PingRequest q = RTRAIN__V1__PING_REQUEST__INIT;
    Rtrain__V1__PingResponse *p = NULL;
    int st = itest_unary(c, "Ping", &q.base, &rtrain__v1__ping_response__descriptor,
                         (ProtobufCMessage **)&p, r);
    FREE(p);
    itest_res_free(r);
    return st;
}

static int ping_st(itest_conn *c)
{
    itest_res r;
    return ping(c, &r);
}

static Rtrain__V1__TrainConfig *iris_config(void)
{
    static Rtrain__V1__TrainConfig c;
    itest_iris_config(&c);
    return &c;
}

static char *keras_json;

/* Compile the iris model in sid; program id into pid. Returns the status. */
static int compile(itest_conn *c, const char *sid, char *pid, itest_res *r)
{
    Rtrain__V1__CompileRequest q = RTRAIN__V1__COMPILE_REQUEST__INIT;
    q.session_id = (char *)sid;
    q.model_case = RTRAIN__V1__COMPILE_REQUEST__MODEL_KERAS_JSON;
    q.keras_json = keras_json;
    q.config = iris_config();
    Rtrain__V1__CompileResponse *p = NULL;
    int st = itest_unary(c, "Compile", &q.base, &rtrain__v1__compile_response__descriptor,
                         (ProtobufCMessage **)&p, r);
    if (pid)
        snprintf(pid, 40, "%s", p ? p->program_id : "");
    FREE(p);
    itest_res_free(r);
    return st;
}

static char *iris;
static size_t iris_len;

/* iris.csv read two ways: variant 1 names the label column explicitly,
 * which parses the same but is another dataset (another key). */
static Rtrain__V1__DataPart csv_part(size_t len, int variant)
{
    Rtrain__V1__DataPart p = RTRAIN__V1__DATA_PART__INIT;
    p.role = RTRAIN__V1__DATA_ROLE__ROLE_BOTH;
    p.format = RTRAIN__V1__DATA_FORMAT__FORMAT_CSV;
    p.length = len;
    p.label_column = variant ? 4 : -1;
    p.csv_header = 1;
    return p;
}

/* Upload iris.csv (3000 bytes once parsed) as variant. Returns the
 * status; the id into id, deduplicated into *dedup. */
static int upload(itest_conn *c, const char *sid, int variant, char *id, int *dedup, itest_res *r)
{
    Rtrain__V1__DataPart p = csv_part(iris_len, variant);
    Rtrain__V1__DataPart *pp[1] = {&p};
    int st = itest_upload(c, sid, pp, 1, (const uint8_t *)iris, iris_len, 1 << 16, id, r);
    if (dedup) {
        *dedup = -1;
        Rtrain__V1__UploadResponse *u =
            st == 0 ? rtrain__v1__upload_response__unpack(NULL, r->len, r->data) : NULL;
        if (u && u->dataset)
            *dedup = u->dataset->deduplicated;
        if (u)
            rtrain__v1__upload_response__free_unpacked(u, NULL);
    }
    return st;
}

static int run_steps(itest_conn *c, const char *sid, const char *pid, const char *did,
                     itest_res *r)
{
    Rtrain__V1__RunStepsRequest q = RTRAIN__V1__RUN_STEPS_REQUEST__INIT;
    q.session_id = (char *)sid;
    q.program_id = (char *)pid;
    q.dataset_id = (char *)did;
    q.steps = 5;
    Rtrain__V1__RunStepsResponse *p = NULL;
    int st = itest_unary(c, "RunSteps", &q.base, &rtrain__v1__run_steps_response__descriptor,
                         (ProtobufCMessage **)&p, r);
    FREE(p);
    itest_res_free(r);
    return st;
}


static int close_session(itest_conn *c, const char *sid, itest_res *r)
{
    Rtrain__V1__CloseSessionRequest q = RTRAIN__V1__CLOSE_SESSION_REQUEST__INIT;
    q.session_id = (char *)sid;
    Rtrain__V1__CloseSessionResponse *p = NULL;
    int st = itest_unary(c, "CloseSession", &q.base,
                         &rtrain__v1__close_session_response__descriptor,
                         (ProtobufCMessage **)&p, r);
    FREE(p);
    itest_res_free(r);
    return st;
}

static int find_iris(itest_conn *c, const char *sid, int *found)
{
    XXH128_canonical_t h;
    XXH128_canonicalFromHash(&h, XXH3_128bits(iris, iris_len));
    Rtrain__V1__DataPart p = csv_part(iris_len, 0);
    Rtrain__V1__DataPart *pp[1] = {&p};
    Rtrain__V1__DatasetHeader hd = RTRAIN__V1__DATASET_HEADER__INIT;
    hd.session_id = (char *)sid;
    hd.parts = pp;
    hd.n_parts = 1;
    hd.total_bytes = iris_len;
    Rtrain__V1__FindDatasetRequest q = RTRAIN__V1__FIND_DATASET_REQUEST__INIT;
    q.session_id = (char *)sid;
    q.content_hash.data = h.digest;
    q.content_hash.len = 16;
    q.header = &hd;
    Rtrain__V1__FindDatasetResponse *r = NULL;
    itest_res res;
    int st = itest_unary(c, "FindDataset", &q.base, &rtrain__v1__find_dataset_response__descriptor,
                         (ProtobufCMessage **)&r, &res);
    *found = r ? r->found : -1;
    FREE(r);
    itest_res_free(&res);
    return st;
}

/* Start an upload and leave it open after its header (declared bytes). */
static itest_stream *open_upload(itest_conn *c, const char *sid, uint64_t bytes)
{
    Rtrain__V1__DataPart p = csv_part(bytes, 0);
    Rtrain__V1__DataPart *pp[1] = {&p};
    Rtrain__V1__DatasetHeader h = RTRAIN__V1__DATASET_HEADER__INIT;
    h.session_id = (char *)sid;
    h.name = "held open";
    h.parts = pp;
    h.n_parts = 1;
    h.total_bytes = bytes;
    Rtrain__V1__UploadChunk ch = RTRAIN__V1__UPLOAD_CHUNK__INIT;
    ch.header = &h;
    itest_stream *s = itest_stream_begin(c, "UploadDataset");
    itest_stream_send(s, &ch.base);
    return s;
}

/* A whole upload whose checksum is wrong: DATA_LOSS unless refused
 * earlier (at its header). */
static int bad_checksum_upload(itest_conn *c, const char *sid, itest_res *r)
{
    Rtrain__V1__DataPart p = csv_part(iris_len, 0);
    Rtrain__V1__DataPart *pp[1] = {&p};
    Rtrain__V1__DatasetHeader h = RTRAIN__V1__DATASET_HEADER__INIT;
    h.session_id = (char *)sid;
    h.name = "probe";
    h.parts = pp;
    h.n_parts = 1;
    h.total_bytes = iris_len;
    Rtrain__V1__UploadChunk ch = RTRAIN__V1__UPLOAD_CHUNK__INIT;
    ch.header = &h;
    ch.data.data = (uint8_t *)iris;
    ch.data.len = iris_len;
    ch.last = 1;
    ch.checksum = XXH64(iris, iris_len, 0) ^ 1;
    ProtobufCMessage *m[1] = {&ch.base};
    return itest_client_stream(c, "UploadDataset", m, 1, -1, r);
}

static int quota_err(const itest_res *r, const char *name)
{
    char want[64];
    snprintf(want, sizeof want, "quota %s of principal", name);
    return r->status == 8 && strstr(r->details, want) != NULL;
}

/* --------------------------------------------------------------- tests */
static struct {
    itest_daemon d;
    char tok_alice[80], tok_bob[80], tok_carol[80], tok_dave[80], tok_erin[80], tok_frank[80];
} S;

static void test_unauthenticated(void)
{
    itest_conn *none = conn(&S.d, ca, NULL, NULL, NULL);
    itest_res r;
    CHECK(ping(none, &r) == 16, "Ping without a token: %d %s", r.status, r.details);
    char sid[40];
    CHECK(itest_session(none, "x", sid) == 16, "CreateSession without a token");
    Rtrain__V1__DataPart p = csv_part(iris_len, 0);
    Rtrain__V1__DataPart *pp[1] = {&p};
    CHECK(itest_upload(none, "s-x", pp, 1, (const uint8_t *)iris, iris_len, 1 << 16, NULL, &r) ==
              16, "UploadDataset without a token: %d %s", r.status, r.details);
    itest_res_free(&r);
    Rtrain__V1__FitRequest fq = RTRAIN__V1__FIT_REQUEST__INIT;
    fq.session_id = "s-x";
    fq.epochs = 1;
    CHECK(itest_server_stream(none, "Fit", &fq.base, NULL, NULL, &r) == 16,
          "Fit without a token: %d %s", r.status, r.details);
    itest_res_free(&r);
    itest_disconnect(none);

    itest_conn *wrong = conn(&S.d, ca, NULL, NULL, "0123456789abcdef0123456789abcdef");
    CHECK(ping(wrong, &r) == 16 && strstr(r.details, "not accepted"), "wrong token: %d %s",
          r.status, r.details);
    itest_disconnect(wrong);
    /* The token's hash, which is what the file holds, is not a token. */
    itest_conn *ok = conn(&S.d, ca, NULL, NULL, S.tok_alice);
    CHECK(ping(ok, &r) == 0, "alice's token: %d %s", r.status, r.details);
    itest_disconnect(ok);
}

static void test_isolation(void)
{
    itest_conn *a = conn(&S.d, ca, NULL, NULL, S.tok_alice);
    itest_conn *b = conn(&S.d, ca, NULL, NULL, S.tok_bob);
    char sa[40], sb[40], pa[40], pb[40], da[40], db[40];
    itest_res r;
    CHECK(itest_session(a, "alice", sa) == 0, "alice's session");
    CHECK(itest_session(b, "bob", sb) == 0, "bob's session");
    CHECK(strlen(sa) == 34, "session ids carry 128 random bits: '%s'", sa);
    CHECK(compile(a, sa, pa, &r) == 0 && strlen(pa) == 34, "alice compiles: %d %s", r.status,
          r.details);
    CHECK(upload(a, sa, 0, da, NULL, &r) == 0 && strlen(da) == 34, "alice uploads: %d %s",
          r.status, r.details);
    itest_res_free(&r);
    CHECK(run_steps(a, sa, pa, da, &r) == 0, "alice trains: %d %s", r.status, r.details);
    size_t wa_len = 0, w2_len = 0;
    uint8_t *wa = itest_weights_blob(a, sa, pa, &wa_len, NULL, &r);
    CHECK(wa && wa_len > 0, "alice's weights: %d %s", r.status, r.details);

    /* Bob names alice's session: exactly what a session that never
     * existed answers. */
    const char *fake = "s-00000000000000000000000000000000";
    char want[128];
    uint8_t *w = itest_weights_blob(b, sa, pa, &w2_len, NULL, &r);
    snprintf(want, sizeof want, "unknown session '%s'", sa);
    CHECK(!w && r.status == 5 && strcmp(r.details, want) == 0, "bob reads alice's weights: %d %s",
          r.status, r.details);
    free(w);
    itest_res fr;
    w = itest_weights_blob(b, fake, pa, &w2_len, NULL, &fr);
    snprintf(want, sizeof want, "unknown session '%s'", fake);
    CHECK(!w && fr.status == 5 && strcmp(fr.details, want) == 0, "a missing session: %d %s",
          fr.status, fr.details);
    free(w);
    CHECK(run_steps(b, sa, pa, da, &r) == 5, "bob trains alice's program: %d %s", r.status,
          r.details);
    CHECK(compile(b, sa, NULL, &r) == 5, "bob compiles in alice's session: %d %s", r.status,
          r.details);
    Rtrain__V1__SetWeightsRequest sq = RTRAIN__V1__SET_WEIGHTS_REQUEST__INIT;
    sq.session_id = sa;
    sq.program_id = pa;
    Rtrain__V1__SetWeightsResponse *sr = NULL;
    CHECK(itest_unary(b, "SetWeights", &sq.base, &rtrain__v1__set_weights_response__descriptor,
                      (ProtobufCMessage **)&sr, &r) == 5,
          "bob writes alice's weights: %d %s", r.status, r.details);
    FREE(sr);
    itest_res_free(&r);
    CHECK(close_session(b, sa, &r) == 5, "bob closes alice's session: %d %s", r.status,
          r.details);
    CHECK(upload(b, sa, 0, NULL, NULL, &r) == 5, "bob uploads into alice's session: %d %s",
          r.status, r.details);
    itest_res_free(&r);
    /* In his own session: alice's program and dataset do not exist. */
    CHECK(run_steps(b, sb, pa, da, &r) == 5 && strstr(r.details, "unknown program"),
          "alice's program in bob's session: %d %s", r.status, r.details);
    CHECK(compile(b, sb, pb, &r) == 0, "bob compiles: %d %s", r.status, r.details);
    CHECK(run_steps(b, sb, pb, da, &r) == 5, "bob trains on alice's dataset: %d %s", r.status,
          r.details);
    snprintf(want, sizeof want, "unknown dataset '%s'", da);
    CHECK(strcmp(r.details, want) == 0, "the same answer as a missing dataset: '%s'", r.details);
    /* No oracle for what alice uploaded: FindDataset says no, the same
     * bytes are not deduplicated against hers, and bob's copy is his. */
    int found = -1;
    CHECK(find_iris(a, sa, &found) == 0 && found == 1, "alice finds her dataset (%d)", found);
    CHECK(find_iris(b, sb, &found) == 0 && found == 0, "bob does not find alice's (%d)", found);
    int dedup = -1;
    CHECK(upload(b, sb, 0, db, &dedup, &r) == 0 && dedup == 0 && strcmp(db, da) != 0,
          "bob's identical upload: %d dedup %d ids %s %s", r.status, dedup, da, db);
    itest_res_free(&r);
    CHECK(upload(b, sb, 0, NULL, &dedup, &r) == 0 && dedup == 1, "bob's second upload dedups");
    itest_res_free(&r);
    CHECK(run_steps(b, sb, pb, db, &r) == 0, "bob trains on his own copy: %d %s", r.status,
          r.details);

    /* Alice's state is untouched, byte for byte. */
    w = itest_weights_blob(a, sa, pa, &w2_len, NULL, &r);
    CHECK(w && w2_len == wa_len && memcmp(w, wa, wa_len) == 0, "alice's weights changed");
    free(w);
    free(wa);
    CHECK(run_steps(a, sa, pa, da, &r) == 0, "alice still trains: %d %s", r.status, r.details);
    CHECK(close_session(a, sa, &r) == 0 && close_session(b, sb, &r) == 0, "close");
    itest_disconnect(a);
    itest_disconnect(b);
}

static void test_quotas(void)
{
    itest_conn *c = conn(&S.d, ca, NULL, NULL, S.tok_carol);
    itest_res r;
    char s1[40], s2[40], s3[40], pid[40], d1[40], d2[40];
    /* sessions=2 */
    CHECK(itest_session(c, "1", s1) == 0 && itest_session(c, "2", s2) == 0, "carol's sessions");
    Rtrain__V1__CreateSessionRequest cq = RTRAIN__V1__CREATE_SESSION_REQUEST__INIT;
    cq.name = "3";
    Rtrain__V1__CreateSessionResponse *cr = NULL;
    itest_unary(c, "CreateSession", &cq.base, &rtrain__v1__create_session_response__descriptor,
                (ProtobufCMessage **)&cr, &r);
    CHECK(!cr && quota_err(&r, "sessions"), "3rd session: %d %s", r.status, r.details);
    FREE(cr);
    itest_res_free(&r);
    (void)s3;
    /* programs=1 */
    CHECK(compile(c, s1, pid, &r) == 0, "carol's program: %d %s", r.status, r.details);
    CHECK(compile(c, s2, NULL, &r) == 8 && quota_err(&r, "programs"), "2nd program: %d %s",
          r.status, r.details);
    /* uploads=1: one held open, a second refused; once the first is
     * cancelled its slot comes back. */
    itest_stream *held = open_upload(c, s1, 1000);
    /* The held header reaches the daemon asynchronously: probe with
     * uploads whose checksum is wrong (refused as DATA_LOSS, nothing
     * stored) until the slot is seen taken. */
    int probe = -1;
    for (int i = 0; i < 1000 && probe != 8; i++) { /* up to 20 s: ASan under load */
        probe = bad_checksum_upload(c, s1, &r);
        if (probe != 8) {
            itest_res_free(&r);
            usleep(20000);
        }
    }
    CHECK(probe == 8 && quota_err(&r, "uploads"), "2nd upload in flight: %d %s", r.status,
          r.details);
    itest_res_free(&r);
    itest_res hr;
    itest_stream_finish(held, 1, &hr);
    itest_res_free(&hr);
    int st = -1;
    for (int i = 0; i < 200 && st != 0; i++) { /* the cancel reaches the daemon asynchronously */
        st = upload(c, s1, 0, d1, NULL, &r);
        itest_res_free(&r);
        if (st)
            usleep(20000);
    }
    CHECK(st == 0, "upload after the held one was cancelled: %d", st);
    /* upload-bytes=64K: a declared size over it is refused at the header. */
    held = open_upload(c, s1, 100000);
    CHECK(itest_stream_finish(held, 0, &hr) == 8 && quota_err(&hr, "upload-bytes"),
          "upload over upload-bytes: %d %s", hr.status, hr.details);
    itest_res_free(&hr);
    /* store-bytes=4K holds one iris (3000 bytes): a second dataset pushes
     * out carol's own unused first one, never anyone else's. */
    CHECK(upload(c, s1, 1, d2, NULL, &r) == 0, "carol's second dataset: %d %s", r.status,
          r.details);
    itest_res_free(&r);
    CHECK(run_steps(c, s1, pid, d1, &r) == 5, "carol's first dataset was dropped: %d %s",
          r.status, r.details);
    CHECK(run_steps(c, s1, pid, d2, &r) == 0, "carol's second dataset: %d %s", r.status,
          r.details);
    itest_disconnect(c);

    /* store-bytes=1K: one iris does not fit. */
    itest_conn *e = conn(&S.d, ca, NULL, NULL, S.tok_erin);
    char se[40];
    CHECK(itest_session(e, "e", se) == 0, "erin's session");
    CHECK(upload(e, se, 0, NULL, NULL, &r) == 8 && quota_err(&r, "store-bytes"),
          "upload over store-bytes: %d %s", r.status, r.details);
    itest_res_free(&r);
    itest_disconnect(e);
    /* program-bytes=1K: the iris program's parameters, gradients,
     * optimizer state and arena do not fit. */
    itest_conn *d = conn(&S.d, ca, NULL, NULL, S.tok_dave);
    char sd[40];
    CHECK(itest_session(d, "d", sd) == 0, "dave's session");
    CHECK(compile(d, sd, NULL, &r) == 8 && quota_err(&r, "program-bytes"),
          "program over program-bytes: %d %s", r.status, r.details);
    CHECK(ping_st(d) == 0, "the daemon still answers");
    itest_disconnect(d);
    /* call-bytes=256K: a 1 MiB answer is refused before it is allocated. */
    itest_conn *f = conn(&S.d, ca, NULL, NULL, S.tok_frank);
    Rtrain__V1__PingRequest pq = RTRAIN__V1__PING_REQUEST__INIT;
    pq.response_bytes = 1 << 20;
    Rtrain__V1__PingResponse *pr = NULL;
    itest_unary(f, "Ping", &pq.base, &rtrain__v1__ping_response__descriptor,
                (ProtobufCMessage **)&pr, &r);
    CHECK(!pr && quota_err(&r, "call-bytes"), "1 MiB Ping answer: %d %s", r.status, r.details);
    FREE(pr);
    itest_res_free(&r);
    pq.response_bytes = 100 << 10;
    itest_unary(f, "Ping", &pq.base, &rtrain__v1__ping_response__descriptor,
                (ProtobufCMessage **)&pr, &r);
    CHECK(pr && pr->payload.len == 100 << 10, "100 KiB fits: %d %s", r.status, r.details);
    FREE(pr);
    itest_res_free(&r);
    /* Given back at the end of each call: again and again. */
    for (int i = 0; i < 5; i++) {
        itest_unary(f, "Ping", &pq.base, &rtrain__v1__ping_response__descriptor,
                    (ProtobufCMessage **)&pr, &r);
        CHECK(pr != NULL, "100 KiB Ping %d: %d %s", i, r.status, r.details);
        FREE(pr);
        itest_res_free(&r);
    }
    itest_disconnect(f);
}

/* With the default quotas (a quarter of --max-sessions 64) bob cannot
 * take every session slot: alice still gets one. */
static void test_session_slots(void)
{
    itest_conn *b = conn(&S.d, ca, NULL, NULL, S.tok_bob);
    itest_conn *a = conn(&S.d, ca, NULL, NULL, S.tok_alice);
    char ids[20][40];
    int n = 0;
    itest_res r;
    for (; n < 20; n++) {
        Rtrain__V1__CreateSessionRequest q = RTRAIN__V1__CREATE_SESSION_REQUEST__INIT;
        q.name = "grab";
        Rtrain__V1__CreateSessionResponse *p = NULL;
        itest_unary(b, "CreateSession", &q.base, &rtrain__v1__create_session_response__descriptor,
                    (ProtobufCMessage **)&p, &r);
        itest_res_free(&r);
        if (!p)
            break;
        snprintf(ids[n], sizeof ids[n], "%s", p->session_id);
        FREE(p);
    }
    CHECK(n == 16 && quota_err(&r, "sessions"), "bob got %d sessions, then %d %s", n, r.status,
          r.details);
    char sa[40];
    CHECK(itest_session(a, "alice", sa) == 0, "alice still gets a session");
    for (int i = 0; i < n; i++)
        close_session(b, ids[i], &r);
    close_session(a, sa, &r);
    itest_disconnect(a);
    itest_disconnect(b);
}

static void test_tls_modes(void)
{
    /* TLS without client certificates, single-user on loopback. */
    itest_daemon d;
    const char *tls[] = {"--tls-cert", srv_pem, "--tls-key", srv_key, NULL};
    CHECK(itest_daemon_start(&d, rtraind, tls) == 0, "TLS daemon");
    itest_conn *c = conn(&d, ca, NULL, NULL, NULL);
    CHECK(ping_st(c) == 0, "TLS with the right CA");
    itest_disconnect(c);
    c = conn(&d, evil_ca, NULL, NULL, NULL);
    CHECK(ping_st(c) == 14, "TLS with the wrong CA fails");
    itest_disconnect(c);
    c = itest_connect(d.addr);
    CHECK(ping_st(c) == 14, "plaintext to a TLS daemon fails");
    itest_disconnect(c);
    CHECK(itest_daemon_stop(&d, SIGTERM) == 0, "TLS daemon stops cleanly");

    /* mTLS: a client certificate from the client CA is required. */
    const char *mtls[] = {"--tls-cert", srv_pem, "--tls-key", srv_key, "--tls-client-ca", ca,
                          NULL};
    CHECK(itest_daemon_start(&d, rtraind, mtls) == 0, "mTLS daemon");
    c = conn(&d, ca, cli_pem, cli_key, NULL);
    CHECK(ping_st(c) == 0, "mTLS with a client certificate");
    itest_disconnect(c);
    c = conn(&d, ca, NULL, NULL, NULL);
    CHECK(ping_st(c) == 14, "mTLS without a client certificate fails");
    itest_disconnect(c);
    c = conn(&d, ca, evil_pem, evil_key, NULL);
    CHECK(ping_st(c) == 14, "mTLS with a certificate from another CA fails");
    itest_disconnect(c);
    CHECK(itest_daemon_stop(&d, SIGTERM) == 0, "mTLS daemon stops cleanly");

    /* Bad TLS settings stop the daemon at start, naming the problem. */
    char out[2048];
    const char *half[] = {rtraind, "--listen", "127.0.0.1:0", "--tls-cert", srv_pem, NULL};
    CHECK(itest_run_capture(rtraind, half, out, sizeof out) == 1 && strstr(out, "--tls-key"),
          "cert without key: '%s'", out);
    const char *missing[] = {rtraind, "--listen", "127.0.0.1:0", "--tls-cert", "/nonexistent.pem",
                             "--tls-key", srv_key, NULL};
    CHECK(itest_run_capture(rtraind, missing, out, sizeof out) == 1 &&
              strstr(out, "/nonexistent.pem"),
          "missing cert: '%s'", out);
}

static void test_exposure_rules(void)
{
    char out[2048], tokens[300];
    snprintf(tokens, sizeof tokens, "%s/tokens.txt", dir);
    const char *plain[] = {rtraind, "--listen", "0.0.0.0:0", "--tokens", tokens, NULL};
    CHECK(itest_run_capture(rtraind, plain, out, sizeof out) == 2 && strstr(out, "--tls-cert"),
          "non-loopback without TLS: '%s'", out);
    const char *anon[] = {rtraind, "--listen", "0.0.0.0:0", "--tls-cert", srv_pem, "--tls-key",
                          srv_key, NULL};
    CHECK(itest_run_capture(rtraind, anon, out, sizeof out) == 2 && strstr(out, "--tokens"),
          "non-loopback without tokens: '%s'", out);
    char bad[300];
    snprintf(bad, sizeof bad, "%s/bad-tokens.txt", dir);
    write_file(bad, "# comment\nnot-a-hash alice\n");
    const char *badf[] = {rtraind, "--listen", "127.0.0.1:0", "--tokens", bad, NULL};
    CHECK(itest_run_capture(rtraind, badf, out, sizeof out) == 1 && strstr(out, "line 2"),
          "bad tokens file: '%s'", out);
    write_file(bad, "0000000000000000000000000000000000000000000000000000000000000000 a frobs=1\n");
    CHECK(itest_run_capture(rtraind, badf, out, sizeof out) == 1 && strstr(out, "frobs"),
          "unknown quota: '%s'", out);
}

/* The server-wide budget covers every principal's bytes together. */
static void test_memory_budget(void)
{
    itest_daemon d;
    const char *args[] = {"--max-memory-bytes", "64K", NULL};
    CHECK(itest_daemon_start(&d, rtraind, args) == 0, "daemon with a 64 KiB budget");
    itest_conn *c = itest_connect(d.addr);
    char sid[40];
    CHECK(itest_session(c, "m", sid) == 0, "session");
    itest_stream *s = open_upload(c, sid, 100000);
    itest_res r;
    CHECK(itest_stream_finish(s, 0, &r) == 8 && strstr(r.details, "server memory budget"),
          "upload over the budget: %d %s", r.status, r.details);
    itest_res_free(&r);
    CHECK(upload(c, sid, 0, NULL, NULL, &r) == 0, "a small upload fits: %d %s", r.status,
          r.details);
    itest_res_free(&r);
    itest_disconnect(c);
    CHECK(itest_daemon_stop(&d, SIGTERM) == 0, "stops cleanly");
}

/* SIGHUP rereads the tokens file: a token added works, a token removed
 * stops working, without a restart. */
static void test_reload(void)
{
    char path[300], l_alice[300], l_bob[300], t_alice[80], t_bob[80], text[800], log[300];
    snprintf(path, sizeof path, "%s/reload.txt", dir);
    snprintf(log, sizeof log, "%s/reload.log", dir);
    new_token("alice", "", l_alice, sizeof l_alice, t_alice, sizeof t_alice);
    new_token("bob", "", l_bob, sizeof l_bob, t_bob, sizeof t_bob);
    snprintf(text, sizeof text, "%s\n", l_alice);
    write_file(path, text);
    itest_daemon d;
    const char *args[] = {"--tokens", path, NULL};
    CHECK(itest_daemon_start_log(&d, rtraind, args, log) == 0,
          "daemon with tokens, plaintext on loopback");
    itest_conn *a = conn(&d, NULL, NULL, NULL, t_alice);
    itest_conn *b = conn(&d, NULL, NULL, NULL, t_bob);
    CHECK(ping_st(a) == 0 && ping_st(b) == 16, "before the reload: alice in, bob out");
    char sa[40];
    CHECK(itest_session(a, "kept", sa) == 0, "alice's session");
    snprintf(text, sizeof text, "# alice removed\n%s\n", l_bob);
    write_file(path, text);
    kill(d.pid, SIGHUP);
    int st = -1;
    /* the loop handles the signal asynchronously: ask until it has (a
     * minute at most; it takes milliseconds) */
    for (int i = 0; i < 3000 && st != 0; i++) {
        st = ping_st(b);
        if (st)
            usleep(20000);
    }
    CHECK(st == 0, "bob's token accepted after SIGHUP: %d", st);
    CHECK(ping_st(a) == 16, "alice's token refused after SIGHUP");
    /* A broken file on SIGHUP keeps the tokens in force: checked once the
     * daemon has logged that it read the file (an error, shown at the
     * default warn level). */
    write_file(path, "garbage\n");
    kill(d.pid, SIGHUP);
    CHECK(itest_wait_log(log, "SIGHUP: tokens not reloaded, the previous ones stay", 1, 60) == 1,
          "no log line for the broken tokens file");
    CHECK(ping_st(b) == 0, "a broken tokens file keeps bob's token");
    CHECK(ping_st(a) == 16, "a broken tokens file does not bring alice's token back");
    itest_disconnect(a);
    itest_disconnect(b);
    CHECK(itest_daemon_stop(&d, SIGTERM) == 0, "stops cleanly");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s RTRAIND\n", argv[0]);
        return 2;
    }
    rtraind = argv[1];
    if (system("openssl version >/dev/null 2>&1") != 0) {
        fprintf(stderr, "the openssl CLI is needed (Debian: openssl)\n");
        return 1;
    }
    snprintf(dir, sizeof dir, "/tmp/rt-sec-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char path[512];
    snprintf(path, sizeof path, "%s/iris.csv", itest_data_dir());
    iris = (char *)itest_read_file(path, &iris_len);
    size_t n;
    snprintf(path, sizeof path, "%s/iris_sequential_keras2.json", itest_data_dir());
    keras_json = (char *)itest_read_file(path, &n);
    if (!iris || !keras_json || make_pki() != 0) {
        fprintf(stderr, "setup failed (see %s/openssl.log)\n", dir);
        return 1;
    }

    char l[6][300], tokens[300], text[2400];
    new_token("alice", "", l[0], sizeof l[0], S.tok_alice, sizeof S.tok_alice);
    new_token("bob", "", l[1], sizeof l[1], S.tok_bob, sizeof S.tok_bob);
    new_token("carol", "sessions=2 programs=1 uploads=1 upload-bytes=64K store-bytes=4K", l[2],
              sizeof l[2], S.tok_carol, sizeof S.tok_carol);
    new_token("dave", "program-bytes=1K", l[3], sizeof l[3], S.tok_dave, sizeof S.tok_dave);
    new_token("erin", "store-bytes=1K", l[4], sizeof l[4], S.tok_erin, sizeof S.tok_erin);
    new_token("frank", "call-bytes=256K", l[5], sizeof l[5], S.tok_frank, sizeof S.tok_frank);
    snprintf(tokens, sizeof tokens, "%s/tokens.txt", dir);
    snprintf(text, sizeof text, "# test principals\n%s\n%s\n%s\n%s\n%s\n%s\n", l[0], l[1], l[2],
             l[3], l[4], l[5]);
    write_file(tokens, text);
    const char *args[] = {"--tls-cert", srv_pem, "--tls-key", srv_key, "--tokens", tokens, NULL};
    if (itest_daemon_start(&S.d, rtraind, args) != 0) {
        fprintf(stderr, "the TLS + tokens daemon did not start\n");
        return 1;
    }
    RUN(test_unauthenticated);
    RUN(test_isolation);
    RUN(test_quotas);
    RUN(test_session_slots);
    CHECK(itest_daemon_stop(&S.d, SIGTERM) == 0, "the daemon stops cleanly");
    RUN(test_tls_modes);
    RUN(test_exposure_rules);
    RUN(test_memory_budget);
    RUN(test_reload);
    sh("rm -rf %s", dir);
    free(iris);
    free(keras_json);
    return itest_summary();
}
