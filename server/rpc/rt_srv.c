/* rt_srv.c - gRPC core front end: cq threads, call state machines, the
 * device executor and the shutdown sequence (see docs/grpc-core.md). */
#include "rt_srv_impl.h"

#include <errno.h>
#include <netdb.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <zlib.h>

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>

#include "rt_bufpool.h"
#include "rt_health.h"
#include "rt_stream.h"
#include "rt_state.h"
#include "rt_transport.h"

/* One completion-queue thread on hosts with 2 CPUs or fewer (the CPUs
 * this process may run on), else two. On 2 vCPUs a second cq thread costs
 * more than it gives: both take turns on the same sockets, each message of
 * a large upload wakes the other, and both compete with the upload's lane
 * thread and the client (bench/upload/README.md: 256 MiB uploads from
 * Python 1.6 against 2.0-2.2 GB/s), while K=1 round trips measure the same
 * either way. */
int rt_srv_default_threads(void)
{
    cpu_set_t set;
    long n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                         : sysconf(_SC_NPROCESSORS_ONLN);
    return n > 2 ? 2 : 1;
}

void rt_srv_config_init(rt_srv_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->listen = "127.0.0.1:7070";
    cfg->threads = 0; /* rt_srv_default_threads() */
    cfg->max_message_bytes = 64ull << 20;
    cfg->max_sessions = 64;
    cfg->ckpt_every_s = 30;
    cfg->ckpt_keep = 3;
    cfg->max_dataset_bytes = 4ull << 30;
    cfg->inline_ns = 200000;
    cfg->slice_ns = 20000000;
    cfg->max_exec_threads = 64;
    cfg->compile_threads = 1;
    cfg->compile_timeout_ms = 60000;
    cfg->max_uploads = 16;
    cfg->upload_stall_ms = 60000;
    cfg->upload_keep_ms = 600000;
    cfg->pipeline_hold_ms = 30000;
    cfg->upload_pool_bytes = 1ull << 30;
    cfg->upload_arena_bytes = UINT64_MAX; /* the default: rt_srv_arena_default */
    cfg->max_inflate_ratio = 100;
    cfg->keepalive_ms = 60000;
    cfg->keepalive_timeout_ms = 20000;
    cfg->handshake_timeout_ms = 10000;
    cfg->conn_idle_ms = 3600000;
    cfg->stream_queue_max = 64;
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
    c->sent_tm = tpb; /* what the client got: the dashboard shows the same */
    c->has_sent_tm = 1;
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
    pthread_cond_init(&c->out_cv, NULL);
    return c;
}

static void call_free(rt_call *c, int matched)
{
    rt_srv *s = c->srv;
    if (c->up_registered)
        rt_srv_upload_release(c);
    if (c->st_free && c->st)
        c->st_free(c->st);
    /* The lease runs from the end of the last call that used the session,
     * so a Fit longer than the lease does not leave it expired. */
    if (c->sess)
        __atomic_store_n(&c->sess->last_used_ns, rt_now_ns(), __ATOMIC_RELAXED);
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
    pthread_cond_destroy(&c->out_cv);
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
    rt_srv_observe_call(c, c->err ? rt_err_to_grpc(c->err) : GRPC_STATUS_OK);
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
        c->n_out = 0;
    }
    if (c->out_head) {
        rt__out *o = c->out_head;
        c->out_head = o->next;
        if (!c->out_head)
            c->out_tail = NULL;
        c->n_out--;
        start_send(c, o->bb);
        free(o);
    } else if (c->final_pending && !c->final_started) {
        start_final(c);
    }
    pthread_cond_broadcast(&c->out_cv);
    pthread_mutex_unlock(&c->out_mu);
    call_unref(c);
}

int rt_call_is_cancelled(rt_call *c)
{
    return __atomic_load_n(&c->cancelled, __ATOMIC_ACQUIRE) ||
           __atomic_load_n(&c->srv->hard_cancel, __ATOMIC_ACQUIRE);
}

static void dev_unlock(rt_srv *s);
static void dev_lock(rt_srv *s, const char *key, uint64_t est_ns);

/* The outgoing queue is bounded (cfg.stream_queue_max). Progress events
 * coalesce: a newer one replaces the one still queued, so a slow reader
 * gets the latest. Messages that must arrive (epoch ends) wait for room:
 * the work hands the device to others while its reader catches up, and a
 * reader that never reads holds one call's queue, nothing more. */
static int stream_send(rt_call *c, const ProtobufCMessage *msg, int coalesce,
                       int with_timings, int may_wait)
{
    if (rt_call_is_cancelled(c))
        return RT_ECANCELLED;
    grpc_byte_buffer *bb = pack_msg(c, msg, with_timings);
    pthread_mutex_lock(&c->out_mu);
    if (coalesce && c->send_in_flight) {
        for (rt__out *o = c->out_head; o; o = o->next)
            if (o->coalesce) {
                /* Keep the queue's order: drop the old, append the new. */
                rt__out **pp = &c->out_head, *prev = NULL;
                while (*pp != o) {
                    prev = *pp;
                    pp = &(*pp)->next;
                }
                *pp = o->next;
                if (c->out_tail == o)
                    c->out_tail = prev;
                grpc_byte_buffer_destroy(o->bb);
                free(o);
                c->n_out--;
                break;
            }
    }
    if (may_wait && !coalesce && c->n_out >= c->srv->cfg.stream_queue_max) {
        int had = c->holds_device;
        if (had) {
            pthread_mutex_unlock(&c->out_mu);
            dev_unlock(c->srv);
            pthread_mutex_lock(&c->out_mu);
        }
        while (c->n_out >= c->srv->cfg.stream_queue_max && !rt_call_is_cancelled(c)) {
            /* Wake now and then for the daemon's hard cancel, which
             * does not come through this call's completions. */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 1;
            pthread_cond_timedwait(&c->out_cv, &c->out_mu, &ts);
        }
        if (had) {
            pthread_mutex_unlock(&c->out_mu);
            dev_lock(c->srv, c->key, UINT64_MAX);
            pthread_mutex_lock(&c->out_mu);
        }
        if (rt_call_is_cancelled(c)) {
            pthread_mutex_unlock(&c->out_mu);
            grpc_byte_buffer_destroy(bb);
            return RT_ECANCELLED;
        }
    }
    if (!c->send_in_flight) {
        start_send(c, bb);
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
        c->n_out++;
    }
    pthread_mutex_unlock(&c->out_mu);
    return 0;
}

int rt_call_stream_send(rt_call *c, const ProtobufCMessage *msg, int coalesce,
                        int with_timings)
{
    return stream_send(c, msg, coalesce, with_timings, 1);
}

/* The call's logic is done: send the response or the error. Drops the
 * owner reference. */
static rt_call *pipe_complete(rt_call *c);
static void pipe_release_list(rt_call *l);

