/* test_hostile.c - hostile input against a real daemon (issue 30):
 *  - crafted checkpoints pushed with RestoreCheckpoint, their XXH3
 *    recomputed: counters near 2^63, a cursor out of range, negative and
 *    odd sizes, NaN and infinite rates, weights and optimizer moments.
 *    Each is refused with INVALID_ARGUMENT, and RunSteps on what a refused
 *    push would have made never runs (before the checks: a segfault, an
 *    ASan signed-overflow report, or NaN losses with OK);
 *  - the same crafted file as the newest checkpoint in --state-dir: the
 *    daemon restarts on the previous one and trains on;
 *  - ONNX models nested 10,000 and 100,000 levels deep (Compile and
 *    ExportOnnx), Keras JSON nested 10,000 deep: refused with
 *    INVALID_ARGUMENT naming the limit, no stack overflow.
 * After every attack the daemon answers Ping and a bystander's weights are
 * unchanged.
 *  - leftovers: failing calls of every RPC that can fail (bad input, a
 *    quota, a cancel, a full disk under --state-dir) leave the daemon's
 *    sessions, programs, datasets, memory and charged bytes (/metrics) as
 *    they were, and no program folder in the state directory.
 *  - into: a state pushed into its program (RestoreCheckpoint's
 *    program_id) makes no program, and what it refuses leaves the program
 *    as it was (test_restore_into).
 *
 *     itest_hostile RTRAIND input|leftovers|into
 */
#include "itest.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#define FREE(p) ((p) ? protobuf_c_message_free_unpacked(&(p)->base, NULL) : (void)0)

static const char *g_daemon;

/* ------------------------------------------------------------- helpers */
/* CreateSession -> id and token (>= 40 bytes each). */
static int session(itest_conn *c, char *sid, char *tok)
{
    Rtrain__V1__CreateSessionRequest q = RTRAIN__V1__CREATE_SESSION_REQUEST__INIT;
    q.name = "hostile";
    Rtrain__V1__CreateSessionResponse *p = NULL;
    itest_res r;
    int st = itest_unary(c, "CreateSession", &q.base,
                         &rtrain__v1__create_session_response__descriptor,
                         (ProtobufCMessage **)&p, &r);
    itest_res_free(&r);
    sid[0] = tok[0] = 0;
    if (p) {
        snprintf(sid, 40, "%s", p->session_id);
        snprintf(tok, 40, "%s", p->session_token);
    }
    FREE(p);
    return st;
}

/* Compile the iris MLP with hidden units; the status must be want. */
static int compile_mlp(itest_conn *c, const char *sid, int hidden, char *pid, int want)
{
    Rtrain__V1__TrainConfig cfg;
    itest_iris_config(&cfg);
    Rtrain__V1__CompileRequest q = RTRAIN__V1__COMPILE_REQUEST__INIT;
    q.session_id = (char *)sid;
    q.model_case = RTRAIN__V1__COMPILE_REQUEST__MODEL_GRAPH;
    q.graph = itest_iris_graph(hidden);
    q.config = &cfg;
    Rtrain__V1__CompileResponse *p = NULL;
    itest_res r;
    int st = itest_unary(c, "Compile", &q.base, &rtrain__v1__compile_response__descriptor,
                         (ProtobufCMessage **)&p, &r);
    CHECK(st == want, "compile: %d, not %d: %s", st, want, r.details);
    itest_res_free(&r);
    pid[0] = 0;
    if (p)
        snprintf(pid, 40, "%s", p->program_id);
    FREE(p);
    return st;
}

static int compile_iris(itest_conn *c, const char *sid, char *pid, int want)
{
    return compile_mlp(c, sid, 16, pid, want);
}

static int upload_iris(itest_conn *c, const char *sid, char *did)
{
    itest_res r;
    int st = itest_upload_iris(c, sid, did, &r);
    CHECK(st == 0, "iris upload: %s", r.details);
    itest_res_free(&r);
    return st;
}

/* RunSteps with the per-step losses: the status; *step the global step
 * after it and *finite whether every loss was a number. */
static int run_steps(itest_conn *c, const char *sid, const char *pid, const char *did,
                     uint64_t steps, int64_t *step, int *finite, itest_res *r)
{
    Rtrain__V1__RunStepsRequest q = RTRAIN__V1__RUN_STEPS_REQUEST__INIT;
    q.session_id = (char *)sid;
    q.program_id = (char *)pid;
    q.dataset_id = (char *)did;
    q.steps = steps;
    q.return_losses = 1;
    Rtrain__V1__RunStepsResponse *p = NULL;
    int st = itest_unary(c, "RunSteps", &q.base, &rtrain__v1__run_steps_response__descriptor,
                         (ProtobufCMessage **)&p, r);
    *step = -1;
    *finite = 0;
    if (p) {
        *step = (int64_t)p->global_step;
        *finite = p->n_losses == steps;
        for (size_t i = 0; i < p->n_losses; i++)
            *finite &= isfinite(p->losses[i]);
    }
    FREE(p);
    return st;
}

/* Checkpoint: pull (the file's bytes into *buf) and/or save; the status.
 * *step the program's global step. */
static int checkpoint(itest_conn *c, const char *sid, const char *tok, const char *pid,
                      int pull, int save, uint8_t **buf, size_t *len, int64_t *step,
                      itest_res *r)
{
    Rtrain__V1__CheckpointRequest q = RTRAIN__V1__CHECKPOINT_REQUEST__INIT;
    q.session_id = (char *)sid;
    q.session_token = (char *)tok;
    q.program_id = (char *)pid;
    q.pull = pull;
    q.save = save;
    Rtrain__V1__CheckpointResponse *p = NULL;
    int st = itest_unary(c, "Checkpoint", &q.base, &rtrain__v1__checkpoint_response__descriptor,
                         (ProtobufCMessage **)&p, r);
    if (step)
        *step = p ? (int64_t)p->global_step : -1;
    if (buf) {
        *buf = NULL;
        *len = 0;
        if (p && p->state.len) {
            *buf = malloc(p->state.len);
            memcpy(*buf, p->state.data, p->state.len);
            *len = p->state.len;
        }
    }
    FREE(p);
    return st;
}

/* RestoreCheckpoint, into program into (NULL: a new program): the
 * answered program id into pid, its step into *step (when given). */
static int restore_at(itest_conn *c, const char *sid, const char *tok, const char *into,
                      const uint8_t *b, size_t n, char *pid, int64_t *step, itest_res *r)
{
    Rtrain__V1__RestoreCheckpointRequest q = RTRAIN__V1__RESTORE_CHECKPOINT_REQUEST__INIT;
    q.session_id = (char *)sid;
    q.session_token = (char *)tok;
    q.state.data = (uint8_t *)b;
    q.state.len = n;
    if (into)
        q.program_id = (char *)into;
    Rtrain__V1__RestoreCheckpointResponse *p = NULL;
    int st = itest_unary(c, "RestoreCheckpoint", &q.base,
                         &rtrain__v1__restore_checkpoint_response__descriptor,
                         (ProtobufCMessage **)&p, r);
    pid[0] = 0;
    if (p)
        snprintf(pid, 40, "%s", p->program_id);
    if (step)
        *step = p ? (int64_t)p->global_step : -1;
    FREE(p);
    return st;
}

static int restore(itest_conn *c, const char *sid, const char *tok, const uint8_t *b, size_t n,
                   char *pid, itest_res *r)
{
    return restore_at(c, sid, tok, NULL, b, n, pid, NULL, r);
}

/* ------------------------------------------------ the checkpoint format */
/* A checkpoint file (server/durable/rt_ckpt.c):
 *     "RTCKPT1\0" u64 req_len req  u64 meta_len meta  u64 exec_len exec  u64 XXH3-64
 * meta is rt_ckpt_meta (rt_state.h) then its rt_fit_epochs; exec is the
 * exec's state blob: rt__state_hdr (rt_exec.c), the weights, Adam's m and
 * v. The offsets below are that header's fields; ck_split checks them
 * against what the daemon reported (magic, step count, sizes), so a layout
 * change fails here instead of testing nothing. */
