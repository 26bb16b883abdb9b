/* rt_train.c - a program's training use cases (rt_train.h): RunSteps. */
#include "rt_train.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "rt_clock.h"
#include "rt_errf.h"
#include "rt_log.h"
#include "rt_metrics.h"
#include "rt_obs.h"

static int exec_train(rt_exec *e, const rt_data *d, const uint8_t key[16], int64_t steps,
                      rt_train_result *res, rt_step_cb cb, void *ud, float *step_losses, char *err,
                      size_t errlen)
{
    (void)key;
    int rc = rt_exec_train(e, d, steps, res, cb, ud, step_losses);
    if (rc < 0)
        snprintf(err, errlen, "%s", rt_exec_errmsg(e));
    return rc;
}

/* Set before the first call is served and only read after: no lock. */
static rt_trainer_fn trainer = exec_train;

void rt_train_set_trainer(rt_trainer_fn fn) { trainer = fn ? fn : exec_train; }

static int engine_fail(rt_program *p, int rc, char *err, size_t errlen)
{
    const char *m = rt_exec_errmsg(rt_program_exec(p));
    snprintf(err, errlen, "%.240s", m && *m ? m : rt_strerror(rc));
    return rc;
}

static int oom(char *err, size_t errlen)
{
    snprintf(err, errlen, "out of memory");
    return RT_ENOMEM;
}

int rt_train_stopped_msg(int hard, int64_t done, int64_t asked, char *err, size_t errlen)
{
    if (hard) {
        snprintf(err, errlen, "the daemon is shutting down: stopped after %lld of %lld steps",
                 (long long)done, (long long)asked);
        return RT_EUNAVAILABLE;
    }
    snprintf(err, errlen, "cancelled after %lld of %lld steps", (long long)done, (long long)asked);
    return RT_ECANCELLED;
}

int rt_train_nan_msg(int64_t step, float loss, char *err, size_t errlen)
{
    snprintf(err, errlen,
             "loss is %s at step %lld (stop_on_nan): training stopped after that "
             "step; the weights are that step's",
             isnan(loss) ? "NaN" : "infinite", (long long)step);
    return RT_ESTATE;
}

int rt_train_non_finite(int64_t *first, int stop_on_nan, int *stopped, const rt_step_info *info)
{
    if (isfinite(info->loss))
        return 0;
    if (!*first)
        *first = info->step;
    if (!stop_on_nan)
        return 0;
    *stopped = 1;
    return 1;
}

static int flag(const int *f) { return f && __atomic_load_n(f, __ATOMIC_ACQUIRE); }

static int host_cancelled(const rt_train_host *h)
{
    return flag(h->flags.cancelled) || flag(h->flags.hard_cancel);
}

/* A step boundary: up to the caller only for the device's time slice (a
 * call waits for it) or a pause; 1 when the call was cancelled. */
static int step_point(const rt_train_host *h, int64_t step)
{
    if (flag(h->flags.waiting) || (h->flags.pause_at > 0 && step >= h->flags.pause_at))
        return h->step(h->ud, step);
    return host_cancelled(h);
}

/* The view of ds for training (need_labels), its message naming ds. */
static int view(rt_program *p, rt_dataset *ds, rt_stream_use *use, rt_data *d, char *err,
                size_t errlen)
{
    char e[200];
    int rc = rt_view_make(ds, rt_program_view(p), 1, use, d, e, sizeof e);
    if (rc < 0)
        snprintf(err, errlen, "dataset %s: %s", ds->id, e);
    return rc;
}

/* A training call's data: the set and, when given, the validation set. */
static int views(rt_program *p, rt_train_ctx *ctx, rt_data *d, rt_data *vd, char *err,
                 size_t errlen)
{
    int rc = view(p, ctx->ds, &ctx->use, d, err, errlen);
    if (rc == 0 && ctx->val_ds)
        rc = view(p, ctx->val_ds, &ctx->val_use, vd, err, errlen);
    return rc;
}

static int train_find(rt_session_table *t, rt_data_store *store, const rt_principal *who,
                      const rt_train_open_in *in, rt_train_refs *out, char *err, size_t errlen)
{
    int rc = rt_session_lookup(t, who, in->sid, in->pid, &out->sess, &out->prog, err, errlen);
    if (rc == 0 && in->did)
        rc = rt_data_store_lookup(store, who, in->did, "dataset_id", &out->ds, err, errlen);
    if (rc == 0 && in->val_did && *in->val_did)
        rc = rt_data_store_lookup(store, who, in->val_did, "val_dataset_id", &out->val_ds, err,
                                  errlen);
    return rc;
}