static void finish(rt_call *c)
{
    /* A pipelined successor is released now, and runs after this call's
     * status has gone out (pipe_release_list below). */
    rt_call *next = c->seq && c->prog ? pipe_complete(c) : NULL;
    /* Reservations go before the status, as datasets do: a client that
     * has its answer and starts the next upload must find its slot free. */
    if (c->st_done && c->st)
        c->st_done(c->st);
    if (c->up_registered)
        rt_srv_upload_release(c);
    if (c->m->kind != RT_SERVER_STREAM &&
        __atomic_exchange_n(&c->final_claimed, 1, __ATOMIC_ACQ_REL)) {
        /* rt_srv_tick answered already (a compile past its budget). */
        rt_dataset_release(c->ds);
        rt_dataset_release(c->val_ds);
        c->ds = c->val_ds = NULL;
        call_unref(c);
        pipe_release_list(next);
        return;
    }
    if (c->m->kind == RT_SERVER_STREAM) {
        if (!c->err && c->resp)
            stream_send(c, c->resp, 0, 1, 0);
        pthread_mutex_lock(&c->out_mu);
        c->final_pending = 1;
        if (!c->send_in_flight && !c->final_started)
            start_final(c);
        pthread_mutex_unlock(&c->out_mu);
    } else {
        start_final(c);
    }
    call_unref(c);
    pipe_release_list(next);
}

/* Drop a stream whose client went away: nothing to answer. */
static void abandon(rt_call *c)
{
    c->err = RT_ECANCELLED;
    snprintf(c->errmsg, sizeof c->errmsg, "cancelled");
    finish(c);
}

/* ------------------------------------------------------------- the device */
typedef struct rt__dev_wait {
    struct rt__dev_wait *next;
    pthread_cond_t cv;
    int granted;
    int is_short;        /* estimated under one quantum */
} rt__dev_wait;

typedef struct rt__lane {
    char key[64];
    rt__dev_wait *head, *tail;
} rt__lane;

/* A quantum: what a holder always gets before a short job may cut in, and
 * what counts as short. A twentieth of the slice, at least 100 us. */
static uint64_t quantum_ns(const rt_srv *s)
{
    uint64_t q = s->cfg.slice_ns / 20;
    return q < 100000 ? 100000 : q;
}

/* Hand the device to the first waiter of the lane served longest ago (with
 * short_first, of the first lane whose next job is short); that lane goes
 * to the back. With nobody waiting the device is free. dev_mu held. */
static void grant_next_locked(rt_srv *s, int short_first)
{
    if (s->n_lanes == 0) {
        s->dev_held = 0;
        return;
    }
    int li = 0;
    if (short_first)
        for (int i = 0; i < s->n_lanes; i++)
            if (s->lanes[i].head->is_short) {
                li = i;
                break;
            }
    rt__lane first = s->lanes[li];
    rt__dev_wait *w = first.head;
    first.head = w->next;
    if (!first.head)
        first.tail = NULL;
    memmove(s->lanes + li, s->lanes + li + 1, sizeof *s->lanes * (size_t)(s->n_lanes - li - 1));
    s->n_lanes--;
    if (first.head)
        s->lanes[s->n_lanes++] = first;
    __atomic_sub_fetch(&s->dev_waiting, 1, __ATOMIC_ACQ_REL);
    if (w->is_short)
        __atomic_sub_fetch(&s->dev_short_waiting, 1, __ATOMIC_ACQ_REL);
    __atomic_store_n(&s->dev_since, rt_now_ns(), __ATOMIC_RELEASE);
    w->granted = 1;
    pthread_cond_signal(&w->cv);
}

/* Wait in key's lane until granted. dev_mu held; returns with it held. */
static void wait_turn_locked(rt_srv *s, const char *key, uint64_t est_ns)
{
    rt__dev_wait w;
    memset(&w, 0, sizeof w);
    pthread_cond_init(&w.cv, NULL);
    w.is_short = est_ns <= quantum_ns(s);
    int li = -1;
    for (int i = 0; i < s->n_lanes; i++)
        if (strcmp(s->lanes[i].key, key) == 0)
            li = i;
    if (li < 0) {
        /* Every waiter is an executor or compile thread, so the lanes
         * allocated at create (one per such thread) always suffice. */
        if (s->n_lanes == s->cap_lanes)
            abort();
        li = s->n_lanes++;
        memset(&s->lanes[li], 0, sizeof s->lanes[li]);
        snprintf(s->lanes[li].key, sizeof s->lanes[li].key, "%s", key);
    }
    rt__lane *l = &s->lanes[li];
    if (l->tail)
        l->tail->next = &w;
    else
        l->head = &w;
    l->tail = &w;
    __atomic_add_fetch(&s->dev_waiting, 1, __ATOMIC_ACQ_REL);
    if (w.is_short)
        __atomic_add_fetch(&s->dev_short_waiting, 1, __ATOMIC_ACQ_REL);
    while (!w.granted)
        pthread_cond_wait(&w.cv, &s->dev_mu);
    pthread_cond_destroy(&w.cv);
}

static void dev_lock(rt_srv *s, const char *key, uint64_t est_ns)
{
    pthread_mutex_lock(&s->dev_mu);
    if (!s->dev_held && s->n_lanes == 0) {
        s->dev_held = 1;
        __atomic_store_n(&s->dev_since, rt_now_ns(), __ATOMIC_RELEASE);
    } else {
        wait_turn_locked(s, key, est_ns);
    }
    pthread_mutex_unlock(&s->dev_mu);
    rt_program_device_enter(); /* debug builds: rt_program.h's rule */
}