enum {
    EX_PARAM_FLOATS = 16, EX_TRAIN_FLOATS = 24, EX_STEP = 32, EX_EPOCH = 40, EX_POS = 48,
    EX_EP_SAMPLES = 56, EX_EP_LOSS = 64, EX_SEED = 80, EX_LR_SET = 88,
    /* rt_ckpt_meta: magic[8], session_id[40], program_id[40], last_seq */
    ME_FIT_EPOCHS = 96,
};

typedef struct ck {
    uint8_t *b;
    size_t n;
    size_t meta, meta_len, exec, exec_len, hdr; /* offsets and sizes */
    int64_t pf, tf;                             /* param and train floats */
} ck;

static int64_t get64(const uint8_t *p)
{
    int64_t v;
    memcpy(&v, p, 8);
    return v;
}

static void put64(uint8_t *p, int64_t v) { memcpy(p, &v, 8); }

static void putf(uint8_t *p, float v) { memcpy(p, &v, 4); }

static int ck_split(ck *k, int64_t want_step)
{
    size_t o = 8;
    if (k->n < 40 || memcmp(k->b, "RTCKPT1", 8))
        return -1;
    o += 8 + (size_t)get64(k->b + o);
    if (o + 8 > k->n)
        return -1;
    k->meta_len = (size_t)get64(k->b + o);
    k->meta = o + 8;
    o = k->meta + k->meta_len;
    if (o + 8 > k->n)
        return -1;
    k->exec_len = (size_t)get64(k->b + o);
    k->exec = o + 8;
    if (k->exec + k->exec_len + 8 != k->n)
        return -1;
    const uint8_t *e = k->b + k->exec;
    k->pf = get64(e + EX_PARAM_FLOATS);
    k->tf = get64(e + EX_TRAIN_FLOATS);
    if (memcmp(e, "RTEXEC", 6) || k->pf <= 0 || k->tf <= 0 ||
        (size_t)(4 * (k->pf + 2 * k->tf)) >= k->exec_len)
        return -1;
    k->hdr = k->exec_len - (size_t)(4 * (k->pf + 2 * k->tf));
    if (k->hdr > 4096 || get64(e + EX_STEP) != want_step)
        return -1;
    return 0;
}

static void ck_seal(ck *k)
{
    uint64_t h = XXH3_64bits(k->b, k->n - 8);
    memcpy(k->b + k->n - 8, &h, 8);
}

/* the exec header's field at off, and the first float of the weights, of
 * Adam's m and of Adam's v */
static uint8_t *ex(ck *k, size_t off) { return k->b + k->exec + off; }
static uint8_t *w0(ck *k) { return ex(k, k->hdr); }
static uint8_t *m0(ck *k) { return ex(k, k->hdr + 4 * (size_t)k->pf); }
static uint8_t *v0(ck *k) { return ex(k, k->hdr + 4 * (size_t)(k->pf + k->tf)); }

typedef struct attack {
    const char *name;
    void (*apply)(ck *k);
} attack;

static void a_step_max(ck *k) { put64(ex(k, EX_STEP), INT64_MAX); }
static void a_step_2_62(ck *k) { put64(ex(k, EX_STEP), INT64_C(1) << 62); }
static void a_epoch_max(ck *k)
{
    put64(ex(k, EX_STEP), INT64_MAX);
    put64(ex(k, EX_EPOCH), INT64_MAX - 16);
}
static void a_pos_overflow(ck *k)
{
    /* pos * batch_size wraps below 0: the daemon kept the cursor and read
     * rows far outside the data set */
    put64(ex(k, EX_STEP), INT64_MAX);
    put64(ex(k, EX_POS), INT64_MAX / 8);
}
static void a_pos_past_step(ck *k) { put64(ex(k, EX_POS), 1000); }
static void a_negative_step(ck *k) { put64(ex(k, EX_STEP), -1); }
static void a_ep_samples(ck *k) { put64(ex(k, EX_EP_SAMPLES), -7); }
static void a_ep_loss_nan(ck *k)
{
    double v = NAN;
    memcpy(ex(k, EX_EP_LOSS), &v, 8);
}
static void a_lr_nan(ck *k) { putf(ex(k, EX_LR_SET), NAN); }
static void a_lr_inf(ck *k) { putf(ex(k, EX_LR_SET), INFINITY); }
static void a_lr_negative(ck *k) { putf(ex(k, EX_LR_SET), -0.5f); }
static void a_weight_nan(ck *k) { putf(w0(k), NAN); }
static void a_m_inf(ck *k) { putf(m0(k), -INFINITY); }
static void a_v_negative(ck *k) { putf(v0(k), -1.0f); }
static void a_v_nan(ck *k) { putf(v0(k), NAN); }
static void a_seed(ck *k) { put64(ex(k, EX_SEED), get64(ex(k, EX_SEED)) + 1); }
static void a_param_floats(ck *k) { put64(ex(k, EX_PARAM_FLOATS), k->pf + 1); }
static void a_train_floats_neg(ck *k) { put64(ex(k, EX_TRAIN_FLOATS), -k->tf); }
static void a_macc_n(ck *k) { put64(ex(k, k->hdr - 8), -3); }
static void a_fit_epochs(ck *k) { put64(k->b + k->meta + ME_FIT_EPOCHS, INT64_MIN); }
static void a_n_fit_epochs(ck *k) { put64(k->b + k->meta + k->meta_len - 8, 1000); }
static void a_req_len(ck *k) { put64(k->b + 8, -16); }
static void a_exec_len_odd(ck *k)
{
    /* two bytes fewer in the exec section: the file is cut to match */
    memmove(k->b + k->exec + k->exec_len - 2, k->b + k->exec + k->exec_len, 8);
    k->exec_len -= 2;
    k->n -= 2;
    put64(k->b + k->exec - 8, (int64_t)k->exec_len);
}
static void a_meta_len(ck *k) { put64(k->b + k->meta - 8, (int64_t)k->meta_len - 3); }

static const attack attacks[] = {
    {"step INT64_MAX", a_step_max},
    {"step 2^62", a_step_2_62},
    {"epoch near INT64_MAX", a_epoch_max},
    {"pos * batch overflows", a_pos_overflow},
    {"pos past the step count", a_pos_past_step},
    {"step -1", a_negative_step},
    {"ep_samples -7", a_ep_samples},
    {"epoch loss NaN", a_ep_loss_nan},
    {"lr NaN", a_lr_nan},
    {"lr inf", a_lr_inf},
    {"lr -0.5", a_lr_negative},
    {"weight NaN", a_weight_nan},
    {"Adam m -inf", a_m_inf},
    {"Adam v -1", a_v_negative},
    {"Adam v NaN", a_v_nan},
    {"another seed", a_seed},
    {"param_floats + 1", a_param_floats},
    {"train_floats negative", a_train_floats_neg},
    {"metric count -3", a_macc_n},
    {"fit_epochs INT64_MIN", a_fit_epochs},
    {"n_fit_epochs 1000", a_n_fit_epochs},
    {"req_len -16", a_req_len},
    {"exec section 2 bytes short", a_exec_len_odd},
    {"meta_len - 3", a_meta_len},
};

/* ------------------------------------------------------------ the tests */
static struct {
    itest_daemon d;
    itest_conn *c;
    char sid[64], tok[64], pid[64], iris[64];
    char bsid[64], btok[64], bpid[64]; /* the bystander */
    uint8_t *wb;
    size_t wb_len;
} T;

static void intact(const char *after)
{
    CHECK(itest_ping(T.c) == 0, "daemon alive after %s", after);
    size_t n;
    uint8_t *w = itest_weights_blob(T.c, T.bsid, T.bpid, &n, NULL, NULL);
    CHECK(w && n == T.wb_len && memcmp(w, T.wb, n) == 0,
          "bystander's weights changed after %s", after);
    free(w);
}

