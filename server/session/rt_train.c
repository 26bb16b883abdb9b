/* rt_train.c - a program's training use cases (rt_train.h): RunSteps. */
#include "rt_train.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "rt_clock.h"
#include "rt_log.h"
#include "rt_metrics.h"
#include "rt_obs.h"

static int exec_train(rt_exec *e, const rt_data *d, const uint8_t key[16], int64_t steps,
                      rt_train_result *res, rt_step_cb cb, void *ud, float *step_losses,
                      char *err, size_t errlen)
{
    (void)key;
    int rc = rt_exec_train(e, d, steps, res, cb, ud, step_losses);
    if (rc < 0)
        snprintf(err, errlen, "%s", rt_exec_errmsg(e));
    return rc;
}

/* Set before the first call is served and only read after: no lock. */
static rt_trainer_fn trainer = exec_train;

void rt_train_set_trainer(rt_trainer_fn fn)
{
    trainer = fn ? fn : exec_train;
}

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
    snprintf(err, errlen, "cancelled after %lld of %lld steps", (long long)done,
             (long long)asked);
    return RT_ECANCELLED;
}

int rt_train_nan_msg(int64_t step, float loss, char *err, size_t errlen)
{
    snprintf(err, errlen, "loss is %s at step %lld (stop_on_nan): training stopped after that "
             "step; the weights are that step's", isnan(loss) ? "NaN" : "infinite",
             (long long)step);
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

/* The view of ds for training (need_labels), its message naming ds. */
static int view(rt_program *p, rt_dataset *ds, rt_stream_use *use, rt_data *d, char *err,
                size_t errlen)
{
    char e[200];
    int rc = rt_view_make(ds, rt_program_plan(p), 1, use, d, e, sizeof e);
    if (rc < 0)
        snprintf(err, errlen, "dataset %s: %s", ds->id, e);
    return rc;
}

void rt_train_note_steps(rt_program *p, uint64_t ns, int64_t steps)
{
    if (steps <= 0)
        return;
    rt_program_note_steps(p, ns, steps);
    const rt_train_config *tc = rt_plan_config(rt_program_plan(p));
    rt_metrics_steps((uint64_t)steps, (uint64_t)steps * (uint64_t)(tc ? tc->batch_size : 0));
}

int rt_train_checkpoint(rt_state *st, const char *sid, rt_program *p, int cont, char *err,
                        size_t errlen)
{
    char e[300];
    int rc = rt_state_checkpoint(st, sid, p, e, sizeof e);
    if (rc == 0)
        return 0;
    char pid[16];
    RT_LOG(RT_LOG_WARN, "checkpoint of %s at step %lld failed (%s): %s; the one at step %lld "
           "is kept", rt_log_id(rt_program_id(p), pid),
           (long long)rt_exec_global_step(rt_program_exec(p)),
           cont ? "training goes on" : "the call stops", e, (long long)rt_program_ckpt_step(p));
    if (cont)
        return 0;
    snprintf(err, errlen, "checkpoint failed, training stopped at step %lld: %.200s; the "
             "checkpoint at step %lld is kept", (long long)rt_exec_global_step(rt_program_exec(p)),
             e, (long long)rt_program_ckpt_step(p));
    return rc;
}

/* --------------------------------------------------------------- RunSteps */
typedef struct run_cb {
    rt_program *p;
    const rt_train_host *host;
    int stop_for_val;
    int hit_epoch_end;
    int n_epochs;
    int cancelled;
    int oom;
    int stopped;           /* Control's stop */
    uint64_t gen;          /* this call's run_gen */
    uint64_t mark;         /* epoch clock (rt_program_epoch_clock_end) */
    int stop_on_nan;       /* the request's */
    int nan_stop;          /* stopped at a non-finite loss */
    int64_t nan_step;      /* the first step with one, 0 = none */
    float nan_loss;
} run_cb;

static int run_step_cb(void *ud, const rt_step_info *info)
{
    run_cb *r = ud;
    if (r->host->step(r->host->ud, info->step)) {
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
    if (r->host->epoch(r->host->answer_ud, info->epoch, &info->epoch_metrics, info->step,
                       rt_program_epoch_clock_end(r->p, &r->mark)) < 0) {
        r->oom = 1;
        return 1;
    }
    r->n_epochs++;
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
    int rc = view(p, ctx->ds, &ctx->use, &d, err, errlen);
    if (rc == 0 && ctx->val_ds)
        rc = view(p, ctx->val_ds, &ctx->val_use, &vd, err, errlen);
    if (rc < 0)
        return rc;
    if ((rc = rt_program_set_lr(p, in->lr)) < 0)
        return engine_fail(p, rc, err, errlen);
    float *losses = NULL;
    if (in->return_losses && !(losses = ctx->host->losses(ctx->host->answer_ud, in->steps)))
        return oom(err, errlen);
    /* stop at epoch ends to validate, or to draw the next epoch's
     * augmentation; val_at_end validates once, after the last step */
    int val_in = ctx->val_ds && !in->val_at_end;
    run_cb cb = {.p = p, .host = ctx->host, .stop_for_val = val_in || ctx->ds->img != NULL,
                 .gen = rt_program_run_begin(p), .stop_on_nan = in->stop_on_nan};
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
        if ((rc = rt_view_epoch(ctx->ds, rt_program_plan(p), rt_exec_global_step(e), &d, verr,
                                sizeof verr)) < 0) {
            rt_program_run_end(p);
            snprintf(err, errlen, "dataset %s: %s", ctx->ds->id, verr);
            return rc;
        }
        cb.mark = rt_now_ns();
        char derr[256] = "";
        rc = trainer(e, &d, ctx->ds->key, left, &part, run_step_cb,
                     &cb, losses ? losses + done : NULL, derr, sizeof derr);
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
            return rt_train_stopped_msg(ctx->host->hard_cancel(ctx->host->ud),
                                       done + part.steps_run, (int64_t)in->steps, err, errlen);
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
        if (cb.hit_epoch_end && val_in && cb.n_epochs) {
            rt_metrics vm;
            if ((rc = rt_exec_evaluate(e, &vd, &vm)) < 0) {
                rt_program_run_end(p);
                return engine_fail(p, rc, err, errlen);
            }
            if (ctx->host->epoch_val(ctx->host->answer_ud, &vm) < 0) {
                rt_program_run_end(p);
                return oom(err, errlen);
            }
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
    if (ctx->state && (in->checkpoint || rt_state_checkpoint_due(ctx->state, p, in->every_steps,
                                                                 in->every_s))) {
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
    out->losses = losses;
    if (in->val_at_end && ctx->val_ds) {
        if ((rc = rt_exec_evaluate(e, &vd, &out->val)) < 0)
            return engine_fail(p, rc, err, errlen);
        out->has_val = 1;
    }
    return 0;
}
