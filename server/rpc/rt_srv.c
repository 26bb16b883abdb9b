/* rt_srv.c - gRPC core front end: cq threads, call state machines, the
 * device executor and the shutdown sequence (see docs/grpc-core.md). */
#include "rt_srv_impl.h"

#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>

void rt_srv_config_init(rt_srv_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->listen = "127.0.0.1:7070";
    cfg->threads = 2;
    cfg->max_message_bytes = 64ull << 20;
    cfg->max_sessions = 64;
    cfg->max_dataset_bytes = 4ull << 30;
    cfg->inline_ns = 200000;
}

/* ------------------------------------------------------------------ arena */
static void *arena_alloc(void *ud, size_t n)
{
    return rt_call_alloc((rt_call *)ud, n);
}
static void arena_free(void *ud, void *p) { (void)ud; (void)p; }

void *rt_call_alloc(rt_call *c, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    rt__arena_blk *b = c->arena;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 8192 ? n : 8192;
        /* Small blocks are not worth a lock; a large one is charged before
         * it exists. */
        if (cap >= RT__CALL_CHARGE_MIN &&
            rt_principal_reserve(c->who, RT_Q_CALL_BYTES, cap, c->alloc_err,
                                 sizeof c->alloc_err) < 0)
            return NULL;
        rt__arena_blk *nb = malloc(sizeof *nb + cap);
        if (!nb) {
            if (cap >= RT__CALL_CHARGE_MIN)
                rt_principal_unreserve(c->who, RT_Q_CALL_BYTES, cap);
            return NULL;
        }
        if (cap >= RT__CALL_CHARGE_MIN)
            c->charged += cap;
        nb->cap = cap;
        nb->used = 0;
        /* A big one-off block goes behind the current one so the current
         * block's free space stays usable. */
        if (b && n > 8192) {
            nb->next = b->next;
            b->next = nb;
        } else {
            nb->next = b;
            c->arena = nb;
        }
        b = nb;
    }
    void *p = b->mem + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

char *rt_call_strdup(rt_call *c, const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = rt_call_alloc(c, n);
    if (d)
        memcpy(d, s, n);
    return d;
}

int rt_call_fail(rt_call *c, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->errmsg, sizeof c->errmsg, fmt, ap);
    va_end(ap);
    c->err = code < 0 ? code : RT_EINTERNAL;
    return c->err;
}

/* ---------------------------------------------------------------- packing */
/* Pack msg and, if asked, the Timings tail (field 15) after it. The tail is
 * packed after the body so encode_ns is the body's measured packing cost and
 * total_ns ends at the hand-off. Same layout as rt_wire_pack: the tail is
 * its own slice of its real length, so Timings may grow any number of
 * fields. */
static grpc_byte_buffer *pack_msg(rt_call *c, const ProtobufCMessage *msg,
                                  int with_timings)
{
    uint64_t t0 = rt_now_ns();
    grpc_slice body = rt_wire_body(msg);
    if (!with_timings)
        return rt_wire_join(body, NULL);
    uint64_t t1 = rt_now_ns();
    c->tm.encode_ns += t1 - t0;
    Rtrain__V1__Timings tpb = RTRAIN__V1__TIMINGS__INIT;
    rt_obs_timing_fill(&c->tm, t1, &tpb);
    grpc_slice tail = rt_wire_tail(&tpb.base);
    return rt_wire_join(body, &tail);
}

/* ------------------------------------------------------------- call life */
static void on_arrival(rt__tag *t, int ok);
static void on_stream_recv(rt__tag *t, int ok);
static void on_close(rt__tag *t, int ok);
static void on_send_done(rt__tag *t, int ok);
static void on_final_done(rt__tag *t, int ok);

static void check_drained(rt_srv *s)
{
    if (__atomic_load_n(&s->shutdown_acked, __ATOMIC_ACQUIRE) &&
        __atomic_load_n(&s->live, __ATOMIC_ACQUIRE) == 0 &&
        !__atomic_exchange_n(&s->drained_fired, 1, __ATOMIC_ACQ_REL) &&
        s->on_drained)
        s->on_drained(s->drained_ud);
}

static rt_call *call_new(rt_srv *s, const rt_method *m)
{
    rt_call *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->srv = s;
    c->m = m;
    c->tag.fn = on_arrival;
    c->close_tag.fn = on_close;
    c->send_tag.fn = on_send_done;
    c->final_tag.fn = on_final_done;
    c->alloc.alloc = arena_alloc;
    c->alloc.free = arena_free;
    c->alloc.allocator_data = c;
    grpc_metadata_array_init(&c->md);
    pthread_mutex_init(&c->out_mu, NULL);
    return c;
}