/* Fit: the same per-call cap as RunSteps, on the steps the Fit will
 * really run: without steps_per_epoch an epoch is one pass over the data
 * set. */
static int fit_cap(const rt_train_open_in *in, const rt_dataset *ds, int64_t bs, char *err,
                   size_t errlen)
{
    if (bs < 1)
        bs = 1;
    uint64_t spe = in->steps_per_epoch ? in->steps_per_epoch : (uint64_t)((ds->n + bs - 1) / bs);
    if (spe && (uint64_t)in->epochs > in->max_steps / spe)
        return rt_errf(err, errlen, RT_ETOOBIG,
                       "Fit of %u epochs x %llu steps is over the limit of %llu steps per call",
                       in->epochs, (unsigned long long)spe, (unsigned long long)in->max_steps);
    return 0;
}

/* An estimate in ns for the scheduler, capped. */
static uint64_t clamp_est(double ns)
{
    return ns > 1e18 ? (uint64_t)1e18 : ns > 0 ? (uint64_t)ns : 0;
}

/* The call's time on the device: its steps, or n samples forward in
 * batches of bs at half a training step each. */
static uint64_t estimate(const rt_train_open_in *in, const rt_train_refs *r, int64_t bs,
                         double step_ns)
{
    if (!in->forward)
        return clamp_est((double)in->steps * step_ns);
    int64_t n = in->forward_n ? in->forward_n : r->ds ? r->ds->n : 0;
    if (bs < 1)
        bs = 1;
    return clamp_est((double)((n + bs - 1) / bs) * step_ns / 2);
}

/* Floats per sample of n dims d, -1 when n < 0 (none). */
static int64_t per_sample(int n, const int64_t *d)
{
    if (n < 0)
        return -1;
    int64_t k = 1;
    for (int i = 0; i < n; i++)
        k *= d[i];
    return k;
}

int rt_train_open_x(const rt_train_x *x, const rt_view_spec *v, const char *pid, char *err,
                    size_t errlen)
{
    char a[96], b[96];
    const int sn = x->n_shape - 1;
    if (v->in_n >= 0 && !rt_view_shapes_fit(sn, x->shape + 1, v->in_n, v->in))
        return rt_errf(err, errlen, RT_ESHAPE,
                       "x has samples of shape %s but program %s expects %s%s",
                       rt_data_shape_str(sn, x->shape + 1, a, sizeof a), pid,
                       rt_data_shape_str(v->in_n, v->in, b, sizeof b),
                       rt_view_layout_hint(sn, x->shape + 1, v->in_n, v->in));
    int64_t n = x->shape[0], numel = rt_data_numel(x->n_shape, x->shape);
    if (numel < 0 || numel > (int64_t)(x->len / 4) + 1)
        return rt_errf(err, errlen, RT_ESHAPE, "Predict x shape %s is larger than its %zu bytes",
                       rt_data_shape_str(x->n_shape, x->shape, a, sizeof a), x->len);
    if ((uint64_t)numel * 4 != x->len)
        return rt_errf(err, errlen, RT_EDATA, "x holds %zu bytes but its shape needs %lld", x->len,
                       (long long)numel * 4);
    const unsigned char *d = x->data;
    for (int64_t i = 0; i < numel; i++) {
        float f;
        memcpy(&f, d + 4 * i, 4);
        if (!isfinite(f))
            return rt_errf(err, errlen, RT_ENAN, "x contains %s at sample %lld, column %lld",
                           isnan(f) ? "NaN" : "Inf", (long long)(i / (numel / (n ? n : 1))),
                           (long long)(i % (numel / (n ? n : 1))));
    }
    return 0;
}

int rt_train_open(rt_session_table *t, rt_data_store *store, const rt_principal *who,
                  const rt_train_open_in *in, rt_train_open_out *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    int rc = train_find(t, store, who, in, &out->refs, err, errlen);
    if (rc < 0)
        return rc;
    const rt_train_refs *r = &out->refs;
    const rt_view_spec *v = rt_program_view(r->prog);
    out->view = v;
    out->pipe = rt_program_pipe_marks(r->prog);
    out->batch_size = v->batch_size;
    if (in->forward) {
        out->out_n = rt_program_output_shape(r->prog, out->out);
        out->out_per = per_sample(out->out_n, out->out);
        out->in_per = per_sample(v->in_n, v->in);
    }
    if (!in->check)
        return 0;
    if (in->epochs && (rc = fit_cap(in, r->ds, v->batch_size, err, errlen)) < 0)
        return rc;
    const char *pid = rt_program_id(r->prog);
    if (in->x && (rc = rt_train_open_x(in->x, v, pid, err, errlen)) < 0)
        return rc;
    if (r->ds)
        rc = rt_view_check(r->ds, v, pid, !in->unlabelled, err, errlen);
    if (rc == 0 && r->val_ds)
        rc = rt_view_check(r->val_ds, v, pid, 1, err, errlen);
    if (rc == 0) {
        out->step_ns = rt_program_step_ns(r->prog);
        out->est_ns = estimate(in, r, v->batch_size, out->step_ns);
    }
    return rc;
}

