/* rt_srv.c - gRPC core front end, the transport: the call arena,
 * packing, each call's life (arrival, decode, handler, streams, status),
 * and the cq threads (see docs/grpc-core.md); unknown methods are
 * rt_srv_generic.c. Where work
 * waits and runs is rt_sched.c; setup and shutdown rt_srv_setup.c. */
#include "rt_srv_core.h"

#include <assert.h>
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

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>

#include "rt_bufpool.h"
#include "rt_clock.h"
#include "rt_errf.h"
#include "rt_health.h"
#include "rt_inflate.h"
#include "rt_stream.h"
#include "rt_state.h"
#include "rt_transport.h"

/* ---------------------------------------------------------------- packing */
/* Pack msg and, if asked, the Timings tail (field 15) after it. The tail is
 * packed after the body so encode_ns is the body's measured packing cost and
 * total_ns ends at the hand-off. Same layout as rt_wire_pack: the tail is
 * its own slice of its real length, so Timings may grow any number of
 * fields. */
static grpc_byte_buffer *pack_msg(rt_call *c, const ProtobufCMessage *msg, int with_timings)
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
static void on_send_done(rt__tag *t, int ok);
static void on_final_done(rt__tag *t, int ok);

void rt__check_drained(rt_srv *s)
{
    if (__atomic_load_n(&s->shutdown_acked, __ATOMIC_ACQUIRE) &&
        __atomic_load_n(&s->live, __ATOMIC_ACQUIRE) == 0 &&
        !__atomic_exchange_n(&s->drained_fired, 1, __ATOMIC_ACQ_REL) && s->on_drained)
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
    c->close_tag.fn = rt__on_close;
    c->send_tag.fn = on_send_done;
    c->final_tag.fn = on_final_done;
    rt__call_arena_init(c);
    grpc_metadata_array_init(&c->md);
    pthread_mutex_init(&c->out_mu, NULL);
    pthread_cond_init(&c->out_cv, NULL);
    return c;
}

/* The call's data sets go back (a call's work may have given them back
 * already: then nothing is called). */
static void drop_datasets(rt_call *c)
{
    if (c->ds)
        rt_dataset_release(c->ds);
    if (c->val_ds)
        rt_dataset_release(c->val_ds);
    c->ds = c->val_ds = NULL;
}

void rt__call_free(rt_call *c, int matched)
{
    rt_srv *s = c->srv;
    if (c->up_registered)
        rt_srv_upload_release(c);
    if (c->st_free && c->st)
        c->st_free(c->st);
    drop_datasets(c);
    /* The lease runs from the end of the last call that used the session,
     * so a Fit longer than the lease does not leave it expired. */
    rt_program_release(c->prog); /* before its session's */
    if (c->sess) {
        __atomic_store_n(&c->sess->last_used_ns, rt_now_ns(), __ATOMIC_RELAXED);
        rt_session_release(c->sess);
    }
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
    rt__call_arena_free(c);
    pthread_mutex_destroy(&c->out_mu);
    pthread_cond_destroy(&c->out_cv);
    free(c);
    if (matched) {
        __atomic_sub_fetch(&s->live, 1, __ATOMIC_ACQ_REL);
        rt__check_drained(s);
    }
}

static void call_ref(rt_call *c) { __atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED); }

void rt__call_unref(rt_call *c)
{
    if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) == 0)
        rt__call_free(c, 1);
}

void rt__request_call(rt_srv *s, int mi)
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
        rt__call_free(c, 0);
    }
}

/* Start a batch; a failure to start means the call is unusable, so the
 * completion is delivered by hand to keep the ref counting in one place. */
void rt__start_batch(rt_call *c, const grpc_op *ops, size_t n, rt__tag *tag)
{
    call_ref(c);
    grpc_call *call = c->call; /* c may be gone once the tag is posted */
    RT_TAG_POST(tag);
    grpc_call_error e = grpc_call_start_batch(call, ops, n, tag, NULL);
    if (e != GRPC_CALL_OK) {
        RT_LOG(RT_LOG_WARN, "%s: rt__start_batch failed (%d)", c->m->path, (int)e);
        tag->fn(tag, 0);
    }
}

/* The status batch: initial metadata (if not yet sent), the response
 * message (unary/upload, when no error), the status, and for unary calls
 * RECV_CLOSE_ON_SERVER. Called with out_mu held for server streams. */