static void call_free(rt_call *c, int matched)
{
    rt_srv *s = c->srv;
    if (c->st_free && c->st)
        c->st_free(c->st);
    rt_session_release(c->sess);
    rt_dataset_release(c->ds);
    rt_dataset_release(c->val_ds);
    if (c->payload)
        grpc_byte_buffer_destroy(c->payload);
    for (rt__out *o = c->out_head, *n; o; o = n) {
        n = o->next;
        grpc_byte_buffer_destroy(o->bb);
        free(o);
    }
    grpc_metadata_array_destroy(&c->md);
    if (c->call)
        grpc_call_unref(c->call);
    for (rt__arena_blk *b = c->arena, *n; b; b = n) {
        n = b->next;
        free(b);
    }
    rt_principal_unreserve(c->who, RT_Q_CALL_BYTES, c->charged);
    pthread_mutex_destroy(&c->out_mu);
    free(c);
    if (matched) {
        __atomic_sub_fetch(&s->live, 1, __ATOMIC_ACQ_REL);
        check_drained(s);
    }
}

static void call_ref(rt_call *c) { __atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED); }

static void call_unref(rt_call *c)
{
    if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) == 0)
        call_free(c, 1);
}

static void request_call(rt_srv *s, int mi)
{
    const rt_method *m = &rt_methods[mi];
    rt_call *c = call_new(s, m);
    if (!c) {
        RT_LOG(RT_LOG_ERROR, "out of memory posting a call for %s", m->path);
        return;
    }
    RT_TAG_POST(&c->tag);
    grpc_call_error e = grpc_server_request_registered_call(
        s->server, s->reg[mi], &c->call, &c->deadline, &c->md,
        m->kind == RT_UNARY ? &c->payload : NULL, s->cq, s->cq, &c->tag);
    if (e != GRPC_CALL_OK) {
        RT_LOG(RT_LOG_ERROR, "request_registered_call(%s): %d", m->path, (int)e);
        call_free(c, 0);
    }
}

/* Start a batch; a failure to start means the call is unusable, so the
 * completion is delivered by hand to keep the ref counting in one place. */
static void start_batch(rt_call *c, const grpc_op *ops, size_t n, rt__tag *tag)
{
    call_ref(c);
    grpc_call *call = c->call; /* c may be gone once the tag is posted */
    RT_TAG_POST(tag);
    grpc_call_error e = grpc_call_start_batch(call, ops, n, tag, NULL);
    if (e != GRPC_CALL_OK) {
        RT_LOG(RT_LOG_WARN, "%s: start_batch failed (%d)", c->m->path, (int)e);
        tag->fn(tag, 0);
    }
}

/* The status batch: initial metadata (if not yet sent), the response
 * message (unary/upload, when no error), the status, and for unary calls
 * RECV_CLOSE_ON_SERVER. Called with out_mu held for server streams. */
static void start_final(rt_call *c)
{
    grpc_op ops[4];
    size_t n = 0;
    memset(ops, 0, sizeof ops);
    c->final_started = 1;
    if (!c->sent_initial_md) {
        ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
        n++;
        c->sent_initial_md = 1;
    }
    if (!c->err && c->resp && c->m->kind != RT_SERVER_STREAM) {
        c->final_bb = pack_msg(c, c->resp, 1);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n].data.send_message.send_message = c->final_bb;
        n++;
    }
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status =
        c->err ? (grpc_status_code)rt_err_to_grpc(c->err) : GRPC_STATUS_OK;
    if (c->err) {
        c->final_details = grpc_slice_from_copied_string(c->errmsg);
        c->final_has_details = 1;
        ops[n].data.send_status_from_server.status_details = &c->final_details;
        char esc[300];
        RT_LOG(RT_LOG_DEBUG, "%s -> %s: %s", c->m->path, rt_err_name(c->err),
               rt_log_esc(c->errmsg, esc, sizeof esc));
    }
    n++;
    if (c->m->kind == RT_UNARY && !c->close_posted) {
        ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
        ops[n].data.recv_close_on_server.cancelled = &c->recv_cancelled;
        n++;
    }
    /* The work is done and every message is packed: drop the datasets
     * before the status leaves. The store evicts only datasets no call
     * holds; kept until call_free (after the status batch completes, on
     * whichever cq thread gets to it), an upload's reference was still
     * there when the client, already holding its answer, sent the next
     * upload, and whether that one evicted the first depended on thread
     * timing. */
    rt_dataset_release(c->ds);
    rt_dataset_release(c->val_ds);
    c->ds = c->val_ds = NULL;
    start_batch(c, ops, n, &c->final_tag);
}

static void on_final_done(rt__tag *t, int ok)
{
    rt_call *c = RT_CONTAINER(t, rt_call, final_tag);
    if (c->final_bb) {
        grpc_byte_buffer_destroy(c->final_bb);
        c->final_bb = NULL;
    }
    if (c->final_has_details) {
        grpc_slice_unref(c->final_details);
        c->final_has_details = 0;
    }
    call_unref(c);
}

