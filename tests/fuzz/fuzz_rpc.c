/* fuzz_rpc.c - every rtrain.v1.Trainer request: the real decode
 * (rt_wire_unpack into the call's arena) and the method's real handler from
 * server/rpc/rt_h_*.c, run against a fake server that holds one session
 * with one compiled iris program and one iris dataset.
 *
 * Input: byte 0 picks the method (index into rt_methods, mod its size);
 *   - unary and server-streaming methods: the rest is the packed request;
 *   - UploadDataset (client stream): the rest is a sequence of frames, each a
 *     2-byte little-endian length and that many bytes of packed UploadChunk;
 *     the handler runs per chunk, then the end-of-stream handler.
 * In any decoded string field, "@S", "@P" and "@D" stand for the fixture's
 * session, program and dataset ids (the ids are random per run), and "@T"
 * for the session's token, so seeds reach the checks past the lookups.
 *
 * What runs is what a completion-queue thread runs: decode, the handler,
 * and work that needs no device (the end of an upload: parse, dedup, store).
 * The work a handler hands to the device (training, compiling a plan) is
 * not run; the importer has its own harness. Checked after each call: a failed call has a known code
 * and a short message; a call that neither failed nor handed on work has a
 * response, and the response packs. */
#include "rt_srv_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/slice.h>

#include "import_keras.h"
#include "rt_auth.h"

static const char fixture_model[] =
    "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"iris\", \"layers\": ["
    "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 4],"
    " \"dtype\": \"float32\", \"name\": \"x\"}},"
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d1\", \"units\": 8,"
    " \"activation\": \"relu\"}},"
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d2\", \"units\": 3,"
    " \"activation\": \"softmax\"}}]}}";

static const char fixture_csv[] =
    "sepal_length,sepal_width,petal_length,petal_width,species\n"
    "5.1,3.5,1.4,0.2,0\n4.9,3.0,1.4,0.2,0\n7.0,3.2,4.7,1.4,1\n"
    "6.4,3.2,4.5,1.5,1\n6.3,3.3,6.0,2.5,2\n5.8,2.7,5.1,1.9,2\n";

static rt_srv g_srv;
static rt_plan *g_plan;
static char g_sess[sizeof ((rt_session *)0)->id], g_prog[RT_SESSION_ID_LEN],
    g_ds[sizeof ((rt_dataset *)0)->id], g_tok[sizeof ((rt_session *)0)->token];
static rt_dataset *g_ds_ref;
static rt_principal *g_who; /* the single user of a daemon without tokens */
static int g_verbose; /* RT_FUZZ_VERBOSE=1: one line per input, to check seeds */

static void die(const char *what, const char *err)
{
    fprintf(stderr, "fuzz_rpc: fixture: %s: %s\n", what, err);
    abort();
}

/* The session and its program, (re)made when a fuzzed CloseSession took
 * them away: every input starts from the same state. */