static void setup(void)
{
    CHECK(itest_daemon_start(&T.d, g_daemon, NULL) == 0, "daemon start");
    T.c = itest_connect(T.d.addr);
    CHECK(session(T.c, T.sid, T.tok) == 0, "session");
    CHECK(session(T.c, T.bsid, T.btok) == 0, "bystander session");
    compile_iris(T.c, T.sid, T.pid, 0);
    compile_iris(T.c, T.bsid, T.bpid, 0);
    upload_iris(T.c, T.sid, T.iris);
    itest_res r;
    int64_t step;
    int fin;
    CHECK(run_steps(T.c, T.sid, T.pid, T.iris, 5, &step, &fin, &r) == 0 && step == 5 && fin,
          "5 steps: %s", r.details);
    itest_res_free(&r);
    T.wb = itest_weights_blob(T.c, T.bsid, T.bpid, &T.wb_len, NULL, NULL);
    CHECK(T.wb != NULL, "bystander weights");
}

/* The pulled checkpoint restores and trains on (the checks below must not
 * refuse the daemon's own files); then every crafted variant is refused. */
static void test_pushed_checkpoints(void)
{
    itest_res r;
    ck k0 = {0};
    int64_t step;
    CHECK(checkpoint(T.c, T.sid, T.tok, T.pid, 1, 0, &k0.b, &k0.n, &step, &r) == 0 && k0.b,
          "pull: %s", r.details);
    itest_res_free(&r);
    if (!k0.b)
        return;
    CHECK(ck_split(&k0, 5) == 0, "the pulled checkpoint's layout is not the one this test "
          "crafts (rt_ckpt.c, rt__state_hdr)");
    char np[64];
    int fin;
    CHECK(restore(T.c, T.sid, T.tok, k0.b, k0.n, np, &r) == 0, "restore as pulled: %s",
          r.details);
    itest_res_free(&r);
    CHECK(run_steps(T.c, T.sid, np, T.iris, 3, &step, &fin, &r) == 0 && step == 8 && fin,
          "the restored program trains on: status %d step %lld finite %d %s", r.status,
          (long long)step, fin, r.details);
    itest_res_free(&r);

    for (size_t i = 0; i < sizeof attacks / sizeof attacks[0]; i++) {
        ck k = k0;
        k.b = malloc(k0.n);
        memcpy(k.b, k0.b, k0.n);
        attacks[i].apply(&k);
        ck_seal(&k);
        int st = restore(T.c, T.sid, T.tok, k.b, k.n, np, &r);
        CHECK(st == 3 && r.details[0], "%s: RestoreCheckpoint gave %d (%s), not "
              "INVALID_ARGUMENT", attacks[i].name, st, r.details);
        itest_res_free(&r);
        if (st == 0) {
            /* what a crafted state did once it was in: the program must
             * not have been made at all */
            st = run_steps(T.c, T.sid, np, T.iris, 3, &step, &fin, &r);
            CHECK(0, "%s: RunSteps on the pushed state: status %d, step %lld, losses %s (%s)",
                  attacks[i].name, st, (long long)step, fin ? "finite" : "NOT finite",
                  r.details);
            itest_res_free(&r);
        }
        free(k.b);
        intact(attacks[i].name);
    }
    free(k0.b);
}

/* The newest file in dir (ckpt-<n>.rtck, largest n) into path. */
static int newest_ckpt(const char *dir, char *path, size_t len)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    char best[256] = "";
    struct dirent *e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, "ckpt-", 5) && strcmp(e->d_name, best) > 0)
            snprintf(best, sizeof best, "%s", e->d_name);
    closedir(d);
    if (!best[0])
        return -1;
    snprintf(path, len, "%s/%s", dir, best);
    return 0;
}

/* A crafted newest checkpoint in --state-dir: the restart takes the
 * previous one (logged), and the program trains on from there. */
static void test_state_dir(void)
{
    char dir[] = "/tmp/rtrain-hostile-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    const char *extra[] = {"--state-dir", dir, NULL};
    itest_daemon d;
    CHECK(itest_daemon_start(&d, g_daemon, extra) == 0, "durable daemon start");
    itest_conn *c = itest_connect(d.addr);
    char sid[64], tok[64], pid[64], iris[64];
    itest_res r;
    int64_t step;
    int fin;
    session(c, sid, tok);
    compile_iris(c, sid, pid, 0);
    upload_iris(c, sid, iris);
    CHECK(run_steps(c, sid, pid, iris, 5, &step, &fin, &r) == 0 && step == 5, "5 steps: %s",
          r.details);
    itest_res_free(&r);
    CHECK(checkpoint(c, sid, tok, pid, 0, 1, NULL, NULL, &step, &r) == 0 && step == 5,
          "save at 5: %s", r.details);
    itest_res_free(&r);
    CHECK(run_steps(c, sid, pid, iris, 3, &step, &fin, &r) == 0 && step == 8, "3 steps: %s",
          r.details);
    itest_res_free(&r);
    CHECK(checkpoint(c, sid, tok, pid, 0, 1, NULL, NULL, &step, &r) == 0 && step == 8,
          "save at 8: %s", r.details);
    itest_res_free(&r);
    itest_disconnect(c);
    itest_daemon_stop(&d, SIGKILL);

    /* the step-8 file gets a cursor whose pos * batch overflows */
    char pdir[600], path[900];
    snprintf(pdir, sizeof pdir, "%s/sessions/%s/%s", dir, sid, pid);
    CHECK(newest_ckpt(pdir, path, sizeof path) == 0, "no checkpoint in %s", pdir);
    size_t n = 0;
    ck k = {.b = itest_read_file(path, &n)};
    k.n = n;
    CHECK(k.b && ck_split(&k, 8) == 0, "the newest checkpoint is not at step 8");
    if (k.b && ck_split(&k, 8) == 0) {
        a_pos_overflow(&k);
        ck_seal(&k);
        FILE *f = fopen(path, "wb");
        CHECK(f && fwrite(k.b, 1, k.n, f) == k.n, "rewrite %s", path);
        if (f)
            fclose(f);
    }
    free(k.b);

    CHECK(itest_daemon_start(&d, g_daemon, extra) == 0, "durable daemon restart");
    c = itest_connect(d.addr);
    CHECK(checkpoint(c, sid, tok, pid, 0, 0, NULL, NULL, &step, &r) == 0 && step == 5,
          "the program is back at the previous checkpoint's step 5: status %d step %lld %s",
          r.status, (long long)step, r.details);
    itest_res_free(&r);
    CHECK(run_steps(c, sid, pid, iris, 3, &step, &fin, &r) == 0 && step == 8 && fin,
          "and trains on: status %d step %lld finite %d %s", r.status, (long long)step, fin,
          r.details);
    itest_res_free(&r);
    CHECK(itest_ping(c) == 0, "the restarted daemon serves");
    itest_disconnect(c);
    itest_daemon_stop(&d, SIGTERM);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "rm %s", dir);
}

/* --------------------------------------------------------- nested models */
typedef struct buf {
    uint8_t *p;
    size_t n;
} buf;

/* Prepend the header of length-delimited field f holding the len bytes
 * that follow at *at (the buffer fills from its end, so each level costs
 * the same whatever the depth). */
static void prepend_ld(uint8_t **at, uint32_t f, size_t len)
{
    uint8_t t[12];
    int k = 0;
    uint64_t v = (uint64_t)f << 3 | 2;
    do {
        t[k++] = (uint8_t)((v & 127) | (v > 127 ? 128 : 0));
        v >>= 7;
    } while (v);
    v = len;
    do {
        t[k++] = (uint8_t)((v & 127) | (v > 127 ? 128 : 0));
        v >>= 7;
    } while (v);
    *at -= k;
    memcpy(*at, t, (size_t)k);
}

/* A ModelProto whose graph holds a node whose attribute's graph holds a
 * node ... levels deep (GraphProto.node 1, NodeProto.attribute 5,
 * AttributeProto.g 6, ModelProto.graph 7). */