/* Inline jobs never wait: the device must be free with nobody queued. */
static int dev_trylock(rt_srv *s)
{
    int ok = 0;
    pthread_mutex_lock(&s->dev_mu);
    if (!s->dev_held && s->n_lanes == 0) {
        s->dev_held = ok = 1;
        __atomic_store_n(&s->dev_since, rt_now_ns(), __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&s->dev_mu);
    if (ok)
        rt_program_device_enter();
    return ok;
}

static void dev_unlock(rt_srv *s)
{
    rt_program_device_leave();
    pthread_mutex_lock(&s->dev_mu);
    grant_next_locked(s, 0);
    pthread_mutex_unlock(&s->dev_mu);
}

/* At a step boundary the holder yields once its slice is over and anyone
 * waits (round-robin), or, after one quantum, to a short job (a K=1
 * RunSteps): short jobs then wait about a quantum, not a slice, and a
 * stream of them still leaves the holder most of the device. */
int rt_call_yield(rt_call *c)
{
    rt_srv *s = c->srv;
    if (!c->holds_device || !__atomic_load_n(&s->dev_waiting, __ATOMIC_ACQUIRE))
        return 0;
    uint64_t ran = rt_now_ns() - __atomic_load_n(&s->dev_since, __ATOMIC_ACQUIRE);
    int for_short = ran < s->cfg.slice_ns;
    if (for_short &&
        (ran < quantum_ns(s) || !__atomic_load_n(&s->dev_short_waiting, __ATOMIC_ACQUIRE)))
        return 0;
    pthread_mutex_lock(&s->dev_mu);
    int yielded = 0;
    if (s->n_lanes > 0) {
        grant_next_locked(s, for_short);
        wait_turn_locked(s, c->key, c->est_ns);
        yielded = 1;
    }
    pthread_mutex_unlock(&s->dev_mu);
    return yielded;
}

void rt_srv_pause_point(rt_srv *s, int64_t global_step)
{
    int64_t at = s->cfg.pause_at_step;
    if (at <= 0 || global_step < at ||
        __atomic_exchange_n(&s->paused_once, 1, __ATOMIC_ACQ_REL))
        return;
    RT_LOG(RT_LOG_INFO, "pausing at step %lld (--pause-at-step %lld)",
           (long long)global_step, (long long)at);
    raise(SIGSTOP);
}

void rt_call_device_lock(rt_call *c)
{
    dev_lock(c->srv, rt_call_sched_key(c), 0);
    c->holds_device = 1;
}

void rt_call_device_unlock(rt_call *c)
{
    c->holds_device = 0;
    dev_unlock(c->srv);
}

/* The session, or the peer for a call without one: the executor runs one
 * job per session at a time, in order. */
static const char *exec_key(rt_call *c)
{
    if (!c->xkey[0]) {
        if (c->sess) {
            snprintf(c->xkey, sizeof c->xkey, "s:%s", c->sess->id);
        } else {
            char *peer = c->call ? grpc_call_get_peer(c->call) : NULL;
            snprintf(c->xkey, sizeof c->xkey, "p:%s", peer ? peer : "?");
            gpr_free(peer);
        }
    }
    return c->xkey;
}

/* The device is shared between principals when there are several (a
 * tokens file); single-user, between sessions. */
const char *rt_call_sched_key(rt_call *c)
{
    if (!c->key[0]) {
        if (c->srv->cfg.tokens_path && c->who)
            snprintf(c->key, sizeof c->key, "u:%s", rt_principal_name(c->who));
        else
            snprintf(c->key, sizeof c->key, "%s", exec_key(c));
    }
    return c->key;
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
static void *executor_main(void *arg);

static int key_running_locked(rt_srv *s, const char *key)
{
    for (rt_call *r = s->running; r; r = r->next_run)
        if (strcmp(r->xkey, key) == 0)
            return 1;
    return 0;
}

static void enqueue(rt_call *c)
{
    rt_srv *s = c->srv;
    /* A queued unary call may run long: watch for the client going away
     * (cancel, deadline) so the work can stop at a step boundary. Inline
     * calls skip this batch; it would cost the fast path a round of cq
     * work. */
    if (c->m->kind == RT_UNARY && !c->close_posted)
        post_close(c);
    rt_call_sched_key(c);
    exec_key(c);
    c->enq_ns = rt_now_ns();
    c->next_job = NULL;
    pthread_mutex_lock(&s->q_mu);
    if (c->compile_pool) {
        if (s->c_tail)
            s->c_tail->next_job = c;
        else
            s->c_head = c;
        s->c_tail = c;
        pthread_cond_signal(&s->cq_cv);
        pthread_mutex_unlock(&s->q_mu);
        return;
    }
    __atomic_add_fetch(&s->q_pending, 1, __ATOMIC_ACQ_REL);
    if (s->q_tail)
        s->q_tail->next_job = c;
    else
        s->q_head = c;
    s->q_tail = c;
    s->q_len++;
    /* A thread per key with work, up to the cap: a key whose job waits for
     * the device must not keep another key's job from reaching it. An idle
     * thread may already be promised to an earlier job that it has not
     * picked yet, so compare with the queue's length. */
    if (s->q_len > s->idle_exec && s->n_exec < s->cfg.max_exec_threads && !s->q_stop &&
        !key_running_locked(s, c->xkey)) {
        if (s->n_exec == s->cap_exec) {
            int nc = s->cap_exec ? s->cap_exec * 2 : 8;
            pthread_t *nt = realloc(s->exec_threads, sizeof *nt * (size_t)nc);
            if (nt) {
                s->exec_threads = nt;
                s->cap_exec = nc;
            }
        }
        if (s->n_exec < s->cap_exec &&
            pthread_create(&s->exec_threads[s->n_exec], NULL, executor_main, s) == 0)
            s->n_exec++;
    }
    pthread_cond_broadcast(&s->q_cv);
    pthread_mutex_unlock(&s->q_mu);
}

/* The first queued job whose key has nothing running (q_mu held). */
static rt_call *pick_locked(rt_srv *s)
{
    rt_call *prev = NULL;
    for (rt_call *c = s->q_head; c; prev = c, c = c->next_job) {
        if (key_running_locked(s, c->xkey))
            continue;
        if (prev)
            prev->next_job = c->next_job;
        else
            s->q_head = c->next_job;
        if (s->q_tail == c)
            s->q_tail = prev;
        s->q_len--;
        c->next_run = s->running;
        s->running = c;
        return c;
    }
    return NULL;
}

static void *executor_main(void *arg)
{
    rt_srv *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->q_mu);
        rt_call *c;
        while (!(c = pick_locked(s)) && !s->q_stop) {
            s->idle_exec++;
            pthread_cond_wait(&s->q_cv, &s->q_mu);
            s->idle_exec--;
        }
        pthread_mutex_unlock(&s->q_mu);
        if (!c)
            break;
        if (c->needs_device) {
            dev_lock(s, c->key, c->est_ns);
            c->holds_device = 1;
        }
        c->tm.queue_ns += rt_now_ns() - c->enq_ns;
        if (rt_call_is_cancelled(c))
            rt_call_fail(c, RT_ECANCELLED, "cancelled before it ran");
        else
            run_work(c);
        if (c->holds_device) {
            c->holds_device = 0;
            dev_unlock(s);
        }
        pthread_mutex_lock(&s->q_mu);
        for (rt_call **pp = &s->running; *pp; pp = &(*pp)->next_run)
            if (*pp == c) {
                *pp = c->next_run;
                break;
            }
        if (s->q_head)
            pthread_cond_broadcast(&s->q_cv);
        pthread_mutex_unlock(&s->q_mu);
        __atomic_sub_fetch(&s->q_pending, 1, __ATOMIC_ACQ_REL);
        finish(c);
    }
    return NULL;
}

/* Compile workers: compiles never hold a cq thread or the device while
 * they run (the work takes the device briefly to create the instance).
 * A compile past its budget is answered DEADLINE_EXCEEDED by
 * rt_srv_tick; the worker then drops what it built. */