/* Server stream: start sending bb (out_mu held). */
static void start_send(rt_call *c, grpc_byte_buffer *bb)
{
    grpc_op ops[2];
    size_t n = 0;
    memset(ops, 0, sizeof ops);
    if (!c->sent_initial_md) {
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
        c->sent_initial_md = 1;
    }
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n].data.send_message.send_message = bb;
    n++;
    c->sending = bb;
    c->send_in_flight = 1;
    start_batch(c, ops, n, &c->send_tag);
}

static void on_send_done(rt__tag *t, int ok)
{
    rt_call *c = RT_CONTAINER(t, rt_call, send_tag);
    pthread_mutex_lock(&c->out_mu);
    grpc_byte_buffer_destroy(c->sending);
    c->sending = NULL;
    c->send_in_flight = 0;
    if (!ok) {
        __atomic_store_n(&c->cancelled, 1, __ATOMIC_RELEASE);
        for (rt__out *o = c->out_head, *n; o; o = n) {
            n = o->next;
            grpc_byte_buffer_destroy(o->bb);
            free(o);
        }
        c->out_head = c->out_tail = NULL;
    }
    if (c->out_head) {
        rt__out *o = c->out_head;
        c->out_head = o->next;
        if (!c->out_head)
            c->out_tail = NULL;
        start_send(c, o->bb);
        free(o);
    } else if (c->final_pending && !c->final_started) {
        start_final(c);
    }
    pthread_mutex_unlock(&c->out_mu);
    call_unref(c);
}

int rt_call_is_cancelled(rt_call *c)
{
    return __atomic_load_n(&c->cancelled, __ATOMIC_ACQUIRE) ||
           __atomic_load_n(&c->srv->hard_cancel, __ATOMIC_ACQUIRE);
}

int rt_call_stream_send(rt_call *c, const ProtobufCMessage *msg, int coalesce,
                        int with_timings)
{
    if (rt_call_is_cancelled(c))
        return RT_ECANCELLED;
    grpc_byte_buffer *bb = pack_msg(c, msg, with_timings);
    pthread_mutex_lock(&c->out_mu);
    if (!c->send_in_flight) {
        start_send(c, bb);
    } else if (coalesce && c->out_tail && c->out_tail->coalesce) {
        /* The previous progress event has not left yet: send the newer. */
        grpc_byte_buffer_destroy(c->out_tail->bb);
        c->out_tail->bb = bb;
    } else {
        rt__out *o = malloc(sizeof *o);
        if (!o) {
            pthread_mutex_unlock(&c->out_mu);
            grpc_byte_buffer_destroy(bb);
            return RT_ENOMEM;
        }
        o->bb = bb;
        o->coalesce = coalesce;
        o->next = NULL;
        if (c->out_tail)
            c->out_tail->next = o;
        else
            c->out_head = o;
        c->out_tail = o;
    }
    pthread_mutex_unlock(&c->out_mu);
    return 0;
}

/* The call's logic is done: send the response or the error. Drops the
 * owner reference. */
static void finish(rt_call *c)
{
    if (c->m->kind == RT_SERVER_STREAM) {
        if (!c->err && c->resp)
            rt_call_stream_send(c, c->resp, 0, 1);
        pthread_mutex_lock(&c->out_mu);
        c->final_pending = 1;
        if (!c->send_in_flight && !c->final_started)
            start_final(c);
        pthread_mutex_unlock(&c->out_mu);
    } else {
        start_final(c);
    }
    call_unref(c);
}

/* Drop a stream whose client went away: nothing to answer. */
static void abandon(rt_call *c)
{
    c->err = RT_ECANCELLED;
    snprintf(c->errmsg, sizeof c->errmsg, "cancelled");
    finish(c);
}

/* ------------------------------------------------------------- executor */
static void run_work(rt_call *c)
{
    uint64_t t0 = rt_now_ns(), cb = c->tm.compile_ns, eb = c->tm.encode_ns,
             xb = c->tm.execute_ns;
    int rc = c->work(c);
    if (rc < 0 && !c->err)
        rt_call_fail(c, rc, "%s", rt_strerror(rc));
    uint64_t dur = rt_now_ns() - t0;
    uint64_t named = (c->tm.compile_ns - cb) + (c->tm.encode_ns - eb) +
                     (c->tm.execute_ns - xb);
    c->tm.execute_ns += dur > named ? dur - named : 0;
}

static void post_close(rt_call *c);