void rt_train_note_steps(rt_program *p, uint64_t ns, int64_t steps)
{
    if (steps <= 0)
        return;
    rt_program_note_steps(p, ns, steps);
    rt_metrics_steps((uint64_t)steps, (uint64_t)steps * (uint64_t)rt_program_view(p)->batch_size);
}

int rt_train_checkpoint(rt_state *st, const char *sid, rt_program *p, int cont, char *err,
                        size_t errlen)
{
    char e[300];
    if (rt_program_dropped(p))
        return 0; /* DropProgram removed its files: none come back */
    int rc = rt_state_checkpoint(st, sid, p, e, sizeof e);
    if (rc == 0)
        return 0;
    char pid[16];
    RT_LOG(RT_LOG_WARN,
           "checkpoint of %s at step %lld failed (%s): %s; the one at step %lld "
           "is kept",
           rt_log_id(rt_program_id(p), pid), (long long)rt_exec_global_step(rt_program_exec(p)),
           cont ? "training goes on" : "the call stops", e, (long long)rt_program_ckpt_step(p));
    if (cont)
        return 0;
    snprintf(err, errlen,
             "checkpoint failed, training stopped at step %lld: %.200s; the "
             "checkpoint at step %lld is kept",
             (long long)rt_exec_global_step(rt_program_exec(p)), e,
             (long long)rt_program_ckpt_step(p));
    return rc;
}

/* --------------------------------------------------------------- RunSteps */
typedef struct run_cb {
    rt_program *p;
    const rt_train_host *host;
    const rt_run_steps_in *in;
    rt_run_steps_out *out;
    size_t cap; /* out->epochs' room */
    int stop_for_val;
    int hit_epoch_end;
    int cancelled;
    int oom;
    int stopped;      /* Control's stop */
    uint64_t gen;     /* this call's run_gen */
    uint64_t mark;    /* epoch clock (rt_program_epoch_clock_end) */
    int stop_on_nan;  /* the request's */
    int nan_stop;     /* stopped at a non-finite loss */
    int64_t nan_step; /* the first step with one, 0 = none */
    float nan_loss;
} run_cb;

static int run_step_cb(void *ud, const rt_step_info *info)
{
    run_cb *r = ud;
    if (step_point(r->host, info->step)) {
        r->cancelled = 1;
        return 1;
    }
    if (rt_train_non_finite(&r->nan_step, r->stop_on_nan, &r->nan_stop, info)) {
        r->nan_loss = info->loss;
        return 1;
    }
    if (rt_program_stop_asked(r->p, r->gen))
        r->stopped = 1;
    if (!info->epoch_end)
        return r->stopped;
    rt_run_steps_out *o = r->out;
    if (o->n_epochs == r->cap) {
        size_t nc = r->cap ? r->cap * 2 : 8;
        rt_run_epoch **nv = r->in->alloc(r->in->alloc_ud, sizeof *nv * nc);
        if (!nv) {
            r->oom = o->alloc_failed = 1;
            return 1;
        }
        if (o->n_epochs)
            memcpy(nv, o->epochs, sizeof *nv * o->n_epochs);
        o->epochs = nv;
        r->cap = nc;
    }
    rt_run_epoch *ee = r->in->alloc(r->in->alloc_ud, sizeof *ee);
    if (!ee) {
        r->oom = o->alloc_failed = 1;
        return 1;
    }
    o->epochs[o->n_epochs++] = ee;
    ee->epoch = info->epoch;
    ee->step = info->step;
    ee->exec_ns = rt_program_epoch_clock_end(r->p, &r->mark);
    ee->has_val = 0;
    ee->train = info->epoch_metrics;
    r->hit_epoch_end = 1;
    /* Stop here so the caller can validate between epochs. */
    return r->stop_for_val || r->stopped;
}

