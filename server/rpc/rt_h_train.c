/* rt_h_train.c - RunSteps, Fit, Evaluate, Predict and Control. RunSteps'
 * use case is rt_train.h's and the program's state between calls
 * rt_program.h's; these build the answers and stream the events. */
#include "rt_handlers.h"

/* The call fails with the use case's message (rt_train.h). */
static int stopped_fail(rt_call *c, int64_t done, int64_t asked)
{
    char e[160];
    int rc = rt_train_stopped_msg(__atomic_load_n(&c->srv->hard_cancel, __ATOMIC_ACQUIRE), done,
                                  asked, e, sizeof e);
    return rt_call_fail(c, rc, "%s", e);
}

/* --------------------------------------------------------------- RunSteps */
static Rtrain__V1__StateKind state_kind(const rt_srv *s)
{
    return s->state ? RTRAIN__V1__STATE_KIND__STATE_DISK : RTRAIN__V1__STATE_KIND__STATE_MEMORY;
}

static int nan_fail(rt_call *c, int64_t step, float loss)
{
    char e[160];
    int rc = rt_train_nan_msg(step, loss, e, sizeof e);
    return rt_call_fail(c, rc, "%s", e);
}

static Rtrain__V1__EpochEnd *epoch_pb(rt_call *c, int64_t epoch, const rt_metrics *train,
                                      int64_t steps, uint64_t exec_ns)
{
    Rtrain__V1__EpochEnd *e = NEW(c, Rtrain__V1__EpochEnd, RTRAIN__V1__EPOCH_END__INIT);
    if (!e)
        return NULL;
    e->epoch = (uint64_t)epoch;
    e->train = rt_h_metrics_pb(c, train);
    e->steps = (uint64_t)steps;
    e->execute_ns = exec_ns;
    return e->train ? e : NULL;
}

/* The EpochEnds of a RunSteps answer, built as the use case reports them
 * (rt_train_host.epoch and epoch_val). */
typedef struct run_epochs {
    rt_call *c;
    Rtrain__V1__EpochEnd **v;
    size_t n, cap;
    int failed; /* the call's failure (OOM), already set */
} run_epochs;

static int run_epoch(void *ud, int64_t epoch, const rt_metrics *train, int64_t step,
                     uint64_t exec_ns)
{
    run_epochs *r = ud;
    if (r->n == r->cap) {
        size_t nc = r->cap ? r->cap * 2 : 8;
        Rtrain__V1__EpochEnd **nv = rt_call_alloc(r->c, sizeof *nv * nc);
        if (!nv)
            return r->failed = OOM(r->c);
        if (r->n)
            memcpy(nv, r->v, sizeof *nv * r->n);
        r->v = nv;
        r->cap = nc;
    }
    Rtrain__V1__EpochEnd *e = epoch_pb(r->c, epoch, train, step, exec_ns);
    if (!e)
        return r->failed = OOM(r->c);
    r->v[r->n++] = e;
    return 0;
}

static float *run_losses(void *ud, uint64_t steps)
{
    run_epochs *r = ud;
    float *l = rt_call_alloc(r->c, sizeof(float) * steps);
    if (!l)
        r->failed = OOM(r->c);
    return l;
}

static int run_epoch_val(void *ud, const rt_metrics *val)
{
    run_epochs *r = ud;
    if (!(r->v[r->n - 1]->val = rt_h_metrics_pb(r->c, val)))
        return r->failed = OOM(r->c);
    return 0;
}

/* Decode, run the use case (rt_program_run_steps), encode. */
static int run_steps_work(rt_call *c)
{
    Rtrain__V1__RunStepsRequest *q = REQ(c, Rtrain__V1__RunStepsRequest);
    rt_run_steps_in in = {.seq = q->seq, .steps = q->steps, .lr = q->learning_rate,
                          .val_at_end = q->val_at_end, .stop_on_nan = q->stop_on_nan,
                          .checkpoint = q->checkpoint, .every_steps = q->checkpoint_every_steps,
                          .every_s = q->checkpoint_every_s, .return_losses = q->return_losses};
    if (c->srv->state)
        in.ckpt_continue = rt_h_ckpt_continue(c, q->checkpoint_policy);
    run_epochs ep = {.c = c};
    const rt_train_host h = {.ud = c, .step = rt_call_step_point,
                             .hard_cancel = rt_call_hard_cancelled, .answer_ud = &ep,
                             .losses = run_losses, .epoch = run_epoch,
                             .epoch_val = run_epoch_val};
    rt_train_ctx ctx = {.ds = c->ds, .val_ds = c->val_ds, .state = c->srv->state,
                        .sid = c->sess->id, .host = &h};
    rt_run_steps_out out;
    char err[400] = "";
    int rc = rt_program_run_steps(c->prog, &ctx, &in, &out, err, sizeof err);
    c->tm.durable_ns += out.durable_ns;
    if (rc < 0)
        return ep.failed ? ep.failed : rt_call_fail(c, rc, "%s", err);
    Rtrain__V1__RunStepsResponse *r = NEW(c, Rtrain__V1__RunStepsResponse, RTRAIN__V1__RUN_STEPS_RESPONSE__INIT);
    if (!r)
        return OOM(c);
    c->resp = &r->base;
    r->replayed = out.replayed;
    r->recorded = out.recorded;
    r->recorded_step = (uint64_t)out.recorded_step;
    r->boot_id = c->srv->boot_id;
    r->state = state_kind(c->srv);
    r->global_step = (uint64_t)out.global_step;
    r->stopped = out.stopped;
    r->non_finite = out.nan_step != 0;
    r->first_non_finite_step = (uint64_t)out.nan_step;
    r->last = rt_h_metrics_pb(c, &out.last);
    r->mean = rt_h_metrics_pb(c, &out.mean);
    if (out.losses) {
        r->losses = out.losses;
        r->n_losses = (size_t)out.done;
    }
    r->epochs = ep.v;
    r->n_epochs = ep.n;
    if (out.has_val && !(r->val = rt_h_metrics_pb(c, &out.val)))
        return OOM(c);
    return r->last && r->mean ? 0 : OOM(c);
}