static void enqueue(rt_call *c)
{
    rt_srv *s = c->srv;
    /* A queued unary call may run long: watch for the client going away
     * (cancel, deadline) so the work can stop at a step boundary. Inline
     * calls skip this batch; it would cost the fast path a round of cq
     * work. */
    if (c->m->kind == RT_UNARY && !c->close_posted)
        post_close(c);
    c->enq_ns = rt_now_ns();
    c->next_job = NULL;
    __atomic_add_fetch(&s->q_pending, 1, __ATOMIC_ACQ_REL);
    pthread_mutex_lock(&s->q_mu);
    if (s->q_tail)
        s->q_tail->next_job = c;
    else
        s->q_head = c;
    s->q_tail = c;
    pthread_cond_signal(&s->q_cv);
    pthread_mutex_unlock(&s->q_mu);
}

static void *executor_main(void *arg)
{
    rt_srv *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->q_mu);
        while (!s->q_head && !s->q_stop)
            pthread_cond_wait(&s->q_cv, &s->q_mu);
        rt_call *c = s->q_head;
        if (!c) {
            pthread_mutex_unlock(&s->q_mu);
            break;
        }
        s->q_head = c->next_job;
        if (!s->q_head)
            s->q_tail = NULL;
        pthread_mutex_unlock(&s->q_mu);
        if (c->needs_device)
            pthread_mutex_lock(&s->dev_mu);
        c->tm.queue_ns += rt_now_ns() - c->enq_ns;
        if (rt_call_is_cancelled(c))
            rt_call_fail(c, RT_ECANCELLED, "cancelled before it ran");
        else
            run_work(c);
        if (c->needs_device)
            pthread_mutex_unlock(&s->dev_mu);
        __atomic_sub_fetch(&s->q_pending, 1, __ATOMIC_ACQ_REL);
        finish(c);
    }
    return NULL;
}

/* After the handler: answer now, run inline, or queue for the executor. */
static void dispatch(rt_call *c)
{
    rt_srv *s = c->srv;
    if (c->err || !c->work) {
        finish(c);
        return;
    }
    if (c->m->kind == RT_UNARY && s->cfg.inline_ns && c->est_ns <= s->cfg.inline_ns) {
        /* trylock: an inline job never waits for the device; if it is busy,
         * or jobs are queued for it (which must keep their order), it goes
         * to the executor's queue. */
        int mine = !c->needs_device;
        if (!mine && pthread_mutex_trylock(&s->dev_mu) == 0) {
            mine = __atomic_load_n(&s->q_pending, __ATOMIC_ACQUIRE) == 0;
            if (!mine)
                pthread_mutex_unlock(&s->dev_mu);
        }
        if (mine) {
            run_work(c);
            if (c->needs_device)
                pthread_mutex_unlock(&s->dev_mu);
            finish(c);
            return;
        }
    }
    enqueue(c);
}

/* Run the handler on this cq thread and account its time: validation when
 * it hands work on (decode), the work itself when it answers directly. */
static void run_handler(rt_call *c, rt_handler_fn fn)
{
    uint64_t t0 = rt_now_ns(), cb = c->tm.compile_ns;
    int rc = fn(c);
    if (rc < 0 && !c->err)
        rt_call_fail(c, rc, "%s", rt_strerror(rc));
    uint64_t dur = rt_now_ns() - t0, comp = c->tm.compile_ns - cb;
    dur = dur > comp ? dur - comp : 0;
    if (c->work || c->err)
        c->tm.decode_ns += dur;
    else
        c->tm.execute_ns += dur;
}

static ProtobufCMessage *decode(rt_call *c, ProtobufCAllocator *alloc)
{
    uint64_t t0 = rt_now_ns();
    ProtobufCMessage *m = rt_wire_unpack(c->payload, c->m->req_desc, alloc);
    grpc_byte_buffer_destroy(c->payload);
    c->payload = NULL;
    c->tm.decode_ns += rt_now_ns() - t0;
    if (!m && c->alloc_err[0])
        rt_call_fail(c, RT_ETOOBIG, "%s", c->alloc_err); /* the request itself is too large */
    else if (!m)
        rt_call_fail(c, RT_EPROTO, "malformed %s", c->m->req_name);
    return m;
}

static void post_recv(rt_call *c)
{
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &c->payload;
    c->tag.fn = on_stream_recv;
    start_batch(c, &op, 1, &c->tag);
}

static void post_close(rt_call *c)
{
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &c->recv_cancelled;
    c->close_posted = 1;
    start_batch(c, &op, 1, &c->close_tag);
}

static void on_close(rt__tag *t, int ok)
{
    rt_call *c = RT_CONTAINER(t, rt_call, close_tag);
    if (!ok || c->recv_cancelled)
        __atomic_store_n(&c->cancelled, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&c->close_done, 1, __ATOMIC_RELEASE);
    call_unref(c);
}

/* Who is calling: before anything of the request is decoded. */
static int authenticate(rt_call *c)
{
    const char *why = "unauthenticated";
    c->who = rt_auth_check(c->srv->auth, &c->md, &why);
    if (c->who)
        return 0;
    return rt_call_fail(c, RT_EAUTH, "%s", why);
}