void rt__start_final(rt_call *c)
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
     * holds; kept until rt__call_free (after the status batch completes, on
     * whichever cq thread gets to it), an upload's reference was still
     * there when the client, already holding its answer, sent the next
     * upload, and whether that one evicted the first depended on thread
     * timing. */
    drop_datasets(c);
    rt_srv_observe_call(c, c->err ? rt_err_to_grpc(c->err) : GRPC_STATUS_OK);
    rt__start_batch(c, ops, n, &c->final_tag);
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
    rt__call_unref(c);
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
    rt__start_batch(c, ops, n, &c->send_tag);
}

/* The queue's first message, taken off it (out_mu held). */
static rt__out *out_pop(rt_call *c)
{
    rt__out *o = c->out_head;
    c->out_head = o->next;
    if (!c->out_head)
        c->out_tail = NULL;
    c->n_out--;
    return o;
}

/* merge_out: first (a message that must arrive) and the messages that must
 * arrive queued right behind it, as one message. Protobuf's wire format
 * merges concatenated messages: repeated fields (FitEvent.epoch_ends) append
 * in order, a later scalar wins (done, global_step), so one FitEvent carries
 * what they did. One SEND_MESSAGE instead of several: each is a write and a
 * wake-up of the client, and the next waits for the last to complete. */
static grpc_byte_buffer *join_queued(rt_call *c, grpc_byte_buffer *first)
{
    int n = 0;
    for (rt__out *o = c->out_head; o && !o->coalesce; o = o->next)
        n++;
    if (!n || first->type != GRPC_BB_RAW)
        return first;
    grpc_slice_buffer all;
    grpc_slice_buffer_init(&all);
    for (size_t i = 0; i < first->data.raw.slice_buffer.count; i++)
        grpc_slice_buffer_add(&all, grpc_slice_ref(first->data.raw.slice_buffer.slices[i]));
    for (int k = 0; k < n; k++) {
        rt__out *o = out_pop(c);
        const grpc_slice_buffer *sb = &o->bb->data.raw.slice_buffer;
        for (size_t i = 0; i < sb->count; i++)
            grpc_slice_buffer_add(&all, grpc_slice_ref(sb->slices[i]));
        grpc_byte_buffer_destroy(o->bb);
        free(o);
    }
    grpc_byte_buffer *joined = grpc_raw_byte_buffer_create(all.slices, all.count);
    grpc_slice_buffer_destroy(&all);
    grpc_byte_buffer_destroy(first);
    return joined;
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
        rt__out *o = out_pop(c);
        grpc_byte_buffer *bb = o->bb;
        int progress = o->coalesce;
        free(o);
        if (c->merge_out && !progress)
            bb = join_queued(c, bb);
        start_send(c, bb);
    } else if (c->final_pending && !c->final_started) {
        rt__start_final(c);
    }
    pthread_cond_broadcast(&c->out_cv);
    pthread_mutex_unlock(&c->out_mu);
    rt__call_unref(c);
}

/* The outgoing queue is bounded (cfg.stream_queue_max). Progress events
 * coalesce: a newer one replaces the one still queued, so a slow reader
 * gets the latest. Messages that must arrive (epoch ends) wait for room:
 * the work hands the device to others while its reader catches up, and a
 * reader that never reads holds one call's queue, nothing more. */