int rt_program_run_steps(rt_program *p, rt_train_ctx *ctx, const rt_run_steps_in *in,
                         rt_run_steps_out *out, char *err, size_t errlen)
{
    rt_exec *e = rt_program_exec(p);
    memset(out, 0, sizeof *out);
    rt_seq_rec rec;
    if (rt_program_replay(p, in->seq, &rec)) {
        out->replayed = 1;
        out->global_step = rt_exec_global_step(e);
        if (rec.seq == in->seq) { /* it ran: the original answer */
            out->recorded = 1;
            out->recorded_step = rec.global_step;
        }
        out->last = rec.last;
        out->mean = rec.mean;
        return 0;
    }
    rt_data d, vd;
    int rc = views(p, ctx, &d, &vd, err, errlen);
    if (rc < 0)
        return rc;
    if ((rc = rt_program_set_lr(p, in->lr)) < 0)
        return engine_fail(p, rc, err, errlen);
    float *losses = in->losses;
    /* stop at epoch ends to validate, or to draw the next epoch's
     * augmentation; val_at_end validates once, after the last step */
    int val_in = ctx->val_ds && !in->val_at_end;
    run_cb cb = {.p = p,
                 .host = ctx->host,
                 .in = in,
                 .out = out,
                 .stop_for_val = val_in || rt_view_augments(ctx->ds),
                 .gen = rt_program_run_begin(p),
                 .stop_on_nan = in->stop_on_nan};
    int64_t left = (int64_t)in->steps, done = 0;
    double loss_sum = 0, acc_sum = 0;
    int64_t samples = 0;
    rt_train_result res;
    memset(&res, 0, sizeof res);
    uint64_t exec_ns = 0;
    while (left > 0) {
        rt_train_result part;
        cb.hit_epoch_end = 0;
        char verr[200];
        /* the step only matters to a set with augmentation (its epoch's
         * images), as stop_for_val knows */
        int64_t gs = rt_view_augments(ctx->ds) ? rt_exec_global_step(e) : 0;
        if ((rc = rt_view_epoch(ctx->ds, rt_program_view(p), gs, NULL, &d, verr, sizeof verr)) <
            0) {
            rt_program_run_end(p);
            snprintf(err, errlen, "dataset %s: %s", ctx->ds->id, verr);
            return rc;
        }
        cb.mark = rt_now_ns();
        char derr[256] = "";
        rc = trainer(e, &d, ctx->ds->key, left, &part, run_step_cb, &cb,
                     losses ? losses + done : NULL, derr, sizeof derr);
        if (rc < 0) {
            rt_program_run_end(p);
            snprintf(err, errlen, "%s", derr);
            return rc;
        }
        rt_program_epoch_clock_pause(p, cb.mark);
        exec_ns += part.execute_ns;
        if (cb.oom) {
            rt_program_run_end(p);
            return oom(err, errlen);
        }
        if (cb.cancelled) {
            rt_program_run_end(p);
            rt_program_set_partial(p, done + part.steps_run > 0);
            return rt_train_stopped_msg(flag(ctx->host->flags.hard_cancel), done + part.steps_run,
                                        (int64_t)in->steps, err, errlen);
        }
        if (cb.nan_stop) {
            rt_program_run_end(p);
            rt_program_set_partial(p, 1);
            return rt_train_nan_msg(cb.nan_step, cb.nan_loss, err, errlen);
        }
        left -= part.steps_run;
        done += part.steps_run;
        loss_sum += part.mean.loss * (double)part.mean.samples;
        acc_sum += part.mean.acc * (double)part.mean.samples;
        samples += part.mean.samples;
        res = part;
        if (cb.hit_epoch_end && val_in && out->n_epochs) {
            rt_run_epoch *ee = out->epochs[out->n_epochs - 1];
            if ((rc = rt_exec_evaluate(e, &vd, &ee->val)) < 0) {
                rt_program_run_end(p);
                return engine_fail(p, rc, err, errlen);
            }
            ee->has_val = 1;
        }
        if (cb.stopped)
            break;
        if (part.steps_run == 0)
            break; /* defensive: the engine made no progress */
    }
    rt_program_run_end(p);
    out->stopped = cb.stopped;
    rt_train_note_steps(p, exec_ns, done);
    rt_metrics mean = {.loss = samples ? loss_sum / (double)samples : NAN,
                       .acc = samples ? acc_sum / (double)samples : NAN,
                       .samples = samples};
    rt_program_run_done(p, in->seq, &res.last, &mean);
    if (ctx->state &&
        (in->checkpoint || rt_state_checkpoint_due(ctx->state, p, in->every_steps, in->every_s))) {
        uint64_t t0 = rt_now_ns();
        rc = rt_train_checkpoint(ctx->state, ctx->sid, p, in->ckpt_continue, err, errlen);
        out->durable_ns = rt_now_ns() - t0;
        if (rc < 0)
            return rc;
    }
    out->global_step = rt_exec_global_step(e);
    out->nan_step = cb.nan_step;
    out->last = res.last;
    out->mean = mean;
    out->done = done;
    if (in->val_at_end && ctx->val_ds) {
        if ((rc = rt_exec_evaluate(e, &vd, &out->val)) < 0)
            return engine_fail(p, rc, err, errlen);
        out->has_val = 1;
    }
    return 0;
}