static void on_arrival(rt__tag *t, int ok)
{
    rt_call *c = RT_CONTAINER(t, rt_call, tag);
    rt_srv *s = c->srv;
    if (!ok) { /* the server is shutting down: the request was never matched */
        call_free(c, 0);
        return;
    }
    uint64_t now = rt_now_ns();
    __atomic_add_fetch(&s->live, 1, __ATOMIC_ACQ_REL);
    __atomic_store_n(&c->refs, 1, __ATOMIC_RELAXED); /* the owner: dropped by finish() */
    if (!__atomic_load_n(&s->stopping, __ATOMIC_ACQUIRE))
        request_call(s, (int)(c->m - rt_methods));
    rt_obs_timing_begin(&c->tm, now);
    int authed = authenticate(c) == 0;
    if (c->m->kind == RT_UNARY) {
        if (authed)
            c->req = decode(c, &c->alloc);
        if (c->req)
            run_handler(c, c->m->handle);
        dispatch(c);
        return;
    }
    post_close(c);
    if (authed)
        post_recv(c);
    else
        finish(c); /* nothing of the stream is read */
}

static void on_stream_recv(rt__tag *t, int ok)
{
    rt_call *c = RT_CONTAINER(t, rt_call, tag);
    if (!ok || rt_call_is_cancelled(c)) {
        abandon(c);
        call_unref(c);
        return;
    }
    if (c->m->kind == RT_SERVER_STREAM) {
        if (!c->payload) {
            rt_call_fail(c, RT_EPROTO, "missing %s", c->m->req_name);
        } else {
            c->req = decode(c, &c->alloc);
            if (c->req)
                run_handler(c, c->m->handle);
        }
        if (!c->err && c->work)
            enqueue(c); /* streams always run on the executor */
        else
            finish(c);
        call_unref(c);
        return;
    }
    /* Client stream (upload): one message at a time, the data path stays on
     * this thread; the end-of-stream work is the handler's choice. */
    if (!c->payload) {
        run_handler(c, c->m->end);
        dispatch(c);
        call_unref(c);
        return;
    }
    c->req = decode(c, NULL);
    if (c->req) {
        run_handler(c, c->m->handle);
        protobuf_c_message_free_unpacked(c->req, NULL);
        c->req = NULL;
    }
    if (c->err)
        finish(c);
    else
        post_recv(c);
    call_unref(c);
}

/* ------------------------------------------------- unknown methods */
typedef struct rt_gcall {
    rt__tag tag;
    rt_srv *srv;
    grpc_call *call;
    grpc_call_details details;
    grpc_metadata_array md;
    int cancelled;
    int matched;
    grpc_slice status;
} rt_gcall;

static void on_generic(rt__tag *t, int ok);

static void request_generic(rt_srv *s)
{
    rt_gcall *g = calloc(1, sizeof *g);
    if (!g)
        return;
    g->srv = s;
    g->tag.fn = on_generic;
    grpc_call_details_init(&g->details);
    grpc_metadata_array_init(&g->md);
    RT_TAG_POST(&g->tag);
    if (grpc_server_request_call(s->server, &g->call, &g->details, &g->md, s->cq,
                                 s->cq, &g->tag) != GRPC_CALL_OK) {
        grpc_call_details_destroy(&g->details);
        grpc_metadata_array_destroy(&g->md);
        free(g);
    }
}

static void on_generic(rt__tag *t, int ok)
{
    rt_gcall *g = (rt_gcall *)t;
    rt_srv *s = g->srv;
    if (ok && !g->matched) {
        g->matched = 1;
        __atomic_add_fetch(&s->live, 1, __ATOMIC_ACQ_REL);
        if (!__atomic_load_n(&s->stopping, __ATOMIC_ACQUIRE))
            request_generic(s);
        char msg[200];
        snprintf(msg, sizeof msg, "unknown method %.*s",
                 (int)(GRPC_SLICE_LENGTH(g->details.method) > 150
                           ? 150 : GRPC_SLICE_LENGTH(g->details.method)),
                 (const char *)GRPC_SLICE_START_PTR(g->details.method));
        char esc[300];
        RT_LOG(RT_LOG_DEBUG, "%s", rt_log_esc(msg, esc, sizeof esc));
        g->status = grpc_slice_from_copied_string(msg);
        grpc_op ops[3];
        memset(ops, 0, sizeof ops);
        ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
        ops[1].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
        ops[1].data.send_status_from_server.status = GRPC_STATUS_UNIMPLEMENTED;
        ops[1].data.send_status_from_server.status_details = &g->status;
        ops[2].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
        ops[2].data.recv_close_on_server.cancelled = &g->cancelled;
        grpc_call *call = g->call; /* g may be gone once the tag is posted */
        RT_TAG_POST(&g->tag);
        if (grpc_call_start_batch(call, ops, 3, &g->tag, NULL) == GRPC_CALL_OK)
            return;
    }
    if (g->matched)
        grpc_slice_unref(g->status);
    if (g->call)
        grpc_call_unref(g->call);
    grpc_call_details_destroy(&g->details);
    grpc_metadata_array_destroy(&g->md);
    int matched = g->matched;
    free(g);
    if (matched) {
        __atomic_sub_fetch(&s->live, 1, __ATOMIC_ACQ_REL);
        check_drained(s);
    }
}