static buf nested_onnx(int levels)
{
    size_t cap = (size_t)levels * 3 * 12 + 32;
    uint8_t *b = malloc(cap), *end = b + cap, *at = end;
    for (int i = 0; i < levels; i++) {
        prepend_ld(&at, 6, (size_t)(end - at)); /* the attribute's graph */
        prepend_ld(&at, 5, (size_t)(end - at)); /* the node's attribute */
        prepend_ld(&at, 1, (size_t)(end - at)); /* the graph's node */
    }
    prepend_ld(&at, 7, (size_t)(end - at));
    *--at = 8; /* ir_version */
    *--at = 1 << 3;
    buf m = {malloc((size_t)(end - at)), (size_t)(end - at)};
    memcpy(m.p, at, m.n);
    free(b);
    return m;
}

/* Compile (or, with export, ExportOnnx) an ONNX model nested levels
 * deep: the status and the message in r. */
static int send_nested_onnx(int levels, int export, itest_res *r)
{
    buf m = nested_onnx(levels);
    Rtrain__V1__TrainConfig cfg;
    itest_iris_config(&cfg);
    Rtrain__V1__CompileRequest q = RTRAIN__V1__COMPILE_REQUEST__INIT;
    q.session_id = T.sid;
    q.model_case = RTRAIN__V1__COMPILE_REQUEST__MODEL_ONNX;
    q.onnx.data = m.p;
    q.onnx.len = m.n;
    q.config = &cfg;
    Rtrain__V1__ExportOnnxRequest e = RTRAIN__V1__EXPORT_ONNX_REQUEST__INIT;
    e.session_id = T.sid;
    e.program_id = T.pid;
    e.onnx.data = m.p;
    e.onnx.len = m.n;
    int st = export ? itest_unary(T.c, "ExportOnnx", &e.base, NULL, NULL, r)
                    : itest_unary(T.c, "Compile", &q.base, NULL, NULL, r);
    free(m.p);
    return st;
}

static void test_nested_onnx(void)
{
    /* at the limit (2 + 3 x 32 = 98 levels <= 100) the decode runs, and the
     * import refuses the model for what it is (no opset, no input) */
    itest_res r;
    int st = send_nested_onnx(32, 0, &r);
    CHECK(st == 3 && !strstr(r.details, "nested"), "ONNX nested 98 deep: %d %s", st,
          r.details);
    itest_res_free(&r);
    const int levels[] = {33, 10000, 100000};
    for (int i = 0; i < 3; i++)
        for (int export = 0; export < 2; export++) {
            st = send_nested_onnx(levels[i], export, &r);
            CHECK(st == 3 && strstr(r.details, "nested more than 100 levels"),
                  "%s of ONNX nested %d deep: %d %s", export ? "ExportOnnx" : "Compile",
                  2 + 3 * levels[i], st, r.details);
            itest_res_free(&r);
            intact(export ? "a nested ONNX ExportOnnx" : "a nested ONNX Compile");
        }
}

/* Compile a Keras JSON whose "layers" is levels arrays deep: the status
 * and the message in r. */
static int compile_nested_keras(int levels, itest_res *r)
{
    const char *head = "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"deep\", "
                       "\"layers\": ";
    size_t hl = strlen(head), n = hl + 2 * (size_t)levels + 3;
    char *j = malloc(n + 1);
    memcpy(j, head, hl);
    memset(j + hl, '[', (size_t)levels);
    memset(j + hl + levels, ']', (size_t)levels);
    memcpy(j + hl + 2 * (size_t)levels, "}}\n", 4);
    Rtrain__V1__TrainConfig cfg;
    itest_iris_config(&cfg);
    Rtrain__V1__CompileRequest q = RTRAIN__V1__COMPILE_REQUEST__INIT;
    q.session_id = T.sid;
    q.model_case = RTRAIN__V1__COMPILE_REQUEST__MODEL_KERAS_JSON;
    q.keras_json = j;
    q.config = &cfg;
    int st = itest_unary(T.c, "Compile", &q.base, NULL, NULL, r);
    free(j);
    return st;
}

static void test_nested_keras(void)
{
    /* 2 + 62 = 64 levels: parsed, then refused as no model; 65 and 10,002
     * are refused before json-c runs */
    itest_res r;
    int st = compile_nested_keras(62, &r);
    CHECK(st == 3 && !strstr(r.details, "nested") && !strstr(r.details, "deep"),
          "Keras JSON nested 64 deep: %d %s", st, r.details);
    itest_res_free(&r);
    const int levels[] = {63, 10000};
    for (int i = 0; i < 2; i++) {
        st = compile_nested_keras(levels[i], &r);
        CHECK(st == 3 && strstr(r.details, "nested more than 64 levels"),
              "Keras JSON nested %d deep: %d %s", levels[i] + 2, st, r.details);
        itest_res_free(&r);
        intact("a nested Keras JSON");
    }
}

/* ------------------------------------------------------------ leftovers */
/* What the daemon holds, from /metrics. */
enum { G_SESSIONS, G_PROGRAMS, G_DATASETS, G_STORED, G_PARAMS, G_ARENAS, G_KEPT, G_CHARGED,
       G_LIVE, G__N };
static const char *const gauge[G__N] = {
    "rtrain_sessions ", "rtrain_programs ", "rtrain_datasets ", "rtrain_stored_bytes ",
    "rtrain_memory_bytes{kind=\"params\"} ", "rtrain_memory_bytes{kind=\"activations\"} ",
    "rtrain_upload_kept_bytes ", "rtrain_memory_charged_bytes ", "rtrain_live_calls "};