int rt_h_run_steps(rt_call *c)
{
    Rtrain__V1__RunStepsRequest *q = REQ(c, Rtrain__V1__RunStepsRequest);
    int rc;
    if ((rc = rt_h_need_program(c, q->session_id, q->program_id)) < 0)
        return rc;
    /* From here on the call counts for the program's pipeline: a failure
     * stops the calls sent after it (rt_srv.c, pipe_complete). */
    c->seq = q->seq;
    if ((rc = rt_h_need_train_data(c, q->dataset_id, q->val_dataset_id)) < 0 ||
        (rc = rt_h_refuse_if_stopping(c)) < 0)
        return rc;
    if (q->boot_id && q->boot_id != c->srv->boot_id)
        return rt_call_fail(c, RT_ERESTARTED, "the daemon restarted since this client's last "
                            "call: nothing was applied; reattach (Checkpoint) and resend");
    if (q->steps == 0)
        return rt_call_fail(c, RT_EINVAL, "steps must be at least 1");
    if ((rc = rt_h_check_lr(c, q->learning_rate)) < 0)
        return rc;
    if (q->steps > RT_MAX_STEPS_PER_CALL)
        return rt_call_fail(c, RT_ETOOBIG, "steps %llu is over the limit of %llu per call",
                            (unsigned long long)q->steps, RT_MAX_STEPS_PER_CALL);
    if (q->val_at_end && !c->val_ds)
        return rt_call_fail(c, RT_EINVAL, "val_at_end needs val_dataset_id");
    if (q->return_losses && q->steps > RT_MAX_RETURN_LOSSES)
        return rt_call_fail(c, RT_ETOOBIG, "return_losses allows at most %llu steps",
                            RT_MAX_RETURN_LOSSES);
    if ((rc = rt_h_check_train_data(c)) < 0)
        return rc;
    c->work = run_steps_work;
    c->needs_device = 1;
    c->est_ns = rt_h_clamp_est((double)q->steps * rt_program_step_ns(c->prog));
    if (q->after_seq) {
        if (!q->seq || q->after_seq >= q->seq)
            return rt_call_fail(c, RT_EINVAL, "after_seq %llu must be below seq %llu",
                                (unsigned long long)q->after_seq, (unsigned long long)q->seq);
        /* Pipelined (rt_srv.c, pipe_hold): runs after its predecessor. */
        c->after_seq = q->after_seq;
    }
    return 0;
}

/* -------------------------------------------------------------------- Fit */
/* A Fit with a fit_id is resumable (rt_fit_rec): its start, steps and the
 * results of its last epochs go with every checkpoint, and a Fit sent again
 * with the same id after a restart continues from the restored state. A
 * fit whose epochs are the engine's ("aligned": steps_per_epoch is the
 * data set's and the exec was at an epoch start) takes its epoch metrics
 * from the exec's epoch accumulators, which a checkpoint holds, so it can
 * stop and resume at any step: the interval checkpoints (per fit or the
 * daemon's) and a stopping daemon's exit checkpoint land between steps.
 * Another fit stops and resumes at its epoch ends only. */