/* ------------------------------------------------------------- threads */
static void *cq_main(void *arg)
{
    rt_srv *s = arg;
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(
            s->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            break;
        if (ev.type == GRPC_OP_COMPLETE) {
            rt__tag *t = ev.tag;
            RT_TAG_DONE(t);
            t->fn(t, ev.success);
        }
    }
    return NULL;
}

static void on_shutdown(rt__tag *t, int ok)
{
    rt_srv *s = RT_CONTAINER(t, rt_srv, shutdown_tag);
    __atomic_store_n(&s->shutdown_acked, 1, __ATOMIC_RELEASE);
    check_drained(s);
}

/* ---------------------------------------------------------------- setup */
/* Why a bind failed: gRPC only says "0". Try a plain bind to tell "in use"
 * from an unusable address. */
static void explain_bind(const char *addr, char *err, size_t errlen)
{
    char host[128];
    const char *colon = strrchr(addr, ':');
    if (!colon || (size_t)(colon - addr) >= sizeof host) {
        snprintf(err, errlen, "cannot listen on %s (expected HOST:PORT)", addr);
        return;
    }
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = 0;
    char *h = host;
    if (h[0] == '[') {
        h++;
        char *e = strchr(h, ']');
        if (e)
            *e = 0;
    }
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    if (getaddrinfo(h[0] ? h : NULL, colon + 1, &hints, &ai) != 0 || !ai) {
        snprintf(err, errlen, "cannot listen on %s (unknown host or port)", addr);
        return;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM, 0), e = 0;
    if (fd >= 0) {
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0)
            e = errno;
        close(fd);
    }
    freeaddrinfo(ai);
    if (e == EADDRINUSE)
        snprintf(err, errlen, "address %s already in use", addr);
    else
        snprintf(err, errlen, "cannot listen on %s (%s)", addr, e ? strerror(e) : "gRPC refused it");
}

/* A whole PEM file, NUL-terminated; NULL with err set on failure. */
static char *read_pem(const char *what, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot read %s %s: %s", what, path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            char *nb = cap <= (16u << 20) ? realloc(buf, cap) : NULL;
            if (!nb) {
                snprintf(err, errlen, "%s %s is too large", what, path);
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
        }
        size_t k = fread(buf + len, 1, 4096, f);
        len += k;
        if (k < 4096)
            break;
    }
    fclose(f);
    buf[len] = 0;
    if (!strstr(buf, "-----BEGIN ")) {
        snprintf(err, errlen, "%s %s is not a PEM file", what, path);
        free(buf);
        return NULL;
    }
    return buf;
}

/* Insecure credentials, or TLS from the PEM files (mTLS with a client CA).
 * gRPC keeps its own copies of the PEM strings. */
static int server_creds(const rt_srv_config *cfg, grpc_server_credentials **out, char *err,
                        size_t errlen)
{
    *out = NULL;
    if (!cfg->tls_cert && !cfg->tls_key) {
        if (cfg->tls_client_ca) {
            snprintf(err, errlen, "--tls-client-ca needs --tls-cert and --tls-key");
            return RT_EINVAL;
        }
        *out = grpc_insecure_server_credentials_create();
        return 0;
    }
    if (!cfg->tls_cert || !cfg->tls_key) {
        snprintf(err, errlen, "TLS needs both --tls-cert and --tls-key");
        return RT_EINVAL;
    }
    char *cert = read_pem("certificate", cfg->tls_cert, err, errlen);
    char *key = cert ? read_pem("private key", cfg->tls_key, err, errlen) : NULL;
    char *ca = key && cfg->tls_client_ca
                   ? read_pem("client CA", cfg->tls_client_ca, err, errlen) : NULL;
    int rc = RT_EINVAL;
    if (key && (ca || !cfg->tls_client_ca)) {
        grpc_ssl_pem_key_cert_pair pair = {key, cert};
        *out = grpc_ssl_server_credentials_create_ex(
            ca, &pair, 1,
            ca ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
               : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
            NULL);
        if (*out)
            rc = 0;
        else
            snprintf(err, errlen, "gRPC refused the TLS certificate or key");
    }
    if (key)
        explicit_bzero(key, strlen(key)); /* the private key does not linger in freed memory */
    free(cert);
    free(key);
    free(ca);
    return rc;
}