static void *compile_main(void *arg)
{
    rt_srv *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->q_mu);
        while (!s->c_head && !s->q_stop)
            pthread_cond_wait(&s->cq_cv, &s->q_mu);
        rt_call *c = s->c_head;
        if (!c) {
            pthread_mutex_unlock(&s->q_mu);
            break;
        }
        s->c_head = c->next_job;
        if (!s->c_head)
            s->c_tail = NULL;
        c->next_run = s->c_running;
        s->c_running = c;
        c->compile_running = 1;
        uint64_t now = rt_now_ns();
        __atomic_store_n(&c->started_ns, now, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&s->q_mu);
        c->tm.queue_ns += now - c->enq_ns;
        if (rt_call_is_cancelled(c))
            rt_call_fail(c, RT_ECANCELLED, "cancelled before it ran");
        else
            run_work(c);
        if (c->holds_device)
            rt_call_device_unlock(c);
        pthread_mutex_lock(&s->q_mu);
        for (rt_call **pp = &s->c_running; *pp; pp = &(*pp)->next_run)
            if (*pp == c) {
                *pp = c->next_run;
                break;
            }
        c->compile_running = 0;
        pthread_mutex_unlock(&s->q_mu);
        finish(c);
    }
    return NULL;
}

/* ------------------------------------------------------ pipelined calls */
/* A client keeps several RunSteps of one program in flight, each naming
 * its predecessor (after_seq). Two cq threads may take them in any order,
 * so a call whose predecessor has not completed waits on s->held (no
 * thread waits) and is dispatched when that one finishes: steps run in the
 * client's order, none after a failed call, and nothing is replayed. */

/* The held call's verdict once its predecessor completed: 0 run, or the
 * failure recorded (a call between after_seq and this one failed). pipe_mu
 * held. */
static int pipe_verdict_locked(rt_call *c)
{
    const rt_program_pipe *p = rt_program_pipe_marks(c->prog);
    if (p->failed >= c->after_seq && p->failed < c->seq)
        return rt_call_fail(c, RT_ESTATE, "RunSteps seq %llu not run: seq %llu before it failed",
                            (unsigned long long)c->seq, (unsigned long long)p->failed);
    /* Its client gave up while it waited (on_close may not have run yet). */
    if (rt_call_is_cancelled(c) ||
        gpr_time_cmp(gpr_now(c->deadline.clock_type), c->deadline) >= 0)
        return rt_call_fail(c, RT_ECANCELLED, "cancelled while waiting for seq %llu",
                            (unsigned long long)c->after_seq);
    return 0;
}

static void dispatch_now(rt_call *c);

/* Released calls run in order, one after another on this thread: a
 * released call that runs inline and finishes releases the next, which
 * joins the list instead of nesting. */
static __thread rt_call *tl_rel_head, *tl_rel_tail;
static __thread int tl_releasing;

static void pipe_release_list(rt_call *l)
{
    while (l) {
        rt_call *n = l->held_next;
        l->held_next = NULL;
        if (tl_rel_tail)
            tl_rel_tail->held_next = l;
        else
            tl_rel_head = l;
        tl_rel_tail = l;
        l = n;
    }
    if (tl_releasing)
        return;
    tl_releasing = 1;
    rt_call *c;
    while ((c = tl_rel_head)) {
        tl_rel_head = c->held_next;
        if (!tl_rel_head)
            tl_rel_tail = NULL;
        c->held_next = NULL;
        c->tm.queue_ns += rt_now_ns() - c->held_ns;
        if (c->err)
            finish(c);
        else
            dispatch_now(c);
    }
    tl_releasing = 0;
}

/* c completed (its status is about to go out): record it, and take off
 * the held list the calls that waited for it, each with its verdict. */
static rt_call *pipe_complete(rt_call *c)
{
    rt_srv *s = c->srv;
    rt_program_pipe *p = rt_program_pipe_marks(c->prog);
    rt_call *out = NULL, **tail = &out;
    pthread_mutex_lock(&s->pipe_mu);
    if (c->seq > p->done)
        p->done = c->seq;
    if (c->err && c->err != RT_ERESTARTED && c->seq > p->failed) /* refused unrun: it is sent again */
        p->failed = c->seq;
    for (rt_call **pp = &s->held; *pp;) {
        rt_call *h = *pp;
        if (h->prog == c->prog && h->after_seq <= p->done) {
            *pp = h->held_next;
            h->held = 0;
            h->held_next = NULL;
            pipe_verdict_locked(h);
            *tail = h;
            tail = &h->held_next;
        } else {
            pp = &h->held_next;
        }
    }
    pthread_mutex_unlock(&s->pipe_mu);
    return out;
}

/* Returns 1 when c waits for its predecessor (or failed for it), 0 when
 * it may run now. */
static int pipe_hold(rt_call *c)
{
    rt_srv *s = c->srv;
    const rt_program_pipe *p = rt_program_pipe_marks(c->prog);
    int posted = c->close_posted || c->m->kind != RT_UNARY;
    for (;;) {
        pthread_mutex_lock(&s->pipe_mu);
        if (p->done >= c->after_seq) {
            int rc = pipe_verdict_locked(c);
            pthread_mutex_unlock(&s->pipe_mu);
            if (rc < 0) {
                finish(c);
                return 1;
            }
            return 0;
        }
        if (posted) {
            c->held = 1;
            c->held_ns = rt_now_ns();
            c->held_next = s->held;
            s->held = c;
            pthread_mutex_unlock(&s->pipe_mu);
            return 1;
        }
        pthread_mutex_unlock(&s->pipe_mu);
        /* Watch for the client going away while held (on_close), before
         * anyone can release the call and queue it (which would post it). */
        post_close(c);
        posted = 1;
    }
}

/* The client went away: a held call answers CANCELLED now, which fails
 * the calls held behind it. */
static void pipe_cancel(rt_call *c)
{
    rt_srv *s = c->srv;
    pthread_mutex_lock(&s->pipe_mu);
    int mine = c->held;
    if (mine) {
        for (rt_call **pp = &s->held; *pp; pp = &(*pp)->held_next)
            if (*pp == c) {
                *pp = c->held_next;
                break;
            }
        c->held = 0;
        c->held_next = NULL;
    }
    pthread_mutex_unlock(&s->pipe_mu);
    if (mine) {
        rt_call_fail(c, RT_ECANCELLED, "cancelled while waiting for seq %llu",
                     (unsigned long long)c->after_seq);
        pipe_release_list(c);
    }
}

/* Held calls past --pipeline-hold-ms (their predecessor never came) or
 * whose client went away. */
