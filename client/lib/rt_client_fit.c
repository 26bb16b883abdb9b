/* rt_client_fit.c - the Fit server stream.
 *
 * The request goes out with the stream's opening (rt__stream_open), then
 * events are received one at a time until the end of the stream. The
 * callback's nonzero return, or rt_client_cancel, cancels the call: the
 * daemon sees the cancellation and stops at the next step boundary.
 *
 * A stream the daemon's going away broke is sent again (rtrain.h,
 * rt_client_fit): the same fit_id and how many epoch ends came, so the
 * daemon continues the fit and sends only what the client lacks. */
#include "rt_client_impl.h"
#include "rt_random.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    } else if (e->event_case == RTRAIN__V1__FIT_EVENT__EVENT_EPOCH_END && e->epoch_end) {
        ev->kind = RT_FIT_EPOCH_END;
        rt__epoch_from_pb(e->epoch_end, &ev->epoch_end);
        ev->epoch = ev->epoch_end.epoch;
        ev->step = ev->epoch_end.steps;
    } else {
        ev->kind = RT_FIT_DONE;
        ev->step = e->global_step;
    }
}

/* What the fit's streams delivered so far. */
typedef struct fit_run {
    rt_client_fit_cb cb;
    void *user;
    uint32_t received; /* epoch ends */
    uint64_t max_step; /* the highest step an event reported */
    int saw_done, user_stop, server_cancelled;
} fit_run;

/* The fit's id: random, never 0. */
static uint64_t fit_id(void)
{
    uint64_t id = 0;
    if (rt_random_bytes(&id, sizeof id) < 0)
        id = rt_now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&id;
    return id ? id : 1;
}

/* One Fit stream: its events into f->cb until it ends. Its own time
 * account (the whole stream is the round trip). */
static int fit_stream(rt_client *c, Rtrain__V1__FitRequest *req, fit_run *f)
{
    rt__call_begin(c, RT__M_FIT);
    rt__call k;
    int rc = rt__stream_open(c, &k, RT__M_FIT, &req->base);
    if (rc < 0)
        return rt__call_end(c, rc);

    uint64_t in_callbacks = 0, decoding = 0;
    f->saw_done = f->server_cancelled = 0;
    for (;;) {
        grpc_byte_buffer *recv;
        rt__stream_recv(&k, &recv);
        if (!recv)
            break; /* end of stream, cancellation or error: the status says */
        uint64_t d0 = rt_now_ns();
        Rtrain__V1__FitEvent *fe =
            (Rtrain__V1__FitEvent *)rt_wire_unpack(recv, &rtrain__v1__fit_event__descriptor, NULL);
        grpc_byte_buffer_destroy(recv);
        if (!fe) {
            rc = rt__err(c, RT_EPROTO, "Fit: the daemon sent a malformed FitEvent");
            rt__stream_cancel(&k);
            decoding += rt_now_ns() - d0;
            continue; /* drain until the NULL message */
        }
        rt__take_timings(c, fe->timings, 1);
        if (fe->boot_id) {
            c->daemon_boot = fe->boot_id;
            c->daemon_state = (int)fe->state;
        }
        if (fe->done)
            f->saw_done = 1;
        if (fe->cancelled)
            f->server_cancelled = 1;
        decoding += rt_now_ns() - d0;
        /* merge_events: the epoch ends it carries come first, in order,
         * then its progress, epoch_end or done (event_from_pb); an event
         * of only epoch ends has nothing more */
        size_t n_ev = fe->n_epoch_ends;
        if (fe->event_case != RTRAIN__V1__FIT_EVENT__EVENT__NOT_SET || fe->done || !n_ev)
            n_ev++;
        for (size_t i = 0; i < n_ev; i++) {
            rt_client_fit_event ev;
            if (i < fe->n_epoch_ends) {
                Rtrain__V1__FitEvent one = RTRAIN__V1__FIT_EVENT__INIT;
                one.event_case = RTRAIN__V1__FIT_EVENT__EVENT_EPOCH_END;
                one.epoch_end = fe->epoch_ends[i];
                event_from_pb(&one, &ev);
            } else {
                event_from_pb(fe, &ev);
            }
            /* after a reattach the daemon resumes from its restored step:
             * the steps up to the highest reported were seen */
            int deliver = 1;
            if (ev.kind == RT_FIT_PROGRESS) {
                deliver = ev.step > f->max_step;
                if (deliver)
                    f->max_step = ev.step;
            } else if (ev.kind == RT_FIT_EPOCH_END) {
                f->received++;
                if (ev.step > f->max_step)
                    f->max_step = ev.step;
            }
            if (f->cb && deliver && !f->user_stop && rc == 0) {
                uint64_t c0 = rt_now_ns();
                int stop = f->cb(&ev, f->user);
                in_callbacks += rt_now_ns() - c0;
                if (stop) {
                    f->user_stop = 1;
                    rt__stream_cancel(&k);
                }
            }
        }
        uint64_t d1 = rt_now_ns();
        protobuf_c_message_free_unpacked(&fe->base, NULL);
        decoding += rt_now_ns() - d1;
    }
    /* The whole stream is the round trip: the daemon keeps computing while
     * the client decodes events and runs callbacks, so that client work
     * overlaps the server's and is reported beside it. */
    int src = rt__stream_close(&k);
    c->cur.client_stream_ns = in_callbacks + decoding;
    if (rc == 0)
        rc = src;
    /* The done event goes out only after a fit that ended well: a status
     * lost after it (the daemon killed just then) still ends the fit. */
    if (rc < 0 && f->saw_done && !f->server_cancelled && !f->user_stop && rt__daemon_gone(c, rc)) {
        rc = 0;
        c->errmsg[0] = 0;
    }
    /* A stream that finished (done, OK status) before a late cancel took
     * effect is a success: the whole fit ran. */
    int finished = rc == 0 && f->saw_done && !f->server_cancelled;
    if (!finished && (f->user_stop || atomic_load(&c->cancel_flag) || f->server_cancelled)) {
        rc = RT_ECANCELLED;
        rt__err(c, RT_ECANCELLED, "Fit: cancelled %s",
                f->user_stop                                           ? "by the callback"
                : f->server_cancelled && !atomic_load(&c->cancel_flag) ? "by the daemon"
                                                                       : "by rt_client_cancel");
    } else if (rc == 0 && !f->saw_done) {
        rc = rt__err(c, RT_EPROTO, "Fit: the stream ended without a done event");
    }
    /* Nothing is decoded after the status: events were handled in-stream. */
    c->t_response = 0;
    return rt__call_end(c, rc);
}

