/* rt_client_call.c - the one gRPC call path of librtrain.
 *
 * Every RPC goes through one of two helpers:
 *   - rt__unary (or rt__unary_start + rt__unary_finish when several calls
 *     are in flight): one 6-op batch, then a pluck;
 *   - rt__stream_open/send/recv/close: Fit's server stream and
 *     UploadDataset's client stream.
 * Both create the call the same way (registered method, the client's
 * deadline, the initial metadata), wait the same way (rt__pluck, which polls
 * the cancel flag) and turn the status into an rc and a message the same
 * way (rt__status). They fill the time account of the call in progress
 * (c->cur): bytes, encode and round trip. */
#include "rt_client_impl.h"

#include <string.h>
#include <strings.h>

#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

/* How often a blocked call looks at the cancel flag. Small enough that
 * Ctrl-C feels immediate, large enough to cost nothing measurable. */
#define RT__POLL_MS 20

gpr_timespec rt__deadline(rt_client *c)
{
    int64_t ms = c->timeout_ms;
    if (c->next_timeout_ms != INT64_MIN) {
        ms = c->next_timeout_ms;
        c->next_timeout_ms = INT64_MIN;
    }
    if (ms <= 0)
        return gpr_inf_future(GPR_CLOCK_MONOTONIC);
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(ms, GPR_TIMESPAN));
}

int rt__pluck(rt_client *c, grpc_call *call, void *tag)
{
    int cancelled = 0;
    for (;;) {
        /* Checked before every wait, not only on timeouts: a stream that
         * delivers events faster than RT__POLL_MS never times out. */
        if (!cancelled && call && atomic_load(&c->cancel_flag)) {
            grpc_call_cancel(call, NULL);
            cancelled = 1;
        }
        gpr_timespec dl = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                       gpr_time_from_millis(RT__POLL_MS, GPR_TIMESPAN));
        grpc_event ev = grpc_completion_queue_pluck(c->cq, tag, dl, NULL);
        if (ev.type == GRPC_OP_COMPLETE)
            return ev.success;
        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            return 0;
    }
}

/* Wait for the channel: its connectivity watch is plucked like a call's
 * batch. */
int rt_client_wait_ready(rt_client *c, int64_t timeout_ms)
{
    if (!c)
        return RT_EINVAL;
    uint64_t t0 = rt_now_ns();
    gpr_timespec dl =
        gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
    grpc_connectivity_state st = grpc_channel_check_connectivity_state(c->ch, 1);
    int tag;
    /* TRANSIENT_FAILURE is an answer: the daemon is not there (the channel
     * retries in the background, as a call would find). */
    while (st != GRPC_CHANNEL_READY && st != GRPC_CHANNEL_TRANSIENT_FAILURE &&
           st != GRPC_CHANNEL_SHUTDOWN) {
        grpc_channel_watch_connectivity_state(c->ch, st, dl, c->cq, &tag);
        if (!rt__pluck(c, NULL, &tag))
            break; /* the deadline */
        st = grpc_channel_check_connectivity_state(c->ch, 0);
    }
    c->conn.ready_ns = rt_now_ns() - t0;
    if (st == GRPC_CHANNEL_READY)
        return 0;
    return rt__err(c, RT_EUNAVAILABLE, "cannot connect to %s (is rtraind running there?)",
                   c->target);
}

static const char *status_name(grpc_status_code st)
{
    static const char *const names[] = {"OK",
                                        "CANCELLED",
                                        "UNKNOWN",
                                        "INVALID_ARGUMENT",
                                        "DEADLINE_EXCEEDED",
                                        "NOT_FOUND",
                                        "ALREADY_EXISTS",
                                        "PERMISSION_DENIED",
                                        "RESOURCE_EXHAUSTED",
                                        "FAILED_PRECONDITION",
                                        "ABORTED",
                                        "OUT_OF_RANGE",
                                        "UNIMPLEMENTED",
                                        "INTERNAL",
                                        "UNAVAILABLE",
                                        "DATA_LOSS",
                                        "UNAUTHENTICATED"};
    if ((int)st >= 0 && (size_t)st < sizeof names / sizeof names[0])
        return names[st];
    return "UNKNOWN";
}