typedef struct fit_cb {
    rt_call *c;
    const Rtrain__V1__FitRequest *q;
    uint32_t every;
    int64_t epoch, spe, in_epoch;
    int64_t n, bs;         /* dataset samples, batch size */
    double loss_sum, acc_sum;
    int64_t samples;
    uint64_t mark;         /* epoch clock (rt_program_epoch_clock_end) */
    uint64_t gen;          /* this call's run_gen */
    int stopped;           /* Control's stop */
    int aligned;           /* rt_fit_rec.aligned */
    int resumable;         /* the request has a fit_id */
    int draining;          /* stopped for a stopping daemon's exit checkpoint */
    int ckpt_rc;           /* an interval checkpoint failed (the call fails) */
    rt_metrics ep;         /* aligned: the epoch's metrics at its last step */
    float last_lr;         /* the previous step's rate (0 before the first) */
    int nan_stop;          /* stopped at a non-finite loss (stop_on_nan) */
    int64_t nan_step;      /* the first step with one, 0 = none */
    float nan_loss;
} fit_cb;

/* What every FitEvent of the call carries: the daemon's boot, whether it
 * is durable, and the first non-finite loss so far. */
static void fit_stamp(rt_call *c, Rtrain__V1__FitEvent *ev, int64_t nan_step)
{
    ev->boot_id = c->srv->boot_id;
    ev->state = state_kind(c->srv);
    ev->non_finite = nan_step != 0;
    ev->first_non_finite_step = (uint64_t)nan_step;
}

static int fit_step_cb(void *ud, const rt_step_info *info)
{
    fit_cb *f = ud;
    rt_program *p = f->c->prog;
    f->in_epoch++;
    if (f->resumable)
        rt_program_fit_step(p);
    if (f->aligned) {
        f->loss_sum = info->epoch_metrics.loss;
        f->acc_sum = info->epoch_metrics.acc;
        f->samples = 1;
        if (info->epoch_end)
            f->ep = info->epoch_metrics;
    } else {
        /* Weight each step by its batch, as the epoch metrics are: batches
         * are taken in order and only an engine epoch's last one is smaller
         * (rt_exec_train), so step k of an engine epoch holds
         * min(bs, n - (k-1) bs) samples. */
        int64_t nb = f->n - (info->step_in_epoch - 1) * f->bs;
        nb = nb < f->bs ? nb : f->bs;
        nb = nb > 0 ? nb : 1;
        f->loss_sum += (double)info->loss * (double)nb;
        f->acc_sum += (double)info->acc * (double)nb;
        f->samples += nb;
    }
    if (info->epoch_end) /* RunSteps' epoch clock follows the engine's epochs */
        rt_program_epoch_clock_end(p, &f->mark);
    rt_srv_pause_point(f->c->srv, info->step);
    rt_call_yield(f->c);
    if (rt_call_is_cancelled(f->c))
        return 1;
    if (rt_train_non_finite(&f->nan_step, f->q->stop_on_nan, &f->nan_stop, info)) {
        f->nan_loss = info->loss;
        return 1;
    }
    /* A new rate is reported at its first step, uncoalesced (StepProgress.
     * learning_rate), so a client can replay the run exactly. */
    int lr_changed = f->last_lr > 0 && info->lr != f->last_lr;
    f->last_lr = info->lr;
    if (rt_program_stop_asked(p, f->gen))
        f->stopped = 1;
    if ((f->every && f->in_epoch % f->every == 0 && f->in_epoch < f->spe) ||
        lr_changed) {
        Rtrain__V1__StepProgress sp = RTRAIN__V1__STEP_PROGRESS__INIT;
        Rtrain__V1__FitEvent ev = RTRAIN__V1__FIT_EVENT__INIT;
        sp.step = (uint64_t)info->step;
        sp.epoch = (uint64_t)f->epoch;
        sp.step_in_epoch = (uint64_t)f->in_epoch;
        sp.steps_per_epoch = (uint64_t)f->spe;
        sp.loss = (float)(f->loss_sum / (double)f->samples);
        sp.accuracy = (float)(f->acc_sum / (double)f->samples);
        sp.learning_rate = info->lr;
        ev.event_case = RTRAIN__V1__FIT_EVENT__EVENT_PROGRESS;
        ev.progress = &sp;
        fit_stamp(f->c, &ev, f->nan_step);
        uint64_t t0 = rt_now_ns();
        rt_call_stream_send(f->c, &ev.base, !lr_changed, 0);
        f->c->tm.encode_ns += rt_now_ns() - t0;
    }
    /* Between two steps of an epoch the exec's state is exact for an
     * aligned fit (the epoch's last step is the caller's: the engine moves
     * its cursor after this callback). */
    if (f->aligned && !info->epoch_end && !f->stopped && f->c->srv->state) {
        if (f->resumable && rt_h_daemon_stopping(f->c)) {
            f->draining = 1;
            return 1;
        }
        if (rt_state_checkpoint_due(f->c->srv->state, p, f->q->checkpoint_every_steps,
                                    f->q->checkpoint_every_s)) {
            int rc = rt_h_durable_checkpoint(f->c, p, f->q->checkpoint_policy);
            if (rc < 0) {
                f->ckpt_rc = rc;
                return 1;
            }
        }
    }
    return f->stopped;
}

static int fit_run(rt_call *c, uint64_t gen);

