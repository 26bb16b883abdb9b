/* rt_client_train.c - the steps-per-call training loop (rt_client_train_steps;
 * its semantics are in rtrain.h). Each call goes through the public
 * rt_client_run_steps and rt_client_evaluate, so every call is accounted for
 * and traced like any other. */
#include "rt_client_impl.h"

#include <math.h>
#include <string.h>

/* The epoch's running account: sample-weighted sums of the calls' means. */
typedef struct epoch_acc {
    double loss, acc;
    uint64_t samples, execute_ns, done;
} epoch_acc;

static double wmean(double sum, uint64_t n) { return n ? sum / (double)n : NAN; }

static int check_params(rt_client *c, const rt_client_train_params *p)
{
    int rc = rt__check_id(c, "session", p->session);
    if (rc == 0)
        rc = rt__check_id(c, "program", p->program);
    if (rc == 0)
        rc = rt__check_id(c, "dataset", p->dataset);
    if (rc == 0 && p->val_dataset && *p->val_dataset)
        rc = rt__check_id(c, "validation dataset", p->val_dataset);
    if (rc == 0 && p->epochs == 0)
        rc = rt__err(c, RT_EINVAL, "train: epochs must be at least 1");
    if (rc == 0 && p->steps_per_epoch == 0)
        rc = rt__err(c, RT_EINVAL, "train: steps_per_epoch must be at least 1");
    if (rc == 0 && p->steps_per_call == 0)
        rc = rt__err(c, RT_EINVAL, "train: steps_per_call must be at least 1");
    return rc;
}

/* The cancel flag, seen between calls too: inside the loop rt__call_begin
 * leaves it set (c->in_loop). */
static int cancelled(rt_client *c)
{
    return atomic_load(&c->cancel_flag) != 0;
}

int rt_client_train_steps(rt_client *c, const rt_client_train_params *p,
                          rt_client_fit_cb cb, void *user)
{
    if (!c || !p)
        return RT_EINVAL;
    c->errmsg[0] = 0;
    int rc = check_params(c, p);
    if (rc < 0)
        return rc;
    int64_t timeout = c->next_timeout_ms; /* for every call of the run */
    int has_val = p->val_dataset && *p->val_dataset;
    int stopped = 0;
    atomic_store(&c->cancel_flag, 0);
    c->in_loop = 1;
    uint64_t global = 0;
    for (uint32_t e = 1; e <= p->epochs && rc == 0 && !stopped; e++) {
        epoch_acc a;
        memset(&a, 0, sizeof a);
        while (a.done < p->steps_per_epoch && rc == 0 && !stopped) {
            if (cancelled(c)) {
                rc = rt__err(c, RT_ECANCELLED, "train: cancelled by rt_client_cancel");
                break;
            }
            uint64_t left = p->steps_per_epoch - a.done;
            rt_client_steps_params sp = {
                .session = p->session, .program = p->program, .dataset = p->dataset,
                .steps = left < p->steps_per_call ? left : p->steps_per_call};
            rt_client_steps_result r;
            c->next_timeout_ms = timeout;
            rc = rt_client_run_steps(c, &sp, &r);
            if (rc < 0)
                break;
            a.done += sp.steps;
            a.loss += r.mean.loss * (double)r.mean.samples;
            a.acc += r.mean.accuracy * (double)r.mean.samples;
            a.samples += r.mean.samples;
            a.execute_ns += c->last.execute_ns;
            global = r.global_step;
            rt_client_steps_result_free(&r);
            rt_client_fit_event ev;
            memset(&ev, 0, sizeof ev);
            ev.kind = RT_FIT_PROGRESS;
            ev.step = global;
            ev.epoch = e;
            ev.step_in_epoch = a.done;
            ev.steps_per_epoch = p->steps_per_epoch;
            ev.loss = (float)wmean(a.loss, a.samples);
            ev.accuracy = (float)wmean(a.acc, a.samples);
            ev.call = &c->last;
            if (cb && cb(&ev, user))
                stopped = 1;
        }
        if (rc < 0 || stopped)
            break;
        rt_client_fit_event ev;
        memset(&ev, 0, sizeof ev);
        ev.kind = RT_FIT_EPOCH_END;
        ev.epoch = e;
        ev.step = global;
        rt_client_epoch *ep = &ev.epoch_end;
        ep->epoch = e;
        ep->train.loss = wmean(a.loss, a.samples);
        ep->train.accuracy = wmean(a.acc, a.samples);
        ep->train.samples = a.samples;
        ep->val.loss = ep->val.accuracy = NAN;
        ep->steps = global;
        ep->execute_ns = a.execute_ns;
        if (has_val) {
            if (cancelled(c)) {
                rc = rt__err(c, RT_ECANCELLED, "train: cancelled by rt_client_cancel");
                break;
            }
            c->next_timeout_ms = timeout;
            rc = rt_client_evaluate(c, p->session, p->program, p->val_dataset, &ep->val);
            if (rc < 0)
                break;
            ep->has_val = 1;
            ev.call = &c->last;
        }
        if (cb && cb(&ev, user))
            stopped = 1;
    }
    c->in_loop = 0;
    c->next_timeout_ms = INT64_MIN;
    if (rc == 0 && stopped)
        rc = rt__err(c, RT_ECANCELLED, "train: cancelled by the callback");
    if (rc == 0 && cb) {
        rt_client_fit_event ev;
        memset(&ev, 0, sizeof ev);
        ev.kind = RT_FIT_DONE;
        ev.step = global;
        ev.done = 1;
        cb(&ev, user);
    }
    return rc;
}