static void fixture_session(void)
{
    char err[200];
    rt_session *s = g_sess[0] ? rt_session_find(g_srv.sessions, g_sess, g_who) : NULL;
    if (!s) {
        if (rt_principal_reserve(g_who, RT_Q_SESSIONS, 1, err, sizeof err) < 0)
            die("session", err);
        if (rt_session_open(g_srv.sessions, "fuzz", g_who, &s) < 0)
            die("session", "cannot open");
        snprintf(g_sess, sizeof g_sess, "%s", s->id);
        snprintf(g_tok, sizeof g_tok, "%s", s->token);
        g_prog[0] = 0;
    }
    if (!g_prog[0] || !rt_session_find_program(s, g_prog)) {
        rt_exec *e;
        rt_program *p;
        if (rt_principal_reserve(g_who, RT_Q_PROGRAMS, 1, err, sizeof err) < 0)
            die("program", err);
        if (rt_exec_create(g_plan, &e) < 0)
            die("exec", "cannot create");
        rt_plan_retain(g_plan);
        if (rt_session_add_program(s, g_plan, e, 0, &p) < 0)
            die("program", "cannot add");
        snprintf(g_prog, sizeof g_prog, "%s", rt_program_id(p));
    }
    rt_session_release(s);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    rt_obs_set_level(RT_LOG_ERROR);
    rt_methods_init();
    g_verbose = getenv("RT_FUZZ_VERBOSE") != NULL;
    rt_srv_config_init(&g_srv.cfg);
    /* Small limits: Ping echoes and upload buffers stay within the fuzzer's
     * memory limit. */
    g_srv.cfg.max_message_bytes = 1u << 20;
    g_srv.cfg.max_dataset_bytes = 1u << 20;
    g_srv.cfg.max_sessions = 4;
    g_srv.sessions = rt_session_table_create(g_srv.cfg.max_sessions);
    g_srv.principals = rt_principal_set_create(RT_QUOTA_UNLIMITED);
    g_srv.plans = rt_plan_cache_create(8);
    /* A small store: uploads that pile up are evicted, as in the daemon;
     * the fixture's dataset is held (g_ds_ref) so it never is. */
    g_srv.data = rt_data_store_create(64u << 10);
    if (!g_srv.sessions || !g_srv.plans || !g_srv.data || !g_srv.principals)
        die("server", "out of memory");

    /* The daemon's own authentication without a tokens file: one
     * principal, the server-wide limits only. */
    char err[256];
    const char *why = "";
    grpc_metadata_array md;
    grpc_metadata_array_init(&md);
    rt_quota_unlimited(g_srv.quota);
    if (rt_auth_create(NULL, g_srv.quota, g_srv.principals, &g_srv.auth, err, sizeof err) < 0)
        die("auth", err);
    if (!(g_who = rt_call_principal(g_srv.auth, &md, &why)))
        die("auth", why);
    grpc_metadata_array_destroy(&md);

    rt_graph *g;
    if (rt_keras_import(fixture_model, strlen(fixture_model), &g, err, sizeof err) < 0)
        die("model", err);
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    rt_loss_from_name("sparse_categorical_crossentropy", &cfg.loss);
    cfg.label_dtype = RT_I32;
    if (rt_plan_compile(g, &cfg, &g_plan, NULL, err, sizeof err) < 0)
        die("compile", err);
    rt_graph_destroy(g);

    rt_data_part part = {.role = RT_ROLE_BOTH, .format = RT_FMT_CSV,
                         .length = sizeof fixture_csv - 1, .label_column = -1,
                         .csv_header = 1};
    rt_dataset *ds, *kept;
    int dedup;
    uint8_t *csv = (uint8_t *)fixture_csv; /* may_take 0: only read */
    if (rt_data_parse_take(&part, 1, &csv, sizeof fixture_csv - 1, 1u << 20, 0, 0, &ds, err,
                           sizeof err) < 0)
        die("dataset", err);
    uint8_t hash[16] = {1}, key[16];
    rt_data_key(hash, &part, 1, key);
    rt_dataset_set_key(ds, key);
    rt_dataset_set_owner(ds, g_who, 0);
    if (rt_data_store_put(g_srv.data, ds, &kept, &dedup) < 0)
        die("dataset", "cannot store");
    snprintf(g_ds, sizeof g_ds, "%s", kept->id);
    g_ds_ref = kept;
    fixture_session();
    return 0;
}

/* ------------------------------------------------------- the fake call */
static rt_call *call_new(const rt_method *m)
{
    rt_call *c = calloc(1, sizeof *c);
    if (!c)
        abort();
    c->srv = &g_srv;
    c->who = g_who;
    c->m = m;
    rt__call_arena_init(c);
    pthread_mutex_init(&c->out_mu, NULL);
    return c;
}

/* What rt_srv.c's call_free releases for a call that never reached gRPC. */
static void call_free(rt_call *c)
{
    if (c->st_free && c->st)
        c->st_free(c->st);
    rt_program_release(c->prog); /* before its session's, as rt__call_free */
    rt_session_release(c->sess);
    rt_dataset_release(c->ds);
    rt_dataset_release(c->val_ds);
    rt__call_arena_free(c);
    pthread_mutex_destroy(&c->out_mu);
    free(c);
}

/* The placeholders, in every string field the message holds. A oneof
 * member is only read when it is the set case. A message unpacked with
 * malloc (upload chunks) gets malloc'ed copies: free_unpacked frees them. */