static int fit_work(rt_call *c)
{
    uint64_t gen = rt_program_run_begin(c->prog);
    rt_srv_dash_fit_begin(c);
    int rc = fit_run(c, gen);
    rt_program_run_end(c->prog);
    return rc;
}

static void fit_send_epoch(rt_call *c, Rtrain__V1__EpochEnd *e, int64_t nan_step)
{
    Rtrain__V1__FitEvent ev = RTRAIN__V1__FIT_EVENT__INIT;
    ev.event_case = RTRAIN__V1__FIT_EVENT__EVENT_EPOCH_END;
    ev.epoch_end = e;
    rt_srv_dash_epoch(c, e);
    fit_stamp(c, &ev, nan_step);
    uint64_t t1 = rt_now_ns();
    rt_call_stream_send(c, &ev.base, 0, 0);
    c->tm.encode_ns += rt_now_ns() - t1;
}

/* A resent Fit: where the fit stands on this daemon (its state may have
 * been restored from disk), after sending again the EpochEnds the client
 * did not get. *pos gets the steps already run of the current epoch. 1
 * when the fit had ended (only its final event is left). */
static int fit_resume(rt_call *c, int64_t spe, int64_t *pos)
{
    Rtrain__V1__FitRequest *q = REQ(c, Rtrain__V1__FitRequest);
    rt_program *p = c->prog;
    const rt_fit_rec *r = rt_program_fit(p);
    unsigned long long id = (unsigned long long)q->fit_id;
    if (r->epochs != q->epochs || r->spe != spe)
        return rt_call_fail(c, RT_EINVAL, "fit %016llx was started with %u epochs of %lld "
                            "steps, not %u of %lld", id, r->epochs, (long long)r->spe,
                            q->epochs, (long long)spe);
    int64_t done = rt_program_fit_epochs(p) - r->first_epoch;
    if ((int64_t)q->epochs_received > done)
        return rt_call_fail(c, RT_ESTATE, "fit %016llx: the daemon's state is at epoch %lld of "
                            "it, but the client has %u epochs (a newer checkpoint was lost)",
                            id, (long long)done, q->epochs_received);
    for (int64_t k = (int64_t)q->epochs_received + 1; k <= done; k++) {
        if (done - k >= RT_FIT_RING)
            return rt_call_fail(c, RT_ESTATE, "fit %016llx: epoch %lld's result is no longer "
                                "kept (the last %d are)", id, (long long)k, RT_FIT_RING);
        const rt_fit_epoch *fe = rt_program_fit_epoch(p, k);
        Rtrain__V1__EpochEnd *e = epoch_pb(c, fe->epoch, &fe->train, fe->steps, fe->execute_ns);
        if (!e || (fe->has_val && !(e->val = rt_h_metrics_pb(c, &fe->val))))
            return OOM(c);
        fit_send_epoch(c, e, 0);
    }
    if (r->done)
        return 1;
    *pos = r->steps_done - done * spe;
    if (*pos < 0 || *pos >= spe)
        return rt_call_fail(c, RT_ESTATE, "fit %016llx: %lld steps run do not fit %lld epochs "
                            "of %lld", id, (long long)r->steps_done, (long long)done,
                            (long long)spe);
    if (*pos && !r->aligned)
        return rt_call_fail(c, RT_ESTATE, "fit %016llx stopped inside an epoch that is not the "
                            "data set's (steps_per_epoch): it resumes only at epoch ends", id);
    return 0;
}