int rt_srv_create(const rt_srv_config *cfg, rt_srv **out, char *err,
                  size_t errlen)
{
    *out = NULL;
    rt_srv *s = calloc(1, sizeof *s);
    if (!s)
        return RT_ENOMEM;
    s->cfg = *cfg;
    if (s->cfg.threads < 1)
        s->cfg.threads = 1;
    pthread_mutex_init(&s->dev_mu, NULL);
    pthread_mutex_init(&s->q_mu, NULL);
    pthread_cond_init(&s->q_cv, NULL);
    s->shutdown_tag.fn = on_shutdown;
    s->start_ns = rt_now_ns();
    s->sessions = rt_session_table_create(cfg->max_sessions);
    s->plans = rt_plan_cache_create(128);
    uint64_t store_cap = cfg->max_store_bytes;
    if (!store_cap) {
        long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        store_cap = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz / 2 : 0;
    }
    s->data = rt_data_store_create(store_cap);
    uint64_t ram = 0;
    {
        long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        ram = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : 0;
    }
    uint64_t budget = cfg->max_memory_bytes ? cfg->max_memory_bytes
                                            : ram ? ram / 4 * 3 : RT_QUOTA_UNLIMITED;
    s->principals = rt_principal_set_create(budget);
    if (!s->sessions || !s->plans || !s->data || !s->principals) {
        rt_srv_destroy(s);
        return RT_ENOMEM;
    }
    rt_methods_init(); /* aborts if a .proto method has no handler */
    /* Default quotas. Single-user: only the server-wide limits apply. With
     * tokens no principal may take everything: a quarter of the sessions,
     * of the store and of the memory budget, 64 programs, 4 uploads in
     * flight, unless the flags or the tokens file say otherwise. */
    rt_quota_unlimited(s->quota);
    if (cfg->tokens_path) {
        uint64_t q4 = budget == RT_QUOTA_UNLIMITED ? budget : budget / 4;
        s->quota[RT_Q_SESSIONS] = s->cfg.max_sessions >= 4 ? (uint64_t)s->cfg.max_sessions / 4 : 1;
        s->quota[RT_Q_PROGRAMS] = 64;
        s->quota[RT_Q_PROGRAM_BYTES] = q4;
        s->quota[RT_Q_STORE_BYTES] = store_cap ? store_cap / 4 : q4;
        s->quota[RT_Q_UPLOADS] = 4;
        s->quota[RT_Q_UPLOAD_BYTES] = q4;
        s->quota[RT_Q_CALL_BYTES] = q4;
    }
    for (int k = 0; k < RT_Q__COUNT; k++)
        if (cfg->quota[k])
            s->quota[k] = cfg->quota[k];
    int rc = rt_auth_create(cfg->tokens_path, s->quota, s->principals, &s->auth, err, errlen);
    if (rc < 0) {
        rt_srv_destroy(s);
        return rc;
    }
    grpc_init();
    grpc_arg args[3];
    memset(args, 0, sizeof args);
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[0].value.integer = cfg->max_message_bytes > INT32_MAX ? INT32_MAX
                                                                : (int)cfg->max_message_bytes;
    args[1].type = GRPC_ARG_INTEGER;
    args[1].key = (char *)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
    args[1].value.integer = -1;
    args[2].type = GRPC_ARG_INTEGER;
    args[2].key = (char *)GRPC_ARG_ALLOW_REUSEPORT;
    args[2].value.integer = 0;
    grpc_channel_args ca = {3, args};
    s->server = grpc_server_create(&ca, NULL);
    s->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(s->server, s->cq, NULL);
    for (int i = 0; i < rt_n_methods; i++)
        s->reg[i] = grpc_server_register_method(
            s->server, rt_methods[i].path, NULL,
            rt_methods[i].kind == RT_UNARY ? GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER
                                           : GRPC_SRM_PAYLOAD_NONE,
            0);
    grpc_server_credentials *cr = NULL;
    if ((rc = server_creds(cfg, &cr, err, errlen)) < 0) {
        rt_srv_destroy(s);
        return rc;
    }
    int port = grpc_server_add_http2_port(s->server, cfg->listen, cr);
    grpc_server_credentials_release(cr);
    if (port <= 0) {
        explain_bind(cfg->listen, err, errlen);
        rt_srv_destroy(s);
        return RT_EUNAVAILABLE;
    }
    const char *colon = strrchr(cfg->listen, ':');
    int hl = colon ? (int)(colon - cfg->listen) : 0;
    snprintf(s->bound, sizeof s->bound, "%.*s:%d", hl > 100 ? 100 : hl, cfg->listen, port);
    *out = s;
    return 0;
}

const char *rt_srv_bound(const rt_srv *s) { return s->bound; }