static int pipe_expire(rt_srv *s, uint64_t now)
{
    uint64_t lim = s->cfg.pipeline_hold_ms * 1000000ull;
    rt_call *out = NULL, **tail = &out;
    int n = 0;
    pthread_mutex_lock(&s->pipe_mu);
    for (rt_call **pp = &s->held; *pp;) {
        rt_call *h = *pp;
        int cancelled = rt_call_is_cancelled(h);
        if (cancelled || now - h->held_ns > lim) {
            *pp = h->held_next;
            h->held = 0;
            h->held_next = NULL;
            if (cancelled)
                rt_call_fail(h, RT_ECANCELLED, "cancelled while waiting for seq %llu",
                             (unsigned long long)h->after_seq);
            else
                rt_call_fail(h, RT_ETIMEDOUT,
                             "RunSteps seq %llu waited %llu ms for seq %llu (--pipeline-hold-ms)",
                             (unsigned long long)h->seq,
                             (unsigned long long)s->cfg.pipeline_hold_ms,
                             (unsigned long long)h->after_seq);
            *tail = h;
            tail = &h->held_next;
            n++;
        } else {
            pp = &h->held_next;
        }
    }
    pthread_mutex_unlock(&s->pipe_mu);
    pipe_release_list(out);
    return n;
}

/* After the handler: answer now, run inline, or queue for the executor. */
static void dispatch(rt_call *c)
{
    if (c->err || !c->work) {
        finish(c);
        return;
    }
    if (c->after_seq && c->prog && pipe_hold(c))
        return;
    dispatch_now(c);
}

static void dispatch_now(rt_call *c)
{
    rt_srv *s = c->srv;
    if (c->m->kind == RT_UNARY && !c->compile_pool && s->cfg.inline_ns &&
        c->est_ns <= s->cfg.inline_ns) {
        /* trylock: an inline job never waits for the device; if it is busy,
         * or jobs are queued for it (which must keep their order), it goes
         * to the executor's queue. */
        int mine = !c->needs_device;
        if (!mine && dev_trylock(s)) {
            mine = __atomic_load_n(&s->q_pending, __ATOMIC_ACQUIRE) == 0;
            if (!mine)
                dev_unlock(s);
        }
        if (mine) {
            run_work(c);
            if (c->needs_device)
                dev_unlock(s);
            finish(c);
            return;
        }
    }
    enqueue(c);
}

/* ------------------------------------------------------ uploads in flight */
int rt_srv_upload_reserve(rt_call *c, uint64_t bytes)
{
    rt_srv *s = c->srv;
    uint64_t cap = s->cfg.max_upload_bytes ? s->cfg.max_upload_bytes
                                           : 2 * s->cfg.max_dataset_bytes;
    int rc = 0;
    pthread_mutex_lock(&s->up_mu);
    if (!c->up_registered) {
        if (s->n_uploads >= s->cfg.max_uploads) {
            rc = rt_call_fail(c, RT_ETOOBIG,
                              "%d uploads are in flight (the limit, --max-uploads)",
                              s->n_uploads);
        } else {
            c->up_registered = 1;
            c->up_next = s->uploads;
            s->uploads = c;
            s->n_uploads++;
        }
    }
    /* Kept broken uploads make room for new ones, oldest first. */
    if (rc == 0)
        rt_upload_store_make_room(&s->upstore, s->upload_bytes, bytes, cap);
    if (rc == 0 && (bytes > cap || s->upload_bytes > cap - bytes))
        rc = rt_call_fail(c, RT_ETOOBIG,
                          "uploads in flight would hold %llu bytes, over the limit of %llu "
                          "(--max-upload-bytes)",
                          (unsigned long long)(s->upload_bytes + bytes), (unsigned long long)cap);
    if (rc == 0) {
        c->up_bytes += bytes;
        s->upload_bytes += bytes;
    }
    __atomic_store_n(&c->up_last_ns, rt_now_ns(), __ATOMIC_RELAXED);
    pthread_mutex_unlock(&s->up_mu);
    return rc;
}

void rt_srv_upload_touch(rt_call *c)
{
    __atomic_store_n(&c->up_last_ns, rt_now_ns(), __ATOMIC_RELAXED);
}

void rt_srv_upload_release(rt_call *c)
{
    rt_srv *s = c->srv;
    pthread_mutex_lock(&s->up_mu);
    if (c->up_registered) {
        for (rt_call **pp = &s->uploads; *pp; pp = &(*pp)->up_next)
            if (*pp == c) {
                *pp = c->up_next;
                break;
            }
        s->n_uploads--;
        s->upload_bytes -= c->up_bytes;
        c->up_registered = 0;
    }
    pthread_mutex_unlock(&s->up_mu);
}

static void on_budget_done(rt__tag *t, int ok)
{
    (void)ok;
    rt_call *c = RT_CONTAINER(t, rt_call, budget_tag);
    grpc_slice_unref(c->budget_details);
    call_unref(c);
}