int rt__status(rt_client *c, grpc_status_code st, grpc_slice details, const char *error_string)
{
    c->grpc_status = (int)st;
    char *d = grpc_slice_to_c_string(details);
    grpc_slice_unref(details);
    int rc = 0;
    if (st != GRPC_STATUS_OK) {
        rc = rt_err_from_grpc((int)st);
        if (rc == 0)
            rc = RT_EGRPC;
        const char *name = status_name(st);
        const char *method = c->cur.method ? c->cur.method : "call";
        if (st == GRPC_STATUS_UNAVAILABLE) {
            rt__err(c, RT_EUNAVAILABLE, "cannot connect to %s (is rtraind running there?): %s: %s",
                    c->target, method, d && *d ? d : "unavailable");
        } else if (st == GRPC_STATUS_DEADLINE_EXCEEDED &&
                   (!d || !*d || strcasecmp(d, "Deadline Exceeded") == 0)) {
            /* gRPC's own text: the client's deadline passed. A daemon's
             * (a compile past its budget, a stalled upload, a pipelined
             * call held too long) names the cause and its flag, and is
             * kept below: the client's timeout is not what ran out. */
            rt__err(c, rc,
                    "DEADLINE_EXCEEDED: %s on %s did not finish in time "
                    "(raise the timeout)",
                    method, c->target);
        } else if (st == GRPC_STATUS_CANCELLED && atomic_load(&c->cancel_flag)) {
            rt__err(c, RT_ECANCELLED, "CANCELLED: %s cancelled by the client", method);
        } else if (st == GRPC_STATUS_RESOURCE_EXHAUSTED && d &&
                   strstr(d, "Received message larger than max")) {
            /* gRPC's own refusal: a model (Inception v3's ONNX: 87 MB) or
             * a part over the daemon's receive limit */
            rt__err(c, rc,
                    "RESOURCE_EXHAUSTED: %s: %s; the daemon's limit is "
                    "rtraind --max-message-bytes",
                    method, d);
        } else if (d && strncmp(d, name, strlen(name)) == 0) {
            rt__err(c, rc, "%s", d); /* the daemon already named the status */
        } else {
            rt__err(c, rc, "%s: %s", name, d && *d ? d : method);
        }
    }
    gpr_free(d);
    if (error_string)
        gpr_free((void *)error_string);
    return rc;
}

/* ------------------------------------------------------------- a call */

/* Create k's gRPC call for method with the client's deadline; the initial
 * metadata of every call is filled in by initial_md, the one place that
 * decides what a call carries. */
static int call_create(rt_client *c, rt__call *k, int method)
{
    memset(k, 0, sizeof *k);
    k->c = c;
    k->method = method;
    k->st = GRPC_STATUS_UNKNOWN;
    k->details = grpc_empty_slice();
    grpc_metadata_array_init(&k->init_md);
    grpc_metadata_array_init(&k->trail_md);
    if (!c->reg[method]) {
        /* registered once per channel, at the method's first call: all
         * 17 at the channel's creation took ~10 us of each connect here,
         * and a run uses a few */
        char path[RT_METHOD_PATH_MAX];
        rt_service_path(rt_service(), method, path, sizeof path);
        c->reg[method] = grpc_channel_register_call(c->ch, path, NULL, NULL);
    }
    k->call = grpc_channel_create_registered_call(c->ch, NULL, GRPC_PROPAGATE_DEFAULTS, c->cq,
                                                  c->reg[method], rt__deadline(c), NULL);
    if (!k->call) {
        grpc_metadata_array_destroy(&k->init_md);
        grpc_metadata_array_destroy(&k->trail_md);
        return rt__err(c, RT_ENOMEM, "%s: cannot create the call", rt_service_method_name(method));
    }
    return 0;
}

/* The bearer token, if the client has one, goes with every call. */
static void initial_md(const rt_client *c, grpc_op *op)
{
    op->op = GRPC_OP_SEND_INITIAL_METADATA;
    /* reattaching: wait for the daemon to be back, not fail fast */
    op->flags = c->wait_ready ? GRPC_INITIAL_METADATA_WAIT_FOR_READY : 0;
    op->data.send_initial_metadata.count = c->n_md;
    op->data.send_initial_metadata.metadata = c->n_md ? (grpc_metadata *)c->md : NULL;
}

static void status_op(rt__call *k, grpc_op *op)
{
    op->op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    op->data.recv_status_on_client.trailing_metadata = &k->trail_md;
    op->data.recv_status_on_client.status = &k->st;
    op->data.recv_status_on_client.status_details = &k->details;
    op->data.recv_status_on_client.error_string = &k->error_string;
}

