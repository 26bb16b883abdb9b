/* rt_client_fit.c - the Fit server stream.
 *
 * The request goes out with the stream's opening (rt__stream_open), then
 * events are received one at a time until the end of the stream. The
 * callback's nonzero return, or rt_client_cancel, cancels the call: the
 * daemon sees the cancellation and stops at the next step boundary. */
#include "rt_client_impl.h"

#include <string.h>

static void event_from_pb(const Rtrain__V1__FitEvent *e, rt_client_fit_event *ev)
{
    memset(ev, 0, sizeof *ev);
    ev->done = e->done;
    ev->cancelled = e->cancelled;
    ev->stopped = e->stopped;
    if (e->event_case == RTRAIN__V1__FIT_EVENT__EVENT_PROGRESS && e->progress) {
        ev->kind = RT_FIT_PROGRESS;
        ev->step = e->progress->step;
        ev->epoch = e->progress->epoch;
        ev->step_in_epoch = e->progress->step_in_epoch;
        ev->steps_per_epoch = e->progress->steps_per_epoch;
        ev->loss = e->progress->loss;
        ev->accuracy = e->progress->accuracy;
        ev->learning_rate = e->progress->learning_rate;
    } else if (e->event_case == RTRAIN__V1__FIT_EVENT__EVENT_EPOCH_END &&
               e->epoch_end) {
        ev->kind = RT_FIT_EPOCH_END;
        rt__epoch_from_pb(e->epoch_end, &ev->epoch_end);
        ev->epoch = ev->epoch_end.epoch;
        ev->step = ev->epoch_end.steps;
    } else {
        ev->kind = RT_FIT_DONE;
        ev->step = e->global_step;
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

    Rtrain__V1__FitRequest req = RTRAIN__V1__FIT_REQUEST__INIT;
    req.session_id = (char *)p->session;
    req.program_id = (char *)p->program;
    req.dataset_id = (char *)p->dataset;
    req.val_dataset_id = (char *)(p->val_dataset ? p->val_dataset : "");
    req.epochs = p->epochs;
    req.steps_per_epoch = p->steps_per_epoch;
    req.progress_every = p->progress_every;
    req.learning_rate = p->learning_rate;
    rt__call k;
    rc = rt__stream_open(c, &k, RT__M_FIT, &req.base);
    if (rc < 0)
        return rt__call_end(c, rc);

    uint64_t in_callbacks = 0, decoding = 0;
    int saw_done = 0, user_stop = 0, server_cancelled = 0;
    for (;;) {
        grpc_byte_buffer *recv;
        rt__stream_recv(&k, &recv);
        if (!recv)
            break; /* end of stream, cancellation or error: the status says */
        uint64_t d0 = rt_now_ns();
        Rtrain__V1__FitEvent *fe = (Rtrain__V1__FitEvent *)rt_wire_unpack(
            recv, &rtrain__v1__fit_event__descriptor, NULL);
        grpc_byte_buffer_destroy(recv);
        if (!fe) {
            rc = rt__err(c, RT_EPROTO, "Fit: the daemon sent a malformed FitEvent");
            rt__stream_cancel(&k);
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
                rt__stream_cancel(&k);
            }
        }
    }
    /* The whole stream is the round trip: the daemon keeps computing while
     * the client decodes events and runs callbacks, so that client work
     * overlaps the server's and is reported beside it. */
    int src = rt__stream_close(&k);
    c->cur.client_stream_ns = in_callbacks + decoding;
    if (rc == 0)
        rc = src;
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
    /* Nothing is decoded after the status: events were handled in-stream. */
    c->t_response = 0;
    return rt__call_end(c, rc);
}