int rt_srv_tick(rt_srv *s)
{
    uint64_t now = rt_now_ns();
    int n = pipe_expire(s, now);
    rt_upload_store_expire(&s->upstore, now);
    if (s->cfg.upload_stall_ms) {
        uint64_t lim = s->cfg.upload_stall_ms * 1000000ull;
        pthread_mutex_lock(&s->up_mu);
        for (rt_call *c = s->uploads; c; c = c->up_next) {
            uint64_t last = __atomic_load_n(&c->up_last_ns, __ATOMIC_RELAXED);
            /* Only while it waits for a chunk; a busy out_mu means a
             * chunk is being handled right now. The status goes out while
             * the RECV_MESSAGE is pending; that batch then completes and
             * on_stream_recv drops the call (call_free, which needs
             * up_mu, releases the reservation; the owner reference is
             * held until then, so nothing is freed here). */
            if (now > last && now - last > lim && pthread_mutex_trylock(&c->out_mu) == 0) {
                if (c->up_waiting && !c->up_stalled && !c->final_started &&
                    !__atomic_exchange_n(&c->final_claimed, 1, __ATOMIC_ACQ_REL)) {
                    c->up_stalled = 1;
                    c->err = RT_ETIMEDOUT;
                    snprintf(c->errmsg, sizeof c->errmsg,
                             "upload stalled: nothing received for %llu s (--upload-stall-s)",
                             (unsigned long long)(s->cfg.upload_stall_ms / 1000));
                    RT_LOG(RT_LOG_INFO, "%s", c->errmsg);
                    start_final(c);
                    n++;
                }
                pthread_mutex_unlock(&c->out_mu);
            }
        }
        pthread_mutex_unlock(&s->up_mu);
    }
    if (s->cfg.compile_timeout_ms) {
        uint64_t lim = s->cfg.compile_timeout_ms * 1000000ull;
        pthread_mutex_lock(&s->q_mu);
        for (rt_call *c = s->c_running; c; c = c->next_run) {
            uint64_t t0 = __atomic_load_n(&c->started_ns, __ATOMIC_ACQUIRE);
            if (t0 && now - t0 > lim &&
                !__atomic_exchange_n(&c->final_claimed, 1, __ATOMIC_ACQ_REL)) {
                /* The status goes out now, from here; the worker drops
                 * what it builds (cancelled) and finish() sends nothing.
                 * grpc_call_cancel_with_status would not tell the client
                 * why. */
                char msg[128];
                snprintf(msg, sizeof msg, "compile ran past its budget of %llu s (--compile-timeout)",
                         (unsigned long long)(s->cfg.compile_timeout_ms / 1000));
                __atomic_store_n(&c->cancelled, 1, __ATOMIC_RELEASE);
                c->budget_details = grpc_slice_from_copied_string(msg);
                c->budget_tag.fn = on_budget_done;
                grpc_op ops[2];
                memset(ops, 0, sizeof ops);
                ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
                ops[1].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
                ops[1].data.send_status_from_server.status = GRPC_STATUS_DEADLINE_EXCEEDED;
                ops[1].data.send_status_from_server.status_details = &c->budget_details;
                RT_LOG(RT_LOG_WARN, "%s", msg);
                start_batch(c, ops, 2, &c->budget_tag);
                n++;
            }
        }
        pthread_mutex_unlock(&s->q_mu);
    }
    return n;
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

/* A message the client compressed: per-message decompression is off, so
 * gRPC hands it over as it came. Inflate it here, with the receive limit
 * as the cap on what it may become. Returns a malloc'ed buffer, or NULL
 * after rt_call_fail. */
static uint8_t *inflate_payload(rt_call *c, grpc_byte_buffer *bb, size_t *len,
                                size_t *charged)
{
    /* The buffer is charged to the caller's call-bytes quota (and so the
     * server's memory budget) before it grows; *charged is what the caller
     * gives back once the buffer is freed. */
    *charged = 0;
    grpc_compression_algorithm alg = bb->data.raw.compression;
    if (alg != GRPC_COMPRESS_GZIP && alg != GRPC_COMPRESS_DEFLATE) {
        rt_call_fail(c, RT_EPROTO, "message compression %d is not supported (use gzip)",
                     (int)alg);
        return NULL;
    }
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, alg == GRPC_COMPRESS_GZIP ? 16 + MAX_WBITS : MAX_WBITS) != Z_OK) {
        rt_call_fail(c, RT_ENOMEM, "out of memory inflating a message");
        return NULL;
    }
    uint64_t max = c->srv->cfg.max_message_bytes;
    size_t cap = 0, n = 0;
    uint8_t *out = NULL;
    int zr = Z_OK;
    grpc_slice_buffer *sb = &bb->data.raw.slice_buffer;
    for (size_t i = 0; i < sb->count && zr != Z_STREAM_END; i++) {
        z.next_in = GRPC_SLICE_START_PTR(sb->slices[i]);
        z.avail_in = (uInt)GRPC_SLICE_LENGTH(sb->slices[i]);
        while (z.avail_in && zr != Z_STREAM_END) {
            if (n == cap) {
                if (cap >= max) {
                    rt_call_fail(c, RT_ETOOBIG,
                                 "compressed %s inflates past the message limit of %llu bytes",
                                 c->m->req_name, (unsigned long long)max);
                    goto fail;
                }
                size_t nc = cap ? cap * 2 : 65536;
                nc = nc > max ? (size_t)max : nc;
                if (rt_principal_reserve(c->who, RT_Q_CALL_BYTES, nc - cap, c->alloc_err,
                                         sizeof c->alloc_err) < 0) {
                    rt_call_fail(c, RT_ETOOBIG, "inflating a compressed %s: %s",
                                 c->m->req_name, c->alloc_err);
                    goto fail;
                }
                *charged += nc - cap;
                uint8_t *nb = realloc(out, nc);
                if (!nb) {
                    rt_call_fail(c, RT_ENOMEM, "out of memory inflating a message");
                    goto fail;
                }
                out = nb;
                cap = nc;
            }
            z.next_out = out + n;
            z.avail_out = (uInt)(cap - n);
            zr = inflate(&z, Z_NO_FLUSH);
            n = cap - z.avail_out;
            if (zr != Z_OK && zr != Z_STREAM_END && !(zr == Z_BUF_ERROR && !z.avail_out)) {
                rt_call_fail(c, RT_EPROTO, "corrupt compressed %s", c->m->req_name);
                goto fail;
            }
        }
    }
    if (zr != Z_STREAM_END) {
        rt_call_fail(c, RT_EPROTO, "truncated compressed %s", c->m->req_name);
        goto fail;
    }
    inflateEnd(&z);
    *len = n;
    return out ? out : malloc(1);
fail:
    inflateEnd(&z);
    free(out);
    return NULL;
}