static int scrape(const char *hostport, uint64_t v[G__N])
{
    char host[128];
    snprintf(host, sizeof host, "%s", hostport);
    char *colon = strrchr(host, ':');
    if (!colon)
        return -1;
    *colon = 0;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    inet_pton(AF_INET, host, &a.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    const char *req = "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n";
    ssize_t w = write(fd, req, strlen(req));
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    ssize_t k;
    while (w > 0 && (k = read(fd, b + n, cap - 1 - n)) > 0) {
        n += (size_t)k;
        if (n == cap - 1)
            b = realloc(b, cap *= 2);
    }
    close(fd);
    b[n] = 0;
    int found = 0;
    for (int i = 0; i < G__N; i++) {
        char key[80];
        snprintf(key, sizeof key, "\n%s", gauge[i]);
        const char *at = strstr(b, key);
        v[i] = at ? strtoull(at + strlen(key), NULL, 10) : UINT64_MAX;
        found += at != NULL;
    }
    free(b);
    return found == G__N ? 0 : -1;
}

/* The daemon's holdings once no call is running (a failed call's work
 * may end after its client got the status). */
static int settled(const itest_daemon *d, uint64_t v[G__N])
{
    uint64_t t_end = itest_now_ns() + 60ull * 1000000000ull;
    do {
        if (scrape(d->metrics, v) == 0 && v[G_LIVE] == 0)
            return 0;
    } while (itest_now_ns() < t_end);
    return -1;
}

/* Every gauge as it was (live calls aside: 0 in both). */
static void same(const itest_daemon *d, const uint64_t before[G__N], const char *after)
{
    uint64_t now[G__N];
    CHECK(settled(d, now) == 0, "no /metrics with no call running after %s", after);
    for (int i = 0; i < G__N; i++)
        CHECK(now[i] == before[i], "%s: %.40s %llu -> %llu", after, gauge[i],
              (unsigned long long)before[i], (unsigned long long)now[i]);
}

static int unary_st(itest_conn *c, const char *method, const void *req, itest_res *r)
{
    int st = itest_unary(c, method, req, NULL, NULL, r);
    itest_res_free(r);
    return st;
}

static int compile_json(itest_conn *c, const char *sid, const char *json, itest_res *r)
{
    Rtrain__V1__TrainConfig cfg;
    itest_iris_config(&cfg);
    Rtrain__V1__CompileRequest q = RTRAIN__V1__COMPILE_REQUEST__INIT;
    q.session_id = (char *)sid;
    q.model_case = RTRAIN__V1__COMPILE_REQUEST__MODEL_KERAS_JSON;
    q.keras_json = (char *)json;
    q.config = &cfg;
    return unary_st(c, "Compile", &q, r);
}

static int upload_csv(itest_conn *c, const char *sid, const char *csv, size_t len,
                      int cancel_after, int bad_sum, itest_res *r)
{
    Rtrain__V1__DataPart p;
    itest_csv_part(&p, len);
    Rtrain__V1__DataPart *pp[1] = {&p};
    Rtrain__V1__DatasetHeader h = RTRAIN__V1__DATASET_HEADER__INIT;
    h.session_id = (char *)sid;
    h.parts = pp;
    h.n_parts = 1;
    h.total_bytes = len;
    Rtrain__V1__UploadChunk ch[2] = {RTRAIN__V1__UPLOAD_CHUNK__INIT,
                                     RTRAIN__V1__UPLOAD_CHUNK__INIT};
    ch[0].header = &h;
    ch[0].data.data = (uint8_t *)csv;
    ch[0].data.len = len / 2;
    ch[1].offset = len / 2;
    ch[1].data.data = (uint8_t *)csv + len / 2;
    ch[1].data.len = len - len / 2;
    ch[1].last = 1;
    ch[1].checksum = XXH64(csv, len, 0) + (bad_sum ? 1 : 0);
    ProtobufCMessage *m[2] = {&ch[0].base, &ch[1].base};
    int st = itest_client_stream(c, "UploadDataset", m, 2, cancel_after, r);
    itest_res_free(r);
    return st;
}

static void test_leftovers(void)
{
    char dir[] = "/tmp/rtrain-leftovers-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    const char *extra[] = {"--metrics-listen", "127.0.0.1:0", "--max-sessions", "1",
                           "--quota-programs", "3", "--max-dataset-bytes", "65536",
                           "--upload-keep-s", "0", NULL};
    itest_daemon d;
    CHECK(itest_daemon_start(&d, g_daemon, extra) == 0 && d.metrics[0], "daemon start");
    itest_conn *c = itest_connect(d.addr);
    char sid[64], tok[64], pid[64], iris[64], np[64];
    itest_res r;
    int64_t step;
    int fin;
    session(c, sid, tok);
    compile_iris(c, sid, pid, 0);
    upload_iris(c, sid, iris);
    CHECK(run_steps(c, sid, pid, iris, 3, &step, &fin, &r) == 0, "3 steps: %s", r.details);
    itest_res_free(&r);
    uint8_t *good;
    size_t good_len;
    CHECK(checkpoint(c, sid, tok, pid, 1, 0, &good, &good_len, &step, &r) == 0 && good,
          "pull: %s", r.details);
    itest_res_free(&r);
    uint64_t base[G__N];
    CHECK(settled(&d, base) == 0, "/metrics at %s", d.metrics);
    CHECK(base[G_SESSIONS] == 1 && base[G_PROGRAMS] == 1 && base[G_DATASETS] == 1 &&
          base[G_CHARGED] > 0, "the baseline: %llu sessions, %llu programs, %llu datasets, "
          "%llu bytes charged", (unsigned long long)base[G_SESSIONS],
          (unsigned long long)base[G_PROGRAMS], (unsigned long long)base[G_DATASETS],
          (unsigned long long)base[G_CHARGED]);

    /* CreateSession past --max-sessions; CloseSession of nobody */
    Rtrain__V1__CreateSessionRequest cs = RTRAIN__V1__CREATE_SESSION_REQUEST__INIT;
    CHECK(unary_st(c, "CreateSession", &cs, &r) == 8, "a 2nd session: %d", r.status);
    Rtrain__V1__CloseSessionRequest cl = RTRAIN__V1__CLOSE_SESSION_REQUEST__INIT;
    cl.session_id = "s-0123456789abcdef0123456789abcdef";
    CHECK(unary_st(c, "CloseSession", &cl, &r) == 5, "closing nobody: %d", r.status);
    same(&d, base, "CreateSession, CloseSession");

    /* Compile: an unknown layer, nesting, bad JSON, another session, an
     * unknown state_from_program */
    CHECK(compile_json(c, sid, "{\"class_name\": \"Sequential\", \"config\": {\"layers\": "
                       "[{\"class_name\": \"Nope\", \"config\": {}}]}}", &r) == 3,
          "unknown layer: %d", r.status);
    CHECK(compile_json(c, sid, "{\"class_name\": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
                       "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"
                       "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}", &r) == 3,
          "nested JSON: %d", r.status);
    CHECK(compile_json(c, sid, "{\"class_name\": ", &r) == 3, "cut JSON: %d", r.status);
    CHECK(compile_json(c, "s-0123456789abcdef0123456789abcdef", "{}", &r) == 5,
          "compile in nobody's session: %d", r.status);
    {
        Rtrain__V1__TrainConfig cfg;
        itest_iris_config(&cfg);
        Rtrain__V1__CompileRequest q = RTRAIN__V1__COMPILE_REQUEST__INIT;
        q.session_id = sid;
        q.model_case = RTRAIN__V1__COMPILE_REQUEST__MODEL_GRAPH;
        q.graph = itest_iris_graph(16);
        q.config = &cfg;
        q.state_from_program = "p-0123456789abcdef0123456789abcdef";
        CHECK(unary_st(c, "Compile", &q, &r) == 5, "unknown state_from_program: %d", r.status);
    }
    same(&d, base, "failed Compiles");

    /* RestoreCheckpoint: garbage, a wrong token, and 20 crafted states that
     * compile and are then refused (each once added a program) */
    Rtrain__V1__RestoreCheckpointRequest rq = RTRAIN__V1__RESTORE_CHECKPOINT_REQUEST__INIT;
    rq.session_id = sid;
    rq.session_token = tok;
    rq.state.data = (uint8_t *)"RTCKPT1";
    rq.state.len = 8;
    CHECK(unary_st(c, "RestoreCheckpoint", &rq, &r) == 3, "8 bytes: %d", r.status);
    rq.state.data = good;
    rq.state.len = good_len;
    rq.session_token = "t-0123456789abcdef0123456789abcdef";
    CHECK(unary_st(c, "RestoreCheckpoint", &rq, &r) == 16, "a wrong token: %d", r.status);
    ck k = {.b = malloc(good_len), .n = good_len};
    memcpy(k.b, good, good_len);
    CHECK(ck_split(&k, 3) == 0, "the pulled checkpoint's layout");
    a_v_negative(&k);
    ck_seal(&k);
    for (int i = 0; i < 20; i++)
        CHECK(restore(c, sid, tok, k.b, k.n, np, &r) == 3, "crafted push %d: %d %s", i,
              r.status, r.details);
    itest_res_free(&r);
    same(&d, base, "20 refused pushes");

    /* the quota: two more programs fill it, then Compile and RestoreCheckpoint
     * are refused */
    char p2[64], p3[64];
    compile_iris(c, sid, p2, 0);
    CHECK(restore(c, sid, tok, good, good_len, p3, &r) == 0, "a good push: %s", r.details);
    itest_res_free(&r);
    uint64_t full[G__N];
    CHECK(settled(&d, full) == 0 && full[G_PROGRAMS] == 3, "3 programs");
    char px[64];
    compile_iris(c, sid, px, 8); /* a 4th program */
    CHECK(restore(c, sid, tok, good, good_len, px, &r) == 8 &&
          strstr(r.details, "quota programs"), "a 4th program by a push: %d %s", r.status,
          r.details);
    itest_res_free(&r);
    same(&d, full, "Compile and RestoreCheckpoint over the quota");

    /* UploadDataset: not CSV, a wrong checksum, over --max-dataset-bytes,
     * cancelled half way */
    static const char bad[] = "a,b,c\n1,2\nx,y,z,w\n";
    CHECK(upload_csv(c, sid, bad, sizeof bad - 1, -1, 0, &r) == 3, "ragged CSV: %d",
          r.status);
    char path[512];
    snprintf(path, sizeof path, "%s/iris.csv", itest_data_dir());
    size_t il;
    char *csv = (char *)itest_read_file(path, &il);
    CHECK(upload_csv(c, sid, csv, il, -1, 1, &r) == 15, "wrong checksum: %d", r.status);
    CHECK(upload_csv(c, sid, csv, il, 1, 0, &r) == 1, "cancelled upload: %d", r.status);
    size_t bl = 70000;
    char *big = malloc(bl);
    for (size_t i = 0; i < bl; i++)
        big[i] = i % 8 == 7 ? '\n' : i % 2 ? ',' : '1';
    CHECK(upload_csv(c, sid, big, bl, -1, 0, &r) == 8, "over --max-dataset-bytes: %d",
          r.status);
    free(big);
    free(csv);
    same(&d, full, "failed uploads");

    /* the training calls and the rest, on bad input */
    CHECK(run_steps(c, sid, pid, "d-0123456789abcdef0123456789abcdef", 3, &step, &fin, &r) == 5,
          "RunSteps of an unknown dataset: %d", r.status);
    itest_res_free(&r);
    {
        Rtrain__V1__FitRequest q = RTRAIN__V1__FIT_REQUEST__INIT;
        q.session_id = sid;
        q.program_id = pid;
        q.dataset_id = iris;
        q.val_dataset_id = "d-0123456789abcdef0123456789abcdef";
        q.epochs = 1;
        CHECK(unary_st(c, "Fit", &q, &r) != 0, "Fit with an unknown val set");
        Rtrain__V1__EvaluateRequest e = RTRAIN__V1__EVALUATE_REQUEST__INIT;
        e.session_id = sid;
        e.program_id = "p-0123456789abcdef0123456789abcdef";
        e.dataset_id = iris;
        CHECK(unary_st(c, "Evaluate", &e, &r) == 5, "Evaluate of nobody: %d", r.status);
        float x[5] = {0};
        int64_t shape[2] = {1, 5};
        Rtrain__V1__Tensor t = RTRAIN__V1__TENSOR__INIT;
        t.dtype = RTRAIN__V1__DTYPE__F32;
        t.shape = shape;
        t.n_shape = 2;
        t.data.data = (uint8_t *)x;
        t.data.len = sizeof x;
        Rtrain__V1__PredictRequest pr = RTRAIN__V1__PREDICT_REQUEST__INIT;
        pr.session_id = sid;
        pr.program_id = pid;
        pr.input_case = RTRAIN__V1__PREDICT_REQUEST__INPUT_X;
        pr.x = &t;
        CHECK(unary_st(c, "Predict", &pr, &r) == 3, "Predict of 5 features: %d", r.status);
        Rtrain__V1__Tensor *tw[1] = {&t};
        t.name = "w1";
        Rtrain__V1__SetWeightsRequest sw = RTRAIN__V1__SET_WEIGHTS_REQUEST__INIT;
        sw.session_id = sid;
        sw.program_id = pid;
        sw.weights = tw;
        sw.n_weights = 1;
        int st = unary_st(c, "SetWeights", &sw, &r);
        CHECK(st == 3 || st == 5, "SetWeights of a wrong weight: %d", st);
        Rtrain__V1__ExportOnnxRequest ex = RTRAIN__V1__EXPORT_ONNX_REQUEST__INIT;
        ex.session_id = sid;
        ex.program_id = pid;
        ex.onnx.data = (uint8_t *)"\xff\xff\xff";
        ex.onnx.len = 3;
        CHECK(unary_st(c, "ExportOnnx", &ex, &r) == 3, "ExportOnnx of garbage: %d", r.status);
        Rtrain__V1__ControlRequest ct = RTRAIN__V1__CONTROL_REQUEST__INIT;
        ct.session_id = sid;
        ct.program_id = pid;
        ct.learning_rate = NAN;
        CHECK(unary_st(c, "Control", &ct, &r) == 3, "Control to a NaN rate: %d", r.status);
        CHECK(checkpoint(c, sid, "t-0123456789abcdef0123456789abcdef", pid, 1, 0, NULL, NULL,
                         NULL, &r) == 16, "Checkpoint with a wrong token: %d", r.status);
        itest_res_free(&r);
        CHECK(checkpoint(c, sid, tok, pid, 0, 1, NULL, NULL, NULL, &r) == 9,
              "Checkpoint save without --state-dir: %d", r.status);
        itest_res_free(&r);
    }
    same(&d, full, "failed training calls");
    itest_disconnect(c);
    CHECK(itest_daemon_stop(&d, SIGTERM) == 0, "daemon exit");

    /* --state-dir on a full disk (RLIMIT_FSIZE: the session record fits, a
     * checkpoint does not): Compile and RestoreCheckpoint fail on their
     * first checkpoint, and take their program back, on disk too */
    const char *dextra[] = {"--metrics-listen", "127.0.0.1:0", "--state-dir", dir, NULL};
    struct rlimit old, rl;
    getrlimit(RLIMIT_FSIZE, &old);
    rl = old;
    rl.rlim_cur = 8192;
    CHECK(setrlimit(RLIMIT_FSIZE, &rl) == 0, "setrlimit");
    int started = itest_daemon_start(&d, g_daemon, dextra);
    setrlimit(RLIMIT_FSIZE, &old);
    CHECK(started == 0 && d.metrics[0], "durable daemon start");
    c = itest_connect(d.addr);
    session(c, sid, tok);
    CHECK(settled(&d, base) == 0 && base[G_SESSIONS] == 1, "durable baseline");
    compile_iris(c, sid, px, 8); /* on a full disk */
    CHECK(restore(c, sid, tok, good, good_len, px, &r) == 8 && strstr(r.details, "disk full"),
          "RestoreCheckpoint on a full disk: %d %s", r.status, r.details);
    itest_res_free(&r);
    same(&d, base, "a full disk");
    char sdir[600];
    snprintf(sdir, sizeof sdir, "%s/sessions/%s", dir, sid);
    DIR *dd = opendir(sdir);
    int programs_on_disk = 0;
    struct dirent *e;
    while (dd && (e = readdir(dd)))
        programs_on_disk += strncmp(e->d_name, "p-", 2) == 0;
    if (dd)
        closedir(dd);
    CHECK(dd && programs_on_disk == 0, "%d program folders left in %s", programs_on_disk, sdir);
    itest_disconnect(c);
    CHECK(itest_daemon_stop(&d, SIGTERM) == 0, "durable daemon exit");
    free(k.b);
    free(good);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "rm %s", dir);
}