static int stream_send(rt_call *c, const ProtobufCMessage *msg, int coalesce, int with_timings,
                       int may_wait)
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
            rt__dev_unlock(c->srv);
            pthread_mutex_lock(&c->out_mu);
        }
        while (c->n_out >= c->srv->cfg.stream_queue_max && !rt_call_is_cancelled(c)) {
            /* Wake now and then for the daemon's hard cancel, which
             * does not come through this call's completions. */
            struct timespec ts = rt_deadline(CLOCK_REALTIME, 1000000000ull);
            pthread_cond_timedwait(&c->out_cv, &c->out_mu, &ts);
        }
        if (had) {
            pthread_mutex_unlock(&c->out_mu);
            rt__dev_lock(c->srv, c->key, UINT64_MAX);
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

int rt_call_stream_send(rt_call *c, const ProtobufCMessage *msg, int coalesce, int with_timings)
{
    return stream_send(c, msg, coalesce, with_timings, 1);
}

/* The call's logic is done: send the response or the error. Drops the
 * owner reference. */

void rt__finish(rt_call *c)
{
    rt__call_to(c, RT_CS_FINISHED);
    /* A pipelined successor is released now, and runs after this call's
     * status has gone out (rt__pipe_release_list below). */
    rt_call *next = c->seq && c->prog ? rt__pipe_complete(c) : NULL;
    /* Reservations go before the status, as datasets do: a client that
     * has its answer and starts the next upload must find its slot free. */
    if (c->st_done && c->st)
        c->st_done(c->st);
    if (c->up_registered)
        rt_srv_upload_release(c);
    if (c->m->kind != RT_SERVER_STREAM &&
        __atomic_exchange_n(&c->final_claimed, 1, __ATOMIC_ACQ_REL)) {
        /* rt_srv_tick answered already (a compile past its budget). */
        drop_datasets(c);
        rt__call_unref(c);
        rt__pipe_release_list(next);
        return;
    }
    if (c->m->kind == RT_SERVER_STREAM) {
        if (!c->err && c->resp)
            stream_send(c, c->resp, 0, 1, 0);
        pthread_mutex_lock(&c->out_mu);
        c->final_pending = 1;
        if (!c->send_in_flight && !c->final_started)
            rt__start_final(c);
        pthread_mutex_unlock(&c->out_mu);
    } else {
        rt__start_final(c);
    }
    rt__call_unref(c);
    rt__pipe_release_list(next);
}

/* A status on its own (a compile past its budget, an unknown method):
 * initial metadata and the status with details, into ops[0..1]. */
void rt__status_ops(grpc_op ops[2], grpc_status_code code, grpc_slice *details)
{
    memset(ops, 0, 2 * sizeof *ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[1].data.send_status_from_server.status = code;
    ops[1].data.send_status_from_server.status_details = details;
}

/* rt_srv_tick's answers (rt_sched.c, through rt__transport), each at
 * most once per call (final_claimed). An upload waiting for its next chunk
 * (up_mu held): a busy out_mu means a chunk is being handled right now.
 * The status goes out while the RECV_MESSAGE is pending; that batch then
 * completes and rt__on_stream_recv drops the call (the owner reference is
 * held until then, so nothing is freed here). */
static int answer_stalled(rt_call *c)
{
    if (pthread_mutex_trylock(&c->out_mu) != 0)
        return 0;
    int n = 0;
    if (c->up_waiting && !c->up_stalled && !c->final_started &&
        !__atomic_exchange_n(&c->final_claimed, 1, __ATOMIC_ACQ_REL)) {
        c->up_stalled = 1;
        rt__call_to(c, RT_CS_FINISHED);
        c->err = RT_ETIMEDOUT;
        snprintf(c->errmsg, sizeof c->errmsg,
                 "upload stalled: nothing received for %llu s (--upload-stall-s)",
                 (unsigned long long)(c->srv->cfg.upload_stall_ms / 1000));
        RT_LOG(RT_LOG_INFO, "%s", c->errmsg);
        rt__start_final(c);
        n = 1;
    }
    pthread_mutex_unlock(&c->out_mu);
    return n;
}

static void on_budget_done(rt__tag *t, int ok)
{
    (void)ok;
    rt_call *c = RT_CONTAINER(t, rt_call, budget_tag);
    grpc_slice_unref(c->budget_details);
    rt__call_unref(c);
}

/* A compile past its budget (q_mu held): the status goes out now, from
 * here; the worker drops what it builds (cancelled) and rt__finish() sends
 * nothing. grpc_call_cancel_with_status would not tell the client why. */
static int answer_budget(rt_call *c)
{
    if (__atomic_exchange_n(&c->final_claimed, 1, __ATOMIC_ACQ_REL))
        return 0;
    char msg[128];
    snprintf(msg, sizeof msg, "compile ran past its budget of %llu s (--compile-timeout)",
             (unsigned long long)(c->srv->cfg.compile_timeout_ms / 1000));
    __atomic_store_n(&c->cancelled, 1, __ATOMIC_RELEASE);
    c->budget_details = grpc_slice_from_copied_string(msg);
    c->budget_tag.fn = on_budget_done;
    grpc_op ops[2];
    rt__status_ops(ops, GRPC_STATUS_DEADLINE_EXCEEDED, &c->budget_details);
    RT_LOG(RT_LOG_WARN, "%s", msg);
    rt__start_batch(c, ops, 2, &c->budget_tag);
    return 1;
}

const rt__transport rt__transport_ops = {rt__finish, rt__post_close, answer_stalled, answer_budget};

/* Drop a stream whose client went away: nothing to answer. */
static void abandon(rt_call *c)
{
    c->err = RT_ECANCELLED;
    snprintf(c->errmsg, sizeof c->errmsg, "cancelled");
    rt__finish(c);
}

/* Run the handler on this cq thread and account its time: validation when
 * it hands work on (rt__decode), the work itself when it answers directly. */
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

/* The inflated message's buffer is charged to the caller's call-bytes
 * quota (and so the server's memory budget) before it grows. */
typedef struct inflate_charge {
    rt_call *c;
    size_t charged; /* given back once the buffer is freed */
} inflate_charge;

static int charge_grow(void *ud, size_t more, char *err, size_t errlen)
{
    inflate_charge *ic = ud;
    char why[200];
    if (rt_principal_reserve(ic->c->who, RT_Q_CALL_BYTES, more, why, sizeof why) < 0)
        return rt_errf(err, errlen, RT_ETOOBIG, "inflating a compressed %s: %s", ic->c->m->req_name,
                       why);
    ic->charged += more;
    return 0;
}

/* A message the client compressed: per-message decompression is off, so
 * gRPC hands it over as it came. Inflate it here (rt_inflate.h), bounded
 * by the receive limit and --max-inflate-ratio. Returns a malloc'ed
 * buffer, or NULL after rt_call_fail; *charged is what to give back to
 * the call-bytes quota once the buffer is freed. */
static uint8_t *inflate_payload(rt_call *c, grpc_byte_buffer *bb, size_t *len, size_t *charged)
{
    *charged = 0;
    grpc_compression_algorithm alg = bb->data.raw.compression;
    if (alg != GRPC_COMPRESS_GZIP && alg != GRPC_COMPRESS_DEFLATE) {
        rt_call_fail(c, RT_EPROTO, "message compression %d is not supported (use gzip)", (int)alg);
        return NULL;
    }
    grpc_slice_buffer *sb = &bb->data.raw.slice_buffer;
    rt_zspan one, *in = sb->count > 1 ? malloc(sizeof *in * sb->count) : &one;
    if (!in) {
        rt_call_fail(c, RT_ENOMEM, "out of memory inflating a message");
        return NULL;
    }
    for (size_t i = 0; i < sb->count; i++)
        in[i] = (rt_zspan){GRPC_SLICE_START_PTR(sb->slices[i]), GRPC_SLICE_LENGTH(sb->slices[i])};
    const rt_zlimits lim = {c->srv->cfg.max_message_bytes, "message limit", "--max-message-bytes",
                            c->srv->cfg.max_inflate_ratio};
    char what[80], err[300];
    snprintf(what, sizeof what, "compressed %s", c->m->req_name);
    inflate_charge ic = {c, 0};
    uint8_t *out = NULL;
    /* gRPC's "deflate" is a zlib stream */
    int rc = rt_inflate_all(alg == GRPC_COMPRESS_GZIP ? RT_Z_GZIP : RT_Z_ZLIB, in, sb->count, &lim,
                            what, charge_grow, &ic, &out, len, err, sizeof err);
    if (in != &one)
        free(in);
    *charged = ic.charged;
    if (rc < 0) {
        rt_call_fail(c, rc == RT_EDATA ? RT_EPROTO : rc, "%s", err);
        return NULL;
    }
    return out;
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
        c->req_bytes = len; /* what it decodes from (Compile's inline rule) */
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
    /* before up_waiting: from then on rt_srv_tick may answer it */
    rt__call_to(c, RT_CS_RECEIVING);
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
    c->tag.fn = rt__on_stream_recv;
    rt__start_batch(c, &op, 1, &c->tag);
}

void rt_call_recv_hold(rt_call *c)
{
    __atomic_store_n(&c->recv_gate, 0, __ATOMIC_RELEASE);
    c->recv_held = 1;
}

void rt_call_recv_resume(rt_call *c)
{
    if (__atomic_add_fetch(&c->recv_gate, 1, __ATOMIC_ACQ_REL) == 2)
        post_recv(c);
}

void rt__post_close(rt_call *c)
{
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &c->recv_cancelled;
    c->close_posted = 1;
    rt__start_batch(c, &op, 1, &c->close_tag);
}

void rt__on_close(rt__tag *t, int ok)
{
    rt_call *c = RT_CONTAINER(t, rt_call, close_tag);
    if (!ok || c->recv_cancelled)
        __atomic_store_n(&c->cancelled, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&c->close_done, 1, __ATOMIC_RELEASE);
    if (c->after_seq && rt_call_is_cancelled(c))
        rt__pipe_cancel(c);
    rt__call_unref(c);
}

rt_principal *rt_call_principal(rt_auth *a, const grpc_metadata_array *md, const char **why)
{
    const grpc_slice *val = NULL;
    int n = 0;
    for (size_t i = 0; i < md->count; i++)
        if (grpc_slice_str_cmp(md->metadata[i].key, "authorization") == 0 && n++ == 0)
            val = &md->metadata[i].value;
    return rt_auth_check_bearer(a, n, val ? (const char *)GRPC_SLICE_START_PTR(*val) : NULL,
                                val ? GRPC_SLICE_LENGTH(*val) : 0, why);
}

/* Who is calling: before anything of the request is decoded. Its time is
 * the decode's (Timings.auth_ns): a token's hash with --tokens, nothing
 * without. */
static int authenticate(rt_call *c)
{
    const char *why = "unauthenticated";
    if (!c->srv->cfg.tokens_path) {
        c->who = rt_call_principal(c->srv->auth, &c->md, &why);
    } else {
        uint64_t t0 = rt_now_ns();
        c->who = rt_call_principal(c->srv->auth, &c->md, &why);
        uint64_t d = rt_now_ns() - t0;
        c->tm.auth_ns += d;
        c->tm.decode_ns += d;
    }
    if (c->who) {
        c->who_name = rt_principal_name(c->who);
        return 0;
    }
    return rt_call_fail(c, RT_EAUTH, "%s", why);
}

static int inflate_later(rt_call *c);

static void on_arrival(rt__tag *t, int ok)
{
    rt_call *c = RT_CONTAINER(t, rt_call, tag);
    rt_srv *s = c->srv;
    if (!ok) { /* the server is shutting down: the request was never matched */
        rt__call_free(c, 0);
        return;
    }
    rt__call_to(c, RT_CS_HANDLING);
    __atomic_add_fetch(&s->live, 1, __ATOMIC_ACQ_REL);
    __atomic_store_n(&c->refs, 1, __ATOMIC_RELAXED); /* the owner: dropped by rt__finish() */
    if (!__atomic_load_n(&s->stopping, __ATOMIC_ACQUIRE))
        rt__request_call(s, (int)(c->m - rt_methods));
    /* The daemon's account starts here: re-arming the method's request
     * is gRPC's bookkeeping (1.5-8 us), in the client's wire time as the
     * rest of gRPC's server side, not an unexplained part of ours. */
    rt_obs_timing_begin(&c->tm, rt_now_ns());
    int authed = authenticate(c) == 0;
    if (c->m->kind == RT_UNARY) {
        if (authed && c->payload && c->payload->type == GRPC_BB_RAW &&
            c->payload->data.raw.compression != GRPC_COMPRESS_NONE && inflate_later(c))
            return; /* decoded, handled and dispatched there */
        if (authed)
            c->req = decode(c, &c->alloc);
        if (c->req)
            run_handler(c, c->m->handle);
        rt__dispatch(c);
        return;
    }
    /* An upload counts as in flight from its arrival: a stream that never
     * sends its header is capped and times out like a stalled one. */
    if (c->m->kind == RT_CLIENT_STREAM && rt_srv_upload_reserve(c, 0) < 0) {
        rt__finish(c);
        return;
    }
    rt__post_close(c);
    if (authed)
        post_recv(c);
    else
        rt__finish(c); /* nothing of the stream is read */
}

static void stream_msg_handle(rt_call *c);

/* The inflate threads: a compressed message costs its inflation (up to
 * the message limit: 64 MiB by default, ~100 ms or more), which a cq
 * thread must not pay while other principals' calls wait behind it. The
 * cq thread queues the call instead and one of these threads decodes it
 * and runs the handler: a unary call's then dispatched as on_arrival does;
 * a client stream's next receive is posted as the cq thread would have
 * (it was not posted before, so nothing more of that stream arrives
 * meanwhile and its messages stay in order). No cq thread ever waits for
 * them; HTTP/2 flow control slows the uploader. */
static void *inflate_main(void *arg)
{
    rt_srv *s = arg;
    pthread_mutex_lock(&s->q_mu);
    for (;;) {
        rt_call *c = s->z_head;
        if (!c) {
            if (s->q_stop)
                break;
            s->idle_z++;
            pthread_cond_wait(&s->z_cv, &s->q_mu);
            s->idle_z--;
            continue;
        }
        s->z_head = c->next_z;
        if (!s->z_head)
            s->z_tail = NULL;
        c->next_z = NULL;
        pthread_mutex_unlock(&s->q_mu);
        if (c->m->kind == RT_UNARY) { /* as on_arrival would */
            c->req = decode(c, &c->alloc);
            if (c->req)
                run_handler(c, c->m->handle);
            rt__dispatch(c);
        } else {
            c->req = decode(c, NULL);
            stream_msg_handle(c);
        }
        pthread_mutex_lock(&s->q_mu);
    }
    pthread_mutex_unlock(&s->q_mu);
    return NULL;
}

/* Queue c's compressed message for an inflate thread (started on demand,
 * up to RT__Z_THREADS); 0 when none could run it (the cq thread decodes
 * it then). */
static int inflate_later(rt_call *c)
{
    rt_srv *s = c->srv;
    pthread_mutex_lock(&s->q_mu);
    if (s->q_stop) {
        pthread_mutex_unlock(&s->q_mu);
        return 0;
    }
    if (s->idle_z == 0 && s->n_z < RT__Z_THREADS &&
        pthread_create(&s->z_threads[s->n_z], NULL, inflate_main, s) == 0)
        s->n_z++;
    if (s->n_z == 0) {
        pthread_mutex_unlock(&s->q_mu);
        return 0;
    }
    c->next_z = NULL;
    if (s->z_tail)
        s->z_tail->next_z = c;
    else
        s->z_head = c;
    s->z_tail = c;
    pthread_cond_signal(&s->z_cv);
    pthread_mutex_unlock(&s->q_mu);
    return 1;
}

void rt__on_stream_recv(rt__tag *t, int ok)
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
            rt__call_unref(c);
            rt__call_unref(c);
            return;
        }
    }
    if (!ok || rt_call_is_cancelled(c)) {
        abandon(c);
        rt__call_unref(c);
        return;
    }
    rt__call_to(c, RT_CS_HANDLING);
    if (c->m->kind == RT_SERVER_STREAM) {
        if (!c->payload) {
            rt_call_fail(c, RT_EPROTO, "missing %s", c->m->req_name);
        } else {
            c->req = decode(c, &c->alloc);
            if (c->req)
                run_handler(c, c->m->handle);
        }
        if (!c->err && c->work)
            rt__enqueue(c); /* streams always run on the executor */
        else
            rt__finish(c);
        rt__call_unref(c);
        return;
    }
    /* Client stream (upload): one message at a time, handled on this
     * thread, or on an inflate thread when it came compressed; the
     * end-of-stream work is the handler's choice. */
    if (!c->payload) {
        run_handler(c, c->m->end);
        rt__dispatch(c);
        rt__call_unref(c);
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
    } else if (c->payload->type == GRPC_BB_RAW &&
               c->payload->data.raw.compression != GRPC_COMPRESS_NONE && inflate_later(c)) {
        return; /* the batch's reference goes with it */
    } else {
        c->req = decode(c, NULL);
    }
    stream_msg_handle(c);
}