static int fit_run(rt_call *c, uint64_t gen)
{
    Rtrain__V1__FitRequest *q = REQ(c, Rtrain__V1__FitRequest);
    rt_program *p = c->prog;
    rt_data d, vd;
    int rc = rt_h_train_data(c, &d, &vd);
    if (rc < 0)
        return rc;
    int64_t bs = rt_plan_config(rt_program_plan(p))->batch_size;
    int64_t spe = q->steps_per_epoch ? q->steps_per_epoch : (d.n + bs - 1) / bs;
    const rt_fit_rec *fr = rt_program_fit(p);
    int resume = q->fit_id && fr->id == q->fit_id;
    int64_t pos = 0;
    uint32_t ep0 = 0;
    int ended = 0;
    if (resume) {
        if ((rc = fit_resume(c, spe, &pos)) < 0)
            return rc;
        ended = rc;
        ep0 = (uint32_t)(rt_program_fit_epochs(p) - fr->first_epoch);
        char pid[16];
        RT_LOG(RT_LOG_INFO, "fit %016llx on %s resumed at epoch %u step %lld",
               (unsigned long long)q->fit_id, rt_log_id(rt_program_id(p), pid), ep0 + 1,
               (long long)rt_exec_global_step(rt_program_exec(p)));
    } else {
        if (q->fit_id && q->epochs_received)
            return rt_call_fail(c, RT_ESTATE, "fit %016llx is unknown here, but the client has "
                                "%u of its epochs (the daemon's state predates them)",
                                (unsigned long long)q->fit_id, q->epochs_received);
        /* a resumed fit keeps the rate it has (a Control call may have
         * changed the request's) */
        if ((rc = rt_h_apply_lr(c, q->learning_rate)) < 0)
            return rc;
        int64_t cur_ep, cur_pos;
        rt_exec_cursor(rt_program_exec(p), &cur_ep, &cur_pos);
        rt_program_fit_begin(p, q->fit_id, spe, q->epochs,
                             spe == (d.n + bs - 1) / bs && cur_pos == 0);
        if (q->fit_id) {
            /* The fit's start on disk, unless the newest checkpoint is the
             * state already: a restart before the fit's first checkpoint
             * then restores its start, where it begins again. */
            if (c->srv->state && !rt_program_ckpt_current(p) &&
                (rc = rt_h_durable_checkpoint(c, p, q->checkpoint_policy)) < 0)
                return rc;
        }
    }
    fit_cb f = {.c = c, .q = q, .every = q->progress_every, .spe = spe, .n = d.n, .bs = bs,
                .gen = gen, .aligned = fr->aligned, .resumable = q->fit_id != 0};
    int cancelled = 0;
    uint64_t exec_ns = 0;
    int64_t steps = 0;
    for (uint32_t ep = ep0; ep < q->epochs && !cancelled && !ended; ep++) {
        int64_t from = ep == ep0 ? pos : 0; /* steps of this epoch run before */
        f.epoch = rt_program_fit_epochs(p) + 1;
        f.in_epoch = from;
        f.samples = 0;
        f.loss_sum = f.acc_sum = 0;
        if ((rc = rt_h_train_x(c, &d)) < 0)
            return rc;
        f.mark = rt_now_ns();
        rt_train_result res;
        char derr[256] = "";
        if ((rc = rt_dist_train(rt_program_exec(p), &d, c->ds->key,
                                spe - from, &res, fit_step_cb, &f, NULL, derr, sizeof derr)) < 0)
            return rt_call_fail(c, rc, "%s", derr);
        rt_program_epoch_clock_pause(p, f.mark);
        exec_ns += res.execute_ns;
        steps += res.steps_run;
        /* an aligned fit is exact between any two steps */
        int partial = res.steps_run > 0 && !f.aligned;
        if (f.ckpt_rc < 0) {
            rt_program_set_partial(p, partial);
            return f.ckpt_rc;
        }
        if (f.nan_stop) {
            rt_program_set_partial(p, partial);
            return nan_fail(c, f.nan_step, f.nan_loss);
        }
        if (f.draining) {
            rt_program_set_partial(p, 0);
            return rt_call_fail(c, RT_EUNAVAILABLE, "the daemon is stopping: the fit stopped "
                                "at step %lld, on disk at exit; reattach after it restarts",
                                (long long)rt_exec_global_step(rt_program_exec(p)));
        }
        if ((res.stopped && !f.stopped) || rt_call_is_cancelled(c)) {
            rt_program_set_partial(p, partial);
            if (__atomic_load_n(&c->srv->hard_cancel, __ATOMIC_ACQUIRE))
                return stopped_fail(c, steps, (int64_t)q->epochs * spe);
            cancelled = 1;
            break;
        }
        /* Control's stop inside the epoch ends the fit without its epoch
         * end; at the epoch's last step the epoch completes first. */
        if (f.stopped && res.steps_run < spe - from) {
            rt_program_set_partial(p, 0); /* the call ends here, at a step boundary */
            if (f.resumable)
                rt_program_fit_end(p, 1);
            break;
        }
        int64_t fit_epoch = rt_program_fit_epoch_end(p);
        uint64_t t0 = rt_now_ns();
        Rtrain__V1__EpochEnd *e = epoch_pb(c, fit_epoch, f.aligned ? &f.ep : &res.mean,
                                           res.global_step, res.execute_ns);
        if (!e)
            return OOM(c);
        rt_metrics vm = {0};
        if (c->val_ds) {
            if ((rc = rt_exec_evaluate(rt_program_exec(p), &vd, &vm)) < 0)
                return rt_h_engine_fail(c, rc);
            if (!(e->val = rt_h_metrics_pb(c, &vm)))
                return OOM(c);
        }
        if (f.resumable) {
            rt_program_fit_keep_epoch(p, &(rt_fit_epoch){
                .epoch = fit_epoch, .steps = res.global_step, .execute_ns = res.execute_ns,
                .has_val = c->val_ds != NULL, .train = f.aligned ? f.ep : res.mean,
                .val = vm});
            /* ended before its checkpoint, so that a resend finds it so */
            if (ep + 1 == q->epochs || f.stopped)
                rt_program_fit_end(p, f.stopped);
        }
        /* An epoch reported is on disk: a restart never runs it again. */
        if (c->srv->state && (rc = rt_h_durable_checkpoint(c, p, q->checkpoint_policy)) < 0)
            return rc;
        c->tm.execute_ns += rt_now_ns() - t0; /* the epoch's validation */
        fit_send_epoch(c, e, f.nan_step);
        if (f.stopped)
            break;
        if (f.resumable && ep + 1 < q->epochs && rt_h_daemon_stopping(c))
            return rt_call_fail(c, RT_EUNAVAILABLE, "the daemon is stopping: the fit stopped "
                                "at the end of epoch %lld, on disk; reattach after it restarts",
                                (long long)fit_epoch);
    }
    rt_train_note_steps(p, exec_ns, steps);
    Rtrain__V1__FitEvent *fin = NEW(c, Rtrain__V1__FitEvent, RTRAIN__V1__FIT_EVENT__INIT);
    if (!fin)
        return OOM(c);
    fin->done = 1;
    fin->cancelled = cancelled;
    fin->stopped = ended ? fr->stopped : f.stopped && !cancelled;
    fin->global_step = (uint64_t)rt_exec_global_step(rt_program_exec(p));
    fit_stamp(c, fin, f.nan_step);
    c->resp = &fin->base;
    char pid[16];
    if (cancelled)
        RT_LOG(RT_LOG_INFO, "fit on %s stopped at step %lld: the client cancelled",
               rt_log_id(rt_program_id(p), pid),
               (long long)rt_exec_global_step(rt_program_exec(p)));
    else if (fin->stopped && !ended)
        RT_LOG(RT_LOG_INFO, "fit on %s stopped at step %lld by a Control call",
               rt_log_id(rt_program_id(p), pid),
               (long long)rt_exec_global_step(rt_program_exec(p)));
    return 0;
}