/* ---------------------------------------------------- Evaluate, Predict */
int rt_program_evaluate(rt_program *p, rt_train_ctx *ctx, rt_metrics *m, char *err, size_t errlen)
{
    rt_data d;
    int rc = view(p, ctx->ds, &ctx->use, &d, err, errlen);
    if (rc < 0)
        return rc;
    if ((rc = rt_exec_evaluate(rt_program_exec(p), &d, m)) < 0)
        return engine_fail(p, rc, err, errlen);
    return 0;
}

/* Between two chunks of a Predict: 1 when the call was cancelled (the
 * caller's message), else the device goes to a waiting call for a while. */
static int predict_point(const rt_train_host *h)
{
    if (host_cancelled(h))
        return 1;
    if (flag(h->flags.waiting))
        h->yield(h->ud);
    return 0;
}

static int predict_cancelled(char *err, size_t errlen)
{
    snprintf(err, errlen, "Predict cancelled");
    return RT_ECANCELLED;
}

int rt_program_predict(rt_program *p, rt_train_ctx *ctx, const rt_predict_in *in, char *err,
                       size_t errlen)
{
    rt_exec *e = rt_program_exec(p);
    const rt_view_spec *v = rt_program_view(p);
    const rt_train_host *h = ctx->host;
    int64_t bs = v->batch_size < 1 ? 1 : v->batch_size, n = in->n, per = in->out_per;
    /* a stateful RNN refuses a part batch: before any piece moves its states */
    int rc = rt_exec_check_stateful_n(e, n);
    if (rc < 0)
        return engine_fail(p, rc, err, errlen);
    const rt_dataset *ds = in->x ? NULL : ctx->ds;
    if (ds && (ds->stream || ds->held)) {
        /* a streamed dataset: batch by batch in file order from its
         * workers (a held one: from the replicas), yielding every 16
         * batches */
        rt_stream_use su = {
            .st = ds->stream, .seed = v->seed, .batch = bs, .held = ds->held, .n = ds->n};
        for (int64_t pos = 0; pos * bs < n; pos++) {
            int64_t off = pos * bs, cnt = n - off < bs ? n - off : bs;
            char serr[240];
            rc =
                rt_stream_fill(&su, RT_EPOCH_EVAL, pos, cnt, in->xb, NULL, NULL, serr, sizeof serr);
            if (rc < 0)
                return rt_errf(err, errlen, rc, "dataset %s: %s", ds->id, serr);
            /* every batch lands in the same buffer, which rt_exec_predict's
             * once-per-data-set index check would take as checked */
            if ((rc = rt_exec_check_rows(e, in->xb, cnt)) < 0 ||
                (rc = rt_exec_predict(e, in->xb, cnt, in->y + off * per)) < 0)
                return engine_fail(p, rc, err, errlen);
            if (pos % 16 == 15 && off + cnt < n && predict_point(h))
                return predict_cancelled(err, errlen);
        }
        return 0;
    }
    /* In chunks of whole batches, so a large Predict shares the device at
     * chunk boundaries like Fit does at steps; inference is per sample, so
     * the outputs are those of one call. */
    const float *x = in->x ? in->x : ds->x;
    int64_t chunk = bs * 16;
    for (int64_t off = 0; off < n; off += chunk) {
        int64_t cnt = n - off < chunk ? n - off : chunk;
        if ((rc = rt_exec_predict(e, x + off * in->in_per, cnt, in->y + off * per)) < 0)
            return engine_fail(p, rc, err, errlen);
        if (off + cnt < n && predict_point(h))
            return predict_cancelled(err, errlen);
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
    rt_program *p;
    const rt_train_ctx *ctx;
    const rt_fit_in *in;
    rt_fit_out *out; /* its durable_ns */
    char *err;       /* the call's, for an interval checkpoint's failure */
    size_t errlen;
    int64_t epoch, spe, in_epoch;
    int64_t n, bs; /* dataset samples, batch size */
    double loss_sum, acc_sum;
    int64_t samples;
    uint64_t mark;    /* epoch clock (rt_program_epoch_clock_end) */
    uint64_t gen;     /* this call's run_gen */
    int stopped;      /* Control's stop */
    int aligned;      /* rt_fit_rec.aligned */
    int resumable;    /* the request has a fit_id */
    int draining;     /* stopped for a stopping daemon's exit checkpoint */
    int ckpt_rc;      /* an interval checkpoint failed (the call fails) */
    rt_metrics ep;    /* aligned: the epoch's metrics at its last step */
    float last_lr;    /* the previous step's rate (0 before the first) */
    int nan_stop;     /* stopped at a non-finite loss (stop_on_nan) */
    int64_t nan_step; /* the first step with one, 0 = none */
    float nan_loss;
} fit_cb;

/* The fit's checkpoint, its time added to out->durable_ns. */
static int fit_checkpoint(const rt_train_ctx *ctx, rt_program *p, const rt_fit_in *in,
                          rt_fit_out *out, char *err, size_t errlen)
{
    uint64_t t0 = rt_now_ns();
    int rc = rt_train_checkpoint(ctx->state, ctx->sid, p, in->ckpt_continue, err, errlen);
    out->durable_ns += rt_now_ns() - t0;
    return rc;
}

static int fit_step_cb(void *ud, const rt_step_info *info)
{
    fit_cb *f = ud;
    rt_program *p = f->p;
    const rt_train_host *h = f->ctx->host;
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
    if (step_point(h, info->step))
        return 1;
    if (rt_train_non_finite(&f->nan_step, f->in->stop_on_nan, &f->nan_stop, info)) {
        f->nan_loss = info->loss;
        return 1;
    }
    /* A new rate is reported at its first step, uncoalesced (StepProgress.
     * learning_rate), so a client can replay the run exactly. */
    int lr_changed = f->last_lr > 0 && info->lr != f->last_lr;
    f->last_lr = info->lr;
    if (rt_program_stop_asked(p, f->gen))
        f->stopped = 1;
    if ((f->in->progress_every && f->in_epoch % f->in->progress_every == 0 &&
         f->in_epoch < f->spe) ||
        lr_changed) {
        rt_fit_progress pr = {.step = info->step,
                              .epoch = f->epoch,
                              .step_in_epoch = f->in_epoch,
                              .steps_per_epoch = f->spe,
                              .loss = (float)(f->loss_sum / (double)f->samples),
                              .acc = (float)(f->acc_sum / (double)f->samples),
                              .lr = info->lr,
                              .nan_step = f->nan_step};
        h->progress(h->answer_ud, &pr, !lr_changed);
    }
    /* Between two steps of an epoch the exec's state is exact for an
     * aligned fit (the epoch's last step is the caller's: the engine moves
     * its cursor after this callback). */
    if (f->aligned && !info->epoch_end && !f->stopped && f->ctx->state) {
        if (f->resumable && h->stopping(h->ud)) {
            f->draining = 1;
            return 1;
        }
        if (rt_state_checkpoint_due(f->ctx->state, p, f->in->every_steps, f->in->every_s)) {
            int rc = fit_checkpoint(f->ctx, p, f->in, f->out, f->err, f->errlen);
            if (rc < 0) {
                f->ckpt_rc = rc;
                return 1;
            }
        }
    }
    return f->stopped;
}

/* A resent Fit: where the fit stands on this daemon (its state may have
 * been restored from disk), after sending again the EpochEnds the client
 * did not get. *pos gets the steps already run of the current epoch. 1
 * when the fit had ended (only its final event is left). */
static int fit_resume(rt_program *p, const rt_train_host *h, const rt_fit_in *in, int64_t spe,
                      int64_t *pos, char *err, size_t errlen)
{
    const rt_fit_rec *r = rt_program_fit(p);
    unsigned long long id = (unsigned long long)in->fit_id;
    if (r->epochs != in->epochs || r->spe != spe)
        return rt_errf(err, errlen, RT_EINVAL,
                       "fit %016llx was started with %u epochs of %lld "
                       "steps, not %u of %lld",
                       id, r->epochs, (long long)r->spe, in->epochs, (long long)spe);
    int64_t done = rt_program_fit_epochs(p) - r->first_epoch;
    if ((int64_t)in->epochs_received > done)
        return rt_errf(err, errlen, RT_ESTATE,
                       "fit %016llx: the daemon's state is at epoch "
                       "%lld of it, but the client has %u epochs (a newer checkpoint was lost)",
                       id, (long long)done, in->epochs_received);
    for (int64_t k = (int64_t)in->epochs_received + 1; k <= done; k++) {
        if (done - k >= RT_FIT_RING)
            return rt_errf(err, errlen, RT_ESTATE,
                           "fit %016llx: epoch %lld's result is no "
                           "longer kept (the last %d are)",
                           id, (long long)k, RT_FIT_RING);
        int rc = h->epoch_end(h->answer_ud, rt_program_fit_epoch(p, k), 0, 0);
        if (rc < 0)
            return rc;
    }
    if (r->done)
        return 1;
    *pos = r->steps_done - done * spe;
    if (*pos < 0 || *pos >= spe)
        return rt_errf(err, errlen, RT_ESTATE,
                       "fit %016llx: %lld steps run do not fit %lld "
                       "epochs of %lld",
                       id, (long long)r->steps_done, (long long)done, (long long)spe);
    if (*pos && !r->aligned)
        return rt_errf(err, errlen, RT_ESTATE,
                       "fit %016llx stopped inside an epoch that is not "
                       "the data set's (steps_per_epoch): it resumes only at epoch ends",
                       id);
    return 0;
}

/* The fit's epochs; *ended: a resent fit that had ended (its stop is the
 * record's). */
static int fit_loop(rt_program *p, rt_train_ctx *ctx, const rt_fit_in *in, uint64_t gen,
                    rt_fit_out *out, int *ended_out, char *err, size_t errlen)
{
    const rt_train_host *h = ctx->host;
    rt_data d, vd;
    int rc = views(p, ctx, &d, &vd, err, errlen);
    if (rc < 0)
        return rc;
    int64_t bs = rt_program_view(p)->batch_size;
    int64_t spe = in->steps_per_epoch ? (int64_t)in->steps_per_epoch : (d.n + bs - 1) / bs;
    const rt_fit_rec *fr = rt_program_fit(p);
    int resume = in->fit_id && fr->id == in->fit_id;
    int64_t pos = 0;
    uint32_t ep0 = 0;
    int ended = 0;
    if (resume) {
        char pid[16];
        if ((rc = fit_resume(p, h, in, spe, &pos, err, errlen)) < 0)
            return rc;
        ended = rc;
        ep0 = (uint32_t)(rt_program_fit_epochs(p) - fr->first_epoch);
        RT_LOG(RT_LOG_INFO, "fit %016llx on %s resumed at epoch %u step %lld",
               (unsigned long long)in->fit_id, rt_log_id(rt_program_id(p), pid), ep0 + 1,
               (long long)rt_exec_global_step(rt_program_exec(p)));
    } else {
        if (in->fit_id && in->epochs_received)
            return rt_errf(err, errlen, RT_ESTATE,
                           "fit %016llx is unknown here, but the "
                           "client has %u of its epochs (the daemon's state predates them)",
                           (unsigned long long)in->fit_id, in->epochs_received);
        /* a resumed fit keeps the rate it has (a Control call may have
         * changed the request's) */
        if ((rc = rt_program_set_lr(p, in->lr)) < 0)
            return engine_fail(p, rc, err, errlen);
        int64_t cur_ep, cur_pos;
        rt_exec_cursor(rt_program_exec(p), &cur_ep, &cur_pos);
        rt_program_fit_begin(p, in->fit_id, spe, in->epochs,
                             spe == (d.n + bs - 1) / bs && cur_pos == 0);
        /* The fit's start on disk, unless the newest checkpoint is the
         * state already: a restart before the fit's first checkpoint then
         * restores its start, where it begins again. */
        if (in->fit_id && ctx->state && !rt_program_ckpt_current(p) &&
            (rc = fit_checkpoint(ctx, p, in, out, err, errlen)) < 0)
            return rc;
    }
    fit_cb f = {.p = p,
                .ctx = ctx,
                .in = in,
                .out = out,
                .err = err,
                .errlen = errlen,
                .spe = spe,
                .n = d.n,
                .bs = bs,
                .gen = gen,
                .aligned = fr->aligned,
                .resumable = in->fit_id != 0};
    int cancelled = 0;
    uint64_t exec_ns = 0;
    int64_t steps = 0;
    for (uint32_t ep = ep0; ep < in->epochs && !cancelled && !ended; ep++) {
        int64_t from = ep == ep0 ? pos : 0; /* steps of this epoch run before */
        f.epoch = rt_program_fit_epochs(p) + 1;
        f.in_epoch = from;
        f.samples = 0;
        f.loss_sum = f.acc_sum = 0;
        char verr[200];
        /* the step only matters to a set with augmentation (its epoch's
         * images), as in RunSteps */
        int64_t gs = rt_view_augments(ctx->ds) ? rt_exec_global_step(rt_program_exec(p)) : 0;
        if ((rc = rt_view_epoch(ctx->ds, rt_program_view(p), gs, &in->chunk, &d, verr,
                                sizeof verr)) < 0)
            return rt_errf(err, errlen, rc, "dataset %s: %s", ctx->ds->id, verr);
        f.mark = rt_now_ns();
        rt_train_result res;
        char derr[256] = "";
        if ((rc = trainer(rt_program_exec(p), &d, ctx->ds->key, spe - from, &res, fit_step_cb, &f,
                          NULL, derr, sizeof derr)) < 0)
            return rt_errf(err, errlen, rc, "%s", derr);
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
            return rt_train_nan_msg(f.nan_step, f.nan_loss, err, errlen);
        }
        if (f.draining) {
            rt_program_set_partial(p, 0);
            return rt_errf(err, errlen, RT_EUNAVAILABLE,
                           "the daemon is stopping: the fit "
                           "stopped at step %lld, on disk at exit; reattach after it restarts",
                           (long long)rt_exec_global_step(rt_program_exec(p)));
        }
        if ((res.stopped && !f.stopped) || host_cancelled(h)) {
            rt_program_set_partial(p, partial);
            if (flag(h->flags.hard_cancel))
                return rt_train_stopped_msg(1, steps, (int64_t)in->epochs * spe, err, errlen);
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
        rt_fit_epoch fe = {.epoch = fit_epoch,
                           .steps = res.global_step,
                           .execute_ns = res.execute_ns,
                           .has_val = ctx->val_ds != NULL,
                           .train = f.aligned ? f.ep : res.mean};
        if (ctx->val_ds && (rc = rt_exec_evaluate(rt_program_exec(p), &vd, &fe.val)) < 0)
            return engine_fail(p, rc, err, errlen);
        if (f.resumable) {
            rt_program_fit_keep_epoch(p, &fe);
            /* ended before its checkpoint, so that a resend finds it so */
            if (ep + 1 == in->epochs || f.stopped)
                rt_program_fit_end(p, f.stopped);
        }
        /* An epoch reported is on disk: a restart never runs it again. */
        if (ctx->state && (rc = fit_checkpoint(ctx, p, in, out, err, errlen)) < 0)
            return rc;
        if ((rc = h->epoch_end(h->answer_ud, &fe, f.nan_step, rt_now_ns() - t0)) < 0)
            return rc;
        if (f.stopped)
            break;
        if (f.resumable && ep + 1 < in->epochs && h->stopping(h->ud))
            return rt_errf(err, errlen, RT_EUNAVAILABLE,
                           "the daemon is stopping: the fit "
                           "stopped at the end of epoch %lld, on disk; reattach after it "
                           "restarts",
                           (long long)fit_epoch);
    }
    rt_train_note_steps(p, exec_ns, steps);
    out->cancelled = cancelled;
    out->stopped = ended ? fr->stopped : f.stopped && !cancelled;
    out->nan_step = f.nan_step;
    *ended_out = ended;
    return 0;
}

int rt_program_fit_run(rt_program *p, rt_train_ctx *ctx, const rt_fit_in *in, rt_fit_out *out,
                       char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    uint64_t gen = rt_program_run_begin(p);
    int ended = 0;
    int rc = fit_loop(p, ctx, in, gen, out, &ended, err, errlen);
    rt_program_run_end(p);
    if (rc < 0)
        return rc;
    /* the program's records first, then the exec's step for the answer */
    out->global_step = rt_exec_global_step(rt_program_exec(p));
    char pid[16];
    if (out->cancelled)
        RT_LOG(RT_LOG_INFO, "fit on %s stopped at step %lld: the client cancelled",
               rt_log_id(rt_program_id(p), pid), (long long)out->global_step);
    else if (out->stopped && !ended)
        RT_LOG(RT_LOG_INFO, "fit on %s stopped at step %lld by a Control call",
               rt_log_id(rt_program_id(p), pid), (long long)out->global_step);
    return 0;
}