int rt_client_fit(rt_client *c, const rt_client_fit_params *p, rt_client_fit_cb cb, void *user)
{
    if (!c || !p)
        return RT_EINVAL;
    rt__call_begin(c, RT__M_FIT);
    int rc = rt__check_ids(c, p->session, p->program);
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
    req.checkpoint_every_steps = p->checkpoint_every_steps;
    req.checkpoint_every_s = p->checkpoint_every_s;
    req.rows_before = p->rows_before;
    req.whole_steps_per_epoch = p->whole_steps_per_epoch;
    req.fit_id = fit_id();
    req.merge_events = 1; /* fit_stream takes FitEvent.epoch_ends */
    /* every stream of the fit gets the caller's deadline, and the cancel
     * flag holds across them (rt__call_begin keeps it in a loop) */
    int64_t timeout = c->next_timeout_ms;
    int in_loop = c->in_loop;
    c->in_loop = 1;
    fit_run f = {.cb = cb, .user = user};
    for (;;) {
        c->next_timeout_ms = timeout;
        req.epochs_received = f.received;
        rc = fit_stream(c, &req, &f);
        if (rc >= 0 || f.user_stop || atomic_load(&c->cancel_flag) || c->reattach_ms <= 0 ||
            !rt__daemon_gone(c, rc))
            break;
        rt_client_ckpt_info info;
        if ((rc = rt__wait_daemon(c, "Fit", p->session, p->program, rt_now_ns(), &info)) < 0)
            break;
        if (cb) {
            rt_client_fit_event ev;
            memset(&ev, 0, sizeof ev);
            ev.kind = RT_FIT_RESUMED;
            /* the fit's epoch (1-based) where the daemon stands; a daemon
             * that has no checkpoint of this fit starts it over */
            ev.epoch = 1 + (info.fit_id == req.fit_id ? info.fit_epochs_done : 0);
            ev.step = info.global_step;
            ev.steps_per_epoch = p->steps_per_epoch;
            if (cb(&ev, user)) {
                rc = rt__err(c, RT_ECANCELLED, "Fit: cancelled by the callback");
                break;
            }
        }
    }
    c->in_loop = in_loop;
    c->next_timeout_ms = INT64_MIN;
    return rc;
}