int rt_h_fit(rt_call *c)
{
    Rtrain__V1__FitRequest *q = REQ(c, Rtrain__V1__FitRequest);
    int rc;
    if ((rc = rt_h_need_program(c, q->session_id, q->program_id)) < 0 ||
        (rc = rt_h_need_train_data(c, q->dataset_id, q->val_dataset_id)) < 0)
        return rc;
    if (q->epochs == 0)
        return rt_call_fail(c, RT_EINVAL, "epochs must be at least 1");
    if ((rc = rt_h_check_lr(c, q->learning_rate)) < 0)
        return rc;
    /* as RunSteps: the running fits stop for the exit checkpoint, and a
     * client reattaches to the next start */
    if ((rc = rt_h_refuse_if_stopping(c)) < 0)
        return rc;
    /* The same per-call cap as RunSteps, on the steps the Fit will really
     * run: without steps_per_epoch an epoch is one pass over the dataset. */
    int64_t bs = rt_plan_config(rt_program_plan(c->prog))->batch_size;
    uint64_t spe = q->steps_per_epoch
                       ? q->steps_per_epoch
                       : (uint64_t)((c->ds->n + (bs > 0 ? bs : 1) - 1) / (bs > 0 ? bs : 1));
    if (spe && (uint64_t)q->epochs > RT_MAX_STEPS_PER_CALL / spe)
        return rt_call_fail(c, RT_ETOOBIG,
                            "Fit of %u epochs x %llu steps is over the limit of %llu steps per call",
                            q->epochs, (unsigned long long)spe, RT_MAX_STEPS_PER_CALL);
    if ((rc = rt_h_check_train_data(c)) < 0)
        return rc;
    c->work = fit_work;
    c->needs_device = 1;
    c->est_ns = UINT64_MAX;
    return 0;
}

/* --------------------------------------------------------------- Evaluate */
static int evaluate_work(rt_call *c)
{
    rt_data d;
    int rc = rt_h_data_for(c, c->ds, &d, 1);
    if (rc < 0)
        return rc;
    rt_metrics m;
    if ((rc = rt_exec_evaluate(rt_program_exec(c->prog), &d, &m)) < 0)
        return rt_h_engine_fail(c, rc);
    Rtrain__V1__EvaluateResponse *r = NEW(c, Rtrain__V1__EvaluateResponse, RTRAIN__V1__EVALUATE_RESPONSE__INIT);
    if (!r || !(r->metrics = rt_h_metrics_pb(c, &m)))
        return OOM(c);
    c->resp = &r->base;
    return 0;
}

static uint64_t forward_estimate(rt_call *c, int64_t n)
{
    int64_t bs = rt_plan_config(rt_program_plan(c->prog))->batch_size;
    if (bs < 1)
        bs = 1;
    return rt_h_clamp_est((double)((n + bs - 1) / bs) * rt_program_step_ns(c->prog) / 2);
}

