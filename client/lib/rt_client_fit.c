/* rt_client_fit.c - the Fit server stream.
 *
 * Batches: (1) initial metadata + the request + half-close + initial
 * metadata in; (2) RECV_STATUS_ON_CLIENT, posted at once so a daemon abort
 * is seen mid-stream; then one RECV_MESSAGE at a time until a NULL message
 * (end of stream or cancellation). The callback's nonzero return, or
 * rt_client_cancel, becomes grpc_call_cancel: the daemon sees the
 * cancellation and stops at the next step boundary. */
#include "rt_client_impl.h"

#include <string.h>

#include <grpc/slice.h>

static void event_from_pb(const Rtrain__V1__FitEvent *e, rt_client_fit_event *ev)
{
    memset(ev, 0, sizeof *ev);
    ev->done = e->done;
    ev->cancelled = e->cancelled;
    if (e->event_case == RTRAIN__V1__FIT_EVENT__EVENT_PROGRESS && e->progress) {
        ev->kind = RT_FIT_PROGRESS;
        ev->step = e->progress->step;
        ev->epoch = e->progress->epoch;
        ev->step_in_epoch = e->progress->step_in_epoch;
        ev->steps_per_epoch = e->progress->steps_per_epoch;
        ev->loss = e->progress->loss;
        ev->accuracy = e->progress->accuracy;
    } else if (e->event_case == RTRAIN__V1__FIT_EVENT__EVENT_EPOCH_END &&
               e->epoch_end) {
        ev->kind = RT_FIT_EPOCH_END;
        rt__epoch_from_pb(e->epoch_end, &ev->epoch_end);
        ev->epoch = ev->epoch_end.epoch;
        ev->step = ev->epoch_end.steps;
    } else {
        ev->kind = RT_FIT_DONE;
    }
}