/* A client stream's message, decoded (c->req, or c->err): the handler,
 * then the stream's next receive or its end. Drops the receive batch's
 * reference. */
static void stream_msg_handle(rt_call *c)
{
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
    int held = c->recv_held;
    c->recv_held = 0;
    if (c->err || c->resp) { /* a response before the end: answered early */
        if (held)            /* past 2 for good: the resumer posts nothing */
            __atomic_add_fetch(&c->recv_gate, 100, __ATOMIC_ACQ_REL);
        rt__finish(c);
    } else if (held) {
        rt_call_recv_resume(c); /* the consumer may have resumed already */
    } else {
        post_recv(c);
    }
    rt__call_unref(c);
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

void *rt__cq_main(void *arg)
{
    rt_srv *s = arg;
    int ticks = s->cfg.upload_stall_ms || s->cfg.compile_timeout_ms || s->cfg.pipeline_hold_ms ||
                s->cfg.upload_keep_ms;
    uint64_t every = tick_every_ns(s);
    for (;;) {
        gpr_timespec until = ticks ? gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
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

void rt__on_shutdown(rt__tag *t, int ok)
{
    rt_srv *s = RT_CONTAINER(t, rt_srv, shutdown_tag);
    __atomic_store_n(&s->shutdown_acked, 1, __ATOMIC_RELEASE);
    rt__check_drained(s);
}