int rt_h_evaluate(rt_call *c)
{
    Rtrain__V1__EvaluateRequest *q = REQ(c, Rtrain__V1__EvaluateRequest);
    int rc;
    if ((rc = rt_h_need_program(c, q->session_id, q->program_id)) < 0 ||
        (rc = rt_h_need_dataset(c, q->dataset_id, &c->ds, "dataset_id")) < 0 ||
        (rc = rt_h_check_fit(c, c->ds, 1)) < 0)
        return rc;
    c->work = evaluate_work;
    c->needs_device = 1;
    c->est_ns = forward_estimate(c, c->ds->n);
    return 0;
}

/* ---------------------------------------------------------------- Predict */
typedef struct predict_st {
    const float *x;
    int64_t n;
    rt_stream_use su;   /* a streamed dataset: su.st set, x NULL */
} predict_st;

static int predict_work(rt_call *c)
{
    predict_st *ps = c->st;
    int64_t od[RT_MAX_DIMS];
    int on = rt_plan_output_shape(rt_program_plan(c->prog), od);
    if (on < 0)
        return rt_call_fail(c, on, "the program has no output shape");
    int64_t per = rt_data_numel(on, od);
    float *y = rt_call_alloc(c, sizeof(float) * (size_t)(ps->n * per));
    int64_t *shape = rt_call_alloc(c, sizeof(int64_t) * (size_t)(on + 1));
    Rtrain__V1__PredictResponse *r = NEW(c, Rtrain__V1__PredictResponse, RTRAIN__V1__PREDICT_RESPONSE__INIT);
    Rtrain__V1__Tensor *t = NEW(c, Rtrain__V1__Tensor, RTRAIN__V1__TENSOR__INIT);
    if (!y || !shape || !r || !t)
        return OOM(c);
    /* In chunks of whole batches, so a large Predict shares the device at
     * chunk boundaries like Fit does at steps; inference is per sample, so
     * the outputs are those of one call. */
    int64_t id[RT_MAX_DIMS];
    int in = rt_plan_input_shape(rt_program_plan(c->prog), id);
    if (in < 0)
        return rt_call_fail(c, in, "the program has no input shape");
    int64_t in_per = rt_data_numel(in, id);
    int64_t bs = rt_plan_config(rt_program_plan(c->prog))->batch_size;
    if (bs < 1)
        bs = 1;
    if (ps->su.st || ps->su.held) {
        /* a streamed dataset: batch by batch in file order from its
         * workers (a held one: from the replicas), yielding every 16
         * batches */
        ps->su.batch = bs;
        float *xb = rt_call_alloc(c, sizeof(float) * (size_t)(bs * in_per));
        if (!xb)
            return OOM(c);
        for (int64_t pos = 0; pos * bs < ps->n; pos++) {
            int64_t off = pos * bs, cnt = ps->n - off < bs ? ps->n - off : bs;
            char err[240];
            int rc = rt_stream_fill(&ps->su, RT_EPOCH_EVAL, pos, cnt, xb, NULL, NULL, err,
                                    sizeof err);
            if (rc < 0)
                return rt_call_fail(c, rc, "dataset %s: %s", c->ds->id, err);
            /* every batch lands in the same buffer, which rt_exec_predict's
             * once-per-data-set index check would take as checked */
            if ((rc = rt_exec_check_rows(rt_program_exec(c->prog), xb, cnt)) < 0 ||
                (rc = rt_exec_predict(rt_program_exec(c->prog), xb, cnt, y + off * per)) < 0)
                return rt_h_engine_fail(c, rc);
            if (pos % 16 == 15 && off + cnt < ps->n) {
                if (rt_call_is_cancelled(c))
                    return rt_call_fail(c, RT_ECANCELLED, "Predict cancelled");
                rt_call_yield(c);
            }
        }
    }
    int64_t chunk = bs * 16;
    for (int64_t off = 0; !ps->su.st && !ps->su.held && off < ps->n; off += chunk) {
        int64_t cnt = ps->n - off < chunk ? ps->n - off : chunk;
        int rc = rt_exec_predict(rt_program_exec(c->prog), ps->x + off * in_per, cnt,
                                 y + off * per);
        if (rc < 0)
            return rt_h_engine_fail(c, rc);
        if (off + cnt < ps->n) {
            if (rt_call_is_cancelled(c))
                return rt_call_fail(c, RT_ECANCELLED, "Predict cancelled");
            rt_call_yield(c);
        }
    }
    shape[0] = ps->n;
    memcpy(shape + 1, od, sizeof(int64_t) * (size_t)on);
    t->name = "y";
    t->dtype = RTRAIN__V1__DTYPE__F32;
    t->shape = shape;
    t->n_shape = (size_t)on + 1;
    t->data.data = (uint8_t *)y;
    t->data.len = sizeof(float) * (size_t)(ps->n * per);
    r->y = t;
    c->resp = &r->base;
    return 0;
}