int rt_client_fit(rt_client *c, const rt_client_fit_params *p,
                  rt_client_fit_cb cb, void *user)
{
    if (!c || !p)
        return RT_EINVAL;
    rt__call_begin(c, RT__M_FIT);
    int rc = rt__check_id(c, "session", p->session);
    if (rc == 0)
        rc = rt__check_id(c, "program", p->program);
    if (rc == 0)
        rc = rt__check_id(c, "dataset", p->dataset);
    if (rc == 0 && p->epochs == 0)
        rc = rt__err(c, RT_EINVAL, "Fit: epochs must be at least 1");
    if (rc < 0)
        return rt__call_end(c, rc);

    uint64_t t0 = rt_now_ns();
    Rtrain__V1__FitRequest req = RTRAIN__V1__FIT_REQUEST__INIT;
    req.session_id = (char *)p->session;
    req.program_id = (char *)p->program;
    req.dataset_id = (char *)p->dataset;
    req.val_dataset_id = (char *)(p->val_dataset ? p->val_dataset : "");
    req.epochs = p->epochs;
    req.steps_per_epoch = p->steps_per_epoch;
    req.progress_every = p->progress_every;
    grpc_byte_buffer *send = rt_wire_pack(&req.base, NULL);
    if (!send)
        return rt__call_end(c, rt__err(c, RT_ENOMEM, "Fit: out of memory"));
    c->cur.bytes_sent = rt_wire_length(send);
    c->cur.client_encode_ns = rt_now_ns() - t0;

    grpc_call *call = grpc_channel_create_registered_call(
        c->ch, NULL, GRPC_PROPAGATE_DEFAULTS, c->cq, c->reg[RT__M_FIT],
        rt__deadline(c), NULL);
    if (!call) {
        grpc_byte_buffer_destroy(send);
        return rt__call_end(c, rt__err(c, RT_ENOMEM, "Fit: cannot create the call"));
    }
    grpc_metadata_array init_md, trail_md;
    grpc_metadata_array_init(&init_md);
    grpc_metadata_array_init(&trail_md);
    grpc_status_code st = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    const char *error_string = NULL;

    uint64_t t_start = rt_now_ns();
    uint64_t in_callbacks = 0, decoding = 0;
    int saw_done = 0, user_stop = 0, server_cancelled = 0;

    grpc_op ops1[4], ops2[1], opr[1];
    memset(ops1, 0, sizeof ops1);
    memset(ops2, 0, sizeof ops2);
    ops1[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops1[1].op = GRPC_OP_SEND_MESSAGE;
    ops1[1].data.send_message.send_message = send;
    ops1[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops1[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops1[3].data.recv_initial_metadata.recv_initial_metadata = &init_md;
    ops2[0].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops2[0].data.recv_status_on_client.trailing_metadata = &trail_md;
    ops2[0].data.recv_status_on_client.status = &st;
    ops2[0].data.recv_status_on_client.status_details = &details;
    ops2[0].data.recv_status_on_client.error_string = &error_string;

    grpc_call_error e1 = grpc_call_start_batch(call, ops1, 4, ops1, NULL);
    grpc_call_error e2 = grpc_call_start_batch(call, ops2, 1, ops2, NULL);
    if (e1 != GRPC_CALL_OK || e2 != GRPC_CALL_OK) {
        /* Nothing to pluck for a batch that did not start. */
        if (e1 == GRPC_CALL_OK)
            rt__pluck(c, call, ops1);
        grpc_call_cancel(call, NULL);
        if (e2 == GRPC_CALL_OK)
            rt__pluck(c, call, ops2);
        else
            grpc_slice_unref(details);
        rc = rt__err(c, RT_EGRPC, "Fit: grpc_call_start_batch failed (%d/%d)",
                     (int)e1, (int)e2);
        goto out;
    }
    rt__pluck(c, call, ops1);
    for (;;) {
        grpc_byte_buffer *recv = NULL;
        memset(opr, 0, sizeof opr);
        opr[0].op = GRPC_OP_RECV_MESSAGE;
        opr[0].data.recv_message.recv_message = &recv;
        if (grpc_call_start_batch(call, opr, 1, opr, NULL) != GRPC_CALL_OK)
            break;
        rt__pluck(c, call, opr);
        if (!recv)
            break; /* end of stream, cancellation or error: the status says */
        uint64_t d0 = rt_now_ns();
        c->cur.bytes_received += rt_wire_length(recv);
        Rtrain__V1__FitEvent *fe = (Rtrain__V1__FitEvent *)rt_wire_unpack(
            recv, &rtrain__v1__fit_event__descriptor, NULL);
        grpc_byte_buffer_destroy(recv);
        if (!fe) {
            rc = rt__err(c, RT_EPROTO, "Fit: the daemon sent a malformed FitEvent");
            grpc_call_cancel(call, NULL);
            decoding += rt_now_ns() - d0;
            continue; /* drain until the NULL message */
        }
        rt__take_timings(c, fe->timings, 1);
        rt_client_fit_event ev;
        event_from_pb(fe, &ev);
        if (fe->done)
            saw_done = 1;
        if (fe->cancelled)
            server_cancelled = 1;
        protobuf_c_message_free_unpacked(&fe->base, NULL);
        uint64_t d1 = rt_now_ns();
        decoding += d1 - d0;
        if (cb && !user_stop && rc == 0) {
            int stop = cb(&ev, user);
            in_callbacks += rt_now_ns() - d1;
            if (stop) {
                user_stop = 1;
                grpc_call_cancel(call, NULL);
            }
        }
    }
    rt__pluck(c, call, ops2);
    {
        uint64_t now = rt_now_ns();
        /* The whole stream is the round trip: the daemon keeps computing
         * while the client decodes events and runs callbacks, so that
         * client work overlaps the server's and is reported beside it. */
        c->cur.round_trip_ns = now - t_start;
        c->cur.client_stream_ns = in_callbacks + decoding;
        int src = rt__status(c, st, details, error_string);
        if (rc == 0)
            rc = src;
    }
    /* A stream that finished (done, OK status) before a late cancel took
     * effect is a success: the whole fit ran. */
    int finished = rc == 0 && saw_done && !server_cancelled;
    if (!finished && (user_stop || atomic_load(&c->cancel_flag) || server_cancelled)) {
        rc = RT_ECANCELLED;
        rt__err(c, RT_ECANCELLED, "Fit: cancelled %s",
                user_stop ? "by the callback" : server_cancelled && !atomic_load(&c->cancel_flag)
                            ? "by the daemon" : "by rt_client_cancel");
    } else if (rc == 0 && !saw_done) {
        rc = rt__err(c, RT_EPROTO, "Fit: the stream ended without a done event");
    }
out:
    grpc_byte_buffer_destroy(send);
    grpc_metadata_array_destroy(&init_md);
    grpc_metadata_array_destroy(&trail_md);
    grpc_call_unref(call);
    /* Nothing is decoded after the status: events were handled in-stream. */
    c->t_response = 0;
    return rt__call_end(c, rc);
}