static ProtobufCMessage *decode(rt_call *c, ProtobufCAllocator *alloc)
{
    uint64_t t0 = rt_now_ns();
    /* No payload (a unary call cancelled before its message came) is
     * malformed, as rt_wire_unpack says. */
    if (c->payload && c->payload->type == GRPC_BB_RAW &&
        c->payload->data.raw.compression != GRPC_COMPRESS_NONE) {
        size_t len = 0, charged = 0;
        uint8_t *raw = inflate_payload(c, c->payload, &len, &charged);
        grpc_byte_buffer_destroy(c->payload);
        c->payload = NULL;
        ProtobufCMessage *m =
            raw ? protobuf_c_message_unpack(c->m->req_desc, alloc, len, raw) : NULL;
        free(raw);
        rt_principal_unreserve(c->who, RT_Q_CALL_BYTES, charged);
        c->tm.decode_ns += rt_now_ns() - t0;
        if (!m && !c->err && c->alloc_err[0])
            rt_call_fail(c, RT_ETOOBIG, "%s", c->alloc_err);
        else if (!m && !c->err)
            rt_call_fail(c, RT_EPROTO, "malformed %s", c->m->req_name);
        return m;
    }
    c->req_bytes = c->payload ? rt_wire_length(c->payload) : 0;
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
    if (c->m->kind == RT_CLIENT_STREAM) {
        pthread_mutex_lock(&c->out_mu);
        c->up_waiting = 1;
        pthread_mutex_unlock(&c->out_mu);
        c->recv_posted_ns = rt_now_ns();
    }
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
    if (c->after_seq && rt_call_is_cancelled(c))
        pipe_cancel(c);
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
    /* An upload counts as in flight from its arrival: a stream that never
     * sends its header is capped and times out like a stalled one. */
    if (c->m->kind == RT_CLIENT_STREAM && rt_srv_upload_reserve(c, 0) < 0) {
        finish(c);
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
    if (c->m->kind == RT_CLIENT_STREAM) {
        /* The wait for this message (or the half-close): the client's side
         * of the stream, reported apart from the daemon's own time. */
        c->tm.stream_wait_ns += rt_now_ns() - c->recv_posted_ns;
        pthread_mutex_lock(&c->out_mu);
        c->up_waiting = 0;
        int stalled = c->up_stalled;
        pthread_mutex_unlock(&c->out_mu);
        if (stalled) {
            /* rt_srv_tick sent the status: drop the owner and this batch. */
            call_unref(c);
            call_unref(c);
            return;
        }
    }
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
    /* The bulk "data" field stays where gRPC received it: the handler
     * copies it once, into the upload's buffer (docs/grpc-core.md). */
    const ProtobufCFieldDescriptor *bulk =
        protobuf_c_message_descriptor_get_field_by_name(c->m->req_desc, "data");
    if (bulk && bulk->type == PROTOBUF_C_TYPE_BYTES && c->payload->type == GRPC_BB_RAW &&
        c->payload->data.raw.compression == GRPC_COMPRESS_NONE) {
        uint64_t t0 = rt_now_ns();
        uint8_t *rest;
        size_t rest_len;
        if (rt_wire_split(c->payload, bulk->id, &rest, &rest_len, &c->bulk, &c->n_bulk) == 0)
            c->req = protobuf_c_message_unpack(c->m->req_desc, NULL, rest_len, rest);
        free(rest);
        c->tm.decode_ns += rt_now_ns() - t0;
        if (!c->req)
            rt_call_fail(c, RT_EPROTO, "malformed %s", c->m->req_name);
    } else {
        c->req = decode(c, NULL);
    }
    if (c->req) {
        run_handler(c, c->m->handle);
        protobuf_c_message_free_unpacked(c->req, NULL);
        c->req = NULL;
    }
    free(c->bulk);
    c->bulk = NULL;
    c->n_bulk = 0;
    if (c->payload) {
        grpc_byte_buffer_destroy(c->payload);
        c->payload = NULL;
    }
    if (c->err || c->resp) /* a response before the end: answered early */
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

/* Health calls count as live calls while the daemon drains. */
static void health_call_begin(void *ud)
{
    __atomic_add_fetch(&((rt_srv *)ud)->live, 1, __ATOMIC_ACQ_REL);
}

static void health_call_end(void *ud)
{
    rt_srv *s = ud;
    __atomic_sub_fetch(&s->live, 1, __ATOMIC_ACQ_REL);
    check_drained(s);
}

/* ------------------------------------------------------------- threads */
/* The completion-queue threads also run rt_srv_tick, a few times a
 * second: a status started from a thread that does not poll gRPC (the uv
 * loop) was never written to the peer. */
static uint64_t tick_every_ns(const rt_srv *s)
{
    uint64_t lim = s->cfg.upload_stall_ms;
    if (s->cfg.compile_timeout_ms && (!lim || s->cfg.compile_timeout_ms < lim))
        lim = s->cfg.compile_timeout_ms;
    if (s->cfg.pipeline_hold_ms && (!lim || s->cfg.pipeline_hold_ms < lim))
        lim = s->cfg.pipeline_hold_ms;
    uint64_t ms = lim / 4 < 1000 ? lim / 4 : 1000;
    return (ms < 50 ? 50 : ms) * 1000000ull;
}

static void *cq_main(void *arg)
{
    rt_srv *s = arg;
    int ticks = s->cfg.upload_stall_ms || s->cfg.compile_timeout_ms ||
                s->cfg.pipeline_hold_ms || s->cfg.upload_keep_ms;
    uint64_t every = tick_every_ns(s);
    for (;;) {
        gpr_timespec until =
            ticks ? gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                 gpr_time_from_nanos((int64_t)every, GPR_TIMESPAN))
                  : gpr_inf_future(GPR_CLOCK_MONOTONIC);
        grpc_event ev = grpc_completion_queue_next(s->cq, until, NULL);
        if (ticks) {
            uint64_t now = rt_now_ns(), last = __atomic_load_n(&s->last_tick_ns, __ATOMIC_RELAXED);
            if (now - last >= every &&
                __atomic_compare_exchange_n(&s->last_tick_ns, &last, now, 0, __ATOMIC_ACQ_REL,
                                            __ATOMIC_RELAXED))
                rt_srv_tick(s);
        }
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
        s->cfg.threads = rt_srv_default_threads();
    pthread_mutex_init(&s->dev_mu, NULL);
    pthread_mutex_init(&s->q_mu, NULL);
    pthread_cond_init(&s->q_cv, NULL);
    pthread_cond_init(&s->cq_cv, NULL);
    pthread_mutex_init(&s->up_mu, NULL);
    rt_upload_store_init(&s->upstore, s->cfg.upload_keep_ms);
    pthread_mutex_init(&s->pipe_mu, NULL);
    rt_bufpool_set_cap(cfg->upload_pool_bytes);
    uint64_t arena = cfg->upload_arena_bytes;
    if (arena == UINT64_MAX) {
        /* 256 MiB, unless the address space is limited (ulimit -v,
         * prlimit --as): there the arena's mapping would count against
         * the limit that training needs. */
        struct rlimit as;
        arena = getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY ? 0
                                                                                : 256ull << 20;
        s->cfg.upload_arena_bytes = arena;
    }
    if (rt_bufpool_set_arena(arena) < 0)
        RT_LOG(RT_LOG_WARN, "upload arena: no thread to fault in memory; uploads fault their own");
    if (s->cfg.max_exec_threads < 1)
        s->cfg.max_exec_threads = 1;
    if (s->cfg.compile_threads < 1)
        s->cfg.compile_threads = 1;
    s->cap_lanes = s->cfg.max_exec_threads + s->cfg.compile_threads;
    s->lanes = calloc((size_t)s->cap_lanes, sizeof *s->lanes);
    if (!s->lanes) {
        free(s);
        return RT_ENOMEM;
    }
    if (s->cfg.stream_queue_max < 2)
        s->cfg.stream_queue_max = 2;
    s->shutdown_tag.fn = on_shutdown;
    s->start_ns = rt_now_ns();
    while (!s->boot_id && getrandom(&s->boot_id, sizeof s->boot_id, 0) != sizeof s->boot_id)
        ;
    s->sessions = rt_session_table_create(cfg->max_sessions);
    s->plans = rt_plan_cache_create(128);
    /* the memory the daemon may use: the RAM, or less under an address
     * space limit (prlimit --as, a container's ulimit) */
    uint64_t ram = 0;
    {
        long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        ram = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : 0;
        struct rlimit as;
        if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY &&
            (uint64_t)as.rlim_cur < ram)
            ram = (uint64_t)as.rlim_cur;
    }
    uint64_t store_cap = cfg->max_store_bytes ? cfg->max_store_bytes : ram / 2;
    s->data = rt_data_store_create(store_cap);
    uint64_t budget = cfg->max_memory_bytes ? cfg->max_memory_bytes
                                            : ram ? ram / 4 * 3 : RT_QUOTA_UNLIMITED;
    rt_stream_config sc = {
        /* durable mode spools under the state dir unless told otherwise */
        .spool_dir = cfg->spool_dir ? cfg->spool_dir : cfg->state_dir,
        .stream_above = cfg->stream_above ? cfg->stream_above
                        : budget != RT_QUOTA_UNLIMITED ? budget / 4 : 0,
        .threads = cfg->decode_threads,
        .prefetch = cfg->prefetch,
        .shuffle_buffer = cfg->shuffle_buffer,
        .max_spool_bytes = cfg->max_spool_bytes,
        /* a mapped spool file's pages count in the RSS: an eighth of the
         * budget at most */
        .map_max = cfg->map_spool_set ? cfg->map_spool_below
                   : budget != RT_QUOTA_UNLIMITED ? budget / 8 : 0,
    };
    rt_data_set_stream_config(&sc);
    s->principals = rt_principal_set_create(budget);
    if (!s->sessions || !s->plans || !s->data || !s->principals) {
        rt_srv_destroy(s);
        return RT_ENOMEM;
    }
    rt_methods_init(); /* aborts if a .proto method has no handler */
    rt_srv_obs_init();
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
    if (rc < 0 || (cfg->state_dir && (rc = rt_methods_state_open(s, err, errlen)) < 0)) {
        rt_srv_destroy(s);
        return rc;
    }
    grpc_init();
    /* gRPC inflates a compressed message before its size check (a 4 MB
     * gzip message became 4 GiB): per-message decompression is off, and
     * decode() inflates with the message limit as the cap. */
    grpc_arg args[12 + RT_TRANSPORT_NARGS];
    memset(args, 0, sizeof args);
    size_t na = rt_transport_args(args); /* bulk streams: rt_transport.h */
#define INT_ARG(k, v)                                                          \
    do {                                                                       \
        args[na].type = GRPC_ARG_INTEGER;                                      \
        args[na].key = (char *)(k);                                            \
        args[na].value.integer = (v);                                          \
        na++;                                                                  \
    } while (0)
#define MS(v) ((v) > INT32_MAX ? INT32_MAX : (int)(v))
    INT_ARG(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, MS(cfg->max_message_bytes));
    INT_ARG(GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, -1);
    INT_ARG(GRPC_ARG_ALLOW_REUSEPORT, 0);
    INT_ARG(GRPC_ARG_ENABLE_PER_MESSAGE_DECOMPRESSION, 0);
    /* A connection that never finishes its handshake (a bare TCP open)
     * is closed; keepalive pings find peers that vanished without a FIN. */
    if (cfg->handshake_timeout_ms)
        INT_ARG(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, MS(cfg->handshake_timeout_ms));
    if (cfg->keepalive_ms) {
        INT_ARG(GRPC_ARG_KEEPALIVE_TIME_MS, MS(cfg->keepalive_ms));
        INT_ARG(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, MS(cfg->keepalive_timeout_ms));
        INT_ARG(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
        INT_ARG(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
    }
    if (cfg->conn_idle_ms)
        INT_ARG(GRPC_ARG_MAX_CONNECTION_IDLE_MS, MS(cfg->conn_idle_ms));
    /* advertised in SETTINGS: one connection cannot open calls without
     * bound (a client's extra streams wait for a free one) */
    INT_ARG(GRPC_ARG_MAX_CONCURRENT_STREAMS,
            cfg->max_concurrent_streams ? MS(cfg->max_concurrent_streams) : 100);
#undef INT_ARG
#undef MS
    grpc_channel_args ca = {na, args};
    s->server = grpc_server_create(&ca, NULL);
    s->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(s->server, s->cq, NULL);
    for (int i = 0; i < rt_n_methods; i++)
        s->reg[i] = grpc_server_register_method(
            s->server, rt_methods[i].path, NULL,
            rt_methods[i].kind == RT_UNARY ? GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER
                                           : GRPC_SRM_PAYLOAD_NONE,
            0);
    rt_health_hooks hk = {health_call_begin, health_call_end, s};
    if (!(s->health = rt_health_create(s->server, s->cq, &hk))) {
        rt_srv_destroy(s);
        return RT_ENOMEM;
    }
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
    rt_srv_dash_attach(s);
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
    rt_health_start(s->health, 2);
    s->compile_threads = calloc((size_t)s->cfg.compile_threads, sizeof *s->compile_threads);
    if (!s->compile_threads)
        return RT_ENOMEM;
    for (int i = 0; i < s->cfg.compile_threads; i++) {
        if (pthread_create(&s->compile_threads[i], NULL, compile_main, s) != 0)
            return RT_ENOMEM;
        s->n_compile++;
    }
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

void rt_srv_set_serving(rt_srv *s, int serving)
{
    rt_health_set_serving(s->health, serving);
}

void rt_srv_stop(rt_srv *s)
{
    if (__atomic_exchange_n(&s->stopping, 1, __ATOMIC_ACQ_REL))
        return;
    rt_health_shutdown(s->health);
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
    for (int i = 0; i < n && i < 8; i++) {
        if (s->state)
            rt_state_session_remove(s->state, ids[i]);
        RT_LOG(RT_LOG_INFO, "session %s closed: idle for more than %llu s",
               rt_log_id(ids[i], sid), (unsigned long long)(idle_ms / 1000));
    }
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
    pthread_mutex_lock(&s->q_mu);
    s->q_stop = 1;
    pthread_cond_broadcast(&s->q_cv);
    pthread_cond_broadcast(&s->cq_cv);
    int n_exec = s->n_exec;
    pthread_mutex_unlock(&s->q_mu);
    /* No thread is added once q_stop is set (enqueue checks it). */
    for (int i = 0; i < n_exec; i++)
        pthread_join(s->exec_threads[i], NULL);
    for (int i = 0; i < s->n_compile; i++)
        pthread_join(s->compile_threads[i], NULL);
    free(s->exec_threads);
    free(s->compile_threads);
    free(s->lanes);
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
    rt_dash_detach(s);
    rt_health_destroy(s->health);
    free(s->threads);
    if (s->n_threads)
        rt_methods_state_flush(s); /* no call runs any more */
    rt_state_close(s->state);
    rt_session_table_destroy(s->sessions);
    rt_plan_cache_destroy(s->plans);
    rt_data_store_destroy(s->data);
    rt_upload_store_fini(&s->upstore);
    /* Last: sessions and datasets gave back their charges above. */
    rt_auth_destroy(s->auth);
    rt_principal_set_destroy(s->principals);
    pthread_mutex_destroy(&s->dev_mu);
    pthread_mutex_destroy(&s->q_mu);
    pthread_cond_destroy(&s->q_cv);
    pthread_cond_destroy(&s->cq_cv);
    pthread_mutex_destroy(&s->up_mu);
    pthread_mutex_destroy(&s->pipe_mu);
    free(s);
}