int rt_h_predict(rt_call *c)
{
    Rtrain__V1__PredictRequest *q = REQ(c, Rtrain__V1__PredictRequest);
    int rc = rt_h_need_program(c, q->session_id, q->program_id);
    if (rc < 0)
        return rc;
    predict_st *ps = calloc(1, sizeof *ps);
    if (!ps)
        return OOM(c);
    c->st = ps;
    c->st_free = free;
    if (q->input_case == RTRAIN__V1__PREDICT_REQUEST__INPUT_DATASET_ID) {
        if ((rc = rt_h_need_dataset(c, q->dataset_id, &c->ds, "dataset_id")) < 0 ||
            (rc = rt_h_check_fit(c, c->ds, 0)) < 0)
            return rc;
        if (c->ds->stream || c->ds->held)
            ps->su = (rt_stream_use){.st = c->ds->stream,
                                     .seed = rt_plan_config(rt_program_plan(c->prog))->seed,
                                     .held = c->ds->held, .n = c->ds->n};
        ps->x = c->ds->x;
        ps->n = c->ds->n;
    } else if (q->input_case == RTRAIN__V1__PREDICT_REQUEST__INPUT_X) {
        const Rtrain__V1__Tensor *x = q->x;
        int64_t in[RT_MAX_DIMS];
        int in_n = rt_plan_input_shape(rt_program_plan(c->prog), in);
        char a[96], b[96];
        if (x->dtype != RTRAIN__V1__DTYPE__F32)
            return rt_call_fail(c, RT_EDTYPE, "Predict x must be F32");
        if (x->n_shape < 1 || x->n_shape > RT_MAX_DIMS)
            return rt_call_fail(c, RT_ESHAPE, "Predict x needs a shape (samples first)");
        for (size_t i = 0; i < x->n_shape; i++)
            if (x->shape[i] < 0 || x->shape[i] > RT_MAX_DIM_LIMIT)
                return rt_call_fail(c, RT_ESHAPE, "Predict x dim %zu is %lld", i,
                                    (long long)x->shape[i]);
        if (in_n >= 0 && !rt_view_shapes_fit((int)x->n_shape - 1, x->shape + 1, in_n, in))
            return rt_call_fail(c, RT_ESHAPE, "x has samples of shape %s but program %s expects %s%s",
                                rt_data_shape_str((int)x->n_shape - 1, x->shape + 1, a, sizeof a),
                                rt_program_id(c->prog), rt_data_shape_str(in_n, in, b, sizeof b),
                                rt_view_layout_hint((int)x->n_shape - 1, x->shape + 1, in_n, in));
        int64_t n = x->shape[0], numel = rt_data_numel((int)x->n_shape, x->shape);
        if (numel < 0 || numel > (int64_t)(x->data.len / 4) + 1)
            return rt_call_fail(c, RT_ESHAPE, "Predict x shape %s is larger than its %zu bytes",
                                rt_data_shape_str((int)x->n_shape, x->shape, a, sizeof a),
                                x->data.len);
        if ((uint64_t)numel * 4 != x->data.len)
            return rt_call_fail(c, RT_EDATA, "x holds %zu bytes but its shape needs %lld",
                                x->data.len, (long long)numel * 4);
        float *f = rt_call_alloc(c, x->data.len ? x->data.len : 4);
        if (!f)
            return OOM(c);
        if (x->data.len)
            memcpy(f, x->data.data, x->data.len);
        for (int64_t i = 0; i < numel; i++)
            if (!isfinite(f[i]))
                return rt_call_fail(c, RT_ENAN, "x contains %s at sample %lld, column %lld",
                                    isnan(f[i]) ? "NaN" : "Inf", (long long)(i / (numel / (n ? n : 1))),
                                    (long long)(i % (numel / (n ? n : 1))));
        ps->x = f;
        ps->n = n;
    } else {
        return rt_call_fail(c, RT_EINVAL, "PredictRequest needs dataset_id or x");
    }
    c->work = predict_work;
    c->needs_device = 1;
    c->est_ns = forward_estimate(c, ps->n);
    return 0;
}

/* ---------------------------------------------------------------- Control */
/* Answered at once on the call's thread, without the device: the rate goes
 * into the exec atomically (rt_exec_set_lr) and the stop into the program's
 * stop_gen; the running training reads both at its next step boundary. */
int rt_h_control(rt_call *c)
{
    Rtrain__V1__ControlRequest *q = REQ(c, Rtrain__V1__ControlRequest);
    int rc;
    if ((rc = rt_h_need_program(c, q->session_id, q->program_id)) < 0 ||
        (rc = rt_h_check_lr(c, q->learning_rate)) < 0)
        return rc;
    Rtrain__V1__ControlResponse *r =
        NEW(c, Rtrain__V1__ControlResponse, RTRAIN__V1__CONTROL_RESPONSE__INIT);
    if (!r)
        return OOM(c);
    if ((rc = rt_h_apply_lr(c, q->learning_rate)) < 0)
        return rc;
    r->running = rt_program_control(c->prog, q->stop);
    c->resp = &r->base;
    return 0;
}