static void call_release(rt__call *k)
{
    if (k->send)
        grpc_byte_buffer_destroy(k->send);
    if (k->recv)
        grpc_byte_buffer_destroy(k->recv);
    grpc_metadata_array_destroy(&k->init_md);
    grpc_metadata_array_destroy(&k->trail_md);
    if (k->call)
        grpc_call_unref(k->call);
    k->send = k->recv = NULL;
    k->call = NULL;
}

/* Pack req into k->send and account for it in c->cur. */
static int call_pack(rt_client *c, rt__call *k, const ProtobufCMessage *req)
{
    uint64_t t0 = rt_now_ns();
    k->send = rt_wire_pack(req, NULL);
    if (!k->send)
        return rt__err(c, RT_ENOMEM, "%s: out of memory packing the request",
                       rt_service_method_name(k->method));
    k->bytes_sent = rt_wire_length(k->send);
    k->encode_ns = rt_now_ns() - t0;
    c->cur.bytes_sent += k->bytes_sent;
    c->cur.client_encode_ns += k->encode_ns;
    return 0;
}

/* ------------------------------------------------------------- unary */

int rt__unary_start(rt_client *c, rt__call *k, int method, const ProtobufCMessage *req)
{
    uint64_t t0 = rt_now_ns();
    grpc_byte_buffer *send = rt_wire_pack(req, NULL);
    if (!send)
        return rt__err(c, RT_ENOMEM, "%s: out of memory packing the request",
                       rt_service_method_name(method));
    uint64_t enc = rt_now_ns() - t0;
    int rc = call_create(c, k, method);
    if (rc < 0) {
        grpc_byte_buffer_destroy(send);
        return rc;
    }
    k->send = send;
    k->bytes_sent = rt_wire_length(send);
    k->encode_ns = enc;
    grpc_op *ops = k->ops;
    memset(k->ops, 0, sizeof k->ops);
    initial_md(c, &ops[0]);
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = k->send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &k->init_md;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &k->recv;
    status_op(k, &ops[5]);
    k->t_start = rt_now_ns();
    grpc_call_error ce = grpc_call_start_batch(k->call, ops, 6, ops, NULL);
    if (ce != GRPC_CALL_OK) {
        grpc_slice_unref(k->details);
        call_release(k);
        return rt__err(c, RT_EGRPC, "%s: grpc_call_start_batch failed (%d)",
                       rt_service_method_name(method), (int)ce);
    }
    return 0;
}

int rt__unary_wait(rt_client *c, rt__call *k, gpr_timespec until)
{
    if (!k->answered &&
        grpc_completion_queue_pluck(c->cq, k->ops, until, NULL).type == GRPC_OP_COMPLETE)
        k->answered = 1;
    return k->answered;
}

int rt__unary_finish(rt_client *c, rt__call *k, const ProtobufCMessageDescriptor *desc,
                     ProtobufCMessage **resp)
{
    *resp = NULL;
    if (!k->answered)
        rt__pluck(c, k->call, k->ops);
    c->t_response = rt_now_ns();
    c->cur.client_encode_ns = k->encode_ns;
    c->cur.bytes_sent = k->bytes_sent;
    c->cur.round_trip_ns = c->t_response - k->t_start;
    c->cur.bytes_received = rt_wire_length(k->recv);
    int rc = rt__status(c, k->st, k->details, k->error_string);
    k->error_string = NULL;
    if (rc == 0) {
        *resp = rt_wire_unpack(k->recv, desc, NULL);
        if (!*resp)
            rc = rt__err(c, RT_EPROTO,
                         "%s: the daemon's response is not a "
                         "valid %s message",
                         rt_service_method_name(k->method), desc->name);
    }
    call_release(k);
    return rc;
}

int rt__unary(rt_client *c, int method, const ProtobufCMessage *req,
              const ProtobufCMessageDescriptor *desc, ProtobufCMessage **resp)
{
    rt__call k;
    *resp = NULL;
    int rc = rt__unary_start(c, &k, method, req);
    if (rc < 0)
        return rc;
    return rt__unary_finish(c, &k, desc, resp);
}

/* ------------------------------------------------------------- streams */