static void subst_str(char **s, int malloced)
{
    if (!*s || (*s)[0] != '@' || !(*s)[1] || (*s)[2])
        return;
    char *id;
    switch ((*s)[1]) {
    case 'S': id = g_sess; break;
    case 'P': id = g_prog; break;
    case 'D': id = g_ds; break;
    case 'T': id = g_tok; break;
    default: return;
    }
    if (malloced) {
        char *d = strdup(id);
        if (!d)
            return;
        free(*s);
        id = d;
    }
    *s = id;
}

static void subst(ProtobufCMessage *msg, int malloced)
{
    const ProtobufCMessageDescriptor *d = msg->descriptor;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        char *base = (char *)msg;
        if (f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
            *(uint32_t *)(base + f->quantifier_offset) != f->id)
            continue;
        void *slot = base + f->offset;
        size_t n = 1;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            n = *(size_t *)(base + f->quantifier_offset);
            slot = *(void **)slot;
        }
        for (size_t k = 0; k < n; k++) {
            void **p = (void **)slot + k;
            if (f->type == PROTOBUF_C_TYPE_STRING)
                subst_str((char **)p, malloced);
            else if (*p)
                subst(*p, malloced);
        }
    }
}

/* The daemon's decode: the bytes as one gRPC byte buffer, unpacked by
 * rt_wire_unpack with the given allocator (the call's arena, or malloc for
 * upload chunks, which are freed after each handler). */
static ProtobufCMessage *decode(rt_call *c, const uint8_t *p, size_t n,
                                ProtobufCAllocator *alloc)
{
    grpc_slice s = grpc_slice_from_copied_buffer((const char *)p, n);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    ProtobufCMessage *m = rt_wire_unpack(bb, c->m->req_desc, alloc);
    grpc_byte_buffer_destroy(bb);
    if (!m)
        rt_call_fail(c, RT_EPROTO, "malformed %s", c->m->req_name);
    else
        subst(m, alloc == NULL);
    return m;
}

static void run_handler(rt_call *c, rt_handler_fn fn)
{
    int rc = fn(c);
    if (rc < 0 && !c->err)
        rt_call_fail(c, rc, "%s", rt_strerror(rc));
}

static void upload(rt_call *c, const uint8_t *p, size_t n)
{
    while (n >= 2 && !c->err) {
        size_t len = (size_t)p[0] | ((size_t)p[1] << 8);
        p += 2;
        n -= 2;
        if (len > n)
            len = n;
        c->req = decode(c, p, len, NULL);
        p += len;
        n -= len;
        if (c->req) {
            run_handler(c, c->m->handle);
            protobuf_c_message_free_unpacked(c->req, NULL);
            c->req = NULL;
        }
    }
    if (!c->err)
        run_handler(c, c->m->end);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    fixture_session();
    const rt_method *m = &rt_methods[data[0] % rt_n_methods];
    rt_call *c = call_new(m);
    if (m->kind == RT_CLIENT_STREAM) {
        upload(c, data + 1, size - 1);
    } else {
        c->req = decode(c, data + 1, size - 1, &c->alloc);
        if (c->req)
            run_handler(c, m->handle);
    }

    if (!c->err && c->work && !c->needs_device)
        run_handler(c, c->work);
    if (g_verbose)
        fprintf(stderr, "%s: %s%s%s\n", m->path, c->err ? rt_err_name(c->err) : "ok",
                c->err ? ": " : (c->work && c->needs_device ? " (work handed on)" : ""), c->err ? c->errmsg : "");
    if (c->err) {
        /* A status the client can act on and a message that fits. */
        if (c->err >= 0 || rt_err_to_grpc(c->err) == 2 /* UNKNOWN */ || !c->errmsg[0] ||
            strnlen(c->errmsg, sizeof c->errmsg) == sizeof c->errmsg)
            abort();
    } else if (c->resp) {
        size_t n = protobuf_c_message_get_packed_size(c->resp);
        uint8_t *buf = malloc(n ? n : 1);
        if (!buf || protobuf_c_message_pack(c->resp, buf) != n)
            abort();
        free(buf);
        if (c->resp->descriptor == &rtrain__v1__create_session_response__descriptor) {
            const Rtrain__V1__CreateSessionResponse *r = (const void *)c->resp;
            if (rt_session_close(g_srv.sessions, r->session_id, g_who) < 0)
                abort();
        }
    } else if (!c->work || !c->needs_device) {
        abort(); /* neither an answer nor work nor an error */
    }
    call_free(c);
    return 0;
}