/* ------------------------------------------- a state pushed into a program */
/* RestoreCheckpoint with program_id (issue 29): a state pulled at step 5
 * and pushed back into its program five times makes no program (/metrics)
 * and each time the program trains on to the weights of an uninterrupted
 * run, with its checkpoint in --state-dir at the pushed step; a program of
 * the same model in another session takes it too. Refused, each leaving
 * the program's weights and step as they were and the program training
 * on: another session's program (NOT_FOUND), a state of another model
 * (FAILED_PRECONDITION), a crafted state (INVALID_ARGUMENT), a torn one
 * (DATA_LOSS). The third refusal the daemon has, a RunSteps or Fit still
 * running on the program, cannot be reached by a client: the executor runs
 * a session's calls one at a time, so the push waits for the training
 * call to end (there is no deterministic way to observe it mid-call). */
static void test_restore_into(void)
{
    char dir[] = "/tmp/rtrain-into-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    const char *extra[] = {"--metrics-listen", "127.0.0.1:0", "--state-dir", dir, NULL};
    itest_daemon d;
    CHECK(itest_daemon_start(&d, g_daemon, extra) == 0 && d.metrics[0], "daemon start");
    itest_conn *c = itest_connect(d.addr);
    char sid[64], tok[64], pid[64], iris[64], bsid[64], btok[64], bpid[64], qpid[64], np[64];
    itest_res r;
    int64_t step;
    int fin;
    session(c, sid, tok);
    session(c, bsid, btok);
    compile_iris(c, sid, pid, 0);
    compile_iris(c, bsid, bpid, 0); /* the same model, another session */
    compile_mlp(c, sid, 8, qpid, 0); /* another model, this session */
    upload_iris(c, sid, iris);
    CHECK(run_steps(c, sid, pid, iris, 5, &step, &fin, &r) == 0 && step == 5, "5 steps: %s",
          r.details);
    itest_res_free(&r);
    ck k0 = {0};
    CHECK(checkpoint(c, sid, tok, pid, 1, 0, &k0.b, &k0.n, &step, &r) == 0 && k0.b && step == 5,
          "pull at 5: %s", r.details);
    itest_res_free(&r);
    size_t n5 = 0, n8 = 0, nq = 0, nb = 0;
    uint8_t *w5 = itest_weights_blob(c, sid, pid, &n5, NULL, NULL);
    CHECK(run_steps(c, sid, pid, iris, 3, &step, &fin, &r) == 0 && step == 8, "3 steps: %s",
          r.details);
    itest_res_free(&r);
    uint8_t *w8 = itest_weights_blob(c, sid, pid, &n8, NULL, NULL);
    uint8_t *wq = itest_weights_blob(c, sid, qpid, &nq, NULL, NULL);
    CHECK(k0.b && w5 && w8 && wq && (n5 != n8 || memcmp(w5, w8, n5)), "weights at 5 and 8");
    uint64_t base[G__N], now[G__N];
    CHECK(settled(&d, base) == 0 && base[G_PROGRAMS] == 3, "3 programs: %llu",
          (unsigned long long)base[G_PROGRAMS]);
    if (!k0.b || !w5 || !w8 || !wq)
        goto out;

    /* five times back to step 5, three steps on: the weights at 8 */
    char pdir[600], path[900];
    snprintf(pdir, sizeof pdir, "%s/sessions/%s/%s", dir, sid, pid);
    for (int i = 0; i < 5; i++) {
        CHECK(restore_at(c, sid, tok, pid, k0.b, k0.n, np, &step, &r) == 0 &&
                  !strcmp(np, pid) && step == 5,
              "push %d into %s: status %d, program %s, step %lld: %s", i, pid, r.status, np,
              (long long)step, r.details);
        itest_res_free(&r);
        CHECK(settled(&d, now) == 0 && now[G_PROGRAMS] == base[G_PROGRAMS],
              "push %d: %llu programs, not %llu", i, (unsigned long long)now[G_PROGRAMS],
              (unsigned long long)base[G_PROGRAMS]);
        /* durable: the program's newest checkpoint is the pushed state */
        size_t fn = 0;
        ck f = {0};
        CHECK(newest_ckpt(pdir, path, sizeof path) == 0 &&
                  (f.b = itest_read_file(path, &fn)) != NULL,
              "no checkpoint in %s", pdir);
        f.n = fn;
        CHECK(f.b && ck_split(&f, 5) == 0, "push %d: the newest checkpoint of %s is not at "
              "step 5", i, pid);
        free(f.b);
        size_t n = 0;
        uint8_t *w = itest_weights_blob(c, sid, pid, &n, NULL, NULL);
        CHECK(w && n == n5 && !memcmp(w, w5, n), "push %d: the weights are not step 5's", i);
        free(w);
        CHECK(run_steps(c, sid, pid, iris, 3, &step, &fin, &r) == 0 && step == 8 && fin,
              "push %d, 3 steps: status %d step %lld %s", i, r.status, (long long)step,
              r.details);
        itest_res_free(&r);
        w = itest_weights_blob(c, sid, pid, &n, NULL, NULL);
        CHECK(w && n == n8 && !memcmp(w, w8, n), "push %d: 3 steps on are not the weights of "
              "8 steps in one go", i);
        free(w);
    }

    /* the same model in another session: compiled there, its state taken */
    CHECK(restore_at(c, bsid, btok, bpid, k0.b, k0.n, np, &step, &r) == 0 &&
              !strcmp(np, bpid) && step == 5,
          "into the same model of another session: status %d step %lld %s", r.status,
          (long long)step, r.details);
    itest_res_free(&r);
    uint8_t *wb = itest_weights_blob(c, bsid, bpid, &nb, NULL, NULL);
    CHECK(wb && nb == n5 && !memcmp(wb, w5, nb), "the other session's program has step 5's "
          "weights");
    free(wb);

    /* refusals: each leaves the program at step 8 with its weights */
    struct {
        const char *what, *sid, *tok, *into;
        int tamper; /* 1: a crafted weight, resealed; 2: a torn byte */
        int want;
        const char *says;
    } bad[] = {
        {"another session's program", sid, tok, bpid, 0, 5, bpid},
        {"a state of another model", sid, tok, qpid, 0, 9, "different model"},
        {"a NaN weight", sid, tok, pid, 1, 3, "state blob"},
        {"a torn state", sid, tok, pid, 2, 15, "checksum"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck k = k0;
        k.b = malloc(k0.n);
        memcpy(k.b, k0.b, k0.n);
        if (bad[i].tamper && ck_split(&k, 5) == 0) {
            a_weight_nan(&k);
            if (bad[i].tamper == 1)
                ck_seal(&k);
        }
        int st = restore_at(c, bad[i].sid, bad[i].tok, bad[i].into, k.b, k.n, np, NULL, &r);
        CHECK(st == bad[i].want && strstr(r.details, bad[i].says),
              "%s: status %d (%s), not %d naming '%s'", bad[i].what, st, r.details, bad[i].want,
              bad[i].says);
        itest_res_free(&r);
        free(k.b);
        const char *into = bad[i].want == 9 ? qpid : pid;
        uint8_t *want = bad[i].want == 9 ? wq : w8;
        size_t wn = bad[i].want == 9 ? nq : n8, n = 0;
        uint8_t *w = itest_weights_blob(c, sid, into, &n, NULL, NULL);
        CHECK(w && n == wn && !memcmp(w, want, n), "%s: the program's weights changed",
              bad[i].what);
        free(w);
        CHECK(checkpoint(c, sid, tok, into, 0, 0, NULL, NULL, &step, &r) == 0 &&
                  step == (into == qpid ? 0 : 8),
              "%s: the program's step is %lld", bad[i].what, (long long)step);
        itest_res_free(&r);
    }
    CHECK(run_steps(c, sid, pid, iris, 2, &step, &fin, &r) == 0 && step == 10 && fin,
          "after the refusals the program trains on: status %d step %lld %s", r.status,
          (long long)step, r.details);
    itest_res_free(&r);
    CHECK(settled(&d, now) == 0 && now[G_PROGRAMS] == base[G_PROGRAMS],
          "%llu programs at the end, not %llu", (unsigned long long)now[G_PROGRAMS],
          (unsigned long long)base[G_PROGRAMS]);
out:
    free(k0.b);
    free(w5);
    free(w8);
    free(wq);
    itest_disconnect(c);
    CHECK(itest_daemon_stop(&d, SIGTERM) == 0, "daemon exit");
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "rm %s", dir);
}