int rt_srv_start(rt_srv *s, void (*on_drained)(void *ud), void *ud)
{
    s->on_drained = on_drained;
    s->drained_ud = ud;
    grpc_server_start(s->server);
    /* Several requests per method up front so bursts do not wait for a
     * re-post; each arrival posts its own replacement. */
    int per = 2 * s->cfg.threads + 2;
    for (int i = 0; i < rt_n_methods; i++)
        for (int k = 0; k < per; k++)
            request_call(s, i);
    request_generic(s);
    request_generic(s);
    if (pthread_create(&s->exec_thread, NULL, executor_main, s) != 0)
        return RT_ENOMEM;
    s->exec_started = 1;
    s->threads = calloc((size_t)s->cfg.threads, sizeof *s->threads);
    if (!s->threads)
        return RT_ENOMEM;
    for (int i = 0; i < s->cfg.threads; i++) {
        if (pthread_create(&s->threads[i], NULL, cq_main, s) != 0)
            return RT_ENOMEM;
        s->n_threads++;
    }
    return 0;
}

void rt_srv_stop(rt_srv *s)
{
    if (__atomic_exchange_n(&s->stopping, 1, __ATOMIC_ACQ_REL))
        return;
    RT_TAG_POST(&s->shutdown_tag);
    grpc_server_shutdown_and_notify(s->server, s->cq, &s->shutdown_tag);
}

int rt_srv_reload_tokens(rt_srv *s, int *n_tokens, char *err, size_t errlen)
{
    return rt_auth_reload(s->auth, n_tokens, err, errlen);
}

void rt_srv_quota_defaults(const rt_srv *s, uint64_t out[RT_Q__COUNT])
{
    memcpy(out, s->quota, sizeof s->quota);
}

int rt_srv_expire_sessions(rt_srv *s, uint64_t idle_ms)
{
    char ids[8][RT_SESSION_ID_LEN], sid[16];
    int n = rt_session_expire(s->sessions, rt_now_ns(), idle_ms * 1000000ull, ids, 8);
    for (int i = 0; i < n && i < 8; i++)
        RT_LOG(RT_LOG_INFO, "session %s closed: idle for more than %llu s",
               rt_log_id(ids[i], sid), (unsigned long long)(idle_ms / 1000));
    if (n > 8)
        RT_LOG(RT_LOG_INFO, "%d more idle sessions closed", n - 8);
    return n;
}

void rt_srv_cancel_all(rt_srv *s)
{
    __atomic_store_n(&s->hard_cancel, 1, __ATOMIC_RELEASE);
    grpc_server_cancel_all_calls(s->server);
}

int rt_srv_live_calls(rt_srv *s)
{
    return __atomic_load_n(&s->live, __ATOMIC_ACQUIRE);
}

void rt_srv_destroy(rt_srv *s)
{
    if (!s)
        return;
    if (s->exec_started) {
        pthread_mutex_lock(&s->q_mu);
        s->q_stop = 1;
        pthread_cond_broadcast(&s->q_cv);
        pthread_mutex_unlock(&s->q_mu);
        pthread_join(s->exec_thread, NULL);
    }
    if (s->server && s->n_threads == 0) {
        /* Never started (bind failed or start failed early). */
        grpc_server_destroy(s->server);
        grpc_completion_queue_shutdown(s->cq);
        for (;;) {
            grpc_event ev = grpc_completion_queue_next(
                s->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
            if (ev.type == GRPC_QUEUE_SHUTDOWN)
                break;
            if (ev.type == GRPC_OP_COMPLETE) {
                rt__tag *t = ev.tag;
                RT_TAG_DONE(t);
                t->fn(t, 0);
            }
        }
        grpc_completion_queue_destroy(s->cq);
        grpc_shutdown();
    } else if (s->server) {
        if (!__atomic_load_n(&s->stopping, __ATOMIC_ACQUIRE)) {
            /* Not stopped through rt_srv_stop: do it now, without grace. */
            rt_srv_stop(s);
            grpc_server_cancel_all_calls(s->server);
        }
        grpc_completion_queue_shutdown(s->cq);
        for (int i = 0; i < s->n_threads; i++)
            pthread_join(s->threads[i], NULL);
        grpc_server_destroy(s->server);
        grpc_completion_queue_destroy(s->cq);
        grpc_shutdown();
    }
    free(s->threads);
    rt_session_table_destroy(s->sessions);
    rt_plan_cache_destroy(s->plans);
    rt_data_store_destroy(s->data);
    /* Last: sessions and datasets gave back their charges above. */
    rt_auth_destroy(s->auth);
    rt_principal_set_destroy(s->principals);
    pthread_mutex_destroy(&s->dev_mu);
    pthread_mutex_destroy(&s->q_mu);
    pthread_cond_destroy(&s->q_cv);
    free(s);
}