int rt__stream_open(rt_client *c, rt__call *k, int method, const ProtobufCMessage *req)
{
    int rc = call_create(c, k, method);
    if (rc < 0)
        return rc;
    if (req && (rc = call_pack(c, k, req)) < 0) {
        grpc_slice_unref(k->details);
        call_release(k);
        return rc;
    }
    grpc_op *first = k->io, *st = k->ops;
    memset(k->io, 0, sizeof k->io);
    memset(k->ops, 0, sizeof k->ops);
    size_t n_first = 1;
    initial_md(c, &first[0]);
    if (req) { /* a server stream: the request, then half-close */
        first[1].op = GRPC_OP_SEND_MESSAGE;
        first[1].data.send_message.send_message = k->send;
        first[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
        n_first = 3;
    }
    /* Initial metadata in and the status, posted at once so that a daemon
     * ending the call mid-stream is seen; plucked by rt__stream_close. A
     * server answering a client stream sends its initial metadata with
     * the response, so nothing may wait for it before the stream ends. */
    st[0].op = GRPC_OP_RECV_INITIAL_METADATA;
    st[0].data.recv_initial_metadata.recv_initial_metadata = &k->init_md;
    status_op(k, &st[1]);
    k->t_start = rt_now_ns();
    grpc_call_error e1 = grpc_call_start_batch(k->call, first, n_first, first, NULL);
    grpc_call_error e2 = grpc_call_start_batch(k->call, st, 2, st, NULL);
    if (e1 != GRPC_CALL_OK || e2 != GRPC_CALL_OK) {
        /* Nothing to pluck for a batch that did not start. */
        if (e1 == GRPC_CALL_OK)
            rt__pluck(c, k->call, first);
        grpc_call_cancel(k->call, NULL);
        if (e2 == GRPC_CALL_OK)
            rt__pluck(c, k->call, st);
        else
            grpc_slice_unref(k->details);
        if (k->error_string)
            gpr_free((void *)k->error_string);
        call_release(k);
        return rt__err(c, RT_EGRPC, "%s: grpc_call_start_batch failed (%d/%d)",
                       rt_service_method_name(method), (int)e1, (int)e2);
    }
    /* A failed first batch means the call ended: the status says why. */
    rt__pluck(c, k->call, first);
    if (k->send) {
        grpc_byte_buffer_destroy(k->send);
        k->send = NULL;
    }
    return 0;
}

int rt__stream_send_start(rt__call *k, grpc_byte_buffer *bb, int last)
{
    grpc_op *op = k->io;
    memset(k->io, 0, sizeof k->io);
    op[0].op = GRPC_OP_SEND_MESSAGE;
    op[0].data.send_message.send_message = bb;
    op[1].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    k->c->cur.bytes_sent += rt_wire_length(bb);
    if (grpc_call_start_batch(k->call, op, last ? 2 : 1, op, NULL) != GRPC_CALL_OK) {
        grpc_call_cancel(k->call, NULL);
        return 0;
    }
    return 1;
}

int rt__stream_send_wait(rt__call *k)
{
    /* A failed send means the daemon ended the call, and the status will
     * say why. */
    return rt__pluck(k->c, k->call, k->io);
}

int rt__stream_send(rt__call *k, grpc_byte_buffer *bb, int last)
{
    /* One SEND_MESSAGE in flight at a time. */
    return rt__stream_send_start(k, bb, last) && rt__stream_send_wait(k);
}

void rt__stream_recv(rt__call *k, grpc_byte_buffer **bb)
{
    *bb = NULL;
    grpc_op *op = k->io;
    memset(k->io, 0, sizeof k->io);
    op[0].op = GRPC_OP_RECV_MESSAGE;
    op[0].data.recv_message.recv_message = bb;
    if (grpc_call_start_batch(k->call, op, 1, op, NULL) != GRPC_CALL_OK)
        return;
    rt__pluck(k->c, k->call, op);
    k->c->cur.bytes_received += rt_wire_length(*bb);
}

void rt__stream_cancel(rt__call *k) { grpc_call_cancel(k->call, NULL); }

int rt__stream_close(rt__call *k)
{
    rt_client *c = k->c;
    rt__pluck(c, k->call, k->ops);
    c->cur.round_trip_ns = rt_now_ns() - k->t_start;
    int rc = rt__status(c, k->st, k->details, k->error_string);
    k->error_string = NULL;
    call_release(k);
    return rc;
}