/* ------------------------------------------------------- DropProgram */
static int drop(itest_conn *c, const char *sid, const char *tok, const char *pid)
{
    Rtrain__V1__DropProgramRequest q = RTRAIN__V1__DROP_PROGRAM_REQUEST__INIT;
    q.session_id = (char *)sid;
    q.session_token = (char *)tok;
    q.program_id = (char *)pid;
    itest_res r;
    return unary_st(c, "DropProgram", &q, &r);
}

static int program_dir_exists(const char *dir, const char *sid, const char *pid)
{
    char path[700];
    snprintf(path, sizeof path, "%s/sessions/%s/%s", dir, sid, pid);
    struct stat st;
    return stat(path, &st) == 0;
}

/* DropProgram (issue 29): a dropped program leaves /metrics' count and
 * --state-dir, answers NOT_FOUND to RunSteps, Predict and a second drop,
 * and does not come back when the daemon restarts; another program of the
 * session trains on bit-identically (3 steps after the drop are the 3
 * steps it made from the same state before it). Refused, changing
 * nothing: a wrong token, another session's id and token, an unknown id. */
static void test_drop(void)
{
    char dir[] = "/tmp/rtrain-drop-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    const char *extra[] = {"--metrics-listen", "127.0.0.1:0", "--state-dir", dir, NULL};
    itest_daemon d;
    CHECK(itest_daemon_start(&d, g_daemon, extra) == 0 && d.metrics[0], "daemon start");
    itest_conn *c = itest_connect(d.addr);
    char sid[64], tok[64], bsid[64], btok[64], p1[64], p2[64], bp[64], iris[64], np[64];
    itest_res r;
    int64_t step;
    int fin;
    session(c, sid, tok);
    session(c, bsid, btok);
    compile_iris(c, sid, p1, 0);
    compile_iris(c, sid, p2, 0);
    compile_iris(c, bsid, bp, 0);
    upload_iris(c, sid, iris);
    CHECK(run_steps(c, sid, p1, iris, 2, &step, &fin, &r) == 0 && step == 2, "p1: %s",
          r.details);
    itest_res_free(&r);
    CHECK(run_steps(c, sid, p2, iris, 5, &step, &fin, &r) == 0 && step == 5, "p2: %s",
          r.details);
    itest_res_free(&r);
    /* p2's reference: 3 steps from step 5 before any drop */
    ck k5 = {0};
    CHECK(checkpoint(c, sid, tok, p2, 1, 0, &k5.b, &k5.n, &step, &r) == 0 && k5.b, "pull: %s",
          r.details);
    itest_res_free(&r);
    CHECK(run_steps(c, sid, p2, iris, 3, &step, &fin, &r) == 0 && step == 8, "p2 on: %s",
          r.details);
    itest_res_free(&r);
    size_t n8 = 0;
    uint8_t *w8 = itest_weights_blob(c, sid, p2, &n8, NULL, NULL);
    CHECK(restore_at(c, sid, tok, p2, k5.b, k5.n, np, &step, &r) == 0 && step == 5,
          "p2 back to 5: %s", r.details);
    itest_res_free(&r);
    uint64_t base[G__N], now[G__N];
    CHECK(settled(&d, base) == 0 && base[G_PROGRAMS] == 3, "3 programs: %llu",
          (unsigned long long)base[G_PROGRAMS]);
    CHECK(program_dir_exists(dir, sid, p1), "p1 has no checkpoint folder");

    /* refusals: nothing changes */
    CHECK(drop(c, sid, "t-0123456789abcdef0123456789abcdef", p1) == 16, "a wrong token");
    CHECK(drop(c, bsid, btok, p1) == 5, "another session's id and token");
    CHECK(drop(c, sid, btok, p1) == 16, "another session's token");
    CHECK(drop(c, sid, tok, "p-0123456789abcdef0123456789abcdef") == 5, "an unknown id");
    CHECK(drop(c, sid, tok, "") == 3, "an empty id");
    CHECK(settled(&d, now) == 0 && now[G_PROGRAMS] == 3, "refusals: %llu programs",
          (unsigned long long)now[G_PROGRAMS]);

    /* the drop */
    CHECK(drop(c, sid, tok, p1) == 0, "drop p1");
    CHECK(settled(&d, now) == 0 && now[G_PROGRAMS] == 2, "after the drop: %llu programs",
          (unsigned long long)now[G_PROGRAMS]);
    CHECK(now[G_CHARGED] < base[G_CHARGED], "the charged bytes did not fall: %llu, %llu",
          (unsigned long long)now[G_CHARGED], (unsigned long long)base[G_CHARGED]);
    CHECK(!program_dir_exists(dir, sid, p1), "p1's checkpoint folder is left");
    CHECK(program_dir_exists(dir, sid, p2), "p2's checkpoint folder went too");
    CHECK(run_steps(c, sid, p1, iris, 1, &step, &fin, &r) == 5 && strstr(r.details, p1),
          "RunSteps on a dropped program: %d %s", r.status, r.details);
    itest_res_free(&r);
    Rtrain__V1__PredictRequest pq = RTRAIN__V1__PREDICT_REQUEST__INIT;
    pq.session_id = sid;
    pq.program_id = p1;
    pq.input_case = RTRAIN__V1__PREDICT_REQUEST__INPUT_DATASET_ID;
    pq.dataset_id = iris;
    CHECK(unary_st(c, "Predict", &pq, &r) == 5, "Predict on a dropped program");
    CHECK(drop(c, sid, tok, p1) == 5, "a second drop");
    /* p2 trains on as it did */
    CHECK(run_steps(c, sid, p2, iris, 3, &step, &fin, &r) == 0 && step == 8 && fin,
          "p2 after the drop: %d %s", r.status, r.details);
    itest_res_free(&r);
    size_t n = 0;
    uint8_t *w = itest_weights_blob(c, sid, p2, &n, NULL, NULL);
    CHECK(w8 && w && n == n8 && !memcmp(w, w8, n), "p2's 3 steps after the drop are not the "
          "ones before it");
    free(w);
    itest_disconnect(c);
    CHECK(itest_daemon_stop(&d, SIGTERM) == 0, "daemon exit");

    /* a restart brings p2 and the other session's program back, not p1 */
    CHECK(itest_daemon_start(&d, g_daemon, extra) == 0 && d.metrics[0], "daemon restart");
    c = itest_connect(d.addr);
    CHECK(settled(&d, now) == 0 && now[G_PROGRAMS] == 2, "after the restart: %llu programs",
          (unsigned long long)now[G_PROGRAMS]);
    CHECK(checkpoint(c, sid, tok, p2, 0, 0, NULL, NULL, &step, &r) == 0 && step == 8,
          "p2 after the restart: %d step %lld %s", r.status, (long long)step, r.details);
    itest_res_free(&r);
    CHECK(checkpoint(c, sid, tok, p1, 0, 0, NULL, NULL, &step, &r) == 5,
          "p1 after the restart: %d", r.status);
    itest_res_free(&r);
    /* the drop of a restored program */
    CHECK(drop(c, bsid, btok, bp) == 0, "drop a restored program");
    CHECK(settled(&d, now) == 0 && now[G_PROGRAMS] == 1 && !program_dir_exists(dir, bsid, bp),
          "after dropping a restored program: %llu programs",
          (unsigned long long)now[G_PROGRAMS]);
    itest_disconnect(c);
    CHECK(itest_daemon_stop(&d, SIGTERM) == 0, "daemon exit");
    free(k5.b);
    free(w8);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "rm %s", dir);
}

int main(int argc, char **argv)
{
    if (argc < 3 ||
        (strcmp(argv[2], "input") && strcmp(argv[2], "leftovers") && strcmp(argv[2], "into") &&
         strcmp(argv[2], "drop"))) {
        fprintf(stderr, "usage: %s RTRAIND input|leftovers|into|drop\n", argv[0]);
        return 2;
    }
    g_daemon = argv[1];
    if (!strcmp(argv[2], "leftovers")) {
        RUN(test_leftovers);
        return itest_summary();
    }
    if (!strcmp(argv[2], "into")) {
        RUN(test_restore_into);
        return itest_summary();
    }
    if (!strcmp(argv[2], "drop")) {
        RUN(test_drop);
        return itest_summary();
    }
    setup();
    RUN(test_pushed_checkpoints);
    RUN(test_nested_onnx);
    RUN(test_nested_keras);
    RUN(test_state_dir);
    itest_disconnect(T.c);
    int rc = itest_daemon_stop(&T.d, SIGTERM);
    CHECK(rc == 0, "daemon exit %d", rc);
    free(T.wb);
    return itest_summary();
}
